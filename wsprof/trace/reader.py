"""Reads trace files and run folders into :class:`~wsprof.trace.model.ProcessTrace`.

Every failure is an :class:`~wsprof.errors.InputError` whose message says what is wrong
with which file and what to do; nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.contracts.events import parse_event
from wsprof.contracts.overhead import self_overhead_from_meta
from wsprof.errors import InputError, quote
from wsprof.trace import salvage, untrusted
from wsprof.trace.chunks import inflate, unpack_columns
from wsprof.trace.model import (
    CALL_COLUMNS,
    CALL_STRING_COLUMNS,
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    TRACE_SUFFIX,
    CallTable,
    CallTotals,
    IssuedReading,
    ProcessTrace,
    RecordedIssued,
    SampleWindow,
    Site,
    Span,
)

#: String columns of a call that always hold a value (capture interns a ``str`` for each; the
#: others of :data:`CALL_STRING_COLUMNS` may be None): analysis sorts and groups by them.
_REQUIRED_STRING_COLUMNS = frozenset({"op", "api", "layer"})


def find_traces(path: str) -> list[str]:
    """Trace files at ``path``: the file itself, or every ``*.wsprof`` in a run folder.

    Raises:
        InputError: the path does not exist, or a folder holds no trace.
    """
    if not os.path.exists(path):
        raise InputError(
            f"{path}: no such file or folder; give a run folder, a .wsprof trace, "
            "a .csv series or a training log"
        )
    if os.path.isdir(path):
        try:
            names = os.listdir(path)
        except OSError as e:
            raise InputError(
                f"{path}: cannot list the folder ({e.strerror}); check permissions"
            ) from e
        found = sorted(os.path.join(path, n) for n in names if n.endswith(TRACE_SUFFIX))
        if not found:
            raise InputError(
                f"{path}: folder holds no {TRACE_SUFFIX} trace and no Flight Recorder dump; point "
                "at a run folder written by wsprof (WSPROF_OUT), one trace file, or a folder of "
                "TORCH_FR_DUMP_TEMP_FILE dumps"
            )
        return found
    return [path]


#: What to do about a trace that cannot be read, said after every such error.
_REREAD_HINT = "the other traces of its run folder are still read; re-record to get this one back"
#: What to do about a file that is not a trace at all.
_NOT_A_TRACE_HINT = "give a run folder written by wsprof, a .wsprof trace or a .csv series"
#: What to do about a trace whose content wsprof never writes (edited, or made to attack).
_NOT_OURS_HINT = "it was not written by wsprof or was edited: not read"


#: The first 16 bytes of every SQLite file.
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite(path: str) -> bool:
    """Whether ``path`` is a file that starts like an SQLite file (a wsprof trace); False when
    it is not a file or cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def require_trace_file(path: str) -> None:
    """Raise unless ``path`` is a folder, a missing path (answered later) or an empty or SQLite
    file: the one-line answer to any other file given where traces are read.

    Raises:
        InputError: a non-empty file that is not SQLite.
    """
    if os.path.isfile(path) and os.path.getsize(path) > 0 and not is_sqlite(path):
        raise InputError(
            f"{path}: neither a wsprof trace nor a CSV series (first column 'step'); "
            "give a run folder, a .wsprof trace or a .csv file"
        )


def _check_header(path: str) -> None:
    """Refuse, in one line, a file that cannot be an intact SQLite trace by its first bytes.

    Raises:
        InputError: unreadable, empty, not SQLite, or not a whole number of pages.
    """
    try:
        with open(path, "rb") as fh:
            header = fh.read(18)
            size = os.fstat(fh.fileno()).st_size
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror}); check permissions") from e
    if not header:
        raise InputError(
            f"{path}: empty file (0 bytes); a trace whose process never flushed, or not a "
            f"trace: {_NOT_A_TRACE_HINT}"
        )
    magic = header[:16]
    if magic != SQLITE_MAGIC:
        raise InputError(f"{path}: not a wsprof trace (not an SQLite file); {_NOT_A_TRACE_HINT}")
    # An SQLite file is whole pages (page size: bytes 16-17 big-endian, 1 meaning 65536); a
    # partial last page is a cut that SQLite itself may not notice when that page is unused.
    page = int.from_bytes(header[16:18], "big") if len(header) == 18 else 0
    page = 65536 if page == 1 else page
    if page >= 512 and size % page:
        raise InputError(
            f"{path}: corrupt or truncated trace ({size} bytes is not a whole number of "
            f"{page}-byte pages); {_REREAD_HINT}"
        )


@contextlib.contextmanager
def _as_input_error(path: str) -> Iterator[None]:
    """Every way reading ``path``'s SQLite can fail, as one :class:`InputError` line."""
    try:
        yield
    except sqlite3.OperationalError as e:
        if str(e) == "interrupted":  # the progress handler of untrusted.harden
            raise InputError(
                f"{path}: a query on this trace ran past its budget "
                f"({untrusted.OPS_PER_BYTE} SQLite instructions a byte); {_NOT_OURS_HINT}"
            ) from e
        if "too big" in str(e):  # a value over untrusted.MAX_VALUE_BYTES
            raise InputError(
                f"{path}: a value in this trace is over "
                f"{untrusted.MAX_VALUE_BYTES >> 20} MiB ({e}); {_NOT_OURS_HINT}"
            ) from e
        raise InputError(f"{path}: corrupt or truncated trace ({e}); {_REREAD_HINT}") from e
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise InputError(f"{path}: corrupt or truncated trace ({e}); {_REREAD_HINT}") from e
    except MemoryError as e:
        raise InputError(
            f"{path}: reading this trace ran out of memory; {_NOT_OURS_HINT}, or read it "
            "on a machine with more memory"
        ) from e
    except zlib.error as e:
        raise InputError(
            f"{path}: corrupt trace (a call chunk does not decompress: {e}); {_REREAD_HINT}"
        ) from e
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, RecursionError) as e:
        # A value of the wrong type or range where the schema says otherwise: the file was
        # damaged, edited, or written by another program.
        detail = " ".join(str(e).split())[:160]
        raise InputError(
            f"{path}: malformed trace ({type(e).__name__}: {detail}); it was not written by "
            f"this wsprof or was edited: {_REREAD_HINT}"
        ) from e


def read_trace(path: str) -> ProcessTrace:
    """Read one trace file.

    Args:
        path: a ``.wsprof`` file.

    Returns:
        The process's calls (columnar), sites, spans, counters (name -> (t_ns, value) arrays),
        events and py-spy sample windows.

    Raises:
        InputError: missing, empty, not SQLite, corrupt or truncated, or another schema version.
    """
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file; give a run folder or a .wsprof trace")
    _check_header(path)
    with contextlib.ExitStack() as stack:
        try:
            db = stack.enter_context(untrusted.open_snapshot(path))
        except sqlite3.Error as e:
            raise InputError(f"{path}: corrupt or truncated trace ({e}); {_REREAD_HINT}") from e
        except OSError as e:
            raise InputError(
                f"{path}: cannot copy the trace and its -wal/-journal to read them "
                f"({e.strerror or e}); try again"
            ) from e
        with _as_input_error(path):
            # One read transaction: a trace still being written (and thinned) is read as one
            # consistent snapshot, not strings from before a flush and calls from after it.
            db.execute("BEGIN")
            meta = _meta(db, path)
            end = salvage.end_of(meta)
            recovered: dict[str, Any] | None = None
            if end in ("live", "killed"):
                # Not closed: the ring and the journal hold what the trace has not received.
                mem, recovered = salvage.salvage(db, path, meta)
                stack.callback(mem.close)
                db = mem
            trace = _read(db, path)
            trace.meta["end"] = {"state": end, **({"recovered": recovered} if recovered else {})}
            return trace
    raise AssertionError("unreachable")  # pragma: no cover - mypy: the with block returns


#: Tables an incremental read follows by rowid (meta and sites are read whole each time).
FOLLOWED_TABLES = (
    "strings",
    "call_chunks",
    "call_updates",
    "update_chunks",
    "spans",
    "counters",
    "events",
    "stacks",
    "samples",
    "call_totals",
    "issued",
)


@dataclass
class ReadCursor:
    """Where an incremental read of one trace stopped (:func:`read_since`).

    SQLite gives every row a rowid that grows as rows are appended; a read takes the rows
    between the last rowid it read (``seen``) and the table's largest rowid when its read
    transaction began (``upto``), so rows committed while it reads wait for the next read.

    Attributes:
        seen: table -> last rowid read.
        upto: table -> last rowid of the read in progress (set by :meth:`begin`).
        strings: every string read so far, by id (later rows name earlier strings).
        stacks: every py-spy stack read so far, by id.
    """

    seen: dict[str, int] = field(default_factory=dict)
    upto: dict[str, int] = field(default_factory=dict)
    strings: dict[int, str] = field(default_factory=dict)
    stacks: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def begin(self, db: sqlite3.Connection) -> None:
        """Take each followed table's largest rowid, inside ``db``'s read transaction."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self.upto = {
            t: int(db.execute(f"SELECT coalesce(max(rowid), 0) FROM {t}").fetchone()[0])
            for t in FOLLOWED_TABLES
            if t in tables
        }

    def commit(self) -> None:
        """The read in progress succeeded: the next one starts after it."""
        self.seen.update(self.upto)


def _after(since: ReadCursor | None, table: str) -> tuple[str, tuple[int, ...]]:
    """The ``WHERE`` clause (and its parameters) that selects the rows of ``table`` the read
    in progress takes: every row without a cursor, else those after the cursor."""
    if since is None:
        return "", ()
    return "WHERE rowid > ? AND rowid <= ?", (since.seen.get(table, 0), since.upto.get(table, 0))


def read_since(db: sqlite3.Connection, path: str, cursor: ReadCursor) -> ProcessTrace | None:
    """The rows of an open trace added since ``cursor``, as a :class:`ProcessTrace` of those
    rows alone (meta and sites whole; strings resolved against every string read so far).

    One read transaction: what a writer commits meanwhile is read next time. Only committed
    rows are read, so a trace being written is read up to its last flush; what a live
    process's capture buffer holds is read after its next flush (the recorder drains it
    every 0.5 s). The cursor moves only when the read succeeds.

    Args:
        db: an open connection to the trace (read-only is enough).
        path: the trace's path, for messages.
        cursor: where the previous read stopped; updated.

    Returns:
        The new rows; None while the file has no tables or no schema version yet (its writer
        is creating it).

    Raises:
        InputError: the trace is corrupt, truncated or of another schema version.
    """
    with _as_input_error(path):
        db.execute("BEGIN")
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if (
                "meta" not in tables
                or not db.execute("SELECT 1 FROM meta WHERE key='schema_version'").fetchone()
            ):
                return None
            cursor.begin(db)
            trace = _read(db, path, cursor)
        finally:
            db.rollback()
        cursor.commit()
        return trace


def _strings(db: sqlite3.Connection, since: ReadCursor | None) -> dict[int, str]:
    """Every string of the trace by id (a cursor's table, with the strings added since)."""
    if since is None:
        return dict(db.execute("SELECT id, value FROM strings").fetchall())
    top = max(since.strings, default=-1)
    since.strings.update(db.execute("SELECT id, value FROM strings WHERE id > ?", (top,)))
    return since.strings


def _read_calls(db: sqlite3.Connection, since: ReadCursor | None = None) -> CallTable:
    """Decode every call chunk (with ``since``: the chunks added after it), resolve string ids,
    join ``call_updates``; sorted by start."""
    strings = _strings(db, since)
    parts: dict[str, list[npt.NDArray[Any]]] = {c: [] for c in CALL_COLUMNS}
    where, args = _after(since, "call_chunks")
    for n_rows, columns, data in db.execute(
        f"SELECT n_rows, columns, data FROM call_chunks {where} ORDER BY id", args
    ):
        for name, col in unpack_columns(n_rows, columns, data, widen=False).items():
            parts[name].append(col)
    if not parts["t_start_ns"]:
        return CallTable.empty()
    # Column by column, each concatenated in its stored (narrow) type, widened, put in start
    # order, and its parts released: the peak stays near the finished table (10M calls: about
    # 1.3 GB) instead of three copies of every column.
    t_start = np.concatenate(parts.pop("t_start_ns")).astype(np.int64)
    order: npt.NDArray[np.int64] | None = None
    if len(t_start) > 1 and bool((t_start[1:] < t_start[:-1]).any()):
        order = np.argsort(t_start, kind="stable")
        t_start = t_start[order]
    out: dict[str, Any] = {"t_start_ns": t_start}
    # String ids are small (0..len(strings)-1, -1 for None): one lookup array indexed by id+1.
    top = max(strings) if strings else -1
    if top >= 2 * len(strings) + 1024:
        raise ValueError(f"string ids are not dense (largest {top}, {len(strings)} strings)")
    lookup = np.empty(top + 2, dtype=object)
    lookup[0] = None
    for i, v in strings.items():
        if int(i) < 0:
            raise ValueError(f"negative string id {i}")
        lookup[int(i) + 1] = str(v)
    known = np.zeros(top + 2, dtype=bool)
    known[0] = True
    known[[int(i) + 1 for i in strings]] = True
    for name in CALL_COLUMNS:
        if name == "t_start_ns":
            continue
        col = np.concatenate(parts.pop(name))
        if order is not None:
            col = col[order]
        if name in CALL_STRING_COLUMNS:
            if len(col) and (int(col.min()) < -1 or int(col.max()) > top):
                raise ValueError(f"a string id of column {name!r} is not in strings")
            idx = col.astype(np.int64) + 1
            if not known[idx].all():
                raise ValueError(f"a string id of column {name!r} is not in strings")
            if name in _REQUIRED_STRING_COLUMNS and len(col) and int(col.min()) == -1:
                raise ValueError(f"a call has no {name!r} (string id -1)")
            out[name] = lookup[idx]
        elif name == "is_async":
            out[name] = col != 0
        else:
            out[name] = col.astype(np.int64, copy=False)
    table = CallTable(**out)
    _join_updates(db, table, since)
    return table


def _join_updates(
    db: sqlite3.Connection, table: CallTable, since: ReadCursor | None = None
) -> None:
    """Apply ``call_updates`` (async completion, device time) to the calls they name (with
    ``since``: the updates added after it, to the calls read with them)."""
    where, args = _after(since, "call_updates")
    rows = db.execute(
        f"SELECT t_start_ns, thread, t_done_ns, device_ns FROM call_updates {where}", args
    ).fetchall()
    parts = [
        np.array([[-1 if v is None else v for v in r] for r in rows], dtype=np.int64).reshape(-1, 4)
    ]
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "update_chunks" in tables:
        where, args = _after(since, "update_chunks")
        for n_rows, data in db.execute(
            f"SELECT n_rows, data FROM update_chunks {where} ORDER BY id", args
        ):
            if int(n_rows) < 0:
                raise ValueError(f"an update chunk of {quote(n_rows)} rows")
            raw = inflate(data, int(n_rows) * 32, "an update chunk")
            parts.append(np.frombuffer(raw, dtype="<i8").reshape(-1, 4).astype(np.int64))
    m = np.concatenate(parts)
    if not len(m) or not len(table):
        return
    # Vectorised (a run of async calls has one update per call; a Python loop per update cost
    # about 5 µs each). NULL is -1: a start or thread that names no call, a time unknown.
    t0, thread, t_done, device = m[:, 0], m[:, 1], m[:, 2], m[:, 3]
    starts, threads = table.t_start_ns, table.thread
    lo = np.searchsorted(starts, t0, side="left")
    hi = np.searchsorted(starts, t0, side="right")
    first = np.minimum(lo, len(starts) - 1)
    idx = np.where((hi > lo) & (threads[first] == thread), first, -1)
    # Several calls starting in the same ns: the first one on the update's thread.
    for u in np.flatnonzero((idx < 0) & (hi - lo > 1)).tolist():
        for i in range(int(lo[u]) + 1, int(hi[u])):
            if threads[i] == thread[u]:
                idx[u] = i
                break
    done = (idx >= 0) & (t_done >= 0)
    np.maximum.at(table.t_done_ns, idx[done], t_done[done])
    dev = (idx >= 0) & (device >= 0)
    # The last update of a call wins, as when they were applied one by one.
    last, pos = np.unique(idx[dev][::-1], return_index=True)
    table.device_ns[last] = device[dev][::-1][pos]


def _meta(db: sqlite3.Connection, path: str) -> dict[str, Any]:
    """The trace's meta table, JSON values decoded.

    Raises:
        InputError: no meta table (an SQLite file that is not a trace).
    """
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise InputError(
            f"{path}: SQLite file but not a wsprof trace (no meta table); {_NOT_A_TRACE_HINT}"
        )
    meta: dict[str, Any] = {}
    for k, v in db.execute("SELECT key, value FROM meta"):
        try:
            meta[k] = json.loads(v)
        except (TypeError, ValueError, RecursionError):
            meta[k] = v
    return meta


#: The longest py-spy frame kept (characters): a real frame (``function (file:line)``) is a
#: few hundred at most; a longer one is cut and ends in :data:`CUT_FRAME_MARK`, so that the
#: analysis of frames stays linear in what it reads, whatever a file holds.
MAX_FRAME_CHARS = 1024
#: Ends a frame cut to :data:`MAX_FRAME_CHARS`.
CUT_FRAME_MARK = "...[cut]"


def _cap_frames(frames: Any) -> tuple[str, ...]:
    """A ``stacks.frames`` JSON value as a stack: a list of strings, each cut to
    :data:`MAX_FRAME_CHARS`.

    Raises:
        ValueError: not a list of strings.
    """
    if not isinstance(frames, list) or not all(isinstance(f, str) for f in frames):
        raise ValueError(f"a py-spy stack is not a list of frames: {quote(frames)}")
    keep = MAX_FRAME_CHARS - len(CUT_FRAME_MARK)
    return tuple(f if len(f) <= MAX_FRAME_CHARS else f[:keep] + CUT_FRAME_MARK for f in frames)


def _read(db: sqlite3.Connection, path: str, since: ReadCursor | None = None) -> ProcessTrace:
    """The trace in ``db`` (with ``since``: only the rows added after the cursor, whose
    bounds :meth:`ReadCursor.begin` took in this read transaction; meta and sites whole)."""
    meta = _meta(db, path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "schema_version" not in meta:
        raise InputError(
            f"{path}: SQLite file but not a wsprof trace (no schema version in its meta "
            f"table); {_NOT_A_TRACE_HINT}"
        )
    version = meta["schema_version"]
    if version not in READABLE_SCHEMA_VERSIONS:
        raise InputError(
            f"{path}: trace schema version {quote(version)}, this wsprof reads versions "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))} (writes {SCHEMA_VERSION}); "
            "analyse it with the wsprof version that wrote it"
        )
    calls = _read_calls(db, since)
    sites = {
        int(r[0]): Site(int(r[0]), str(r[1]), int(r[2]), str(r[3]))
        for r in db.execute("SELECT id, file, line, function FROM sites")
    }
    where, args = _after(since, "spans")
    spans = [
        Span(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]))
        for r in db.execute(
            f"SELECT kind, name, t_start_ns, t_end_ns, step, thread FROM spans {where} "
            "ORDER BY t_start_ns",
            args,
        )
    ]
    counters: dict[str, tuple[Any, Any]] = {}
    by_name: dict[str, list[tuple[int, float]]] = {}
    where, args = _after(since, "counters")
    for t, name, value in db.execute(
        f"SELECT t_ns, name, value FROM counters {where} ORDER BY t_ns", args
    ):
        # SQLite stores NaN as NULL: keep it as NaN (analysis drops non-finite samples).
        by_name.setdefault(str(name), []).append(
            (int(t), float("nan") if value is None else float(value))
        )
    for name, pts in by_name.items():
        counters[name] = (
            np.array([p[0] for p in pts], dtype=np.int64),
            np.array([p[1] for p in pts], dtype=np.float64),
        )
    where, args = _after(since, "events")
    events = [
        parse_event(int(r[0]), str(r[1]), str(r[2]))
        for r in db.execute(f"SELECT t_ns, kind, detail FROM events {where} ORDER BY t_ns", args)
    ]
    where, args = _after(since, "stacks")
    stacks = {
        int(i): _cap_frames(json.loads(f))
        for i, f in db.execute(f"SELECT id, frames FROM stacks {where}", args)
    }
    if since is not None:
        since.stacks.update(stacks)
        stacks = since.stacks
    where, args = _after(since, "samples")
    samples = [
        SampleWindow(int(a), int(b), int(pid), int(tid), stacks.get(int(s), ()), int(c))
        for a, b, pid, tid, s, c in db.execute(
            f"SELECT t_start_ns, t_end_ns, pid, tid, stack, count FROM samples {where} "
            "ORDER BY t_start_ns",
            args,
        )
    ]
    totals = _read_totals(db, since) if "call_totals" in tables else None
    issued, recorded = _read_audit(db, tables, since)
    return ProcessTrace(
        path,
        meta,
        calls,
        sites,
        spans,
        counters,
        events,
        samples,
        totals,
        issued,
        recorded,
        self_overhead_from_meta(meta),
    )


def _read_audit(
    db: sqlite3.Connection, tables: set[str], since: ReadCursor | None = None
) -> tuple[list[IssuedReading] | None, list[RecordedIssued] | None]:
    """The coverage audit's two sides: c10d's readings and what the hooks saw issued per
    (step, group, op, layer); (None, None) for a trace written before the audit (schema < 4)."""
    if "issued" not in tables or "call_totals" not in tables:
        return None, None
    columns = {r[1] for r in db.execute("PRAGMA table_info(call_totals)")}
    if not {"grp", "n_backend"} <= columns:
        return None, None
    where, args = _after(since, "issued")
    readings = [
        IssuedReading(int(t), int(step), str(g), None if b is None else str(b), int(seq), str(at))
        for t, step, g, b, seq, at in db.execute(
            f"SELECT t_ns, step, grp, backend, seq, at FROM issued {where} ORDER BY t_ns", args
        )
    ]
    strings = _strings(db, since)
    where, args = _after(since, "call_totals")
    recorded = [
        RecordedIssued(
            int(step),
            None if g is None or g < 0 else str(strings.get(g, g)),
            str(strings.get(op, op)),
            str(strings.get(layer, layer)),
            int(n or 0),
            int(k or 0),
            str(strings.get(api, api)),
        )
        for step, g, op, api, layer, n, k in db.execute(
            "SELECT step, grp, op, api, layer, sum(n_backend), sum(n) FROM call_totals "
            f"{where} GROUP BY step, grp, op, api, layer ORDER BY step",
            args,
        )
    ]
    return readings, recorded


def _read_totals(db: sqlite3.Connection, since: ReadCursor | None = None) -> CallTotals:
    """``call_totals`` summed per (step, op, api, layer), string ids resolved."""
    strings = _strings(db, since)
    where, args = _after(since, "call_totals")
    rows = db.execute(
        "SELECT step, op, api, layer, sum(n), sum(duration_ns), sum(between_layers_ns), "
        f"sum(bytes), max(max_duration_ns) FROM call_totals {where} GROUP BY step, op, api, "
        "layer ORDER BY step",
        args,
    ).fetchall()
    cols = list(zip(*rows)) if rows else [()] * 9

    def text(col: tuple[Any, ...], name: str) -> npt.NDArray[np.object_]:
        out = np.empty(len(col), dtype=object)
        for i, v in enumerate(col):
            if v not in strings:
                raise ValueError(
                    f"call_totals column {name!r} names string id {quote(v)}, "
                    "which is not in strings"
                )
            out[i] = str(strings[v])
        return out

    def num(col: tuple[Any, ...]) -> npt.NDArray[np.int64]:
        return np.array([int(v) for v in col], dtype=np.int64)

    return CallTotals(
        step=num(cols[0]),
        op=text(cols[1], "op"),
        api=text(cols[2], "api"),
        layer=text(cols[3], "layer"),
        n=num(cols[4]),
        duration_ns=num(cols[5]),
        between_layers_ns=num(cols[6]),
        bytes=num(cols[7]),
        max_duration_ns=num(cols[8]),
    )


def _ordered(traces: list[ProcessTrace]) -> list[ProcessTrace]:
    """By rank (unknown last), then pid."""

    def key(t: ProcessTrace) -> tuple[int, int]:
        pid = t.meta.get("pid")
        return (t.rank if t.rank is not None else 1 << 30, pid if isinstance(pid, int) else 0)

    return sorted(traces, key=key)


def read_run_lenient(path: str) -> tuple[list[ProcessTrace], list[str]]:
    """Like :func:`read_run`, but a run folder with some unreadable traces (a rank killed
    mid-write) is still read: the bad ones are skipped and described.

    Returns:
        (traces, one line per skipped trace).

    Raises:
        InputError: no trace at all could be read (the first problem is named).
    """
    traces: list[ProcessTrace] = []
    problems: list[InputError] = []
    for p in find_traces(path):
        try:
            traces.append(read_trace(p))
        except InputError as e:
            problems.append(e)
    if len(problems) > 1 and not traces:
        raise InputError(
            f"{path}: none of its {len(problems)} traces could be read (the first: {problems[0]})"
        ) from problems[0]
    if not traces:
        raise problems[0]
    return _ordered(traces), [f"skipped {e}" for e in problems]


def read_run(path: str) -> list[ProcessTrace]:
    """Read every trace of a run folder (or one trace file), ordered by rank then pid.

    Raises:
        InputError: see :func:`find_traces` and :func:`read_trace`.
    """
    return _ordered([read_trace(p) for p in find_traces(path)])
