"""slime's trainer communication timeline (JSONL, one file per process), read as a run.

slime writes it when asked (``--communication-timeline PATH`` or
``SLIME_COMMUNICATION_TIMELINE``; THUDM/slime ``slime/observability/communication_timeline.py``,
``weight_sync_trace.py``, docs ``communication_timeline.md``): one JSON object per line, in each
process's ``sequence_id`` order, for every span (``train_forward_backward``, ``grad_sync``,
``optimizer_step``, ``weight_convert``, ``weight_bucket_send``, ``engine_load_weights``) and
event (``weight_bucket_ready``, ``engine_bucket_receive``, ``weight_bucket_reusable``,
``weight_sync_complete``, ``weight_sync_failed``). Each carries ``run_id``, ``role``, ``rank``,
``pid``, the standard fields ``global_step``, ``rollout_id``, ``weight_version``, ``bucket_id``,
``message_bytes``, ``transport`` (null where they do not apply), the wall and monotonic start
and end (``api_launch_monotonic_ns``, ``completion_monotonic_ns``: ``time.perf_counter_ns``,
CLOCK_MONOTONIC on Linux) and ``status``.

This module reads those lines into a typed run (:class:`TimelineRun`: processes, each with its
weight syncs as :class:`TimelineSync` of :class:`TimelineBucket` and its training spans), and
:func:`load_timeline` turns the run into per-step series as every importer does
(:class:`~wsprof.importers.logs.Imported`). A sync is the framework's own: from the first
``weight_convert`` (or bucket) of its ``weight_version`` to its ``weight_sync_complete`` (or
``weight_sync_failed``). Steps are the framework's own ``global_step`` (of the training spans
before the sync), else its ``weight_version``.

Bounded: at most :data:`MAX_FILES` files, :data:`MAX_LINES` lines in all, lines of at most
:data:`MAX_LINE_BYTES`; only regular files are opened, links to folders are not followed, and
nothing is written. A last line cut by a killed writer is dropped and counted; a line that is
not a JSON object is counted; neither is fatal unless nothing reads.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from wsprof.contracts.series import (
    BUCKET_SEND_PREFIX,
    OUTSIDE_TRAINER_S,
    STEP_S,
    SYNC_ALGBW,
    SYNC_BYTES,
    SYNC_CONVERT_S,
    SYNC_FAILED,
    SYNC_LOAD_S,
    SYNC_REST_S,
    SYNC_SEND_S,
    TRAIN_S,
    WEIGHT_SYNC_S,
    Series,
)
from wsprof.contracts.units import Unit
from wsprof.errors import InputError, quote
from wsprof.importers.files import open_regular
from wsprof.importers.logs import Imported

#: The schema versions this reader knows (slime's ``COMMUNICATION_TIMELINE_VERSION``: 1, then
#: 2, which added ``gpu_timestamp_semantics``, ``timestamp_domain`` and
#: ``clock_sync_error_bound_us``; the fields read here are in both).
KNOWN_SCHEMAS = (1, 2)
#: Most files read under one folder (a job of 1,000 ranks writes 1,000).
MAX_FILES = 4_096
#: Most folders walked looking for them.
MAX_FOLDERS = 10_000
#: Most lines read in all: about 1 GB of records held as spans (a sync of 100 buckets writes
#: about 700 lines: 7,000 syncs of the sending rank). Files are read in name order, so the
#: sender (rank 0) comes first.
MAX_LINES = 5_000_000
#: Longest line read (a record is about 1 KB; metadata can carry an error message).
MAX_LINE_BYTES = 1 << 20
#: A UTF-8 byte order mark some editors put at a file's start (read past, as JSON allows).
_BOM = b"\xef\xbb\xbf"
#: Most buckets whose send time gets a series of its own (``bucket_send_s:<id>``).
MAX_BUCKET_SERIES = 64

_TRAIN_OPS = ("train_forward_backward", "grad_sync", "optimizer_step")
_SYNC_END = ("weight_sync_complete", "weight_sync_failed")


#: Largest value of a time, step, version, bucket id or size read (2^62: 146 years in ns;
#: beyond it a value is corrupt, and numpy's int64 could not hold sums of it).
MAX_VALUE = 1 << 62


class _OutOfRange(ValueError):
    """A field holds an integer outside 0..MAX_VALUE: the record is corrupt."""


def _int(v: Any) -> int | None:
    """An integer field: None when absent or not an integer; :class:`_OutOfRange` when it is
    an integer outside ``0..MAX_VALUE``."""
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if not 0 <= v <= MAX_VALUE:
        raise _OutOfRange(v)
    return v


@dataclass(frozen=True, slots=True)
class Span:
    """One record's interval on its process's monotonic clock, ns (an event: start == end)."""

    operation: str
    t0_ns: int
    t1_ns: int
    global_step: int | None
    weight_version: int | None
    bucket_id: int | None
    message_bytes: int | None
    status: str
    error_type: str | None


@dataclass(frozen=True)
class TimelineBucket:
    """One bucket of one weight sync, from the trainer's side.

    Attributes:
        bucket_id: slime's ``bucket_id``.
        message_bytes: its bytes (of the send span, else of its convert span), None unknown.
        convert_s, send_s, load_s: durations of its ``weight_convert``, ``weight_bucket_send``
            and ``engine_load_weights`` spans, s (None without one).
        send_t0_ns, send_t1_ns: its send span on the process's monotonic clock, ns.
        status: ``ok`` or ``error`` (a span of it failed).
    """

    bucket_id: int
    message_bytes: int | None
    convert_s: float | None
    send_s: float | None
    load_s: float | None
    send_t0_ns: int | None
    send_t1_ns: int | None
    status: str


@dataclass(frozen=True)
class TimelineSync:
    """One weight sync (one ``weight_version``) of one process.

    Attributes:
        weight_version: slime's ``weight_version``.
        step: the framework's step it follows (``global_step`` of the training spans before it;
            its ``weight_version`` when no training span says).
        t0_ns, t1_ns: first convert or bucket span start to the complete (or failed) event, on
            the process's monotonic clock, ns.
        buckets: its buckets in id order.
        failed: the error type of ``weight_sync_failed`` (``?`` when the event names none), None
            when it completed.
        parts: seconds of the sync in each part, overlapping spans of a part counted once
            (``convert``, ``send``, ``engine_load``, ``rest``: the sync's time in none of them).
        train: seconds of each training span kind in the step before it (``train_forward_backward``
            ...), summed.
        train_t0_ns: the first training span's start of that step, None without one.
    """

    weight_version: int
    step: int
    t0_ns: int
    t1_ns: int
    buckets: tuple[TimelineBucket, ...]
    failed: str | None
    parts: dict[str, float]
    train: dict[str, float]
    train_t0_ns: int | None

    @property
    def seconds(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e9

    @property
    def sent_bytes(self) -> int:
        return sum(b.message_bytes or 0 for b in self.buckets if b.send_s is not None)


@dataclass
class TimelineProcess:
    """One process of a run: its identity and what it wrote.

    Attributes:
        run_id, role, rank, pid, hostname: from its records.
        paths: the files its records came from.
        spans: its records, in file order.
        schema_version: of its records.
    """

    run_id: str
    role: str
    rank: int | None
    pid: int | None
    hostname: str | None
    schema_version: int
    paths: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    _syncs: list[TimelineSync] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        who = f"{self.role} rank {self.rank}" if self.rank is not None else self.role
        return f"{who} (pid {self.pid})" if self.pid is not None else who

    def forget(self) -> None:
        """Drop the syncs computed so far (records were added)."""
        self._syncs = None

    def syncs(self) -> list[TimelineSync]:
        """Its weight syncs in version order (computed once)."""
        if self._syncs is None:
            self._syncs = _syncs_of(self.spans)
        return self._syncs


@dataclass
class TimelineRun:
    """One ``run_id``'s processes, and what reading their files met.

    Attributes:
        run_id: slime's run id (shared by the processes of one run).
        processes: by (role, rank, pid).
        last_wall_ns: the latest wall time any of its records carries (orders runs).
    """

    run_id: str
    processes: dict[tuple[str, int | None, int | None], TimelineProcess] = field(
        default_factory=dict
    )
    last_wall_ns: int = 0

    def primary(self) -> TimelineProcess | None:
        """The process that sends the buckets (most ``weight_bucket_send`` spans; the lowest
        trainer rank among equals): the weight sync is measured there."""
        procs = list(self.processes.values())
        if not procs:
            return None

        def key(p: TimelineProcess) -> tuple[int, int]:
            # Not by syncs ended: a killed writer's cut last line must not move the
            # measurement to another rank.
            sends = sum(1 for s in p.spans if s.operation == "weight_bucket_send")
            return (-sends, p.rank if p.rank is not None else 1 << 30)

        return min(procs, key=key)


@dataclass
class TimelineRead:
    """Everything read under a path: its runs, newest last, and the damage met.

    Attributes:
        path: what was given.
        runs: by run id.
        files: the timeline files read.
        cut_lines: last lines cut by a killed writer (dropped).
        bad_lines: lines that are not a JSON object, or a record without the fields read.
        out_of_range: records with a time, step, version, bucket id or size outside
            ``0..MAX_VALUE`` (negative, or beyond 2^62): corrupt, skipped.
        capped: a cap (files, lines) left something unread.
    """

    path: str
    runs: dict[str, TimelineRun] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    cut_lines: int = 0
    bad_lines: int = 0
    out_of_range: int = 0
    capped: bool = False

    def ordered(self) -> list[TimelineRun]:
        """The runs, newest (latest record) last."""
        return sorted(self.runs.values(), key=lambda r: r.last_wall_ns)


# ----------------------------------------------------------------------------- finding files


def _looks_like_record(line: bytes) -> bool:
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return (
        isinstance(rec, dict)
        and rec.get("framework") == "slime"
        and "schema_version" in rec
        and isinstance(rec.get("operation"), str)
    )


def is_timeline_file(path: str) -> bool:
    """Whether ``path`` is a regular file whose first line is a slime timeline record."""
    try:
        with open_regular(path, "give a timeline file or its folder") as fh:
            first = fh.readline(MAX_LINE_BYTES).removeprefix(_BOM).strip()
    except (OSError, InputError):
        return False
    return bool(first) and first.startswith(b"{") and _looks_like_record(first)


def _walk(path: str) -> Iterator[str]:
    """Regular files under ``path`` in name order, depth first, links to folders not
    followed; at most :data:`MAX_FOLDERS` folders."""
    stack = [path]
    n = 0
    while stack and n < MAX_FOLDERS:
        folder = stack.pop()
        n += 1
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subs: list[str] = []
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    subs.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    yield e.path
            except OSError:
                continue
        stack.extend(reversed(subs))


def find_timeline_files(path: str) -> tuple[list[str], bool]:
    """The timeline files at ``path`` (a file, or the files under a folder that start like a
    record), at most :data:`MAX_FILES`; and whether the cap left some out. Only ``.jsonl`` and
    ``.json`` names are opened to look (slime's template ends in one; ``.rank-N`` is put before
    it), so a folder of checkpoints is not read."""
    if os.path.isfile(path):
        return ([path] if is_timeline_file(path) else []), False
    if not os.path.isdir(path):
        return [], False
    found: list[str] = []
    for p in _walk(path):
        if not p.lower().endswith((".jsonl", ".json")):
            continue
        if is_timeline_file(p):
            if len(found) >= MAX_FILES:
                return found, True
            found.append(p)
    return found, False


def is_timeline(path: str) -> bool:
    """Whether ``path`` is a slime timeline file or a folder with one under it."""
    files, _ = find_timeline_files(path)
    return bool(files)


# ----------------------------------------------------------------------------- reading


def _span(rec: dict[str, Any]) -> Span | None:
    """The span of a record; None when it lacks an operation or a start time.

    Raises:
        _OutOfRange: a time, step, version, bucket id or size outside ``0..MAX_VALUE``.
    """
    op = rec.get("operation")
    t0 = _int(rec.get("api_launch_monotonic_ns"))
    t1 = _int(rec.get("completion_monotonic_ns"))
    if not isinstance(op, str) or t0 is None:
        return None
    if t1 is None or t1 < t0:
        dur = _int(rec.get("duration_ns"))
        t1 = t0 + dur if dur is not None and dur >= 0 else t0
    meta = rec.get("metadata")
    error = meta.get("error_type") if isinstance(meta, dict) else None
    status = rec.get("status")
    return Span(
        operation=op[:200],
        t0_ns=t0,
        t1_ns=t1,
        global_step=_int(rec.get("global_step")),
        weight_version=_int(rec.get("weight_version")),
        bucket_id=_int(rec.get("bucket_id")),
        message_bytes=_int(rec.get("message_bytes")),
        status=status if status in ("ok", "error") else "ok",
        error_type=str(error)[:200] if error is not None else None,
    )


#: What :func:`_lines` yields for a line longer than :data:`MAX_LINE_BYTES` (skipped whole).
_OVERLONG = b"\x00overlong"


def _lines(fh: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Each line with whether it ended in a newline; an overlong line is skipped whole and
    yielded as :data:`_OVERLONG` (counted as a bad line)."""
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # skip the rest of the overlong line
                line = fh.readline(MAX_LINE_BYTES)
            yield _OVERLONG, True
            continue
        yield line, line.endswith(b"\n")


def read_timeline(path: str) -> TimelineRead:
    """Read every timeline file at ``path`` into runs.

    Args:
        path: a timeline file or a folder with timeline files under it (other files ignored).

    Returns:
        The runs and what was met.

    Raises:
        InputError: no timeline file at ``path``; a record of a schema version this reader does
            not know (it names the version and the known ones); nothing readable (one line).
    """
    files, capped = find_timeline_files(path)
    if not files:
        raise InputError(
            f"{path}: no slime communication timeline here (JSONL records with "
            '"framework": "slime"); give the file or folder --communication-timeline wrote'
        )
    out = TimelineRead(path, capped=capped)
    left = MAX_LINES
    for p in files:
        if left <= 0:
            out.capped = True
            break
        _, left = _read_from(out, p, 0, left, final=True)
    _require_records(out)
    return out


def _require_records(out: TimelineRead) -> None:
    if not any(p.spans for r in out.runs.values() for p in r.processes.values()):
        raise InputError(
            f"{out.path}: {len(out.files)} timeline file(s) but no readable record in them "
            f"({out.bad_lines:,} lines not a record, {out.out_of_range:,} out of range, "
            f"{out.cut_lines} cut); give the files a finished or running slime job wrote"
        )


def _read_from(out: TimelineRead, p: str, offset: int, left: int, final: bool) -> tuple[int, int]:
    """Read ``p`` from byte ``offset`` into ``out``: at most ``left`` lines. A last line with
    no newline is a record still being written (``final`` False: left for the next read) or
    one a killed writer cut (``final``: counted, dropped). Returns the offset read up to and
    the lines left."""
    try:
        fh = open_regular(p, "give a timeline file or its folder")
    except OSError as e:
        raise InputError(f"{p}: cannot be read ({e.strerror or e}); check its permissions") from e
    with fh:
        if p not in out.files:
            out.files.append(p)
        fh.seek(offset)
        for raw, whole in _lines(fh):
            if not whole and not final:
                break  # still being written
            offset = fh.tell()
            left -= 1
            if left < 0:
                out.capped = True
                break
            if raw is _OVERLONG:
                out.bad_lines += 1
                continue
            text = raw.removeprefix(_BOM).strip()
            if not text:
                if raw and not whole:
                    out.bad_lines += 1
                continue
            try:
                rec = json.loads(text)
            except (ValueError, RecursionError):
                rec = None
            if not isinstance(rec, dict):
                if not whole:
                    out.cut_lines += 1  # the last line, cut by a killed writer
                else:
                    out.bad_lines += 1
                continue
            _add(out, rec, p)
        return offset, left


class TimelineFollower:
    """Reads a timeline as slime writes it (``wsprof watch``): each :meth:`poll` reads the
    lines appended since the last, from the files found so far and any new ones; a line
    still being written waits for its newline. Never writes; the caps of
    :func:`read_timeline` hold over all polls."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.read = TimelineRead(path)
        self._offsets: dict[str, int] = {}
        self._inodes: dict[str, tuple[int, int]] = {}
        self._left = MAX_LINES
        #: Files found truncated or replaced at the last :meth:`poll` (everything was then
        #: read again from the start).
        self.restarted: list[str] = []

    def poll(self) -> TimelineRead:
        """What has been read so far, after reading what was appended. A file that shrank
        below what was read, or was replaced (another inode), makes the whole timeline be read
        again from its start (:attr:`restarted` names it): records already read may be gone.

        Raises:
            InputError: a record of a schema this reader does not know; a file that cannot
                be read.
        """
        files, capped = find_timeline_files(self.path)
        self.restarted = []
        stats: dict[str, os.stat_result] = {}
        for p in files:
            try:
                stats[p] = os.stat(p)
            except OSError:
                continue
            st = stats[p]
            known = self._inodes.get(p)
            if known is not None and (
                known != (st.st_dev, st.st_ino) or st.st_size < self._offsets.get(p, 0)
            ):
                self.restarted.append(p)
        if self.restarted:
            self.read = TimelineRead(self.path)
            self._offsets.clear()
            self._inodes.clear()
            self._left = MAX_LINES
        self.read.capped = self.read.capped or capped
        for p in files:
            if self._left <= 0:
                self.read.capped = True
                break
            st_p = stats.get(p)
            if st_p is None:
                continue
            self._inodes[p] = (st_p.st_dev, st_p.st_ino)
            start = self._offsets.get(p, 0)
            size = st_p.st_size
            if size <= start:
                continue
            self._offsets[p], self._left = _read_from(self.read, p, start, self._left, False)
            for run in self.read.runs.values():
                for proc in run.processes.values():
                    if p in proc.paths:
                        proc.forget()
        return self.read


def _add(out: TimelineRead, rec: dict[str, Any], path: str) -> None:
    version = rec.get("schema_version")
    if isinstance(version, bool) or version not in KNOWN_SCHEMAS:
        raise InputError(
            f"{path}: slime communication timeline schema_version {quote(str(version), 20)}; "
            f"wsprof reads versions {', '.join(map(str, KNOWN_SCHEMAS))}: upgrade wsprof, or "
            "write the timeline with a slime that writes one of those"
        )
    try:
        span = _span(rec)
        rank, pid = _int(rec.get("rank")), _int(rec.get("pid"))
    except _OutOfRange:
        out.out_of_range += 1
        return
    if span is None:
        out.bad_lines += 1
        return
    run_id = str(rec.get("run_id") or "-")[:80]
    run = out.runs.get(run_id)
    if run is None:
        run = out.runs[run_id] = TimelineRun(run_id)
    role = str(rec.get("role") or "trainer")[:40]
    key = (role, rank, pid)
    proc = run.processes.get(key)
    if proc is None:
        host = rec.get("hostname")
        proc = run.processes[key] = TimelineProcess(
            run_id, role, rank, pid, str(host)[:200] if host else None, int(version)
        )
    if not proc.paths or proc.paths[-1] != path:
        proc.paths.append(path)
    proc.spans.append(span)
    try:
        wall = _int(rec.get("completion_timestamp_ns")) or _int(rec.get("api_launch_timestamp_ns"))
    except _OutOfRange:
        wall = None
    if wall is not None and wall > run.last_wall_ns:
        run.last_wall_ns = wall


# ----------------------------------------------------------------------------- syncs


def _union_s(intervals: list[tuple[int, int]]) -> float:
    """Length of the union of ``[t0, t1)`` intervals, s."""
    total = 0
    end = None
    for t0, t1 in sorted(intervals):
        if end is None or t0 > end:
            total += t1 - t0
            end = t1
        elif t1 > end:
            total += t1 - end
            end = t1
    return total / 1e9


def _syncs_of(spans: list[Span]) -> list[TimelineSync]:
    """The process's weight syncs, version by version, each with the training before it."""
    by_version: dict[int, list[Span]] = {}
    for s in spans:
        if s.weight_version is not None and s.operation not in _TRAIN_OPS:
            by_version.setdefault(s.weight_version, []).append(s)
    train = sorted((s for s in spans if s.operation in _TRAIN_OPS), key=lambda s: s.t0_ns)
    starts = [s.t0_ns for s in train]
    out: list[TimelineSync] = []
    prev_end: int | None = None
    for version in sorted(by_version):
        recs = by_version[version]
        ends = sorted((s for s in recs if s.operation in _SYNC_END), key=lambda s: s.t0_ns)
        if not ends:
            # Still running, or its end was cut or corrupt: not a sync; the next one's
            # training starts after what it did.
            prev_end = max(prev_end or 0, max(s.t1_ns for s in recs))
            continue
        work = [s.t0_ns for s in recs if s.operation not in _SYNC_END]
        # The end after the version's last bucket work (a stray earlier end is not its end).
        last_work = max(work, default=None)
        end = next((e for e in ends if last_work is None or e.t0_ns >= last_work), ends[-1])
        body = [s for s in recs if s.operation not in _SYNC_END and s.t0_ns <= end.t0_ns]
        t1 = end.t0_ns
        # The training spans since the previous sync (by start: bisected, one pass in all).
        lo = bisect.bisect_left(starts, prev_end) if prev_end is not None else 0
        # A process that sends no bucket (a trainer rank > 0 gathers its shards for rank 0)
        # syncs from its last training span's end to the complete event.
        upto = bisect.bisect_right(starts, t1)
        trained = max((s.t1_ns for s in train[lo:upto] if s.t1_ns <= t1), default=t1)
        t0 = min((s.t0_ns for s in body), default=trained)
        buckets = _buckets(body)
        parts = {
            "convert": _union_s(
                [(s.t0_ns, s.t1_ns) for s in body if s.operation == "weight_convert"]
            ),
            "send": _union_s(
                [(s.t0_ns, s.t1_ns) for s in body if s.operation == "weight_bucket_send"]
            ),
            "engine_load": _union_s(
                [(s.t0_ns, s.t1_ns) for s in body if s.operation == "engine_load_weights"]
            ),
        }
        covered = _union_s([(s.t0_ns, min(s.t1_ns, t1)) for s in body if s.t1_ns > s.t0_ns])
        parts["rest"] = max((t1 - t0) / 1e9 - covered, 0.0)
        before = train[lo : bisect.bisect_left(starts, t0, lo=lo)]
        steps = [s.global_step for s in before if s.global_step is not None]
        step_of_sync = next(
            (s.global_step for s in recs if s.global_step is not None), steps[-1] if steps else None
        )
        tr: dict[str, float] = {}
        for s in before:
            tr[s.operation] = tr.get(s.operation, 0.0) + (s.t1_ns - s.t0_ns) / 1e9
        failed = None
        if end.operation == "weight_sync_failed":
            failed = end.error_type or next((s.error_type for s in body if s.error_type), "?")
        out.append(
            TimelineSync(
                weight_version=version,
                step=step_of_sync if step_of_sync is not None else version,
                t0_ns=t0,
                t1_ns=t1,
                buckets=buckets,
                failed=failed,
                parts=parts,
                train=tr,
                train_t0_ns=before[0].t0_ns if before else None,
            )
        )
        prev_end = t1
    return out


def _buckets(body: list[Span]) -> tuple[TimelineBucket, ...]:
    by_id: dict[int, list[Span]] = {}
    for s in body:
        if s.bucket_id is not None:
            by_id.setdefault(s.bucket_id, []).append(s)
    out = []
    for bid in sorted(by_id):
        recs = by_id[bid]

        def dur(op: str, recs: list[Span] = recs) -> float | None:
            got = [s for s in recs if s.operation == op]
            return sum(s.t1_ns - s.t0_ns for s in got) / 1e9 if got else None

        send = [s for s in recs if s.operation == "weight_bucket_send"]
        sized = send or [s for s in recs if s.message_bytes is not None]
        nbytes = next((s.message_bytes for s in sized if s.message_bytes is not None), None)
        out.append(
            TimelineBucket(
                bucket_id=bid,
                message_bytes=nbytes,
                convert_s=dur("weight_convert"),
                send_s=dur("weight_bucket_send"),
                load_s=dur("engine_load_weights"),
                send_t0_ns=min(s.t0_ns for s in send) if send else None,
                send_t1_ns=max(s.t1_ns for s in send) if send else None,
                status="error" if any(s.status == "error" for s in recs) else "ok",
            )
        )
    return tuple(out)


# ----------------------------------------------------------------------------- as series


def pick_run(read: TimelineRead, run_id: str | None = None) -> tuple[TimelineRun, list[str]]:
    """The run to analyse (``run_id``, else the newest) and a note naming the others.

    Raises:
        InputError: ``run_id`` is not among the runs read.
    """
    runs = read.ordered()
    if run_id is not None:
        run = read.runs.get(run_id)
        if run is None:
            raise InputError(
                f"{read.path}: no timeline run {quote(run_id, 80)}; the runs here: "
                + ", ".join(quote(r.run_id, 40) for r in runs[:10])
            )
    else:
        run = runs[-1]
    others = [r for r in runs if r is not run]
    notes = []
    if others:
        named = ", ".join(
            f"{quote(r.run_id, 40)} ({len(r.processes)} process(es), "
            f"{sum(len(p.spans) for p in r.processes.values()):,} records)"
            for r in others[:5]
        )
        which = "the one asked for" if run_id is not None else "the newest"
        notes.append(
            f"{len(runs)} timeline runs under {read.path}, never mixed: read "
            f"{quote(run.run_id, 40)} ({which}); also here: {named}"
            f"{', ...' if len(others) > 5 else ''}; to read another, name its run id "
            "(--timeline-run ID)"
        )
    return run, notes


def timeline_series(proc: TimelineProcess) -> tuple[list[Series], list[str]]:
    """Per-step series of one process's syncs (see the module docstring) and notes.

    Series: ``weight_sync_s`` (the framework's own sync), its parts (``weight_sync_convert_s``,
    ``weight_sync_send_s``, ``weight_sync_engine_load_s``, ``weight_sync_rest_s``), bytes sent
    (``weight_sync_bytes``) and bandwidth over the send time (``weight_sync_algbw``), each
    bucket's send time (``bucket_send_s:<id>``, the first :data:`MAX_BUCKET_SERIES` buckets),
    the training spans (``train_s`` and one per span kind), the step (one sync's end to the
    next's, ``step_s``), the time outside the trainer's spans (``outside_trainer_s``), and
    failed syncs (``weight_sync_failed``, 1 at a step whose sync failed). A failed sync's time
    is not a sync's: it is left out of the time series.
    """
    syncs = proc.syncs()
    notes: list[str] = []
    if len(syncs) >= 2 and not syncs[0].train and any(s.train for s in syncs[1:]):
        notes.append(
            f"weight version {syncs[0].weight_version} was pushed before training "
            f"({syncs[0].seconds:.3g} s): not a step's sync, left out"
        )
        prev_end: int | None = syncs[0].t1_ns
        prev_version: int | None = syncs[0].weight_version
        syncs = syncs[1:]
    else:
        prev_end = prev_version = None
    cols: dict[str, dict[int, float]] = {}

    def put(name: str, step: int, value: float) -> None:
        cols.setdefault(name, {})[step] = value

    bucket_ids = sorted({b.bucket_id for s in syncs for b in s.buckets})[:MAX_BUCKET_SERIES]
    train_kinds = sorted({k for s in syncs for k in s.train})
    for s in syncs:
        step = s.step
        if s.failed:
            name = f"{SYNC_FAILED}:{s.failed}"
            put(name, step, cols.get(name, {}).get(step, 0.0) + 1.0)
        if prev_version is not None and s.weight_version != prev_version + 1:
            prev_end = None  # a version with no end between: this step's start is unknown
        prev_version = s.weight_version
        if prev_end is not None:
            put(STEP_S, step, (s.t1_ns - prev_end) / 1e9)
            if s.train_t0_ns is not None:
                put(OUTSIDE_TRAINER_S, step, max(s.train_t0_ns - prev_end, 0) / 1e9)
        prev_end = s.t1_ns
        if s.failed:
            continue
        put(WEIGHT_SYNC_S, step, s.seconds)
        if s.buckets:
            put(SYNC_CONVERT_S, step, s.parts["convert"])
            put(SYNC_SEND_S, step, s.parts["send"])
            put(SYNC_LOAD_S, step, s.parts["engine_load"])
            put(SYNC_REST_S, step, s.parts["rest"])
            nbytes = s.sent_bytes
            if nbytes:
                put(SYNC_BYTES, step, float(nbytes))
                if s.parts["send"] > 0:
                    put(SYNC_ALGBW, step, nbytes / s.parts["send"])
            for b in s.buckets:
                if b.bucket_id in bucket_ids and b.send_s is not None:
                    put(BUCKET_SEND_PREFIX + str(b.bucket_id), step, b.send_s)
        if s.train:
            put(TRAIN_S, step, sum(s.train.values()))
            for k in train_kinds:
                put(f"{k}_s", step, s.train.get(k, 0.0))
    units = {SYNC_BYTES: Unit.BYTES, SYNC_ALGBW: Unit.BYTES_PER_SECOND}
    series = [
        Series(
            name,
            Unit.COUNT if name.startswith(SYNC_FAILED) else units.get(name, Unit.SECONDS),
            tuple(sorted(v)),
            tuple(v[k] for k in sorted(v)),
        )
        for name, v in cols.items()
    ]
    n_buckets = len({b.bucket_id for s in syncs for b in s.buckets})
    if n_buckets > MAX_BUCKET_SERIES:
        notes.append(
            f"{n_buckets} buckets per sync: the send time of the first {MAX_BUCKET_SERIES} "
            "has a series of its own"
        )
    return series, notes


def load_timeline(path: str, run_id: str | None = None) -> Imported:
    """Read a slime communication timeline (a file or a folder of them) as per-step series of
    the process that sends the buckets (see :func:`timeline_series`); of run ``run_id``, else
    of the newest run.

    Raises:
        InputError: see :func:`read_timeline`; no run ``run_id``; no weight sync was
            completed or failed in it.
    """
    return imported_of(read_timeline(path), run_id)


def imported_of(read: TimelineRead, run_id: str | None = None) -> Imported:
    """The per-step series of what ``read`` holds (run ``run_id``, else its newest; see
    :func:`load_timeline`), for a whole read or a follower's so far.

    Raises:
        InputError: no run ``run_id``; no weight sync ended in it.
    """
    path = read.path
    _require_records(read)
    run, notes = pick_run(read, run_id)
    proc = run.primary()
    assert proc is not None  # read_timeline raised for a run without records
    series, more = timeline_series(proc)
    syncs = proc.syncs()
    if not syncs:
        raise InputError(
            f"{path}: slime timeline of {len(run.processes)} process(es), "
            f"{sum(len(p.spans) for p in run.processes.values()):,} records, but no weight "
            "sync ended in it (no weight_sync_complete or weight_sync_failed); give it again "
            "after the first weight update"
        )
    steps = sorted({s.step for s in syncs})
    buckets = max((len(s.buckets) for s in syncs), default=0)
    head = (
        f"read as slime's communication timeline (schema {proc.schema_version}): run "
        f"{quote(run.run_id, 40)}, {len(run.processes)} process(es) in {len(read.files)} "
        f"file(s); the weight sync of {proc.label}: {len(syncs)} syncs, steps "
        f"{steps[0]}-{steps[-1]} (the framework's global_step), up to {buckets} buckets each"
    )
    damage = []
    if read.cut_lines:
        damage.append(
            f"{read.cut_lines} last line(s) cut by a killed writer: dropped (the records "
            "before them are read)"
        )
    if read.out_of_range:
        damage.append(
            f"{read.out_of_range:,} record(s) with a time, step, version, bucket id or size "
            "out of range (negative, or beyond 2^62): corrupt, skipped"
        )
    if read.bad_lines:
        damage.append(
            f"{read.bad_lines:,} line(s) not a timeline record (not JSON, or over "
            f"{MAX_LINE_BYTES:,} bytes): skipped"
        )
    if read.capped:
        damage.append(
            f"more than {MAX_FILES:,} timeline files or {MAX_LINES:,} lines under {path}: "
            "the first in name order read"
        )
    failed = [s for s in syncs if s.failed]
    if failed:
        kinds: dict[str, int] = {}
        for s in failed:
            kinds[s.failed or "?"] = kinds.get(s.failed or "?", 0) + 1
        damage.append(
            f"{len(failed)} weight sync(s) failed ("
            + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
            + f"; versions {', '.join(str(s.weight_version) for s in failed[:10])}): left out "
            "of the sync times"
        )
    outside = (
        "the time outside the trainer's spans is 'outside the trainer: rollout and waits' "
        "(the timeline has no rollout span)"
    )
    return Imported(
        tuple(series),
        (head, *notes, *more, *damage, outside),
        "slime-timeline",
    )
