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
  :data:`MAX_VALUE_BYTES`, nor over the bytes the file and its sidecars hold) and a progress
  handler that stops any one statement after :func:`op_budget` virtual-machine instructions
  (scaled by the file's size: a real trace's statements take under one a byte). A trace read
  whole is first checked with ``PRAGMA quick_check`` (:func:`check_pages`): a page used twice
  (an overflow chain that loops, which reads one 4 KB page as 250 MB values) is damage.
* **Copied with care.** Files are opened ``O_NOFOLLOW`` and must be regular (a sidecar that is
  a link or a FIFO is refused in one line); a copy is bounded (:data:`MAX_COPY_BYTES`, the
  temp folder's free space less :data:`FREE_MARGIN_BYTES`) and skips a sparse file's holes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterator

from wsprof.errors import InputError, quote
from wsprof.trace.ring import _data_from
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
#: The most a private copy (a trace and its sidecars together, by their sizes) may take: a
#: 100-step run of 50,000 calls a step is under 500 MB, so 8 GiB is a trace 16 times that; a
#: sidecar symlinked to ``/dev/zero`` or a sparse 1 TB file is refused instead of filling the
#: temp folder (a copy is removed on exit, but not when its process is killed).
MAX_COPY_BYTES = 8 << 30
#: Free space a private copy leaves in the temp folder (bytes): other programs need some.
FREE_MARGIN_BYTES = 512 << 20
#: Bytes copied at a time (memory of a copy is one block).
COPY_BLOCK_BYTES = 1 << 20
#: Lines of ``PRAGMA quick_check`` output kept in the error of a damaged file.
_CHECK_LINES = 3
#: Flags that open a file to copy or check: never through a link, never waiting on a FIFO.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
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
    checks, no string or blob over :data:`MAX_VALUE_BYTES` or ``file_bytes`` (at least
    :data:`COPY_BLOCK_BYTES`), and a progress handler that
    interrupts a statement after :func:`op_budget` instructions: it then fails with
    ``sqlite3.OperationalError: interrupted``.

    Args:
        db: a connection to a trace file or to a copy of one.
        file_bytes: the size of the file read and its sidecars (bytes), which scales the
            budget and bounds a value.
    """
    db.execute("PRAGMA trusted_schema=OFF")
    db.execute("PRAGMA cell_size_check=ON")
    setlimit = getattr(db, "setlimit", None)  # Python 3.11+; on 3.10 the budget bounds values
    if setlimit is not None:  # no value is longer than the bytes that hold it
        limit = min(MAX_VALUE_BYTES, max(COPY_BLOCK_BYTES, file_bytes))
        setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH"), limit)  # noqa: B009
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


def open_regular(path: str) -> int:
    """A read-only descriptor of ``path``, which must be a regular file and not a link.

    Raises:
        InputError: a symbolic link (SQLite and wsprof never make one beside a trace), or not
            a regular file (a FIFO, a device such as ``/dev/zero``, a folder).
        FileNotFoundError: there is no such file.
        OSError: it cannot be opened.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(
                f"{path}: a symbolic link beside a trace, which neither SQLite nor wsprof "
                "makes; not followed: remove it and read the trace again"
            ) from e
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(
            f"{path}: not a regular file (SQLite and wsprof write only regular files beside "
            "a trace); not read: remove it and read the trace again"
        )
    return fd


def allocated(st: os.stat_result) -> int:
    """Bytes a file's data takes (its holes take none): what copying it writes."""
    return min(st.st_size, st.st_blocks * 512) if hasattr(st, "st_blocks") else st.st_size


def check_copy_size(path: str, sizes: list[os.stat_result], folder: str) -> None:
    """Refuse a copy of files with ``sizes`` into ``folder`` that is over
    :data:`MAX_COPY_BYTES` by their sizes, or over ``folder``'s free space less
    :data:`FREE_MARGIN_BYTES` by the bytes they take.

    Raises:
        InputError: one line naming ``path`` and the bound it is over.
    """
    total = sum(st.st_size for st in sizes)
    if total > MAX_COPY_BYTES:
        raise InputError(
            f"{path}: not read: it and its -wal/-journal come to {total:,} bytes, over the "
            f"{MAX_COPY_BYTES >> 30} GiB wsprof copies to read a trace with a sidecar "
            "(a trace is far smaller); remove a stale sidecar or give the right file"
        )
    free = shutil.disk_usage(folder).free - FREE_MARGIN_BYTES
    need = sum(allocated(st) for st in sizes)
    if need > free:
        raise InputError(
            f"{path}: not read: copying it and its -wal/-journal takes {need:,} bytes and "
            f"{folder} has {max(0, free):,} to spare; free space there or set TMPDIR"
        )


def copy_fd(src: int, dst: str, size: int) -> int:
    """Copy the first ``size`` bytes of the open regular file ``src`` to a new file ``dst``
    (0600), in blocks of :data:`COPY_BLOCK_BYTES`, holes left as holes (``SEEK_DATA``).

    Returns:
        The bytes read and written (the data, not the holes).

    Raises:
        OSError: ``dst`` exists or cannot be written, ``src`` cannot be read.
    """
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    copied = 0
    try:
        pos = _data_from(src, 0, size)
        while pos < size:
            block = os.pread(src, min(COPY_BLOCK_BYTES, size - pos), pos)
            if not block:
                break  # the file shrank under the copy
            view = memoryview(block)
            while view:
                written = os.pwrite(out, view, pos)
                view, pos, copied = view[written:], pos + written, copied + written
            if pos % COPY_BLOCK_BYTES == 0:
                pos = _data_from(src, pos, size)
        os.ftruncate(out, size)
    finally:
        os.close(out)
    return copied


@contextlib.contextmanager
def private_copy(path: str, suffixes: tuple[str, ...] = SIDECARS) -> Iterator[str]:
    """A copy of ``path`` and those of its sidecars (``suffixes``) that exist, in a fresh
    user-only (0700) folder removed on exit; yields the copy's path.

    Every file is opened ``O_NOFOLLOW`` and must be regular (:func:`open_regular`), and the
    copy is bounded (:func:`check_copy_size`); holes of a sparse file are not written.
    A file being written is copied again (up to :data:`COPY_TRIES` times) when it changed
    while being copied: a writer's checkpoint between the copy of the file and of its WAL
    would give a copy that holds neither state.

    Raises:
        InputError: a link or a file that is not regular, or a copy over its bounds.
        OSError: a file cannot be read, or it changed during every copy.
    """
    folder = tempfile.mkdtemp(prefix="wsprof-read-")  # 0700, this user's
    try:
        copy = os.path.join(folder, "trace")
        for _ in range(COPY_TRIES):
            fds: list[tuple[str, int]] = []
            try:
                fds.append((copy, open_regular(path)))
                for s in suffixes:
                    with contextlib.suppress(FileNotFoundError):
                        fds.append((copy + s, open_regular(path + s)))
                stats = [os.fstat(fd) for _, fd in fds]
                check_copy_size(path, stats, folder)
                before = (stats[0].st_ino, stats[0].st_size, stats[0].st_mtime_ns)
                for (dst, fd), st in zip(fds, stats, strict=True):
                    copy_fd(fd, dst, st.st_size)
            finally:
                for _, fd in fds:
                    os.close(fd)
            if _signature(path) == before:
                break
            for name in os.listdir(folder):
                os.unlink(os.path.join(folder, name))
        else:
            raise OSError(f"it changed during each of {COPY_TRIES} copies (a writer is busy)")
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_pages(db: sqlite3.Connection) -> None:
    """``PRAGMA quick_check``: every page of the file used once, by one b-tree, its cells in
    bounds (https://www.sqlite.org/security.html advises it before reading an untrusted file).
    About 3 ms a MB (15 MB trace, loaded 2-core machine).

    Raises:
        sqlite3.DatabaseError: the file is damaged (the first lines of the check say where).
        sqlite3.OperationalError: ``interrupted``, past the statement budget of :func:`harden`.
    """
    rows = db.execute(f"PRAGMA quick_check({_CHECK_LINES})").fetchall()
    if rows != [("ok",)]:
        lines = " ".join(str(r[0]) for r in rows).replace("*** in database main ***", "")
        raise sqlite3.DatabaseError(
            f"database disk image is malformed: {' '.join(lines.split())[:200]}"
        )


def may_read_in_place(path: str) -> bool:
    """Whether a follower may read ``path`` through its writer's ``-wal``/``-shm``
    (``mode=ro``, where SQLite may create, resize, chmod or chown the ``-shm``): only when
    the folder is this user's and no one else may write it, and the trace and each sidecar
    present are regular files of this user's with one link (not another's file under the
    name, nor one linked to a file elsewhere). Otherwise read from a :func:`private_copy`.
    """
    me = os.geteuid()
    try:
        folder = os.stat(os.path.dirname(os.path.abspath(path)))
        if folder.st_uid != me or folder.st_mode & 0o022:
            return False
        for name in (path, path + "-wal", path + "-shm", path + "-journal"):
            try:
                st = os.lstat(name)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_uid != me or st.st_nlink != 1:
                return False
    except OSError:
        return False
    return True


@contextlib.contextmanager
def open_snapshot(path: str) -> Iterator[sqlite3.Connection]:
    """A hardened connection to what ``path`` holds, its schema and pages checked
    (:func:`check_schema`, :func:`check_pages`), that changes nothing beside it:
    ``immutable=1`` on the file itself, or a private copy when a ``-wal`` or ``-journal`` is
    beside it (where SQLite replays the WAL or rolls the hot journal back).

    Raises:
        InputError: the schema is not wsprof's; a sidecar is a link or not a regular file; a
            copy would be over its bounds (:func:`private_copy`).
        OSError: the file (or its sidecar) cannot be copied.
        sqlite3.Error: it cannot be opened, its schema read, or its pages are damaged.
    """
    real = os.path.realpath(path)  # SQLite looks for the sidecars beside the file linked to
    with contextlib.ExitStack() as stack:
        if sidecars(real):
            copy = stack.enter_context(private_copy(real))
            size = sum(os.path.getsize(copy + s) for s in ("", *sidecars(copy)))
            db = sqlite3.connect(copy)  # read-write: only the private copy is ever changed
        else:
            size = os.path.getsize(real)
            db = sqlite3.connect(f"{_uri(real)}?immutable=1", uri=True)
        stack.callback(db.close)
        harden(db, size)
        check_schema(db, path)
        check_pages(db)
        yield db


def open_live(path: str, check: bool = False) -> sqlite3.Connection:
    """A hardened read-only connection to a trace a live writer may have open (WAL mode), its
    schema checked: ``mode=ro`` through the writer's ``-wal``/``-shm``, ``immutable=1`` when
    there is no ``-wal`` (a closed trace: ``mode=ro`` would create the two files and leave them
    behind). A ``-wal`` without ``-shm`` or a ``-journal`` (no writer: read those from a
    :func:`private_copy`) is the caller's to avoid, and so is a ``-wal`` that is not
    :func:`may_read_in_place`.

    Args:
        path: the trace.
        check: also :func:`check_pages` (a first, whole read; about 3 ms a MB).

    Raises:
        InputError: the schema is not wsprof's, or it has a ``-wal`` that may not be read in
            place.
        sqlite3.Error: it cannot be opened, or ``check`` and its pages are damaged.
    """
    size = os.path.getsize(path)
    if os.path.lexists(path + "-wal"):
        if not may_read_in_place(path):
            raise InputError(
                f"{path}: its -wal/-shm are not this user's own regular files in a folder "
                "only this user writes; not read in place (read a copy)"
            )
        size += os.path.getsize(path + "-wal")
        db = sqlite3.connect(f"{_uri(path)}?mode=ro", uri=True, timeout=5.0)
    else:
        db = sqlite3.connect(f"{_uri(path)}?immutable=1", uri=True)
    try:
        harden(db, size)
        check_schema(db, path)
        if check:
            check_pages(db)
    except BaseException:
        db.close()
        raise
    return db


def _uri(path: str) -> str:
    """``file:`` URI of a path (``?`` and ``#`` in a file name escaped)."""
    return "file:" + os.path.abspath(path).replace("%", "%25").replace("?", "%3f").replace(
        "#", "%23"
    )
