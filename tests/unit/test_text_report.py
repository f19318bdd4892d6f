"""``wsprof analyze`` text: verdict first, 80 columns, colour only on a terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.report_fixtures import make_run_analysis, make_series_analysis
from wsprof.report.text import render_text


def test_verdict_first_and_80_columns() -> None:
    for a in (make_run_analysis(), make_series_analysis(), make_run_analysis(n_processes=20)):
        text = render_text(a, colour=False, max_findings=len(a.findings))
        lines = text.splitlines()
        assert lines[0].startswith("wsprof: ") and lines[1].startswith("VERDICT: "), lines[:2]
        long = [ln for ln in lines if len(ln) > 80]
        assert not long, long
        assert "\x1b[" not in text


def test_colour_only_when_asked() -> None:
    a = make_run_analysis()
    assert "\x1b[" in render_text(a, colour=True)


def test_cli_prints_no_colour_into_a_pipe(tmp_path: Path) -> None:
    csv = tmp_path / "sync.csv"
    csv.write_text("step,weight_sync_s\n0,143\n1,363\n2,966\n3,1596\n")
    out = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(csv)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout and out.stdout.splitlines()[1].startswith("VERDICT: ")
    assert max(len(ln) for ln in out.stdout.splitlines()) <= 80
