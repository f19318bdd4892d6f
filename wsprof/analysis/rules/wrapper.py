"""Time between the collective API and the backend (a wrapper's own cost): the rule, and the
chain a wrapper on the collective names starts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wsprof.analysis.chain import (
    Cause,
    ChainContext,
    Draft,
    function_of,
    ids,
    short,
    wrapper_names,
    wrapper_who,
)
from wsprof.analysis.evidence import Evidence, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Link, Severity
from wsprof.analysis.rules.base import Rule, _top_wrapper, _wrapper_where, immaterial
from wsprof.contracts.series import BETWEEN_LAYERS_S, STEP_S, WEIGHT_SYNC_S, op_of
from wsprof.contracts.units import Unit, fmt_duration

#: Share of the weight-sync growth that this rank's own time between layers explains at or above
#: which the wrapper is called the cause (critical). Collectives also wait for the peers'
#: wrappers, which shows as backend time on this rank, so a quarter already means the wrapper
#: dominates once every rank runs it; below it a growing wrapper is still reported (warning).
BETWEEN_LAYERS_SHARE = 0.25
#: Growth of the time between layers over the run, as a share of the median weight-sync time
#: (of the median step time when there is no sync), below which a growing trend is noise that
#: no one would act on: a healthy wrapper's few ms drifting on a loaded machine.
BETWEEN_LAYERS_MATERIAL = 0.05


@dataclass(frozen=True, kw_only=True)
class BetweenLayersEvidence(Evidence):
    """Time between the collective API and the backend that grows: its Theil-Sen slope, the
    share of the weight-sync growth it explains (None without a growing sync), every name the
    top wrapper sits on, and its first (judged) and last time per step."""

    slope_s_per_step: float = field(metadata=unit("s"))
    share_of_sync_growth: float | None = field(metadata=unit("share"))
    wrapped_names: str
    first_s: float = field(metadata=unit("s"))
    last_s: float = field(metadata=unit("s"))


def _wrapped_names(facts: Facts) -> str:
    """Every name the top wrapper sits on (the same bug under several names)."""
    top = _top_wrapper(facts)
    if top is None:
        return ""
    same = {w.api for w in facts.wrappers if w.qualname == top.qualname and w.file == top.file}
    return ", ".join(sorted(same))


class WrapperCause(Cause):
    """A wrapper on the collective names whose time between the API and the backend grows:
    one chain per between-layers finding at warning or above; its where names the wrapper,
    every name it sits on and what it explains of the weight-sync growth."""

    kind = "between_layers"
    cause = "wrapper"
    order = 10

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        if f.severity == Severity.INFO:
            return None
        ev = f.evidence if isinstance(f.evidence, BetweenLayersEvidence) else None
        top = ctx.top_wrapper
        share = ev.share_of_sync_growth if ev is not None else None
        slope = float(ev.slope_s_per_step) if ev is not None else 0.0
        slope_txt = Unit.SECONDS.fmt_slope(slope)
        first = fmt_duration(ev.first_s if ev is not None else None)
        last = fmt_duration(ev.last_s if ev is not None else None)
        rows: list[tuple[str, str]] = []
        places: tuple[str, ...] = ()
        if top is not None:
            names = wrapper_names(top, ctx.wrappers)
            who = wrapper_who(top)
            text = f"{who} sits on {', '.join(names)}"
            rows += [("wrapper", who), (f"names it sits on ({len(names)})", ", ".join(names))]
            places = (short(top.qualname),)
        else:
            text = "a wrapper on the collective names (not identified: see the wrapper audit)"
        text += (
            f"; time between the API and the backend grows {first} -> {last} per step ({slope_txt})"
        )
        rows += [("between layers per step", f"{first} -> {last}"), ("slope", slope_txt)]
        named = f", {places[0]}," if places else ""
        title = (
            f"a wrapper on the collective names{named} makes every call slower: time between "
            f"the API and the backend grows {slope_txt}"
        )
        if isinstance(share, (int, float)):
            text += f", {min(float(share), 1.0):.0%} of the weight-sync growth"
            rows.append(("share of the weight-sync growth", f"{min(float(share), 1.0):.0%}"))
            title += f", {min(float(share), 1.0):.0%} of the weight-sync growth"
        return Draft(
            self.cause,
            title,
            [f],
            where=Link("where", text, ids([f]), tuple(rows)),
            places=places,
            explains=slope,
            process=ctx.process,
        )

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        top = ctx.top_wrapper
        if top is None:
            return next(f.next_step for f in d.findings if f.kind == self.kind)
        n = len(wrapper_names(top, ctx.wrappers))
        on = f"on all {n} names it sits on" if n > 1 else f"on {top.api}"
        name = short(top.qualname)
        if d.culprit_frame is not None:
            text = f"`{name}` calls `{function_of(d.culprit_frame)}` before every collective ({on})"
        else:
            text = f"`{name}` ({top.file}:{top.line}) runs before every collective ({on})"
        if d.counter_cost:
            text += f"; its cost grows {d.counter_cost}"
        return (
            text + ": run it once per sync instead, or cache its result, on every one of those "
            "names; then measure again: overhead moves to the next slowest place"
        )

    def tracks(self, series: str) -> bool:
        return series == BETWEEN_LAYERS_S or op_of(series) is not None


class BetweenLayers(Rule):
    """Time between the collective name called and the process-group backend grows: a wrapper
    around the collectives (not the communication) is the cost."""

    kind = "between_layers"
    causes = (WrapperCause(),)
    description = "time spent in wrappers between the collective name and the backend grows"

    def match(self, facts: Facts) -> list[Finding]:
        bl = facts.series.get(BETWEEN_LAYERS_S)
        sync = facts.series.get(WEIGHT_SYNC_S)
        if bl is None or not bl.verdict.accumulating:
            return []
        ref = sync if sync is not None else facts.series.get(STEP_S)
        judged = bl.series.values[bl.verdict.judged_from :]  # a slow first step left out
        grown = max(judged) - min(judged[: max(1, len(judged) // 3)])
        if (
            ref is not None
            and ref.series.values
            and grown < BETWEEN_LAYERS_MATERIAL * float(np.median(ref.series.values))
        ):
            return []
        step = facts.series.get(STEP_S)
        step_ref = float(np.median(step.series.values)) if step and step.series.values else None
        share = None
        if sync is not None and sync.verdict.slope_per_step > 0:
            share = bl.verdict.slope_per_step / sync.verdict.slope_per_step
        # Critical when it explains the sync's growth (or there is no sync to compare with);
        # a wrapper whose time grows inside a sync that does not grow is a warning.
        flat_sync = sync is not None and share is None
        severity = (
            Severity.WARNING
            if flat_sync or (share is not None and share < BETWEEN_LAYERS_SHARE)
            else Severity.CRITICAL
        )
        vals = judged
        wrapped = _wrapped_names(facts)
        where = _wrapper_where(facts)
        title = (
            f"time between the collective API and the backend grows "
            f"{bl.series.fmt_slope(bl.verdict.slope_per_step)} ({bl.series.fmt(vals[0])} -> "
            f"{bl.series.fmt(vals[-1])} per step)"
        )
        if share is not None:
            title += f": {min(share, 1.0):.0%} of the weight-sync growth on this rank"
        elif flat_sync:
            title += "; the weight sync it sits in does not grow (yet)"
        if where:
            title += f"; wrapper {where.split(' (')[0]} around {wrapped}"
        # A wrapper drifting by a millisecond on a loaded machine, in a step of a second.
        quiet = immaterial(grown, step_ref)
        if quiet is not None:
            severity = Severity.INFO
            title += quiet
        return [
            Finding(
                self.kind,
                severity,
                title,
                BetweenLayersEvidence(
                    slope_s_per_step=bl.verdict.slope_per_step,
                    share_of_sync_growth=share,
                    wrapped_names=wrapped,
                    first_s=vals[0],
                    last_s=vals[-1],
                ),
                where,
                "the wrapper does work per collective whose cost grows (in the motivating case a "
                "free-memory probe walking allocator segments): remove it from the per-call path "
                "or run it once per sync, for every name it wraps, then re-measure; peers that run "
                "the same wrapper make this rank wait in the backend too",
            )
        ]
