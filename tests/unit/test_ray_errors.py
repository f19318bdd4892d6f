"""``--ray`` where it cannot run: one line that says what to do, a non-zero exit (issue 33)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wsprof.cli import main

pytestmark = pytest.mark.pure


def test_without_ray_one_line_says_how_to_install_it(tmp_path: Path) -> None:
    """A machine without Ray (``import ray`` fails, as where the extra is not installed)."""
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from wsprof.cli import main\n"
        f"sys.exit(main(['analyze', '--ray', 'auto', {str(tmp_path)!r}]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "pip install 'wsprof[ray]'" in lines[0] and "Traceback" not in res.stderr


def test_ray_and_timeline_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--ray", "auto", "--timeline", str(tmp_path), str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeline joins on one machine" in err[0]
