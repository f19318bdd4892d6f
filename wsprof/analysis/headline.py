"""The two numbers a user wants first, computed once: rollout share and weight-sync time.

:func:`headline_of` is the one place that takes the medians (and first/last values) of the
primary process's steps, or of a series file's ``rollout_share`` and ``weight_sync_s``
columns, into a :class:`~wsprof.analysis.model.Headline`. The analysis keeps the result in
:attr:`~wsprof.analysis.model.Analysis.headline`; the ``rollout_share`` finding, the HTML
report's two numbers and the JSON's ``headline`` all read it. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from wsprof.analysis.link_limit import LinkLimit
from wsprof.analysis.model import Analysis, Headline, ProcessAnalysis, SeriesResult, StepRow
from wsprof.analysis.pushes import MIN_PUSH_BYTES
from wsprof.contracts.phases import phase_of_series, sync_size_series
from wsprof.contracts.series import (
    ROLLOUT_S,
    ROLLOUT_SHARE,
    STEP_S,
    SYNC_ALGBW,
    SYNC_BUSBW,
    SYNC_BYTES,
    WEIGHT_SYNC_S,
)
from wsprof.contracts.units import Unit, fmt_bytes, unit_family

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


def _in_family(r: SeriesResult, family: Unit) -> list[float] | None:
    """A series' values in ``family``'s base unit (bytes, bytes/s) when its unit is of that
    family (``GB`` is 1e9 bytes), else None."""
    unit, scale = (
        (r.series.unit, 1.0) if r.series.unit is family else unit_family(r.series.unit_text)
    )
    return [v * scale for v in r.series.values] if unit is family else None


def _logged_wire(series: Sequence[SeriesResult], limit: LinkLimit | None) -> dict[str, Any]:
    """The third number from a log's or CSV's own weight-sync size and bandwidth columns
    (:func:`~wsprof.contracts.phases.sync_size_series`; ``weight_sync_bytes``,
    ``weight_sync_algbw`` of an exported trace too)."""
    size = rate = None
    for r in series:
        kind = (
            "size"
            if r.series.name == SYNC_BYTES
            else "rate"
            if r.series.name in (SYNC_BUSBW, SYNC_ALGBW)
            else sync_size_series(r.series.name)
        )
        if kind == "size" and size is None:
            size = _in_family(r, Unit.BYTES)
        elif kind == "rate" and rate is None:
            rate = _in_family(r, Unit.BYTES_PER_SECOND)
    if size is None and rate is None:
        return {}
    bw = _median(rate) if rate else None
    limit_rate = limit.bytes_per_s if limit is not None else None
    return {
        "sync_bytes_median": _median(size) if size else None,
        "sync_bandwidth_median": bw,
        "bandwidth_kind": "algbw" if bw is not None else None,
        "link_limit_bytes_per_s": limit_rate,
        "link_limit_name": limit.name if limit is not None else None,
        "link_limit_why": limit.why if limit is not None else None,
        "link_share": bw / limit_rate if bw is not None and limit_rate else None,
    }


def _wire_fields(rows: Sequence[StepRow], limit: LinkLimit | None) -> dict[str, Any]:
    """The headline's third number from the steps' :attr:`StepRow.wire`: medians of bytes,
    wire time, bandwidth (bus where every step has a factor, else algorithm), the limit and
    the share of it, and the sync's share outside transfers."""
    wires = [(r, r.wire) for r in rows if r.wire is not None and r.wire.bytes > 0]
    if not wires:
        return {}
    bus = [w.busbw for _, w in wires]
    kind = "busbw" if all(b is not None for b in bus) else "algbw"
    bws = [b for b in (bus if kind == "busbw" else [w.algbw for _, w in wires]) if b is not None]
    bw = _median(bws)
    outside = [
        r.outside_transfers_s / r.own_sync_s
        for r, _ in wires
        if r.outside_transfers_s is not None and r.own_sync_s
    ]
    rate = limit.bytes_per_s if limit is not None else None
    return {
        "sync_bytes_median": _median([float(w.bytes) for _, w in wires]),
        "sync_wire_median_s": _median([w.wire_s for _, w in wires]),
        "sync_bandwidth_median": bw,
        "bandwidth_kind": kind if bw is not None else None,
        "link_limit_bytes_per_s": rate,
        "link_limit_name": limit.name if limit is not None else None,
        "link_limit_why": limit.why if limit is not None else None,
        "link_share": bw / rate if bw is not None and rate else None,
        "outside_transfers_share_median": _median(outside),
    }


def headline_of(
    primary: ProcessAnalysis | None,
    series: Sequence[SeriesResult],
    source: str,
    others: Sequence[ProcessAnalysis] = (),
    limit: LinkLimit | None = None,
) -> Headline:
    """The headline of an analysis.

    Args:
        primary: the process the headline series come from (None for a series file).
        series: the judged per-step series.
        source: the path analysed (names a series file's numbers).
        others: the run's other processes: the rollout share comes from the first of them
            that marks (or samples) rollout when the primary does not.
        limit: the link limit of the primary's sync (:func:`wsprof.analysis.link_limit.
            link_limit`), None when not judged.

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
        **(_wire_fields(rows, limit) or _logged_wire(series, limit)),
    )


def headline(analysis: Analysis) -> Headline:
    """The analysis's :attr:`~wsprof.analysis.model.Analysis.headline`; computed from it when
    it was built without one (an :class:`Analysis` made by hand)."""
    if analysis.headline is not None:
        return analysis.headline
    return headline_of(analysis.primary, analysis.series, analysis.source, analysis.processes)
