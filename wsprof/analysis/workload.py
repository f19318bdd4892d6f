"""A step time that grows with the work of the step is workload, not a leak.

An RL run's responses get longer as the policy learns (slime ``rollout/response_lengths``,
verl ``response_length/mean``, ``perf/total_num_tokens``; in a trace, the collectives a TP
engine issues per step, :data:`ENGINE_CALLS`, one set per token): at a flat throughput the
rollout and the step take longer in proportion. That growth is real but it is no accumulating
problem. A log that carries a workload series beside the step time says which it is: the time
follows the
workload (Spearman's rank correlation, :func:`scipy.stats.spearmanr`), and what the work does
not explain (the time less a Theil-Sen time per unit of work times the work: a fixed part and
noise) has no trend (its Theil-Sen slope's confidence interval holds 0, or it moves less than
:data:`FLAT_RATE_CHANGE` of the mean time over the run; :func:`scipy.stats.theilslopes`).

Pure: series in, an explanation (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from wsprof.analysis.kinds import WORKLOAD_RE
from wsprof.analysis.model import SeriesResult

#: Names of per-step workload series besides the sizes :mod:`wsprof.analysis.kinds` knows
#: (:data:`~wsprof.analysis.kinds.WORKLOAD_RE`: ``num_tokens``, ``batch_size``, ...): response
#: and sequence lengths (lower case, a trailing ``/mean`` allowed). Rates are not workloads.
LENGTH_NAME = re.compile(
    r"(?:.*/)?(?:response_lengths?|response_len|total_lengths|global_seqlen|tokens)(?:/mean)?"
)
#: The collectives an inference engine issued per step (:func:`wsprof.analysis.run.
#: engine_work_series`): a TP engine's decode issues its all-reduces per token generated.
ENGINE_CALLS = "engine_calls_per_step"
#: Least rank correlation of the time with the workload for the workload to explain it.
MIN_SPEARMAN = 0.6
#: Time per unit of work whose fitted change over the run is below this share is flat.
FLAT_RATE_CHANGE = 0.10
#: Fewest common steps to judge.
MIN_POINTS = 6


@dataclass(frozen=True)
class Workload:
    """Why a time's growth is the work's.

    Attributes:
        name: the workload series.
        growth: its change over the run, first to last fitted value (0.2 = +20%).
        rho: Spearman's correlation of the time with it.
        rate_change: the fitted change over the run of the time the work does not explain,
            as a share of the mean time.
    """

    name: str
    growth: float
    rho: float
    rate_change: float

    def text(self) -> str:
        return (
            f"it grows with {self.name} ({self.growth:+.0%} over the run, Spearman "
            f"{self.rho:.2f}) while the time it does not explain stays flat "
            f"({self.rate_change:+.0%}): workload, not a leak"
        )


def _fitted_change(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Theil-Sen fit of ``y`` on ``x``: (relative change first to last, slope CI low, high)."""
    ts = stats.theilslopes(y, x, alpha=0.95)
    first = ts.intercept + ts.slope * x[0]
    last = ts.intercept + ts.slope * x[-1]
    change = (last - first) / first if first > 0 else float("inf")
    return float(change), float(ts.low_slope), float(ts.high_slope)


def is_workload(name: str) -> bool:
    """Whether the series ``name`` is a per-step workload (see :data:`LENGTH_NAME`)."""
    low = name.lower()
    last = low.rsplit("/", 1)[-1]
    return name == ENGINE_CALLS or bool(LENGTH_NAME.fullmatch(low) or WORKLOAD_RE.fullmatch(last))


def explained_by_workload(
    time: SeriesResult, series: Mapping[str, SeriesResult]
) -> Workload | None:
    """The workload series that explains ``time``'s growth (see the module docstring), or
    None."""
    t_by_step = dict(zip(time.series.steps, time.series.values))
    best: Workload | None = None
    for name, res in series.items():
        if res is time or not is_workload(name):
            continue
        common = [
            (s, t_by_step[s], w)
            for s, w in zip(res.series.steps, res.series.values)
            if s in t_by_step and np.isfinite(w) and w > 0 and np.isfinite(t_by_step[s])
        ]
        if len(common) < MIN_POINTS:
            continue
        x = np.array([c[0] for c in common], dtype=np.float64)
        t = np.array([c[1] for c in common], dtype=np.float64)
        w = np.array([c[2] for c in common], dtype=np.float64)
        rho = float(stats.spearmanr(t, w).statistic)
        if not np.isfinite(rho) or rho < MIN_SPEARMAN:
            continue
        growth, _, _ = _fitted_change(x, w)
        # The time as a fixed part plus a time per unit of work (Theil-Sen of the time on the
        # work): what the work does not explain must have no trend of its own.
        fit = stats.theilslopes(t, w)
        rest = t - fit.slope * w
        ts = stats.theilslopes(rest, x, alpha=0.95)
        rate_change = float(ts.slope * (x[-1] - x[0]) / float(np.mean(t)))
        if not (ts.low_slope <= 0.0 <= ts.high_slope or abs(rate_change) < FLAT_RATE_CHANGE):
            continue
        found = Workload(name, growth, rho, rate_change)
        if best is None or found.rho > best.rho:
            best = found
    return best
