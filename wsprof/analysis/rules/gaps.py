"""Time in the weight sync outside any collective, and a GPU idle during the sync."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wsprof.analysis.chain import (
    Cause,
    ChainContext,
    Draft,
    fmt_pct,
    function_of,
    short,
    wrapper_names,
    wrapper_who,
)
from wsprof.analysis.evidence import Evidence, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Link, Severity
from wsprof.analysis.rules.base import (
    MATERIAL_STEP_SHARE,
    SLOWDOWN_MATERIAL_SHARE,
    Rule,
    growth_added,
    immaterial,
    median_step_s,
)
from wsprof.contracts.series import SYNC_GAP_S, WEIGHT_SYNC_S
from wsprof.contracts.units import fmt_duration

#: Share of the weight-sync time spent outside any collective at or above which the gaps are
#: reported even when flat: a third of the sync goes to serialization, RPC or loading, not to
#: communication, which is the first thing to overlap or remove.
GAP_SHARE = 0.3
#: Mean GPU utilization during weight sync, percent, at or below which the GPUs are said to sit
#: idle (NVML's utilization is the share of time a kernel ran; a sync that keeps the GPU busy
#: with NCCL kernels shows far above this).
GPU_IDLE_PCT = 20.0
#: Least share of the step that weight sync takes for idle GPUs during it to matter.
GPU_IDLE_MIN_SYNC_SHARE = 0.1


@dataclass(frozen=True, kw_only=True)
class GapsEvidence(Evidence):
    """Time in the weight sync outside any collective: its median share of the sync, its first
    and last time per step, whether and how it grows, and the caller of the collectives (None
    when unknown)."""

    median_gap_share: float = field(metadata=unit("share"))
    first_s: float = field(metadata=unit("s"))
    last_s: float = field(metadata=unit("s"))
    accumulating: bool
    shape: str
    caller: str | None


@dataclass(frozen=True, kw_only=True)
class GpuIdleEvidence(Evidence):
    """GPUs idle during the weight sync of one process: its label, the mean utilization inside
    and outside the sync (None without samples outside), the samples inside, and the sync's
    median share of a step."""

    process: str
    sync_util_pct: float = field(metadata=unit("pct"))
    other_util_pct: float | None = field(metadata=unit("pct"))
    samples: int = field(metadata=unit("count"))
    sync_share: float = field(metadata=unit("share"))

    def process_named(self) -> str | None:
        return self.process


class GapsCause(Cause):
    """Time in the weight sync outside any collective grows: where is the caller of the
    collectives. A wrapper's chain with the same place takes it in: one wrapper, one cause (its
    time on the names wsprof hooks grows between the layers, on those it does not hook, the
    functional collectives, outside every call)."""

    kind = "gaps"
    cause = "gaps"
    order = 40

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        if f.severity == Severity.INFO:
            return None
        ev = f.evidence if isinstance(f.evidence, GapsEvidence) else None
        caller = ev.caller if ev is not None else None
        first = ev.first_s if ev is not None else None
        last = ev.last_s if ev is not None else None
        grows = f"{fmt_duration(first)} -> {fmt_duration(last)} per step"
        rows: list[tuple[str, str]] = [
            (
                "share of the sync outside collectives",
                fmt_pct(ev.median_gap_share if ev is not None else None),
            ),
            ("per step", grows),
        ]
        if caller:
            rows.append(("caller of the collectives", str(caller)))
        where = f.title
        places: tuple[str, ...] = (short(function_of(str(caller))),) if caller else ()
        top = next((w for w in ctx.facts.wrappers if w.kind == "name"), None)
        if top is not None:
            # Its time on the names wsprof hooks is between layers, measured; on a name it
            # does not hook (a functional collective DTensor and FSDP2 call), it is outside
            # every call.
            names = ", ".join(wrapper_names(top, ctx.facts.wrappers))
            who = wrapper_who(top)
            where += (
                f"; a wrapper on this process's collective names, {who}, sits on "
                f"{names}: what it wraps beyond the names wsprof hooks runs here"
            )
            rows.append(("wrapper on the collective names", f"{who} on {names}"))
            places = (short(top.qualname), *places)
        added = (
            (float(last) - float(first))
            if isinstance(first, float) and isinstance(last, float)
            else 0
        )
        same = next((d for d in drafts if d.cause == "wrapper"), None)
        if same is not None and same.where is not None and places[:1] == same.places[:1]:
            same.findings.append(f)
            same.explains += added
            same.where = Link(
                "where",
                same.where.text + f"; its time outside every collective grows too ({grows}): "
                "the names it wraps that wsprof does not hook",
                (*same.where.finding_ids, f.id),
                same.where.rows,
            )
            return None
        return Draft(
            self.cause,
            f"time in the weight sync outside any collective grows ({grows})",
            [f],
            where=Link("where", where, (f.id,), tuple(rows)),
            places=places,
            explains=added,
            process=ctx.process,
        )

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        own = self.own(d)
        ev = own.evidence if own is not None else None
        caller = ev.caller if isinstance(ev, GapsEvidence) else None
        where = f"`{function_of(str(caller))}`" if caller else "the weight-sync code"
        culprit = (
            f": the added time is in `{function_of(d.culprit_frame)}`" if d.culprit_frame else ""
        )
        return (
            f"{where} does work between its collectives that grows every step{culprit}; "
            "sample it (`wsprof attach PID`), then overlap or remove that work and measure again"
        )


class Gaps(Rule):
    """Time inside weight-sync phases that is in no collective: serialization, RPC, weight
    loading or gathering between the collectives."""

    kind = "gaps"
    causes = (GapsCause(),)
    description = "time inside the weight sync that is in no collective"

    def match(self, facts: Facts) -> list[Finding]:
        gap = facts.series.get(SYNC_GAP_S)
        sync = facts.series.get(WEIGHT_SYNC_S)
        if gap is None or sync is None or not gap.series.values:
            return []
        sync_by_step = dict(zip(sync.series.steps, sync.series.values))
        shares = [
            g / sync_by_step[s]
            for s, g in zip(gap.series.steps, gap.series.values)
            if sync_by_step.get(s, 0) > 0
        ]
        if not shares:
            return []
        median_share = float(np.median(shares))
        median_sync = float(np.median(sync.series.values))
        # The growth is the fitted trend's (slope x steps spanned), never last minus first: a
        # healthy colocated job's gaps spread 97-149 ms from step to step on a loaded CI
        # machine, and its endpoints read 93.1 -> 149 ms while its trend added far less.
        grown = growth_added(gap)
        grows = gap.verdict.accumulating and grown >= MATERIAL_STEP_SHARE * median_sync
        if not grows and median_share < GAP_SHARE:
            return []
        # The values from the judged first step on, as the growth (a slow first step, the
        # set-up's, is no part of it: a healthy demo read "1.35 s -> 335 ms" as growth).
        vals = gap.series.values[gap.verdict.judged_from :]
        caller = facts.primary.sync_site if facts.primary else None
        title = (
            f"{median_share:.0%} of each weight sync is in no collective "
            f"({fmt_duration(float(np.median(vals)))} median per step)"
        )
        if caller:
            title += f", between the calls that {caller.split(' (')[0]} makes"
        severity = Severity.WARNING if grows else Severity.INFO
        if grows:
            title += (
                f", and it grows ({gap.verdict.shape}): {fmt_duration(vals[0])} -> "
                f"{fmt_duration(vals[-1])}"
            )
            # Half a millisecond more between the calls of a 7 ms sync, in a step of half a
            # second: a healthy job's drift on a loaded machine (the healthy twin of
            # tests/targets/unmarked_sync_job.py read 284 µs -> 702 µs). A part of the weight
            # sync is held to the bar of the whole: a warning only where the sync's own growth
            # would be one (the slowdown rule's share of a step).
            quiet = immaterial(grown, median_step_s(facts), SLOWDOWN_MATERIAL_SHARE)
            if quiet is not None:
                severity = Severity.INFO
                title += quiet
        return [
            Finding(
                self.kind,
                severity,
                title,
                GapsEvidence(
                    median_gap_share=median_share,
                    first_s=vals[0],
                    last_s=vals[-1],
                    accumulating=gap.verdict.accumulating,
                    shape=gap.verdict.shape,
                    caller=facts.primary.sync_site if facts.primary else None,
                ),
                (facts.primary.sync_site if facts.primary else None) or "weight_sync phase",
                "sample the weight sync (`wsprof attach PID` or py-spy) to see what runs between "
                "the collectives (state_dict gathering, serialization, RPC to the engines, "
                "weight loading) and overlap or remove it",
            )
        ]


class GpuIdleDuringSync(Rule):
    """The GPUs sit idle while weights are synced (NVML utilization inside weight-sync phases)."""

    kind = "gpu_idle_during_sync"
    description = "the GPUs sit idle during weight sync"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for pa in facts.processes:
            u = pa.gpu_util
            syncs = [
                r.weight_sync_s / r.step_s
                for r in pa.steps
                if r.weight_sync_s is not None and r.step_s > 0
            ]
            if u is None or not syncs or u.sync_pct > GPU_IDLE_PCT:
                continue
            share = float(np.median(syncs))
            if share < GPU_IDLE_MIN_SYNC_SHARE:
                continue
            other = f" (against {u.other_pct:.0f}% outside it)" if u.other_pct is not None else ""
            out.append(
                Finding(
                    self.kind,
                    Severity.WARNING,
                    f"{pa.label}: the GPUs sit idle during weight sync: {u.sync_pct:.0f}% "
                    f"utilization{other}, while weight sync takes {share:.0%} of each step",
                    GpuIdleEvidence(
                        process=pa.label,
                        sync_util_pct=u.sync_pct,
                        other_util_pct=u.other_pct,
                        samples=u.n_sync,
                        sync_share=share,
                    ),
                    pa.label,
                    "the sync is bound by the host, not the GPUs: overlap it with generation "
                    "(async weight update), bucket parameters into fewer collectives, and keep "
                    "the weights on the GPU (NCCL or CUDA IPC rather than CPU copies)",
                )
            )
        return out
