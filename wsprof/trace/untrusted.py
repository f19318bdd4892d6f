"""Opening a trace file that anyone may have written: read-only, nothing beside it created,
changed or deleted, nothing in it executed.

The one place for how a trace is opened (:mod:`wsprof.trace.reader`, :mod:`wsprof.trace.follow`
and :mod:`wsprof.trace.salvage` all come here), following SQLite's own guidance for database
files from untrusted sources (https://www.sqlite.org/security.html):

* **Read-only.** A file with nothing beside it is opened ``immutable=1`` (SQLite creates no
  ``-wal``/``-shm`` and takes no lock). A file with a ``-wal`` or a ``-journal`` beside it is
  read from a private copy (file and sidecars, in a fresh 0700 folder): there SQLite may replay
  the WAL or roll back a hot journal without touching the input. A follower of a live writer
  may read through the writer's own ``-wal``/``-shm`` (``mode=ro``, :func:`open_live`).
* **Nothing executed.** ``sqlite_master`` is checked before any read (:func:`check_schema`):
  only wsprof's own tables and indexes, no view, no trigger, no column default or generated
  column (each would compute values on read); ``PRAGMA trusted_schema=OFF``.
* **Bounded.** Every connection gets length limits (no string or blob over
  :data:`MAX_VALUE_BYTES`) and a progress handler that stops any one statement after
  :func:`op_budget` virtual-machine instructions (scaled by the file's size: a real trace's
  statements take under one a byte).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator

from wsprof.errors import InputError, quote
from wsprof.trace.schema import DDL

#: Files SQLite keeps beside a database that change what reading it gives.
SIDECARS = ("-wal", "-journal")
#: The longest string or blob any query may produce (bytes; SQLite's default is 1e9). A call
#: chunk inflates to at most :data:`wsprof.trace.chunks.MAX_CHUNK_BYTES`, so its compressed
#: data is shorter.
MAX_VALUE_BYTES = 256 * 1024 * 1024
#: Virtual-machine instructions between two calls of the progress handler.
PROGRESS_EVERY_OPS = 100_000
#: Instructions any one statement may take: this floor (about 2.5 s of SQLite work on a
#: loaded 2-core machine) plus :data:`OPS_PER_BYTE` per byte of the file read.
MIN_OPS_PER_QUERY = 200_000_000
#: Instructions per byte of file a statement may take beyond the floor: the largest statement
#: of reading a 15 MB trace (400,000 counters sorted by time) took 0.34 a byte; sorting grows
#: as n log n, so a 1 GB trace's stays under 10.
OPS_PER_BYTE = 100
#: Copies of a file being written that may change under the copy before the read gives up.
COPY_TRIES = 5
#: What wsprof's traces hold (every schema version: ``calls`` is schema 1's call table).
TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", DDL)) | {"calls"}
INDEXES = frozenset(re.findall(r"CREATE INDEX IF NOT EXISTS (\w+)", DDL))
#: Indexes SQLite makes for a PRIMARY KEY or UNIQUE column (``meta.key``).
_AUTOINDEX = "sqlite_autoindex_"
#: What to do about a trace that is not wsprof's own.
_FOREIGN_HINT = "not read; give a trace wsprof wrote (re-record it)"


def op_budget(file_bytes: int) -> int:
    """Virtual-machine instructions one statement may take on a file of ``file_bytes``."""
    return MIN_OPS_PER_QUERY + OPS_PER_BYTE * max(0, file_bytes)


def harden(db: sqlite3.Connection, file_bytes: int) -> sqlite3.Connection:
    """Limit what any statement on ``db`` may cost and run (in place; returns ``db``).

    ``trusted_schema=OFF`` (schema expressions may use only harmless functions), cell size
    checks, no string or blob over :data:`MAX_VALUE_BYTES`, and a progress handler that
    interrupts a statement after :func:`op_budget` instructions: it then fails with
    ``sqlite3.OperationalError: interrupted``.

    Args:
        db: a connection to a trace file or to a copy of one.
        file_bytes: the size of the file read (bytes), which scales the budget.
    """
    db.execute("PRAGMA trusted_schema=OFF")
    db.execute("PRAGMA cell_size_check=ON")
    setlimit = getattr(db, "setlimit", None)  # Python 3.11+; on 3.10 the budget bounds values
    if setlimit is not None:
        setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH"), MAX_VALUE_BYTES)  # noqa: B009
    calls_left = [0]
    calls_per_query = op_budget(file_bytes) // PROGRESS_EVERY_OPS

    def started(_: str) -> None:  # every statement starts with a full budget
        calls_left[0] = calls_per_query

    def progress() -> int:
        calls_left[0] -= 1
        return 1 if calls_left[0] < 0 else 0

    started("")
    db.set_trace_callback(started)
    db.set_progress_handler(progress, PROGRESS_EVERY_OPS)
    return db


def check_schema(db: sqlite3.Connection, path: str) -> None:
    """Refuse a file whose schema would run anything on read.

    Only wsprof's own tables (:data:`TABLES`) and indexes (:data:`INDEXES` and SQLite's
    automatic ones), no view, no trigger, and no column with a default or a generated value.

    Raises:
        InputError: one line naming the file and the first entry that is not wsprof's.
        sqlite3.Error: the schema cannot be read (a damaged file).
    """
    entries = db.execute("SELECT type, name FROM sqlite_master").fetchall()
    for kind, name in entries:
        known = (kind == "table" and name in TABLES) or (
            kind == "index" and (name in INDEXES or str(name).startswith(_AUTOINDEX))
        )
        if not known and ("table", "meta") not in entries:
            raise InputError(
                f"{path}: SQLite file but not a wsprof trace (no meta table; it holds "
                f"{quote(kind)} {quote(name)}); give a run folder written by wsprof, a "
                ".wsprof trace or a .csv series"
            )
        if not known:
            raise InputError(
                f"{path}: not a wsprof trace: its schema holds {quote(kind)} {quote(name)}, "
                f"which wsprof never writes (a view or trigger would run on read); "
                f"{_FOREIGN_HINT}"
            )
        if kind != "table":
            continue
        for column in db.execute(f'PRAGMA table_xinfo("{name}")'):
            _, col, _, _, default, _, hidden = column
            if default is not None or hidden:
                raise InputError(
                    f"{path}: not a wsprof trace: column {quote(col)} of table {quote(name)} "
                    f"computes its values (a default or generated column); {_FOREIGN_HINT}"
                )


def sidecars(path: str) -> list[str]:
    """The suffixes of :data:`SIDECARS` present beside ``path``."""
    return [s for s in SIDECARS if os.path.lexists(path + s)]


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def private_copy(path: str, suffixes: tuple[str, ...] = SIDECARS) -> Iterator[str]:
    """A copy of ``path`` and those of its sidecars (``suffixes``) that exist, in a fresh
    user-only (0700) folder removed on exit; yields the copy's path.

    A file being written is copied again (up to :data:`COPY_TRIES` times) when it changed
    while being copied: a writer's checkpoint between the copy of the file and of its WAL
    would give a copy that holds neither state.

    Raises:
        OSError: a file cannot be read, or it changed during every copy.
    """
    folder = tempfile.mkdtemp(prefix="wsprof-read-")  # 0700, this user's
    try:
        copy = os.path.join(folder, "trace")
        for _ in range(COPY_TRIES):
            before = _signature(path)
            shutil.copyfile(path, copy)
            for s in suffixes:
                with contextlib.suppress(FileNotFoundError):
                    shutil.copyfile(path + s, copy + s)
            if _signature(path) == before:
                break
            for s in suffixes:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(copy + s)
        else:
            raise OSError(f"it changed during each of {COPY_TRIES} copies (a writer is busy)")
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def open_snapshot(path: str) -> Iterator[sqlite3.Connection]:
    """A hardened connection to what ``path`` holds, its schema checked, that changes nothing
    beside it: ``immutable=1`` on the file itself, or a private copy when a ``-wal`` or
    ``-journal`` is beside it (where SQLite replays the WAL or rolls the hot journal back).

    Raises:
        InputError: the schema is not wsprof's (:func:`check_schema`).
        OSError: the file (or its sidecar) cannot be copied.
        sqlite3.Error: it cannot be opened or its schema read.
    """
    size = os.path.getsize(path)
    with contextlib.ExitStack() as stack:
        if sidecars(path):
            copy = stack.enter_context(private_copy(path))
            db = sqlite3.connect(copy)  # read-write: only the private copy is ever changed
        else:
            db = sqlite3.connect(f"{_uri(path)}?immutable=1", uri=True)
        stack.callback(db.close)
        harden(db, size)
        check_schema(db, path)
        yield db


def open_live(path: str) -> sqlite3.Connection:
    """A hardened read-only connection to a trace a live writer may have open (WAL mode), its
    schema checked: ``mode=ro`` through the writer's ``-wal``/``-shm``, ``immutable=1`` when
    there is no ``-wal`` (a closed trace: ``mode=ro`` would create the two files and leave them
    behind). A ``-wal`` without ``-shm`` or a ``-journal`` (no writer: read those from a
    :func:`private_copy`) is the caller's to avoid.

    Raises:
        InputError: the schema is not wsprof's.
        sqlite3.Error: it cannot be opened.
    """
    size = os.path.getsize(path)
    if os.path.exists(path + "-wal"):
        db = sqlite3.connect(f"{_uri(path)}?mode=ro", uri=True, timeout=5.0)
    else:
        db = sqlite3.connect(f"{_uri(path)}?immutable=1", uri=True)
    try:
        harden(db, size)
        check_schema(db, path)
    except BaseException:
        db.close()
        raise
    return db


def _uri(path: str) -> str:
    """``file:`` URI of a path (``?`` and ``#`` in a file name escaped)."""
    return "file:" + os.path.abspath(path).replace("%", "%25").replace("?", "%3f").replace(
        "#", "%23"
    )
