"""Step segmentation: from ``wsprof.step()``/``phase()`` markers, or from sync bursts.

A run that only added ``wsprof.patch()`` has no markers. Weight sync is then found as
*bursts*: runs of collectives separated from the next run by idle time. Idle gaps are told
from in-burst gaps at a jump of at least :data:`MIN_GAP_RATIO` in the sorted gaps (see
:func:`idle_gap_threshold`); each burst starts a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import StepRow
from wsprof.analysis.pushes import is_push
from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC, canonical_phase
from wsprof.trace.model import CallTable, CallTotals, Span

#: An idle gap must be at least this many times the largest in-burst gap (an order of magnitude:
#: per-parameter sync calls follow each other within micro- to milliseconds, steps within
#: seconds).
MIN_GAP_RATIO = 10.0
#: And at least this long, ns (below it, gaps are scheduling noise).
MIN_IDLE_GAP_NS = 20_000_000
#: Bursts with fewer calls are not weight syncs (a lone barrier, a metrics all_reduce).
MIN_BURST_CALLS = 3


def _phase_totals(spans: Sequence[Span]) -> dict[tuple[int, str], float]:
    """Seconds per (step, canonical phase) from phase spans, names read as their canonical
    phase (:func:`~wsprof.contracts.phases.canonical_phase`: ``sync`` and ``update_weights``
    are weight sync): the time covered by at least one phase of that kind (nested or
    concurrent phases of one kind, e.g. ``generate`` inside ``rollout`` or two rollout
    threads, count once). Phases of other names are left out.

    A weight sync that runs inside a rollout phase counts as weight sync only: rollout is
    the time in rollout phases and in no weight-sync phase of that step (TRL's
    ``GRPOTrainer._generate_single_turn`` calls ``VLLMGeneration.sync_weights`` before it
    generates; both are preset entry points), so the two never count one second twice."""
    found: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for sp in spans:
        if sp.kind != "phase":
            continue
        kind = canonical_phase(sp.name)
        if kind is not None:
            found.setdefault((sp.step, kind), []).append((sp.t_start_ns, sp.t_end_ns))
    totals = {key: _union_ns(intervals) / 1e9 for key, intervals in found.items()}
    for (step, kind), intervals in found.items():
        sync = found.get((step, WEIGHT_SYNC)) if kind == ROLLOUT else None
        if sync:
            # |rollout \ sync| = |rollout U sync| - |sync|
            both = _union_ns([*intervals, *sync]) / 1e9
            totals[(step, kind)] = max(both - totals[(step, WEIGHT_SYNC)], 0.0)
    return totals


def _union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Length of the union of ``[start, end)`` intervals, ns."""
    if len(intervals) == 1:  # the usual case: a step or phase marked once
        a, b = intervals[0]
        return max(b - a, 0)
    ordered = sorted(intervals)
    starts = np.array([a for a, _ in ordered], dtype=np.int64)
    ends = np.array([b for _, b in ordered], dtype=np.int64)
    return covered_ns(starts, ends, int(starts.min()), int(ends.max()))


def assign_calls(
    calls: CallTable, rows: Sequence[StepRow], by_step_number: bool
) -> npt.NDArray[np.int64]:
    """Index into ``rows`` of the step each call belongs to; -1 for calls in no step.

    Args:
        calls: the process's calls, sorted by start.
        rows: its steps, ordered by start.
        by_step_number: match the step number stamped on each call (markers), else the step
            whose [t_start_ns, t_end_ns) holds the call's start (bursts).

    Returns:
        Shape (n_calls,).
    """
    n = len(calls)
    if not rows or n == 0:
        return np.full(n, -1, dtype=np.int64)
    if by_step_number:
        keys = np.array([r.step for r in rows], dtype=np.int64)
        t = calls.step
    else:
        keys = np.array([r.t_start_ns for r in rows], dtype=np.int64)
        t = calls.t_start_ns
    order = np.argsort(keys, kind="stable")
    if by_step_number:
        pos = np.searchsorted(keys[order], t, side="left")
    else:
        pos = np.searchsorted(keys[order], t, side="right") - 1
    pos = np.clip(pos, 0, len(rows) - 1)
    idx = order[pos]
    if by_step_number:
        ok = keys[idx] == t
    else:
        ends = np.array([r.t_end_ns for r in rows], dtype=np.int64)
        ok = (t >= keys[idx]) & (t < ends[idx])
    return np.where(ok, idx, -1).astype(np.int64)


_Spec = tuple[int, int, int, float | None, float | None, float | None]


def _rows(
    calls: CallTable,
    specs: Sequence[_Spec],
    by_step_number: bool,
    totals: CallTotals | None = None,
    step_s: Sequence[float] | None = None,
) -> list[StepRow]:
    """Step rows from (step, t0, t1, rollout_s, train_s, sync_s) with per-step call totals
    summed in one pass over the calls, or taken from ``totals`` (by step number) when given;
    each step lasts ``step_s[i]`` seconds when given, else ``t1 - t0``."""
    bare = [
        StepRow(
            st,
            t0,
            t1,
            max(t1 - t0, 0) / 1e9 if step_s is None else step_s[i],
            r,
            tr,
            sy,
            0.0,
            0,
            0.0,
            0.0,
        )
        for i, (st, t0, t1, r, tr, sy) in enumerate(specs)
    ]
    k = len(bare)
    if totals is not None and by_step_number:
        keys = np.array([r.step for r in bare], dtype=np.int64)
        pos = np.clip(np.searchsorted(keys, totals.step), 0, max(k - 1, 0))
        ok = (keys[pos] == totals.step) if k else np.zeros(len(totals), dtype=bool)
        idx, w_n = pos[ok], totals.n[ok]
        w_dur, w_between = totals.duration_ns[ok], totals.between_layers_ns[ok]
    else:
        idx = assign_calls(calls, bare, by_step_number)
        ok = idx >= 0
        idx, w_n = idx[ok], None
        w_dur, w_between = calls.duration_ns[ok], calls.between_layers_ns[ok]
    n_calls = np.bincount(idx, weights=w_n, minlength=k).astype(np.int64)
    dur_s = np.bincount(idx, weights=w_dur, minlength=k) / 1e9
    between_s = np.bincount(idx, weights=w_between, minlength=k) / 1e9
    out: list[StepRow] = []
    for i, row in enumerate(bare):
        known = sum(v for v in (row.rollout_s, row.train_s, row.weight_sync_s) if v is not None)
        out.append(
            replace(
                row,
                other_s=max(row.step_s - known, 0.0),
                n_calls=int(n_calls[i]),
                collective_s=float(dur_s[i]),
                between_layers_s=float(between_s[i]),
            )
        )
    return out


#: A step cut by time: ``(step, t0_ns, t1_ns, weight_sync_s, sync_gap_s, sync_start_ns)``.
_RowSpec = tuple[int, int, int, float | None, float | None, int | None]


def step_rows(calls: CallTable, specs: Sequence[_RowSpec]) -> list[StepRow]:
    """Rows of steps cut by time (the job's rhythm, bursts) from ``(step, t0_ns, t1_ns,
    weight_sync_s, sync_gap_s, sync_start_ns)``; calls are assigned by their start."""
    rows = _rows(
        calls,
        [(st, t0, t1, None, None, sy) for st, t0, t1, sy, _, _ in specs],
        by_step_number=False,
    )
    return [
        replace(r, sync_gap_s=gap, sync_start_ns=start)
        for r, (_, _, _, _, gap, start) in zip(rows, specs)
    ]


def sync_spans(spans: Sequence[Span]) -> list[Span]:
    """The weight-sync phase spans (names whose canonical phase is weight sync, see
    :func:`~wsprof.contracts.phases.canonical_phase`), by start."""
    return sorted(
        (sp for sp in spans if sp.kind == "phase" and canonical_phase(sp.name) == WEIGHT_SYNC),
        key=lambda sp: sp.t_start_ns,
    )


def clipped_done(
    calls: CallTable, done: npt.NDArray[np.int64], lo: int, hi: int
) -> npt.NDArray[np.int64]:
    """Completion of each call in ``[lo, hi)`` as a weight sync counts it, ns: its return or
    its wait (``done``), a wait counted only up to the next call's start. A functional
    collective's output is waited where it is first used (``AsyncCollectiveTensor``): a
    gather can be waited seconds later, after other work; that is not sync time."""
    n = len(calls)
    nxt = calls.t_start_ns[lo + 1 : min(hi + 1, n)]
    if len(nxt) < hi - lo:  # the last call of the trace: nothing after it
        nxt = np.append(nxt, np.iinfo(np.int64).max)
    return np.maximum(calls.t_end_ns[lo:hi], np.minimum(done[lo:hi], nxt))


def run_end_ns(calls: CallTable, done: npt.NDArray[np.int64], lo: int, hi: int) -> int:
    """When the calls ``[lo, hi)`` (a weight sync) completed, ns (:func:`clipped_done`)."""
    return int(clipped_done(calls, done, lo, hi).max())


def covered_ns(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], lo: int, hi: int) -> int:
    """Length of the union of intervals [start, end) clipped to [lo, hi), ns.

    Args:
        starts: interval starts, sorted, shape (n,).
        ends: interval ends, shape (n,).
    """
    if len(starts) == 0 or hi <= lo:
        return 0
    a = np.clip(starts, lo, hi)
    b = np.clip(ends, lo, hi)
    # Sorted by start: what interval i adds is its part after every earlier interval's end.
    prev_end = np.maximum.accumulate(np.concatenate(([lo], b[:-1])))
    return int(np.clip(b - np.maximum(a, prev_end), 0, None).sum())


def sync_gaps(calls: CallTable, spans: Sequence[Span]) -> dict[int, float]:
    """Per step number: time inside its weight-sync phases covered by no collective, s.

    A collective covers [start, completion) (the return for a synchronous call, ``wait()``
    for an async one); calls of every thread count. Steps without a weight-sync phase are
    absent.
    """
    out: dict[int, float] = {}
    starts = calls.t_start_ns
    done = np.where(
        calls.t_done_ns >= 0, np.maximum(calls.t_done_ns, calls.t_end_ns), calls.t_end_ns
    )
    for sp in sync_spans(spans):
        i0 = int(np.searchsorted(starts, sp.t_start_ns, side="left"))
        i1 = int(np.searchsorted(starts, sp.t_end_ns, side="left"))
        # A call that started just before the span may still cover its beginning.
        i0 = max(i0 - 1, 0) if i0 > 0 and done[i0 - 1] > sp.t_start_ns else i0
        cov = covered_ns(starts[i0:i1], done[i0:i1], sp.t_start_ns, sp.t_end_ns)
        gap = max(sp.t_end_ns - sp.t_start_ns - cov, 0) / 1e9
        out[sp.step] = out.get(sp.step, 0.0) + gap
    return out


def steps_from_markers(
    calls: CallTable, spans: Sequence[Span], totals: CallTotals | None = None
) -> list[StepRow]:
    """One row per step number; phase times from ``phase`` spans of that step.

    A step number marked more than once (``wsprof.step(n)`` twice with the same ``n``: a
    retried step, a loop that numbers by epoch) is one step: its row runs from its first span's
    start to its last span's end and lasts the time covered by its spans, so that its phases,
    which are keyed by step number, stay a part of it (a share never exceeds 100%).

    Args:
        calls: the process's calls, sorted by start.
        spans: its step and phase spans.
        totals: exact per-step call sums; given for a trace whose retention thinned some
            steps' calls, so that per-step counts and times stay exact.

    Returns:
        Rows ordered by step, one per step number; empty when the trace has no step spans.
    """
    phases = _phase_totals(spans)
    by_step: dict[int, list[tuple[int, int]]] = {}
    for sp in spans:
        if sp.kind == "step":
            by_step.setdefault(sp.step, []).append((sp.t_start_ns, sp.t_end_ns))
    specs: list[_Spec] = []
    lasts_s: list[float] = []
    for number in sorted(by_step):
        marked = by_step[number]
        specs.append(
            (
                number,
                min(a for a, _ in marked),
                max(b for _, b in marked),
                phases.get((number, ROLLOUT)),
                phases.get((number, TRAIN)),
                phases.get((number, WEIGHT_SYNC)),
            )
        )
        lasts_s.append(_union_ns(marked) / 1e9)
    rows = _rows(calls, specs, by_step_number=True, totals=totals, step_s=lasts_s)
    gaps = sync_gaps(calls, spans)
    return [replace(r, sync_gap_s=gaps.get(r.step)) for r in rows]


def idle_gap_threshold(
    gaps: npt.NDArray[np.int64], min_ratio: float = MIN_GAP_RATIO
) -> float | None:
    """The gap length (ns) that separates idle gaps from in-burst gaps, or None.

    Candidates are the jumps in the sorted gaps where the next gap is at least ``min_ratio``
    (:data:`MIN_GAP_RATIO`) times the previous and at least :data:`MIN_IDLE_GAP_NS` long; among
    them the one with the largest between-class variance of log-gaps (Otsu's criterion, N. Otsu,
    IEEE Trans. SMC 9(1), 1979) wins, so one long start-up pause does not outvote the many
    idle gaps between steps.
    """
    if len(gaps) == 0:
        return None
    logs = np.sort(np.log10(np.maximum(gaps, 1).astype(np.float64)))
    n = len(logs)
    jumps = np.diff(logs)
    cands = np.nonzero((jumps >= np.log10(min_ratio)) & (logs[1:] >= np.log10(MIN_IDLE_GAP_NS)))[0]
    if len(cands) == 0:
        return None
    csum = np.cumsum(logs)
    total = csum[-1]
    best, best_k = -1.0, -1
    for k in cands:
        w0 = (k + 1) / n
        w1 = 1 - w0
        mu0 = csum[k] / (k + 1)
        mu1 = (total - csum[k]) / (n - k - 1)
        score = w0 * w1 * (mu0 - mu1) ** 2
        if score > best:
            best, best_k = score, int(k)
    return float(10 ** ((logs[best_k] + logs[best_k + 1]) / 2))


def detect_bursts(
    t_start_ns: npt.NDArray[np.int64],
    t_end_ns: npt.NDArray[np.int64],
    min_ratio: float = MIN_GAP_RATIO,
) -> list[tuple[int, int]]:
    """Split calls (sorted by start) into bursts separated by idle gaps.

    Args:
        t_start_ns: call start times, shape (n,), sorted.
        t_end_ns: call end times, shape (n,).
        min_ratio: how many times longer than the longest in-burst gap an idle gap is at
            least (:func:`idle_gap_threshold`).

    Returns:
        ``(first, last)`` call indices (inclusive) of each burst with at least
        :data:`MIN_BURST_CALLS` calls; empty if no idle gap stands out.
    """
    n = len(t_start_ns)
    if n < 2 * MIN_BURST_CALLS:
        return []
    running_end = np.maximum.accumulate(t_end_ns)
    gaps = t_start_ns[1:] - running_end[:-1]
    threshold = idle_gap_threshold(gaps, min_ratio)
    if threshold is None:
        return []
    cuts = np.nonzero(gaps > threshold)[0]
    starts = np.concatenate([[0], cuts + 1])
    ends = np.concatenate([cuts, [n - 1]])
    return [(int(a), int(b)) for a, b in zip(starts, ends) if b - a + 1 >= MIN_BURST_CALLS]


def steps_from_bursts(calls: CallTable, t_last_ns: int | None = None) -> list[StepRow]:
    """One step per sync burst: step i runs from burst i's start to burst i+1's start.

    Weight-sync time is the burst's span (first call start to last call end) when the burst is
    a weight push by its payload (:func:`~wsprof.analysis.pushes.is_push`), else None.
    Rollout and train times are unknown (None). The last
    step ends at ``t_last_ns`` (the last record of the process) or at its burst's end.
    """
    if len(calls) == 0:
        return []
    bursts = detect_bursts(calls.t_start_ns, calls.t_end_ns)
    specs: list[_Spec] = []
    for i, (a, b) in enumerate(bursts):
        t0 = int(calls.t_start_ns[a])
        sync_end = int(calls.t_end_ns[a : b + 1].max())
        if i + 1 < len(bursts):
            t1 = int(calls.t_start_ns[bursts[i + 1][0]])
        else:
            t1 = max(sync_end, t_last_ns or sync_end)
        push = is_push(calls, a, b + 1)
        specs.append((i, t0, t1, None, None, (sync_end - t0) / 1e9 if push else None))
    return [
        replace(r, sync_start_ns=r.t_start_ns if r.weight_sync_s is not None else None)
        for r in _rows(calls, specs, by_step_number=False)
    ]


#: A first or last step with fewer calls than this share of the median step's is truncated
#: (the run started or ended inside it: a final barrier, a push cut short by a kill) and is
#: left out of every series and of the headline.
EDGE_CALLS_SHARE = 0.5


#: The segment before a process's first weight sync is a step only when it holds at least
#: this share of the calls a step issues before its sync (median; the rollout's and the
#: training's collectives): start-up and an initial push before training are not a step.
#: Where steps issue nothing before their sync, its length against the shortest step decides.
FIRST_STEP_SHARE = 0.5


def ending_with_sync(calls: CallTable, specs: Sequence[_RowSpec]) -> list[StepRow]:
    """Rows of steps that each end when their weight sync completes, from ``(step, t0_ns,
    t1_ns, weight_sync_s, sync_gap_s, sync_start_ns)`` (see :func:`step_rows`): the first
    segment (from the first call to the first sync's end) is left out unless it looks like a
    step (:data:`FIRST_STEP_SHARE`); steps renumbered from 0."""
    specs = list(specs)
    if len(specs) > 1:
        starts = calls.t_start_ns
        before = [
            int(np.searchsorted(starts, sy if sy is not None else t1) - np.searchsorted(starts, t0))
            for _, t0, t1, _, _, sy in specs
        ]
        typical = float(np.median(before[1:]))
        lengths = [t1 - t0 for _, t0, t1, *_ in specs[1:]]
        if typical >= 1:
            first_is_step = before[0] >= FIRST_STEP_SHARE * typical
        else:
            first_is_step = specs[0][2] - specs[0][1] >= FIRST_STEP_SHARE * min(lengths)
        if not first_is_step:
            specs = specs[1:]
    return step_rows(calls, [(i, *sp[1:]) for i, sp in enumerate(specs)])


def drop_truncated_edges(rows: Sequence[StepRow]) -> tuple[list[StepRow], list[str]]:
    """``rows`` (steps cut by time) without a truncated first or last step (see
    :data:`EDGE_CALLS_SHARE`), renumbered from 0, and one phrase per step left out."""
    out = list(rows)
    if len(out) < 3:
        return out, []
    med = float(np.median([r.n_calls for r in out[1:-1]]))
    said: list[str] = []
    for pos, which in ((-1, "last"), (0, "first")):
        r = out[pos]
        if r.n_calls < EDGE_CALLS_SHARE * med:
            said.append(
                f"its {which} step ({r.n_calls} calls against {med:.0f} in a step) is "
                "truncated and left out"
            )
            out.pop(pos)
    return [replace(r, step=i) for i, r in enumerate(out)], said
