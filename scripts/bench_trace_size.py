"""How big does a trace get? Writes a long synthetic run through the real recorder and writer.

``--steps`` steps of ``--calls`` collective calls each (default 100 x 50,000: the trust issue's
size budget is 500 MB for that), with realistic variety: timestamps advancing 10-40 us per call,
durations and backend times drawn per call, a few hundred parameter sizes cycling, three
caller sites, one process group, a phase. Prints the file size, bytes per call, and the time the
writer spent, with the default retention (full detail for the first and last 20 steps; see
``wsprof.trace.retention``) or with ``--keep-steps 0`` (every call kept). Not a test.

Usage: python scripts/bench_trace_size.py [--steps 100] [--calls 50000] [--keep-steps 20]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from wsprof.capture.recorder import Recorder
from wsprof.trace import ring
from wsprof.trace.reader import read_trace
from wsprof.trace.retention import DEFAULT_KEEP_STEPS, Retention


def hook_words(rec: Recorder, names: list[tuple[str, str]]) -> list[int]:
    """Register API-layer hooks ``(op, api)`` as ids 0, 1, ... and return each one's record
    word 1 (kind and hook id), as the hooks of :mod:`wsprof.capture.collectives` do."""
    words = []
    for i, (op, api) in enumerate(names):
        rec.register_hook(i, op, api, "api")
        words.append(ring.CALL | (i << 8))
    return words


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--calls", type=int, default=50_000)
    ap.add_argument("--keep-steps", type=int, default=DEFAULT_KEEP_STEPS)
    args = ap.parse_args()
    rng = random.Random(0)
    rec = Recorder(
        tempfile.mkdtemp(prefix="wsprof-size-"),
        flush_interval_s=3600,
        ring_records=args.calls + 1,  # one step's records fit: drained after each step
        retention=Retention(keep_steps=args.keep_steps),
    )
    hooks = hook_words(
        rec,
        [
            ("broadcast", "dist.broadcast"),
            ("all_gather", "dist.all_gather"),
            ("all_gather_into_tensor", "dist.all_gather_into_tensor"),
        ],
    )
    dt = rec.strings.intern("bfloat16")
    grp = rec.strings.intern("0")
    phase = rec.strings.intern("weight_sync")
    sizes = [rng.choice([4096, 8192, 2**20, 4 * 2**20, 16 * 2**20]) for _ in range(300)]
    t = time.monotonic_ns()
    ident = 140_000_000_000_123
    put = rec.ring.put
    t0 = time.monotonic()
    for step in range(args.steps):
        for i in range(args.calls):
            dur = rng.randint(20_000, 400_000)
            backend = dur - rng.randint(1_000, 15_000)
            # The call record as the hooks put it (collectives._record_slow): word 1, then
            # t0, t1, backend_ns, n_backend, thread, bytes, dtype, grp, is_async, site, step,
            # phase, error.
            put(
                hooks[i % 97 == 0],
                t,
                t + dur,
                backend,
                2,
                ident,
                sizes[i % 300],
                dt,
                grp,
                0,
                i % 3,
                step,
                phase,
                -1,
            )
            t += dur + rng.randint(10_000, 40_000)
        rec.flush()
    rec.close()
    assert rec.dropped_calls == 0 and rec.written() == args.steps * args.calls, "calls dropped"
    size = os.path.getsize(rec.path)
    n = args.steps * args.calls
    print(f"{args.steps} steps x {args.calls:,} calls = {n:,} calls, keep_steps={args.keep_steps}")
    print(
        f"trace size {size / 2**20:.1f} MiB, {size / n:.1f} bytes per call "
        f"(writer {rec.flush_ns_total / 1e9:.1f} s, {rec.flush_ns_total / n:.0f} ns per call; "
        f"total {time.monotonic() - t0:.1f} s with generation)"
    )
    t1 = time.monotonic()
    trace = read_trace(rec.path)
    print(
        f"read back {len(trace.calls):,} calls in detail in {time.monotonic() - t1:.1f} s; "
        f"retention {trace.meta.get('retention')}"
    )
    assert trace.totals is not None and int(trace.totals.n.sum()) == n, "totals lost calls"


if __name__ == "__main__":
    main()
