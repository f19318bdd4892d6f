"""What every rule shares: the :class:`Rule` interface, the thresholds more than one rule reads, and
the helpers that name a wrapper or a sync's caller. A rule module imports this, the facts, the
model, growth, samples, kinds and contracts, never another rule."""

from __future__ import annotations

import statistics

from wsprof.analysis.chain import Cause, Role
from wsprof.analysis.evidence import evidence_rows
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, SeriesResult, WrapperFact
from wsprof.contracts.series import STEP_S

#: Growth over the observed steps at or above which an accumulating slowdown is critical: the
#: time has at least doubled, as in the motivating case (143 s -> 1596 s in 4 steps).
CRITICAL_GROWTH_RATIO = 2.0
#: Added time per step (per-call growth x calls per step) below this share of the median step
#: time is not reported as per-call growth: a few µs drift over 100 calls is not a problem.
MATERIAL_STEP_SHARE = 0.05
#: A per-step time that grows is a warning only when the growth seen so far (fitted slope x
#: steps spanned) adds at least this share of the median step time; below, it is information
#: ("watch it"). Chance trends of healthy jobs stay below it: the healthy twin of
#: ``tests/targets/unmarked_sync_job.py`` (3 ranks on 2 busy cores, 10 steps) drifted up to 7%
#: of a step on noise alone, while every leak of the issue-15 cases added over 20%.
SLOWDOWN_MATERIAL_SHARE = 0.10
#: Least gain in a frame's share of samples, first windows against last, to report it: a fifth
#: of the process's time moved there. Below it sampling noise and ordinary variation between
#: windows explain the change (at py-spy's 100 Hz a 1 s window holds about 100 samples per busy
#: thread, and consecutive samples of one call are not independent).
FRAME_SHIFT_MIN_CHANGE = 0.2


def immaterial(
    grown: float, step_ref: float | None, share: float = MATERIAL_STEP_SHARE
) -> str | None:
    """The title's suffix when a growth of ``grown`` (s over the run) is under ``share``
    (:data:`MATERIAL_STEP_SHARE` unless given) of the median step ``step_ref`` (s): shown at
    info, not yet a problem; None when it is material or no step time is known."""
    if not step_ref or step_ref <= 0 or grown >= share * step_ref:
        return None
    return f"; so far {grown / step_ref:.1%} of a step: watch it, not yet material"


def median_step_s(facts: Facts) -> float | None:
    """The median of the primary's step times (s); None without steps."""
    step = facts.series.get(STEP_S)
    if step is None or not step.series.values:
        return None
    return float(statistics.median(step.series.values))


def growth_added(res: SeriesResult) -> float:
    """What ``res``'s fitted growth added over the steps seen, from its judged first step to
    its last (the series' unit): slope per step x steps spanned."""
    s, k = res.series, res.verdict.judged_from
    return res.verdict.slope_per_step * (s.steps[-1] - s.steps[k]) if len(s.steps) > k + 1 else 0.0


def growth_is_material(res: SeriesResult, facts: Facts) -> bool:
    """Whether ``res`` grows (an accumulating verdict) by at least
    :data:`SLOWDOWN_MATERIAL_SHARE` of a median step over the steps seen: the bar at which a
    growing per-step time is a warning (:class:`~wsprof.analysis.rules.slowdown.
    AccumulatingSlowdown`). Without step times, any accumulating growth counts."""
    if not res.verdict.accumulating:
        return False
    step_ref = median_step_s(facts)
    return not step_ref or growth_added(res) >= SLOWDOWN_MATERIAL_SHARE * step_ref


def _top_wrapper(facts: Facts) -> WrapperFact | None:
    """The wrapper on a collective name through which the most between-layers time went
    (``facts.wrappers`` is sorted that way)."""
    names = [w for w in facts.wrappers if w.kind == "name"]
    return names[0] if names else None


def _wrapper_where(facts: Facts) -> str | None:
    w = _top_wrapper(facts)
    return w.label() if w is not None else None


class Rule:
    """A finding rule.

    Attributes:
        kind: the kind of its findings (a rule with two kinds names its first).
        description: one line, what it finds.
        causes: the chains its findings start (:class:`~wsprof.analysis.chain.Cause`), read
            by the chain builder :mod:`wsprof.analysis.chains`.
        roles: ``(finding kind, role)`` for its findings that are a chain's symptom or why
            link rather than a cause.
    """

    kind = "rule"
    description = ""
    causes: tuple[Cause, ...] = ()
    roles: tuple[tuple[str, Role], ...] = ()

    def match(self, facts: Facts) -> list[Finding]:  # pragma: no cover - interface
        raise NotImplementedError

    def symptom_rows(self, f: Finding) -> tuple[tuple[str, str], ...]:
        """``f``'s rows when it is a chain's symptom (default: its evidence in its units)."""
        return tuple(evidence_rows(f.evidence))


def _first_last(k: int) -> tuple[str, str]:
    """("the first 3 windows", "the last 3") or, for one, ("the first window", "the last")."""
    return (
        ("the first window", "the last") if k == 1 else (f"the first {k} windows", f"the last {k}")
    )
