"""A step time that grows with the work of the step is workload, not a leak.

An RL run's responses get longer as the policy learns (slime ``rollout/response_lengths``,
verl ``response_length/mean``, ``perf/total_num_tokens``; in a trace, the collectives a TP
engine issues per step, :data:`ENGINE_CALLS`, one set per token): at a flat throughput the
rollout and the step take longer in proportion. That growth is real but it is no accumulating
problem. A log that carries a workload series beside the step time says which it is: the time
follows the
workload (Spearman's rank correlation, :func:`scipy.stats.spearmanr`), and the time per unit of
work has no trend (its Theil-Sen slope's confidence interval holds 0, or it moves less than
:data:`FLAT_RATE_CHANGE` over the run; :func:`scipy.stats.theilslopes`).

Pure: series in, an explanation (or None) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from wsprof.analysis.model import SeriesResult

#: Names of per-step workload series (last path part, lower case): response and sequence
#: lengths, tokens and samples per step. Rates (``tok_per_s``) are not workloads.
WORKLOAD_NAME = re.compile(
    r"(?:.*/)?(?:response_lengths?(?:/mean)?|response_len(?:/mean)?|total_lengths|"
    r"(?:total_)?(?:num_)?tokens|(?:total_)?num_(?:tokens|samples|sequences|responses)|"
    r"global_seqlen(?:/mean)?|response_length/mean)"
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
        rate_change: the time per unit of work's fitted change over the run (share).
    """

    name: str
    growth: float
    rho: float
    rate_change: float

    def text(self) -> str:
        return (
            f"it grows with {self.name} ({self.growth:+.0%} over the run, Spearman "
            f"{self.rho:.2f}) while the time per unit of it stays flat "
            f"({self.rate_change:+.0%}): workload, not a leak"
        )


def _fitted_change(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Theil-Sen fit of ``y`` on ``x``: (relative change first to last, slope CI low, high)."""
    ts = stats.theilslopes(y, x, alpha=0.95)
    first = ts.intercept + ts.slope * x[0]
    last = ts.intercept + ts.slope * x[-1]
    change = (last - first) / first if first > 0 else float("inf")
    return float(change), float(ts.low_slope), float(ts.high_slope)


def explained_by_workload(
    time: SeriesResult, series: Mapping[str, SeriesResult]
) -> Workload | None:
    """The workload series that explains ``time``'s growth (see the module docstring), or
    None."""
    t_by_step = dict(zip(time.series.steps, time.series.values))
    best: Workload | None = None
    for name, res in series.items():
        if res is time or not (name == ENGINE_CALLS or WORKLOAD_NAME.fullmatch(name.lower())):
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
        rate_change, lo, hi = _fitted_change(x, t / w)
        if growth <= 0 or not (lo <= 0.0 <= hi or abs(rate_change) < FLAT_RATE_CHANGE):
            continue
        found = Workload(name, growth, rho, rate_change)
        if best is None or found.rho > best.rho:
            best = found
    return best
