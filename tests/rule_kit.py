"""Hand-built facts for the rule tests (``tests/unit/rules``): real analysis types filled with
the numbers a test chooses, judged by the real growth classifier; no trace, no torch, no
subprocess. Each rule module has its own test file, ``test_rule_<module>.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wsprof.analysis.facts import Facts
from wsprof.analysis.growth import classify
from wsprof.analysis.model import (
    CallPoints,
    CounterTrack,
    Finding,
    HotFrame,
    OpStats,
    ProcessAnalysis,
    SeriesResult,
    StepRow,
    WrapperFact,
)
from wsprof.analysis.rules.base import Rule
from wsprof.contracts.series import Series, SeriesKind
from wsprof.contracts.units import Unit

S = 1_000_000_000  # ns per second


def judged(
    name: str,
    values: Sequence[float],
    unit: Unit = Unit.SECONDS,
    kind: SeriesKind | None = None,
    steps: Sequence[int] | None = None,
) -> SeriesResult:
    """``values`` (one per step) as the series ``name``, judged by ``growth.classify``."""
    st = tuple(steps) if steps is not None else tuple(range(len(values)))
    s = Series(name, unit, st, tuple(float(v) for v in values), kind=kind)
    return SeriesResult(s, classify(list(s.values), steps=list(st)))


def step_rows(
    step_s: Sequence[float],
    sync_s: Sequence[float | None] | None = None,
    rollout_s: Sequence[float | None] | None = None,
    between_s: Sequence[float] | None = None,
    gap_s: Sequence[float | None] | None = None,
    n_calls: int = 10,
) -> tuple[StepRow, ...]:
    """One :class:`StepRow` per step, back to back from t = 0 (times in s)."""
    rows: list[StepRow] = []
    t = 0
    for i, dur in enumerate(step_s):
        sync = sync_s[i] if sync_s is not None else None
        t1 = t + int(dur * S)
        rows.append(
            StepRow(
                step=i,
                t_start_ns=t,
                t_end_ns=t1,
                step_s=dur,
                rollout_s=rollout_s[i] if rollout_s is not None else None,
                train_s=None,
                weight_sync_s=sync,
                other_s=0.0,
                n_calls=n_calls,
                collective_s=0.0,
                between_layers_s=between_s[i] if between_s is not None else 0.0,
                sync_gap_s=gap_s[i] if gap_s is not None else None,
                sync_start_ns=(t1 - int(sync * S)) if sync is not None else None,
            )
        )
        t = t1
    return tuple(rows)


def process(
    label: str = "rank 0",
    rank: int | None = 0,
    steps: tuple[StepRow, ...] = (),
    ops: tuple[OpStats, ...] = (),
    counters: tuple[CounterTrack, ...] = (),
    hot_frames: tuple[HotFrame, ...] = (),
    n_samples: int = 0,
    n_calls: int = 0,
    meta: dict[str, Any] | None = None,
    **more: Any,
) -> ProcessAnalysis:
    """A :class:`ProcessAnalysis` with what a test gives and empty defaults for the rest
    (``more``: any other field, e.g. ``self_overhead``, ``windows``, ``shift``)."""
    return ProcessAnalysis(
        label=label,
        rank=rank,
        pid=1000 + (rank or 0),
        step_source="markers" if steps else "none",
        steps=steps,
        ops=ops,
        calls=CallPoints((), (), (), (), (), n_calls),
        counters=counters,
        hot_frames=hot_frames,
        hot_stacks=(),
        n_samples=n_samples,
        meta=dict(meta or {}),
        **more,
    )


def facts(
    series: Sequence[SeriesResult] = (),
    processes: Sequence[ProcessAnalysis] = (),
    wrappers: Sequence[WrapperFact] = (),
    **more: Any,
) -> Facts:
    """:class:`Facts` of the given series (by name), processes and wrappers."""
    return Facts({r.series.name: r for r in series}, list(processes), list(wrappers), **more)


def match(rule: Rule, f: Facts) -> list[Finding]:
    """The rule's findings on ``f``."""
    return rule.match(f)
