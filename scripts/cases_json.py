"""Write ``wsprof analyze --format json`` of every file of ``../shared/cases`` into a folder,
one file each (the error line where wsprof refuses an input), to compare an analysis refactor's
output before and after byte for byte (issue 29):

    python scripts/cases_json.py OUT_BEFORE        # on the old commit (a git worktree)
    python scripts/cases_json.py OUT_AFTER
    diff -r OUT_BEFORE OUT_AFTER
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = Path(os.environ.get("WSPROF_CASES", REPO.parent / "shared" / "cases"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files = sorted(
        p
        for p in CASES.rglob("*")
        if p.is_file() and p.suffix != ".md" and not p.name.startswith("expected")
    )
    for p in files:
        done = subprocess.run(
            [sys.executable, "-m", "wsprof", "analyze", str(p), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        name = str(p.relative_to(CASES)).replace(os.sep, "__")
        body = done.stdout if done.returncode == 0 else f"exit {done.returncode}: {done.stderr}"
        (args.out / f"{name}.json").write_text(body)
    print(f"{len(files)} case files -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
