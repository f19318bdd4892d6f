"""Step segmentation: from ``wsprof.step()``/``phase()`` markers, or from sync bursts.

A run that only added ``wsprof.patch()`` has no markers. Weight sync is then found as
*bursts*: runs of collectives separated from the next run by idle time. Idle gaps are told
from in-burst gaps by the largest jump in the sorted log-gaps (a 1-D natural break), accepted
only when the two sides differ by at least :data:`MIN_GAP_RATIO`; each burst starts a step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import StepRow
from wsprof.trace.model import CallTable, Span

#: Phase names (lower case) counted as weight sync, rollout and training, as frameworks name them.
WEIGHT_SYNC_PHASES = frozenset(
    {"weight_sync", "update_weights", "weight_update", "sync_weights", "refit", "broadcast"}
)
ROLLOUT_PHASES = frozenset({"rollout", "generate", "generation", "gen"})
TRAIN_PHASES = frozenset({"train", "training", "update_actor", "actor_update"})

#: An idle gap must be at least this many times the largest in-burst gap (an order of magnitude:
#: per-parameter sync calls follow each other within micro- to milliseconds, steps within
#: seconds).
MIN_GAP_RATIO = 10.0
#: And at least this long, ns (below it, gaps are scheduling noise).
MIN_IDLE_GAP_NS = 20_000_000
#: Bursts with fewer calls are not weight syncs (a lone barrier, a metrics all_reduce).
MIN_BURST_CALLS = 3


def _phase_seconds(spans: Sequence[Span], step: int, names: frozenset[str]) -> float | None:
    total = 0
    found = False
    for sp in spans:
        if sp.kind == "phase" and sp.step == step and sp.name.lower() in names:
            total += sp.t_end_ns - sp.t_start_ns
            found = True
    return total / 1e9 if found else None


def _row(
    step: int,
    t0: int,
    t1: int,
    calls: CallTable,
    mask: npt.NDArray[np.bool_],
    rollout_s: float | None,
    train_s: float | None,
    sync_s: float | None,
) -> StepRow:
    sel = calls.take(mask)
    step_s = max(t1 - t0, 0) / 1e9
    known = sum(v for v in (rollout_s, train_s, sync_s) if v is not None)
    return StepRow(
        step=step,
        t_start_ns=t0,
        t_end_ns=t1,
        step_s=step_s,
        rollout_s=rollout_s,
        train_s=train_s,
        weight_sync_s=sync_s,
        other_s=max(step_s - known, 0.0),
        n_calls=len(sel),
        collective_s=float(sel.duration_ns.sum()) / 1e9,
        between_layers_s=float(sel.between_layers_ns.sum()) / 1e9,
    )


def steps_from_markers(calls: CallTable, spans: Sequence[Span]) -> list[StepRow]:
    """One row per ``step`` span; phase times from ``phase`` spans of that step.

    Returns:
        Rows ordered by step; empty when the trace has no step spans.
    """
    rows: list[StepRow] = []
    for sp in spans:
        if sp.kind != "step":
            continue
        mask = calls.step == sp.step
        rows.append(
            _row(
                sp.step,
                sp.t_start_ns,
                sp.t_end_ns,
                calls,
                mask,
                _phase_seconds(spans, sp.step, ROLLOUT_PHASES),
                _phase_seconds(spans, sp.step, TRAIN_PHASES),
                _phase_seconds(spans, sp.step, WEIGHT_SYNC_PHASES),
            )
        )
    rows.sort(key=lambda r: r.step)
    return rows


def idle_gap_threshold(gaps: npt.NDArray[np.int64]) -> float | None:
    """The gap length (ns) that separates idle gaps from in-burst gaps, or None.

    Candidates are the jumps in the sorted gaps where the next gap is at least
    :data:`MIN_GAP_RATIO` times the previous and at least :data:`MIN_IDLE_GAP_NS` long; among
    them the one with the largest between-class variance of log-gaps (Otsu's criterion, N. Otsu,
    IEEE Trans. SMC 9(1), 1979) wins, so one long start-up pause does not outvote the many
    idle gaps between steps.
    """
    if len(gaps) == 0:
        return None
    logs = np.sort(np.log10(np.maximum(gaps, 1).astype(np.float64)))
    n = len(logs)
    jumps = np.diff(logs)
    cands = np.nonzero(
        (jumps >= np.log10(MIN_GAP_RATIO)) & (logs[1:] >= np.log10(MIN_IDLE_GAP_NS))
    )[0]
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


def detect_bursts(t_start_ns: npt.NDArray[np.int64], t_end_ns: npt.NDArray[np.int64]) -> list[
    tuple[int, int]
]:
    """Split calls (sorted by start) into bursts separated by idle gaps.

    Args:
        t_start_ns: call start times, shape (n,), sorted.
        t_end_ns: call end times, shape (n,).

    Returns:
        ``(first, last)`` call indices (inclusive) of each burst with at least
        :data:`MIN_BURST_CALLS` calls; empty if no idle gap stands out.
    """
    n = len(t_start_ns)
    if n < 2 * MIN_BURST_CALLS:
        return []
    running_end = np.maximum.accumulate(t_end_ns)
    gaps = t_start_ns[1:] - running_end[:-1]
    threshold = idle_gap_threshold(gaps)
    if threshold is None:
        return []
    cuts = np.nonzero(gaps > threshold)[0]
    starts = np.concatenate([[0], cuts + 1])
    ends = np.concatenate([cuts, [n - 1]])
    return [(int(a), int(b)) for a, b in zip(starts, ends) if b - a + 1 >= MIN_BURST_CALLS]


def steps_from_bursts(calls: CallTable, t_last_ns: int | None = None) -> list[StepRow]:
    """One step per sync burst: step i runs from burst i's start to burst i+1's start.

    Weight-sync time is the burst's span (first call start to last call end). Rollout and
    train times are unknown (None). The last step ends at ``t_last_ns`` (the last record of the
    process) or at its burst's end.
    """
    if len(calls) == 0:
        return []
    bursts = detect_bursts(calls.t_start_ns, calls.t_end_ns)
    rows: list[StepRow] = []
    for i, (a, b) in enumerate(bursts):
        t0 = int(calls.t_start_ns[a])
        sync_end = int(calls.t_end_ns[a : b + 1].max())
        if i + 1 < len(bursts):
            t1 = int(calls.t_start_ns[bursts[i + 1][0]])
        else:
            t1 = max(sync_end, t_last_ns or sync_end)
        mask = np.zeros(len(calls), dtype=bool)
        mask[a : b + 1] = True
        rows.append(_row(i, t0, t1, calls, mask, None, None, (sync_end - t0) / 1e9))
    return rows
