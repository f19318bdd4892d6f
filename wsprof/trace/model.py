"""The trace data model: what capture writes and analysis reads.

One trace file per process (``<run>/<host>-<pid>.wsprof``, SQLite). Times are
``time.monotonic_ns()`` of the writing process; ``meta['anchor']`` pairs one monotonic
reading with one wall-clock reading so that traces of several processes can be aligned.

Capture builds rows as plain tuples in the column order given here (speed on the hot path);
the reader returns them as the columnar :class:`CallTable` plus frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.contracts.events import Event
from wsprof.contracts.overhead import SelfOverhead

#: Bumped whenever a table or column changes meaning; the reader refuses other versions.
#: Version 2: calls stored as compressed column chunks with interned strings, plus
#: ``call_updates`` (async completion and device time). Version 3: ``call_totals`` (exact
#: per-step sums) and chunk step ranges, for retention. Version 4: ``call_totals`` per process
#: group with issued collectives, and ``issued`` (c10d's own counts, for the coverage audit).
#: Version 5: ``update_chunks`` (call updates in bulk) and the capture buffer's ``meta['ring']``.
SCHEMA_VERSION = 5
#: Versions the reader accepts (a version-2 trace simply has no ``call_totals``; a version-3
#: trace has no coverage audit).
READABLE_SCHEMA_VERSIONS = (2, 3, 4, 5)

#: File name suffix of a trace.
TRACE_SUFFIX = ".wsprof"

#: Column order of a ``calls`` row, as capture appends it.
CALL_COLUMNS = (
    "t_start_ns",  # int, monotonic ns when the outermost hooked name was entered
    "t_end_ns",  # int, monotonic ns when it returned (or raised)
    "backend_ns",  # int, ns spent inside ProcessGroup methods and Work.wait during the call
    "n_backend",  # int, collectives the call issued: backend-layer calls made during it, or
    # c10d's own count where wsprof measures it (C++ helpers, monitored_barrier); 1 for a
    # functional collective
    "thread",  # int, threading.get_ident()
    "op",  # str, canonical op (broadcast, all_gather, ...)
    "api",  # str, the name actually called (dist.broadcast, ProcessGroup._allgather_base, ...)
    "layer",  # str, 'api' | 'backend' (a backend call with no open API call) | 'extra' |
    # 'functional' (a ``torch.ops._c10d_functional`` op: DTensor, FSDP2, compiled graphs)
    "bytes",  # int, payload bytes of the first tensor argument (or tensor list); -1 unknown
    "dtype",  # str | None
    "grp",  # str | None, process-group name
    "is_async",  # int 0/1, an async work handle was returned
    "site",  # int, id in ``sites``; -1 unknown
    "step",  # int, step number current at call start; -1 before the first step
    "phase",  # str | None, innermost phase current at call start
    "error",  # str | None, exception type name if the call raised
)

#: String columns of a ``calls`` row: stored as ids into the ``strings`` table (-1: None).
CALL_STRING_COLUMNS = frozenset({"op", "api", "layer", "dtype", "grp", "phase", "error"})

#: Columns learned after a call returned, joined onto it by ``(t_start_ns, thread)``.
CALL_UPDATE_COLUMNS = (
    "t_start_ns",  # int, the call's start (with thread, identifies it)
    "thread",  # int
    "t_done_ns",  # int, monotonic ns when completion was observed (wait() returned); -1 unknown
    "device_ns",  # int, device (CUDA) duration of the collective, ns; -1 unknown
)

SPAN_COLUMNS = ("kind", "name", "t_start_ns", "t_end_ns", "step", "thread")
COUNTER_COLUMNS = ("t_ns", "name", "value")
EVENT_COLUMNS = ("t_ns", "kind", "detail")
SITE_COLUMNS = ("id", "file", "line", "function")
SAMPLE_COLUMNS = ("t_start_ns", "t_end_ns", "pid", "tid", "stack", "count")
STACK_COLUMNS = ("id", "frames")


def process_label(meta: dict[str, Any]) -> str:
    """``rank N`` or ``pid N`` (``pid ?`` when neither is known): how reports name the process
    whose trace has ``meta``."""
    rank = meta.get("rank")
    if isinstance(rank, int):
        return f"rank {rank}"
    return f"pid {meta.get('pid', '?')}"


@dataclass(frozen=True)
class Site:
    """A caller location: the first frame outside torch and wsprof."""

    id: int
    file: str
    line: int
    function: str

    def label(self) -> str:
        """``function (file:line)``."""
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class Span:
    """A step or phase interval. ``kind`` is 'step' or 'phase'; times in monotonic ns."""

    kind: str
    name: str
    t_start_ns: int
    t_end_ns: int
    step: int
    thread: int


@dataclass(frozen=True)
class SampleWindow:
    """py-spy samples of one stack over one sampling window (``count`` samples)."""

    t_start_ns: int
    t_end_ns: int
    pid: int
    tid: int
    frames: tuple[str, ...]  # root first; each 'function (file:line)'
    count: int


@dataclass
class CallTable:
    """Collective calls as columns; every array has shape ``(n_calls,)``.

    Numeric columns are numpy arrays; string columns are numpy object arrays.
    """

    t_start_ns: npt.NDArray[np.int64]
    t_end_ns: npt.NDArray[np.int64]
    backend_ns: npt.NDArray[np.int64]
    n_backend: npt.NDArray[np.int64]
    thread: npt.NDArray[np.int64]
    op: npt.NDArray[np.object_]
    api: npt.NDArray[np.object_]
    layer: npt.NDArray[np.object_]
    bytes: npt.NDArray[np.int64]
    dtype: npt.NDArray[np.object_]
    grp: npt.NDArray[np.object_]
    is_async: npt.NDArray[np.bool_]
    site: npt.NDArray[np.int64]
    step: npt.NDArray[np.int64]
    phase: npt.NDArray[np.object_]
    error: npt.NDArray[np.object_]
    #: When completion was observed: the return for a synchronous call, ``wait()`` (or the
    #: first true ``is_completed()``) for an async one; -1 where never observed.
    t_done_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    #: Device (CUDA) duration of the collective, ns; -1 unknown (no CUDA, or not enabled).
    device_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    #: The collective's number in its group, the same on every rank (c10d's
    #: ``collective_seq_id``): known for calls read from Flight Recorder dumps
    #: (:mod:`wsprof.trace.flight_dumps`); -1 unknown (not stored in a trace).
    seq: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        n = len(self)
        if self.t_done_ns.shape[0] != n:
            self.t_done_ns = np.where(self.is_async, -1, self.t_end_ns).astype(np.int64)
        if self.device_ns.shape[0] != n:
            self.device_ns = np.full(n, -1, dtype=np.int64)
        if self.seq.shape[0] != n:
            self.seq = np.full(n, -1, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.t_start_ns.shape[0])

    @property
    def duration_ns(self) -> npt.NDArray[np.int64]:
        """Host time of each call at the outermost hooked layer, ns."""
        return self.t_end_ns - self.t_start_ns

    @property
    def between_layers_ns(self) -> npt.NDArray[np.int64]:
        """Time inside the hooked API name but outside the backend, ns; 0 where unknown."""
        d = self.duration_ns - self.backend_ns
        return np.where(self.n_backend > 0, np.maximum(d, 0), 0)

    def take(self, index: npt.NDArray[Any]) -> CallTable:
        """A new table with the rows selected by ``index`` (mask or indices)."""
        names = (*CALL_COLUMNS, "t_done_ns", "device_ns", "seq")
        return CallTable(**{name: getattr(self, name)[index] for name in names})

    @classmethod
    def empty(cls) -> CallTable:
        return cls.from_rows([])

    @classmethod
    def from_rows(cls, rows: list[tuple[Any, ...]]) -> CallTable:
        """Build from rows in :data:`CALL_COLUMNS` order."""
        cols = list(zip(*rows)) if rows else [() for _ in CALL_COLUMNS]
        out: dict[str, Any] = {}
        for name, col in zip(CALL_COLUMNS, cols):
            if name in CALL_STRING_COLUMNS:
                out[name] = np.array(col, dtype=object)
            elif name == "is_async":
                out[name] = np.array(col, dtype=bool)
            else:
                out[name] = np.array([(-1 if v is None else v) for v in col], dtype=np.int64)
        return cls(**out)


@dataclass(frozen=True)
class CallTotals:
    """Exact per-step sums of every call a process made, thinned or not; every array has
    shape ``(n_keys,)``, one entry per (step, op, api, layer).

    ``n``: calls; ``duration_ns``: summed host time, ns; ``between_layers_ns``: summed time
    between the API name and the backend, ns; ``bytes``: summed known payload bytes;
    ``max_duration_ns``: the longest call, ns.
    """

    step: npt.NDArray[np.int64]
    op: npt.NDArray[np.object_]
    api: npt.NDArray[np.object_]
    layer: npt.NDArray[np.object_]
    n: npt.NDArray[np.int64]
    duration_ns: npt.NDArray[np.int64]
    between_layers_ns: npt.NDArray[np.int64]
    bytes: npt.NDArray[np.int64]
    max_duration_ns: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.step.shape[0])


@dataclass(frozen=True)
class IssuedReading:
    """c10d's own count of the collectives issued on one process group, read once.

    ``seq`` is ``ProcessGroup._get_sequence_number_for_group()``: the backend's counter of
    collectives issued on the group (gloo: every collective and point-to-point op; NCCL:
    collectives only), counting those issued from C++ and through backend objects too;
    -1 when the backend keeps no count. ``step`` is the step current when it was read: the
    last reading of a step is taken at its end (``wsprof.step()``), so per-step differences
    are what each step issued.
    """

    t_ns: int
    step: int
    group: str
    backend: str | None
    seq: int
    #: when it was read: ``patch`` (the baseline), ``step``, ``flush``, ``destroy``, ``close``
    at: str = "flush"


@dataclass(frozen=True)
class RecordedIssued:
    """Collectives wsprof's hooks saw issued, per (step, process group, op, name, layer): the
    sum of the calls' ``n_backend``. ``group`` is None for calls whose group is unknown."""

    step: int
    group: str | None
    op: str
    layer: str
    issued: int
    #: calls (rows) behind ``issued``
    calls: int = 0
    #: the name called
    api: str = ""


@dataclass
class ProcessTrace:
    """Everything one process recorded."""

    path: str
    meta: dict[str, Any]
    calls: CallTable
    sites: dict[int, Site]
    spans: list[Span]
    counters: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]
    #: Typed events (:func:`wsprof.contracts.events.parse_event`), in time order.
    events: list[Event]
    samples: list[SampleWindow] = field(default_factory=list)
    #: Exact per-step call sums (schema 3); None for a version-2 trace.
    totals: CallTotals | None = None
    #: c10d's per-group issued counts (schema 4); None for a trace written before the audit.
    issued: list[IssuedReading] | None = None
    #: What the hooks saw issued, per step and group (schema 4); None before the audit.
    recorded_issued: list[RecordedIssued] | None = None
    #: ``meta['self']`` typed (:func:`wsprof.contracts.overhead.self_overhead_from_meta`, by
    #: the reader); an empty record for a trace without one.
    self_overhead: SelfOverhead = field(default_factory=SelfOverhead)

    @property
    def thinned(self) -> bool:
        """Retention removed some calls' detail: per-step numbers must come from
        :attr:`totals`, not from :attr:`calls`."""
        r = self.meta.get("retention")
        return (
            isinstance(r, dict)
            and isinstance(r.get("calls_removed"), int)
            and (r["calls_removed"] > 0)
            and self.totals is not None
        )

    @property
    def rank(self) -> int | None:
        r = self.meta.get("rank")
        return r if isinstance(r, int) else None

    @property
    def label(self) -> str:
        """``rank N`` or ``pid N``: how reports name this process."""
        return process_label(self.meta)
