"""Live analysis of a run folder being written: the model behind ``wsprof watch``.

Incremental: each refresh reads only the rows added since the previous one
(:mod:`wsprof.trace.follow`) and turns only the steps completed since into step rows, with the
same code as ``wsprof analyze`` (:func:`~wsprof.analysis.steps.steps_from_markers`). A step is
complete when its ``step`` span is in the trace: the recorder writes a step's span after every
call and phase of it (one ordered capture buffer), so its rows never change afterwards. What a
refresh keeps in memory is one row per step per process, running totals, and the calls and
spans of each process's open step; raw calls of completed steps are released. py-spy's
sampling windows (already one row per stack per window) are kept as read and joined to the
process whose pid they sampled, as in ``wsprof analyze`` (:meth:`LiveProcess.analysis`).

Judging stays bounded as the run grows:

- a series of more than :data:`MAX_JUDGED_POINTS` steps is judged on that many points, each
  the mean of consecutive steps (:func:`binned`): the curve's shape and its slope per step are
  kept, the classifier's cost (about 50 ms at 100 points, 550 ms at 1,000 on one core) is not
  paid again at every step;
- the headline series (the primary process's, as in ``wsprof analyze``) are judged again
  whenever they have a new step; each rank's own series (weight sync, time between layers,
  sync gaps: for the outlier-rank rule) within :data:`RANK_JUDGE_BUDGET_S` per refresh, the
  least recently judged first; the others keep their last verdict until their turn.

A growth verdict that rests on the newest step alone (without that step the series is not
judged to grow) is held back until the next step: judged live, the newest step is where a
single slow step (a checkpoint save, an evaluation) falls, and one slow step is not a trend.

The verdict, findings and diagnoses come from the same rules as ``wsprof analyze``
(:func:`~wsprof.analysis.rules.run_rules`, :func:`~wsprof.analysis.chains.diagnose`,
:func:`~wsprof.analysis.verdict.with_verdict`) applied to these rows. Steps are taken from step
markers (``wsprof.step()``, a preset's phases); a process without them is said to be
unjudged, never healthy: ``wsprof analyze`` finds its steps from the job's rhythm after the run.
Analysis never runs inside the training processes: this runs in the watching process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from wsprof.analysis.align import align, anchor_of, clock_input
from wsprof.analysis.conclude import conclude
from wsprof.analysis.coverage import audit_process, coverage_of
from wsprof.analysis.coverage_model import GroupCoverage
from wsprof.analysis.facts import TIME_BUDGETS_S, Facts
from wsprof.analysis.growth import classify, hold_newest
from wsprof.analysis.headline import headline_of
from wsprof.analysis.model import (
    Analysis,
    AnalysisKind,
    GpuUtil,
    GrowthVerdict,
    ProcessAnalysis,
    RankSeries,
    SeriesResult,
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
    primary_key,
    process_analysis,
    site_text,
    sites_in_windows,
    sync_windows,
    with_sync_starts,
    without_thinned_gaps,
)
from wsprof.analysis.ranks import RankInput, judged_series, rank_series, sync_lags
from wsprof.analysis.run import facts_of_wrappers, with_unread
from wsprof.analysis.snapshot import LiveRank, OpTotal, WatchSnapshot
from wsprof.analysis.steps import assign_calls, steps_from_markers, sync_spans
from wsprof.contracts.counters import NVML_UTIL_PCT, is_nvml_gpu
from wsprof.contracts.events import Event, EventKind, Patched, WrapperFound
from wsprof.contracts.overhead import SelfOverhead
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    SYNC_GAP_S,
    WEIGHT_SYNC_S,
    Series,
)
from wsprof.contracts.units import Unit
from wsprof.trace.follow import RunFollower, TraceFollower
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
from wsprof.trace.salvage import TraceState, end_of

#: Most points a series is judged on; longer series are judged on means of consecutive steps.
#: growth's classifier costs about 50 ms at 100 points and 550 ms at 1,000 (Theil-Sen and
#: Mann-Kendall are quadratic in the points), measured on one core of the CI machine.
MAX_JUDGED_POINTS = 100
#: Wall time per refresh for judging the ranks' own series again, s (the headline series are
#: always judged): 64 ranks x 3 series at about 50 ms each take 10 s, so each rank's turn
#: comes every few refreshes instead of every refresh taking 10 s.
RANK_JUDGE_BUDGET_S = 1.0


def binned(s: Series, max_points: int = MAX_JUDGED_POINTS) -> Series:
    """``s`` itself when it has at most ``max_points`` points, else the means of consecutive
    runs of ``ceil(n / max_points)`` points (the last run may be shorter), each at the rounded
    mean of its step numbers: the same slope per step, less noise, at most ``max_points``
    points. Per-point configurations are dropped."""
    n = len(s.values)
    if n <= max_points:
        return s
    width = math.ceil(n / max_points)
    idx = np.arange(n) // width
    counts = np.bincount(idx)
    values = np.bincount(idx, weights=np.asarray(s.values, dtype=np.float64)) / counts
    steps = np.bincount(idx, weights=np.asarray(s.steps, dtype=np.float64)) / counts
    return replace(
        s,
        steps=tuple(int(round(x)) for x in steps),
        values=tuple(float(v) for v in values),
        config=None,
    )


def _judge(
    s: Series, budgets: dict[str, float], notes: list[str] | None = None
) -> SeriesResult | None:
    """The series and its verdict, judged on at most :data:`MAX_JUDGED_POINTS` points (with
    its time budget, s, from ``budgets``; :func:`on_every_step`); None, with a note, when it
    cannot be judged."""
    b = binned(s)
    try:
        budget = budgets.get(s.name) if s.unit is Unit.SECONDS else None
        verdict = classify(b.values, steps=b.steps, budget=budget)
        # The newest step is the one a spike (a checkpoint save, an eval step) falls on:
        # growth that rests on it alone waits for the next step (as in `wsprof analyze`).
        verdict = hold_newest(b.values, verdict, steps=b.steps, budget=budget)
    except (ValueError, OverflowError, FloatingPointError, ZeroDivisionError) as e:
        if notes is not None:
            notes.append(f"series {s.name!r} not judged: {e}")
        return None
    return SeriesResult(s, verdict if b is s else on_every_step(verdict, b, s))


def on_every_step(verdict: GrowthVerdict, judged: Series, full: Series) -> GrowthVerdict:
    """A verdict judged on :func:`binned` points, restated for the full series: positions
    (change point, warm-up points) scaled to the steps they stand for, the fitted curve
    interpolated at every step; slopes, projections and budget steps are per step number
    already. ``evidence`` says how it was judged (``judged_points``, ``steps_per_point``)."""
    width = math.ceil(len(full.values) / len(judged.values))
    last = len(full.values) - 1
    stats = dict(verdict.evidence)
    if verdict.judged_from:
        stats["warmup_points"] = min(verdict.judged_from * width, last)
    stats.update(judged_points=len(judged.values), steps_per_point=width)
    fitted = np.interp(
        np.asarray(full.steps, dtype=np.float64),
        np.asarray(judged.steps, dtype=np.float64),
        np.asarray(verdict.fitted, dtype=np.float64),
    )
    return replace(
        verdict,
        change_point=(
            None if verdict.change_point is None else min(verdict.change_point * width, last)
        ),
        fitted=tuple(float(v) for v in fitted),
        evidence=stats,
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
        if _rows_in(delta) or delta.meta != self.meta:
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
        """The wrapper audit (as :func:`wsprof.analysis.run.wrapper_facts`), from the
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


@dataclass
class _Judged:
    """A cached verdict and how many steps it was judged on."""

    steps: int
    verdict: GrowthVerdict | None


class LiveRun:
    """A run folder followed refresh by refresh (see the module docstring).

    Args:
        folder: the run folder; it may not exist yet.
        host: follow only the traces written on this host (one ``watch`` per node on a shared
            folder); None: all.
        sync_budget_s: the weight-sync time whose crossing step is projected, s (default:
            ``wsprof analyze``'s, :data:`~wsprof.analysis.facts.TIME_BUDGETS_S`).
        rank_budget_s: wall time per refresh for judging ranks' own series again, s.
        clock: the wall clock of a refresh's duration (injectable for tests).
    """

    def __init__(
        self,
        folder: str,
        host: str | None = None,
        sync_budget_s: float | None = None,
        rank_budget_s: float = RANK_JUDGE_BUDGET_S,
        clock: Any = time.perf_counter,
    ) -> None:
        self.folder = folder
        self.budgets = dict(TIME_BUDGETS_S)
        if sync_budget_s is not None:
            self.budgets[WEIGHT_SYNC_S] = float(sync_budget_s)
        self.follower = RunFollower(folder, host)
        self.procs: dict[str, LiveProcess] = {}
        self.rank_budget_s = rank_budget_s
        self._clock = clock
        self._judged: dict[tuple[str, str], _Judged] = {}
        self._primary: dict[str, _Judged] = {}
        self._primary_path: str | None = None
        self._primary_results: dict[str, SeriesResult] = {}
        #: path -> the generation of its follower whose rows ``procs`` holds.
        self._generation: dict[str, int] = {}
        #: path -> (what its per-rank row was made from, the row) as last made.
        self._rank_cache: dict[str, tuple[tuple[int, ...], RankSeries]] = {}
        self.refreshes = 0

    def refresh(self) -> WatchSnapshot:
        """Read what was added, make rows of the completed steps, judge, and return the run
        as it stands."""
        t0 = self._clock()
        new_steps: list[tuple[str, StepRow]] = []
        rows_read = 0
        for path, delta in self.follower.poll():
            if delta is None:
                continue
            gen = self.follower.traces[path].generation
            if self._generation.get(path, gen) != gen:
                self._forget(path)  # another file under the same name: read from its start
            self._generation[path] = gen
            proc = self.procs.setdefault(path, LiveProcess(path))
            rows_read += _rows_in(delta)
            new_steps += [(proc.label, r) for r in proc.add(delta)]
        read_s = self._clock() - t0
        analysis = self._analysis()
        self.refreshes += 1
        followers = self.follower.traces
        ranks = tuple(self._live_rank(p, followers.get(p.path)) for p in self._ordered())
        states = [r.state for r in ranks]
        ended = bool(states) and all(s in ("closed", "killed", "removed") for s in states)
        new_steps.sort(key=lambda x: (x[1].step, x[0]))
        return WatchSnapshot(
            source=self.folder,
            analysis=analysis,
            ranks=ranks,
            new_steps=tuple(new_steps),
            refresh_s=self._clock() - t0,
            read_s=read_s,
            rows_read=rows_read,
            ended=ended,
            refreshes=self.refreshes,
            sync_budget_s=self.budgets[WEIGHT_SYNC_S],
        )

    def close(self) -> None:
        self.follower.close()

    def _forget(self, path: str) -> None:
        """Drop what was made of the trace at ``path`` (its rows, verdicts, rank row)."""
        self.procs.pop(path, None)
        self._rank_cache.pop(path, None)
        for key in [k for k in self._judged if k[0] == path]:
            del self._judged[key]
        if self._primary_path == path:
            self._primary_path = None
            self._primary.clear()
            self._primary_results.clear()

    def _ordered(self) -> list[LiveProcess]:
        """Primary first, as ``wsprof analyze`` orders processes: one with steps, by rank
        (unknown last), most calls, pid."""

        return sorted(
            self.procs.values(),
            key=lambda p: primary_key(bool(p.rows), p.rank, p.n_calls, p.pid),
        )

    def _primary_series(self, proc: LiveProcess, notes: list[str]) -> list[SeriesResult]:
        """The headline series judged again where they have new steps."""
        if proc.path != self._primary_path:
            self._primary_path = proc.path
            self._primary.clear()
            self._primary_results.clear()
        out: list[SeriesResult] = []
        for s in proc.series():
            hit = self._primary.get(s.name)
            if hit is None or hit.steps != len(s.values):
                res = _judge(s, self.budgets, notes)
                self._primary[s.name] = _Judged(len(s.values), res.verdict if res else None)
                if res is not None:
                    self._primary_results[s.name] = res
                else:
                    self._primary_results.pop(s.name, None)
            res = self._primary_results.get(s.name)
            if res is not None:
                out.append(res)
        return out

    def _rank_rows(
        self,
        procs: Sequence[LiveProcess],
        pas: Mapping[str, ProcessAnalysis],
        notes: list[str],
    ) -> list[RankSeries]:
        """Per-rank rows (as ``wsprof analyze`` makes them), judging within the budget
        (``pas``: path -> the process's analysis)."""
        with_steps = [p for p in procs if p.rows]
        if not with_steps:
            return []
        clock = align([clock_input(p.label, p.meta, p.first_ns or 0) for p in with_steps])
        if len(with_steps) > 1:
            notes.extend(clock.notes)
        self._judge_ranks(with_steps, pas)
        rows: dict[int, RankSeries] = {}
        todo: list[int] = []
        for i, p in enumerate(with_steps):
            cached = self._rank_cache.get(p.path)
            if cached is not None and cached[0] == self._rank_version(p):
                rows[i] = cached[1]
            else:
                todo.append(i)

        def verdicts_of(p: LiveProcess) -> Callable[[Series], GrowthVerdict | None]:
            def judged(s: Series) -> GrowthVerdict | None:
                hit = self._judged.get((p.path, s.name))
                return hit.verdict if hit is not None else None

            return judged

        rank_inputs: list[RankInput] = []
        for i in todo:
            p = with_steps[i]
            wrappers = [w for w in p.wrappers() if w.kind == "name"]
            rank_inputs.append(
                RankInput(
                    pas[p.path],
                    p.host,
                    clock.clocks[i],
                    tuple(r.sync_start_ns for r in p.rows),
                    wrappers[0].label() if wrappers else None,
                )
            )
        made = rank_series(rank_inputs, [verdicts_of(with_steps[i]) for i in todo])
        for i, row in zip(todo, made):
            rows[i] = row
            self._rank_cache[with_steps[i].path] = (self._rank_version(with_steps[i]), row)
        ordered = [rows[i] for i in sorted(rows)]
        lags = sync_lags(ordered)
        return [replace(r, sync_lag_s=lag) for r, lag in zip(ordered, lags)]

    def _judge_ranks(
        self, procs: Sequence[LiveProcess], pas: Mapping[str, ProcessAnalysis]
    ) -> None:
        """Judge the ranks' own series that have new steps, the least recently judged first,
        until :attr:`rank_budget_s` is spent; the others keep their verdicts."""
        deadline = self._clock() + self.rank_budget_s
        for p in sorted(procs, key=lambda p: self._judged_steps(p) - len(p.rows)):
            if self._clock() > deadline:
                break
            names = (WEIGHT_SYNC_S, BETWEEN_LAYERS_S, SYNC_GAP_S)
            if all(self._judged_at((p.path, n)) == len(p.rows) for n in names):
                continue
            for name, s in judged_series(pas[p.path]).items():
                res = _judge(s, self.budgets)
                self._judged[(p.path, name)] = _Judged(len(p.rows), res.verdict if res else None)
            for name in names:  # a series without values is judged as nothing, once
                self._judged.setdefault((p.path, name), _Judged(len(p.rows), None))

    def _judged_at(self, key: tuple[str, str]) -> int:
        hit = self._judged.get(key)
        return hit.steps if hit is not None else -1

    def _rank_version(self, p: LiveProcess) -> tuple[int, ...]:
        """What a rank's row is made from: its steps and the steps its verdicts were judged on."""
        return (
            len(p.rows),
            *(self._judged_at((p.path, n)) for n in (WEIGHT_SYNC_S, BETWEEN_LAYERS_S, SYNC_GAP_S)),
        )

    def _judged_steps(self, p: LiveProcess) -> int:
        hit = self._judged.get((p.path, "weight_sync_s"))
        return hit.steps if hit is not None else 0

    def windows_by_pid(self) -> dict[int, list[SampleWindow]]:
        """pid -> the sampling windows every trace read holds of it, traces by rank (unknown
        last) and pid, as ``wsprof analyze`` reads a run folder."""
        out: dict[int, list[SampleWindow]] = {}
        traces = sorted(self.procs.values(), key=lambda p: (_or_last(p.rank), p.pid or 0))
        for p in traces:
            for w in p.samples:
                out.setdefault(w.pid, []).append(w)
        return out

    def windows_of(
        self, p: LiveProcess, by_pid: Mapping[int, Sequence[SampleWindow]] | None = None
    ) -> Sequence[SampleWindow]:
        """The sampling windows of ``p``'s pid recorded by the traces read (a sampler's), as
        ``wsprof analyze`` matches them; :meth:`LiveProcess.analysis` uses them when its own
        trace has none."""
        if p.samples or p.pid is None:
            return ()
        return (self.windows_by_pid() if by_pid is None else by_pid).get(p.pid, ())

    def _analysis(self) -> Analysis:
        # A sampler's trace is no process of the run (as in `wsprof analyze`): its windows
        # are joined to the processes whose pids they sampled.
        followed = self._ordered()
        procs = [p for p in followed if not p.sampler_only] or followed
        notes: list[str] = []
        by_pid = self.windows_by_pid()
        analyses = [p.analysis(self.windows_of(p, by_pid)) for p in procs]
        pas = {p.path: a for p, a in zip(procs, analyses)}
        results = self._primary_series(procs[0], notes) if procs and procs[0].rows else []
        ranks = self._rank_rows(procs, pas, notes)
        wrappers = procs[0].wrappers() if procs else []
        errors = [e for p in procs for e in p.internal_errors]
        head = headline_of(analyses[0] if analyses else None, results, self.folder, analyses)
        facts = Facts(
            {r.series.name: r for r in results},
            analyses,
            wrappers,
            errors,
            ranks=ranks,
            headline=head,
            budgets=self.budgets,
        )
        unmarked = [p.label for p in procs if not p.rows and p.n_calls]
        if unmarked:
            notes.append(
                f"no completed step markers yet in {', '.join(unmarked)}: watch judges steps "
                "marked by wsprof.step() or a preset; `wsprof analyze` finds the steps of an "
                "unmarked job from its rhythm when the run is over"
            )
        repeated = sum(p.repeated for p in procs)
        if repeated:
            notes.append(
                f"{repeated} step span(s) repeated a step number already completed: watch "
                "counted each step once (`wsprof analyze` merges them)"
            )
        if any(len(p.rows) > MAX_JUDGED_POINTS for p in procs):
            notes.append(
                f"series of more than {MAX_JUDGED_POINTS} steps are judged on at most "
                f"{MAX_JUDGED_POINTS} points, each the mean of consecutive steps "
                "(`wsprof analyze` judges every step)"
            )
        unread = tuple(f"skipped {m}" for m in self.follower.problems())
        analysis = conclude(
            facts,
            Analysis(
                source=self.folder,
                kind=AnalysisKind.RUN,
                processes=tuple(analyses),
                series=tuple(results),
                findings=(),
                diagnoses=(),
                notes=tuple(notes),
                wrappers=tuple(wrappers),
                ranks=tuple(ranks),
                coverage=with_unread(
                    coverage_of([(p.label, p.audit(), p.n_calls > 0) for p in procs]), unread
                ),
                unread=unread,
                headline=head,
            ),
            {a.label: p.wrappers() for p, a in zip(procs, analyses)},
        )
        return analysis

    def _live_rank(self, p: LiveProcess, follower: TraceFollower | None) -> LiveRank:
        ov = p.self_overhead
        problem = follower.problem if follower is not None else None
        removed = follower is None or follower.removed
        anchor = anchor_of(p.meta)
        groups = p.audit() or []
        issued_known = bool(groups) and all(g.issued is not None for g in groups)
        hit = self._judged.get((p.path, "weight_sync_s"))
        if p.path == self._primary_path and "weight_sync_s" in self._primary_results:
            sync: GrowthVerdict | None = self._primary_results["weight_sync_s"].verdict
            judged = self._primary["weight_sync_s"].steps
        else:
            sync, judged = (hit.verdict, hit.steps) if hit is not None else (None, 0)
        return LiveRank(
            label=p.label,
            rank=p.rank,
            host=p.host,
            pid=p.pid,
            path=p.path,
            state=TraceState.REMOVED if removed else end_of(p.meta),
            started_unix_ns=anchor[1] if anchor else None,
            steps=len(p.rows),
            last=p.rows[-1] if p.rows else None,
            ops=tuple(
                sorted(
                    (OpTotal(op, int(v[0]), v[1] / 1e9) for op, v in p.ops.items()),
                    key=lambda o: -o.seconds,
                )
            ),
            issued=sum(g.issued or 0 for g in groups) if issued_known else None,
            recorded=sum(g.recorded for g in groups) if issued_known else None,
            hook_s=(
                ov.hook_ns_per_call * p.n_calls / 1e9 if ov.hook_ns_per_call is not None else None
            ),
            flush_s=ov.flush_s,
            probe_s=ov.probes.spent_ns / 1e9 if ov.probes is not None else 0.0,
            dropped_calls=ov.dropped_calls,
            lost_calls=ov.lost_calls,
            dropped_records=ov.dropped_records,
            internal_errors=len(p.internal_errors),
            sync=sync,
            sync_judged_steps=judged,
            problem=problem,
        )


def _or_last(rank: int | None) -> int:
    return rank if rank is not None else 1 << 30


def _rows_in(t: ProcessTrace) -> int:
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
