"""What the counter probes cost, and whether the budget holds them to it. Not a test.

1. Each probe's cost (CPU time of the calling thread, median of repeated runs): the process
   probe (psutil + gc), the growing-types probe at a small and a large heap, and the CUDA
   allocator probe (``n/a`` without CUDA).
2. The sampler as ``wsprof.patch()`` sets it up (default budget 0.5 % of wall time), for
   ``--seconds`` with a step boundary every 100 ms and a heap of ``--objects`` extra objects
   (so the growing-types probe is expensive): the share of wall time spent probing, and each
   probe's runs and skipped runs.
3. A CPU-bound training stand-in timed with and without the sampler: the ratio.

Usage: python scripts/bench_probes.py [--seconds 30] [--objects 2000000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

import psutil

from wsprof.capture import counters
from wsprof.capture.allocator import cuda_in_use, read_allocator
from wsprof.capture.markers import STATE
from wsprof.capture.process_stats import GrowingTypes, gc_reading, process_reading
from wsprof.capture.recorder import Recorder


def cost_us(fn: object, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.thread_time_ns()
        fn()  # type: ignore[operator]
        samples.append(time.thread_time_ns() - t0)
    return statistics.median(samples) / 1e3


def work(seconds: float) -> int:
    """A CPU-bound stand-in for a training loop; returns iterations done in ``seconds``."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        sum(range(2000))
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--objects", type=int, default=2_000_000)
    args = ap.parse_args()
    me = psutil.Process()
    me.cpu_percent(None)
    print("1. probe cost (thread CPU, median)")
    proc_us = cost_us(lambda: process_reading(me) + gc_reading(), 50)
    print(f"   process (psutil + gc):        {proc_us:9.1f} µs")
    types = GrowingTypes()
    types()
    print(f"   growing types, small heap:    {cost_us(types, 5):9.1f} µs")
    heap = [[i] for i in range(args.objects)]
    print(f"   growing types, +{args.objects:,} objects: {cost_us(types, 3):9.1f} µs")
    print(
        "   CUDA allocator:               "
        + (f"{cost_us(read_allocator, 200):9.1f} µs" if cuda_in_use() else "      n/a (no CUDA)")
    )

    rec = Recorder(tempfile.mkdtemp(prefix="wsprof-probes-"), flush_interval_s=0.5)
    rec.sampler = counters.install(rec, lambda: STATE.boundaries, lambda: STATE.steps_started)
    stop = threading.Event()

    def steps() -> None:
        while not stop.wait(0.1):
            STATE.boundaries += 1
            STATE.steps_started += 1

    ticker = threading.Thread(target=steps, daemon=True)
    ticker.start()
    with_sampler = work(args.seconds)
    stop.set()
    ticker.join()
    stats = rec.sampler.stats()
    rec.close()
    print(
        f"2. sampler, default budget {stats['budget_fraction']:.1%}, {args.seconds:.0f} s, "
        f"a step boundary every 100 ms"
    )
    print(f"   probe time: {stats['spent_ns'] / 1e6:.1f} ms = {stats['share']:.3%} of wall time")
    for name, p in stats["by_probe"].items():
        mean = f"{p['mean_ns'] / 1e3:.0f} µs" if p["mean_ns"] is not None else "-"
        print(f"   {name:10} runs {p['runs']:6}  skipped {p['skipped']:6}  mean {mean:>10}")
    without = work(args.seconds)
    print(
        f"3. training stand-in: {with_sampler / args.seconds:,.0f} it/s with the sampler, "
        f"{without / args.seconds:,.0f} it/s without: ratio {without / max(with_sampler, 1):.4f}"
    )
    del heap


if __name__ == "__main__":
    main()
