"""Added host time per collective call from wsprof's hooks, against the unpatched call.

Runs ``dist.broadcast`` on torch's fake process group (a no-op backend, so the collective costs
only its Python dispatch) N times unpatched, then patched, interleaved in rounds, and prints the
median per-call time of each and the difference in ns and as a ratio. Not a test: speed checks
stay out of the suite.

Usage: python scripts/bench_hooks.py [--calls 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

import wsprof


def per_call_ns(n: int) -> float:
    t = torch.ones(16)
    bc = dist.broadcast
    t0 = time.perf_counter_ns()
    for _ in range(n):
        bc(t, 0)
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    out = tempfile.mkdtemp(prefix="wsprof-bench-")
    base: list[float] = []
    hooked: list[float] = []
    per_call_ns(2_000)
    for _ in range(args.rounds):
        base.append(per_call_ns(args.calls))
        wsprof.patch(out)
        hooked.append(per_call_ns(args.calls))
        wsprof.unpatch()
    b, h = statistics.median(base), statistics.median(hooked)
    print(f"torch {torch.__version__}, fake process group, {args.rounds} rounds x {args.calls} "
          "dist.broadcast calls")
    print(f"unpatched  {b:10.0f} ns/call")
    print(f"patched    {h:10.0f} ns/call (API + backend + Work.wait layers, recorded to SQLite)")
    print(f"added      {h - b:10.0f} ns/call   ratio {h / b:.3f}")


if __name__ == "__main__":
    main()
