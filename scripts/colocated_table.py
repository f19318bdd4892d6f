"""The issue 35 table: the slime-colocated-shaped job (``tests/jobs/colocated_shaped``) under
``wsprof run`` with no markers, each variant under each sharing strategy, against the job's own
truth: weight-sync error per process, what is named (kept buckets, double open), their holder
and bytes an update, and whether the healthy job is silent.

    python scripts/colocated_table.py [--steps 12] [--repeats 1] [--out DIR]

Runs and comparison are ``scripts/shaped_jobs.py``'s (:func:`run_job`, :func:`compare`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shaped_jobs import compare, run_job

from wsprof.contracts.units import fmt_bytes

#: (variant as the issue names it, strategy, shaped_jobs variant)
CASES = (
    ("healthy", "file_descriptor", "healthy"),
    ("healthy", "file_system", "healthy_fs"),
    ("trainer keeps (list)", "file_descriptor", "trainer_list"),
    ("trainer keeps (list)", "file_system", "leak_fs"),
    ("engine keeps", "file_descriptor", "engine_keeps"),
    ("engine keeps", "file_system", "engine_keeps_fs"),
    ("double open", "file_system", "double_open"),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="wsprof-colocated-"))
    print(
        "| variant | strategy | steps found/true | sync error: trainer 0 / 1 / engine | "
        "named | bytes an update | holder | warnings |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, strategy, variant in CASES:
        for k in range(args.repeats):
            run = out / f"{variant}-{args.steps}-{k}"
            truth = run_job("colocated", variant, run, args.steps)
            row, a = compare("colocated", variant, run, truth)
            steps = ", ".join(f"{f}/{t}" for f, t in row.steps.values())
            errs = " / ".join(f"{v:+.1f}%" for v in row.sync_err_by.values())
            named = [f for f in a.findings if f.kind.startswith("shared_")]
            kinds = ", ".join(f"{f.kind} on {getattr(f.evidence, 'process', '?')}" for f in named)
            kept = [f for f in named if f.kind == "shared_buckets_kept"]
            per = fmt_bytes(kept[0].evidence.kept_per_update_bytes) if kept else "-"
            holder = (kept[0].evidence.holder or "(none in Python)") if kept else "-"
            warnings = sum(d.severity in ("warning", "critical") for d in a.diagnoses)
            print(
                f"| {name} | {strategy} | {steps} | {errs} | {kinds or 'nothing'} | {per} | "
                f"`{holder}` | {warnings} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
