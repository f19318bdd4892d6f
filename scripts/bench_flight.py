"""What one read of c10d's Flight Recorder (:class:`wsprof.capture.flight.FlightReader`) costs
on a step of 1,000 collectives, and its parts.

In one process with a 1-rank gloo group on 127.0.0.1, patched (``wsprof.patch`` before
``init_process_group``, counters off so that no sampler thread reads the recorder behind the
bench's back), runs ``--steps`` steps of ``--calls`` ``dist.all_reduce`` of a 16-float tensor,
``wsprof.step()`` at the top of each. After each step it drains the recorder
(``rec.flush()``, timed apart) and times one ``rec.flight.read(final=True)``: the whole dump
(``_dump_fr_trace``, no stack traces), its parse (:func:`wsprof.trace.flight.loads`) and the
reader's deciding of the new entries; wall time and the calling thread's CPU time. The
sampler reads at most once per step start unless c10d counted collectives the hooks did not
(``due()``: printed, so a step that would have been read is visible; here the hooks see every
call, so the reads timed are the cost of a read when one happens, not what this job pays).
Then, with the ring full, ``--repeats`` raw dumps and parses alone. Each ring size of
``--buffer-sizes`` runs in its own process (``TORCH_FR_BUFFER_SIZE`` is read once, when c10d
first records; the first size in this process, the others in a re-exec of this script).
Prints medians over steps (repeats): ms per read, the step's ms, the share of the step a read
takes, and the parts. Not a test: speed checks stay out of the suite.

Usage: python scripts/bench_flight.py [--steps 5] [--calls 1000] [--repeats 5]
       [--buffer-sizes 2000,1000,4000] [--hooks-args "--calls 10000 --rounds 5"] [--no-hooks]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

#: The line prefix a re-exec of this script prints its results after.
RESULT = "BENCH_FLIGHT_RESULT "
#: bench_hooks.py's run is given at most this long.
HOOKS_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed(fn: Any) -> tuple[Any, float, float]:
    """fn()'s result, wall ms and this thread's CPU ms."""
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    out = fn()
    t1 = time.perf_counter_ns()
    c1 = time.thread_time_ns()
    return out, (t1 - t0) / 1e6, (c1 - c0) / 1e6


def measure(buffer_size: int, steps: int, calls: int, repeats: int) -> dict[str, Any]:
    """Everything for one ring size, in this process (the env must not be read yet)."""
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(buffer_size)
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace

    import wsprof
    from wsprof.capture.session import current_recorder
    from wsprof.trace.flight import loads

    warnings.simplefilter("ignore")
    out = tempfile.mkdtemp(prefix="wsprof-bench-flight-")
    wsprof.patch(out, counters=False)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    rec = current_recorder()
    reader = rec.flight
    if reader is None:
        raise SystemExit("the session has no Flight Recorder reader (rec.flight is None)")
    t = torch.ones(16)
    ar = dist.all_reduce

    def one_step() -> None:
        for _ in range(calls):
            ar(t)

    # warm-up step: everything before it read and decided
    wsprof.step()
    one_step()
    rec.flush()
    reader.read(final=True)

    rows: list[dict[str, Any]] = []
    for _ in range(steps):
        wsprof.step()
        _, step_ms, _ = _timed(one_step)
        _, flush_ms, _ = _timed(rec.flush)
        due = reader.due()
        before = reader.stats()
        _, read_ms, read_cpu_ms = _timed(lambda: reader.read(final=True))
        after = reader.stats()
        rows.append(
            {
                "step_ms": step_ms,
                "flush_ms": flush_ms,
                "read_ms": read_ms,
                "read_cpu_ms": read_cpu_ms,
                "due": due,
                **{
                    k: after[k] - before[k]
                    for k in ("entries", "matched", "recorded", "lost", "waiting")
                },
            }
        )

    # the ring full: raw dump and parse alone
    issued = calls * (steps + 1)
    while issued < buffer_size:
        one_step()
        issued += calls
    dump = lambda: _dump_fr_trace(  # noqa: E731
        includeCollectives=True, includeStackTraces=False, onlyActive=False
    )
    data = dump()
    n_entries = len(loads(data).entries)
    dumps = [_timed(dump)[1:] for _ in range(repeats)]
    parses = [_timed(lambda: loads(data))[1:] for _ in range(repeats)]
    stats = reader.stats()
    wsprof.unpatch()
    dist.destroy_process_group()
    med = statistics.median
    return {
        "buffer_size": buffer_size,
        "torch": torch.__version__,
        "steps": steps,
        "calls": calls,
        "step_ms": med(r["step_ms"] for r in rows),
        "flush_ms": med(r["flush_ms"] for r in rows),
        "read_ms": med(r["read_ms"] for r in rows),
        "read_ms_max": max(r["read_ms"] for r in rows),
        "read_cpu_ms": med(r["read_cpu_ms"] for r in rows),
        "share": med(r["read_ms"] / r["step_ms"] for r in rows),
        "due_steps": sum(r["due"] for r in rows),
        "entries": med(r["entries"] for r in rows),
        "matched": sum(r["matched"] for r in rows),
        "recorded": sum(r["recorded"] for r in rows),
        "lost": sum(r["lost"] for r in rows),
        "waiting": rows[-1]["waiting"],
        "ring_entries": n_entries,
        "dump_bytes": len(data),
        "dump_ms": med(d[0] for d in dumps),
        "dump_cpu_ms": med(d[1] for d in dumps),
        "loads_ms": med(p[0] for p in parses),
        "loads_cpu_ms": med(p[1] for p in parses),
        "reader": stats,
    }


def _child(buffer_size: int, args: argparse.Namespace) -> dict[str, Any]:
    """measure() for one ring size in a re-exec of this script."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--buffer-sizes",
        str(buffer_size),
        "--steps",
        str(args.steps),
        "--calls",
        str(args.calls),
        "--repeats",
        str(args.repeats),
    ]
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE=str(buffer_size))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])  # type: ignore[no-any-return]
    raise SystemExit(
        f"ring {buffer_size}: the re-exec failed (rc {done.returncode}):\n{done.stderr[-2000:]}"
    )


def _print(results: list[dict[str, Any]]) -> None:
    r0 = results[0]
    print(
        f"torch {r0['torch']}, 1-rank gloo group on 127.0.0.1, patched (counters off), "
        f"{r0['steps']} steps x {r0['calls']} dist.all_reduce of 16 floats; one "
        "reader.read(final=True) after each step's drain; medians over steps"
    )
    print("\nper step: one read of the whole ring after a step of 1,000 collectives\n")
    print(
        "| ring entries | step ms | flush ms | read ms (wall) | read ms max | read ms (CPU) "
        "| read / step | due | new entries/read | matched | unseen | lost |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['ring_entries']:,} | {r['step_ms']:.1f} | {r['flush_ms']:.2f} "
            f"| {r['read_ms']:.1f} | {r['read_ms_max']:.1f} | {r['read_cpu_ms']:.1f} "
            f"| {100 * r['share']:.1f}% | {r['due_steps']}/{r['steps']} "
            f"| {r['entries']:,.0f} | {r['matched']:,} | {r['recorded']:,} | {r['lost']:,} |"
        )
    print("\nthe parts, ring full (medians of repeats)\n")
    print(
        "| ring entries | dump KB | dump ms (wall) | dump ms (CPU) | loads ms (wall) "
        "| loads ms (CPU) | decide ms (CPU: read - dump - loads) "
        "| read ms (CPU) per 1,000 entries |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        decide = r["read_cpu_ms"] - r["dump_cpu_ms"] - r["loads_cpu_ms"]
        per_k = r["read_cpu_ms"] / max(r["ring_entries"], 1) * 1000
        print(
            f"| {r['ring_entries']:,} | {r['dump_bytes'] / 1024:,.0f} | {r['dump_ms']:.1f} "
            f"| {r['dump_cpu_ms']:.1f} | {r['loads_ms']:.1f} | {r['loads_cpu_ms']:.1f} "
            f"| {decide:.1f} | {per_k:.1f} |"
        )
    base = next((r for r in results if r["ring_entries"] == 2000), r0)
    if len(results) > 1:
        print(f"\nratios to the {base['ring_entries']:,}-entry ring (read ms, dump ms, loads ms):")
        for r in results:
            if r is base:
                continue
            print(
                f"  {r['ring_entries']:,}: read {r['read_ms'] / base['read_ms']:.2f}x, "
                f"dump {r['dump_ms'] / base['dump_ms']:.2f}x, "
                f"loads {r['loads_ms'] / base['loads_ms']:.2f}x"
            )
    print("\nreader.stats() at the end of each run:")
    for r in results:
        print(f"  {r['ring_entries']:,}: {r['reader']}")


def _hooks(extra: str) -> None:
    """scripts/bench_hooks.py once, its output printed unchanged."""
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "bench_hooks.py")]
    cmd += shlex.split(extra)
    print(f"\n$ {shlex.join(cmd)}")
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=HOOKS_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        print(f"skipped: bench_hooks.py ran past {HOOKS_TIMEOUT_S} s")
        return
    print(done.stdout, end="")
    if done.returncode:
        print(f"bench_hooks.py exited {done.returncode}:\n{done.stderr[-2000:]}")
    print(f"(bench_hooks.py took {time.monotonic() - t0:.0f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1000, help="collectives per step")
    ap.add_argument("--repeats", type=int, default=5, help="raw dumps and parses timed")
    ap.add_argument(
        "--buffer-sizes",
        default="2000,1000,4000",
        help="TORCH_FR_BUFFER_SIZE values; the first in this process",
    )
    ap.add_argument("--hooks-args", default="--calls 10000 --rounds 5")
    ap.add_argument("--no-hooks", action="store_true", help="do not run bench_hooks.py")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.buffer_sizes.split(",") if s.strip()]
    if args.child:
        r = measure(sizes[0], args.steps, args.calls, args.repeats)
        print(RESULT + json.dumps(r), flush=True)
        return 0
    results = [measure(sizes[0], args.steps, args.calls, args.repeats)]
    results += [_child(b, args) for b in sizes[1:]]
    _print(results)
    if not args.no_hooks:
        _hooks(args.hooks_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
