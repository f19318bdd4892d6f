"""Time and peak memory of ``wsprof analyze`` on long per-step CSVs (1k, 10k, 40k, 100k steps).

Each CSV is realistic for a long RL run: ``step``, ``step_s``, ``weight_sync_s`` growing
linearly (a leak), ``rollout_s`` flat and ``reserved_gib`` flat, each with 5% multiplicative
noise (seeded). Each size is analysed by ``wsprof analyze --format json`` in a fresh child
process (``python -c`` calling :func:`wsprof.cli.main`), which reports its own peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``, KiB on Linux) and wall time. A child past
``--timeout`` seconds is killed; its address space is capped at ``--max-mib`` (RLIMIT_AS, so
that a quadratic allocation ends in a MemoryError instead of taking a shared machine's memory);
a MemoryError or crash is shown as its last stderr line.

The issue's budget: a 40,000-step CSV in under 30 s and 500 MB.

Usage: python scripts/bench_long_series.py [--steps 1000,10000,40000,100000] [--timeout 120]
[--max-mib 3072]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

#: Seed of the noise (the same CSVs before and after a change).
SEED = 37
#: Multiplicative noise SD of every column.
NOISE = 0.05

_CHILD = """
import json, resource, sys, time
t0 = time.monotonic()
from wsprof.cli import main
rc = main(["analyze", sys.argv[1], "--format", "json"])
dt = time.monotonic() - t0
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sys.stderr.write("BENCH " + json.dumps({"rc": rc, "s": dt, "peak_mib": peak_kib / 1024}) + "\\n")
"""


def write_csv(path: str, steps: int, seed: int = SEED) -> None:
    """A per-step CSV of ``steps`` rows: step, step_s, weight_sync_s (growing), rollout_s,
    reserved_gib (flat), 5% noise each.

    Args:
        path: where to write it.
        steps: number of rows.
        seed: noise seed.
    """
    rng = np.random.default_rng(seed)
    u = np.arange(steps, dtype=np.float64) / max(steps - 1, 1)

    def noisy(f: np.ndarray) -> np.ndarray:
        return np.asarray(f * (1.0 + NOISE * rng.standard_normal(steps)))

    sync = noisy(10.0 + 90.0 * u)  # 10 s -> 100 s: weight sync grows
    rollout = noisy(np.full(steps, 60.0))
    step_s = rollout + sync + noisy(np.full(steps, 30.0))
    reserved = noisy(np.full(steps, 40.0))
    with open(path, "w", encoding="utf-8") as f:
        f.write("step,step_s,weight_sync_s,rollout_s,reserved_gib\n")
        for i in range(steps):
            f.write(f"{i},{step_s[i]:.4f},{sync[i]:.4f},{rollout[i]:.4f},{reserved[i]:.4f}\n")


def run_one(path: str, timeout: float, max_mib: int) -> dict[str, object]:
    """Analyse ``path`` in a child; its rc, time (s), peak RSS (MiB), or why it failed."""

    def cap() -> None:
        limit = max_mib * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    t0 = time.monotonic()
    try:
        p = subprocess.run(
            [sys.executable, "-c", _CHILD, path],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            preexec_fn=cap,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"killed after {timeout:.0f} s", "s": time.monotonic() - t0}
    bench = [ln for ln in p.stderr.splitlines() if ln.startswith("BENCH ")]
    if not bench:
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"outcome": f"exit {p.returncode}: {last[:80]}", "s": time.monotonic() - t0}
    out: dict[str, object] = json.loads(bench[-1][len("BENCH ") :])
    verdict = "?"
    try:
        doc = json.loads(p.stdout)
        sync = next(s for s in doc.get("series", []) if s.get("name") == "weight_sync_s")
        verdict = str(sync.get("shape", "?"))
    except (ValueError, StopIteration, AttributeError):
        pass
    out["outcome"] = f"exit {out['rc']}, weight_sync_s {verdict}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", default="1000,10000,40000,100000", help="comma-separated sizes")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per size")
    ap.add_argument("--max-mib", type=int, default=3072, help="address-space cap of a child")
    args = ap.parse_args()
    sizes = [int(s) for s in args.steps.split(",")]
    print(f"{'steps':>8}  {'CSV MiB':>8}  {'time s':>8}  {'peak MiB':>9}  outcome")
    with tempfile.TemporaryDirectory(prefix="wsprof-bench-long-") as tmp:
        for n in sizes:
            path = os.path.join(tmp, f"long-{n}.csv")
            write_csv(path, n)
            size_mib = os.path.getsize(path) / 2**20
            r = run_one(path, args.timeout, args.max_mib)
            peak = r.get("peak_mib")
            peak_text = f"{peak:9.0f}" if isinstance(peak, float) else f"{'-':>9}"
            print(
                f"{n:>8}  {size_mib:8.2f}  {float(r['s']):8.1f}  {peak_text}  {r['outcome']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
