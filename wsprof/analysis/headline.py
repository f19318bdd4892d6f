"""The two numbers a user wants first, computed once: rollout share and weight-sync time.

:func:`headline_of` is the one place that takes the medians (and first/last values) of the
primary process's steps, or of a series file's ``rollout_share`` and ``weight_sync_s``
columns. The analysis keeps the result in :attr:`~wsprof.analysis.model.Analysis.headline`;
the ``rollout_share`` finding, the HTML report's two numbers and the JSON's ``headline`` all
read it. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from wsprof.analysis.model import Analysis, ProcessAnalysis, SeriesResult
from wsprof.contracts.series import ROLLOUT_SHARE, WEIGHT_SYNC_S


@dataclass(frozen=True)
class Headline:
    """Rollout share and weight-sync time per step, with the step time beside them.

    From the primary process's steps when it has any, else from the per-step series
    ``rollout_share`` and ``weight_sync_s`` (a CSV or a log).

    Attributes:
        source: where the numbers come from (``steps of rank 0``, ``the per-step series of
            X``, ``no steps``).
        process: label of the primary process whose steps were read; None otherwise.
        step_source: where its steps came from (``markers``, ``bursts``, ...); None otherwise.
        n_steps: the primary's steps (0 for a series file).
        step_median_s: median step time over its steps, s.
        rollout_share_median: median rollout share of a step, 0..1.
        rollout_share_first: the first representative share (the second of 3 or more: step 0
            often waits on start-up), 0..1.
        rollout_share_last: the last step's share, 0..1.
        weight_sync_median_s: median weight-sync time per step (the sync's span, waiting for
            peers included; a series file's ``weight_sync_s``), s.
        weight_sync_first_s: the first step's weight sync, s.
        weight_sync_last_s: the last step's weight sync, s.
        own_sync_median_s: median of the rank's own weight-sync time (the wait for slower
            ranks taken out), s.
        own_sync_last_s: the last known own weight-sync time, s.
        own_sync_last_step_s: the own weight-sync time of the last step (None when that step
            has none), s.
        weight_sync_share_median: median share of a step spent in its own weight sync, 0..1.
        sync_wait_median_s: median wait for slower ranks to join the sync, s.
        weight_sync_result: the ``weight_sync_s`` series and its verdict, when judged.
    """

    source: str
    process: str | None = None
    step_source: str | None = None
    n_steps: int = 0
    step_median_s: float | None = None
    rollout_share_median: float | None = None
    rollout_share_first: float | None = None
    rollout_share_last: float | None = None
    weight_sync_median_s: float | None = None
    weight_sync_first_s: float | None = None
    weight_sync_last_s: float | None = None
    own_sync_median_s: float | None = None
    own_sync_last_s: float | None = None
    own_sync_last_step_s: float | None = None
    weight_sync_share_median: float | None = None
    sync_wait_median_s: float | None = None
    weight_sync_result: SeriesResult | None = None


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _find(series: Iterable[SeriesResult], name: str) -> SeriesResult | None:
    return next((r for r in series if r.series.name == name), None)


def headline_of(
    primary: ProcessAnalysis | None, series: Sequence[SeriesResult], source: str
) -> Headline:
    """The headline of an analysis.

    Args:
        primary: the process the headline series come from (None for a series file).
        series: the judged per-step series.
        source: the path analysed (names a series file's numbers).

    Returns:
        The two numbers and what stands beside them.
    """
    ws = _find(series, WEIGHT_SYNC_S)
    shares: list[float] = []
    syncs: list[float] = []
    where = "no steps"
    rows = primary.steps if primary is not None else ()
    if primary is not None and rows:
        shares = [s for s in (r.rollout_share for r in rows) if s is not None]
        syncs = [r.weight_sync_s for r in rows if r.weight_sync_s is not None]
        where = f"steps of {primary.label}"
    if not shares:
        rs = _find(series, ROLLOUT_SHARE)
        if rs is not None:
            shares = list(rs.series.values)
            where = f"the per-step series of {source}"
    if ws is not None and not syncs:
        syncs = list(ws.series.values)
        if where == "no steps":
            where = f"the per-step series of {source}"
    own = [s for s in (r.own_sync_s for r in rows) if s is not None]
    waits = [r.sync_wait_s for r in rows if r.sync_wait_s is not None]
    own_share = [r.own_sync_s / r.step_s for r in rows if r.own_sync_s and r.step_s > 0]
    return Headline(
        source=where,
        process=primary.label if primary is not None and rows else None,
        step_source=primary.step_source if primary is not None and rows else None,
        n_steps=len(rows),
        step_median_s=_median([r.step_s for r in rows]),
        rollout_share_median=_median(shares),
        # Step 0 often waits on start-up (its rollout share is not representative).
        rollout_share_first=(shares[1] if len(shares) >= 3 else shares[0]) if shares else None,
        rollout_share_last=shares[-1] if shares else None,
        weight_sync_median_s=_median(syncs),
        weight_sync_first_s=syncs[0] if syncs else None,
        weight_sync_last_s=syncs[-1] if syncs else None,
        own_sync_median_s=_median(own),
        own_sync_last_s=own[-1] if own else None,
        own_sync_last_step_s=rows[-1].own_sync_s if rows else None,
        weight_sync_share_median=_median(own_share),
        sync_wait_median_s=_median(waits),
        weight_sync_result=ws,
    )


def headline(analysis: Analysis) -> Headline:
    """The analysis's :attr:`~wsprof.analysis.model.Analysis.headline`; computed from it when
    it was built without one (an :class:`Analysis` made by hand)."""
    if analysis.headline is not None:
        return analysis.headline
    return headline_of(analysis.primary, analysis.series, analysis.source)
