"""One process of a run that ``wsprof watch`` follows (:class:`LiveProcess`): its completed
steps and their per-step totals, counters, sample windows, the sync's caller site and GPU use,
kept exactly and bounded as its trace grows; :meth:`LiveProcess.analysis` gives the process as
the rules see it, through analyze's constructor (:func:`wsprof.analysis.process.process_analysis`).
:mod:`wsprof.analysis.live` follows the run and judges it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from wsprof.analysis.coverage import audit_process
from wsprof.analysis.coverage_model import GroupCoverage
from wsprof.analysis.digest import facts_of_wrappers
from wsprof.analysis.model import (
    GpuUtil,
    ProcessAnalysis,
    StepRow,
    StepSource,
    WrapperFact,
)
from wsprof.analysis.per_step import counter_series, op_median_series, op_medians, row_series
from wsprof.analysis.process import (
    GPU_UTIL_MIN_SAMPLES,
    counted_calls,
    in_spans,
    join_samples,
    op_stats_of_sums,
    process_analysis,
    site_text,
    sites_in_windows,
    sync_windows,
    with_sync_starts,
    without_thinned_gaps,
)
from wsprof.analysis.steps import assign_calls, steps_from_markers, sync_spans
from wsprof.analysis.wire import with_wire
from wsprof.contracts.counters import NVML_UTIL_PCT, is_nvml_gpu
from wsprof.contracts.events import Event, EventKind, Patched, WrapperFound
from wsprof.contracts.overhead import SelfOverhead
from wsprof.contracts.series import (
    Series,
)
from wsprof.trace.model import (
    CALL_COLUMNS,
    CallTable,
    CallTotals,
    IssuedReading,
    ProcessTrace,
    RecordedIssued,
    SampleWindow,
    Site,
    Span,
    process_label,
)


def _cat_calls(parts: Sequence[CallTable]) -> CallTable:
    parts = [p for p in parts if len(p)]
    if not parts:
        return CallTable.empty()
    if len(parts) == 1:
        return parts[0]
    names = (*CALL_COLUMNS, "t_done_ns", "device_ns")
    table = CallTable(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})
    order = np.argsort(table.t_start_ns, kind="stable")
    return table.take(order)


def _cat_totals(parts: Sequence[CallTotals]) -> CallTotals | None:
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    names = (
        "step",
        "op",
        "api",
        "layer",
        "n",
        "duration_ns",
        "between_layers_ns",
        "bytes",
        "max_duration_ns",
    )
    cat = {n: np.concatenate([getattr(p, n) for p in parts]) for n in names}
    order = np.argsort(cat["step"], kind="stable")
    return CallTotals(**{n: v[order] for n, v in cat.items()})


def _totals_take(t: CallTotals, mask: Any) -> CallTotals:
    return CallTotals(
        step=t.step[mask],
        op=t.op[mask],
        api=t.api[mask],
        layer=t.layer[mask],
        n=t.n[mask],
        duration_ns=t.duration_ns[mask],
        between_layers_ns=t.between_layers_ns[mask],
        bytes=t.bytes[mask],
        max_duration_ns=t.max_duration_ns[mask],
    )


def _add_readings(
    kept: list[IssuedReading], last: dict[str, int], new: Sequence[IssuedReading]
) -> None:
    """Append c10d's readings to ``kept``, keeping of each group's run of ordinary (``flush``)
    readings within one step only the newest: the audit sums each group's differences per
    step, which telescope. ``patch`` and ``destroy`` readings, and a count that went down (a
    new group under an old name), are kept. ``last``: group -> index in ``kept`` of its
    newest reading."""
    for r in new:
        i = last.get(r.group)
        prev = kept[i] if i is not None else None
        if (
            prev is not None
            and i is not None
            and prev.step == r.step
            and prev.at == r.at == "flush"
            and r.seq >= prev.seq
        ):
            kept[i] = r
        else:
            last[r.group] = len(kept)
            kept.append(r)


def _overlapping(windows: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` windows (ends included) that share a time with ``[lo, hi]``."""
    if not windows:
        return []
    w = np.asarray(windows, dtype=np.int64)
    keep = (w[:, 0] <= hi) & (w[:, 1] >= lo)
    return [(int(a), int(b)) for a, b in w[keep].tolist()]


def _count_sites(
    counts: dict[int, int], calls: CallTable, windows: Sequence[tuple[int, int]]
) -> None:
    """Add to ``counts`` (site id -> calls) the known sites of the calls (sorted by start) that
    start inside ``windows`` (:func:`~wsprof.analysis.process.sites_in_windows`)."""
    if not len(calls) or not windows:
        return
    near = _overlapping(windows, int(calls.t_start_ns[0]), int(calls.t_start_ns[-1]))
    if not near:
        return
    ids, n = np.unique(sites_in_windows(calls, near), return_counts=True)
    for i, k in zip(ids.tolist(), n.tolist()):
        counts[i] = counts.get(i, 0) + k


def _by_start(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted by start, ties in the order read (as
    :func:`~wsprof.analysis.steps.sync_spans` sorts a whole trace's)."""
    return sorted(spans, key=lambda sp: sp[0])


@dataclass
class _Mean:
    """An exact running sum (every reading as the fraction its float is) and its count."""

    total: Fraction = Fraction(0)
    n: int = 0

    def add(self, values: Sequence[float]) -> None:
        for v in values:
            self.total += Fraction(v)
        self.n += len(values)

    def plus(self, values: Sequence[float]) -> _Mean:
        out = _Mean(self.total, self.n)
        out.add(values)
        return out

    def mean(self) -> float:
        # The float of the exact sum, divided once: what numpy's mean gives for readings whose
        # sum is exact in a float (NVML's whole percentages).
        return float(self.total) / self.n


@dataclass
class LiveProcess:
    """One trace being followed: its completed steps and running totals.

    Attributes:
        path: the trace file.
        meta: its meta table as last read.
        rows: completed steps, in order (each computed once, when its step span arrived).
        counter_values: counter name -> its value at each row's end (None before its first
            sample).
        op_medians: op -> median host latency of its calls in each row, µs (None where the
            step had none).
        ops: op -> [calls, summed duration ns] over every step (exact ``call_totals`` sums).
        op_apis: op -> the API names it was called by; op_bytes: op -> summed payload bytes
            (known sizes only; both from ``call_totals``).
        between_by_api: API name -> summed time between layers, s (for the wrapper audit).
        repeated: step spans whose number was already a completed step (counted once).
        sync_phases: whether a completed step had a weight-sync phase span.
        samples: the py-spy sampling windows its own trace holds (each a stack's sample count
            in one window, as ``wsprof analyze`` reads them), by start.
        sites: the caller sites of its calls (read whole each time).
    """

    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    rows: list[StepRow] = field(default_factory=list)
    counter_values: dict[str, list[float | None]] = field(default_factory=dict)
    op_medians: dict[str, list[float | None]] = field(default_factory=dict)
    ops: dict[str, list[float]] = field(default_factory=dict)
    op_apis: dict[str, set[str]] = field(default_factory=dict)
    op_bytes: dict[str, int] = field(default_factory=dict)
    between_by_api: dict[str, float] = field(default_factory=dict)
    wrapper_events: list[WrapperFound] = field(default_factory=list)
    patched: list[Event] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    issued: list[IssuedReading] | None = None
    recorded: list[RecordedIssued] | None = None
    first_ns: int | None = None
    repeated: int = 0
    sync_phases: bool = False
    self_overhead: SelfOverhead = field(default_factory=SelfOverhead)
    samples: list[SampleWindow] = field(default_factory=list)
    sites: dict[int, Site] = field(default_factory=dict)
    #: Highest step number made into a row (-1: none yet).
    last_step: int = -1
    #: Rows read so far that changed it (the key of :attr:`_joined`).
    _version: int = 0
    #: (version, the sampling windows joined) -> the analysis made of them.
    _joined: tuple[tuple[Any, ...], ProcessAnalysis] | None = None
    #: Every weight-sync phase span read, ``(start, end)`` ns in the order read; and each
    #: row's sync (``sync_start_ns`` + ``weight_sync_s``): one pair per sync, as the rows.
    _sync_spans: list[tuple[int, int]] = field(default_factory=list)
    _row_syncs: list[tuple[int, int]] = field(default_factory=list)
    #: Calls of completed steps per caller site inside a sync phase span / a row's sync.
    _sites_in_spans: dict[int, int] = field(default_factory=dict)
    _sites_in_rows: dict[int, int] = field(default_factory=dict)
    #: NVML utilization readings (finite) not yet before a row's end, and the sums of those
    #: before it, inside and outside the sync phases.
    _util_tail: list[tuple[int, float]] = field(default_factory=list)
    _util_in: _Mean = field(default_factory=_Mean)
    _util_out: _Mean = field(default_factory=_Mean)
    _calls: list[CallTable] = field(default_factory=list)
    _spans: list[Span] = field(default_factory=list)
    _totals: list[CallTotals] = field(default_factory=list)
    #: Counter samples not yet behind a row's end, and each counter's last value before them.
    _tail: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    _before: dict[str, float] = field(default_factory=dict)
    _last_reading: dict[str, int] = field(default_factory=dict)
    #: The coverage audit of the readings and recorded sums now held (None: the trace has
    #: none), valid while ``_audited``.
    _audit: list[GroupCoverage] | None = None
    _audited: bool = False

    @property
    def rank(self) -> int | None:
        r = self.meta.get("rank")
        return r if isinstance(r, int) else None

    @property
    def pid(self) -> int | None:
        p = self.meta.get("pid")
        return p if isinstance(p, int) else None

    @property
    def host(self) -> str | None:
        h = self.meta.get("host")
        return h if isinstance(h, str) else None

    @property
    def label(self) -> str:
        return process_label(self.meta)

    @property
    def n_calls(self) -> int:
        return int(sum(v[0] for v in self.ops.values()))

    def add(self, delta: ProcessTrace) -> list[StepRow]:
        """Take in the rows added to the trace; returns the steps completed by them.

        Args:
            delta: the rows added since the previous call (:func:`read_since`).
        """
        if rows_in(delta) or delta.meta != self.meta:
            self._version += 1
        self.meta = delta.meta
        self.self_overhead = delta.self_overhead
        if delta.sites:
            self.sites = dict(delta.sites)
        self._take_samples(delta.samples)
        self._sync_spans += [(s.t_start_ns, s.t_end_ns) for s in sync_spans(delta.spans)]
        self._take_totals(delta.totals)
        self._take_events(delta.events)
        if delta.issued is not None:
            if self.issued is None:
                self.issued = []
            _add_readings(self.issued, self._last_reading, delta.issued)
            self._audited = False
        if delta.recorded_issued is not None:
            self.recorded = [*(self.recorded or []), *delta.recorded_issued]
            self._audited = False
        calls = delta.calls
        if len(calls):
            first = int(calls.t_start_ns.min())
            self.first_ns = first if self.first_ns is None else min(self.first_ns, first)
            # Rows of steps already made into rows are a retention rewrite (the thinned copy
            # of an old step's calls); calls before the first step never enter a row.
            keep = calls.step > self.last_step
            self._calls.append(calls if bool(keep.all()) else calls.take(keep))
        if delta.spans:
            s0 = min(s.t_start_ns for s in delta.spans)
            self.first_ns = s0 if self.first_ns is None else min(self.first_ns, s0)
        self._spans += delta.spans
        for name, (t, v) in delta.counters.items():
            self._tail.setdefault(name, []).extend(zip(t.tolist(), v.tolist()))
            if is_nvml_gpu(name, NVML_UTIL_PCT):
                ok = np.isfinite(v)
                self._util_tail += zip(t[ok].tolist(), v[ok].tolist())
        return self._complete()

    def _take_samples(self, windows: Sequence[SampleWindow]) -> None:
        """Keep the sampling windows read, by start as a whole read orders them (py-spy's
        windows are already one row per stack per window: they are what ``wsprof analyze``
        holds of them too)."""
        if not windows:
            return
        later = not self.samples or windows[0].t_start_ns >= self.samples[-1].t_start_ns
        self.samples += windows
        if not later:
            self.samples.sort(key=lambda w: w.t_start_ns)

    @property
    def sampler_only(self) -> bool:
        """A py-spy sampler's trace (as ``wsprof analyze`` tells it): it names the pids it
        sampled and recorded no call and no span of its own."""
        return bool(self.meta.get("targets")) and self.first_ns is None

    def _take_totals(self, totals: CallTotals | None) -> None:
        if totals is None or not len(totals):
            return
        cols = (totals.op, totals.api, totals.n, totals.duration_ns, totals.bytes)
        for op, api, n, d, b in zip(*(c.tolist() for c in cols)):
            acc = self.ops.setdefault(str(op), [0.0, 0.0])
            acc[0] += n
            acc[1] += d
            self.op_apis.setdefault(str(op), set()).add(str(api))
            self.op_bytes[str(op)] = self.op_bytes.get(str(op), 0) + int(b)
        for api, b in zip(totals.api.tolist(), totals.between_layers_ns.tolist()):
            self.between_by_api[str(api)] = self.between_by_api.get(str(api), 0.0) + b / 1e9
        later = totals.step > self.last_step
        if bool(later.any()):
            self._totals.append(totals if bool(later.all()) else _totals_take(totals, later))

    def _take_events(self, events: Sequence[Event]) -> None:
        for e in events:
            if isinstance(e, WrapperFound):
                self.wrapper_events.append(e)
            elif isinstance(e, Patched):
                self.patched.append(e)
            elif e.kind is EventKind.INTERNAL_ERROR:
                self.internal_errors.append(e.detail)

    def _complete(self) -> list[StepRow]:
        """Make rows of the steps whose step span has arrived."""
        numbers = sorted({s.step for s in self._spans if s.kind == "step"})
        done = [k for k in numbers if k > self.last_step]
        self.repeated += sum(
            1 for s in self._spans if s.kind == "step" and s.step <= self.last_step
        )
        if not done:
            self._spans = [s for s in self._spans if s.step > self.last_step]
            return []
        top = done[-1]
        calls = _cat_calls(self._calls)
        in_done = (calls.step > self.last_step) & (calls.step <= top)
        step_calls = calls.take(in_done)
        spans = [s for s in self._spans if self.last_step < s.step <= top]
        totals = _cat_totals(self._totals)
        step_totals = (
            _totals_take(totals, (totals.step > self.last_step) & (totals.step <= top))
            if totals is not None
            else None
        )
        rows = steps_from_markers(step_calls, spans, step_totals)
        rows = with_sync_starts(rows, spans)
        rows = with_wire(rows, step_calls, spans, self.meta)
        rows = without_thinned_gaps(rows, self.meta)
        self.sync_phases = self.sync_phases or bool(rows and sync_spans(spans))
        self._add_counters(rows)
        self._add_medians(rows, step_calls)
        self._add_sites(rows, step_calls)
        self._add_util(max((r.t_end_ns for r in rows), default=0))
        self.rows += rows
        self.last_step = top
        # Release what the rows were made from.
        self._calls = [calls.take(calls.step > top)] if len(calls) else []
        self._spans = [s for s in self._spans if s.step > top]
        self._totals = [_totals_take(totals, totals.step > top)] if totals is not None else []
        return rows

    def _add_counters(self, rows: Sequence[StepRow]) -> None:
        """Each counter's last value at or before each new row's end."""
        n_before = len(self.rows)
        for name, tail in self._tail.items():
            tail.sort()
            vals = self.counter_values.setdefault(name, [None] * n_before)
            i = 0
            last = self._before.get(name)
            for row in rows:
                while i < len(tail) and tail[i][0] <= row.t_end_ns:
                    v = tail[i][1]
                    last = v if math.isfinite(v) else last
                    i += 1
                vals.append(last)
            del tail[:i]
            if last is not None:
                self._before[name] = last
        for name, vals in self.counter_values.items():
            if len(vals) < n_before + len(rows):
                vals.extend([self._before.get(name)] * (n_before + len(rows) - len(vals)))

    def _add_medians(self, rows: Sequence[StepRow], calls: CallTable) -> None:
        """Each op's median host latency in each new row, µs."""
        n_before = len(self.rows)
        idx = assign_calls(calls, rows, by_step_number=True)
        per_op = op_medians(calls, idx, len(rows)) if len(calls) else {}
        for op in set(per_op) | set(self.op_medians):
            vals = self.op_medians.setdefault(op, [None] * n_before)
            vals += per_op.get(op, [None] * len(rows))

    def _add_sites(self, rows: Sequence[StepRow], calls: CallTable) -> None:
        """Count the caller sites of the new rows' calls inside the syncs (both ways
        :func:`~wsprof.analysis.process.sync_windows` tells a sync)."""
        self._row_syncs += sync_windows(rows, [])
        _count_sites(self._sites_in_spans, calls, _by_start(self._sync_spans))
        _count_sites(self._sites_in_rows, calls, self._row_syncs)

    def _add_util(self, end_ns: int) -> None:
        """Sum the NVML utilization readings before ``end_ns`` (a new row's end), inside and
        outside the sync phases read: every phase that starts before a step's end is written
        before its step span."""
        done = [x for x in self._util_tail if x[0] < end_ns]
        if not done:
            return
        self._util_tail = [x for x in self._util_tail if x[0] >= end_ns]
        inside, outside = self._split_util(done)
        self._util_in.add(inside)
        self._util_out.add(outside)

    def _split_util(self, readings: Sequence[tuple[int, float]]) -> tuple[list[float], list[float]]:
        """The values of ``readings`` inside and outside the sync phases read (as
        :func:`~wsprof.analysis.process.gpu_util` tells them)."""
        if not self._sync_spans:
            return [], [v for _, v in readings]
        t = np.array([x[0] for x in readings], dtype=np.int64)
        inside = in_spans(t, _by_start(self._sync_spans)).tolist()
        return (
            [v for (_, v), i in zip(readings, inside) if i],
            [v for (_, v), i in zip(readings, inside) if not i],
        )

    def gpu_util(self) -> GpuUtil | None:
        """:func:`~wsprof.analysis.process.gpu_util` of what was read: the running sums of the
        readings before the last row's end and the readings after it."""
        if not self._sync_spans:
            return None
        inside, outside = self._split_util(self._util_tail)
        sync, other = self._util_in.plus(inside), self._util_out.plus(outside)
        if sync.n < GPU_UTIL_MIN_SAMPLES:
            return None
        return GpuUtil(
            sync_pct=sync.mean(), other_pct=other.mean() if other.n else None, n_sync=sync.n
        )

    def sync_site(self) -> str | None:
        """:func:`~wsprof.analysis.process.sync_site` of the calls read with their step: those
        of completed steps (counted as each row is made) and those of the open step."""
        spans = _by_start(self._sync_spans)
        counts = dict(self._sites_in_spans if spans else self._sites_in_rows)
        _count_sites(counts, _cat_calls(self._calls), spans or self._row_syncs)
        if not counts:
            return None
        top = max(counts.values())
        return site_text(self.sites, min(i for i, k in counts.items() if k == top))

    def series(self) -> list[Series]:
        """The process's per-step series, named as in ``wsprof analyze``."""
        rows = self.rows
        return [
            *row_series(rows, "markers"),
            *op_median_series(self.op_medians, rows),
            *counter_series(self.counter_values, rows),
        ]

    def wrappers(self) -> list[WrapperFact]:
        """The wrapper audit (as :func:`wsprof.analysis.digest.wrapper_facts`), from the
        ``wrapper`` events and the summed time between layers of each API name."""
        return facts_of_wrappers(self.wrapper_events, self.between_by_api)

    def analysis(self, windows: Sequence[SampleWindow] = ()) -> ProcessAnalysis:
        """The process as the rules see it, from what is kept exactly.

        As ``wsprof analyze`` makes it (:func:`~wsprof.analysis.process.process_analysis`),
        with its py-spy sampling windows joined by the same
        :func:`~wsprof.analysis.process.join_samples`: its own trace's when it has any, else
        ``windows`` (those other traces, a sampler's, recorded for its pid:
        :meth:`LiveRun.windows_of`). Windows are kept as read, one row per stack per window,
        as ``wsprof analyze`` holds them.

        Kept exactly, in bounded memory:

        - the caller site of the weight sync (``sync_site``): per caller site, the calls of
          each step that start inside a sync (a weight-sync phase span, else the row's sync),
          counted when the step's row is made, plus the calls of the open step; one
          ``(start, end)`` pair per sync is kept. The calls read before the first step
          marker are not kept (they enter no row), so a sync phase before the first step
          counts none of its calls where ``wsprof analyze`` counts them; and a watch that read
          a step before retention thinned it counts all its calls where ``wsprof analyze``
          counts those kept in detail;
        - the GPU utilization in and out of the sync phases (``gpu_util``): exact sums and
          counts of the NVML utilization readings, each summed once every phase that could
          hold it was read (before a completed step's end), plus the readings after the last
          completed step; the mean is the exact sum divided once (NVML's whole percentages
          give ``wsprof analyze``'s mean to the bit).

        Left out, as it cannot be exact without keeping every call: the cost model per call
        (``cost_model``: the median duration of each payload-size class's calls, over every
        call of the run; a median needs every value). ``call_count_growth`` then says the
        calls added per step without their fixed cost and what bucketing them would save.
        Also left out (:func:`~wsprof.analysis.process.process_analysis`): per-call points,
        per-op latency medians and p99, counter tracks over time.
        """
        own = self.samples or list(windows)
        key = (self._version, len(own), own[-1] if own else None, own[0] if own else None)
        if self._joined is not None and self._joined[0] == key:
            return self._joined[1]
        pa = process_analysis(
            label=self.label,
            rank=self.rank,
            pid=self.pid,
            step_source=StepSource.MARKERS if self.rows else StepSource.NONE,
            steps=self.rows,
            ops=op_stats_of_sums(self.ops, self.op_apis, self.op_bytes),
            calls=counted_calls(self.n_calls),
            counters=(),
            meta=self.meta,
            gpu_util=self.gpu_util(),
            sync_site=self.sync_site(),
            self_overhead=self.self_overhead,
            sync_evidence="weight-sync phases" if self.sync_phases else None,
        )
        pa = join_samples(pa, self.meta, own)
        self._joined = (key, pa)
        return pa

    def audit(self) -> list[GroupCoverage] | None:
        """The coverage audit of what was read (:func:`~wsprof.analysis.coverage.audit_process`
        of its readings and recorded sums), made again only when they changed; None when
        the trace has no audit."""
        if not self._audited:
            trace = ProcessTrace(
                self.path,
                dict(self.meta),
                CallTable.empty(),
                {},
                [],
                {},
                list(self.patched),
                issued=self.issued,
                recorded_issued=self.recorded,
            )
            self._audit = audit_process(trace, self.label)
            self._audited = True
        return self._audit


def rows_in(t: ProcessTrace) -> int:
    """Rows an incremental read returned."""
    return (
        len(t.calls)
        + len(t.spans)
        + sum(len(v[0]) for v in t.counters.values())
        + len(t.events)
        + len(t.samples)
        + (len(t.totals) if t.totals is not None else 0)
        + len(t.issued or ())
    )
