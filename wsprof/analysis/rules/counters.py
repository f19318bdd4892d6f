"""Counters: those whose growth follows a time per step, and held memory or resources that grow."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from wsprof.analysis.chain import Role
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import LABELS, Facts
from wsprof.analysis.kinds import HELD_KINDS, series_kind
from wsprof.analysis.model import GROWING_SHAPES, Finding, SeriesResult, Severity
from wsprof.analysis.rules.base import Rule
from wsprof.contracts.counters import (
    NVML_MEM_TOTAL_BYTES,
    NVML_PROCESS_GPU_BYTES,
    CounterKind,
    CounterSource,
    counter_kind,
    is_gauge,
    is_nvml_gpu,
    parse_counter,
    proc_counter,
    total_bytes_of,
)
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    WEIGHT_SYNC_S,
    SeriesKind,
    counter_key,
    counter_of,
    op_of,
    parse_series_key,
)
from wsprof.contracts.units import Unit, fmt_bytes

#: |Spearman rho| at or above which a counter is said to track a slowdown.
CORRELATION_RHO = 0.9
#: Fewest steps for a correlation to be reported.
CORRELATION_MIN_STEPS = 4


#: Gauges whose growth is not a leak (a busier process is not a problem by itself); they may
#: still track a slowdown.
NOT_GROWTH_SUFFIXES = (".cpu_pct", ".util_pct", ".threads")
#: Most counter_correlation findings (strongest first).
CORRELATION_MAX_FINDINGS = 3


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


@dataclass(frozen=True, kw_only=True)
class CounterCorrelationEvidence(Evidence):
    """A counter that tracks a growing time (``counter_correlation``).

    Attributes:
        counter: the counter's name.
        series: the key of the time series it tracks.
        spearman_rho: Spearman's rank correlation of the counter with the series.
        slope_per_unit: least-squares cost, series unit per ``unit`` counter units.
        unit: the counter units the slope is per (``GiB``, ``1,000``).
        r_squared: the least-squares fit's r squared.
    """

    counter: str
    series: str
    spearman_rho: float
    slope_per_unit: float = field(metadata=unit("series"))
    unit: str
    r_squared: float

    def series_named(self) -> str | None:
        return self.series

    def counter_named(self) -> str | None:
        return self.counter


class CounterCorrelation(Rule):
    """A growing counter rises with a growing time: weight-sync time, time between layers, or an
    op's median per-call latency (Spearman rank correlation, scipy; slope by least squares)."""

    kind = "counter_correlation"
    roles = ((kind, Role.COUNTER),)
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
                    Severity.WARNING,
                    f"{what} tracks {cname} (Spearman rho {rho:.2f}): +{added} per "
                    f"{per_label} {cname}",
                    CounterCorrelationEvidence(
                        counter=cname,
                        series=tname,
                        spearman_rho=rho,
                        slope_per_unit=float(fit.slope),
                        unit=per_label,
                        r_squared=float(fit.rvalue**2),
                    ),
                    cname,
                    f"find what walks or scales with {cname} on the sync path (probes, snapshots, "
                    "memory statistics) and take it off the per-call path",
                )
            )
        return out


#: Memory growth whose rate would fill the host's memory (a process's RSS) or the GPU's (its
#: allocator) only after this many times the steps seen is shown at info (a 12-step run growing
#: 3 MiB a step on a 24 GiB host: 8,000 steps away); within the steps seen, critical.
MEMORY_HORIZON = 100
#: Memory (bytes, no device total known) that grew by less than this share of its first level
#: over the run is shown at info: not yet material (a host process's RSS filling its caches).
MEMORY_MATERIAL_SHARE = 0.10


#: An RSS that fills the host within this many times the steps seen stays a warning even when
#: it grows alone: an out-of-memory that close is a problem whatever holds the memory.
RSS_URGENT = 10
#: The advice of an RSS that grows alone (no allocator, GPU, gc-object or shared-tensor counter
#: grows beside it).
RSS_ALONE_HINT = (
    "nothing wsprof tracks is retained beside it: a warm-up (allocator arenas, the "
    "interpreter's caches) levels off, a leak goes on; run longer to tell, or add "
    "wsprof.counter() for what your job keeps"
)


@dataclass(frozen=True, kw_only=True)
class CounterGrowthEvidence(Evidence):
    """A held counter that grows (``memory_growth``).

    Attributes:
        counter: the counter's name.
        slope_per_step: Theil-Sen slope, counter unit per step.
        first: its first judged value, counter unit.
        last: its last value, counter unit.
        kind: what it counts (:class:`~wsprof.contracts.series.SeriesKind` value).
        host_total_bytes: the host's memory (a process's RSS only).
        steps_to_host: steps until the RSS fills the host's memory at this rate.
        gpu_total_bytes: the GPU's memory (GPU memory counters with a known total only).
        steps_to_oom: steps until it fills the GPU's memory at this rate.
        oom_step: the step number at which it does.
        rss_alone: True for a process's RSS that grows with no other held counter growing
            beside it (shown at info: nothing retained is seen); absent otherwise.
    """

    counter: str
    slope_per_step: float = field(metadata=unit("series"))
    first: float = field(metadata=unit("series"))
    last: float = field(metadata=unit("series"))
    kind: str
    host_total_bytes: float | None = optional("bytes")
    steps_to_host: float | None = optional("count")
    gpu_total_bytes: float | None = optional("bytes")
    steps_to_oom: float | None = optional("count")
    oom_step: float | None = optional()
    rss_alone: bool | None = optional()

    def counter_named(self) -> str | None:
        return self.counter


def _growing_held(facts: Facts, name: str) -> SeriesResult | None:
    """The counter series ``name`` when it is held memory or resources that grow step after
    step (what :class:`CounterGrowth` judges), else None.

    Growth is the classifier's verdict: ``accumulating`` (it rejects a rise that stopped: the
    plateau model, named ``warmup_then_flat``, :func:`wsprof.analysis.growth.classify`) with
    a growing shape; a warm-up that levels off (allocator arenas, the interpreter's caches)
    is no growth."""
    res = facts.series.get(name)
    cname = parse_series_key(name).name
    if (
        res is None
        or not res.verdict.accumulating
        or res.verdict.shape not in GROWING_SHAPES
        or not is_gauge(cname)
        or cname.endswith(NOT_GROWTH_SUFFIXES)
    ):
        return None
    kind = series_kind(res.series, default=SeriesKind.RESOURCE)
    return res if kind.kind in HELD_KINDS else None


def rss_explained_by(facts: Facts) -> list[str]:
    """The held counters other than the RSS that grow beside it (allocator bytes, the
    process's GPU memory, gc object counts, shared tensors still alive, a user's own held
    counter): what the RSS growth may be. Threads are left out (a busier process is no
    retention, :data:`NOT_GROWTH_SUFFIXES`), and so are counters of another kind (events,
    sizes)."""
    rss = proc_counter("rss_bytes")
    out: list[str] = []
    for name in facts.counters():
        cname = parse_series_key(name).name
        kind = counter_kind(cname)
        if cname == rss or (kind is not None and kind is not CounterKind.HELD):
            continue
        if _growing_held(facts, name) is not None:
            out.append(cname)
    return out


def _owned_by_sharing(series_name: str) -> bool:
    """Whether a counter series is tensor sharing's (``share.*``): judged per update, with its
    holder, by :class:`~wsprof.analysis.rules.sharing.SharedBucketsKept` (it still explains an
    RSS that grows, :func:`rss_explained_by`)."""
    c = parse_counter(parse_series_key(series_name).name)
    return c is not None and c.source is CounterSource.SHARE


class CounterGrowth(Rule):
    """A counter (GPU or host memory, allocator mappings, object counts, a user counter) grows
    step after step; for GPU memory, the step at which it reaches the GPU's total.

    Only bytes and resource counts are judged (:data:`wsprof.analysis.kinds.HELD_KINDS`): a
    step or epoch counter, a quality metric, a learning rate or a rate never gets memory-growth
    advice. A trace's user counter whose name and values say nothing counts as a resource
    (``wsprof.counter()`` records a count of something held)."""

    kind = "memory_growth"
    roles = ((kind, Role.COUNTER_GROWTH),)
    description = "a counter grows linearly or faster; a one-time step or plateau is not growth"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        explained: list[str] | None = None
        for name in facts.counters():
            res = _growing_held(facts, name)
            if res is None or _owned_by_sharing(name):
                # not growing (flat, a step, a warm-up that levelled off), not a gauge, or a
                # counter by design, a quality metric, a rate: shown, never a leak
                continue
            cname = parse_series_key(name).name
            kind = series_kind(res.series, default=SeriesKind.RESOURCE)
            vals = res.series.values[res.verdict.judged_from :]
            slope = res.verdict.slope_per_step
            s = res.series
            title = (
                f"{cname} grows {s.fmt_slope(slope)} "
                f"({s.fmt(vals[0])} -> {s.fmt(vals[-1])}, "
                f"{res.verdict.shape})"
            )
            host_total: float | None = None
            steps_to_host: float | None = None
            steps_to_oom: float | None = None
            oom_step: float | None = None
            total = gpu_total_bytes(facts, cname)
            severity = Severity.WARNING
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
                host_total, steps_to_host = max(host.series.values), steps_left
                if steps_left > MEMORY_HORIZON * len(vals):
                    severity = Severity.INFO
                    title += ": watch it, not yet material"
                elif steps_left <= len(vals):
                    severity = Severity.CRITICAL
            grown = vals[-1] - vals[0]
            if (
                kind.kind is SeriesKind.BYTES
                and total is None
                and severity == Severity.WARNING
                and vals[0] > 0
                and grown < MEMORY_MATERIAL_SHARE * vals[0]
            ):
                # A process's memory that grew a few % over the run (warm-up, caches filling):
                # shown, not yet a leak; a GPU's memory has its own test (steps to its total).
                severity = Severity.INFO
                title += (
                    f"; so far {s.fmt(grown)}, {grown / vals[0]:.0%} of its level: "
                    "watch it, not yet material"
                )
            rss_alone: bool | None = None
            urgent = steps_to_host is not None and steps_to_host <= RSS_URGENT * len(vals)
            if cname == proc_counter("rss_bytes") and severity == Severity.WARNING and not urgent:
                explained = rss_explained_by(facts) if explained is None else explained
                if not explained:
                    # RSS alone: the interpreter's and the allocator's warm-up, its caches,
                    # mapped files all raise it; with nothing retained beside it, no leak is seen
                    severity, rss_alone = Severity.INFO, True
                    title = f"RSS grows with nothing wsprof tracks growing beside it: {title}"
            if total is not None and slope > 0:
                steps_left = max((total - vals[-1]) / slope, 0.0)
                steps_to_oom = steps_left
                oom_step = res.series.steps[-1] + steps_left
                title += (
                    f"; at this rate it reaches the GPU's {fmt_bytes(total)} in "
                    f"{steps_left:.0f} steps (step {oom_step:.0f})"
                )
                if steps_left <= len(vals):
                    severity = Severity.CRITICAL
                elif steps_left > MEMORY_HORIZON * len(vals):
                    severity = Severity.INFO
                    title += ": watch it, not yet material"
            out.append(
                Finding(
                    self.kind,
                    severity,
                    title,
                    CounterGrowthEvidence(
                        counter=cname,
                        slope_per_step=slope,
                        first=vals[0],
                        last=vals[-1],
                        kind=kind.kind.value,
                        host_total_bytes=host_total,
                        steps_to_host=steps_to_host,
                        gpu_total_bytes=total if steps_to_oom is not None else None,
                        steps_to_oom=steps_to_oom,
                        oom_step=oom_step,
                        rss_alone=rss_alone,
                    ),
                    cname,
                    RSS_ALONE_HINT
                    if rss_alone
                    else "something is kept each step: find who allocates it "
                    "(wsprof.memory_snapshot(), torch.cuda.memory_snapshot(), gc referrers) "
                    "and release it",
                )
            )
        return out
