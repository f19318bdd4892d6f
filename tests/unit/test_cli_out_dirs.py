"""A run folder (``--out``) that cannot be written is one line and exit 2 before anything runs,
for ``wsprof attach`` and ``wsprof demo``, never a traceback."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import pyspy_skip_reason

from wsprof.cli import main


@pytest.fixture(params=["under-read-only-folder", "read-only-folder"])
def unwritable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A folder path nobody here can write in: inside (or at) a folder of mode 0o500; where
    this user writes there anyway (root), a path under a regular file, which nobody can
    create."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(ro, os.W_OK):  # root ignores the mode
            if request.param == "read-only-folder":
                pytest.skip("this user (root) can write in any folder")
            blocker = tmp_path / "file.txt"
            blocker.write_text("x")
            yield blocker / "out"
        else:
            yield ro / "out" if request.param == "under-read-only-folder" else ro
    finally:
        ro.chmod(stat.S_IRWXU)


def _one_line(err: str, path: Path) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    [line] = lines
    assert "Traceback" not in err
    assert line.startswith(f"wsprof: error: {path}: cannot write the run folder ("), line
    assert line.endswith("; choose a writable folder with --out"), line
    return line


def test_attach_to_an_unwritable_out_is_one_line(
    unwritable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skip = pyspy_skip_reason()
    if skip:
        pytest.skip(skip)
    # This very process is the target: the run folder is refused before py-spy starts.
    assert main(["attach", str(os.getpid()), "--duration", "1", "--out", str(unwritable)]) == 2
    captured = capsys.readouterr()
    _one_line(captured.err, unwritable)
    assert captured.out == ""


def test_demo_to_an_unwritable_out_is_one_line(
    unwritable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--steps", "2", "--no-pyspy", "--out", str(unwritable)]) == 2
    captured = capsys.readouterr()
    _one_line(captured.err, unwritable)
    assert captured.out == ""  # no rank was started
