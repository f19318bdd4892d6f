"""torch's Flight Recorder dumps, read as plain data and nothing else.

c10d keeps a ring of every collective it issues (the Flight Recorder: on by default, 2,000
entries per process, ``TORCH_FR_BUFFER_SIZE``), C++-issued ones included (DDP's reducer).
``torch._C._distributed_c10d._dump_fr_trace()`` returns it as a pickle, ``_dump_fr_trace_json()``
as JSON, and a job with ``TORCH_FR_DUMP_TEMP_FILE=<prefix>`` gets one such file per rank,
``<prefix><rank>``, when NCCL's watchdog sees a hang or timeout. This module turns either form
into :class:`FlightDump` (capture reads its own process's recorder with it,
:mod:`wsprof.capture.flight`; ``wsprof analyze DIR`` reads a folder of dumps,
:mod:`wsprof.trace.flight_dumps`).

**Unpickling a file is running code.** A dump is read by :class:`_PlainUnpickler`, which
refuses every global lookup (``find_class``) and persistent id: only the opcodes for None,
booleans, numbers, strings, bytes, lists, tuples and dicts remain, which is all a real dump
uses (torch writes ``pickle.dumps`` of a dict of those). A file that names any class or
function is refused in one line and nothing in it runs. What it holds is then checked field by
field (:func:`parse`): a value of the wrong type is that entry's problem, counted and skipped,
never an exception; sizes and counts are bounded (:data:`MAX_FILE_BYTES`,
:data:`MAX_ENTRIES`, :data:`MAX_TENSORS`).

Times: ``time_created_ns`` and ``time_discovered_*_ns`` are wall-clock ns (c10d's
``getTime()``, the system clock) and stay so here (``*_wall_ns``); capture converts them to its
monotonic clock. Source of the format: torch ``torch/csrc/distributed/c10d/FlightRecorder*.hpp``
and ``torch/distributed/flight_recorder/components/types.py`` (version ``2.x``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import pickle
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from wsprof.contracts.ops import flight_op
from wsprof.errors import InputError, quote

#: The largest dump file read (bytes): 2,000 entries without stack traces take about 1 MB, a
#: 100,000-entry buffer with stacks a few hundred MB.
MAX_FILE_BYTES = 256 << 20
#: Entries read from one dump; the rest are counted in :attr:`FlightDump.skipped`.
MAX_ENTRIES = 1_000_000
#: Tensors per entry whose sizes are read (a coalesced op lists one per tensor).
MAX_TENSORS = 4_096
#: Dimensions per tensor read.
MAX_DIMS = 16
#: Process groups read from ``pg_config``/``pg_status``.
MAX_GROUPS = 65_536

#: c10's scalar type names (``input_dtypes``) -> (torch dtype name, bytes per element).
C10_DTYPES: dict[str, tuple[str, int]] = {
    "Float": ("torch.float32", 4),
    "Double": ("torch.float64", 8),
    "Half": ("torch.float16", 2),
    "BFloat16": ("torch.bfloat16", 2),
    "Long": ("torch.int64", 8),
    "Int": ("torch.int32", 4),
    "Short": ("torch.int16", 2),
    "Char": ("torch.int8", 1),
    "Byte": ("torch.uint8", 1),
    "Bool": ("torch.bool", 1),
    "ComplexFloat": ("torch.complex64", 8),
    "ComplexDouble": ("torch.complex128", 16),
    "ComplexHalf": ("torch.complex32", 4),
    "Float8_e4m3fn": ("torch.float8_e4m3fn", 1),
    "Float8_e5m2": ("torch.float8_e5m2", 1),
    "Float8_e4m3fnuz": ("torch.float8_e4m3fnuz", 1),
    "Float8_e5m2fnuz": ("torch.float8_e5m2fnuz", 1),
    "UInt16": ("torch.uint16", 2),
    "UInt32": ("torch.uint32", 4),
    "UInt64": ("torch.uint64", 8),
}

_RANK_IN_NAME = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")
_INTS = re.compile(r"-?\d+")


@dataclass(frozen=True, slots=True)
class FlightEntry:
    """One collective or point-to-point op c10d issued, as its Flight Recorder kept it.

    Attributes:
        record_id: the entry's number in this process's recorder (counts on when the ring
            overwrites: a gap is entries lost).
        group: the process group's name (``pg.group_name``, what wsprof's ``grp`` holds).
        group_desc: its description (``default_pg``, ``undefined``, a user's ``group_desc``).
        pg_id: c10d's id of the group in this process.
        thread: the issuing thread's id (``threading.get_ident()`` of it); -1 unknown.
        collective_seq: the group's collective number, the same on every rank for the same
            collective (0 for point-to-point ops).
        p2p_seq: the group's point-to-point number (0 for collectives).
        profiling_name: ``<backend>:<op>`` as c10d named it (``nccl:all_reduce``).
        op: wsprof's canonical op for it (:func:`wsprof.contracts.ops.flight_op`).
        created_wall_ns: wall-clock ns when it was enqueued.
        started_wall_ns: wall-clock ns when its kernel was seen started (NCCL); None unknown.
        completed_wall_ns: wall-clock ns when it was seen completed (NCCL); None unknown.
        duration_ms: device time from CUDA events (NCCL with ``TORCH_NCCL_ENABLE_TIMING=1``),
            ms; None unknown.
        bytes: payload bytes of its inputs (elements x element size); -1 unknown.
        dtype: the first input's torch dtype name (``torch.float32``); None unknown.
        state: ``scheduled`` | ``started`` | ``completed``.
        retired: the work object completed and was released.
        timeout_ms: the op's timeout, ms; -1 unknown.
        is_p2p: a send or recv.
    """

    record_id: int
    group: str
    group_desc: str
    pg_id: int
    thread: int
    collective_seq: int
    p2p_seq: int
    profiling_name: str
    op: str
    created_wall_ns: int
    started_wall_ns: int | None
    completed_wall_ns: int | None
    duration_ms: float | None
    bytes: int
    dtype: str | None
    state: str
    retired: bool
    timeout_ms: int
    is_p2p: bool

    @property
    def backend(self) -> str:
        """The backend that issued it (``nccl``, ``gloo``), from the profiling name."""
        head, sep, _ = self.profiling_name.partition(":")
        return head if sep else ""


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """c10d's progress on one group: the last collective numbers enqueued, started (-1:
    the backend does not say) and completed."""

    last_enqueued: int
    last_started: int
    last_completed: int


@dataclass(frozen=True)
class FlightDump:
    """One process's Flight Recorder contents.

    Attributes:
        version: the dump format's version (``2.10``).
        entries: its entries in record order.
        ranks: group name -> the global ranks of the group (from ``pg_config``; empty when
            the dump does not list them).
        group_desc: group name -> description.
        status: pg id -> the group's progress (``pg_status``).
        skipped: entries or fields that were not plain data of the expected type (or over the
            bounds), not read.
        rank: the dump's rank, from its file name (``<prefix><rank>``); None when unknown.
        path: the file it came from ('' when read from memory).
        written_wall_ns: when the file was last written (its mtime), wall-clock ns: about
            when the dump was taken; None when read from memory.
    """

    version: str
    entries: tuple[FlightEntry, ...]
    ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    group_desc: dict[str, str] = field(default_factory=dict)
    status: dict[int, GroupStatus] = field(default_factory=dict)
    skipped: int = 0
    rank: int | None = None
    path: str = ""
    written_wall_ns: int | None = None


class _Refused(pickle.UnpicklingError):
    """A pickle asked for something a plain-data dump never holds (a class, a function, a
    persistent id)."""


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: any class or function lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"names {quote(f'{module}.{name}')}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("uses a persistent id")


#: Memory a file's decoding may take beyond what the process holds, per byte of the file (a real
#: pickle dump takes about 13 times its size as Python objects; a crafted one of empty
#: containers 100-250 times), and at least :data:`MIN_DECODE_BYTES`, at most
#: :data:`MAX_DECODE_BYTES`.
DECODE_BYTES_PER_FILE_BYTE = 24
MIN_DECODE_BYTES = 1 << 30
MAX_DECODE_BYTES = 8 << 30


@contextlib.contextmanager
def _memory_bound(n_bytes: int) -> Iterator[None]:
    """While decoding a file: the process's address space limited to what it maps now plus
    ``n_bytes`` (``RLIMIT_AS``), so that a crafted file fails with MemoryError instead of
    taking the machine; the previous limit is put back. Where the limit cannot be read or set,
    nothing is limited."""
    try:
        import resource

        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        want = mapped + n_bytes
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        if soft != resource.RLIM_INFINITY and soft <= want:
            raise OSError("already limited")
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (OSError, ValueError, ImportError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def loads(data: bytes, path: str = "", rank: int | None = None, after_id: int = -1) -> FlightDump:
    """A dump's bytes (pickle or JSON) as a :class:`FlightDump`.

    Args:
        data: what ``_dump_fr_trace()`` or ``_dump_fr_trace_json()`` returned, or a file's bytes.
        path: the file, for messages ('' for bytes read in memory).
        rank: the dump's rank when known.
        after_id: only entries with a larger ``record_id`` are parsed (a reader that took the
            others before: parsing is most of a read's cost).

    Raises:
        InputError: the bytes are neither a plain-data pickle nor JSON of a Flight Recorder
            dump (one line: what, and what to give instead).
    """
    where = path or "Flight Recorder dump"
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        with _memory_bound(_decode_budget(len(data))) if path else contextlib.nullcontext():
            obj = _decode(data, where)
    except MemoryError as e:
        raise InputError(
            f"{where}: decoding it would take over {_decode_budget(len(data)) >> 20} MiB of "
            f"memory for {len(data)} bytes, which no Flight Recorder dump does; not read"
        ) from e
    return parse(obj, path, rank, after_id)


_BOM = b"\xef\xbb\xbf"


def _decode_budget(n: int) -> int:
    return max(MIN_DECODE_BYTES, min(MAX_DECODE_BYTES, DECODE_BYTES_PER_FILE_BYTE * n))


def _decode(data: bytes, where: str) -> Any:
    """JSON or plain-data pickle -> Python objects (MemoryError passes through)."""
    if data.lstrip()[:1] in (b"{", b"["):
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:
            raise InputError(f"{where}: not valid JSON ({e}); give the dump torch wrote") from e
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _Refused as e:
        raise InputError(
            f"{where}: refused: the pickle {e}, which a Flight Recorder dump never does "
            "(reading it would run code); nothing in it was run. Give the dump torch wrote"
        ) from e
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            RecursionError, AttributeError, OverflowError) as e:  # fmt: skip
        raise InputError(
            f"{where}: not a readable pickle ({type(e).__name__}: {quote(str(e))}); give the "
            "dump torch wrote (TORCH_FR_DUMP_TEMP_FILE) or its JSON form"
        ) from e


def parse(obj: Any, path: str = "", rank: int | None = None, after_id: int = -1) -> FlightDump:
    """Check a loaded dump field by field (entries after ``after_id`` only, see :func:`loads`).

    Raises:
        InputError: ``obj`` is not a dict with an ``entries`` list and a ``version`` (not a
            Flight Recorder dump).
    """
    where = path or "Flight Recorder dump"
    # torch's JSON leaves out an empty 'entries' (a rank that issued nothing yet): a dump with
    # its version and 'pg_config' is still one, with no entries.
    raw = obj.get("entries", [] if "pg_config" in obj else None) if isinstance(obj, dict) else None
    if not isinstance(raw, list):
        raise InputError(
            f"{where}: not a Flight Recorder dump (no 'entries' list); give the files torch "
            "writes with TORCH_FR_DUMP_TEMP_FILE, one per rank"
        )
    version = obj.get("version")
    if not isinstance(version, str) or not version[:1].isdigit():
        raise InputError(f"{where}: not a Flight Recorder dump (version {quote(version)})")
    skipped = max(len(raw) - MAX_ENTRIES, 0)
    entries: list[FlightEntry] = []
    payloads = _Payloads()
    for e in raw[:MAX_ENTRIES]:
        if after_id >= 0 and isinstance(e, dict):
            rid = e.get("record_id")
            if isinstance(rid, int) and rid <= after_id:
                continue
        entry = _entry(e, payloads)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    ranks: dict[str, tuple[int, ...]] = {}
    desc: dict[str, str] = {}
    config = obj.get("pg_config")
    if isinstance(config, dict):
        for name, c in list(config.items())[:MAX_GROUPS]:
            if not isinstance(name, str) or not isinstance(c, dict):
                continue
            r = c.get("ranks")
            if isinstance(r, str):
                ranks[name] = tuple(int(x) for x in _INTS.findall(r[:1_000_000]))
            elif isinstance(r, list):
                ranks[name] = tuple(x for x in r if isinstance(x, int) and not isinstance(x, bool))
            d = c.get("desc")
            if isinstance(d, str):
                desc[name] = d[:200]
    if "" in ranks and "0" not in ranks:
        # gloo's dumps key the default group's config by '' (its entries name it '0')
        ranks["0"] = ranks.pop("")
    status: dict[int, GroupStatus] = {}
    pg_status = obj.get("pg_status")
    if isinstance(pg_status, dict):
        for k, s in list(pg_status.items())[:MAX_GROUPS]:
            pg = _int(k)
            if pg is None or not isinstance(s, dict):
                continue
            vals = [
                _int(s.get(f"last_{w}_collective")) for w in ("enqueued", "started", "completed")
            ]
            status[pg] = GroupStatus(*(-1 if v is None else v for v in vals))
    return FlightDump(version, tuple(entries), ranks, desc, status, skipped, rank, path)


def _int(v: Any) -> int | None:
    if type(v) is int:  # the common case first: a read parses thousands of these
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else None
    if isinstance(v, str) and 0 < len(v) <= 20:
        try:
            return int(v)
        except ValueError:
            return None
    return None


#: The latest wall-clock time read, ns (year 2116): room for adding durations in int64.
MAX_TIME_NS = 1 << 62
#: The longest device duration read, ms (a day).
MAX_DURATION_MS = 86_400_000.0


def _time(v: Any) -> int | None:
    """A wall-clock ns field: None, 0 (JSON's "unknown") and junk are unknown."""
    n = _int(v)
    return n if n is not None and 0 < n < MAX_TIME_NS else None


def _text(v: Any, limit: int = 200) -> str | None:
    return v[:limit] if isinstance(v, str) else None


#: Tensor dimensions one dump's parse may walk in all (a real dump walks a few per entry); past
#: it, payloads are unknown (-1). A pickle may reference one huge shape list from every entry.
MAX_DIMS_WALKED = 20_000_000


class _Payloads:
    """One parse's payloads: each shape list read once (a pickle's memo may give every
    entry the same list), within :data:`MAX_DIMS_WALKED`."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int], tuple[int, str | None]] = {}
        self.walked = 0

    def __call__(self, sizes: Any, dtypes: Any) -> tuple[int, str | None]:
        key = (id(sizes), id(dtypes))
        got = self.seen.get(key)
        if got is None:
            if self.walked > MAX_DIMS_WALKED:
                return -1, None
            got = self.seen[key] = _payload(sizes, dtypes, self)
        return got


def _payload(sizes: Any, dtypes: Any, budget: _Payloads) -> tuple[int, str | None]:
    """Bytes of the inputs (-1 when a size or dtype is unknown) and the first dtype."""
    if not isinstance(sizes, list) or not isinstance(dtypes, list):
        return -1, None
    first = dtypes[0] if dtypes and isinstance(dtypes[0], str) else None
    dtype = C10_DTYPES.get(first, (None, 0))[0] if first else None
    if len(sizes) > MAX_TENSORS or len(sizes) != len(dtypes):
        return -1, dtype
    total = 0
    for shape, dt in zip(sizes, dtypes, strict=True):
        item = C10_DTYPES.get(dt) if isinstance(dt, str) else None
        if item is None or not isinstance(shape, list) or len(shape) > MAX_DIMS:
            return -1, dtype
        budget.walked += len(shape) + 1
        n = 1
        for d in shape:
            if not isinstance(d, int) or isinstance(d, bool) or d < 0 or d >= 2**40:
                return -1, dtype
            n *= d
        total += n * item[1]
        if total >= 2**62:
            return -1, dtype
    return total, dtype


def _entry(e: Any, payloads: _Payloads) -> FlightEntry | None:
    """One entry, or None when a required field is missing or of the wrong type."""
    if not isinstance(e, dict):
        return None
    record_id, pg_id = _int(e.get("record_id")), _int(e.get("pg_id"))
    created = _time(e.get("time_created_ns"))
    name = _text(e.get("profiling_name"))
    pg = e.get("process_group")
    if (
        record_id is None
        or pg_id is None
        or created is None
        or name is None
        or not isinstance(pg, (list, tuple))
        or len(pg) != 2
        or not isinstance(pg[0], str)
    ):
        return None
    nbytes, dtype = payloads(e.get("input_sizes"), e.get("input_dtypes"))
    duration = e.get("duration_ms")
    if (
        isinstance(duration, bool)
        or not isinstance(duration, (int, float))
        or not math.isfinite(duration)
        or not 0 <= duration <= MAX_DURATION_MS
    ):
        duration = None
    thread = _int(e.get("thread_id"))
    return FlightEntry(
        record_id=record_id,
        group=pg[0][:200],
        group_desc=_text(pg[1]) or "",
        pg_id=pg_id,
        thread=-1 if thread is None else thread,
        collective_seq=_int(e.get("collective_seq_id")) or 0,
        p2p_seq=_int(e.get("p2p_seq_id")) or 0,
        profiling_name=name,
        op=flight_op(name),
        created_wall_ns=created,
        started_wall_ns=_time(e.get("time_discovered_started_ns")),
        completed_wall_ns=_time(e.get("time_discovered_completed_ns")),
        duration_ms=None if duration is None else float(duration),
        bytes=nbytes,
        dtype=dtype,
        state=_text(e.get("state"), 20) or "",
        retired=e.get("retired") is True,
        timeout_ms=_int(e.get("timeout_ms")) or -1,
        is_p2p=e.get("is_p2p") is True,
    )


def rank_from_name(path: str) -> int | None:
    """The rank in a dump file's name (``<prefix><rank>``, torch's naming); None without."""
    m = _RANK_IN_NAME.search(os.path.basename(path))
    return int(m.group(1)) if m and len(m.group(1)) <= 9 else None


def read_dump(path: str) -> FlightDump:
    """Read one dump file: a regular file, not a link, at most :data:`MAX_FILE_BYTES`; the
    file is only read.

    Raises:
        InputError: not readable, a link or not a regular file, too large, or not a plain
            Flight Recorder dump.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputError(
            f"{path}: cannot open ({e.strerror}); a dump is read only as a regular file, "
            "never through a link"
        ) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file; give the dump files torch wrote")
        if st.st_size > MAX_FILE_BYTES:
            raise InputError(
                f"{path}: {st.st_size} bytes, over the {MAX_FILE_BYTES >> 20} MiB a Flight "
                "Recorder dump is read up to; dump without stack traces"
            )
        chunks: list[bytes] = []
        left = MAX_FILE_BYTES + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        if left <= 0:
            raise InputError(f"{path}: grew past {MAX_FILE_BYTES >> 20} MiB while read")
    finally:
        os.close(fd)
    dump = loads(b"".join(chunks), path, rank_from_name(path))
    return dataclasses.replace(dump, written_wall_ns=st.st_mtime_ns)


def looks_like_dump(path: str) -> bool:
    """Whether ``path`` is a file that starts like a pickle (protocol 2+) or like the JSON of
    a dump: what tells a folder of Flight Recorder dumps from a run folder."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = os.read(fd, 4096)
    except OSError:
        return False
    finally:
        os.close(fd)
    if head[:1] == b"\x80" and len(head) > 2 and head[1] in range(2, 6):
        return True
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    return head.lstrip()[:1] == b"{" and any(
        k in head for k in (b'"entries"', b'"comm_lib_version"', b'"pg_config"')
    )
