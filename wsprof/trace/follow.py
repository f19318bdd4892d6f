"""Follows a run folder while its traces are written: each poll reads only the rows added since.

Read-only and safe against the writers: each poll opens each trace read-only (``mode=ro`` while
its writer has it open in WAL mode, ``immutable=1`` once it is closed) and reads it in one read
transaction (WAL mode lets a reader see the last committed flush while a writer appends), so a
trace being written is read up to its last complete flush. A corrupt or
truncated trace is read up to its last complete record (each table's rows in write order up to
the first that cannot be read, :func:`~wsprof.trace.salvage.readable_copy`), again only when
the file changes; its problem is said once. Nothing here analyses.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

from wsprof.errors import InputError
from wsprof.trace.model import TRACE_SUFFIX, ProcessTrace
from wsprof.trace.reader import SQLITE_MAGIC, ReadCursor, read_since
from wsprof.trace.salvage import readable_copy


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _open_read_only(path: str) -> sqlite3.Connection:
    """A read-only connection to ``path`` that creates no file beside it.

    A writer in WAL mode keeps ``-wal`` and ``-shm`` beside the trace while it has it open:
    ``mode=ro`` reads through them. Without a ``-wal`` no writer has it open (a closed trace):
    ``immutable=1`` reads the file as it is (``mode=ro`` would create the two files and, unable
    to checkpoint, leave them behind).

    Raises:
        sqlite3.Error: it cannot be opened.
    """
    if os.path.exists(path + "-wal"):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    else:
        db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        db.close()
        raise
    return db


@dataclass
class TraceFollower:
    """One trace file, read incrementally.

    Attributes:
        path: the ``.wsprof`` file.
        cursor: where the last successful read stopped.
        problem: why the last poll could not read it (one line), None when it could.
        polls: successful reads so far.
    """

    path: str
    cursor: ReadCursor = field(default_factory=ReadCursor)
    problem: str | None = None
    polls: int = 0
    #: (size, mtime) of the file when its readable part was last copied: a damaged trace is
    #: read again only when it changes.
    _damaged: tuple[int, int] | None = None

    def poll(self) -> ProcessTrace | None:
        """The rows added since the last successful poll; None when the file cannot be read
        yet (still empty: its writer has not flushed) or now (see :attr:`problem`)."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
        except OSError as e:
            self.problem = f"{self.path}: cannot read ({e.strerror}); check permissions"
            return None
        if not head:
            return None  # created, not flushed yet
        if head != SQLITE_MAGIC:
            self.problem = f"{self.path}: not a wsprof trace (not an SQLite file)"
            return None
        if self._damaged is not None and self._damaged == _signature(self.path):
            return None  # unchanged since its readable part was read
        # A connection per poll, closed at once: a writer that closes its trace is then its
        # last connection, which checkpoints the WAL into the file and removes it (a reader
        # still connected would leave ``-wal`` and ``-shm`` behind).
        db: sqlite3.Connection | None = None
        try:
            db = _open_read_only(self.path)
            delta = read_since(db, self.path, self.cursor)
        except sqlite3.OperationalError as e:  # locked, or no -shm index to open yet
            self.problem = f"{self.path}: cannot open the trace ({e}); it is tried again"
            return None
        except sqlite3.Error as e:  # "file is not a database", "disk image is malformed"
            return self._read_damaged(e)
        except InputError as e:
            if isinstance(e.__cause__, sqlite3.DatabaseError) and not isinstance(
                e.__cause__, sqlite3.OperationalError
            ):
                return self._read_damaged(e.__cause__)
            self.problem = str(e)
            return None
        finally:
            if db is not None:
                db.close()
        if delta is None:
            return None  # its writer has not committed the schema version yet
        self.problem = None
        self.polls += 1
        return delta

    def _read_damaged(self, error: Exception) -> ProcessTrace | None:
        """A corrupt or truncated trace: its rows up to the first that cannot be read
        (:func:`~wsprof.trace.salvage.readable_copy`), once per change of the file."""
        self._damaged = _signature(self.path)
        what = f"{self.path}: corrupt or truncated trace ({error})"
        try:
            mem, cut = readable_copy(self.path)
            try:
                delta = read_since(mem, self.path, self.cursor)
            finally:
                mem.close()
        except (OSError, sqlite3.Error, InputError) as e:
            self.problem = f"{what}; nothing more could be read of it ({e})"
            return None
        self.problem = (
            f"{what}; read up to its last complete record ({'; '.join(cut) or 'every table'})"
        )
        if delta is not None:
            self.polls += 1
        return delta

    def close(self) -> None:
        """Nothing stays open between polls; kept for symmetry with :class:`RunFollower`."""


@dataclass
class RunFollower:
    """Every trace of one run folder, including traces that appear later.

    Attributes:
        folder: the run folder (it may not exist yet).
        host: follow only the traces written on this host (file names ``<host>-<pid>...``,
            as the recorder names them); None: every trace.
        traces: path -> its follower, in the order found.
    """

    folder: str
    host: str | None = None
    traces: dict[str, TraceFollower] = field(default_factory=dict)

    def _mine(self, name: str) -> bool:
        if not name.endswith(TRACE_SUFFIX):
            return False
        if self.host is None:
            return True
        rest = name[len(self.host) + 1 :]
        return name.startswith(f"{self.host}-") and rest[:1].isdigit()

    def exists(self) -> bool:
        """The folder exists (``wsprof watch`` waits for it)."""
        return os.path.isdir(self.folder)

    def discover(self) -> list[str]:
        """Trace files in the folder not followed yet (now followed), sorted by name."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        new = sorted(
            os.path.join(self.folder, n)
            for n in names
            if self._mine(n) and os.path.join(self.folder, n) not in self.traces
        )
        for p in new:
            self.traces[p] = TraceFollower(p)
        return new

    def poll(self) -> list[tuple[str, ProcessTrace | None]]:
        """One read of every trace: ``(path, rows added since, or None)`` per followed trace,
        new ones included."""
        self.discover()
        return [(p, f.poll()) for p, f in self.traces.items()]

    def problems(self) -> list[str]:
        """The traces that the last poll could not read, one line each."""
        return [f.problem for f in self.traces.values() if f.problem]

    def close(self) -> None:
        for f in self.traces.values():
            f.close()
