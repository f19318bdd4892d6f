"""What wsprof's tensor-sharing hooks (:mod:`wsprof.capture.sharing`) add to a colocated
weight sync's serialize and deserialize, and what a holder search costs.

Per round, a bucket (``--bucket-mb`` MB of float32, a fresh tensor each time, as slime's
``FlattenedTensorBucket`` makes one per update) is pickled with torch's ``ForkingPickler`` (its
storage handed out by the process's sharing strategy, ``--strategy``) and unpickled in the
same process (a shared-memory open), unpatched and patched, interleaved so that machine noise
hits both alike. Prints the median µs of each, the added µs per bucket (median of per-round
differences) and the ratio; then the ledger's own bookkeeping per share (``wsprof.share_hook_us``)
and one holder search (:func:`~wsprof.capture.sharing.holder_path`) over this process's heap.
Not a test: speed checks stay out of the suite.

Usage: python scripts/bench_sharing.py [--rounds 41] [--bucket-mb 4] [--strategy file_descriptor]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing as mp

import wsprof
from wsprof.capture import sharing


def _one(n: int) -> float:
    t = torch.ones(n)
    t0 = time.perf_counter_ns()
    buf = ForkingPickler.dumps({"flattened_tensor": t, "metadata": []})
    back = ForkingPickler.loads(buf)
    took = time.perf_counter_ns() - t0
    del back, buf, t
    return took / 1e3


class Holder:
    def __init__(self) -> None:
        self.long_lived_tensors: list[dict[str, object]] = []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--bucket-mb", type=float, default=4.0)
    ap.add_argument(
        "--strategy", default="file_descriptor", choices=["file_descriptor", "file_system"]
    )
    args = ap.parse_args()
    mp.set_sharing_strategy(args.strategy)
    n = int(args.bucket_mb * 1e6 / 4)
    out = tempfile.mkdtemp(prefix="wsprof-bench-sharing-")
    plain: list[float] = []
    patched: list[float] = []
    wsprof.patch(out, counters=False)  # the session stays; only the sharing hooks toggle
    rec = sharing._STATE.recorder
    led = sharing._STATE.ledger
    assert rec is not None and led is not None
    for _ in range(3):
        _one(n)  # warm up (the first share walks the frames and records its site)
    for _ in range(args.rounds):
        sharing.uninstall()
        plain.append(_one(n))
        sharing.install(rec)
        sharing._STATE.ledger = led  # one ledger across rounds, as in a run
        patched.append(_one(n))
    hook_us = led.hook_ns / 1e3 / max(led.exports.n + led.imports.n, 1)
    wsprof.unpatch()
    diffs = [b - a for a, b in zip(plain, patched)]
    p, q = statistics.median(plain), statistics.median(patched)
    print(f"bucket {args.bucket_mb:g} MB, {args.strategy}, {args.rounds} rounds")
    print(f"  unpatched: {p:9.1f} µs per bucket (serialize + open)")
    print(f"  patched:   {q:9.1f} µs per bucket")
    print(f"  added:     {statistics.median(diffs):9.1f} µs per bucket (ratio {q / p:.3f})")
    print(f"  ledger bookkeeping: {hook_us:.1f} µs per share or open")
    h = Holder()
    for _ in range(64):
        h.long_lived_tensors.append({"flattened_tensor": torch.ones(16), "metadata": []})
    target = h.long_lived_tensors[-1]["flattened_tensor"]
    t0 = time.perf_counter()
    path = sharing.holder_path(target)
    ms = (time.perf_counter() - t0) * 1e3
    print(f"  holder search: {ms:.1f} ms over {len(gc.get_objects()):,} objects -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
