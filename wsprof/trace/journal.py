"""The journal: an append-only file of the low-volume entries a trace's ring records refer to.

Strings (interned ids), caller sites, hook ids (op, name called, layer) and events are each
written with one ``write()`` to ``<trace>.journal`` the moment they are made (before any ring
record can name them), so that a process that dies keeps them: a returned ``write()`` is in
the kernel's page cache whatever happens to the process. The writer thread stores the same
entries in the SQLite trace and the journal's length with them (``meta['ring']['journal_bytes']``);
reading a trace whose process died replays the entries after that length.

One JSON array per line: ``["s", id, text]``, ``["site", id, file, line, function]``,
``["hook", id, op_id, api_id, layer_id]``, ``["e", t_ns, kind, detail]``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from wsprof.trace.outputs import create_file

#: Suffix of the journal file beside ``<host>-<pid>.wsprof``.
JOURNAL_SUFFIX = ".journal"

Entry = list[Any]


def journal_path(trace_path: str) -> str:
    """``<trace>.journal``: the journal of a trace."""
    return trace_path + JOURNAL_SUFFIX


class Journal:
    """Appends entries to a journal file and keeps them until the writer thread takes them.

    Thread-safe: hooks on any thread add, the writer thread takes.

    Args:
        path: the journal file, created user-only (0600), exclusively: never over a file or
            through a link already there (:func:`wsprof.trace.outputs.create_file`).

    Raises:
        FileExistsError: ``path`` exists (or is a link); OSError: it cannot be created.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = create_file(path, os.O_WRONLY | os.O_APPEND)
        #: the writing process: a forked child shares the file and must never append to it
        self._pid = os.getpid()
        # Re-entrant: a signal handler (the SIGTERM flush) may interrupt an add on its thread.
        self._lock = threading.RLock()
        self._pending: list[Entry] = []
        self._bytes = 0
        #: the last write stopped inside its line (disk full): the next one ends that line first
        self._torn = False
        #: entries whose write to the file failed (disk full): still in the trace if the
        #: writer thread stores them, lost only if the process then dies
        self.write_errors = 0

    def add(self, entry: Entry) -> None:
        """Write one entry to the file and keep it for :meth:`take`. Never raises; does
        nothing in a forked child (the file and the trace are the parent's)."""
        if os.getpid() != self._pid:
            return
        line = (json.dumps(entry, ensure_ascii=True, default=str) + "\n").encode("ascii")
        with self._lock:
            self._pending.append(entry)
            if self._fd is None:
                return
            if self._torn:
                line = b"\n" + line
            done = 0
            try:
                while done < len(line):
                    done += os.write(self._fd, line[done:])
                self._torn = False
            except OSError:
                self.write_errors += 1
                self._torn = self._torn or done > 0
            # The bytes really in the file: a reader's offsets must stay on line starts.
            self._bytes += done

    def take(self) -> tuple[list[Entry], int]:
        """Entries added since the last take, and the file's length after the last of them."""
        with self._lock:
            out, self._pending = self._pending, []
            return out, self._bytes

    def put_back(self, entries: list[Entry]) -> None:
        """Return entries from :meth:`take` whose write to the trace failed."""
        with self._lock:
            self._pending = entries + self._pending

    def close(self) -> None:
        """Close the file (entries still pending stay in memory). Idempotent."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


@dataclass
class JournalRows:
    """Journal entries as trace rows."""

    strings: list[tuple[int, str]] = field(default_factory=list)
    sites: list[tuple[int, str, int, str]] = field(default_factory=list)
    #: hook id -> (op, api, layer) string ids
    hooks: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    events: list[tuple[int, str, str]] = field(default_factory=list)
    #: entries that are not of a known shape (damage, another version)
    bad: int = 0


def rows(entries: list[Entry]) -> JournalRows:
    """Sort entries into trace rows; an entry of unknown shape is counted in ``bad``."""
    out = JournalRows()
    for e in entries:
        try:
            tag = e[0]
            if tag == "s" and len(e) == 3:
                out.strings.append((int(e[1]), str(e[2])))
            elif tag == "site" and len(e) == 5:
                out.sites.append((int(e[1]), str(e[2]), int(e[3]), str(e[4])))
            elif tag == "hook" and len(e) == 5:
                out.hooks[int(e[1])] = (int(e[2]), int(e[3]), int(e[4]))
            elif tag == "e" and len(e) == 4:
                out.events.append((int(e[1]), str(e[2]), str(e[3])))
            else:
                out.bad += 1
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            out.bad += 1
    return out


#: Bytes read at a time by :func:`read_entries`.
READ_BLOCK_BYTES = 1 << 20
#: Longest journal line read, bytes: a longer one (no entry is near it: strings, sites and
#: event details are short) is skipped as damaged without being held in memory.
MAX_LINE_BYTES = 1 << 20
#: Most journal bytes replayed: a journal holds each string, site and hook once, so a real
#: one is far smaller; entries past this are left out with one line (a bound on memory: a
#: parsed entry costs about nine times its line: 32 MiB of the smallest entries, about 280 MB).
MAX_JOURNAL_BYTES = 32 << 20


def _lines(
    fd: int, offset: int, end: int, problems: list[str], path: str
) -> Iterator[bytes | None]:
    """Complete lines of the file from ``offset`` to ``end`` (without their newline), read in
    blocks of :data:`READ_BLOCK_BYTES`; None for a line longer than :data:`MAX_LINE_BYTES` or
    one that runs into a hole of a sparse file (never written: damage). A last line with no
    newline is a line in ``problems``. Memory: one block plus one line."""
    seek_data = getattr(os, "SEEK_DATA", None)
    part = bytearray()
    spoiled = False  # the line being gathered is damaged: skip to its newline
    pos = offset
    while pos < end:
        if seek_data is not None:
            try:
                at = os.lseek(fd, pos, seek_data)
            except OSError as e:
                at = end if e.errno == errno.ENXIO else pos
            if at > pos:  # a hole: zeros no write made; the line around it is damage
                spoiled, pos = True, min(at, end)
                part.clear()
                continue
        block = os.pread(fd, min(READ_BLOCK_BYTES, end - pos), pos)
        if not block:
            break
        pos += len(block)
        start = 0
        while True:
            nl = block.find(b"\n", start)
            if nl < 0:
                if not spoiled:
                    part += block[start:]
                    if len(part) > MAX_LINE_BYTES:
                        spoiled = True
                        part.clear()
                break
            if spoiled or len(part) + nl - start > MAX_LINE_BYTES:
                yield None
            else:
                part += block[start:nl]
                yield bytes(part)
            part.clear()
            spoiled = False
            start = nl + 1
    if part or spoiled:
        problems.append(f"{path}: last journal entry torn (the process died writing it)")


def read_entries(path: str, offset: int = 0) -> tuple[list[Entry], list[str]]:
    """Entries of the journal file after byte ``offset``. Never raises.

    Read in blocks: memory is one block, one line (at most :data:`MAX_LINE_BYTES`) and the
    entries, of at most :data:`MAX_JOURNAL_BYTES` of journal, whatever the file's size; a
    sparse file's holes are skipped unread.

    Returns:
        (entries, problems): problems has one line for a torn last line (the process died
        while writing it), one for lines that do not parse (or are too long) and one for a
        journal longer than :data:`MAX_JOURNAL_BYTES`.
    """
    problems: list[str] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return [], [f"{path}: cannot read the journal ({e.strerror or e})"]
    entries: list[Entry] = []
    bad = 0
    try:
        st = os.fstat(fd)
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        start = min(max(0, int(offset)), size)
        end = min(size, start + MAX_JOURNAL_BYTES)
        for raw in _lines(fd, start, end, problems, path):
            if not raw:
                bad += raw is None  # an empty line: the end of a line a failed write left torn
                continue
            try:
                entry = json.loads(raw)
            except (ValueError, RecursionError):
                bad += 1
                continue
            if isinstance(entry, list) and entry:
                entries.append(entry)
            else:
                bad += 1
        if end < size:
            problems.append(
                f"{path}: journal longer than {MAX_JOURNAL_BYTES >> 20} MiB after byte {start} "
                f"({size - start} bytes); entries after that left out"
            )
    except OSError as e:
        problems.append(f"{path}: cannot read the journal ({e.strerror or e})")
    finally:
        os.close(fd)
    if bad:
        problems.append(f"{path}: {bad} damaged journal line(s) skipped")
    return entries, problems
