"""Real SQLite trace files: round trip, and every kind of bad input answered clearly."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from wsprof.errors import InputError
from wsprof.trace.model import CALL_COLUMNS, SCHEMA_VERSION
from wsprof.trace.reader import read_run, read_trace
from wsprof.trace.writer import TraceWriter


def _call(t0: int, op: str = "broadcast", step: int = 0) -> tuple[object, ...]:
    return (
        t0,
        t0 + 1000,
        600,
        1,
        7,
        op,
        f"dist.{op}",
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


def write_trace(path: Path, n: int = 10) -> None:
    w = TraceWriter(str(path))
    w.set_meta({"pid": 123, "rank": 0, "world_size": 2})
    w.write(
        {
            "sites": [(0, "train.py", 42, "sync")],
            "calls": [_call(1000 * i) for i in range(n)],
            "spans": [("step", "0", 0, 10**6, 0, 7)],
            "counters": [(5, "segments", 3.0), (9, "segments", 4.0)],
            "events": [(1, "patched", "x")],
        }
    )
    w.close()


def test_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    write_trace(p)
    t = read_trace(str(p))
    assert len(CALL_COLUMNS) == 16
    assert len(t.calls) == 10 and t.calls.op[0] == "broadcast"
    assert int(t.calls.between_layers_ns[0]) == 400
    assert t.sites[0].label() == "sync (train.py:42)"
    assert t.meta["schema_version"] == SCHEMA_VERSION and t.rank == 0
    assert t.counters["segments"][1].tolist() == [3.0, 4.0]
    assert t.spans[0].kind == "step" and t.events[0].kind == "patched"


def test_trace_file_is_user_only(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    write_trace(p)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600


def test_run_folder_reads_every_trace_and_ignores_other_files(tmp_path: Path) -> None:
    write_trace(tmp_path / "a-1.wsprof")
    write_trace(tmp_path / "a-2.wsprof")
    (tmp_path / "notes.txt").write_text("hello")
    assert len(read_run(str(tmp_path))) == 2


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_text("step,x\n1,2\n"), "not a wsprof trace"),
        (
            lambda p: sqlite3.connect(p).execute("CREATE TABLE t (x)").connection.commit(),
            "no meta table",
        ),
    ],
    ids=["missing", "zero-byte", "text", "other-sqlite"],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, make: object, message: str) -> None:
    p = tmp_path / "x.wsprof"
    make(p)  # type: ignore[operator]
    with pytest.raises(InputError) as e:
        read_trace(str(p)) if p.exists() else read_run(str(p))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("UPDATE meta SET value='999' WHERE key='schema_version'", "schema version 999"),
        ("UPDATE sites SET line=NULL", "malformed trace"),
    ],
    ids=["schema-version", "malformed-rows"],
)
def test_edited_trace_is_one_clear_line(tmp_path: Path, sql: str, message: str) -> None:
    p = tmp_path / "x.wsprof"
    write_trace(p)
    db = sqlite3.connect(p)
    db.execute(sql)
    db.commit()
    db.close()
    with pytest.raises(InputError, match=message):
        read_trace(str(p))


def test_truncated_trace(tmp_path: Path) -> None:
    p = tmp_path / "x.wsprof"
    write_trace(p, n=5000)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError, match="corrupt or truncated"):
        read_trace(str(p))


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="holds no .wsprof trace"):
        read_run(str(tmp_path))


def test_one_bad_trace_does_not_block_the_run(tmp_path: Path) -> None:
    from wsprof.trace.reader import read_run_lenient

    write_trace(tmp_path / "a-1.wsprof")
    (tmp_path / "a-2.wsprof").write_bytes(b"")
    traces, problems = read_run_lenient(str(tmp_path))
    assert len(traces) == 1
    assert len(problems) == 1 and "a-2.wsprof" in problems[0] and "empty file" in problems[0]


def test_unlistable_folder_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that cannot be listed (no read permission; root ignores permissions, hence the
    stand-in) used to escape as a raw PermissionError."""

    def refuse(path: str) -> list[str]:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "listdir", refuse)
    with pytest.raises(InputError, match="cannot list the folder .Permission denied.; check"):
        read_run(str(tmp_path))
