"""Run the ``ray.shutdown()`` teardown scenario N times and print the calls each actor's trace
kept (``tests/integration/test_ray_teardown.py``: 3 Ray actors on 127.0.0.1, 24
``dist.broadcast`` calls each, ``ray.shutdown()`` right after the last one returns).

Usage: python scripts/ray_teardown_runs.py [RUNS]   (default 10)

Exit status 0 when every run kept all 3 x 24 calls, 1 otherwise.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "integration")]

from test_ray_teardown import CALLS, WORLD, run_job  # noqa: E402


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    all_kept = 0
    for i in range(runs):
        base = Path(tempfile.mkdtemp(prefix="ray-teardown-"))
        try:
            job = run_job(base)
            kept = job.kept()
            where = sorted({a["wsprof"] for a in job.actors})
            files = job.files
        except Exception as e:  # noqa: BLE001 - report the run and go on
            print(f"run {i + 1:2d}: failed: {type(e).__name__}: {str(e)[:500]}", flush=True)
            continue
        finally:
            shutil.rmtree(base, ignore_errors=True)
        ok = all(k == CALLS for k in kept)
        all_kept += ok
        per_rank = "  ".join(
            f"rank {r}: {k if k is not None else 'no trace'}/{CALLS}" for r, k in enumerate(kept)
        )
        lost = sum(CALLS - (k or 0) for k in kept)
        print(
            f"run {i + 1:2d}: {per_rank}  lost {lost}/{WORLD * CALLS}"
            f"{'' if ok else '  LOST'}  (wsprof: {', '.join(where)})",
            flush=True,
        )
        if not ok:
            print(f"        run folder: {files}", flush=True)
    print(f"{all_kept} of {runs} runs kept all {WORLD} x {CALLS} calls")
    return 0 if all_kept == runs else 1


if __name__ == "__main__":
    sys.exit(main())
