"""Added host time per collective call from wsprof's hooks, against the unpatched call and
against the peers.

Runs ``dist.broadcast`` on torch's fake process group (a no-op backend, so the collective costs
only its Python dispatch) unpatched, under the floor (a minimal Python wrapper: two clock
reads and one tuple appended), under ``torch.profiler`` (CPU activity), and with each wsprof
hook layer setting (``api``: names only; ``both``: the default, names plus ProcessGroup methods
and ``Work.wait``), interleaved in rounds so that machine noise hits every setting alike.
wsprof records through its compiled path where it was built (``WSPROF_NATIVE=0``: the
pure-Python path; the header says which). Each round is long enough for the
recorder's writer thread to flush during it, so its cost (GIL time) is included. Prints the
median ns per call of each setting, the added ns per call (median of the per-round
differences to unpatched, with their interquartile range) and the ratio, and the
writer's own CPU per recorded call. Not a test: speed checks stay out of the suite.

Usage: python scripts/bench_hooks.py [--calls 50000] [--rounds 21] [--flush-s 0.2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives
from torch.profiler import ProfilerActivity
from torch.testing._internal.distributed.fake_pg import FakeStore

import wsprof
from wsprof.capture.session import current_recorder

MODES = ("none", "floor", "torch.profiler", "api", "both")


def per_call_ns(n: int) -> float:
    t = torch.ones(16)
    bc = dist.broadcast
    t0 = time.perf_counter_ns()
    for _ in range(n):
        bc(t, 0)
    return (time.perf_counter_ns() - t0) / n


def per_functional_call_ns(n: int) -> float:
    """A functional collective and its wait, as DTensor and FSDP2 issue them: the op through
    ``torch.ops._c10d_functional`` (what wsprof's functional layer hooks) and ``wait_tensor``."""
    t = torch.ones(16)
    ops = torch.ops._c10d_functional
    ar, wait = ops.all_reduce, ops.wait_tensor
    name = dist.group.WORLD.group_name
    t0 = time.perf_counter_ns()
    for _ in range(n):
        wait(ar(t, "sum", name))
    return (time.perf_counter_ns() - t0) / n


def _floor(orig: Any) -> Any:
    """The cheapest useful hook: two clock reads and one tuple appended per call."""
    rows: list[tuple[int, int]] = []
    now = time.monotonic_ns

    def hook(*args: Any, **kwargs: Any) -> Any:
        t0 = now()
        ret = orig(*args, **kwargs)
        rows.append((t0, now()))
        return ret

    return hook


#: What is timed: (label, function), each in every mode of every round.
CALLS = (
    ("dist.broadcast", per_call_ns),
    ("functional all_reduce + wait_tensor", per_functional_call_ns),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument(
        "--flush-s",
        type=float,
        default=0.2,
        help="writer interval; a large value keeps the writer out of the timing",
    )
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    out = tempfile.mkdtemp(prefix="wsprof-bench-")
    times: dict[tuple[str, str], list[float]] = {(c, m): [] for c, _ in CALLS for m in MODES}
    flush_ns = 0
    flush_cpu_ns = 0
    recorded = 0
    for _, fn in CALLS:
        fn(5_000)
    orig = dist.broadcast
    for _ in range(args.rounds):
        for mode in MODES:
            if mode in ("api", "both"):
                wsprof.patch(out, layers=mode, flush_interval_s=args.flush_s)
            for label, fn in CALLS:
                if mode == "floor":
                    dist.broadcast = _floor(orig)
                    times[(label, mode)].append(fn(args.calls))
                    dist.broadcast = orig
                elif mode == "torch.profiler":
                    with torch.profiler.profile(activities=[ProfilerActivity.CPU]):
                        times[(label, mode)].append(fn(args.calls))
                else:
                    times[(label, mode)].append(fn(args.calls))
            if mode in ("api", "both"):
                rec = current_recorder()
                native = bool(rec.ring.native)
                wsprof.unpatch()
                flush_ns += rec.flush_ns_total
                flush_cpu_ns += rec.flush_cpu_ns_total
                recorded += args.calls * len(CALLS)
    path = "compiled" if native else "pure-Python"
    print(
        f"torch {torch.__version__}, fake process group, {args.rounds} rounds x {args.calls} "
        f"calls per setting, writer thread flushing every {args.flush_s:g} s, wsprof's "
        f"{path} recording path"
    )
    print(
        "floor: a Python wrapper with two clock reads and one tuple appended (dist.broadcast "
        "only; the functional rows show it as unpatched)"
    )
    print("added = median over rounds of (setting - unpatched in the same round); IQR in brackets")
    for label, _ in CALLS:
        print(f"\n{label}")
        print(f"{'setting':<16}{'ns/call':>10}{'added ns':>10}{'IQR':>16}{'ratio':>8}")
        base = times[(label, "none")]
        for m in MODES:
            diffs = sorted(h - b for h, b in zip(times[(label, m)], base))
            added = statistics.median(diffs)
            q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [added, added, added]
            iqr = f"[{q[0]:.0f}, {q[2]:.0f}]"
            ratio = statistics.median(h / b for h, b in zip(times[(label, m)], base))
            med = statistics.median(times[(label, m)])
            print(f"{m:<16}{med:>10.0f}{added:>10.0f}{iqr:>16}{ratio:>8.3f}")
        added_of = {
            m: statistics.median(h - b for h, b in zip(times[(label, m)], base)) for m in MODES
        }
        prof = added_of["torch.profiler"]
        print(
            f"wsprof both / torch.profiler added: {added_of['both'] / prof:.2f}"
            if prof > 0
            else "torch.profiler added nothing measurable"
        )
    print(
        f"writer thread: {flush_cpu_ns / max(recorded, 1):.0f} ns of CPU "
        f"({flush_ns / max(recorded, 1):.0f} ns wall, GIL waits included) per recorded call "
        "(off the calling thread; included above only where it held the GIL)"
    )


if __name__ == "__main__":
    main()
