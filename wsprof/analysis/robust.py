"""Robust scores of a handful of values (the ranks of a world): not moved by the outliers they
look for, unlike a mean and a standard deviation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

#: 0.6745, the standard normal's 0.75 quantile: makes the MAD comparable to a standard deviation.
MAD_Z_SCALE = 0.6745
#: Where MAD is 0 (more than half the ranks share one median), the mean absolute deviation
#: times sqrt(pi/2) = 1.253314 stands in for the scale (the usual fallback, as in IBM SPSS).
MEAN_AD_SCALE = 1.253314


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


def finite(values: Sequence[float | None]) -> list[float]:
    """The values that are numbers and finite, in order."""
    return [float(v) for v in values if v is not None and np.isfinite(v)]


def above_the_others(per_rank: Sequence[Sequence[float | None]], i: int, alpha: float) -> bool:
    """Whether rank ``i``'s values (its per-step times) are above every other rank's, pooled,
    by a one-sided Mann-Whitney U test at level ``alpha`` (H. B. Mann and D. R. Whitney, Ann.
    Math. Statist. 18, 1947); False when either side has no finite value."""
    mine = finite(per_rank[i])
    theirs = [v for j, vals in enumerate(per_rank) if j != i for v in finite(vals)]
    if not mine or not theirs:
        return False
    return bool(stats.mannwhitneyu(mine, theirs, alternative="greater").pvalue < alpha)
