"""Many ranks: how long does ``wsprof analyze`` take on a run folder of many processes?

Generates ``--ranks`` process traces (default 64) of ``--calls`` collective calls each (default
200,000) the way :class:`~wsprof.trace.writer.TraceWriter` stores them, then times
:func:`wsprof.analysis.run.analyze_path` on the folder and prints the wall time, the peak RSS of
this process and whether the ``outlier_rank`` finding named the rank that was made slow. The
trust issue's budget: 64 x 200k calls in at most 60 s on 2 cores.

What the generated run looks like (realistic for an RL post-training job):

- ``--steps`` steps (default 100), each marked like ``wsprof.step()`` / ``wsprof.phase()`` do:
  a ``step`` span, then ``rollout`` (about 2 s), ``train`` (about 1 s) and ``weight_sync``
  phase spans; the weight sync is one ``dist.broadcast`` per parameter (``calls / steps`` per
  step) with a few sizes of bfloat16 payload, 60-120 µs each, per-rank base latency differing by
  a few percent (different NIC paths) and per-step network jitter;
- the ranks are spread over ``--hosts`` fake hosts (default 2). Each host has its own
  ``CLOCK_MONOTONIC`` (different boot times), the processes of a host share it, each process
  has its own clock anchor (``meta['anchor']``: a monotonic reading and a wall-clock reading
  taken at its start), and the second host's wall clock is ``--skew-ms`` ahead (NTP skew);
- the outlier rank (``--outlier``, default 37: on the second host) runs a wrapper around its
  collectives whose cost grows each step (``--growth-us`` per call per step, default 5 µs):
  its weight sync grows from about 0.2 s to 1.2 s per step while every other rank stays flat.

Usage: python scripts/bench_many_ranks.py [--ranks 64] [--calls 200000] [--keep DIR]
       python scripts/bench_many_ranks.py --profile     # cProfile's top functions after
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from wsprof.trace.model import CALL_COLUMNS
from wsprof.trace.writer import TraceWriter

#: Wall-clock time of the run's first step (an arbitrary date), ns.
RUN_UNIX_NS = 1_795_000_000 * 10**9
#: CLOCK_MONOTONIC at the run's first step on each fake host (seconds since that host booted).
HOST_MONOTONIC_S = (5_000.0, 912_345.678, 77_777.0, 123.0)
#: Calls per chunk written at once (the recorder flushes every 0.5 s: a few thousand calls).
CHUNK_CALLS = 20_000
ROLLOUT_S = 2.0
TRAIN_S = 1.0
#: Payload sizes cycled through by the per-parameter broadcasts, bytes.
PARAM_BYTES = (4096, 2**20, 4 * 2**20, 16 * 2**20, 65536)
THREAD = 140_000_000_000_123
#: Every this many calls one is async (``async_op=True``): its completion is a call update.
ASYNC_EVERY = 10


@dataclass(frozen=True)
class RankSpec:
    """What one generated process is: its identity and clock anchor."""

    rank: int
    host: str
    pid: int
    path: str
    #: ``meta['anchor']`` as written, or None when written without one.
    anchor: dict[str, int] | None
    #: Add to this process's monotonic ns to get true wall-clock ns (skew excluded).
    mono_to_unix_ns: int


@dataclass
class RunSpec:
    folder: str
    ranks: list[RankSpec] = field(default_factory=list)
    outliers: tuple[int, ...] = ()
    n_calls: int = 0


def step_schedule(
    steps: int, calls_per_step: int, growth_ns_per_step: int, latency_factor: float = 1.0
) -> list[int]:
    """Run time (ns after the first step) at which every rank starts each step.

    The ranks stay in lockstep, as the collectives of a real job keep them: a step lasts as long
    as its slowest rank needs (rollout, train, the outlier's sync), plus slack; the others wait
    at the end of the step (in the next step's first collective, unmarked time).
    """
    out, t = [], 0
    for k in range(steps):
        out.append(t)
        slowest_sync = calls_per_step * int(130_000 * latency_factor + growth_ns_per_step * k)
        t += int((ROLLOUT_S + TRAIN_S + 0.4) * 1e9) + slowest_sync
    out.append(t)
    return out


def step_spans(
    k: int, step_start: int, step_end: int, roll: int, sync0: int, sync1: int
) -> list[tuple[object, ...]]:
    """The spans ``wsprof.step()`` and ``wsprof.phase()`` write for step ``k``: the step, then
    rollout (``roll`` ns), train (until ``sync0``) and weight sync (``sync0`` to ``sync1``)."""
    return [
        ("step", str(k), step_start, step_end, k, THREAD),
        ("phase", "rollout", step_start, step_start + roll, k, THREAD),
        ("phase", "train", step_start + roll, sync0, k, THREAD),
        ("phase", "weight_sync", sync0, sync1, k, THREAD),
    ]


def write_rank(
    spec: RankSpec,
    world: int,
    schedule: Sequence[int],
    calls_per_step: int,
    growth_ns_per_step: int,
    seed: int,
    latency_factor: float = 1.0,
    hook_ns_per_call: int | None = None,
) -> int:
    """Write one process's trace; returns the number of calls written. ``hook_ns_per_call``:
    the hooks' own cost per call as ``patch()`` measures it (``meta['self']``), ns."""
    rng = np.random.default_rng(seed)
    w = TraceWriter(spec.path)
    meta: dict[str, object] = {
        "host": spec.host,
        "pid": spec.pid,
        "rank": spec.rank,
        "world_size": world,
        "backend": "nccl",
        "source": "patch",
        "wsprof_version": "bench",
    }
    if spec.anchor is not None:
        meta["anchor"] = spec.anchor
    if hook_ns_per_call is not None:
        meta["self"] = {"hook_ns_per_call": hook_ns_per_call}
    w.set_meta(meta)
    s = w.strings
    op, api, layer = s.intern("broadcast"), s.intern("dist.broadcast"), s.intern("api")
    dtype, grp, phase = s.intern("bfloat16"), s.intern("0"), s.intern("weight_sync")
    t0_mono = RUN_UNIX_NS - spec.mono_to_unix_ns
    # This rank's NIC path: a few percent from the others (a slow one: latency_factor).
    base_ns = 80_000 * latency_factor * (1 + 0.05 * rng.standard_normal())
    sizes = np.resize(np.array(PARAM_BYTES, dtype=np.int64), calls_per_step)
    is_async = (np.arange(calls_per_step) % ASYNC_EVERY == 0).astype(np.int64)
    pending: list[np.ndarray] = []
    spans: list[tuple[object, ...]] = []
    counters: list[tuple[object, ...]] = []
    updates: list[tuple[object, ...]] = []
    n_pending = n_total = 0
    steps = len(schedule) - 1
    starts_k = [t0_mono + t + int(rng.integers(0, 2_000_000)) for t in schedule]
    for k in range(steps):
        step_start, step_end = starts_k[k], starts_k[k + 1]  # step() marks both
        roll = int((ROLLOUT_S + 0.05 * rng.standard_normal()) * 1e9)
        train = int((TRAIN_S + 0.02 * rng.standard_normal()) * 1e9)
        sync0 = step_start + roll + train
        jitter = 1 + 0.03 * rng.standard_normal()
        backend = (base_ns * jitter * (1 + 0.05 * rng.standard_normal(calls_per_step))).astype(
            np.int64
        )
        wrapper = np.full(calls_per_step, 3_000 + growth_ns_per_step * k, dtype=np.int64)
        dur = backend + wrapper
        gap = rng.integers(15_000, 25_000, calls_per_step)
        starts = sync0 + np.concatenate([[0], np.cumsum(dur + gap)[:-1]])
        m = np.empty((calls_per_step, len(CALL_COLUMNS)), dtype=np.int64)
        m[:, 0] = starts
        m[:, 1] = starts + dur
        m[:, 2] = backend
        m[:, 3] = 1
        m[:, 4] = THREAD
        m[:, 5], m[:, 6], m[:, 7] = op, api, layer
        m[:, 8] = sizes
        m[:, 9], m[:, 10] = dtype, grp
        m[:, 11] = is_async
        m[:, 12] = 0
        m[:, 13] = k
        m[:, 14] = phase
        m[:, 15] = -1
        # Async calls: completion observed at wait(), written later as call_updates rows.
        a = np.flatnonzero(is_async)
        updates += zip(
            starts[a].tolist(),
            [THREAD] * len(a),
            (starts[a] + dur[a] + 2_000).tolist(),
            [-1] * len(a),
        )
        sync1 = int(m[-1, 1]) + 1_000
        spans += step_spans(k, step_start, step_end, roll, sync0, sync1)
        counters.append((sync1, "rss_bytes", float(2**33 + rng.integers(0, 2**20))))
        pending.append(m)
        n_pending += calls_per_step
        if n_pending >= CHUNK_CALLS or k == steps - 1:
            mat = np.concatenate(pending)
            w.write(
                {"spans": spans, "counters": counters, "call_updates": updates}, call_matrix=mat
            )
            n_total += len(mat)
            pending, spans, counters, updates, n_pending = [], [], [], [], 0
    w.write(
        {
            "sites": [(0, "trainer/sync.py", 88, "push_weights")],
            "events": [(t0_mono, "patched", "bench")],
        }
    )
    w.close()
    return n_total


def generate_run(
    folder: str,
    n_ranks: int = 64,
    calls_per_rank: int = 200_000,
    steps: int = 100,
    hosts: int = 2,
    outliers: Sequence[int] = (37,),
    growth_us: float = 5.0,
    skew_ms: float = 3.0,
    no_anchor: Sequence[int] = (),
    seed: int = 0,
    slow: Mapping[int, float] | None = None,
    hook_ns_per_call: int | None = None,
) -> RunSpec:
    """Write ``n_ranks`` traces into ``folder`` (see the module docstring).

    Args:
        folder: run folder to fill (created).
        n_ranks: processes; rank r is on host ``r * hosts // n_ranks``.
        calls_per_rank: calls in each trace (``steps`` steps of ``calls_per_rank // steps``).
        steps: training steps.
        hosts: fake hosts, each with its own monotonic clock; at most 4.
        outliers: ranks whose per-call wrapper cost grows by ``growth_us`` µs each step.
        growth_us: growth per call per step on the outlier ranks, µs.
        skew_ms: how far each further host's wall clock is ahead of the first's, ms.
        no_anchor: ranks written without ``meta['anchor']``.
        seed: random seed.
        slow: rank -> factor on its per-call backend latency (a constantly slower rank).
        hook_ns_per_call: the hooks' own cost per call each trace records, ns (None: none).

    Returns:
        Where every trace is and how its clock maps to wall-clock time.
    """
    os.makedirs(folder, exist_ok=True)
    calls_per_step = max(1, calls_per_rank // steps)
    run = RunSpec(folder, outliers=tuple(outliers))
    schedule = step_schedule(
        steps,
        calls_per_step,
        int(growth_us * 1e3) if outliers else 0,
        max([1.0, *(slow or {}).values()]),
    )
    for r in range(n_ranks):
        h = r * hosts // n_ranks
        host = f"node-{chr(ord('a') + h)}"
        pid = 40_000 + r
        mono_to_unix = RUN_UNIX_NS - int(HOST_MONOTONIC_S[h] * 1e9)
        skew_ns = int(h * skew_ms * 1e6)
        # The anchor is read at process start, some seconds before the first step.
        start_mono = int(HOST_MONOTONIC_S[h] * 1e9) - 30 * 10**9 + r * 7_000_000
        anchor = (
            None
            if r in no_anchor
            else {"monotonic_ns": start_mono, "unix_ns": start_mono + mono_to_unix + skew_ns}
        )
        spec = RankSpec(
            r, host, pid, os.path.join(folder, f"{host}-{pid}.wsprof"), anchor, mono_to_unix
        )
        growth = int(growth_us * 1e3) if r in outliers else 0
        run.n_calls += write_rank(
            spec,
            n_ranks,
            schedule,
            calls_per_step,
            growth,
            seed * 1000 + r,
            (slow or {}).get(r, 1.0),
            hook_ns_per_call,
        )
        run.ranks.append(spec)
    return run


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (``ru_maxrss`` is KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--calls", type=int, default=200_000, help="calls per process")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--outlier", type=int, default=37)
    ap.add_argument("--growth-us", type=float, default=5.0)
    ap.add_argument("--skew-ms", type=float, default=3.0)
    ap.add_argument("--keep", help="write the run here and keep it (default: a temp folder)")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top 25 after")
    args = ap.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="wsprof-ranks-")
    try:
        t0 = time.perf_counter()
        run = generate_run(
            folder,
            args.ranks,
            args.calls,
            args.steps,
            args.hosts,
            (args.outlier,),
            args.growth_us,
            args.skew_ms,
        )
        gen_s = time.perf_counter() - t0
        size = sum(os.path.getsize(r.path) for r in run.ranks)
        print(
            f"generated {len(run.ranks)} traces x {args.calls:,} calls = {run.n_calls:,} "
            f"calls on {args.hosts} hosts in {gen_s:.1f} s ({size / 2**20:.0f} MiB on disk)"
        )
        rss0 = peak_rss_mib()

        from wsprof.analysis.run import analyze_path

        prof = None
        if args.profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        t1 = time.perf_counter()
        cpu1 = time.process_time()
        analysis = analyze_path(folder)
        wall_s = time.perf_counter() - t1
        cpu_s = time.process_time() - cpu1
        if prof is not None:
            import pstats

            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        peak = peak_rss_mib()
        found = [f for f in analysis.findings if f.kind == "outlier_rank"]
        named = [f for f in found if f"rank {args.outlier} " in f.title + " "]
        print(
            f"analyze_path: {wall_s:.1f} s wall, {cpu_s:.1f} s CPU on {os.cpu_count()} cores "
            f"({wall_s / run.n_calls * 1e9:.0f} ns per call); budget 60 s: "
            f"{'ok' if wall_s <= 60 else 'MISSED'}"
        )
        print(f"peak RSS {peak:.0f} MiB (before analysis {rss0:.0f} MiB)")
        print(
            f"ranks compared: {len(analysis.ranks)}; outlier_rank findings: {len(found)}; "
            f"rank {args.outlier} named: {'yes' if named else 'NO'}"
        )
        for f in found:
            print(f"  [{f.severity}] {f.title}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
