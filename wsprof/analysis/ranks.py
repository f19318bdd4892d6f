"""Per-rank comparison: every process's per-step weight-sync and step times side by side.

A run folder of a distributed job holds one trace per process. The headline series come from
the primary process (rank 0), but a problem on one rank (a slower NIC, a throttled GPU, a
wrapper that only runs there) shows when the ranks are compared: :func:`rank_series` builds one
:class:`~wsprof.analysis.model.RankSeries` per process with steps, with its steps placed on the
run clock (:mod:`wsprof.analysis.align`) so that "which rank started its weight sync last" can
be read across processes. The ``outlier_rank`` finding (:mod:`wsprof.analysis.rules`) reads
them.

Pure: analyses, spans and a run clock in, rows out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from wsprof.analysis.align import ProcessClock
from wsprof.analysis.model import WAIT_BY_SEQ, GrowthVerdict, ProcessAnalysis, RankSeries
from wsprof.contracts.series import BETWEEN_LAYERS_S, SYNC_GAP_S, WEIGHT_SYNC_S, Series
from wsprof.contracts.units import Unit

#: Judges a per-step series; None when it cannot be judged.
Judge = Callable[[Series], GrowthVerdict | None]


@dataclass(frozen=True)
class RankInput:
    """What the comparison needs from one process (no calls: they may be released by then).

    Attributes:
        pa: the process's analysis (its steps).
        host: host name from its trace's meta.
        clock: how its monotonic ns map to run ns.
        sync_start_ns: per step of ``pa.steps``, monotonic ns when its weight sync started
            (None where unknown): ``StepRow.sync_start_ns``.
        wrapper: the foreign wrapper on a collective name with the most time between layers
            in this process (``qualname (file:line)``), None when none was found.
        world: its process world's label when the run has several (else None).
    """

    pa: ProcessAnalysis
    host: str | None
    clock: ProcessClock
    sync_start_ns: tuple[int | None, ...]
    wrapper: str | None = None
    #: its process world (``world N``) when the run has several; ranks are compared within one.
    world: str | None = None


#: Ranks met in a step's weight sync when its ends agree an order of magnitude better than its
#: starts: the spread of the ends at most this fraction of the spread of the starts.
#: Collectives end together (none can finish before its last participant joined), so ranks
#: that started apart and ended together waited for each other; ranks whose ends spread like
#: their starts did not meet there (independent work, or clocks that disagree).
MET_END_SPREAD = 0.1
#: ... and the ranks must meet so in at least this fraction of the steps: meeting is a
#: property of the job's sync (a collective that synchronises), not of a lucky step.
MET_MIN_FRACTION = 0.5
#: Starts within this of each other (ns), or within :data:`LOCKSTEP_START_SHARE` of the step's
#: shortest sync: the ranks already move in lockstep there, and the step neither shows nor
#: refutes meeting (the waits it could give are that small anyway). Such steps are left out of
#: :data:`MET_MIN_FRACTION`, so that a job whose steps all start together but whose first sync
#: waits for the ranks still starting up gets that wait subtracted (1 ms: the run clock aligns
#: processes of one host to well under it).
LOCKSTEP_START_SPREAD_NS = 1_000_000
#: ... a twentieth of the sync: a loaded machine spreads lockstep starts by a few ms.
LOCKSTEP_START_SHARE = 0.05


def peer_waits(
    steps: Sequence[Sequence[int]], sync_run_ns: Sequence[Sequence[tuple[int, int] | None]]
) -> list[list[float | None]]:
    """How long each rank waited for its peers in each step's weight sync, s.

    The ranks' syncs of one step move in lockstep once the last rank has joined, so the time
    between a rank's own start of the sync and the *last* rank's start is time waiting for
    peers (after an uneven phase: the fastest rank waits), not work. Only steps where the
    ranks met (:data:`MET_END_SPREAD`, :data:`MET_MIN_FRACTION`) get a wait; it is at most the
    rank's sync. Steps are
    matched by number; a step seen on fewer than 2 ranks gets None.

    Args:
        steps: per rank, its step numbers.
        sync_run_ns: per rank and step, the weight sync's (start, end) on the run clock, ns
            (None where unknown); processes that are not on the run clock must be left out.

    Returns:
        Per rank and step, the wait in s (>= 0), or None (unknown, or the ranks did not meet).
    """
    by_step: dict[int, list[tuple[int, int]]] = {}
    for st, spans in zip(steps, sync_run_ns):
        for k, se in zip(st, spans):
            if se is not None:
                by_step.setdefault(k, []).append(se)
    met: dict[int, int] = {}
    lockstep: dict[int, int] = {}
    decided = 0
    for k, ses in by_step.items():
        if len(ses) < 2:
            continue
        starts = [a for a, _ in ses]
        ends = [b for _, b in ses]
        spread = max(starts) - min(starts)
        shortest = min(b - a for a, b in ses)
        if spread <= max(LOCKSTEP_START_SPREAD_NS, LOCKSTEP_START_SHARE * shortest):
            lockstep[k] = max(starts)
            continue
        decided += 1
        if max(ends) - min(ends) <= MET_END_SPREAD * spread:
            met[k] = max(starts)
    if len(met) < MET_MIN_FRACTION * decided:
        met = {}
    elif met:
        met.update(lockstep)
    return [
        [
            None if se is None or k not in met else min(met[k] - se[0], se[1] - se[0]) / 1e9
            for k, se in zip(st, spans)
        ]
        for st, spans in zip(steps, sync_run_ns)
    ]


def seq_waits(
    keys: Sequence[Sequence[tuple[str, int] | None]],
    sync_run_ns: Sequence[Sequence[tuple[int, int] | None]],
) -> list[list[float | None]]:
    """How long each rank waited for its peers in each weight sync, s, from c10d's sequence
    numbers: syncs whose first collective is the same one on several ranks (``keys``: group
    and number in the group, the same on every rank) met there for certain, whatever their
    step numbers; each rank waited from its own start to the last rank's (at most its sync).
    No timing heuristic: where the keys do not join, None (:func:`peer_waits` decides).

    Args:
        keys: per rank and step, its sync's first collective (None unknown).
        sync_run_ns: per rank and step, the sync's (start, end) on the run clock, ns.
    """
    last: dict[tuple[str, int], int] = {}
    seen: dict[tuple[str, int], int] = {}
    for ks, spans in zip(keys, sync_run_ns):
        for k, se in zip(ks, spans):
            if k is not None and se is not None:
                last[k] = max(last.get(k, se[0]), se[0])
                seen[k] = seen.get(k, 0) + 1
    return [
        [
            None
            if k is None or se is None or seen.get(k, 0) < 2
            else min(last[k] - se[0], se[1] - se[0]) / 1e9
            for k, se in zip(ks, spans)
        ]
        for ks, spans in zip(keys, sync_run_ns)
    ]


def _median(values: Sequence[float | None]) -> float | None:
    v = np.array(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if len(v) else None


def _series(name: str, steps: Sequence[int], values: Sequence[float | None]) -> Series | None:
    v = np.array(values, dtype=np.float64)
    ok = np.isfinite(v)
    if not ok.any():
        return None
    return Series(
        name,
        Unit.SECONDS,
        tuple(np.asarray(steps, dtype=np.int64)[ok].tolist()),
        tuple(v[ok].tolist()),
    )


def sync_lags(rows: Sequence[RankSeries]) -> list[float | None]:
    """Per rank: the median over steps of how long after the earliest rank it started its weight
    sync, s. Only aligned ranks and steps that at least two of them started are compared."""
    who, steps, times = [], [], []
    for i, r in enumerate(rows):
        if r.clock == "none":
            continue
        t = np.array(r.sync_start_s, dtype=np.float64)
        ok = np.isfinite(t)
        who.append(np.full(int(ok.sum()), i))
        steps.append(np.asarray(r.steps, dtype=np.int64)[ok])
        times.append(t[ok])
    if not who:
        return [None for _ in rows]
    rank_of, step, t = np.concatenate(who), np.concatenate(steps), np.concatenate(times)
    order = np.argsort(step, kind="stable")
    rank_of, step, t = rank_of[order], step[order], t[order]
    # Per step: how many ranks started it and the earliest start.
    first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    count = np.diff(np.r_[first, len(step)])
    earliest = np.minimum.reduceat(t, first) if len(t) else t
    group = np.repeat(np.arange(len(first)), count)
    keep = count[group] >= 2
    lag, rank_of = (t - earliest[group])[keep], rank_of[keep]
    return [
        float(np.median(lag[rank_of == i])) if (rank_of == i).any() else None
        for i in range(len(rows))
    ]


def _wait_source(pa: ProcessAnalysis) -> str | None:
    """How the rank's waits were found (:attr:`RankSeries.wait_source`)."""
    sources = {r.sync_wait_source for r in pa.steps if r.sync_wait_source}
    return WAIT_BY_SEQ if WAIT_BY_SEQ in sources else next(iter(sources), None)


def judged_series(pa: ProcessAnalysis) -> dict[str, Series]:
    """The per-step series of one rank that :func:`rank_series` judges, by name: its own
    weight-sync time (``own_sync_s``), time between layers, sync gaps (absent when it has no
    value)."""
    steps = tuple(r.step for r in pa.steps)
    out = {
        WEIGHT_SYNC_S: _series(WEIGHT_SYNC_S, steps, [r.own_sync_s for r in pa.steps]),
        BETWEEN_LAYERS_S: _series(BETWEEN_LAYERS_S, steps, [r.between_layers_s for r in pa.steps]),
        SYNC_GAP_S: _series(SYNC_GAP_S, steps, [r.sync_gap_s for r in pa.steps]),
    }
    return {k: v for k, v in out.items() if v is not None}


def rank_series(inputs: Sequence[RankInput], judge: Judge | Sequence[Judge]) -> list[RankSeries]:
    """One row per process with steps, in input order.

    Args:
        inputs: the processes (rank order).
        judge: classifies a per-step series (the run's ``classify_series`` path, so a series that
            cannot be judged becomes a note there); or one judge per input (``wsprof watch``
            keeps each rank's verdicts).

    Returns:
        Rows with per-step times, run-clock starts, growth verdicts of weight-sync time and time
        between layers, medians and the sync lag behind the earliest rank.
    """
    rows: list[RankSeries] = []
    judges = [judge] * len(inputs) if callable(judge) else list(judge)
    for inp, judge_one in zip(inputs, judges):
        pa = inp.pa
        if not pa.steps:
            continue
        steps = tuple(r.step for r in pa.steps)
        sync = tuple(r.own_sync_s for r in pa.steps)
        between = tuple(r.between_layers_s for r in pa.steps)
        step_s = tuple(r.step_s for r in pa.steps)
        gaps = tuple(r.sync_gap_s for r in pa.steps)
        judged = judged_series(pa)
        gap_series = judged.get(SYNC_GAP_S)
        sync_series = judged.get(WEIGHT_SYNC_S)
        between_series = judged.get(BETWEEN_LAYERS_S)
        host = inp.host
        rows.append(
            RankSeries(
                label=pa.label,
                rank=pa.rank,
                host=host,
                pid=pa.pid if isinstance(pa.pid, int) else None,
                step_source=pa.step_source,
                steps=steps,
                weight_sync_s=sync,
                step_s=step_s,
                between_layers_s=between,
                start_s=tuple(inp.clock.run_s(r.t_start_ns) for r in pa.steps),
                sync_start_s=tuple(
                    None if t is None else inp.clock.run_s(t) for t in inp.sync_start_ns
                ),
                clock=inp.clock.basis,
                sync=judge_one(sync_series) if sync_series is not None else None,
                between=judge_one(between_series) if between_series is not None else None,
                median_weight_sync_s=_median(sync),
                median_step_s=float(np.median(step_s)),
                wrapper=inp.wrapper,
                sync_gap_s=gaps,
                gap=judge_one(gap_series) if gap_series is not None else None,
                world=inp.world,
                wait_source=_wait_source(pa),
            )
        )
    # Lags behind the earliest rank of the same world: another world's sync is another job.
    out = list(rows)
    for world in dict.fromkeys(r.world for r in rows):
        idx = [i for i, r in enumerate(rows) if r.world == world]
        for i, lag in zip(idx, sync_lags([rows[i] for i in idx])):
            out[i] = replace(rows[i], sync_lag_s=lag)
    return out
