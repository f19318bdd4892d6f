"""Follows a run folder while its traces are written: each poll reads only the rows added since.

Read-only and safe against the writers: each trace is opened with SQLite's ``mode=ro`` and read
in one read transaction per poll (WAL mode lets a reader see the last committed flush while a
writer appends), so a trace being written is read up to its last complete flush. A trace that
cannot be read (corrupt, truncated, another schema) keeps what was read before and is retried
at every poll; its problem is said once. Nothing here analyses.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

from wsprof.errors import InputError
from wsprof.trace.model import TRACE_SUFFIX, ProcessTrace
from wsprof.trace.reader import SQLITE_MAGIC, ReadCursor, read_since


def _open_read_only(path: str) -> sqlite3.Connection:
    """A read-only connection to ``path``.

    A WAL-mode database is read through its ``-shm`` index, which the writer creates; after
    the writer has closed (and SQLite removed ``-wal`` and ``-shm``), ``mode=ro`` may find no
    index to open: the file no longer changes then, and ``immutable=1`` reads it as it is.

    Raises:
        sqlite3.Error: it cannot be opened.
    """
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.Error:
        db.close()
        if os.path.exists(path + "-wal"):
            raise
        db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
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
    _db: sqlite3.Connection | None = None

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
        try:
            if self._db is None:
                self._db = _open_read_only(self.path)
            delta = read_since(self._db, self.path, self.cursor)
        except sqlite3.Error as e:
            self.close()
            self.problem = f"{self.path}: cannot open the trace ({e}); it is retried"
            return None
        except InputError as e:
            self.close()  # a fresh connection next time (a file replaced under the same name)
            self.problem = str(e)
            return None
        if delta is None:
            return None  # its writer has not committed the schema version yet
        self.problem = None
        self.polls += 1
        return delta

    def close(self) -> None:
        """Close the connection (a later poll reopens it)."""
        if self._db is not None:
            self._db.close()
            self._db = None


@dataclass
class RunFollower:
    """Every trace of one run folder, including traces that appear later.

    Attributes:
        folder: the run folder (it may not exist yet).
        traces: path -> its follower, in the order found.
    """

    folder: str
    traces: dict[str, TraceFollower] = field(default_factory=dict)

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
            if n.endswith(TRACE_SUFFIX) and os.path.join(self.folder, n) not in self.traces
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
