"""The CLI answers bad input with one line and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import helpers
import pytest
from helpers import CASES

from wsprof.cli import main


def _file(name: str, data: bytes) -> object:
    def make(d: Path) -> Path:
        (d / name).write_bytes(data)
        return d / name

    return make


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda d: d / "missing", "no such file or folder"),
        (_file("empty.wsprof", b""), "empty file"),
        (_file("x.bin", b"\x00\x01garbage"), "neither a wsprof trace nor a CSV"),
        (_file("x.csv", b"a,b\n1,2\n"), "step"),
        (lambda d: d, "holds no .wsprof trace"),
    ],
    ids=["missing", "empty", "binary", "csv-no-step", "empty-folder"],
)
@pytest.mark.parametrize("command", ["analyze", "report"])
def test_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, expect: str, command: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    args = [command, str(path)] + (["-o", str(tmp_path / "r.html")] if command == "report" else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err and err.count("\n") == 1


def test_report_to_unwritable_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = CASES / "series" / "seed_weight_sync.csv"
    helpers.require_cases(csv)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", str(csv), "-o", str(blocker / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the report" in err and "Traceback" not in err


def test_csv_column_without_finite_values_is_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "x.csv"
    p.write_text("step,a_s,b_s\n0,inf,1\n1,inf,2\n2,inf,3\n")
    assert main(["analyze", str(p)]) == 0
    out = capsys.readouterr().out
    assert "series 'a_s' not judged" in out


def test_fail_on_critical(capsys: pytest.CaptureFixture[str]) -> None:
    csv = CASES / "series" / "seed_weight_sync.csv"
    helpers.require_cases(csv)
    assert main(["analyze", str(csv), "--fail-on", "critical"]) == 1
    assert (
        main(["analyze", str(CASES / "series" / "noisy_flat_sync.csv"), "--fail-on", "warning"])
        == 0
    )
