"""Reads trace files and run folders into :class:`~wsprof.trace.model.ProcessTrace`.

Every failure is an :class:`~wsprof.errors.InputError` whose message says what is wrong
with which file and what to do; nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

import numpy as np

from wsprof.errors import InputError
from wsprof.trace.model import (
    CALL_COLUMNS,
    SCHEMA_VERSION,
    TRACE_SUFFIX,
    CallTable,
    Event,
    ProcessTrace,
    SampleWindow,
    Site,
    Span,
)


def find_traces(path: str) -> list[str]:
    """Trace files at ``path``: the file itself, or every ``*.wsprof`` in a run folder.

    Raises:
        InputError: the path does not exist, or a folder holds no trace.
    """
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or folder; give a run folder or a .wsprof trace")
    if os.path.isdir(path):
        found = sorted(
            os.path.join(path, n) for n in os.listdir(path) if n.endswith(TRACE_SUFFIX)
        )
        if not found:
            raise InputError(
                f"{path}: folder holds no {TRACE_SUFFIX} trace; point at a run folder written by "
                "wsprof (WSPROF_OUT) or at one trace file"
            )
        return found
    return [path]


def _connect(path: str) -> sqlite3.Connection:
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: empty file (0 bytes); the writing process never flushed")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(16)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror}); check permissions") from e
    if magic != b"SQLite format 3\x00":
        raise InputError(f"{path}: not a wsprof trace (not an SQLite file)")
    try:
        db = sqlite3.connect(path)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError:
        # A read-only folder: read what the main file holds.
        db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    return db


def read_trace(path: str) -> ProcessTrace:
    """Read one trace file.

    Args:
        path: a ``.wsprof`` file.

    Returns:
        The process's calls (columnar), sites, spans, counters (name -> (t_ns, value) arrays),
        events and py-spy sample windows.

    Raises:
        InputError: missing, empty, not SQLite, corrupt or truncated, or another schema version.
    """
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file; give a run folder or a .wsprof trace")
    db = _connect(path)
    try:
        return _read(db, path)
    except sqlite3.DatabaseError as e:
        raise InputError(
            f"{path}: corrupt or truncated trace ({e}); analyse the run folder (other traces are "
            "still read) or re-record"
        ) from e
    except (TypeError, ValueError, KeyError) as e:
        raise InputError(
            f"{path}: malformed trace ({type(e).__name__}: {e}); it was not written by this "
            "wsprof or was edited"
        ) from e
    finally:
        db.close()


def _read(db: sqlite3.Connection, path: str) -> ProcessTrace:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise InputError(f"{path}: SQLite file but not a wsprof trace (no meta table)")
    meta: dict[str, Any] = {}
    for k, v in db.execute("SELECT key, value FROM meta"):
        try:
            meta[k] = json.loads(v)
        except (TypeError, ValueError):
            meta[k] = v
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            f"{path}: trace schema version {version!r}, this wsprof reads version "
            f"{SCHEMA_VERSION}; analyse it with the wsprof version that wrote it"
        )
    rows = db.execute(f"SELECT {','.join(CALL_COLUMNS)} FROM calls ORDER BY t_start_ns").fetchall()
    calls = CallTable.from_rows(rows)
    sites = {
        int(r[0]): Site(int(r[0]), str(r[1]), int(r[2]), str(r[3]))
        for r in db.execute("SELECT id, file, line, function FROM sites")
    }
    spans = [
        Span(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]))
        for r in db.execute(
            "SELECT kind, name, t_start_ns, t_end_ns, step, thread FROM spans ORDER BY t_start_ns"
        )
    ]
    counters: dict[str, tuple[Any, Any]] = {}
    by_name: dict[str, list[tuple[int, float]]] = {}
    for t, name, value in db.execute("SELECT t_ns, name, value FROM counters ORDER BY t_ns"):
        # SQLite stores NaN as NULL: keep it as NaN (analysis drops non-finite samples).
        by_name.setdefault(str(name), []).append(
            (int(t), float("nan") if value is None else float(value))
        )
    for name, pts in by_name.items():
        counters[name] = (
            np.array([p[0] for p in pts], dtype=np.int64),
            np.array([p[1] for p in pts], dtype=np.float64),
        )
    events = [
        Event(int(r[0]), str(r[1]), str(r[2]))
        for r in db.execute("SELECT t_ns, kind, detail FROM events ORDER BY t_ns")
    ]
    stacks = {int(i): tuple(json.loads(f)) for i, f in db.execute("SELECT id, frames FROM stacks")}
    samples = [
        SampleWindow(int(a), int(b), int(pid), int(tid), stacks.get(int(s), ()), int(c))
        for a, b, pid, tid, s, c in db.execute(
            "SELECT t_start_ns, t_end_ns, pid, tid, stack, count FROM samples ORDER BY t_start_ns"
        )
    ]
    return ProcessTrace(path, meta, calls, sites, spans, counters, events, samples)


def _ordered(traces: list[ProcessTrace]) -> list[ProcessTrace]:
    """By rank (unknown last), then pid."""

    def key(t: ProcessTrace) -> tuple[int, int]:
        pid = t.meta.get("pid")
        return (t.rank if t.rank is not None else 1 << 30, pid if isinstance(pid, int) else 0)

    return sorted(traces, key=key)


def read_run_lenient(path: str) -> tuple[list[ProcessTrace], list[str]]:
    """Like :func:`read_run`, but a run folder with some unreadable traces (a rank killed
    mid-write) is still read: the bad ones are skipped and described.

    Returns:
        (traces, one line per skipped trace).

    Raises:
        InputError: no trace at all could be read (the first problem is named).
    """
    traces: list[ProcessTrace] = []
    problems: list[InputError] = []
    for p in find_traces(path):
        try:
            traces.append(read_trace(p))
        except InputError as e:
            problems.append(e)
    if not traces:
        raise problems[0]
    return _ordered(traces), [f"skipped {e}" for e in problems]


def read_run(path: str) -> list[ProcessTrace]:
    """Read every trace of a run folder (or one trace file), ordered by rank then pid.

    Raises:
        InputError: see :func:`find_traces` and :func:`read_trace`.
    """
    return _ordered([read_trace(p) for p in find_traces(path)])
