"""Per-process analysis: steps, per-op statistics, plotted points, counters, hot frames."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from wsprof.analysis.model import (
    CallCostModel,
    CallPoints,
    CounterTrack,
    GpuUtil,
    OpStats,
    ProcessAnalysis,
    StepRow,
    StepSource,
)
from wsprof.analysis.phases import patterns_from_meta, window_summaries
from wsprof.analysis.rhythm import COLOCATED_GLUE, steps_from_rhythm
from wsprof.analysis.sampled_steps import steps_from_windows
from wsprof.analysis.samples import early_late_shift, early_late_stacks, hot_frames, hot_stacks
from wsprof.analysis.sharing import engine_step_specs, sharing_of
from wsprof.analysis.steps import (
    drop_truncated_edges,
    step_rows,
    steps_from_bursts,
    steps_from_markers,
    sync_spans,
)
from wsprof.analysis.updates import evidence_line, steps_from_updates, updates
from wsprof.analysis.wire import with_wire
from wsprof.contracts.counters import NVML_UTIL_PCT, counter_unit, is_nvml_gpu, share_counter
from wsprof.contracts.ops import FLIGHT_LAYER
from wsprof.contracts.overhead import SelfOverhead
from wsprof.contracts.phases import ROLLOUT
from wsprof.trace.model import CallTable, CallTotals, ProcessTrace, SampleWindow, Site, Span

#: Most call points kept for plots per process; beyond it each bucket keeps its min and max.
MAX_PLOT_POINTS = 6_000
#: Most counter points kept per counter track.
MAX_COUNTER_POINTS = 2_000


def downsample_extremes(values: npt.NDArray[np.float64], max_points: int) -> npt.NDArray[np.int64]:
    """Indices to plot: all when few, else per bucket the index of the min and of the max.

    Args:
        values: shape (n,).
        max_points: at most this many indices are returned.

    Returns:
        Sorted unique indices, shape (<= max_points,).
    """
    n = len(values)
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    buckets = max(1, max_points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1][np.diff(edges) > 0]
    sizes = np.diff(np.append(starts, n))
    bucket = np.repeat(np.arange(len(starts)), sizes)
    keep: list[npt.NDArray[np.int64]] = []
    # The first index of each bucket's min and max (NaN counts as both, as np.argmin/argmax
    # take it): one vectorised pass instead of a Python loop over thousands of buckets.
    for reduce in (np.minimum, np.maximum):
        extreme = reduce.reduceat(values, starts)[bucket]
        hit = np.flatnonzero((values == extreme) | (np.isnan(values) & np.isnan(extreme)))
        first = np.ones(len(hit), dtype=bool)
        first[1:] = bucket[hit[1:]] != bucket[hit[:-1]]
        keep.append(hit[first].astype(np.int64))
    return np.unique(np.concatenate(keep))


def op_stats(calls: CallTable, totals: CallTotals | None = None) -> list[OpStats]:
    """Per canonical op statistics, most total time first.

    With ``totals`` (a trace whose retention thinned some steps), call counts, total time and
    bytes are exact sums from it; medians and p99 come from the calls kept in detail.
    """
    out: list[OpStats] = []
    if len(calls) == 0:
        return out
    dur = calls.duration_ns
    between = calls.between_layers_ns
    for op in sorted(set(calls.op.tolist())):
        m = calls.op == op
        d = dur[m]
        apis = tuple(sorted(set(calls.api[m].tolist())))
        nbytes = calls.bytes[m]
        out.append(
            OpStats(
                op=str(op),
                apis=apis,
                n_calls=int(m.sum()),
                total_s=float(d.sum()) / 1e9,
                median_us=float(np.median(d)) / 1e3,
                p99_us=float(np.percentile(d, 99)) / 1e3,
                between_layers_median_us=float(np.median(between[m])) / 1e3,
                bytes_total=int(nbytes[nbytes > 0].sum()),
            )
        )
    if totals is not None:
        for i, st in enumerate(out):
            m = totals.op == st.op
            out[i] = replace(
                st,
                n_calls=int(totals.n[m].sum()),
                total_s=float(totals.duration_ns[m].sum()) / 1e9,
                bytes_total=int(totals.bytes[m].sum()),
            )
    out.sort(key=lambda s: -s.total_s)
    return out


#: Fewest calls in a payload-size class for its median to enter the cost model.
COST_MODEL_MIN_CALLS = 3


def call_cost_model(calls: CallTable) -> CallCostModel | None:
    """Per-call cost against payload size (see :class:`CallCostModel`); None with fewer than
    two payload-size classes of :data:`COST_MODEL_MIN_CALLS` calls with known sizes."""
    known = calls.bytes > 0
    if int(known.sum()) < 2 * COST_MODEL_MIN_CALLS:
        return None
    nbytes = calls.bytes[known].astype(np.float64)
    dur_us = calls.duration_ns[known].astype(np.float64) / 1e3
    cls = np.floor(np.log2(nbytes)).astype(np.int64)
    xs: list[float] = []
    ys: list[float] = []
    for c in np.unique(cls).tolist():
        m = cls == c
        if int(m.sum()) >= COST_MODEL_MIN_CALLS:
            xs.append(float(np.median(nbytes[m])) / 2**20)
            ys.append(float(np.median(dur_us[m])))
    if len(xs) < 2 or float(np.ptp(xs)) == 0:
        return None
    fit = stats.linregress(xs, ys)
    return CallCostModel(
        fixed_us=max(float(fit.intercept), 0.0), us_per_mib=float(fit.slope), n_sizes=len(xs)
    )


#: Fewest NVML samples inside weight-sync phases for a utilization there to be reported.
GPU_UTIL_MIN_SAMPLES = 3


def in_spans(t: npt.NDArray[np.int64], spans: Sequence[tuple[int, int]]) -> npt.NDArray[np.bool_]:
    """Whether each time in ``t`` is inside the last of ``spans`` (``(start, end)`` ns, sorted
    by start, at least one) that starts at or before it (its end excluded)."""
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    ends = np.array([b for _, b in spans], dtype=np.int64)
    i = np.searchsorted(starts, t, side="right") - 1
    return (i >= 0) & (t < ends[np.clip(i, 0, None)])


def gpu_util(trace: ProcessTrace) -> GpuUtil | None:
    """Mean NVML utilization (``nvml.gpu<i>.util_pct``, every GPU) inside and outside the
    weight-sync phases; None without :data:`GPU_UTIL_MIN_SAMPLES` samples inside."""
    spans = sync_spans(trace.spans)
    names = [n for n in trace.counters if is_nvml_gpu(n, NVML_UTIL_PCT)]
    if not spans or not names:
        return None
    t = np.concatenate([trace.counters[n][0] for n in names])
    v = np.concatenate([trace.counters[n][1] for n in names])
    ok = np.isfinite(v)
    t, v = t[ok], v[ok]
    inside = in_spans(t, [(sp.t_start_ns, sp.t_end_ns) for sp in spans])
    if int(inside.sum()) < GPU_UTIL_MIN_SAMPLES:
        return None
    other = v[~inside]
    return GpuUtil(
        sync_pct=float(v[inside].mean()),
        other_pct=float(other.mean()) if len(other) else None,
        n_sync=int(inside.sum()),
    )


#: Caller sites named in the per-site plot (most total time first); the rest are "other sites".
MAX_PLOT_SITES = 6


def _site_labels(
    calls: CallTable, sites: Mapping[int, Site], idx: npt.NDArray[np.int64]
) -> tuple[str, ...]:
    """Labels of the caller sites of the calls at ``idx`` (see :class:`CallPoints`)."""
    if not len(calls):
        return ()
    ids, inv = np.unique(calls.site, return_inverse=True)
    total = np.bincount(inv.reshape(-1), weights=calls.duration_ns.astype(np.float64))
    top = {int(ids[i]) for i in np.argsort(-total)[:MAX_PLOT_SITES]}
    labels: dict[int, str] = {}  # one label per distinct site, not per point
    for sid in np.unique(calls.site[idx]).tolist():
        site = sites.get(int(sid))
        if site is None:
            labels[sid] = "unknown"
        elif int(sid) in top:
            labels[sid] = f"{site.function} ({os.path.basename(site.file)}:{site.line})"
        else:
            labels[sid] = "other sites"
    return tuple(labels[sid] for sid in calls.site[idx].tolist())


def with_sync_starts(rows: Sequence[StepRow], spans: Sequence[Span]) -> list[StepRow]:
    """``rows`` with ``sync_start_ns`` from markers (the step's first weight-sync phase span)
    where they have none (rhythm and bursts set their own)."""
    first: dict[int, int] = {}
    for sp in sync_spans(spans):
        first.setdefault(sp.step, sp.t_start_ns)
    return [
        r
        if r.sync_start_ns is not None or r.step not in first
        else replace(r, sync_start_ns=first[r.step])
        for r in rows
    ]


def with_sync_keys(rows: Sequence[StepRow], calls: CallTable) -> list[StepRow]:
    """``rows`` with ``sync_key``: the group and sequence number of the first collective of
    each weight sync whose calls carry c10d's sequence numbers (``calls`` sorted by start)."""
    known = np.flatnonzero(calls.seq >= 0) if len(calls) else np.zeros(0, np.int64)
    if not len(known):
        return list(rows)
    starts = calls.t_start_ns[known]
    out = []
    for r in rows:
        if r.sync_start_ns is None or r.weight_sync_s is None:
            out.append(r)
            continue
        i = int(np.searchsorted(starts, r.sync_start_ns, side="left"))
        if i >= len(known) or starts[i] > r.sync_start_ns + int(r.weight_sync_s * 1e9):
            out.append(r)
            continue
        j = int(known[i])
        grp = calls.grp[j]
        key = (str(grp) if grp is not None else "", int(calls.seq[j]))
        out.append(replace(r, sync_key=key))
    return out


def sync_windows(rows: Sequence[StepRow], spans: Sequence[Span]) -> list[tuple[int, int]]:
    """The weight syncs as ``(start, end)`` ns, both included: the sync phases of markers, else
    each step's sync (``sync_start_ns`` + ``weight_sync_s``)."""
    windows = [(sp.t_start_ns, sp.t_end_ns) for sp in sync_spans(spans)]
    if not windows:
        windows = [
            (r.sync_start_ns, r.sync_start_ns + int(r.weight_sync_s * 1e9))
            for r in rows
            if r.sync_start_ns is not None and r.weight_sync_s is not None
        ]
    return windows


def sites_in_windows(calls: CallTable, windows: Sequence[tuple[int, int]]) -> npt.NDArray[np.int64]:
    """The known caller sites (ids >= 0) of the calls (sorted by start) that start inside any of
    ``windows`` (:func:`sync_windows`), each call once."""
    inside = np.zeros(len(calls), dtype=bool)
    for lo, hi in windows:
        a, b = np.searchsorted(calls.t_start_ns, [lo, hi + 1])
        inside[a:b] = True
    ids = calls.site[inside]
    return ids[ids >= 0]


def site_text(sites: Mapping[int, Site], site_id: int) -> str | None:
    """``function (file:line)`` of a caller site; None when unknown."""
    site = sites.get(site_id)
    return None if site is None else f"{site.function} ({site.file}:{site.line})"


def sync_site(
    calls: CallTable, rows: Sequence[StepRow], spans: Sequence[Span], sites: Mapping[int, Site]
) -> str | None:
    """``function (file:line)`` of the caller site with the most calls inside weight syncs
    (:func:`sync_windows`), the lowest id of a tie. None when no call falls in a sync or its
    site is unknown."""
    if not len(calls):
        return None
    ids = sites_in_windows(calls, sync_windows(rows, spans))
    if not len(ids):
        return None
    return site_text(sites, int(np.bincount(ids).argmax()))


def call_points(calls: CallTable, sites: Mapping[int, Site] | None = None) -> CallPoints:
    """Per-call latency and time between layers over call index, downsampled keeping extremes;
    with ``sites``, each point's caller site (:class:`CallPoints`)."""
    lat = calls.duration_ns.astype(np.float64) / 1e3
    idx = downsample_extremes(lat, MAX_PLOT_POINTS)
    return CallPoints(
        index=tuple(int(i) for i in idx),
        latency_us=tuple(float(v) for v in lat[idx]),
        between_layers_us=tuple(float(v) / 1e3 for v in calls.between_layers_ns[idx]),
        step=tuple(int(v) for v in calls.step[idx]),
        op=tuple(str(v) for v in calls.op[idx]),
        n_total=len(calls),
        site=_site_labels(calls, sites, idx) if sites is not None else (),
    )


#: Counter values beyond this magnitude are treated as missing: fits and axes of values near the
#: largest double overflow (and LAPACK prints warnings on stdout); no real counter gets there.
COUNTER_MAX_ABS = 1e250


def _sane(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Counter values with those beyond :data:`COUNTER_MAX_ABS` as NaN."""
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(v) > COUNTER_MAX_ABS, np.nan, v)


def counter_tracks(trace: ProcessTrace, t0_ns: int) -> list[CounterTrack]:
    """Every counter over time (seconds since ``t0_ns``), downsampled keeping extremes."""
    tracks: list[CounterTrack] = []
    for name in sorted(trace.counters):
        t, v = trace.counters[name]
        v = _sane(v)
        idx = downsample_extremes(v, MAX_COUNTER_POINTS)
        tracks.append(
            CounterTrack(
                name=name,
                t_s=tuple(float(x) for x in (t[idx] - t0_ns) / 1e9),
                value=tuple(float(x) for x in v[idx]),
                unit=counter_unit(name),
            )
        )
    return tracks


def counter_per_step(
    trace: ProcessTrace, steps: Sequence[StepRow]
) -> dict[str, list[float | None]]:
    """Each counter's last value at or before each step's end (None before its first sample).

    The last step's end is at most the process's last call or span (:func:`last_activity_ns`):
    a step cut by time (rhythm, bursts) runs to the last record, which is the counters' own
    sample at process exit, taken after the job released what it held; that sample is no
    step's value (a leak's RSS read as a step change down)."""
    ends = [row.t_end_ns for row in steps]
    active = last_activity_ns(trace)
    if ends and active is not None and steps[-1].t_start_ns <= active < ends[-1]:
        ends[-1] = active
    out: dict[str, list[float | None]] = {}
    for name, (t, v) in trace.counters.items():
        v = _sane(v)
        vals: list[float | None] = []
        for end in ends:
            i = int(np.searchsorted(t, end, side="right")) - 1
            vals.append(float(v[i]) if i >= 0 else None)
        out[name] = vals
    return out


def last_activity_ns(trace: ProcessTrace) -> int | None:
    """Monotonic ns of the end of the process's last call (its completion when later) or span;
    None when it has neither (counter samples are no activity)."""
    cands: list[int] = [s.t_end_ns for s in trace.spans]
    calls = trace.calls
    if len(calls):
        cands += [int(calls.t_end_ns.max()), int(calls.t_done_ns.max())]
    return max(cands) if cands else None


def first_record_ns(trace: ProcessTrace) -> int:
    """Monotonic ns of the process's first record (anchor when nothing was recorded)."""
    cands: list[int] = []
    if len(trace.calls):
        cands.append(int(trace.calls.t_start_ns.min()))
    cands += [s.t_start_ns for s in trace.spans[:1]]
    cands += [int(t[0]) for t, _ in trace.counters.values() if len(t)]
    if cands:
        return min(cands)
    anchor = trace.meta.get("anchor") or {}
    return int(anchor.get("monotonic_ns", 0))


def last_record_ns(trace: ProcessTrace) -> int:
    cands: list[int] = [0]
    if len(trace.calls):
        cands.append(int(trace.calls.t_end_ns.max()))
    cands += [s.t_end_ns for s in trace.spans]
    cands += [int(t[-1]) for t, _ in trace.counters.values() if len(t)]
    return max(cands)


def primary_key(
    has_steps: bool, rank: int | None, n_calls: int, pid: int | None
) -> tuple[int, int, int, int]:
    """How ``wsprof analyze`` and ``wsprof watch`` order processes, primary first: one with
    steps, then by rank (unknown last), most calls, pid (unknown: 0)."""
    return (0 if has_steps else 1, rank if rank is not None else 1 << 30, -n_calls, pid or 0)


def without_thinned_gaps(rows: Sequence[StepRow], meta: Mapping[str, Any]) -> list[StepRow]:
    """``rows`` with no sync gap in the steps retention thinned (``meta['retention']``): a
    thinned step keeps a sample of its calls, so its gaps cannot be measured."""
    r = meta.get("retention")
    lo, hi = (
        (r.get("first_thinned_step"), r.get("last_thinned_step"))
        if isinstance(r, dict)
        else (None, None)
    )
    if not (isinstance(lo, int) and isinstance(hi, int)):
        return list(rows)
    return [replace(s, sync_gap_s=None) if lo <= s.step <= hi else s for s in rows]


def op_stats_of_sums(
    sums: Mapping[str, Sequence[float]],
    apis: Mapping[str, Iterable[str]],
    nbytes: Mapping[str, int],
) -> list[OpStats]:
    """Per canonical op statistics from exact per-op sums of ``call_totals``, most total time
    first (as :func:`op_stats`): what ``wsprof watch`` keeps once it released the calls.

    Args:
        sums: op -> (calls, summed duration ns).
        apis: op -> the API names it was called by.
        nbytes: op -> summed payload bytes (known sizes only).

    Returns:
        Calls, total time, bytes and API names exact; the per-call median and p99 latency and
        the median time between layers are NaN (unknown without the calls).
    """
    out = [
        OpStats(
            op=op,
            apis=tuple(sorted(apis.get(op, ()))),
            n_calls=int(v[0]),
            total_s=float(v[1]) / 1e9,
            median_us=math.nan,
            p99_us=math.nan,
            between_layers_median_us=math.nan,
            bytes_total=int(nbytes.get(op, 0)),
        )
        for op, v in sorted(sums.items())
    ]
    out.sort(key=lambda s: -s.total_s)
    return out


def counted_calls(n_total: int) -> CallPoints:
    """Call points of a process whose calls are counted but not kept: no points."""
    return CallPoints((), (), (), (), (), n_total)


def process_analysis(
    *,
    label: str,
    rank: int | None,
    pid: int | None,
    step_source: StepSource,
    steps: Sequence[StepRow],
    ops: Sequence[OpStats],
    calls: CallPoints,
    counters: Sequence[CounterTrack],
    meta: Mapping[str, Any],
    self_overhead: SelfOverhead,
    cost_model: CallCostModel | None = None,
    gpu_util: GpuUtil | None = None,
    sync_site: str | None = None,
    sync_evidence: str | None = None,
    left_out: Sequence[str] = (),
) -> ProcessAnalysis:
    """A process as the rules see it, before its py-spy samples are joined
    (:func:`join_samples`): the one constructor of :class:`ProcessAnalysis` for ``wsprof
    analyze`` (:func:`analyze_process`, from a whole trace) and ``wsprof watch``
    (:meth:`wsprof.analysis.live_process.LiveProcess.analysis`, from what it keeps exactly while the
    trace is written).

    Watch passes its completed step rows (from step markers), the exact per-op sums of
    ``call_totals`` (:func:`op_stats_of_sums`: calls, time, bytes, API names) and the exact
    number of calls (:func:`counted_calls`), the meta, the self overhead and whether the steps'
    weight sync was told by phases, and the GPU utilization in and out of syncs and the sync's
    caller site from running counts (:meth:`~wsprof.analysis.live_process.LiveProcess.analysis`
    says how); it joins the py-spy windows with :func:`join_samples` as analyze does. It
    releases each step's calls, spans and counter samples once the step's row is made, so it
    lacks, and passes none of: per-call points, per-op latency medians and p99 (NaN), counter
    tracks over time (it keeps each counter's value at each step's end, the ``counter:`` series)
    and the cost model (the median latency of each payload-size class over every call).
    """
    return ProcessAnalysis(
        label=label,
        rank=rank,
        pid=pid,
        step_source=step_source,
        steps=tuple(steps),
        ops=tuple(ops),
        calls=calls,
        counters=tuple(counters),
        hot_frames=(),
        hot_stacks=(),
        n_samples=0,
        meta=dict(meta),
        cost_model=cost_model,
        gpu_util=gpu_util,
        sync_site=sync_site,
        self_overhead=self_overhead,
        sync_evidence=sync_evidence,
        left_out=tuple(left_out),
    )


def analyze_process(
    trace: ProcessTrace, samples: Sequence[SampleWindow] = (), points: bool = True
) -> ProcessAnalysis:
    """Everything derived from one process's trace (plus py-spy windows sampled from it).

    ``points``: plot points of its calls (:func:`call_points`); without, ``calls`` holds their
    count alone (a digest of a process that cannot be primary: :mod:`wsprof.analysis.digest`).

    Sampling windows are summarised with the phase patterns of the trace's meta
    (``phase_patterns``, ``framework``; see :func:`wsprof.analysis.phases.patterns_from_meta`).
    The same as :func:`join_samples` of the analysis without ``samples``: a run folder's
    samples can be joined after every trace was read (and its calls released).
    """
    calls = trace.calls
    totals = trace.totals if trace.thinned else None
    steps = steps_from_markers(calls, trace.spans, totals)
    if totals is not None:
        steps = without_thinned_gaps(steps, trace.meta)
    # A framework's own timeline put its steps on the trace as markers (timeline_join).
    source = (
        StepSource.TIMELINE
        if trace.meta.get("steps_from") == StepSource.TIMELINE
        else StepSource.MARKERS
    )
    left_out: list[str] = []
    evidence = "weight-sync phases" if steps and sync_spans(trace.spans) else None
    if not steps:
        steps, source, evidence, left_out = unmarked_steps(trace)
    steps = with_sync_starts(steps, trace.spans)
    steps = with_sync_keys(steps, calls)
    steps = with_wire(steps, calls, trace.spans, trace.meta)
    pa = process_analysis(
        label=trace.label,
        rank=trace.rank,
        pid=trace.meta.get("pid"),
        step_source=source,
        steps=steps,
        ops=op_stats(calls, totals),
        calls=call_points(calls, trace.sites)
        if points
        else CallPoints((), (), (), (), (), len(calls)),
        counters=counter_tracks(trace, first_record_ns(trace)),
        meta=trace.meta,
        cost_model=call_cost_model(calls),
        gpu_util=gpu_util(trace),
        sync_site=sync_site(calls, steps, trace.spans, trace.sites),
        self_overhead=trace.self_overhead,
        sync_evidence=evidence,
        left_out=left_out,
    )
    shared = sharing_of(trace.counters, trace.events)
    if shared is not None:
        pa = replace(pa, sharing=shared)
    return join_samples(pa, trace.meta, [*samples, *trace.samples])


def unmarked_steps(
    trace: ProcessTrace,
) -> tuple[list[StepRow], StepSource, str | None, list[str]]:
    """Steps of a process without step markers, from evidence, strongest first: the weight
    updates on its push group (:func:`~wsprof.analysis.pushes.steps_from_updates`: an engine's
    steps, and the sending trainer's), the job's rhythm, bursts of collectives. A truncated
    first or last step is left out (:func:`~wsprof.analysis.steps.drop_truncated_edges`).

    Returns:
        ``(steps, source, how the weight sync was told or None, phrases on steps left out)``;
        source is ``updates``, ``rhythm``, ``bursts`` or ``none``.
    """
    rows, source, evidence, left_out = _unmarked_steps(trace, _rhythm_calls(trace.calls))
    if len(trace.calls) != len(_rhythm_calls(trace.calls)) and source in (
        StepSource.RHYTHM,
        StepSource.BURSTS,
    ):
        # cut from the hooked calls, counted over all of them
        specs = [
            (r.step, r.t_start_ns, r.t_end_ns, r.weight_sync_s, r.sync_gap_s, r.sync_start_ns)
            for r in rows
        ]
        rows = step_rows(trace.calls, specs)
    return rows, source, evidence, left_out


def _rhythm_calls(calls: CallTable) -> CallTable:
    """The calls steps are cut from: the hooked ones where there are any. Collectives taken
    from c10d's Flight Recorder (layer ``c10d``: DDP's gradient all-reduces, one per bucket
    and micro-batch) keep their own beat inside a step; a trace of nothing else (a dump) is
    cut from them."""
    if not len(calls):
        return calls
    hooked = calls.layer != FLIGHT_LAYER
    return calls if hooked.all() or not hooked.any() else calls.take(hooked)


def _unmarked_steps(
    trace: ProcessTrace, calls: CallTable
) -> tuple[list[StepRow], StepSource, str | None, list[str]]:
    up = updates(calls, trace.meta)
    if up is not None:
        rows = steps_from_updates(calls, up, first_record_ns(trace))
        return rows, StepSource.UPDATES, evidence_line(up, rows), []
    # a process that sends weight buckets by handle pushes them between object gathers and
    # barriers: they are part of its sync
    colocated = share_counter("exports") in trace.counters
    rows = steps_from_rhythm(
        calls,
        last_record_ns(trace),
        first_record_ns(trace),
        COLOCATED_GLUE if colocated else frozenset(),
        [sp.t_start_ns for sp in trace.spans if sp.kind == "phase" and sp.name == ROLLOUT],
    )
    source = StepSource.RHYTHM
    if not rows:
        rows = steps_from_bursts(calls, last_record_ns(trace))
        source = StepSource.BURSTS if rows else StepSource.NONE
    if not rows:
        specs = engine_step_specs(sharing_of(trace.counters, trace.events))
        if specs:
            rows = step_rows(calls, specs)
            return rows, StepSource.SHARED, "opens weight buckets shared by handle", []
    rows, left_out = drop_truncated_edges(rows)
    return rows, source, evidence_line(None, rows), left_out


def join_samples(
    pa: ProcessAnalysis, meta: Mapping[str, Any], windows: Sequence[SampleWindow]
) -> ProcessAnalysis:
    """``pa`` with its py-spy sampling windows summarised (hot frames, phases per window, the
    early/late shift); ``pa`` itself when there are none.

    Args:
        pa: a process's analysis without samples.
        meta: its trace's meta (phase patterns, framework).
        windows: every sampling window of the process (its own and a sampler's).
    """
    if not windows:
        return pa
    windows = list(windows)
    patterns = patterns_from_meta(meta, windows)
    summaries = window_summaries(windows, patterns)
    flame = early_late_stacks(windows)
    if not pa.steps:
        sampled = steps_from_windows(summaries)
        if sampled:
            pa = replace(pa, steps=tuple(sampled), step_source=StepSource.SAMPLED)
    return replace(
        pa,
        hot_frames=tuple(hot_frames(windows)),
        hot_stacks=tuple(hot_stacks(windows)),
        n_samples=sum(w.count for w in windows),
        windows=tuple(summaries),
        phase_source=patterns.source if summaries else None,
        shift=early_late_shift(windows),
        early_stacks=tuple(flame[0]) if flame else (),
        late_stacks=tuple(flame[1]) if flame else (),
    )
