"""Follows a run folder while its traces are written: each poll reads only the rows added since.

Read-only and safe against the writers and against the files: each poll opens each trace
through :mod:`wsprof.trace.untrusted` (schema checked, queries bounded; ``mode=ro`` while a
writer may have it open in WAL mode, ``immutable=1`` once it is closed) and reads it in one
read transaction (WAL mode lets a reader see the last committed flush while a writer appends),
so a trace being written is read up to its last complete flush. A WAL left without its index
(``-wal`` but no ``-shm``: its writer is gone) or a ``-journal`` is read from a private copy, so
that nothing is created, rolled back or checkpointed beside it. A corrupt or truncated trace is
read up to its last complete record (each table's rows in write order up to the first that
cannot be read, :func:`~wsprof.trace.salvage.readable_copy`), again only when the file
changes; a file replaced under the same name is read again from its start. Problems are said
once. Nothing here analyses.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from dataclasses import dataclass, field

from wsprof.errors import InputError
from wsprof.trace import untrusted
from wsprof.trace.model import TRACE_SUFFIX, ProcessTrace
from wsprof.trace.reader import SQLITE_MAGIC, ReadCursor, read_since
from wsprof.trace.salvage import readable_copy


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


@dataclass
class TraceFollower:
    """One trace file, read incrementally.

    Attributes:
        path: the ``.wsprof`` file.
        cursor: where the last successful read stopped.
        problem: why the last poll could not read it (one line), None when it could.
        polls: successful reads so far.
        generation: how many times the file was found replaced under its name (its reader
            starts again from its first row each time).
        removed: the file is gone (what was read of it stays).
    """

    path: str
    cursor: ReadCursor = field(default_factory=ReadCursor)
    problem: str | None = None
    polls: int = 0
    generation: int = 0
    removed: bool = False
    #: (size, mtime) of the file when its readable part was last copied: a damaged trace is
    #: read again only when it changes.
    _damaged: tuple[int, int] | None = None
    _identity: tuple[int, int] | None = None
    #: Signatures of the trace and its ``-wal`` when an orphaned WAL was last read.
    _orphan: tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None

    def poll(self) -> ProcessTrace | None:
        """The rows added since the last successful poll; None when the file cannot be read
        yet (still empty: its writer has not flushed) or now (see :attr:`problem`)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.removed = True
            self.problem = f"{self.path}: removed while watched; what was read of it is kept"
            return None
        except OSError as e:
            self.problem = f"{self.path}: cannot read ({e.strerror}); check permissions"
            return None
        self.removed = False
        if not stat.S_ISREG(st.st_mode):
            self.problem = f"{self.path}: not a regular file; a trace is a file"
            return None
        if self._identity is not None and _identity(st) != self._identity:
            # Another file under the same name (a job restarted into the folder, a copy):
            # read it from its start.
            self.cursor, self._damaged, self._orphan = ReadCursor(), None, None
            self.generation += 1
        self._identity = _identity(st)
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
        wal, journal = os.path.lexists(self.path + "-wal"), os.path.lexists(self.path + "-journal")
        if (
            journal
            or (wal and not os.path.exists(self.path + "-shm"))
            or (wal and not untrusted.may_read_in_place(self.path))
        ):
            # No live writer, or sidecars not this user's own files (SQLite would resize,
            # chmod or chown a -shm read in place, through a link to a file elsewhere too).
            sig = (
                _signature(self.path),
                _signature(self.path + ("-journal" if journal else "-wal")),
            )
            if sig == self._orphan:
                return None  # read already; its writer is gone, so it no longer changes
            self._orphan = sig
            return self._read_orphaned()
        # A connection per poll, closed at once: a writer that closes its trace is then its
        # last connection, which checkpoints the WAL into the file and removes it (a reader
        # still connected would leave ``-wal`` and ``-shm`` behind).
        db: sqlite3.Connection | None = None
        try:
            # The first read is a whole read: its pages are checked (a looped overflow chain).
            db = untrusted.open_live(self.path, check=not self.cursor.seen)
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
        return self._took(delta)

    def _took(self, delta: ProcessTrace | None) -> ProcessTrace | None:
        if delta is None:
            return None  # its writer has not committed the schema version yet
        self.problem = None
        self.polls += 1
        return delta

    def _read_orphaned(self) -> ProcessTrace | None:
        """A ``-wal`` without its ``-shm`` (its writer is gone: a live writer keeps both) or a
        ``-journal`` (a writer's transaction cut short): read from a private copy of the file
        and the sidecar (:func:`~wsprof.trace.untrusted.open_snapshot`), where SQLite may
        rebuild the WAL's index or roll the journal back, since a reader of the originals
        would create ``-shm`` or roll the input back."""
        try:
            with untrusted.open_snapshot(self.path) as db:
                delta = read_since(db, self.path, self.cursor)
        except (OSError, sqlite3.Error, InputError) as e:
            self.problem = f"{self.path}: cannot read the trace and its sidecar ({e}); tried again"
            return None
        return self._took(delta)

    def _read_damaged(self, error: Exception) -> ProcessTrace | None:
        """A corrupt or truncated trace: its rows up to the first that cannot be read
        (:func:`~wsprof.trace.salvage.readable_copy`), once per change of the file."""
        self._damaged = _signature(self.path)
        what = f"{self.path}: corrupt or truncated trace ({error})"
        try:
            with readable_copy(self.path) as (copy, cut):
                delta = read_since(copy, self.path, self.cursor)
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
        host: follow only the traces written on this host: file names ``<host>-<pid>...``
            (as the recorder names them) whose meta names the same host; None: every trace.
        traces: path -> its follower, in the order found.
    """

    folder: str
    host: str | None = None
    traces: dict[str, TraceFollower] = field(default_factory=dict)
    #: Traces left out: another host's (by their meta), found at their first read.
    ignored: set[str] = field(default_factory=set)

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
            if self._mine(n)
            and os.path.join(self.folder, n) not in self.traces
            and os.path.join(self.folder, n) not in self.ignored
        )
        for p in new:
            self.traces[p] = TraceFollower(p)
        return new

    def poll(self) -> list[tuple[str, ProcessTrace | None]]:
        """One read of every trace: ``(path, rows added since, or None)`` per followed trace,
        new ones included."""
        self.discover()
        out: list[tuple[str, ProcessTrace | None]] = []
        for p, f in list(self.traces.items()):
            delta = f.poll()
            if delta is not None and self.host is not None and delta.meta.get("host") != self.host:
                del self.traces[p]  # ``trainer-2-5678`` is not host ``trainer``'s
                self.ignored.add(p)
                continue
            out.append((p, delta))
        return out

    def problems(self) -> list[str]:
        """The traces that the last poll could not read, one line each."""
        return [f.problem for f in self.traces.values() if f.problem]

    def close(self) -> None:
        for f in self.traces.values():
            f.close()
