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
from wsprof.analysis.pushes import MIN_PUSH_BYTES
from wsprof.contracts.phases import phase_of_series
from wsprof.contracts.series import ROLLOUT_S, ROLLOUT_SHARE, STEP_S, WEIGHT_SYNC_S
from wsprof.contracts.units import fmt_bytes, fmt_duration


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
        n_steps: the primary's steps (a series file: the points of its ``step_s``).
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
        rollout_source: where the rollout share comes from when not from the primary's steps
            (``steps of rank 1``: the rollout ranks marked it; ``sampling windows of rank 0``;
            ``rollout_s / step_s of X``); None when from the primary's steps or unknown.
        sync_evidence: how the primary's weight sync was told (``sends weights on group
            'slime-pp_0' (13 updates)``, ``weight-sync phases``, ...); None otherwise.
        no_sync_found: why the primary's steps have no weight sync (no push by any evidence):
            the headline says so instead of a number; None when it has one or has no steps.
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
    rollout_source: str | None = None
    sync_evidence: str | None = None
    no_sync_found: str | None = None

    def summary(self) -> str | None:
        """``rollout 18% of each step (median); weight sync 1.06 s median, 1.73 s last step
        (steps of rank 0, from markers)``: the two numbers in one line; None without either."""
        parts: list[str] = []
        if self.rollout_share_median is not None:
            of = f" ({self.rollout_source})" if self.rollout_source else ""
            parts.append(f"rollout {self.rollout_share_median:.0%} of each step (median){of}")
        sync = self.own_sync_median_s if self.own_sync_median_s is not None else None
        sync = sync if sync is not None else self.weight_sync_median_s
        last = self.own_sync_last_s if self.own_sync_last_s is not None else None
        last = last if last is not None else self.weight_sync_last_s
        if sync is not None:
            parts.append(f"weight sync {fmt_duration(sync)} median, {fmt_duration(last)} last step")
        elif self.no_sync_found is not None:
            parts.append(f"no weight sync found ({self.no_sync_found})")
        if not parts:
            return None
        src = self.source
        if self.step_source:
            src += f", from {self.step_source}"
        return "; ".join(parts) + f" ({src})"


#: Why a run's steps have no weight sync (:mod:`wsprof.analysis.pushes`).
NO_PUSH_EVIDENCE = (
    "no weight-sync phase, no group used only to push weights, and no run of broadcasts or "
    f"gathers moving {fmt_bytes(MIN_PUSH_BYTES)} or more of float tensors in a step"
)


#: Why a log's or CSV's steps have no weight sync: none of its series is one.
NO_SYNC_SERIES = "none of the logged series is a weight-sync time"


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _find(series: Iterable[SeriesResult], name: str) -> SeriesResult | None:
    return next((r for r in series if r.series.name == name), None)


def _rollout_elsewhere(others: Sequence[ProcessAnalysis]) -> tuple[list[float], str | None]:
    """Rollout shares from the first other process whose steps have them (the rollout ranks
    mark rollout, the trainer marks training), else from the first one whose sampling windows
    saw rollout frames."""
    for p in others:
        shares = [s for s in (r.rollout_share for r in p.steps) if s is not None]
        if shares:
            return shares, f"steps of {p.label}"
    for p in others:
        shares = [w.rollout_share for w in p.windows if w.rollout_share is not None]
        if any(shares):
            return [float(x) for x in shares], f"sampling windows of {p.label}"
    return [], None


def headline_of(
    primary: ProcessAnalysis | None,
    series: Sequence[SeriesResult],
    source: str,
    others: Sequence[ProcessAnalysis] = (),
) -> Headline:
    """The headline of an analysis.

    Args:
        primary: the process the headline series come from (None for a series file).
        series: the judged per-step series.
        source: the path analysed (names a series file's numbers).
        others: the run's other processes: the rollout share comes from the first of them
            that marks (or samples) rollout when the primary does not.

    Returns:
        The two numbers and what stands beside them.
    """
    ws = _find(series, WEIGHT_SYNC_S) or next(  # a log's own name for it
        (r for r in series if phase_of_series(r.series.name) == "weight_sync"), None
    )
    shares: list[float] = []
    syncs: list[float] = []
    where = "no steps"
    rows = primary.steps if primary is not None else ()
    if primary is not None and rows:
        shares = [s for s in (r.rollout_share for r in rows) if s is not None]
        syncs = [r.weight_sync_s for r in rows if r.weight_sync_s is not None]
        where = f"steps of {primary.label}"
    rollout_source = None
    if not shares:
        shares, rollout_source = _rollout_elsewhere([p for p in others if p is not primary])
    if not shares:
        rs = _find(series, ROLLOUT_SHARE)
        if rs is not None:
            shares = list(rs.series.values)
            where = f"the per-step series of {source}"
    roll, step = _find(series, ROLLOUT_S), _find(series, STEP_S)
    if not shares and not rows and roll is not None and step is not None:
        # A log with rollout and step times but no share column: the share per step.
        by_step = dict(zip(step.series.steps, step.series.values))
        shares = [
            min(v / by_step[s], 1.0)
            for s, v in zip(roll.series.steps, roll.series.values)
            if by_step.get(s, 0) > 0
        ]
        if shares:
            rollout_source = f"rollout_s / step_s of {source}"
    step_times = [r.step_s for r in rows] or (list(step.series.values) if step else [])
    if where == "no steps" and step_times:
        where = f"the per-step series of {source}"
    no_sync = NO_PUSH_EVIDENCE if rows and not syncs and ws is None else None
    if not rows and step_times and ws is None:
        no_sync = NO_SYNC_SERIES
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
        n_steps=len(rows) or len(step_times),
        step_median_s=_median(step_times),
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
        rollout_source=rollout_source,
        sync_evidence=primary.sync_evidence if primary is not None and syncs else None,
        no_sync_found=no_sync,
    )


def headline(analysis: Analysis) -> Headline:
    """The analysis's :attr:`~wsprof.analysis.model.Analysis.headline`; computed from it when
    it was built without one (an :class:`Analysis` made by hand)."""
    if analysis.headline is not None:
        return analysis.headline
    return headline_of(analysis.primary, analysis.series, analysis.source, analysis.processes)
