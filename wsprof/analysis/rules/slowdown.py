"""A time per step (weight sync, step, rollout) that grows step after step."""

from __future__ import annotations

from dataclasses import dataclass, field

from wsprof.analysis.chain import Role
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import LABELS, Facts
from wsprof.analysis.kinds import series_kind
from wsprof.analysis.model import Finding, Severity
from wsprof.analysis.rules.base import (
    CRITICAL_GROWTH_RATIO,
    Rule,
    _wrapper_where,
    growth_added,
    growth_is_material,
    median_step_s,
)
from wsprof.analysis.workload import explained_by_workload
from wsprof.contracts.series import WEIGHT_SYNC_S, SeriesKind


@dataclass(frozen=True, kw_only=True)
class WorkloadEvidence(Evidence):
    """The workload series a step or rollout time grows with (:class:`~wsprof.analysis.
    workload.Workload`): its change over the run (0.2 = +20%), Spearman's rho of the time with
    it, and the change of the time the work does not explain, as a share of the mean time."""

    series: str
    growth: float = field(metadata=unit("share"))
    spearman: float
    rate_change: float = field(metadata=unit("share"))


@dataclass(frozen=True, kw_only=True)
class ProjectionEvidence(Evidence):
    """Where the fitted growth goes (:class:`~wsprof.analysis.model.Projection`): the series'
    value at step ``step`` by ``model`` fitted to steps ``fit_first_step``-``fit_last_step``."""

    step: int
    value: float = field(metadata=unit("series"))
    model: str
    fit_first_step: int | None
    fit_last_step: int | None


@dataclass(frozen=True, kw_only=True)
class SlowdownEvidence(Evidence):
    """A per-step time that grows: its series, the time the fitted growth added over the
    steps seen, the curve's shape, its first (judged) and last values, their ratio, the
    Theil-Sen slope and the exponential fit's factor per step, the verdict's confidence; the
    workload that explains it, the projection and the step the fit reaches the budget at, when
    there are. Read by the chain builder as :class:`~wsprof.analysis.chain.SlowdownLike`."""

    series: str
    added_s: float = field(metadata=unit("s"))
    shape: str
    first: float = field(metadata=unit("series"))
    last: float = field(metadata=unit("series"))
    growth_ratio: float
    slope_per_step: float = field(metadata=unit("series"))
    growth_factor_per_step: float | None
    confidence: float
    workload: WorkloadEvidence | None = optional()
    projection: ProjectionEvidence | None = optional()
    budget_step: int | None = optional()

    def series_named(self) -> str | None:
        return self.series


def _sync_where(facts: Facts) -> str | None:
    """Where weight-sync time goes: the wrapper on a collective name with the most time
    between layers, else the caller of most weight-sync calls (a user's function that issues
    them: time between the collectives is spent there)."""
    w = _wrapper_where(facts)
    if w is not None:
        return w
    pa = facts.primary
    return pa.sync_site if pa is not None else None


class AccumulatingSlowdown(Rule):
    """A time per step (weight sync, step, rollout) grows step after step.

    Only series whose kind is a duration (:mod:`wsprof.analysis.kinds`) are judged: a per-token
    time, a throughput or a cumulative clock in seconds moves for reasons that are no slowdown.
    A step or rollout time that grows with a workload series of the same log at a flat time
    per unit of work is workload, said at info (:mod:`wsprof.analysis.workload`).
    """

    kind = "accumulating_slowdown"
    roles = ((kind, Role.SLOWDOWN),)
    description = "a per-step time grows step after step; judge the curve, not the value"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for name in facts.time_series:
            res = facts.series.get(name)
            if res is None or not res.verdict.accumulating:
                continue
            if series_kind(res.series).kind is not SeriesKind.DURATION:
                continue  # a rate or clock in seconds: shown, never a slowdown
            v, s = res.verdict, res.series
            k = v.judged_from  # after a slow first step, the growth is judged from there
            first, last = s.values[k], s.values[-1]
            ratio = last / first if first > 0 else float("inf")
            proj = v.projection
            proj_txt = (
                f"; projected {s.fmt(proj.value)} at step {proj.step} ({proj.basis()})"
                if proj
                else ""
            )
            after = f" after a slow first {s.fmt(s.values[0])}" if k else ""
            title = (
                f"{LABELS.get(name, name)} grows ({v.shape}): {s.fmt(first)} -> "
                f"{s.fmt(last)} over {len(s.values) - k} steps{after} "
                f"({s.fmt_slope(v.slope_per_step)}){proj_txt}"
            )
            severity = Severity.CRITICAL if ratio >= CRITICAL_GROWTH_RATIO else Severity.WARNING
            # Material: what the fitted growth added over the steps seen, against a step.
            step_ref = median_step_s(facts)
            added = growth_added(res)
            if step_ref and not growth_is_material(res, facts):
                severity = Severity.INFO
                title += (
                    f"; so far {s.fmt(added)} added, "
                    f"{added / step_ref:.0%} of a step: watch it, not yet material"
                )
            work = explained_by_workload(res, facts.series) if name != WEIGHT_SYNC_S else None
            if work is not None:
                severity = Severity.INFO
                title += "; " + work.text()
            budget_step: int | None = None
            if v.budget_step is not None and s.steps:
                budget_step = v.budget_step  # a step number, as logged
                budget = s.fmt(facts.budgets.get(name))
                title += f"; by the same fit it reaches {budget} at step {budget_step}"
            evidence = SlowdownEvidence(
                series=name,
                added_s=added,
                shape=v.shape,
                first=first,
                last=last,
                growth_ratio=ratio,
                slope_per_step=v.slope_per_step,
                growth_factor_per_step=v.growth_factor_per_step,
                confidence=v.confidence,
                workload=WorkloadEvidence(
                    series=work.name,
                    growth=work.growth,
                    spearman=work.rho,
                    rate_change=work.rate_change,
                )
                if work is not None
                else None,
                projection=ProjectionEvidence(
                    step=proj.step,
                    value=proj.value,
                    model=proj.model,
                    fit_first_step=proj.fit_first_step,
                    fit_last_step=proj.fit_last_step,
                )
                if proj
                else None,
                budget_step=budget_step,
            )
            out.append(
                Finding(
                    self.kind,
                    severity,
                    title,
                    evidence,
                    _sync_where(facts) if name == WEIGHT_SYNC_S else _wrapper_where(facts),
                    "find where the added time goes (see the between-layers and per-call findings "
                    "of a trace; sample the slow phase with `py-spy dump --pid PID`), fix it, then "
                    "measure again: overhead moves to the next slowest place",
                )
            )
        return out
