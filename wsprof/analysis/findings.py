"""Findings: small rule classes, each naming its numbers, a place and a next step.

Modelled on ``torch.profiler._pattern_matcher``: a rule has a ``kind``, a ``description`` and
``match(facts) -> list[Finding]``. Thresholds are module constants with their reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats

from wsprof.analysis.headline import Headline, headline_of
from wsprof.analysis.kinds import HELD_KINDS, series_kind
from wsprof.analysis.model import (
    SEVERITIES,
    Finding,
    GrowthVerdict,
    ProcessAnalysis,
    RankSeries,
    SeriesResult,
    WrapperFact,
)
from wsprof.analysis.model import HotFrame as HotFrameModel
from wsprof.analysis.samples import split_frame
from wsprof.analysis.workload import explained_by_workload
from wsprof.contracts.counters import (
    NVML_MEM_TOTAL_BYTES,
    NVML_PROCESS_GPU_BYTES,
    is_nvml_gpu,
    proc_counter,
    total_bytes_of,
)
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    COLLECTIVE_CALLS,
    ROLLOUT_S,
    STEP_S,
    SYNC_GAP_S,
    WEIGHT_SYNC_S,
    WINDOW_WEIGHT_SYNC_SHARE,
    SeriesKind,
    counter_key,
    counter_of,
    op_of,
    parse_series_key,
)
from wsprof.contracts.units import Unit, fmt_bytes, fmt_duration

#: Growth over the observed steps at or above which an accumulating slowdown is critical: the
#: time has at least doubled, as in the motivating case (143 s -> 1596 s in 4 steps).
CRITICAL_GROWTH_RATIO = 2.0
#: Share of the weight-sync growth that this rank's own time between layers explains at or above
#: which the wrapper is called the cause (critical). Collectives also wait for the peers'
#: wrappers, which shows as backend time on this rank, so a quarter already means the wrapper
#: dominates once every rank runs it; below it a growing wrapper is still reported (warning).
BETWEEN_LAYERS_SHARE = 0.25
#: Growth of the time between layers over the run, as a share of the median weight-sync time
#: (of the median step time when there is no sync), below which a growing trend is noise that
#: no one would act on: a healthy wrapper's few ms drifting on a loaded machine.
BETWEEN_LAYERS_MATERIAL = 0.05
#: Added time per step (per-call growth x calls per step) below this share of the median step
#: time is not reported as per-call growth: a few µs drift over 100 calls is not a problem.
MATERIAL_STEP_SHARE = 0.05
#: A per-step time that grows is a warning only when the growth seen so far (fitted slope x
#: steps spanned) adds at least this share of the median step time; below, it is information
#: ("watch it"). Chance trends of healthy jobs stay below it: the healthy twin of
#: ``tests/targets/unmarked_sync_job.py`` (3 ranks on 2 busy cores, 10 steps) drifted up to 7%
#: of a step on noise alone, while every leak of the issue-15 cases added over 20%.
SLOWDOWN_MATERIAL_SHARE = 0.10
#: |Spearman rho| at or above which a counter is said to track a slowdown.
CORRELATION_RHO = 0.9
#: Fewest steps for a correlation to be reported.
CORRELATION_MIN_STEPS = 4
#: Share of py-spy samples in one leaf frame for it to be called hot (the motivating case had
#: 6 of 6 samples in one place).
HOT_FRAME_SHARE = 0.3
#: Least gain in a frame's share of samples, first windows against last, to report it: a fifth
#: of the process's time moved there. Below it sampling noise and ordinary variation between
#: windows explain the change (at py-spy's 100 Hz a 1 s window holds about 100 samples per busy
#: thread, and consecutive samples of one call are not independent).
FRAME_SHIFT_MIN_CHANGE = 0.2
#: Fewest active samples on each side (first and last windows) for a shift to be reported:
#: half a second of one busy thread at py-spy's default 100 Hz; fewer make shares too coarse.
FRAME_SHIFT_MIN_SAMPLES = 50
#: Late share at or above which a gaining frame is a warning: it now holds most of the active
#: samples, where it held at least 20 points less: the time added went there.
FRAME_SHIFT_WARN_LATE_SHARE = 0.5
#: Least rise of the fitted weight-sync share over the windows for its growth (an accumulating
#: verdict) to be a warning: 10 points of the process's time; a trend in a share that stays
#: within a few points is not a slowdown worth acting on.
SAMPLED_SHARE_MIN_RISE = 0.1
#: Least rise of the mean weight-sync share, first third of the windows against the last third,
#: to be a warning whatever the curve's shape: a share cannot exceed 1, so weight sync that
#: takes over the process saturates (warmup_then_flat) instead of growing linearly. The same
#: materiality as :data:`FRAME_SHIFT_MIN_CHANGE`.
SAMPLED_SHARE_MIN_SHIFT = FRAME_SHIFT_MIN_CHANGE
#: Fewest windows with active samples for a rising weight-sync share to be judged (fewer: not a
#: curve, as for steps).
SAMPLED_SHARE_MIN_WINDOWS = 3
#: Fewest ranks with a weight-sync time for ranks to be compared: with two, neither is "the
#: outlier" (each is as far from the other), so one or two ranks never give an outlier_rank.
OUTLIER_MIN_RANKS = 3
#: Most ranks that can be the outliers: a quarter of the ranks, at least one. When more ranks
#: grow, the growth is the run's (the accumulating_slowdown finding), not one rank's.
OUTLIER_MAX_SHARE = 0.25
#: Modified z-score of a rank's median weight-sync time above which it is an outlier:
#: z = 0.6745 (x - median) / MAD over the ranks' medians, threshold 3.5 as recommended by
#: B. Iglewicz and D. Hoaglin, "How to Detect and Handle Outliers" (ASQC, 1993). Median and MAD
#: are not moved by the outliers themselves, unlike a mean and standard deviation.
OUTLIER_Z = 3.5
#: 0.6745, the standard normal's 0.75 quantile: makes the MAD comparable to a standard deviation.
MAD_Z_SCALE = 0.6745
#: Where MAD is 0 (more than half the ranks share one median), the mean absolute deviation
#: times sqrt(pi/2) = 1.253314 stands in for the scale (the usual fallback, as in IBM SPSS).
MEAN_AD_SCALE = 1.253314
#: And at least this far above the ranks' median: ranks that agree tightly make a 5 % difference
#: a large z-score, but a fifth more sync time on one rank is where it starts to matter.
OUTLIER_MIN_EXCESS = 0.2
#: And its per-step weight-sync times must be above the other ranks' per-step times by a one-sided
#: Mann-Whitney U test at this level (H. B. Mann and D. R. Whitney, Ann. Math. Statist. 18,
#: 1947): with 3 ranks the MAD of 3 medians is tiny and makes any difference a large z-score, and
#: a median over 2-3 noisy steps is not a rank's level. With 3 steps against 6 the test cannot
#: go below 1/84 = 0.012, so the first steps of a live run never make a rank "far slower".
OUTLIER_LEVEL_P = 0.01
#: Least growth of a rank's own time in its collectives (time between layers, first step to last
#: on its fitted curve) for it to count, as a share of the rank's median weight-sync time: a
#: quarter of the sync is what a wrapper must add before it, not the communication, is what
#: peers wait for (as for :data:`BETWEEN_LAYERS_SHARE`); a few µs drift per call is noise.
OUTLIER_OWN_GROWTH_SHARE = 0.25
#: A rank "grows while the others stay flat" only when its weight-sync slope is at least this
#: many times the other ranks' median slope: in a collective every rank waits for the slowest,
#: so all ranks grow together when the cause is shared (the demo's probe runs on every rank),
#: and a per-rank "accumulating" verdict alone flips with noise on short runs.
OUTLIER_GROWTH_RATIO = 3.0
#: Most outlier_rank findings (one per rank, worst first); the rest are counted in the last one.
OUTLIER_MAX_FINDINGS = 5

#: Budgets of per-step times, s: the step at which the projection crosses it is reported. An
#: hour per step (or per weight sync) is where an RL run stops being usable: the motivating
#: run's 57-minute step was found because of it.
TIME_BUDGETS_S = {STEP_S: 3600.0, WEIGHT_SYNC_S: 3600.0}


TIME_SERIES = (WEIGHT_SYNC_S, STEP_S, ROLLOUT_S)
LABELS = {
    WEIGHT_SYNC_S: "weight-sync time",
    STEP_S: "step time",
    ROLLOUT_S: "rollout time",
    BETWEEN_LAYERS_S: "time between the API name and the backend",
    COLLECTIVE_CALLS: "collective calls per step",
}


@dataclass
class Facts:
    """What the rules look at: headline series by name, processes, recorded facts."""

    series: dict[str, SeriesResult]
    processes: Sequence[ProcessAnalysis]
    wrappers: list[WrapperFact] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    #: Series judged as times per step (slowdowns) and as counters (growth).
    time_series: tuple[str, ...] = TIME_SERIES
    counter_series: tuple[str, ...] | None = None
    #: Per-rank weight-sync and step times of every process with steps (rank order).
    ranks: Sequence[RankSeries] = ()
    #: The analysis's headline (:func:`wsprof.analysis.headline.headline_of`), computed once
    #: by whoever builds the facts; None: the rule computes it from ``processes``.
    headline: Headline | None = None
    #: The budgets the series were judged with (series name -> s): where a projection
    #: crosses them is reported (``wsprof watch --sync-budget`` changes the weight sync's).
    budgets: dict[str, float] = field(default_factory=lambda: dict(TIME_BUDGETS_S))

    def counters(self) -> list[str]:
        if self.counter_series is not None:
            return list(self.counter_series)
        return [n for n in self.series if counter_of(n) is not None]

    @property
    def primary(self) -> ProcessAnalysis | None:
        return self.processes[0] if self.processes else None


def _top_wrapper(facts: Facts) -> WrapperFact | None:
    """The wrapper on a collective name through which the most between-layers time went
    (``facts.wrappers`` is sorted that way)."""
    names = [w for w in facts.wrappers if w.kind == "name"]
    return names[0] if names else None


def _wrapper_where(facts: Facts) -> str | None:
    w = _top_wrapper(facts)
    return w.label() if w is not None else None


def _sync_where(facts: Facts) -> str | None:
    """Where weight-sync time goes: the wrapper on a collective name with the most time
    between layers, else the caller of most weight-sync calls (a user's function that issues
    them: time between the collectives is spent there)."""
    w = _wrapper_where(facts)
    if w is not None:
        return w
    pa = facts.primary
    return pa.sync_site if pa is not None else None


def _wrapped_names(facts: Facts) -> str:
    """Every name the top wrapper sits on (the same bug under several names)."""
    top = _top_wrapper(facts)
    if top is None:
        return ""
    same = {w.api for w in facts.wrappers if w.qualname == top.qualname and w.file == top.file}
    return ", ".join(sorted(same))


class Rule:
    """A finding rule."""

    kind = "rule"
    description = ""

    def match(self, facts: Facts) -> list[Finding]:  # pragma: no cover - interface
        raise NotImplementedError


class AccumulatingSlowdown(Rule):
    """A time per step (weight sync, step, rollout) grows step after step.

    Only series whose kind is a duration (:mod:`wsprof.analysis.kinds`) are judged: a per-token
    time, a throughput or a cumulative clock in seconds moves for reasons that are no slowdown.
    A step or rollout time that grows with a workload series of the same log at a flat time
    per unit of work is workload, said at info (:mod:`wsprof.analysis.workload`).
    """

    kind = "accumulating_slowdown"
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
            severity = "critical" if ratio >= CRITICAL_GROWTH_RATIO else "warning"
            # Material: what the fitted growth added over the steps seen, against a step.
            step_res = facts.series.get(STEP_S)
            step_ref = (
                float(np.median(step_res.series.values))
                if step_res is not None and step_res.series.values
                else None
            )
            added = v.slope_per_step * (s.steps[-1] - s.steps[k]) if len(s.steps) > k + 1 else 0.0
            if step_ref and step_ref > 0 and added < SLOWDOWN_MATERIAL_SHARE * step_ref:
                severity = "info"
                title += (
                    f"; so far {s.fmt(added)} added, "
                    f"{added / step_ref:.0%} of a step: watch it, not yet material"
                )
            work = explained_by_workload(res, facts.series) if name != WEIGHT_SYNC_S else None
            if work is not None:
                severity = "info"
                title += "; " + work.text()
            evidence: dict[str, Any] = {
                "series": name,
                "added_s": added,
                "shape": v.shape,
                "first": first,
                "last": last,
                "growth_ratio": ratio,
                "slope_per_step": v.slope_per_step,
                "growth_factor_per_step": v.growth_factor_per_step,
                "confidence": v.confidence,
            }
            if work is not None:
                evidence["workload"] = {
                    "series": work.name,
                    "growth": work.growth,
                    "spearman": work.rho,
                    "rate_change": work.rate_change,
                }
            if proj:
                evidence["projection"] = {
                    "step": proj.step,
                    "value": proj.value,
                    "model": proj.model,
                    "fit_first_step": proj.fit_first_step,
                    "fit_last_step": proj.fit_last_step,
                }
            if v.budget_step is not None and s.steps:
                at = v.budget_step  # a step number, as logged
                budget = s.fmt(facts.budgets.get(name))
                title += f"; by the same fit it reaches {budget} at step {at}"
                evidence["budget_step"] = at
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


class BetweenLayers(Rule):
    """Time between the collective name called and the process-group backend grows: a wrapper
    around the collectives (not the communication) is the cost."""

    kind = "between_layers"
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
        severity = "critical" if share is None or share >= BETWEEN_LAYERS_SHARE else "warning"
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
        if where:
            title += f"; wrapper {where.split(' (')[0]} around {wrapped}"
        if step_ref and grown < MATERIAL_STEP_SHARE * step_ref:
            # A wrapper drifting by a millisecond on a loaded machine, in a step of a second.
            severity = "info"
            title += f"; so far {grown / step_ref:.1%} of a step: watch it, not yet material"
        return [
            Finding(
                self.kind,
                severity,
                title,
                {
                    "slope_s_per_step": bl.verdict.slope_per_step,
                    "share_of_sync_growth": share,
                    "wrapped_names": wrapped,
                    "first_s": vals[0],
                    "last_s": vals[-1],
                },
                where,
                "the wrapper does work per collective whose cost grows (in the motivating case a "
                "free-memory probe walking allocator segments): remove it from the per-call path "
                "or run it once per sync, for every name it wraps, then re-measure; peers that run "
                "the same wrapper make this rank wait in the backend too",
            )
        ]


#: Bucket size of the bucketing estimate, bytes: PyTorch DDP's default gradient bucket
#: (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel), a size known to amortise
#: the per-call cost of collectives; weight-sync frameworks use larger buckets, so the estimate
#: is conservative.
BUCKET_BYTES = 25 * 2**20


def bucketing_estimate(
    pa: ProcessAnalysis | None, calls_per_step: float, per_call_us: float
) -> dict[str, float] | None:
    """What bucketing one step's collectives into :data:`BUCKET_BYTES` collectives would save.

    Args:
        pa: the process (its ops' bytes and steps give the payload per step).
        calls_per_step: collective calls in a step.
        per_call_us: what each call avoided saves, µs (the fixed per-call cost of the cost
            model, or the per-call growth).

    Returns:
        ``buckets`` (calls after bucketing), ``calls``, ``saved_s`` (per step, s); None when the
        payload per step is unknown or bucketing would not reduce the calls.
    """
    if pa is None or not pa.steps or per_call_us <= 0:
        return None
    bytes_per_step = sum(o.bytes_total for o in pa.ops) / len(pa.steps)
    if bytes_per_step <= 0:
        return None
    buckets = max(1.0, float(np.ceil(bytes_per_step / BUCKET_BYTES)))
    if buckets >= calls_per_step:
        return None
    return {
        "buckets": buckets,
        "calls": calls_per_step,
        "saved_s": (calls_per_step - buckets) * per_call_us / 1e6,
    }


def _bucketing_text(est: dict[str, float] | None) -> str:
    if est is None:
        return ""
    return (
        f"; bucketed into {BUCKET_BYTES >> 20} MiB collectives the {est['calls']:.0f} calls "
        f"would be {est['buckets']:.0f}, saving about {fmt_duration(est['saved_s'])}"
        "/step"
    )


class PerCallVsCallCount(Rule):
    """Is each call slower, or are there more calls? With an estimate of what bucketing the
    calls into fewer, larger collectives would save (:func:`bucketing_estimate`)."""

    kind = "per_call_growth"
    description = "each collective gets slower (per_call_growth) or there are more (call_count)"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        count = facts.series.get(COLLECTIVE_CALLS)
        pa = facts.primary
        if count is not None and count.verdict.accumulating:
            model = pa.cost_model if pa is not None else None
            est = bucketing_estimate(
                pa, count.series.values[-1], model.fixed_us if model is not None else 0.0
            )
            out.append(
                Finding(
                    "call_count_growth",
                    "warning",
                    f"collective calls per step grow {count.verdict.slope_per_step:.1f}/step "
                    f"({count.series.values[0]:.0f} -> {count.series.values[-1]:.0f})"
                    + (
                        f", each paying about {model.fixed_us:.0f} µs whatever its size"
                        if model is not None
                        else ""
                    )
                    + _bucketing_text(est),
                    {
                        "slope_per_step": count.verdict.slope_per_step,
                        "fixed_us_per_call": model.fixed_us if model is not None else None,
                        "bucketing": est,
                    },
                    None,
                    "more calls each step: look for per-tensor sync of a growing set of tensors; "
                    "bucket tensors into fewer, larger collectives",
                )
            )
        step = facts.series.get(STEP_S)
        median_step_s = float(np.median(step.series.values)) if step is not None else None
        calls_per_step = float(np.median(count.series.values)) if count is not None else 1.0

        n_steps = len(pa.steps) if pa is not None and pa.steps else 0
        op_calls = {
            o.op: o.n_calls / n_steps for o in (pa.ops if pa is not None else ()) if n_steps
        }

        def material(op: str, res: SeriesResult) -> bool:
            if median_step_s is None or median_step_s <= 0:
                return True
            # The fitted growth over the steps seen (robust to one noisy end point), times
            # the calls of this op per step.
            span = res.series.steps[-1] - res.series.steps[0] if res.series.steps else 0
            added_s = res.verdict.slope_per_step * span * 1e-6 * op_calls.get(op, calls_per_step)
            return added_s >= SLOWDOWN_MATERIAL_SHARE * median_step_s

        # Calls that get slower while neither the step nor the weight sync does are noise of
        # a loaded machine or made up elsewhere in the step: information, not a problem.
        step_grows = any(
            facts.series[n].verdict.accumulating
            for n in (STEP_S, WEIGHT_SYNC_S)
            if n in facts.series
        )

        grown = [
            (op, res)
            for op, res in ((op_of(name), res) for name, res in facts.series.items())
            if op is not None and res.verdict.accumulating and material(op, res)
        ]
        if grown:
            grown.sort(key=lambda p: -p[1].verdict.slope_per_step)
            parts = [
                f"{op} {res.series.values[0]:.0f} -> {res.series.values[-1]:.0f} µs"
                for op, res in grown
            ]
            flat_count = count is not None and not count.verdict.accumulating
            title = "each collective call gets slower (median per step): " + ", ".join(parts)
            if flat_count and count is not None:
                title += f"; calls per step stay at {np.median(count.series.values):.0f}"
            # Bucketing pays the added per-call cost once per bucket instead of once per call.
            res0 = grown[0][1]
            est = bucketing_estimate(
                pa, calls_per_step, res0.series.values[-1] - res0.series.values[0]
            )
            title += _bucketing_text(est)
            if not step_grows:
                title += "; step and weight-sync time do not grow"
            out.append(
                Finding(
                    self.kind,
                    "warning" if step_grows else "info",
                    title,
                    {
                        **{
                            op: {
                                "first_us": res.series.values[0],
                                "last_us": res.series.values[-1],
                                "slope_us_per_step": res.verdict.slope_per_step,
                            }
                            for op, res in grown
                        },
                        "bucketing": est,
                    },
                    ", ".join(op for op, _ in grown),
                    "per-call cost grows, not the number of calls: compare the time between "
                    "layers (wrappers) with the backend time to see whether communication or "
                    "the code around it slows down",
                )
            )
        return out


#: Counters that say nothing about what a process holds, left out of counter findings (still
#: plotted): wsprof's own probe costs (the self_overhead finding reports them), cumulative
#: event counts (they grow with time whatever happens), the garbage collector's per-generation
#: allocation counts (they rise and reset at every collection), constants (device totals).
NOT_GAUGE_PREFIXES = ("wsprof.", "gc.gen")
NOT_GAUGE_SUFFIXES = (
    ".num_device_alloc",
    ".num_device_free",
    ".num_sync_all_streams",
    ".num_alloc_retries",
    ".total_bytes",
    ".mem_total_bytes",
)
#: Gauges whose growth is not a leak (a busier process is not a problem by itself); they may
#: still track a slowdown.
NOT_GROWTH_SUFFIXES = (".cpu_pct", ".util_pct", ".threads")
#: Most counter_correlation findings (strongest first).
CORRELATION_MAX_FINDINGS = 3


def is_gauge(counter: str) -> bool:
    """Whether a counter measures something held now (see :data:`NOT_GAUGE_PREFIXES`)."""
    return not counter.startswith(NOT_GAUGE_PREFIXES) and not counter.endswith(NOT_GAUGE_SUFFIXES)


def _per_counter_unit(unit: Unit) -> tuple[float, str]:
    """(counter units per reported unit, its label) for a counter in ``unit``: per GiB for
    bytes, per 1,000 otherwise (mappings, objects)."""
    return (2.0**30, "GiB") if unit is Unit.BYTES else (1000.0, "1,000")


def gpu_total_bytes(facts: Facts, counter: str) -> float | None:
    """The GPU memory a GPU-memory counter can grow to, bytes, from the device totals recorded
    with the counters (``cuda<d>.total_bytes``, ``nvml.gpu<i>.mem_total_bytes``); None for a
    counter that is not GPU memory or when no total was recorded."""
    total = total_bytes_of(counter)
    names: list[str] = []
    if total is not None:
        names = [counter_key(total)]
    elif counter == NVML_PROCESS_GPU_BYTES:  # its GPUs unknown: bounded by every GPU's total
        names = [n for n in facts.series if is_nvml_gpu(counter_of(n) or "", NVML_MEM_TOTAL_BYTES)]
    totals = [max(facts.series[n].series.values) for n in names if n in facts.series]
    return max(totals) if totals else None


class CounterCorrelation(Rule):
    """A growing counter rises with a growing time: weight-sync time, time between layers, or an
    op's median per-call latency (Spearman rank correlation, scipy; slope by least squares)."""

    kind = "counter_correlation"
    description = "a counter tracks the slowdown"

    def match(self, facts: Facts) -> list[Finding]:
        targets = [
            (name, res)
            for name, res in facts.series.items()
            if (name in (WEIGHT_SYNC_S, BETWEEN_LAYERS_S) or op_of(name) is not None)
            and res.verdict.accumulating
        ]
        if not targets:
            return []
        best: dict[str, tuple[float, str, Any]] = {}
        units: dict[str, Unit] = {}
        for name, res in facts.series.items():
            cname = counter_of(name)
            if cname is None:
                continue
            # Both must grow: a counter that stepped once or stayed flat cannot explain growth
            # (and any two monotone series correlate, so the counter's own verdict decides).
            if not is_gauge(cname) or not res.verdict.accumulating:
                continue
            for tname, target in targets:
                y_by_step = dict(zip(target.series.steps, target.series.values))
                pairs = [
                    (v, y_by_step[s])
                    for s, v in zip(res.series.steps, res.series.values)
                    if s in y_by_step
                ]
                if len(pairs) < CORRELATION_MIN_STEPS:
                    continue
                x = np.array([p[0] for p in pairs])
                y = np.array([p[1] for p in pairs])
                if np.ptp(x) == 0 or np.ptp(y) == 0:
                    continue
                rho = float(stats.spearmanr(x, y).statistic)
                if rho >= CORRELATION_RHO and rho > best.get(cname, (-1.0, "", None))[0]:
                    best[cname] = (rho, tname, stats.linregress(x, y))
                    units[cname] = res.series.unit
        out: list[Finding] = []
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], -abs(kv[1][2].rvalue)))
        for cname, (rho, tname, fit) in ranked[:CORRELATION_MAX_FINDINGS]:
            per, per_label = _per_counter_unit(units[cname])
            target_series = facts.series[tname].series
            op = op_of(tname)
            what = (
                f"{op} per-call latency (median per step)"
                if op is not None
                else LABELS.get(tname, tname)
            )
            added = target_series.fmt(float(fit.slope) * per)
            out.append(
                Finding(
                    self.kind,
                    "warning",
                    f"{what} tracks {cname} (Spearman rho {rho:.2f}): +{added} per "
                    f"{per_label} {cname}",
                    {
                        "counter": cname,
                        "series": tname,
                        "spearman_rho": rho,
                        "slope_per_unit": float(fit.slope),
                        "unit": per_label,
                        "r_squared": float(fit.rvalue**2),
                    },
                    cname,
                    f"find what walks or scales with {cname} on the sync path (probes, snapshots, "
                    "memory statistics) and take it off the per-call path",
                )
            )
        return out


#: A process's RSS growth whose rate would fill the host's memory only after this many times
#: the steps seen is shown at info (a 12-step run growing 3 MiB a step on a 24 GiB host: 8,000
#: steps away); within the steps seen again, critical.
HOST_MEMORY_HORIZON = 100
#: Memory (bytes, no device total known) that grew by less than this share of its first level
#: over the run is shown at info: not yet material (a host process's RSS filling its caches).
MEMORY_MATERIAL_SHARE = 0.10


class CounterGrowth(Rule):
    """A counter (GPU or host memory, allocator mappings, object counts, a user counter) grows
    step after step; for GPU memory, the step at which it reaches the GPU's total.

    Only bytes and resource counts are judged (:data:`wsprof.analysis.kinds.HELD_KINDS`): a
    step or epoch counter, a quality metric, a learning rate or a rate never gets memory-growth
    advice. A trace's user counter whose name and values say nothing counts as a resource
    (``wsprof.counter()`` records a count of something held)."""

    kind = "memory_growth"
    description = "a counter grows linearly or faster; a one-time step or plateau is not growth"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for name in facts.counters():
            res = facts.series.get(name)
            cname = parse_series_key(name).name
            if (
                res is None
                or not res.verdict.accumulating
                or not is_gauge(cname)
                or cname.endswith(NOT_GROWTH_SUFFIXES)
            ):
                continue
            kind = series_kind(res.series, default=SeriesKind.RESOURCE)
            if kind.kind not in HELD_KINDS:
                continue  # a counter by design, a quality metric, a rate: shown, never a leak
            vals = res.series.values[res.verdict.judged_from :]
            slope = res.verdict.slope_per_step
            s = res.series
            title = (
                f"{cname} grows {s.fmt_slope(slope)} "
                f"({s.fmt(vals[0])} -> {s.fmt(vals[-1])}, "
                f"{res.verdict.shape})"
            )
            evidence: dict[str, Any] = {
                "counter": cname,
                "slope_per_step": slope,
                "first": vals[0],
                "last": vals[-1],
                "kind": kind.kind.value,
            }
            total = gpu_total_bytes(facts, cname)
            severity = "warning"
            host = facts.series.get(counter_key(proc_counter("host_total_bytes")))
            if cname == proc_counter("rss_bytes") and host is not None and slope > 0:
                # How long the host's memory lasts at this rate: a few MiB a step in a 12-step
                # run (a Python process filling its caches) is thousands of steps away.
                room = max(host.series.values) - vals[-1]
                steps_left = max(room / slope, 0.0)
                title += (
                    f"; at this rate the host's {fmt_bytes(max(host.series.values))} lasts "
                    f"{steps_left:,.0f} more steps"
                )
                evidence.update(host_total_bytes=max(host.series.values), steps_to_host=steps_left)
                if steps_left > HOST_MEMORY_HORIZON * len(vals):
                    severity = "info"
                    title += ": watch it, not yet material"
                elif steps_left <= len(vals):
                    severity = "critical"
            grown = vals[-1] - vals[0]
            if (
                kind.kind is SeriesKind.BYTES
                and total is None
                and severity == "warning"
                and vals[0] > 0
                and grown < MEMORY_MATERIAL_SHARE * vals[0]
            ):
                # A process's memory that grew a few % over the run (warm-up, caches filling):
                # shown, not yet a leak; a GPU's memory has its own test (steps to its total).
                severity = "info"
                title += (
                    f"; so far {s.fmt(grown)}, {grown / vals[0]:.0%} of its level: "
                    "watch it, not yet material"
                )
            if total is not None and slope > 0:
                steps_left = max((total - vals[-1]) / slope, 0.0)
                oom_step = res.series.steps[-1] + steps_left
                title += (
                    f"; at this rate it reaches the GPU's {fmt_bytes(total)} in "
                    f"{steps_left:.0f} steps (step {oom_step:.0f})"
                )
                evidence.update(gpu_total_bytes=total, steps_to_oom=steps_left, oom_step=oom_step)
                if steps_left <= len(vals):
                    severity = "critical"
            out.append(
                Finding(
                    self.kind,
                    severity,
                    title,
                    evidence,
                    cname,
                    "something is kept each step: find who allocates it "
                    "(wsprof.memory_snapshot(), torch.cuda.memory_snapshot(), gc referrers) "
                    "and release it",
                )
            )
        return out


class RolloutShare(Rule):
    """The two numbers a user wants first: rollout share and weight-sync time."""

    kind = "rollout_share"
    description = "rollout share of each step and weight-sync share"

    def match(self, facts: Facts) -> list[Finding]:
        pa = facts.primary
        if pa is None or not pa.steps:
            return []
        # The numbers are the analysis's headline (computed once, wsprof.analysis.headline).
        h = facts.headline or headline_of(pa, list(facts.series.values()), "")
        parts = []
        ev: dict[str, Any] = {"steps": h.n_steps, "median_step_s": h.step_median_s}
        if h.rollout_share_median is not None:
            ev["median_rollout_share"] = h.rollout_share_median
            parts.append(f"rollout {h.rollout_share_median:.0%} of each step")
        if h.own_sync_median_s is not None:
            ev["median_weight_sync_s"] = h.own_sync_median_s
            ev["last_weight_sync_s"] = h.own_sync_last_step_s
            if h.weight_sync_share_median is not None:
                ev["median_weight_sync_share"] = h.weight_sync_share_median
            parts.append(
                f"weight sync {fmt_duration(h.own_sync_median_s)} median "
                f"({fmt_duration(h.own_sync_last_s)} last step)"
            )
            if h.sync_wait_median_s is not None and h.sync_wait_median_s > 0:
                ev["median_sync_wait_s"] = h.sync_wait_median_s
                parts.append(
                    f"plus {fmt_duration(h.sync_wait_median_s)} median waiting "
                    "for slower ranks to join it"
                )
        if not parts:
            return []
        return [
            Finding(
                self.kind,
                "info",
                "; ".join(parts) + f" ({pa.label}, steps from {pa.step_source})",
                ev,
                pa.label,
                _share_advice(h.rollout_share_median, h.weight_sync_share_median),
            )
        ]


#: Rollout share at or below which the generating GPUs are said to wait on something else
#: (in the motivating case rollout was 68 s of a 57-minute step, 2%); at or above
#: :data:`HIGH_ROLLOUT_SHARE` generation is what the step is made of.
LOW_ROLLOUT_SHARE = 0.3
HIGH_ROLLOUT_SHARE = 0.7


def _share_advice(rollout: float | None, sync: float | None) -> str:
    """What the two numbers say, worded for the share there is."""
    sync_txt = f" and weight sync {sync:.0%} of it" if sync is not None else ""
    if rollout is None:
        return (
            "mark rollout (wsprof.phase('rollout') or a preset) to get the rollout share; "
            "weight sync against step time is the other number to watch"
        )
    if rollout <= LOW_ROLLOUT_SHARE:
        return (
            f"rollout is {rollout:.0%} of the step{sync_txt}: the GPUs that generate wait on "
            "the rest of the step (weight sync, training); a growing weight sync makes it worse"
        )
    if rollout >= HIGH_ROLLOUT_SHARE:
        return (
            f"rollout is {rollout:.0%} of the step{sync_txt}: generation dominates, as it "
            "should; watch that the weight sync does not grow into it"
        )
    return (
        f"rollout is {rollout:.0%} of the step{sync_txt}: the rest of the step is training "
        "and weight sync; watch which of them grows"
    )


class HotFrame(Rule):
    """Most py-spy samples in one place."""

    kind = "hot_frame"
    description = "a frame holds a large share of stack samples"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for pa in facts.processes:
            if not pa.hot_frames:
                continue
            # Per function: a hot loop spreads its samples over several lines, and the
            # function's share is what a user compares with other functions.
            by_function: dict[str, list[HotFrameModel]] = {}
            for f in pa.hot_frames:
                function, file, _line = split_frame(f.frame)
                key = f"{function} ({file})" if file is not None else function
                by_function.setdefault(key, []).append(f)
            name, lines = max(by_function.items(), key=lambda kv: sum(f.samples for f in kv[1]))
            samples = sum(f.samples for f in lines)
            total = pa.hot_frames[0].total
            if not total or samples / total < HOT_FRAME_SHARE:
                continue
            top = lines[0]  # its hottest line (hot_frames are sorted by samples)
            title = f"{samples} of {total} samples in {name} ({pa.label})"
            if len(lines) > 1:
                title += f", most at {top.frame}"
            evidence: dict[str, Any] = {
                "process": pa.label,
                "samples": samples,
                "total": total,
                "share": samples / total,
                "windows": len(pa.windows),
                "hottest_line": top.frame,
            }
            common = Counter(w.common_frame for w in pa.windows if w.common_frame)
            if common:
                frame, n = min(common.items(), key=lambda kv: (-kv[1], kv[0]))
                title += f"; common frame {frame} in {n} of {len(pa.windows)} windows"
                evidence.update(common_frame=frame, common_frame_windows=n)
            elif pa.windows:
                title += f"; {len(pa.windows)} windows, none with a frame in half its samples"
            out.append(
                Finding(
                    self.kind,
                    "info",
                    title,
                    evidence,
                    top.frame,
                    "this is where the process spends its time; after fixing it, sample again",
                )
            )
        return out


def _windows_word(n: int) -> str:
    return f"{n} window" if n == 1 else f"{n} windows"


def _first_last(k: int) -> tuple[str, str]:
    """("the first 3 windows", "the last 3") or, for one, ("the first window", "the last")."""
    return (
        ("the first window", "the last") if k == 1 else (f"the first {k} windows", f"the last {k}")
    )


class EarlyLateShift(Rule):
    """A frame's share of samples grew from the first sampling windows to the last: where the
    time added over the run went (from py-spy samples, no step markers needed)."""

    kind = "frame_shift"
    description = "a frame gained share of samples from the first windows to the last"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for pa in facts.processes:
            sh = pa.shift
            if sh is None or not sh.gained:
                continue
            if min(sh.early_total, sh.late_total) < FRAME_SHIFT_MIN_SAMPLES:
                continue
            top = sh.gained[0]
            if top.change < FRAME_SHIFT_MIN_CHANGE:
                continue
            first, last = _first_last(sh.k)
            title = (
                f"{top.frame}: {top.early_share:.0%} of samples in {first} -> "
                f"{top.late_share:.0%} in {last} ({pa.label})"
            )
            lost = sh.lost[0] if sh.lost else None
            if lost is not None:
                title += (
                    f"; {lost.frame} lost most ({lost.early_share:.0%} -> {lost.late_share:.0%})"
                )
            severity = "warning" if top.late_share >= FRAME_SHIFT_WARN_LATE_SHARE else "info"
            evidence: dict[str, Any] = {
                "process": pa.label,
                "frame": top.frame,
                "early_share": top.early_share,
                "late_share": top.late_share,
                "change": top.change,
                "k_windows": sh.k,
                "windows": sh.n_windows,
                "early_samples": sh.early_total,
                "late_samples": sh.late_total,
                "gained": [
                    {"frame": g.frame, "early_share": g.early_share, "late_share": g.late_share}
                    for g in sh.gained[:5]
                ],
                "lost": [
                    {"frame": g.frame, "early_share": g.early_share, "late_share": g.late_share}
                    for g in sh.lost[:5]
                ],
            }
            out.append(
                Finding(
                    self.kind,
                    severity,
                    title,
                    evidence,
                    top.frame,
                    "the time added over the run went into this frame: find what in it grows "
                    "(py-spy dump --pid PID while it runs), or time it per step with "
                    "wsprof.phase(); fix it, then sample again",
                )
            )
        return out


def _pct_span(values: Sequence[float]) -> str:
    return f"{np.median(values):.0%} median ({values[0]:.0%} first -> {values[-1]:.0%} last)"


class SampledPhaseShare(Rule):
    """Rollout share and weight-sync share per sampling window, from py-spy samples classified
    by frame patterns (:mod:`wsprof.analysis.phases`): the two numbers without step markers."""

    kind = "sampled_phase_share"
    description = "rollout and weight-sync share of samples per window, and whether sync grows"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for i, pa in enumerate(facts.processes):
            active = [w for w in pa.windows if w.n_active > 0]
            if not active:
                continue
            sync = [w.weight_sync_share or 0.0 for w in active]
            roll = [w.rollout_share or 0.0 for w in active]
            src = pa.phase_source or "generic"
            ev: dict[str, Any] = {
                "windows": len(active),
                "phase_source": src,
                "median_weight_sync_share": float(np.median(sync)),
                "first_weight_sync_share": sync[0],
                "last_weight_sync_share": sync[-1],
                "median_rollout_share": float(np.median(roll)),
                "first_rollout_share": roll[0],
                "last_rollout_share": roll[-1],
            }
            where = f"{pa.label}, {_windows_word(len(active))}, {src} patterns"
            severity = "info"
            if not any(sync) and not any(roll):
                title = (
                    f"sampled phases ({where}): no sample matched a rollout or weight-sync pattern"
                )
                next_step = (
                    "name the entry points: wsprof attach PID --phase "
                    "weight_sync=REGEX --phase rollout=REGEX (or --framework NAME)"
                )
            else:
                title = (
                    f"sampled phases per window ({where}): weight sync {_pct_span(sync)} "
                    f"of active samples; rollout {_pct_span(roll)}"
                )
                next_step = (
                    "a low rollout share with a large weight-sync share means the GPUs "
                    "that generate wait on the sync"
                )
            k = max(1, len(sync) // 3)
            early, late = float(np.mean(sync[:k])), float(np.mean(sync[-k:]))
            ev.update(k_windows=k, early_weight_sync_share=early, late_weight_sync_share=late)
            grows = len(sync) >= SAMPLED_SHARE_MIN_WINDOWS and late - early >= (
                SAMPLED_SHARE_MIN_SHIFT
            )
            res = facts.series.get(WINDOW_WEIGHT_SYNC_SHARE) if i == 0 else None
            shape = ""
            if res is not None:
                v = res.verdict
                rise = v.fitted[-1] - v.fitted[0] if v.fitted else 0.0
                ev.update(
                    shape=v.shape,
                    accumulating=v.accumulating,
                    slope_per_window=v.slope_per_step,
                    fitted_rise=rise,
                )
                shape = f"{v.shape}, {v.slope_per_step * 100:+.1f} points per window; "
                grows = grows or (v.accumulating and rise >= SAMPLED_SHARE_MIN_RISE)
            # Per-step times outrank sampled shares: where this process's steps give a weight
            # sync that does not grow, a rising share (start-up windows of imports, a loaded
            # machine) is not a slowdown.
            sync_res = facts.series.get(WEIGHT_SYNC_S) if i == 0 else None
            judged = sync_res.verdict if sync_res is not None else None
            if judged is None:  # another rank: its own per-step verdict
                judged = next((r.sync for r in facts.ranks if r.label == pa.label), None)
            timed_flat = bool(pa.steps) and judged is not None and not judged.accumulating
            ev["grows"] = grows and not timed_flat
            if grows and timed_flat:
                title += "; the per-step weight-sync time does not grow"
            if grows and not timed_flat:
                severity = "warning"
                first, last = _first_last(k)
                title = (
                    f"weight-sync share of samples rises per window: {sync[0]:.0%} -> "
                    f"{sync[-1]:.0%} over {_windows_word(len(sync))} ({shape}mean {early:.0%} "
                    f"in {first}, {late:.0%} in {last}; {pa.label}, {src} patterns); "
                    f"rollout {_pct_span(roll)}"
                )
                next_step = (
                    "weight sync takes more of the process's time window after window "
                    "(a share saturates as sync takes the window over): see the "
                    "frame_shift finding for where the time goes, fix it, then sample "
                    "again"
                )
            out.append(Finding(self.kind, severity, title, ev, pa.label, next_step))
        return out


class SelfOverhead(Rule):
    """wsprof's own cost and anything it dropped or failed to do."""

    kind = "self_overhead"
    description = "wsprof's own cost, dropped records and internal errors"

    def match(self, facts: Facts) -> list[Finding]:
        flush_s = hooks_s = steps_s = probe_s = wall_s = 0.0
        dropped = internal = write = forgotten = lost = 0
        hook_ns: list[int] = []
        for pa in facts.processes:
            own = pa.self_overhead
            flush_s += own.flush_s
            dropped += own.dropped_calls
            internal += own.internal_errors
            write += own.write_errors
            forgotten += own.forgotten_async
            lost += own.lost_calls
            if own.hook_ns_per_call is not None:
                hook_ns.append(own.hook_ns_per_call)
                # every recorded call went through a hook (watch keeps the count, not ops)
                hooks_s += own.hook_ns_per_call * pa.calls.n_total / 1e9
            steps_s += sum(r.step_s for r in pa.steps)
            if own.probes is not None and own.probes.share > 0:
                probe_s += own.probes.spent_s
                wall_s += own.probes.wall_s
        if not facts.processes:
            return []
        bad = dropped or internal or write or lost
        title = f"wsprof wrote its traces in {flush_s:.2f} s of background time"
        if hook_ns:
            title = (
                f"wsprof's hooks cost about {fmt_duration(hooks_s)} in all "
                f"({max(hook_ns) / 1e3:.1f} µs per call, measured at patch)"
            )
            if steps_s > 0:
                title += f", {hooks_s / steps_s:.2%} of step time"
            title += f"; its writer {flush_s:.2f} s in the background"
        if wall_s > 0:
            title += (
                f"; counter probes {fmt_duration(probe_s)} ({probe_s / wall_s:.2%} of wall time)"
            )
        if bad:
            title += (
                f"; dropped {dropped} calls (queue full), lost {lost} (failed writes), "
                f"{internal} internal errors, {write} write errors"
            )
        return [
            Finding(
                self.kind,
                "warning" if bad else "info",
                title,
                {
                    "flush_s": flush_s,
                    "hooks_s": hooks_s,
                    "hook_ns_per_call": hook_ns,
                    "probe_s": probe_s,
                    "probe_share": probe_s / wall_s if wall_s else None,
                    "dropped_calls": dropped,
                    "internal_errors": internal,
                    "write_errors": write,
                    "forgotten_async": forgotten,
                    "lost_calls": lost,
                    "first_errors": facts.internal_errors[:5],
                },
                None,
                "report internal errors to wsprof; training was not affected"
                if bad
                else "nothing to do",
            )
        ]


def robust_z(values: Sequence[float]) -> list[float]:
    """Modified z-scores, ``0.6745 (x - median) / MAD`` (Iglewicz and Hoaglin); with a MAD of 0,
    ``(x - median) / (1.253314 mean absolute deviation)``; all 0 when every value is the same.
    """
    x = np.asarray(values, dtype=np.float64)
    med = float(np.median(x))
    dev = x - med
    mad = float(np.median(np.abs(dev)))
    if mad > 0:
        return [float(v) for v in MAD_Z_SCALE * dev / mad]
    mean_ad = float(np.mean(np.abs(dev)))
    if mean_ad > 0:
        return [float(v) for v in dev / (MEAN_AD_SCALE * mean_ad)]
    return [0.0] * len(x)


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and np.isfinite(v)]


def _ratio(first: float, last: float) -> float:
    return last / first if first > 0 else float("inf")


def _fitted_rise(v: GrowthVerdict | None) -> float:
    """What a verdict's fitted curve rises from the first step to the last (0 without one)."""
    if v is None or not v.fitted:
        return 0.0
    return float(v.fitted[-1] - v.fitted[0])


def _own_growth_s(r: RankSeries) -> float:
    """Growth of a rank's time between layers over its steps, s (its fitted curve)."""
    return _fitted_rise(r.between)


def _waiters(r: RankSeries, others: Sequence[RankSeries]) -> str:
    """``; the weight sync of N other ranks grows with it: ...`` when others' sync grows."""
    grown = sum(1 for o in others if o.sync is not None and o.sync.accumulating)
    return (
        (
            f"; the weight sync of {grown} other ranks grows with it: they wait for {r.label} "
            "in the collectives"
        )
        if grown
        else ""
    )


def _gap_growth_s(r: RankSeries) -> float:
    """Growth of a rank's time in its weight sync outside any collective over its steps, s
    (its fitted curve)."""
    return _fitted_rise(r.gap)


def _above_the_others(rows: Sequence[RankSeries], i: int) -> bool:
    """Rank ``i``'s per-step weight-sync times are above the other ranks' (one-sided
    Mann-Whitney U, p < :data:`OUTLIER_LEVEL_P`)."""
    mine = _finite(rows[i].weight_sync_s)
    theirs = [v for j, r in enumerate(rows) if j != i for v in _finite(r.weight_sync_s)]
    if not mine or not theirs:
        return False
    p = stats.mannwhitneyu(mine, theirs, alternative="greater").pvalue
    return bool(p < OUTLIER_LEVEL_P)


class OutlierRank(Rule):
    """One rank (or a few) differs from the others: its weight sync grows while theirs stays
    flat, its own time in the collectives grows while theirs does not, or its median weight-sync
    time is far above theirs (robust z-score over the ranks)."""

    kind = "outlier_rank"
    description = "one rank's weight sync grows or is far slower while the other ranks' is not"

    def match(self, facts: Facts) -> list[Finding]:
        # Ranks are compared within one process world only (a trainer's weight sync is a
        # push, an engine's a receive: not the same work).
        found: list[Finding] = []
        for world in dict.fromkeys(r.world for r in facts.ranks):
            found += self._match_rows([r for r in facts.ranks if r.world == world])
        order = {s: k for k, s in enumerate(SEVERITIES)}
        found.sort(key=lambda f: (-order[f.severity], -float(f.evidence["added_s"])))
        return found

    def _match_rows(self, ranks: Sequence[RankSeries]) -> list[Finding]:
        rows = [r for r in ranks if r.median_weight_sync_s is not None]
        n = len(rows)
        if n < OUTLIER_MIN_RANKS:
            return []
        most = max(1, int(n * OUTLIER_MAX_SHARE))
        reasons: dict[int, list[str]] = {}

        def flag(idx: list[int], reason: str) -> None:
            if 0 < len(idx) <= most:
                for i in idx:
                    reasons.setdefault(i, []).append(reason)

        slopes = [max(r.sync.slope_per_step, 0.0) if r.sync is not None else 0.0 for r in rows]

        def grows_alone(i: int) -> bool:
            others = [s for j, s in enumerate(slopes) if j != i]
            return slopes[i] > 0 and slopes[i] >= OUTLIER_GROWTH_RATIO * float(np.median(others))

        flag(
            [
                i
                for i, r in enumerate(rows)
                if r.sync is not None and r.sync.accumulating and grows_alone(i)
            ],
            "sync_growth",
        )
        flag(
            [
                i
                for i, r in enumerate(rows)
                if r.between is not None
                and r.between.accumulating
                and _own_growth_s(r)
                >= OUTLIER_OWN_GROWTH_SHARE * float(r.median_weight_sync_s or 0.0)
            ],
            "own_growth",
        )
        gap_grows = [
            r.gap is not None
            and r.gap.accumulating
            and _gap_growth_s(r) >= OUTLIER_OWN_GROWTH_SHARE * float(r.median_weight_sync_s or 0.0)
            for r in rows
        ]
        # Its own work between its collectives grows while the other ranks' does not: they
        # wait for it inside the collectives, so every rank's sync grows alike.
        flag([i for i in range(n) if gap_grows[i] and sum(gap_grows) <= most], "gap_growth")
        medians = [float(r.median_weight_sync_s or 0.0) for r in rows]
        z = robust_z(medians)
        med = float(np.median(medians))
        flag(
            [
                i
                for i in range(n)
                if z[i] > OUTLIER_Z
                and medians[i] >= (1 + OUTLIER_MIN_EXCESS) * med
                and _above_the_others(rows, i)
            ],
            "level",
        )
        if not reasons:
            return []
        mad = float(np.median(np.abs(np.array(medians) - med)))
        found = [self._finding(rows, i, why, z[i], med, mad) for i, why in reasons.items()]
        order = {s: k for k, s in enumerate(SEVERITIES)}
        found.sort(key=lambda f: (-order[f.severity], -float(f.evidence["added_s"])))
        if len(found) > OUTLIER_MAX_FINDINGS:
            rest = len(found) - OUTLIER_MAX_FINDINGS + 1
            last = found[OUTLIER_MAX_FINDINGS - 1]
            found[OUTLIER_MAX_FINDINGS - 1] = Finding(
                last.kind,
                last.severity,
                f"{last.title}; {rest - 1} more outlier ranks (the rank table lists them)",
                {
                    **last.evidence,
                    "more_outlier_ranks": [f.where for f in found[OUTLIER_MAX_FINDINGS:]],
                },
                last.where,
                last.next_step,
            )
            found = found[:OUTLIER_MAX_FINDINGS]
        for f in found:
            f.evidence["outlier_ranks"] = len(reasons)
        return found

    def _finding(
        self, rows: Sequence[RankSeries], i: int, why: list[str], z: float, med: float, mad: float
    ) -> Finding:
        r = rows[i]
        others = [o for k, o in enumerate(rows) if k != i]
        sync = _finite(r.weight_sync_s)
        other_meds = [float(o.median_weight_sync_s or 0.0) for o in others]
        others_med = float(np.median(other_meds))
        n_flat = sum(1 for o in others if o.sync is None or not o.sync.accumulating)
        ev: dict[str, Any] = {
            "label": r.label,
            "rank": r.rank,
            "host": r.host,
            "pid": r.pid,
            "reasons": why,
            "steps": len(r.steps),
            "first_weight_sync_s": sync[0],
            "last_weight_sync_s": sync[-1],
            "median_weight_sync_s": r.median_weight_sync_s,
            "others_median_weight_sync_s": others_med,
            "ranks": len(rows),
            "others_flat": n_flat,
            "robust_z": z,
            "ranks_median_weight_sync_s": med,
            "ranks_mad_s": mad,
            "sync_lag_s": r.sync_lag_s,
        }
        if r.sync is not None:
            ev.update(shape=r.sync.shape, slope_s_per_step=r.sync.slope_per_step)
        parts: list[str] = []
        severity = "warning"
        added = 0.0
        if "sync_growth" in why and r.sync is not None:
            v: GrowthVerdict = r.sync
            parts.append(
                f"weight sync grows ({v.shape}): {fmt_duration(sync[0])} -> "
                f"{fmt_duration(sync[-1])} over {len(sync)} steps "
                f"({Unit.SECONDS.fmt_slope(v.slope_per_step)}) while "
                f"{'the other' if n_flat == len(others) else f'{n_flat} of the other'} "
                f"{len(others)} ranks stay flat (median {fmt_duration(others_med)})"
            )
            added = max(added, sync[-1] - sync[0])
            if _ratio(sync[0], sync[-1]) >= CRITICAL_GROWTH_RATIO:
                severity = "critical"
        if "own_growth" in why and r.between is not None:
            own = r.between_layers_s
            growth = _own_growth_s(r)
            others_own = [float(np.median(o.between_layers_s)) for o in others]
            ev.update(
                first_between_layers_s=own[0],
                last_between_layers_s=own[-1],
                between_slope_s_per_step=r.between.slope_per_step,
                own_growth_s=growth,
                others_median_between_layers_s=float(np.median(others_own)),
            )
            if parts:  # after the sync growth: the short form
                text = (
                    f"its own time in the collectives grows {fmt_duration(own[0])} -> "
                    f"{fmt_duration(own[-1])} per step"
                )
            else:
                text = (
                    f"its own time in the collectives (between the API name and the "
                    f"backend) grows {fmt_duration(own[0])} -> "
                    f"{fmt_duration(own[-1])} per step "
                    f"({Unit.SECONDS.fmt_slope(r.between.slope_per_step)}) while the other "
                    f"ranks' stays near {fmt_duration(float(np.median(others_own)))}"
                )
                text += _waiters(r, others)
            parts.append(text)
            added = max(added, growth)
            if _ratio(own[0], own[-1]) >= CRITICAL_GROWTH_RATIO:
                severity = "critical"
        if "gap_growth" in why and r.gap is not None:
            gaps = _finite(r.sync_gap_s)
            growth = _gap_growth_s(r)
            ev.update(
                first_sync_gap_s=gaps[0],
                last_sync_gap_s=gaps[-1],
                gap_growth_s=growth,
                gap_slope_s_per_step=r.gap.slope_per_step,
            )
            text = (
                f"its own work between its collectives in the weight sync grows "
                f"{fmt_duration(gaps[0])} -> {fmt_duration(gaps[-1])} per step "
                f"({Unit.SECONDS.fmt_slope(r.gap.slope_per_step)}) while the other ranks' "
                "does not" + _waiters(r, others)
            )
            parts.append(text)
            added = max(added, growth)
            if _ratio(gaps[0], gaps[-1]) >= CRITICAL_GROWTH_RATIO:
                severity = "critical"
        if "level" in why:
            times = float(r.median_weight_sync_s or 0.0) / med if med > 0 else float("inf")
            parts.append(
                f"median weight sync {fmt_duration(r.median_weight_sync_s)}, "
                f"{times:.1f}x the ranks' median {fmt_duration(med)} (robust z {z:.1f} > "
                f"{OUTLIER_Z})"
                if not parts
                else f"median {times:.1f}x the ranks' (robust z {z:.1f})"
            )
            added = max(added, float(r.median_weight_sync_s or 0.0) - med)
        ev["added_s"] = added
        title = f"{r.where()}: " + "; ".join(parts)
        pid = r.pid if r.pid is not None else "PID"
        on = f" on {r.host}" if r.host else ""
        next_step = (
            f"look at this rank while it runs: `wsprof attach {pid}`{on} (py-spy shows what it "
            "does during the sync); check its GPU and NIC (nvidia-smi -q: clocks, throttling, "
            "ECC and PCIe/NVLink errors; NIC link errors) and what differs in its "
            "configuration from the other ranks; fix it, then measure again"
        )
        if "own_growth" in why:
            found_wrapper = (
                f"wrapper {r.wrapper} was found on its collective names"
                if r.wrapper
                else f"`wsprof attach {pid}`{on} while it syncs"
            )
            next_step = (
                "this rank spends more time in its own code around the collectives every step "
                f"(a wrapper or probe that runs on it: {found_wrapper}): take it off the "
                "per-call path, then measure again"
            )
            ev["wrapper"] = r.wrapper
        return Finding(self.kind, severity, title, ev, r.where(), next_step)


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


class Gaps(Rule):
    """Time inside weight-sync phases that is in no collective: serialization, RPC, weight
    loading or gathering between the collectives."""

    kind = "gaps"
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
        grows = (
            gap.verdict.accumulating
            and (gap.series.values[-1] - gap.series.values[0]) >= MATERIAL_STEP_SHARE * median_sync
        )
        if not grows and median_share < GAP_SHARE:
            return []
        vals = gap.series.values
        caller = facts.primary.sync_site if facts.primary else None
        title = (
            f"{median_share:.0%} of each weight sync is in no collective "
            f"({fmt_duration(float(np.median(vals)))} median per step)"
        )
        if caller:
            title += f", between the calls that {caller.split(' (')[0]} makes"
        severity = "warning" if grows else "info"
        if grows:
            title += (
                f", and it grows ({gap.verdict.shape}): {fmt_duration(vals[0])} -> "
                f"{fmt_duration(vals[-1])}"
            )
            step = facts.series.get(STEP_S)
            step_ref = float(np.median(step.series.values)) if step and step.series.values else 0
            grown = vals[-1] - vals[0]
            if step_ref > 0 and grown < MATERIAL_STEP_SHARE * step_ref:
                # Half a millisecond more between the calls of a 7 ms sync, in a step of half
                # a second: a healthy job's drift on a loaded machine (the healthy twin of
                # tests/targets/unmarked_sync_job.py read 284 µs -> 702 µs), as for the time
                # between layers.
                severity = "info"
                title += f"; so far {grown / step_ref:.1%} of a step: watch it, not yet material"
        return [
            Finding(
                self.kind,
                severity,
                title,
                {
                    "median_gap_share": median_share,
                    "first_s": vals[0],
                    "last_s": vals[-1],
                    "accumulating": gap.verdict.accumulating,
                    "shape": gap.verdict.shape,
                    "caller": facts.primary.sync_site if facts.primary else None,
                },
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
                    "warning",
                    f"{pa.label}: the GPUs sit idle during weight sync: {u.sync_pct:.0f}% "
                    f"utilization{other}, while weight sync takes {share:.0%} of each step",
                    {
                        "process": pa.label,
                        "sync_util_pct": u.sync_pct,
                        "other_util_pct": u.other_pct,
                        "samples": u.n_sync,
                        "sync_share": share,
                    },
                    pa.label,
                    "the sync is bound by the host, not the GPUs: overlap it with generation "
                    "(async weight update), bucket parameters into fewer collectives, and keep "
                    "the weights on the GPU (NCCL or CUDA IPC rather than CPU copies)",
                )
            )
        return out


RULES: tuple[Rule, ...] = (
    AccumulatingSlowdown(),
    BetweenLayers(),
    PerCallVsCallCount(),
    CounterCorrelation(),
    CounterGrowth(),
    Gaps(),
    GpuIdleDuringSync(),
    RolloutShare(),
    HotFrame(),
    EarlyLateShift(),
    SampledPhaseShare(),
    OutlierRank(),
    SelfOverhead(),
)


def run_rules(facts: Facts, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule's findings, most severe first (stable within a severity)."""
    found: list[Finding] = []
    for rule in rules:
        found.extend(rule.match(facts))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    ranked = sorted(found, key=lambda f: -order.get(f.severity, 0))
    return [replace(f, id=f"F{i}") for i, f in enumerate(ranked, 1)]
