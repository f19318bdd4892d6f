"""The capture buffer: a file-backed ring of fixed-size records beside each trace.

Hooks write each record straight into a shared memory mapping of ``<trace>.ring``; the
recorder's writer thread drains the ring into the SQLite trace. The kernel keeps a shared
file mapping's pages when the process dies, however it dies (SIGKILL, ``os._exit``, Ray's
force-kill, an OOM kill, a segfault), so every record written before the death is still in
the file: :func:`read_tail` recovers the records the trace had not received yet. The
low-volume dictionary beside it (strings, sites, hook ids, events) is the journal
(:mod:`wsprof.trace.journal`).

File layout (little-endian int64 words):

* header, :data:`HEADER_BYTES`: magic, version, record bytes, capacity (records, a power of
  two), header bytes, pid, drained sequence (a hint; the trace's ``meta['ring']`` is the truth),
  records dropped because the ring was full, closed flag.
* records, :data:`RECORD_WORDS` words each, record ``seq`` (1, 2, ...) in slot
  ``seq % capacity``: ``[seq, kind | hook << 8, 13 payload words, check]`` where ``check`` is the
  XOR of the 15 words before it and :data:`CHECK_SALT`: a torn or damaged record fails it.

Payloads by kind (string columns are ids into the trace's strings):

* :data:`CALL`: :data:`CALL_PAYLOAD` (the hook id rides in word 1).
* :data:`UPDATE`: ``t_start_ns, thread, t_done_ns, device_ns`` (an async completion).
* :data:`SPAN`: ``kind, name, t_start_ns, t_end_ns, step, thread``.
* :data:`COUNTER`: ``t_ns, name, value`` (the float's 8 bytes as an int64).
* :data:`ISSUED`: ``t_ns, step, grp, backend, seq, at`` (c10d's issued-collective count).

Nothing here imports torch.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.trace.outputs import create_file

#: First 8 bytes of a ring file.
MAGIC = b"WSPRING1"
VERSION = 1
HEADER_BYTES = 4096
RECORD_WORDS = 16
RECORD_BYTES = RECORD_WORDS * 8
#: XORed into every record's check word, so that an all-zero slot never checks.
CHECK_SALT = 0x5753_5052_4F46_2121  # "WSPROF!!"
#: Suffix of the ring file beside ``<host>-<pid>.wsprof``.
RING_SUFFIX = ".ring"

#: Default capacity in records (16 MiB of file at 128 bytes each); ``$WSPROF_RING_RECORDS``.
DEFAULT_CAPACITY = 131_072

# Header word indices.
H_MAGIC, H_VERSION, H_RECORD_BYTES, H_CAPACITY, H_HEADER_BYTES, H_PID = 0, 1, 2, 3, 4, 5
H_DRAINED, H_DROPPED, H_CLOSED = 6, 7, 8

# Record kinds (low byte of word 1).
CALL, UPDATE, SPAN, COUNTER, ISSUED = 1, 2, 3, 4, 5
KINDS = (CALL, UPDATE, SPAN, COUNTER, ISSUED)

#: Payload of a call record, words 2..14 (the trace's call columns without op/api/layer,
#: which the hook id stands for).
CALL_PAYLOAD = (
    "t_start_ns",
    "t_end_ns",
    "backend_ns",
    "n_backend",
    "thread",
    "bytes",
    "dtype",
    "grp",
    "is_async",
    "site",
    "step",
    "phase",
    "error",
)
PAYLOAD_WORDS = 13
assert len(CALL_PAYLOAD) == PAYLOAD_WORDS

_HEADER = struct.Struct("<8s8q")
_RECORD = struct.Struct(f"<{RECORD_WORDS}q")
_FLOAT = struct.Struct("<d")
_INT = struct.Struct("<q")


def ring_path(trace_path: str) -> str:
    """``<trace>.ring``: the ring file of a trace."""
    return trace_path + RING_SUFFIX


def float_word(value: float) -> int:
    """A float's 8 bytes as the int64 a counter record holds."""
    return int(_INT.unpack(_FLOAT.pack(value))[0])


def word_float(word: int) -> float:
    """Inverse of :func:`float_word`."""
    return float(_FLOAT.unpack(_INT.pack(word))[0])


def check_word(words: tuple[int, ...] | list[int]) -> int:
    """The check word of a record's first 15 words."""
    c = CHECK_SALT
    for w in words:
        c ^= w  # the XOR of int64 values is an int64 value: no wrapping needed
    return c


def capacity_for(records: int) -> int:
    """``records`` rounded up to a power of two, at least 1,024.

    Raises:
        ValueError: ``records`` is not positive.
    """
    if records < 1:
        raise ValueError(f"a ring holds at least one record, not {records}")
    return max(1024, 1 << (int(records) - 1).bit_length())


def create(path: str, capacity: int, pid: int) -> int:
    """Create a ring file of ``capacity`` records, user-only (0600), with its header:
    exclusively (:func:`wsprof.trace.outputs.create_file`), never over a file or through a link
    already at ``path``.

    The file's blocks are allocated here (where the file system can): a full disk fails the
    creation, never a hook's write into the mapping (SIGBUS).

    Returns:
        An open read-write file descriptor (the caller maps and closes it).

    Raises:
        FileExistsError: ``path`` exists (or is a link); OSError: the file cannot be created or
        sized; ValueError: capacity not a power of two.
    """
    if capacity < 1 or capacity & (capacity - 1):
        raise ValueError(f"ring capacity must be a power of two, not {capacity}")
    fd = create_file(path, os.O_RDWR)
    try:
        size = HEADER_BYTES + capacity * RECORD_BYTES
        os.ftruncate(fd, size)
        # Reserve the file's blocks now: a write to a mapped page the disk has no room for
        # kills the process with SIGBUS; a full disk must fail here (no trace), not mid-run.
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP):  # no fallocate: stays sparse
                raise
        os.pwrite(
            fd, _HEADER.pack(MAGIC, VERSION, RECORD_BYTES, capacity, HEADER_BYTES, pid, 0, 0, 0), 0
        )
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class RingTail:
    """Records recovered from a ring file after the trace's last drain.

    ``words`` is an ``(n, 16)`` int64 matrix in sequence order; ``problems`` holds one line per
    kind of damage found (torn or damaged records, a truncated file), empty when none.
    """

    words: npt.NDArray[np.int64]
    dropped: int = 0
    closed: bool = False
    problems: list[str] = field(default_factory=list)
    #: sequence numbers after the drained one that are missing (torn, damaged, overwritten)
    missing: int = 0


def write_header_counts(mm: Any, drained: int, dropped: int, closed: bool = False) -> None:
    """Update the header's drained hint, dropped count and closed flag (the writer thread)."""
    struct.pack_into("<3q", mm, _HEADER.size - 3 * 8, drained, dropped, int(closed))


def checks(m: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Whether each row of an ``(n, 16)`` record matrix passes its check word."""
    c = np.full(len(m), CHECK_SALT, dtype=np.int64)
    for j in range(RECORD_WORDS - 1):
        c ^= m[:, j]
    ok: npt.NDArray[np.bool_] = c == m[:, RECORD_WORDS - 1]
    return ok


#: Records read at a time by :func:`read_tail` (1 MiB of file).
READ_BLOCK_RECORDS = 8192


def _data_from(fd: int, offset: int, end: int) -> int:
    """The first offset at or after ``offset`` that holds data (``SEEK_DATA``): the holes of a
    sparse file (never-written slots: all zeros) are skipped without reading them. ``end`` when
    no data follows; ``offset`` where the file system cannot tell."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return offset
    try:
        return min(os.lseek(fd, offset, seek_data), end)
    except OSError as e:
        return end if e.errno == errno.ENXIO else offset


def read_tail(path: str, drained: int) -> RingTail:
    """Records of the ring file at ``path`` with a sequence number above ``drained``.

    Read in blocks of :data:`READ_BLOCK_RECORDS` (holes of a sparse file skipped): memory is
    one block plus the records kept, whatever capacity the header claims; a header claiming
    more records than the file holds is read as far as the file goes.

    Never raises for damage: a missing or short header, a truncated file, torn or corrupt
    records give fewer records and a line in :attr:`RingTail.problems`.

    Args:
        path: a ring file (``<trace>.ring``).
        drained: the last sequence number the trace holds (``meta['ring']['drained']``).
    """
    empty = np.zeros((0, RECORD_WORDS), dtype=np.int64)
    try:
        # O_NONBLOCK: a FIFO put at the name is not waited on (no effect on a regular file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return RingTail(empty, problems=[f"{path}: cannot read the ring file ({e})"])
    try:
        return _read_tail(fd, path, drained)
    except OSError as e:
        return RingTail(empty, problems=[f"{path}: cannot read the ring file ({e})"])
    finally:
        os.close(fd)


def _read_tail(fd: int, path: str, drained: int) -> RingTail:
    empty = np.zeros((0, RECORD_WORDS), dtype=np.int64)
    st = os.fstat(fd)
    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
    head = os.pread(fd, _HEADER.size, 0) if size >= _HEADER.size else b""
    if len(head) < _HEADER.size:
        return RingTail(
            empty,
            problems=[
                f"{path}: ring file too short for its header ({size} bytes); nothing "
                "recovered from it"
            ],
        )
    magic, version, rec_bytes, cap, hdr, _pid, _hint, dropped, closed = _HEADER.unpack(head)
    if (
        magic != MAGIC
        or version != VERSION
        or rec_bytes != RECORD_BYTES
        or hdr != HEADER_BYTES
        or cap < 1
        or cap & (cap - 1)
    ):
        return RingTail(
            empty,
            problems=[
                f"{path}: not a wsprof ring file of this version (damaged header); nothing "
                "recovered from it"
            ],
        )
    problems: list[str] = []
    avail = max(0, (size - HEADER_BYTES) // RECORD_BYTES)
    if avail < cap:
        problems.append(
            f"{path}: ring file truncated ({size} of {HEADER_BYTES + cap * RECORD_BYTES} bytes)"
        )
    n = min(avail, cap)
    end = HEADER_BYTES + n * RECORD_BYTES
    kept: list[npt.NDArray[np.int64]] = []
    bad = 0
    slot0 = 0
    while slot0 < n:
        # jump over a hole to the block holding the next data
        at = _data_from(fd, HEADER_BYTES + slot0 * RECORD_BYTES, end)
        slot0 = max(slot0, (at - HEADER_BYTES) // RECORD_BYTES)
        if slot0 >= n:
            break
        count = min(READ_BLOCK_RECORDS, n - slot0)
        raw = os.pread(fd, count * RECORD_BYTES, HEADER_BYTES + slot0 * RECORD_BYTES)
        count = len(raw) // RECORD_BYTES  # the file shrank meanwhile: what was read
        if count == 0:
            break
        m = np.frombuffer(raw, dtype="<i8", count=count * RECORD_WORDS).reshape(count, RECORD_WORDS)
        seq = m[:, 0]
        written = seq != 0
        if written.any():
            slot = np.arange(slot0, slot0 + count, dtype=np.int64)
            ok = written & checks(m) & ((seq & (cap - 1)) == slot) & np.isin(m[:, 1] & 0xFF, KINDS)
            bad += int((written & ~ok).sum())
            take = ok & (seq > drained)
            if take.any():
                kept.append(m[take].astype(np.int64, copy=False))
        slot0 += count
    keep = np.concatenate(kept) if kept else empty
    keep = keep[np.argsort(keep[:, 0], kind="stable")]
    missing = 0
    if len(keep):
        missing = int(keep[-1, 0] - drained - len(keep))
    if bad:
        problems.append(f"{path}: {bad} damaged or torn record(s) in the ring file skipped")
    return RingTail(
        keep, dropped=int(dropped), closed=bool(closed), problems=problems, missing=max(0, missing)
    )


@dataclass
class Decoded:
    """Ring records as the rows the trace writer takes."""

    #: ``(n, 14)`` raw call rows in recorder order (:data:`CALL_PAYLOAD` plus hook id at 5)
    calls: npt.NDArray[np.int64]
    #: ``(n, 4)``: t_start_ns, thread, t_done_ns, device_ns (``call_updates`` order)
    updates: npt.NDArray[np.int64]
    spans: list[tuple[Any, ...]]
    counters: list[tuple[Any, ...]]
    issued: list[tuple[Any, ...]]


def decode(words: npt.NDArray[np.int64], strings: Mapping[int, str] | Sequence[str]) -> Decoded:
    """Split an ``(n, 16)`` record matrix by kind into trace rows.

    Calls stay integer rows (hook id at column 5, as the recorder's
    ``RAW_CALL_COLUMNS``); spans, counters and issued readings get their strings back from
    ``strings`` (id -> text; an unknown id reads ``?<id>``, -1 is None).
    """
    kind = words[:, 1] & 0xFF
    c = words[kind == CALL]
    # RAW_CALL_COLUMNS: t_start, t_end, backend_ns, n_backend, thread, hook, bytes, ...
    calls = (
        np.concatenate([c[:, 2:7], (c[:, 1] >> 8)[:, None], c[:, 7:15]], axis=1)
        if len(c)
        else np.zeros((0, 14), dtype=np.int64)
    )

    def s(i: int) -> str | None:
        if i < 0:
            return None
        try:
            return strings[i]
        except (IndexError, KeyError):
            return f"?{i}"

    # One completion per async call: kept as a matrix (a Python row each costs about 2 µs).
    updates = np.ascontiguousarray(words[kind == UPDATE][:, 2:6])
    spans = [
        (s(int(r[2])), s(int(r[3])), int(r[4]), int(r[5]), int(r[6]), int(r[7]))
        for r in words[kind == SPAN]
    ]
    counters = [(int(r[2]), s(int(r[3])), word_float(int(r[4]))) for r in words[kind == COUNTER]]
    issued = [
        (int(r[2]), int(r[3]), s(int(r[4])), s(int(r[5])), int(r[6]), s(int(r[7])))
        for r in words[kind == ISSUED]
    ]
    return Decoded(calls, updates, spans, counters, issued)
