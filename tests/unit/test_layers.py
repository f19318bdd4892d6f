"""Analysis, storage and rendering never import torch (they run on a laptop, on a login node,
in CI): checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

MODULES = (
    "wsprof.analysis.run",
    "wsprof.analysis.diff",
    "wsprof.trace.reader",
    "wsprof.report.html",
    "wsprof.report.text",
    "wsprof.report.export",
    "wsprof.report.diff_html",
    "wsprof.cli.analyze",
)


def test_analysis_and_reports_import_no_torch() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]", out
