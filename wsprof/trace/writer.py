"""Writes trace rows to one SQLite file (WAL mode), created user-only (0600), exclusively (never
through a link, never over a file that exists: :mod:`wsprof.trace.outputs`)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import stat
import threading
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.trace.chunks import pack_columns
from wsprof.trace.model import CALL_COLUMNS, CALL_STRING_COLUMNS, SCHEMA_VERSION
from wsprof.trace.outputs import create_file, make_private_dir
from wsprof.trace.retention import Retention, totals_rows
from wsprof.trace.schema import DDL, INSERT

__all__ = ["StringTable", "TraceWriter", "encode_calls", "pack_columns"]


def _storable(value: str) -> str:
    """``value`` as SQLite can store it: lone surrogates (from undecodable file names or a
    user's string) escaped, since one unstorable string would fail every later write."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _storable_rows(rows: Iterable[tuple[Any, ...]]) -> Iterable[tuple[Any, ...]]:
    """Rows with every text value storable (:func:`_storable`): span, counter and event names
    come from users, and one bad row would fail the whole flush."""
    for r in rows:
        yield tuple(_storable(v) if isinstance(v, str) else v for v in r)


#: Tables whose rows capture fills with integers only (async completions, one per call).
_INT_TABLES = frozenset({"call_updates"})


class StringTable:
    """Interns strings to small ids for the ``strings`` table; None is -1.

    Thread-safe: capture threads intern on a cache miss while the writer thread drains
    :meth:`take_new`. Re-entrant: a signal handler (the SIGTERM flush) that interrupted an
    intern on its own thread interns without waiting for it, and ids are taken from a counter
    in one step, so an interrupted intern never hands out its id twice.
    """

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        #: id -> string
        self.values: dict[int, str] = {}
        self._new: list[tuple[int, str]] = []
        self._lock = threading.RLock()
        self._next_id = itertools.count()
        #: Where new strings go instead of :meth:`take_new` (the recorder's journal, written
        #: before any record names the string): an object with ``add(entry)``.
        self.journal: Any = None

    def intern(self, value: str | None) -> int:
        """The id of ``value`` (-1 for None), allocating one on first sight."""
        if value is None:
            return -1
        i = self.ids.get(value)
        if i is not None:
            return i
        with self._lock:
            i = self.ids.get(value)
            if i is None:
                i = next(self._next_id)
                stored = _storable(value)
                if self.journal is not None:
                    self.journal.add(["s", i, stored])
                else:
                    self._new.append((i, stored))
                self.values[i] = stored
                self.ids[value] = i
            return i

    def take_new(self) -> list[tuple[int, str]]:
        """Rows for strings interned since the last call."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def put_back(self, rows: list[tuple[int, str]]) -> None:
        """Return rows from :meth:`take_new` whose write failed, to be written next time."""
        with self._lock:
            self._new = rows + self._new


def encode_calls(rows: Iterable[tuple[Any, ...]], strings: StringTable) -> npt.NDArray[np.int64]:
    """Rows in :data:`CALL_COLUMNS` order (strings as ``str``) -> an ``(n, 16)`` int64 matrix
    with strings interned in ``strings``; None in a numeric column becomes -1."""
    out = []
    str_cols = [i for i, c in enumerate(CALL_COLUMNS) if c in CALL_STRING_COLUMNS]
    for r in rows:
        row = [(-1 if v is None else v) for v in r]
        for i in str_cols:
            row[i] = strings.intern(r[i])
        out.append(row)
    return np.array(out, dtype=np.int64).reshape(-1, len(CALL_COLUMNS))


_STEP = CALL_COLUMNS.index("step")


def _same_file(path: str, made: os.stat_result) -> bool:
    """True when ``path`` (not followed) is still the regular file ``made`` describes."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (made.st_dev, made.st_ino)


def _remove_created(path: str, made: os.stat_result) -> None:
    """Remove ``path`` when it is still the file created here (``made``): a writer that failed
    leaves no empty trace behind, and never removes a file someone put there instead. Never
    raises."""
    if _same_file(path, made):
        with contextlib.suppress(OSError):
            os.remove(path)


def _open_created(path: str) -> tuple[sqlite3.Connection, os.stat_result]:
    """Create ``path`` exclusively (0600, no link followed) and open SQLite on it, checking
    (same device and inode, a regular file) that SQLite opened the file created here.

    Returns:
        The connection and the status of the file created (to remove it on a later failure).

    Raises:
        FileExistsError: ``path`` exists; OSError: it cannot be created, or was replaced
        before SQLite opened it (a folder others can write in), or SQLite cannot open it (the
        file created here is then removed).
    """
    fd = create_file(path, os.O_RDWR)
    try:
        made = os.fstat(fd)
    finally:
        os.close(fd)
    replaced = OSError(f"{path}: replaced by another file while being opened; not written")
    if not _same_file(path, made):
        raise replaced
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as e:
        _remove_created(path, made)
        raise OSError(f"{path}: cannot open the new trace ({e})") from e
    if not _same_file(path, made):
        db.close()
        raise replaced
    return db, made


class TraceWriter:
    """Appends batches of rows to a trace file.

    Not thread-safe: one thread (the recorder's writer thread, or a sampler) owns it.

    Args:
        path: trace file to create: a new name (a file or link already there is never opened:
            ``FileExistsError``); its folder is created user-only (0700) when missing.
        retention: which steps keep full call detail (see :mod:`wsprof.trace.retention`);
            None keeps every call.
        allow_shared_out: accept a folder owned by another user or writable by group/others
            (:func:`wsprof.trace.outputs.check_private_dir`; the capture side passes
            ``Settings.allow_shared_out``).

    Raises:
        FileExistsError: ``path`` exists (or is a link).
        SharedFolderError: the folder is not private and sharing was not allowed (one line).
        OSError: the folder cannot be created or the file cannot be created or opened.
        sqlite3.Error: SQLite cannot set the trace up (a side file it cannot create).
        A failure after the file was created removes it.
    """

    def __init__(
        self,
        path: str,
        retention: Retention | None = None,
        allow_shared_out: bool = False,
    ) -> None:
        self.path = path
        self.retention = retention
        make_private_dir(
            os.path.dirname(os.path.abspath(path)), allow_shared_out, "WSPROF_OUT / --out"
        )
        self._db, made = _open_created(path)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(DDL)
            self.strings = StringTable()
            self.set_meta({"schema_version": SCHEMA_VERSION})
        except BaseException:
            # a side file SQLite could not make (a name taken), a full disk: no empty trace
            self._db.close()
            _remove_created(path, made)
            raise

    @classmethod
    def on(cls, db: sqlite3.Connection) -> TraceWriter:
        """A writer over an open trace connection (the in-memory copy a salvage writes to),
        keeping every call."""
        self = cls.__new__(cls)
        self.path = ":memory:"
        self.retention = None
        db.isolation_level = None
        self._db = db
        self.strings = StringTable()
        return self

    def set_meta(self, values: Mapping[str, Any]) -> None:
        """Store metadata values (JSON-encoded); later values replace earlier ones."""
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def write(
        self,
        batches: Mapping[str, Iterable[tuple[Any, ...]]],
        call_matrix: npt.NDArray[np.int64] | None = None,
        update_matrix: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """Write rows for several tables in one transaction.

        Args:
            batches: table name (calls, call_updates, spans, counters, events, sites, stacks,
                samples) to rows in that table's column order; ``calls`` rows hold strings
                (convenient, slower: :func:`encode_calls`).
            call_matrix: calls already encoded, shape ``(n, 16)`` in :data:`CALL_COLUMNS` order
                with string ids from :attr:`strings` (the recorder's fast path).
            update_matrix: call updates, shape ``(n, 4)`` in ``call_updates`` column order,
                stored as one ``update_chunks`` row (a row each would cost about 2 µs).
        """
        chunks: list[npt.NDArray[np.int64]] = []
        if "calls" in batches:
            chunks.append(encode_calls(batches["calls"], self.strings))
        if call_matrix is not None:
            chunks.append(call_matrix)
        new_strings = self.strings.take_new()
        snapshot = self.retention.snapshot() if self.retention is not None else None
        self._db.execute("BEGIN")
        try:
            self._db.executemany(INSERT["strings"], new_strings)
            for m in chunks:
                if len(m):
                    columns, data = pack_columns(m)
                    step = m[:, _STEP]
                    self._db.execute(
                        INSERT["call_chunks"],
                        (len(m), columns, data, int(step.min()), int(step.max())),
                    )
                    self._db.executemany(INSERT["call_totals"], totals_rows(m))
                    if self.retention is not None:
                        self.retention.observe(m)
            if self.retention is not None and chunks:
                thinned = self.retention.thin(self._db)
                if thinned is not None:
                    self._db.execute(INSERT["meta"], ("retention", json.dumps(thinned)))
            if update_matrix is not None and len(update_matrix):
                self._db.execute(
                    INSERT["update_chunks"],
                    (
                        len(update_matrix),
                        zlib.compress(
                            np.ascontiguousarray(update_matrix, dtype="<i8").tobytes(), 1
                        ),
                    ),
                )
            for table, rows in batches.items():
                if table in _INT_TABLES:  # hooks' integers only: nothing to escape
                    self._db.executemany(INSERT[table], rows)
                elif table != "calls":
                    self._db.executemany(INSERT[table], _storable_rows(rows))
        except BaseException:
            self.strings.put_back(new_strings)
            if snapshot is not None and self.retention is not None:
                self.retention.restore(snapshot)
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self._db.close()
