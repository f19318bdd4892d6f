"""Bursts: does the recorder keep memory bounded and count every row it drops?

The capture ring is a fixed-size file mapping (``WSPROF_RING_RECORDS`` records of 128 bytes):
what a burst can add to memory is bounded by it plus one drain's transient copies.

Two producers, each for ``--seconds`` (default 10):

1. ``hook``: a real wsprof API-layer hook around a no-op function, called flat out from one
   thread (the fastest a Python caller can produce rows, roughly 0.5-0.8M calls/s here);
2. ``synthetic``: records put straight into the recorder's capture ring at a paced
   1,000,000 rows/s (what no Python training loop reaches, to load the writer).

For each it prints rows produced, rows written to the trace, rows dropped (counted in
``meta.self.dropped_calls``), whether produced == written + dropped, the peak RSS growth of the
process (psutil, sampled every 50 ms) and the writer's flush time per written row. Not a test.

Usage: python scripts/bench_recorder_burst.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import tempfile
import threading
import time

import psutil
import torch

import wsprof
from wsprof.capture import collectives
from wsprof.capture.session import current_recorder


class PeakRss:
    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> float:
        self._stop.set()
        self._t.join()
        return (self.peak - self.base) / 2**20


def run(kind: str, seconds: float) -> None:
    out = tempfile.mkdtemp(prefix="wsprof-burst-")
    path = wsprof.patch(out)
    rec = current_recorder()
    assert path is not None and rec is not None
    t = torch.ones(4)

    def noop(x: object, src: int = 0) -> None:
        return None

    produced = 0
    rss = PeakRss()
    end = time.monotonic() + seconds
    if kind == "hook":
        hook = collectives.extra_hook(noop, "broadcast", "bench.noop")
        while time.monotonic() < end:
            for _ in range(10_000):
                hook(t, 0)
            produced += 10_000
    else:
        word = collectives._hook_word("broadcast", "bench.synthetic", "api")
        put = rec.ring.put
        t0 = time.monotonic()
        while time.monotonic() < end:
            due = int((time.monotonic() - t0) * 1_000_000)
            n = due - produced
            if n <= 0:
                time.sleep(0.0005)
                continue
            for _ in range(n):
                put(word, 0, 1, 0, 0, 1, 16, 0, -1, 0, -1, 0, -1, -1)
            produced += n
    wsprof.unpatch()
    grown = rss.stop()
    # Count rows without loading them (a 60 s run holds tens of millions).
    with contextlib.closing(sqlite3.connect(path)) as db:
        written = int(db.execute("SELECT COALESCE(SUM(n_rows), 0) FROM call_chunks").fetchone()[0])
        own = json.loads(db.execute("SELECT value FROM meta WHERE key='self'").fetchone()[0])
    dropped = int(own["dropped_calls"])
    print(
        f"{kind:<10} {produced / seconds:>12,.0f}/s {produced:>12,} {written:>12,} "
        f"{dropped:>12,} {str(produced == written + dropped):>8} {grown:>9.1f} "
        f"{own['flush_ns_total'] / max(written, 1):>8.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    print(
        f"{'producer':<10} {'rate':>14} {'produced':>12} {'written':>12} {'dropped':>12} "
        f"{'balanced':>8} {'RSS +MiB':>9} {'ns/row':>8}"
    )
    for kind in ("hook", "synthetic"):
        run(kind, args.seconds)


if __name__ == "__main__":
    main()
