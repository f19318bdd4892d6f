"""``wsprof watch``: does a refresh cost what the new data costs, not what the run's length costs?

Writes a synthetic run while watching it: ``--ranks`` traces (default 64) that gain
``--every`` steps (default 10) between refreshes, up to ``--steps`` (default 1,000), each step
``--calls`` broadcasts per rank (default 100) inside a weight-sync phase, with rollout and
train phases, one rank whose wrapper cost grows every step (as in
``scripts/bench_many_ranks.py``, whose step schedule and clocks it reuses). The traces are
written by the real :class:`~wsprof.trace.writer.TraceWriter` (WAL SQLite), the watcher is the
real :class:`~wsprof.analysis.live.LiveRun` in this process, reading them as ``wsprof watch``
does.

Prints, per window of the run (its first, middle and last tenth), the median refresh time
split into reading (traces and the new steps' rows) and analysing (judging and the rules), the
rows read per refresh, and a refresh with nothing new; then one full ``wsprof analyze`` of the
folder at the middle and at the end, for comparison (what re-analysing everything would cost
at each refresh). The ratios printed are measured in this one run. Not a test.

Usage: python scripts/bench_watch.py [--ranks 64] [--steps 1000] [--calls 100] [--every 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_many_ranks import (
    HOST_MONOTONIC_S,
    PARAM_BYTES,
    ROLLOUT_S,
    RUN_UNIX_NS,
    THREAD,
    TRAIN_S,
    step_schedule,
    step_spans,
)

from wsprof.analysis.live import LiveRun
from wsprof.analysis.run import analyze_path
from wsprof.trace.model import CALL_COLUMNS
from wsprof.trace.writer import TraceWriter


class RankWriter:
    """One synthetic process's trace, written a few steps at a time."""

    def __init__(
        self, folder: str, rank: int, world: int, hosts: int, growth_ns: int, seed: int
    ) -> None:
        h = rank * hosts // world
        self.host = f"node-{chr(ord('a') + h)}"
        self.pid = 40_000 + rank
        self.path = os.path.join(folder, f"{self.host}-{self.pid}.wsprof")
        self.rng = np.random.default_rng(seed)
        self.growth_ns = growth_ns
        mono_to_unix = RUN_UNIX_NS - int(HOST_MONOTONIC_S[h] * 1e9)
        start_mono = int(HOST_MONOTONIC_S[h] * 1e9) - 30 * 10**9 + rank * 7_000_000
        self.t0_mono = RUN_UNIX_NS - mono_to_unix
        self.w = TraceWriter(self.path)
        self.w.set_meta(
            {
                "host": self.host,
                "pid": self.pid,
                "rank": rank,
                "world_size": world,
                "backend": "nccl",
                "source": "patch",
                "wsprof_version": "bench",
                "anchor": {"monotonic_ns": start_mono, "unix_ns": start_mono + mono_to_unix},
            }
        )
        s = self.w.strings
        self.ids = {
            "op": s.intern("broadcast"),
            "api": s.intern("dist.broadcast"),
            "layer": s.intern("api"),
            "dtype": s.intern("bfloat16"),
            "grp": s.intern("0"),
            "phase": s.intern("weight_sync"),
        }
        self.base_ns = 80_000 * (1 + 0.05 * self.rng.standard_normal())

    def write(self, schedule: list[int], k0: int, k1: int, calls: int) -> None:
        """Steps ``k0 .. k1 - 1`` in one flush (as the recorder flushes a few steps' records)."""
        rng, ids = self.rng, self.ids
        mats, spans, counters = [], [], []
        sizes = np.resize(np.array(PARAM_BYTES, dtype=np.int64), calls)
        for k in range(k0, k1):
            step_start = self.t0_mono + schedule[k]
            step_end = self.t0_mono + schedule[k + 1]
            roll = int((ROLLOUT_S + 0.05 * rng.standard_normal()) * 1e9)
            train = int((TRAIN_S + 0.02 * rng.standard_normal()) * 1e9)
            sync0 = step_start + roll + train
            backend = (self.base_ns * (1 + 0.05 * rng.standard_normal(calls))).astype(np.int64)
            dur = backend + 3_000 + self.growth_ns * k
            gap = rng.integers(15_000, 25_000, calls)
            starts = sync0 + np.concatenate([[0], np.cumsum(dur + gap)[:-1]])
            m = np.zeros((calls, len(CALL_COLUMNS)), dtype=np.int64)
            m[:, 0], m[:, 1], m[:, 2], m[:, 3], m[:, 4] = starts, starts + dur, backend, 1, THREAD
            m[:, 5], m[:, 6], m[:, 7] = ids["op"], ids["api"], ids["layer"]
            m[:, 8], m[:, 9], m[:, 10] = sizes, ids["dtype"], ids["grp"]
            m[:, 12], m[:, 13], m[:, 14], m[:, 15] = 0, k, ids["phase"], -1
            sync1 = int(m[-1, 1]) + 1_000
            spans += step_spans(k, step_start, step_end, roll, sync0, sync1)
            counters.append((sync1, "proc.rss_bytes", float(2**33 + rng.integers(0, 2**20))))
            mats.append(m)
        self.w.write({"spans": spans, "counters": counters}, call_matrix=np.concatenate(mats))

    def close(self) -> None:
        self.w.write({"meta": [("closed", '{"how": "bench"}')]})
        self.w.close()


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=100, help="broadcasts per rank per step")
    ap.add_argument("--every", type=int, default=10, help="steps written between refreshes")
    ap.add_argument("--outlier", type=int, default=37)
    ap.add_argument("--keep", help="write the run here and keep it (default: a temp folder)")
    args = ap.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="wsprof-watch-bench-")
    os.makedirs(folder, exist_ok=True)
    growth = 5_000  # ns per call per step on the outlier rank
    schedule = step_schedule(args.steps, args.calls, growth)
    writers = [
        RankWriter(
            folder, r, args.ranks, 2, growth if r == args.outlier % args.ranks else 0, 1000 + r
        )
        for r in range(args.ranks)
    ]
    live = LiveRun(folder)
    rows: list[tuple[int, float, float, int, int]] = []  # (step, read_s, total_s, rows, stale)
    full: dict[int, float] = {}
    write_s = 0.0
    try:
        for k0 in range(0, args.steps, args.every):
            k1 = min(k0 + args.every, args.steps)
            t = time.perf_counter()
            for w in writers:
                w.write(schedule, k0, k1, args.calls)
            write_s += time.perf_counter() - t
            snap = live.refresh()
            stale = max((r.steps - r.sync_judged_steps for r in snap.ranks if r.steps), default=0)
            rows.append((k1, snap.read_s, snap.refresh_s, snap.rows_read, stale))
            if k1 in (args.steps // 2, args.steps):
                t = time.perf_counter()
                a = analyze_path(folder)
                full[k1] = time.perf_counter() - t
                assert a.verdict.status in ("problems", "no_problem", "inconclusive")
        idle = live.refresh()
        last = idle
    finally:
        for w in writers:
            w.close()
        live.close()
    n = len(rows)
    windows = {
        "first tenth": rows[: max(n // 10, 1)],
        "middle tenth": rows[n // 2 - n // 20 : n // 2 + max(n // 20, 1)],
        "last tenth": rows[n - max(n // 10, 1) :],
    }
    print(
        f"{args.ranks} ranks x {args.steps} steps x {args.calls} calls/step "
        f"({args.ranks * args.steps * args.calls:,} calls); a refresh every {args.every} steps "
        f"({args.ranks * args.every * args.calls:,} new calls each); writing took {write_s:.0f} s"
    )
    print(
        f"{'window':<14} {'steps':>11} {'read s':>8} {'analyse s':>10} {'total s':>8} "
        f"{'rows read':>10} {'stalest rank verdict':>21}"
    )
    med: dict[str, float] = {}
    for name, w in windows.items():
        read = _median([r[1] for r in w])
        total = _median([r[2] for r in w])
        med[name] = total
        print(
            f"{name:<14} {w[0][0]:>5}-{w[-1][0]:<5} {read:>8.3f} {total - read:>10.3f} "
            f"{total:>8.3f} {int(_median([r[3] for r in w])):>10,} "
            f"{max(r[4] for r in w):>15} steps"
        )
    print(f"refresh with nothing new at step {args.steps}: {idle.refresh_s:.3f} s")
    print(
        f"last tenth / first tenth, median refresh: {med['last tenth'] / med['first tenth']:.2f}x"
    )
    for k, s in full.items():
        print(f"full `wsprof analyze` of the folder at step {k}: {s:.1f} s")
    if args.steps in full:
        print(
            f"full analyze at step {args.steps} / median watch refresh in the last tenth: "
            f"{full[args.steps] / med['last tenth']:.0f}x"
        )
    print(f"watch's verdict at the end: {last.analysis.verdict.status}; findings: ")
    for f in last.analysis.findings[:3]:
        print(f"  [{f.severity}] {f.title[:110]}")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
