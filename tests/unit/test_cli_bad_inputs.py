"""Every kind of bad input the "Trust" issue lists, through the CLI: one line, exit 2.

Each case runs ``wsprof analyze PATH`` (and ``wsprof report PATH``) in-process and asserts the
contract of ``wsprof.cli.main``: exit code 2, nothing on stdout, exactly one line on stderr that
starts ``wsprof: error:``, names the file, says what is wrong and, after ``;``, what to do, and
holds no traceback. ``test_cli_errors.py`` covers a missing path, a zero-byte trace, a binary
file, a CSV without a step column and an empty folder; ``test_trace_io.py`` and
``test_csv_series.py`` the reader's and importer's messages, ``test_log_importers.py`` a log
with no recognisable line.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from wsprof.cli import main
from wsprof.trace.model import CALL_COLUMNS
from wsprof.trace.writer import TraceWriter, pack_columns

#: SQLite's page size in the traces TraceWriter writes (its default).
PAGE_BYTES = 4096


def _call(t0: int, step: int) -> tuple[object, ...]:
    return (
        t0,
        t0 + 1000,
        600,
        1,
        7,
        "broadcast",
        "dist.broadcast",
        "api",
        64,
        "float32",
        "0",
        0,
        0,
        step,
        "weight_sync",
        None,
    )


def write_trace(path: Path, steps: int = 6, calls_per_step: int = 400) -> Path:
    """A trace like ``wsprof.patch()`` writes: one call chunk per step, step spans, counters."""
    w = TraceWriter(str(path))
    w.set_meta({"pid": 4242, "rank": 0, "world_size": 1, "host": "h"})
    step_ns = 10**9
    for s in range(steps):
        t = s * step_ns
        w.write(
            {
                "sites": [(0, "train.py", 42, "sync_weights")],
                "calls": [_call(t + 1000 * i, s) for i in range(calls_per_step)],
                "spans": [
                    ("step", str(s), t, t + step_ns - 1, s, 7),
                    ("phase", "weight_sync", t, t + 10**6, s, 7),
                ],
                "counters": [(t, "cuda.segments", float(s))],
            }
        )
    w.close()
    return path


def _sql(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    db = sqlite3.connect(path)
    for stmt, params in statements:
        db.execute(stmt, params)
    db.commit()
    db.close()


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, out: str, err: str, path: Path, expect: str) -> None:
    assert "Traceback" not in err, err
    assert rc == 2, (rc, err)
    assert out == ""
    assert err.startswith("wsprof: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert str(path) in err, err  # names the file
    assert ";" in err, err  # what is wrong; what to do
    assert expect in err, err


def _analyze_and_report(
    path: Path, tmp_path: Path, expect: str, capsys: pytest.CaptureFixture[str]
) -> str:
    rc, out, err = run_cli(["analyze", str(path)], capsys)
    assert_one_line_error(rc, out, err, path, expect)
    html = tmp_path / "report.html"
    rc, out, err = run_cli(["report", str(path), "-o", str(html)], capsys)
    assert_one_line_error(rc, out, err, path, expect)
    assert not html.exists()
    return err


# Traces ----------------------------------------------------------------------------------------


def test_good_trace_is_analysed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The baseline the bad cases below are damaged from."""
    p = write_trace(tmp_path / "h-1.wsprof")
    rc, out, err = run_cli(["analyze", str(p), "--format", "json"], capsys)
    assert rc == 0 and err == ""
    assert json.loads(out)["steps"]


@pytest.mark.parametrize(
    "cut",
    [100, PAGE_BYTES, 2 * PAGE_BYTES, 3 * PAGE_BYTES + 17, "half", "last_byte"],
    ids=["header-only", "first-page", "page-boundary", "mid-page", "half", "last-byte"],
)
def test_truncated_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int | str
) -> None:
    """A trace cut short (disk full, copy interrupted): never a traceback; SQLite notices the
    missing pages, so each of these cuts is an error that says to re-record or to analyse the
    run folder (where the trace becomes a note, see the mixed-folder test)."""
    p = write_trace(tmp_path / "h-1.wsprof")
    data = p.read_bytes()
    assert len(data) > 4 * PAGE_BYTES
    n = len(data) // 2 if cut == "half" else len(data) - 1 if cut == "last_byte" else int(cut)
    p.write_bytes(data[:n])
    err = _analyze_and_report(p, tmp_path, "trace", capsys)
    assert "re-record" in err


def test_corrupt_trace_garbage_after_the_magic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "h-1.wsprof"
    p.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 40)
    _analyze_and_report(p, tmp_path, "corrupt or truncated trace", capsys)


def test_corrupt_call_chunk_blob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write_trace(tmp_path / "h-1.wsprof")
    db = sqlite3.connect(p)
    (chunk_id, blob), *_ = db.execute("SELECT id, data FROM call_chunks ORDER BY id").fetchall()
    db.close()
    damaged = bytearray(blob)
    for i in range(10, len(damaged), 97):  # inside the deflate stream, and its checksum
        damaged[i] ^= 0xA5
    damaged[-1] ^= 0xFF
    _sql(p, ("UPDATE call_chunks SET data=? WHERE id=?", (bytes(damaged), chunk_id)))
    _analyze_and_report(p, tmp_path, "a call chunk does not decompress", capsys)


Columns = list[list[str]]


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda c: "not json", "JSONDecodeError"),
        (lambda c: json.dumps({"t_start_ns": "<i8"}), "are not a list"),
        (lambda c: json.dumps([x[0] for x in c]), "is not [name, dtype]"),
        (lambda c: json.dumps(c[:-1]), "lacks columns ['error']"),
        (lambda c: json.dumps([c[0], *c]), "names a column twice"),
        (lambda c: json.dumps([["t_start_ns", "<f8"], *c[1:]]), "not an integer"),
        (lambda c: json.dumps([["t_start_ns", "what"], *c[1:]]), "not understood"),
        (lambda c: json.dumps([[n, "<i8"] for n, _ in c]), "shorter than its columns"),
    ],
    ids=[
        "not-json",
        "object",
        "names-only",
        "missing",
        "duplicate",
        "float",
        "bad-dtype",
        "wrong-widths",
    ],
)
def test_call_chunk_columns_json_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Callable[[Columns], str], expect: str
) -> None:
    p = write_trace(tmp_path / "h-1.wsprof")
    db = sqlite3.connect(p)
    (columns,) = db.execute("SELECT columns FROM call_chunks LIMIT 1").fetchone()
    db.close()
    assert [c[0] for c in json.loads(columns)] == list(CALL_COLUMNS)
    _sql(p, ("UPDATE call_chunks SET columns=?", (edit(json.loads(columns)),)))
    err = _analyze_and_report(p, tmp_path, "malformed trace", capsys)
    assert expect in err


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        ("1", "trace schema version 1, this wsprof reads versions 2, 3"),
        ("6", "trace schema version 6,"),
        ('"3"', "trace schema version '3',"),
        (None, "no schema version"),
    ],
    ids=["older", "newer", "text", "missing"],
)
def test_wrong_schema_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str | None, expect: str
) -> None:
    p = write_trace(tmp_path / "h-1.wsprof")
    if value is None:
        _sql(p, ("DELETE FROM meta WHERE key='schema_version'", ()))
    else:
        _sql(p, ("UPDATE meta SET value=? WHERE key='schema_version'", (value,)))
    _analyze_and_report(p, tmp_path, expect, capsys)


DEEP_JSON = "[" * 5000  # nested deeper than Python's recursion limit


@pytest.mark.parametrize(
    ("statement", "params", "expect"),
    [
        ("INSERT INTO call_updates VALUES (0, 7, 99999999999999999999, 5)", (), "OverflowError"),
        ("UPDATE sites SET line=1e999", (), "OverflowError"),
        ("INSERT INTO stacks VALUES (9, ?)", (DEEP_JSON,), "RecursionError"),
        ("UPDATE meta SET value=? WHERE key='host'", (DEEP_JSON,), None),
    ],
    ids=["update-past-int64", "infinite-line", "deep-stack", "deep-meta"],
)
def test_values_out_of_range(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    statement: str,
    params: tuple[object, ...],
    expect: str | None,
) -> None:
    """Values no writer produces (an integer past int64, infinity, JSON nested 5,000 deep)
    used to escape as a raw OverflowError or RecursionError; now the trace is "malformed". A
    meta value that is not JSON is kept as text (as before), so the trace still reads."""
    p = write_trace(tmp_path / "h-1.wsprof")
    _sql(p, (statement, params))
    if expect is None:
        rc, _, err = run_cli(["analyze", str(p)], capsys)
        assert rc == 0 and err == ""
        return
    err = _analyze_and_report(p, tmp_path, "malformed trace", capsys)
    assert expect in err


def test_call_without_an_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """String id -1 (None) where capture always writes a name: the analysis used to crash
    sorting ops (None < str)."""
    p = write_trace(tmp_path / "h-1.wsprof", steps=1)
    matrix = np.array([[1000, 2000, 600, 1, 7, -1, 0, 1, 64, 2, 3, 0, 0, 0, -1, -1]], np.int64)
    _sql(
        p,
        ("INSERT INTO call_chunks (n_rows, columns, data) VALUES (1, ?, ?)", pack_columns(matrix)),
    )
    err = _analyze_and_report(p, tmp_path, "malformed trace", capsys)
    assert "a call has no 'op'" in err


def test_run_folder_mixing_traces_and_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The good traces are analysed (exit 0). Each unreadable ``*.wsprof`` (corrupt, truncated,
    zero-byte, a folder so named) becomes one note ``skipped <path>: <why>; <what to do>``.
    Files that are not named ``*.wsprof`` (notes, a CSV, sub-folders, SQLite's ``-wal``) are not
    traces of the run and are ignored without a note."""
    run = tmp_path / "run"
    run.mkdir()
    write_trace(run / "h-1.wsprof")
    good2 = write_trace(run / "h-2.wsprof")
    _sql(good2, ("UPDATE meta SET value='1' WHERE key='rank'", ()))
    truncated = write_trace(run / "h-3.wsprof")
    truncated.write_bytes(truncated.read_bytes()[: 2 * PAGE_BYTES])
    (run / "h-4.wsprof").write_bytes(b"")
    (run / "h-5.wsprof").write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    (run / "h-6.wsprof").mkdir()
    (run / "notes.txt").write_text("launched with 2 ranks\n")
    (run / "metrics.csv").write_text("step,x_s\nnot,a number\n")
    (run / "h-1.wsprof-wal").write_bytes(b"junk")
    (run / "logs").mkdir()
    rc, out, err = run_cli(["analyze", str(run), "--format", "json"], capsys)
    assert rc == 0 and err == ""
    notes = json.loads(out)["notes"]
    skipped = [n for n in notes if n.startswith("skipped ")]
    assert len(skipped) == 4, notes
    for name, why in [
        ("h-3", "corrupt or truncated"),
        ("h-4", "empty file"),
        ("h-5", "corrupt or truncated"),
        ("h-6", "not a regular file"),
    ]:
        (note,) = [n for n in skipped if f"{name}.wsprof:" in n]
        assert why in note and ";" in note and "\n" not in note
    assert not any(x in n for n in notes for x in ("notes.txt", "metrics.csv", "-wal", "logs"))
    # What could not be read was not judged: never a whole "no problem", never "complete".
    doc = json.loads(out)
    assert doc["verdict"]["status"] != "no_problem", doc["verdict"]
    assert any("4 traces of the run could not be read" in r for r in doc["verdict"]["reasons"])
    assert doc["coverage"]["status"] != "complete"
    assert sum("unreadable trace" in n for n in doc["coverage"]["not_audited"]) == 4
    rc, out, err = run_cli(["analyze", str(run)], capsys)
    assert rc == 0 and "skipped" in out and "Traceback" not in out + err


def test_run_folder_with_no_readable_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "a-1.wsprof").write_bytes(b"")
    (run / "a-2.wsprof").write_text("not a trace")
    (run / "notes.txt").write_text("x")
    err = _analyze_and_report(run, tmp_path, "none of its 2 traces could be read", capsys)
    assert "a-1.wsprof" in err  # the first problem is named


# CSV series ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("", "the file is empty"),
        ("step,sync_s\n0,1\n1,fast\n", "line 3, column 'sync_s': 'fast' is not a number"),
        ("step,sync_s\n0,1\n1,1.2.3\n", "'1.2.3' is not a number"),
        ("step,sync_s\n0,nan\n1,NaN\n", "column 'sync_s' has no values"),
        ("step,sync_s\nnan,1\n", "'nan' is not a whole number"),
        ("step,sync_s\ninf,1\n", "'inf' is not a whole number"),
        ("step,sync_s\n0,1\n1,2\n0,3\n", "step 0 appears more than once"),
        ("step,sync_s\n0,1\n1\n", "line 3 has 1 cells but the header has 2"),
        ("sync_s\n1\n", "no 'step' column"),
        ('"a\nb",sync_s\n0,1\n', "no 'step' column (header: 'a\\nb', 'sync_s')"),
        ("step,sync_s\n0," + "x" * 5000 + "\n", "is not a number"),
        ("step,sync_s\n", "a header but no data rows"),
    ],
    ids=[
        "zero-byte",
        "non-numeric",
        "two-dots",
        "all-nan",
        "nan-step",
        "inf-step",
        "duplicate",
        "ragged",
        "missing-header",
        "newline-in-header",
        "long-cell",
        "header-only",
    ],
)
def test_bad_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    p = tmp_path / "metrics.csv"
    p.write_text(text)
    err = _analyze_and_report(p, tmp_path, expect, capsys)
    assert len(err) < len(str(p)) + 300  # a long cell is quoted cut short


@pytest.mark.parametrize(
    ("text", "steps", "values"),
    [
        ("step,sync_s\n7,12.5\n", [7], [12.5]),
        ("step,sync_s\n2,3\n0,1\n1,2\n", [0, 1, 2], [1, 2, 3]),
        ("step,sync_s\n0,1\n1,nan\n2,\n3,4\n", [0, 1, 2, 3], [1, None, None, 4]),
    ],
    ids=["single-row", "unsorted", "some-nan"],
)
def test_csv_that_is_fine(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    steps: list[int],
    values: list[float | None],
) -> None:
    """A single row, unsorted steps (sorted) and missing values (NaN or empty) are answered,
    not refused."""
    p = tmp_path / "metrics.csv"
    p.write_text(text)
    rc, out, err = run_cli(["analyze", str(p), "--format", "json"], capsys)
    assert rc == 0 and err == ""
    (series,) = json.loads(out)["series"]
    assert series["steps"] == steps and series["values"] == values


# Logs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "expect"),
    [
        ("train.log", b"INFO starting\nloss went down\n", "neither a wsprof trace nor a CSV"),
        ("train.log", b"\x1b[32mINFO\x1b[0m \xff\xfe ok\n", "neither a wsprof trace nor a CSV"),
        ("train.log", b"", "empty file"),
        ("stdout.txt", b"step 3 took 4s\n", "neither a wsprof trace nor a CSV"),
    ],
    ids=["text", "binary-escape", "zero-byte", "txt"],
)
def test_log_with_no_recognisable_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes, expect: str
) -> None:
    p = tmp_path / name
    p.write_bytes(data)
    err = _analyze_and_report(p, tmp_path, expect, capsys)
    assert "give a run folder" in err


def test_real_command_line_prints_one_line(tmp_path: Path) -> None:
    """``python -m wsprof`` itself (not only ``main``): exit 2, one line, no traceback."""
    p = write_trace(tmp_path / "h-1.wsprof", steps=2)
    p.write_bytes(p.read_bytes()[: PAGE_BYTES + 10])
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    r = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(p)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"wsprof: error: {p}: ") and r.stderr.count("\n") == 1, r.stderr


def test_zlib_blob_that_is_not_deflate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write_trace(tmp_path / "h-1.wsprof", steps=1)
    _sql(p, ("UPDATE call_chunks SET data=?", (zlib.compress(b"\x00" * 7),)))
    _analyze_and_report(p, tmp_path, "shorter than its columns", capsys)
