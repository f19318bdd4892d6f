"""A trace its process did not close: what the ring and the journal still hold, merged in.

A process that dies (SIGKILL, ``os._exit``, Ray's force-kill, an OOM kill, a segfault) leaves
its trace with everything up to the last drain, plus ``<trace>.ring`` and
``<trace>.journal`` holding what came after (:mod:`wsprof.trace.ring`,
:mod:`wsprof.trace.journal`). :func:`salvage` copies the trace into memory and writes the
tail into the copy with the same writer capture uses; the files on disk are never changed.
:func:`end_of` says how a trace ended: ``closed``, ``live`` (its process still runs on this
host), ``killed`` (it does not) or ``unknown`` (written before the capture buffer existed).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from wsprof.contracts.words import Words
from wsprof.trace import journal as jfmt
from wsprof.trace import ring as fmt
from wsprof.trace import untrusted
from wsprof.trace.writer import TraceWriter


class TraceState(Words):
    """How a trace ended (``meta['end']['state']``); ``removed`` is watch's word for a trace
    whose file went away while it followed it."""

    CLOSED = "closed"
    LIVE = "live"
    KILLED = "killed"
    UNKNOWN = "unknown"
    REMOVED = "removed"


#: The states :func:`end_of` can give.
END_STATES = (TraceState.CLOSED, TraceState.LIVE, TraceState.KILLED, TraceState.UNKNOWN)


def _alive(meta: dict[str, Any]) -> bool:
    """The trace's writer is still running: same host, that pid exists and was started before
    the trace's clock anchor (not a later process that reused the pid)."""
    pid = meta.get("pid")
    if meta.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        import psutil

        started_s = psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, or not ours to look at: not running as writer
        return False
    anchor = meta.get("anchor")
    unix_ns = anchor.get("unix_ns") if isinstance(anchor, dict) else None
    return not isinstance(unix_ns, int) or started_s <= unix_ns / 1e9 + 1.0


def end_of(meta: dict[str, Any]) -> TraceState:
    """How the trace with ``meta`` ended: one of :data:`END_STATES`."""
    if isinstance(meta.get("closed"), dict):
        return TraceState.CLOSED
    if not isinstance(meta.get("ring"), dict):
        return TraceState.UNKNOWN
    return TraceState.LIVE if _alive(meta) else TraceState.KILLED


def salvage(
    db: sqlite3.Connection, path: str, meta: dict[str, Any]
) -> tuple[sqlite3.Connection, dict[str, Any]]:
    """An in-memory copy of the trace ``db`` (read from ``path``) with the ring's and the
    journal's records after its last drain written in.

    Never raises for a damaged ring or journal: what is intact is recovered, the rest is
    described in the returned summary's ``problems`` (one line each).

    Returns:
        (the copy, summary): ``records``, ``calls`` recovered, ``missing`` sequence numbers,
        ``dropped`` (records a full ring refused), ``problems``.

    Raises:
        sqlite3.Error: the trace itself cannot be copied.
    """
    ring_meta: dict[str, Any] = meta["ring"] if isinstance(meta.get("ring"), dict) else {}
    drained = _int(ring_meta.get("drained"))
    journal_bytes = _int(ring_meta.get("journal_bytes"))
    problems: list[str] = []
    rp, jp = fmt.ring_path(path), jfmt.journal_path(path)
    if os.path.exists(rp):
        tail = fmt.read_tail(rp, drained)
    else:
        tail = fmt.RingTail(
            np.zeros((0, fmt.RECORD_WORDS), dtype=np.int64),
            problems=[f"{rp}: missing; only what was drained is there"],
        )
    problems += tail.problems
    if os.path.exists(jp):
        every, jprob = jfmt.read_entries(jp, 0)
        after, _ = jfmt.read_entries(jp, journal_bytes)
        problems += jprob
    else:
        every, after = [], []
        if len(tail.words):
            problems.append(f"{jp}: missing; recovered records may lack their names")
    hooks = _stored_hooks(meta.get("hooks"))
    hooks.update(jfmt.rows(every).hooks)
    new = jfmt.rows(after)
    # The copy's schema is the trace's, checked (no trigger to fire on the inserts below).
    mem = untrusted.harden(sqlite3.connect(":memory:"), os.path.getsize(path))
    db.backup(mem)
    strings = dict(mem.execute("SELECT id, value FROM strings").fetchall())
    # A string the trace holds already is never written twice (a journal entry repeated
    # after the drained length: a drain that interrupted the entry's own write).
    new.strings = [(i, v) for i, v in dict(new.strings).items() if i not in strings]
    strings.update(dict(new.strings))
    dec = fmt.decode(tail.words, strings)
    raw = dec.calls
    calls = None
    unnamed = 0
    if len(raw):
        # Hook ids through the map, per distinct id recovered: memory follows the records
        # read, never the largest id a journal or record names (ids are any int64).
        seen, which = np.unique(raw[:, 5], return_inverse=True)
        ids = np.array([hooks.get(int(h), (-1, -1, -1)) for h in seen], dtype=np.int64)
        ids = ids.reshape(-1, 3)[which.reshape(-1)]
        named = ids[:, 0] >= 0
        unnamed = int((~named).sum())
        calls = np.concatenate([raw[named, :5], ids[named], raw[named, 6:]], axis=1)
    if unnamed:
        problems.append(
            f"{path}: {unnamed} recovered call(s) name a hook the journal lacks; skipped"
        )
    summary = {
        "records": int(len(tail.words)),
        "calls": 0 if calls is None else int(len(calls)),
        "missing": tail.missing,
        "dropped": tail.dropped,
        "problems": problems,
    }
    writer = TraceWriter.on(mem)
    writer.write(
        {
            "strings": new.strings,
            "sites": new.sites,
            "events": new.events,
            "spans": dec.spans,
            "counters": dec.counters,
            "issued": dec.issued,
            "meta": [("salvage", json.dumps(summary))],
        },
        calls,
        dec.updates,
    )
    return mem, summary


def _stored_hooks(value: Any) -> dict[int, tuple[int, int, int]]:
    """The trace's ``meta['hooks']`` (hook id -> op, api, layer string ids); {} if damaged."""
    out: dict[int, tuple[int, int, int]] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            try:
                op, api, layer = (int(x) for x in v)
                out[int(k)] = (op, api, layer)
            except (TypeError, ValueError):
                continue
    return out


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


#: Byte offsets in an SQLite file's header (https://www.sqlite.org/fileformat.html): page size
#: (2 bytes, 1 meaning 65536), write and read format versions (1 rollback journal, 2 WAL), and
#: the database size in pages.
_PAGE_SIZE_AT, _WRITE_VERSION_AT, _READ_VERSION_AT, _PAGES_AT = 16, 18, 19, 28


#: Bytes a table's rows may give, as a multiple of the bytes the damaged file's data holds
#: (plus one copy block): a real table's values are stored in the file, so more means pages
#: read more than once (an overflow chain that loops back on itself).
ROW_BYTES_PER_FILE_BYTE = 2


@contextlib.contextmanager
def readable_copy(path: str) -> Iterator[tuple[sqlite3.Connection, list[str]]]:
    """A private copy of what a damaged trace file still gives: each table's rows in rowid
    (write) order up to the first that cannot be read, rowids kept. The file is never changed.

    A truncated file ends inside some table's pages, and its header still counts the pages it
    had: a private copy of the whole pages that are left, with that count and the journal mode
    (rollback, so that no ``-wal`` is looked for) corrected, is what SQLite can read. The file
    is opened ``O_NOFOLLOW`` and must be regular, copied in blocks (holes skipped, the copy
    bounded as :func:`wsprof.trace.untrusted.check_copy_size` says), and the rows go to a
    file in the same private (0700) folder, removed on exit: memory stays bounded whatever
    the file's size, and so do the rows, to :data:`ROW_BYTES_PER_FILE_BYTE` times the file's
    data per table.

    Yields:
        (a hardened connection to the copy, one ``table: cut after rowid N`` line per table
        that could not be read to its end).

    Raises:
        OSError: the file cannot be read.
        sqlite3.Error: not even its list of tables can be read.
        InputError: its schema is not wsprof's (:func:`wsprof.trace.untrusted.check_schema`),
            it is a link or not a regular file, or too big to copy.
    """
    fd = untrusted.open_regular(path)
    try:
        with tempfile.TemporaryDirectory(prefix="wsprof-damaged-") as folder:
            st = os.fstat(fd)
            head = bytearray(os.pread(fd, 100, 0))
            page = (
                int.from_bytes(head[_PAGE_SIZE_AT : _PAGE_SIZE_AT + 2], "big")
                if len(head) > 18
                else 0
            )
            page = 65536 if page == 1 else page
            if page < 512:
                raise sqlite3.DatabaseError("no readable SQLite header")
            pages = st.st_size // page
            if pages == 0:
                raise sqlite3.DatabaseError(f"shorter than one {page}-byte page: no table left")
            head[_PAGES_AT : _PAGES_AT + 4] = pages.to_bytes(4, "big")
            head[_WRITE_VERSION_AT] = head[_READ_VERSION_AT] = 1
            untrusted.check_copy_size(path, [st], folder)
            fixed = os.path.join(folder, "trace")
            data = untrusted.copy_fd(fd, fixed, pages * page)
            with open(fixed, "r+b") as out:
                out.write(head)
            src = untrusted.harden(sqlite3.connect(fixed), data)
            try:
                untrusted.check_schema(src, path)
                dst = untrusted.harden(sqlite3.connect(os.path.join(folder, "rows")), data)
                try:
                    budget = ROW_BYTES_PER_FILE_BYTE * data + untrusted.COPY_BLOCK_BYTES
                    yield dst, _copy_readable(src, dst, budget)
                finally:
                    dst.close()
            finally:
                src.close()
    finally:
        os.close(fd)


def _copy_readable(src: sqlite3.Connection, dst: sqlite3.Connection, budget: int) -> list[str]:
    """Copy each table's rows of ``src`` into ``dst`` up to the first unreadable one, or until
    its values come to ``budget`` bytes; one ``table: cut ...`` line per table cut short."""
    tables = [
        (str(name), str(sql))
        for name, sql in src.execute(
            "SELECT name, sql FROM sqlite_master WHERE type='table' AND sql IS NOT NULL"
        )
    ]
    cut: list[str] = []
    for name, sql in tables:
        dst.execute(sql)
        columns = [str(r[1]) for r in dst.execute(f"PRAGMA table_info({name})")]
        insert = (
            f"INSERT INTO {name} (rowid, {', '.join(columns)}) "
            f"VALUES ({', '.join('?' * (len(columns) + 1))})"
        )
        last = taken = 0
        try:
            for row in src.execute(f"SELECT rowid, * FROM {name} ORDER BY rowid"):
                taken += sum(len(v) for v in row if isinstance(v, str | bytes))
                if taken > budget:
                    cut.append(
                        f"{name}: cut after rowid {last} (its rows give more bytes than the "
                        "file holds: pages read more than once)"
                    )
                    break
                dst.execute(insert, row)
                last = int(row[0])
        except sqlite3.DatabaseError:
            cut.append(f"{name}: cut after rowid {last}")
    dst.commit()
    return cut
