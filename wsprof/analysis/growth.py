"""Growth curves of per-step series: shape, accumulation verdict, confidence and projection.

A per-step series (weight-sync seconds, reserved bytes, ...) is judged by the shape of its curve,
not by its values. :func:`classify` is a pure function of the values (numpy/scipy only); the value
at position ``i`` is taken to be step ``i`` (one value per step, equally spaced), so every step in
the verdict (``change_point``, ``projection.step``, ``budget_step``) is a position in the input.

Method:

1. **Clean.** Non-finite values are dropped; the others keep their positions, so ``fitted`` and
   the projection stay on the input's positions (``evidence['n_dropped_nonfinite']``).
2. **Noise.** Robust sigma from first differences,
   ``MAD(d - median(d)) / (0.6745 * sqrt(2))``: the MAD consistency constant 0.6745 =
   Phi^-1(3/4) for Gaussian noise, and sqrt(2) because a difference of two independent noisy
   points has twice the variance. Differences remove the trend and the median removes a constant
   slope; a level shift or reset is one outlying difference and does not inflate it. Floored at
   :data:`REL_FLOOR` of the series' scale so exact-constant series work.
3. **Trend test.** Mann-Kendall (Kendall's tau of value against position, one-sided, via
   :func:`scipy.stats.kendalltau`; Mann 1945, Kendall 1975) and the Theil-Sen slope
   (:func:`scipy.stats.theilslopes`; Theil 1950, Sen 1968). With a config, the stratified
   ("seasonal") Mann-Kendall test of Hirsch, Slack & Smith (1982) tests growth within segments.
4. **Models.** Least-squares fits of: constant, linear, quadratic, exponential
   (:func:`scipy.optimize.curve_fit` seeded from the log-linear fit; positive data only), one step
   change (two means), warm-up (the first 1-3 points free, then constant), plateau (a ramp that
   stops: ``c + s * min(0, x - knot)``), sawtooth (>= 2 large resets, common slope within periods,
   flat peaks) and, with a config, one mean per config segment with and without a common slope.
5. **Choice.** By BIC (Schwarz 1978), ``n ln(RSS/n) + k ln n``. BIC rather than AICc because the
   aim is to *name* the generating shape, and BIC is consistent (picks the true model with
   probability -> 1 when it is a candidate) while AIC/AICc are tuned for prediction and keep a
   fixed chance of choosing an over-fitted model; AICc is also undefined for ``n <= k + 1``, which
   is common for the 5-10 point series seen here (both are reported in ``evidence``). Within the
   growth models the straight line is kept unless a curved model beats it by
   :data:`CURVE_BIC_MARGIN` ("positive evidence", Kass & Raftery 1995).
6. **Verdict.** ``accumulating`` needs all of: a growth model beats every non-growth model by BIC;
   Kendall's one-sided p below :data:`ALPHA`; the fitted rise over the series at least
   :data:`MIN_REL_GROWTH` of the starting level and :data:`MIN_GROWTH_SIGMAS` noise sigmas; and
   growth still present at the end (the model's end slope and the last part's Theil-Sen upper
   bound at least :data:`PERSIST_FRACTION` of the overall slope), so plateaus are rejected.
   Otherwise the shape is the best non-growth model (a decreasing series keeps its growth shape
   with ``accumulating=False``).
7. **Very short series.** 1-2 points: flat, not accumulating, confidence
   :data:`LOW_CONFIDENCE`. 3-4 points: accumulating when strictly increasing with every relative
   increment at least :data:`SHORT_MIN_STEP_GROWTH` (see there); otherwise a level-shift rule.

Thresholds were set from the statistics cited at each constant and checked on the labelled
corpus of ``scripts/growth_corpus.py``, which is generated independently of this module.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize, stats

from wsprof.analysis.model import GROWING_SHAPES, GrowthVerdict, Projection

FloatArray = npt.NDArray[np.float64]
Predict = Callable[[FloatArray], FloatArray]

# --- noise -------------------------------------------------------------------------------------
#: Phi^-1(3/4): MAD / 0.6745 estimates the standard deviation of Gaussian noise.
MAD_TO_SIGMA = 0.6745
#: Relative floor of sigma and of residuals (fraction of the series' scale, i.e. median |value|):
#: far below any real measurement precision, far above float64 rounding, so exact-constant and
#: exact-linear series get finite criteria.
REL_FLOOR = 1e-6

# --- trend and verdict -------------------------------------------------------------------------
#: One-sided significance level of the Mann-Kendall trend test. 0.05 is the conventional level;
#: the BIC and effect-size conditions below keep the false-alarm rate well under it (a flat
#: series must pass all of them by chance at once).
ALPHA = 0.05
#: Least fitted rise over the whole series, as a fraction of the starting level, to call it
#: accumulating: smaller drifts are not worth a finding even when significant.
MIN_REL_GROWTH = 0.05
#: Least fitted rise over the whole series in noise sigmas. A rise of ~3 sigmas is the limit
#: below which growth cannot be told from noise; 2 leaves room for the estimate's own error.
MIN_GROWTH_SIGMAS = 2.0
#: Growth must still be present at the end: the model's slope at the last point, and the upper
#: bound of the Theil-Sen slope over the last part, at least this fraction of the overall slope.
PERSIST_FRACTION = 0.3
#: Fraction of the points (the last ones) used for the persistence check.
LAST_PART_FRACTION = 0.5
#: Two-sided confidence of the Theil-Sen interval used for the persistence check.
PERSIST_CI = 0.90
#: A curved model (quadratic, exponential) replaces the straight line only when its BIC is lower
#: by at least this much: "positive evidence" on the Kass & Raftery (1995) scale.
CURVE_BIC_MARGIN = 2.0
#: BIC values closer than this are ties; ties go to the simpler / earlier candidate.
BIC_TIE = 1e-9

# --- candidate models --------------------------------------------------------------------------
#: Most leading points a warm-up may span (``warmup_then_flat``).
WARMUP_MAX_POINTS = 3
#: Every warm-up point lies at least this many residual SDs of the flat part away from the flat
#: level (the usual 3-sigma outlier rule); otherwise free points would just absorb noise, which
#: BIC's ln(n) penalty does not prevent at n < 10.
WARMUP_MIN_SIGMAS = 3.0
#: A step change's shift is at least this many within-level SDs (the 3-sigma rule, as for a
#: warm-up); smaller shifts found by searching every split are mostly noise.
STEP_MIN_SIGMAS = 3.0
#: Fewest trailing points a plateau must have (and at least PLATEAU_MIN_FLAT_FRACTION of all).
PLATEAU_MIN_FLAT_POINTS = 3
#: Fewest trailing points of a plateau as a fraction of the series.
PLATEAU_MIN_FLAT_FRACTION = 0.25
#: A sawtooth needs at least this many resets (drops).
SAW_MIN_RESETS = 2
#: A reset is a drop of at least this many noise sigmas ...
SAW_RESET_SIGMAS = 5.0
#: ... and at least this fraction of the series' 10-90 percentile range.
SAW_RESET_FRACTION = 0.5
#: Each period between two resets has at least this many points.
SAW_MIN_PERIOD = 3
#: A periodic sawtooth rises by at least this many residual SDs per period (3-sigma rule).
SAW_MIN_AMP_SIGMAS = 3.0
#: Peaks (and troughs) are flat when they drift by less than this fraction of the median drop
#: over the whole series (Theil-Sen slope of the peaks).
SAW_PEAK_DRIFT_MAX = 0.5

# --- very short series -------------------------------------------------------------------------
#: Longest series handled by the short-series rules.
SHORT_MAX_POINTS = 4
#: 3-4 points are accumulating when strictly increasing with every relative increment at least
#: this. Under 10% multiplicative noise a relative increment of a flat series has SD ~14%
#: (sqrt(2) * 10%), so 25% is ~1.8 SD at each of 2-3 increments: a flat series passes with
#: probability < 0.5%; the motivating series (+154%, +166%, +65%) passes from its first 3 points.
SHORT_MIN_STEP_GROWTH = 0.25
#: Short growth is curved (superlinear/exponential) when the last increment is at least this
#: multiple of the first.
SHORT_ACCEL_RATIO = 1.5
#: ... and exponential (not superlinear) when the largest per-step log-ratio is at most this
#: multiple of the smallest.
SHORT_EXP_RATIO_SPREAD = 1.5
#: A 3-4 point series has a level shift when two levels differ by at least this fraction ...
SHORT_MIN_SHIFT = 0.15
#: ... and every point lies within shift / SHORT_SHIFT_TO_SPREAD of its level.
SHORT_SHIFT_TO_SPREAD = 3.0

# --- confidence --------------------------------------------------------------------------------
#: Confidence for 1-2 points (nothing can be said).
LOW_CONFIDENCE = 0.1

#: Models that describe growth; every other model is a non-growth shape.
TREND_MODELS = frozenset({"linear", "quadratic", "exponential", "config_linear"})
_NON_TREND_SHAPE = {
    "constant": "flat",
    "warmup": "warmup_then_flat",
    "plateau": "warmup_then_flat",
    "step": "step_change",
    "config_step": "step_change",
    "sawtooth": "sawtooth",
    "sawtooth_periodic": "sawtooth",
}


@dataclass(frozen=True)
class _Fit:
    """One fitted candidate model.

    Attributes:
        name: model name (``constant``, ``linear``, ...).
        k: free parameters counted by the information criteria (change points included).
        rss: residual sum of squares on the finite points, series unit squared.
        predict: the model at any positions.
        change_point: position of the first point after a level change, if the model has one.
        shape: for growth models, the shape it names (``linear``/``superlinear``/``exponential``).
        rate: exponential rate per step (exponential model only), 1/step.
    """

    name: str
    k: int
    rss: float
    predict: Predict
    change_point: int | None = None
    shape: str = ""
    rate: float | None = None


@dataclass(frozen=True)
class _Trend:
    """Rank-based trend statistics of the finite points."""

    tau: float
    p_up: float
    p_down: float
    slope: float
    slope_lo: float
    slope_hi: float


def classify(
    values: Sequence[float],
    *,
    config: Sequence[str] | None = None,
    budget: float | None = None,
    horizon_steps: int | None = None,
) -> GrowthVerdict:
    """Classify the growth curve of a per-step series.

    Args:
        values: one value per step (any unit); non-finite values are dropped.
        config: optional configuration name of each step (same length as ``values``); a change
            splits the series into segments before fitting.
        budget: optional limit in the series' unit; ``budget_step`` is where the projection of a
            growing shape first reaches it.
        horizon_steps: steps ahead of the last step for ``projection``; default ``max(5, n)``.

    Returns:
        The verdict; steps are positions in ``values``.

    Raises:
        ValueError: no finite value, or ``config`` of another length than ``values``.
    """
    y_all = np.asarray(values, dtype=np.float64).reshape(-1)
    n_in = int(y_all.size)
    if config is not None and len(config) != n_in:
        raise ValueError(f"config has {len(config)} entries but values has {n_in}; give one per step")
    finite = np.isfinite(y_all)
    if not finite.any():
        raise ValueError(
            f"no finite value among {n_in} values; give at least one finite number per series"
        )
    x = np.flatnonzero(finite).astype(np.float64)
    y = y_all[finite]
    labels = None if config is None else [str(c) for c, ok in zip(config, finite) if ok]
    horizon = max(5, n_in) if horizon_steps is None else int(horizon_steps)
    evidence: dict[str, float] = {
        "n": float(y.size),
        "n_dropped_nonfinite": float(n_in - y.size),
    }
    if y.size <= 2:
        return _classify_tiny(x, y, n_in, evidence)
    if y.size <= SHORT_MAX_POINTS:
        return _classify_short(x, y, n_in, horizon, budget, evidence)
    return _classify_full(x, y, labels, n_in, horizon, budget, evidence)


# --- basic statistics --------------------------------------------------------------------------


def _scale(y: FloatArray) -> float:
    """Typical magnitude of the series (median |y|, else max |y|, else 1), series unit."""
    a = np.abs(y)
    for s in (float(np.median(a)), float(a.max())):
        if s > 0:
            return s
    return 1.0


def robust_sigma(y: FloatArray) -> float:
    """Robust noise sigma from first differences (see module docstring, step 2).

    Args:
        y: finite values, series unit.

    Returns:
        Noise standard deviation in the series' unit, at least ``REL_FLOOR * scale``.
    """
    floor = REL_FLOOR * _scale(y)
    if y.size < 3:
        return floor
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(mad / (MAD_TO_SIGMA * math.sqrt(2.0)), floor)


def _trend(x: FloatArray, y: FloatArray) -> _Trend:
    """Mann-Kendall (both directions) and Theil-Sen slope with its 90% interval."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        up = stats.kendalltau(x, y, alternative="greater")
        down = stats.kendalltau(x, y, alternative="less")
        ts = stats.theilslopes(y, x, alpha=PERSIST_CI)
    tau = float(up.statistic)
    if not math.isfinite(tau):  # constant series: no trend at all
        return _Trend(0.0, 1.0, 1.0, 0.0, 0.0, 0.0)
    return _Trend(
        tau=tau,
        p_up=float(up.pvalue),
        p_down=float(down.pvalue),
        slope=float(ts.slope),
        slope_lo=float(ts.low_slope),
        slope_hi=float(ts.high_slope),
    )


def _stratified_mk_p(y: FloatArray, segments: list[slice]) -> float:
    """One-sided (increasing) p of the stratified Mann-Kendall test (Hirsch et al. 1982).

    S and its no-ties variance ``m(m-1)(2m+5)/18`` are summed over segments; normal
    approximation with continuity correction.
    """
    s_total = 0.0
    var_total = 0.0
    for seg in segments:
        v = y[seg]
        m = v.size
        if m < 2:
            continue
        s_total += float(np.sign(v[None, :] - v[:, None])[np.triu_indices(m, 1)].sum())
        var_total += m * (m - 1) * (2 * m + 5) / 18.0
    if var_total <= 0:
        return 1.0
    z = (s_total - math.copysign(1.0, s_total)) / math.sqrt(var_total) if s_total else 0.0
    return float(stats.norm.sf(z))


def _bic(rss: float, n: int, k: int, rss_floor: float) -> float:
    """Bayesian information criterion for Gaussian residuals (Schwarz 1978)."""
    return n * math.log(max(rss, rss_floor) / n) + k * math.log(n)


def _aicc(rss: float, n: int, k: int, rss_floor: float) -> float | None:
    """AICc (Hurvich & Tsai 1989); None where undefined (n <= k + 1)."""
    if n <= k + 1:
        return None
    return n * math.log(max(rss, rss_floor) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def _rss(y: FloatArray, f: FloatArray) -> float:
    return float(np.sum((y - f) ** 2))


# --- candidate models --------------------------------------------------------------------------


def _fit_constant(x: FloatArray, y: FloatArray) -> _Fit:
    c = float(y.mean())
    return _Fit("constant", 1, _rss(y, np.full_like(y, c)), lambda q: np.full_like(q, c))


def _fit_poly(x: FloatArray, y: FloatArray, degree: int) -> _Fit:
    """Least-squares polynomial on centred, scaled positions (well conditioned)."""
    x0 = float(x.mean())
    xs = float(max(x.max() - x.min(), 1.0))
    coef = np.polyfit((x - x0) / xs, y, degree)

    def predict(q: FloatArray) -> FloatArray:
        return np.asarray(np.polyval(coef, (q - x0) / xs), dtype=np.float64)

    if degree == 1:
        return _Fit("linear", 2, _rss(y, predict(x)), predict, shape="linear")
    shape = "superlinear" if coef[0] > 0 else "linear"  # concave growth is called linear
    return _Fit("quadratic", 3, _rss(y, predict(x)), predict, shape=shape)


def _fit_exponential(x: FloatArray, y: FloatArray) -> _Fit | None:
    """``a * exp(b * (x - x0))`` by least squares, seeded from the log-linear fit; y > 0 only."""
    if np.any(y <= 0):
        return None
    x0 = float(x.mean())
    b0, loga0 = np.polyfit(x - x0, np.log(y), 1)
    p = np.array([math.exp(loga0), b0])

    def model(q: FloatArray, a: float, b: float) -> FloatArray:
        return np.asarray(a * np.exp(np.clip(b * (q - x0), -700.0, 700.0)), dtype=np.float64)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fitted_p, _ = optimize.curve_fit(model, x, y, p0=p, maxfev=2000)
            if np.all(np.isfinite(fitted_p)) and _rss(y, model(x, *fitted_p)) < _rss(
                y, model(x, *p)
            ):
                p = fitted_p
        except (RuntimeError, ValueError, optimize.OptimizeWarning):
            pass  # keep the log-linear seed
    a, b = float(p[0]), float(p[1])

    def predict(q: FloatArray) -> FloatArray:
        return model(q, a, b)

    shape = "exponential" if b > 0 else "linear"
    return _Fit("exponential", 2, _rss(y, predict(x)), predict, shape=shape, rate=b)


def _step_predict(boundaries: FloatArray, levels: FloatArray) -> Predict:
    """Piecewise-constant model: ``levels[j]`` from ``boundaries[j-1]`` (position) on."""

    def predict(q: FloatArray) -> FloatArray:
        return np.asarray(levels[np.searchsorted(boundaries, q, side="right")], dtype=np.float64)

    return predict


def _fit_step(x: FloatArray, y: FloatArray, *, visible: bool = True) -> _Fit | None:
    """Best single change point between two means (k = 2 means + 1 change point).

    With ``visible``, the shift must be at least :data:`STEP_MIN_SIGMAS` within-level SDs,
    else None: searching every split makes BIC's single ln(n) for the change point too weak.
    """
    n = y.size
    c1 = np.cumsum(y)
    c2 = np.cumsum(y**2)
    tau = np.arange(1, n)  # first index of the second level
    s1, q1 = c1[tau - 1], c2[tau - 1]
    s2, q2 = c1[-1] - s1, c2[-1] - q1
    rss = (q1 - s1**2 / tau) + (q2 - s2**2 / (n - tau))
    j = int(np.argmin(rss))
    t = int(tau[j])
    levels = np.array([y[:t].mean(), y[t:].mean()])
    predict = _step_predict(np.array([x[t] - 0.5]), levels)
    fit = _Fit("step", 3, _rss(y, predict(x)), predict, change_point=int(x[t]))
    if visible and n > 2:
        sd = max(math.sqrt(fit.rss / (n - 2)), REL_FLOOR * _scale(y))
        if abs(levels[1] - levels[0]) < STEP_MIN_SIGMAS * sd:
            return None
    return fit


def _fit_warmup(x: FloatArray, y: FloatArray) -> _Fit | None:
    """First ``w`` points free (1 <= w <= 3), then constant; k = w + 1 mean + 1 change point."""
    n = y.size
    best: _Fit | None = None
    best_bic = math.inf
    floor = n * (REL_FLOOR * _scale(y)) ** 2
    for w in range(1, min(WARMUP_MAX_POINTS, n - 3) + 1):
        c = float(y[w:].mean())
        rss = _rss(y[w:], np.full(n - w, c))
        rest_sd = max(math.sqrt(rss / (n - w - 1)), REL_FLOOR * _scale(y))
        if np.any(np.abs(y[:w] - c) < WARMUP_MIN_SIGMAS * rest_sd):
            continue
        bic = _bic(rss, n, w + 2, floor)
        if bic < best_bic - BIC_TIE:
            xw, yw, cut = x[:w].copy(), y[:w].copy(), float(x[w])

            def predict(q: FloatArray, xw: FloatArray = xw, yw: FloatArray = yw,
                        cut: float = cut, c: float = c) -> FloatArray:
                return np.where(q < cut - 0.5, np.interp(q, xw, yw), c)

            best = _Fit("warmup", w + 2, rss, predict, change_point=int(x[w]))
            best_bic = bic
    return best


def _fit_plateau(x: FloatArray, y: FloatArray) -> _Fit | None:
    """A ramp that stops: ``c + s * min(0, x - knot)`` with the knot at a data position.

    The flat part keeps at least ``max(3, 25%)`` of the points. k = c, s, knot.
    """
    n = y.size
    min_flat = max(PLATEAU_MIN_FLAT_POINTS, math.ceil(PLATEAU_MIN_FLAT_FRACTION * n))
    last = n - min_flat  # index of the knot, so that points knot.. are flat
    if last < 1:
        return None
    knots = x[1 : last + 1]
    z = np.minimum(0.0, x[None, :] - knots[:, None])
    zc = z - z.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    szz = np.maximum((zc**2).sum(axis=1), 1e-300)
    s = (zc @ yc) / szz
    rss = ((yc[None, :] - s[:, None] * zc) ** 2).sum(axis=1)
    j = int(np.argmin(rss))
    knot, slope = float(knots[j]), float(s[j])
    c = float(y.mean() - slope * z[j].mean())

    def predict(q: FloatArray) -> FloatArray:
        return np.asarray(c + slope * np.minimum(0.0, q - knot), dtype=np.float64)

    return _Fit("plateau", 3, _rss(y, predict(x)), predict, change_point=int(knot))


def _fit_sawtooth(x: FloatArray, y: FloatArray, sigma: float) -> _Fit | None:
    """Resets (large drops) with common within-period growth and flat peaks.

    Structural checks first: at least :data:`SAW_MIN_RESETS` drops of :data:`SAW_RESET_SIGMAS`
    sigmas and :data:`SAW_RESET_FRACTION` of the 10-90% range; inner periods of
    :data:`SAW_MIN_PERIOD`+ points; growth within periods (stratified Mann-Kendall p <
    :data:`ALPHA`); peaks and troughs flat. Then ``base + slope * phase`` by least squares, where
    phase counts positions since the last reset (the first, partial period is aligned so that
    it ends at the median period). k = 2 + number of resets.
    """
    n = y.size
    spread = float(np.percentile(y, 90) - np.percentile(y, 10))
    thr = max(SAW_RESET_SIGMAS * sigma, SAW_RESET_FRACTION * spread)
    resets = np.flatnonzero(np.diff(y) < -thr)
    if resets.size < SAW_MIN_RESETS or spread <= 0:
        return None
    starts = np.concatenate([[0], resets + 1])
    ends = np.concatenate([resets + 1, [n]])
    if np.any((ends - starts)[1:-1] < SAW_MIN_PERIOD):
        return None
    segments = [slice(int(a), int(b)) for a, b in zip(starts, ends)]
    if _stratified_mk_p(y, segments) >= ALPHA:
        return None
    drop = float(np.median(y[resets] - y[resets + 1]))
    span = float(x[-1] - x[0])
    for ext in (y[resets], y[resets + 1]):
        if ext.size >= 2:
            drift = float(stats.theilslopes(ext, x[resets])[0]) * span
            if abs(drift) > SAW_PEAK_DRIFT_MAX * drop:
                return None
    period = float(np.median(np.diff(x[starts]))) if starts.size > 2 else float(x[resets[1]] - x[resets[0]])
    bounds = x[resets + 1] - 0.5
    seg_start = np.concatenate([[x[resets[0]] - (period - 1.0)], x[resets + 1]])

    def phase(q: FloatArray) -> FloatArray:
        return np.asarray(q - seg_start[np.searchsorted(bounds, q, side="right")], dtype=np.float64)

    design = np.column_stack([np.ones(n), phase(x)])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    base, slope = float(coef[0]), float(coef[1])

    def predict(q: FloatArray) -> FloatArray:
        return np.asarray(base + slope * phase(q), dtype=np.float64)

    return _Fit("sawtooth", 2 + int(resets.size), _rss(y, predict(x)), predict)


def _fit_periodic_sawtooth(x: FloatArray, y: FloatArray) -> _Fit | None:
    """A strictly periodic sawtooth ``base + slope * ((x + phase) mod period)``.

    Period (:data:`SAW_MIN_PERIOD` .. a third of the series, so >= 2 resets) and phase by grid
    search, base and slope by least squares for each; k = 4. Catches sawtooths whose single
    resets are too small to stand out of the noise but which repeat. Kept only when the rise per
    period is at least :data:`SAW_MIN_AMP_SIGMAS` residual SDs and the residuals do not drift.
    """
    n = y.size
    xi = np.rint(x - x[0]).astype(np.int64)
    p_max = int(xi[-1] + 1) // 3
    if p_max < SAW_MIN_PERIOD or n < 3 * SAW_MIN_PERIOD:
        return None
    yc = y - y.mean()
    syy = float(yc @ yc)
    best: tuple[float, int, int, float] | None = None
    for period in range(SAW_MIN_PERIOD, p_max + 1):
        ph = ((xi[None, :] + np.arange(period)[:, None]) % period).astype(np.float64)
        pc = ph - ph.mean(axis=1, keepdims=True)
        spp = np.maximum((pc**2).sum(axis=1), 1e-300)
        m = (pc @ yc) / spp
        rss = np.where(m > 0, syy - m**2 * spp, np.inf)
        j = int(np.argmin(rss))
        if best is None or rss[j] < best[0]:
            best = (float(rss[j]), period, j, float(m[j]))
    if best is None or not math.isfinite(best[0]):
        return None
    _, period, shift, slope = best
    x0 = float(x[0])
    base = float(y.mean() - slope * np.mean((xi + shift) % period))

    def predict(q: FloatArray) -> FloatArray:
        ph = np.mod(np.rint(q - x0) + shift, period)
        return np.asarray(base + slope * ph, dtype=np.float64)

    resid = y - predict(x)
    rss = float(resid @ resid)
    sd = max(math.sqrt(rss / (n - 4)), REL_FLOOR * _scale(y))
    amp = slope * (period - 1)
    if amp < SAW_MIN_AMP_SIGMAS * sd:
        return None
    drift = float(stats.theilslopes(resid, x)[0]) * float(x[-1] - x[0])
    if abs(drift) > SAW_PEAK_DRIFT_MAX * amp:
        return None
    return _Fit("sawtooth_periodic", 4, rss, predict)


def _config_segments(labels: Sequence[str]) -> list[slice]:
    """Runs of equal consecutive config labels."""
    cuts = [i for i in range(1, len(labels)) if labels[i] != labels[i - 1]]
    edges = [0, *cuts, len(labels)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def _fit_config(x: FloatArray, y: FloatArray, segments: list[slice]) -> list[_Fit]:
    """One mean per config segment (change points known: k = segments), and the same with one
    common slope (k = segments + 1)."""
    m = len(segments)
    onehot = np.zeros((y.size, m))
    for j, seg in enumerate(segments):
        onehot[seg, j] = 1.0
    bounds = np.array([x[seg.start] - 0.5 for seg in segments[1:]])
    means = np.array([y[seg].mean() for seg in segments])
    shifts = np.abs(np.diff(means)) / np.maximum(np.abs(means[:-1]), 1e-300)
    cp = int(x[segments[1 + int(np.argmax(shifts))].start])
    step_predict = _step_predict(bounds, means)
    step = _Fit("config_step", m, _rss(y, step_predict(x)), step_predict, change_point=cp)
    coef = np.linalg.lstsq(np.column_stack([onehot, x]), y, rcond=None)[0]
    levels, slope = coef[:m], float(coef[m])

    def lin_predict(q: FloatArray) -> FloatArray:
        return np.asarray(levels[np.searchsorted(bounds, q, side="right")] + slope * q,
                          dtype=np.float64)

    lin = _Fit("config_linear", m + 1, _rss(y, lin_predict(x)), lin_predict, change_point=cp,
               shape="linear")
    return [step, lin]


def _candidates(
    x: FloatArray, y: FloatArray, sigma: float, segments: list[slice] | None
) -> list[_Fit]:
    """Every applicable model, simplest first (ties go to the earlier one)."""
    fits: list[_Fit | None] = [
        _fit_constant(x, y),
        _fit_warmup(x, y),
        _fit_step(x, y),
        _fit_plateau(x, y),
        _fit_sawtooth(x, y, sigma),
        _fit_periodic_sawtooth(x, y),
        _fit_poly(x, y, 1),
        _fit_exponential(x, y),
        _fit_poly(x, y, 2),
    ]
    if segments is not None and len(segments) >= 2:
        fits.extend(_fit_config(x, y, segments))
    return [f for f in fits if f is not None]


# --- decision ----------------------------------------------------------------------------------


def _best(fits: list[_Fit], bic: dict[str, float]) -> _Fit:
    best = fits[0]
    for f in fits[1:]:
        if bic[f.name] < bic[best.name] - BIC_TIE:
            best = f
    return best


def _best_trend(fits: list[_Fit], bic: dict[str, float]) -> _Fit:
    """The straight line (or config line) unless a curved model beats it by CURVE_BIC_MARGIN."""
    straight = _best([f for f in fits if f.name in ("linear", "config_linear")], bic)
    curved = [f for f in fits if f.name in ("quadratic", "exponential")]
    if curved:
        c = _best(curved, bic)
        if bic[c.name] < bic[straight.name] - CURVE_BIC_MARGIN:
            return c
    return straight


@dataclass(frozen=True)
class _Growth:
    """Effect size and persistence of a growth model."""

    rel_growth: float
    sigmas: float
    end_ratio: float
    last_hi_ratio: float
    last_slope: float
    p: float


def _growth(
    fit: _Fit, x: FloatArray, y: FloatArray, trend: _Trend, sigma: float,
    segments: list[slice] | None,
) -> _Growth:
    """Rise over the series (relative and in sigmas), end slope and last-part slope ratios."""
    f = fit.predict(x)
    n = y.size
    rise = float(f[-1] - f[0])
    level = abs(float(f[0])) if f[0] > 0 else _scale(y)
    resid_sigma = math.sqrt(fit.rss / (n - fit.k)) if n > fit.k else sigma
    sig = max(min(sigma, resid_sigma), REL_FLOOR * _scale(y))
    span = float(x[-1] - x[0])
    mean_slope = rise / span if span > 0 else 0.0
    eps = 1e-3
    end_slope = float((fit.predict(np.array([x[-1]]))[0] - fit.predict(np.array([x[-1] - eps]))[0])
                      / eps)
    m = max(3, math.ceil(LAST_PART_FRACTION * n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        last = stats.theilslopes(y[-m:], x[-m:], alpha=PERSIST_CI)
    ref = max(trend.slope, mean_slope)
    p = trend.p_up
    if fit.name == "config_linear" and segments is not None:
        p = _stratified_mk_p(y, segments)
        ref = max(mean_slope, float(end_slope))
        rise = end_slope * span
    return _Growth(
        rel_growth=rise / level,
        sigmas=rise / sig,
        end_ratio=end_slope / mean_slope if mean_slope > 0 else 0.0,
        last_hi_ratio=float(last.high_slope) / ref if ref > 0 else 0.0,
        last_slope=float(last.slope),
        p=p,
    )


def _is_accumulating(g: _Growth) -> bool:
    return (
        g.p < ALPHA
        and g.rel_growth >= MIN_REL_GROWTH
        and g.sigmas >= MIN_GROWTH_SIGMAS
        and g.end_ratio >= PERSIST_FRACTION
        and g.last_hi_ratio >= PERSIST_FRACTION
    )


def _confidence(n: int, w_growth: float, p: float, accumulating: bool, persist: float) -> float:
    """0..1, heuristic: BIC weight of growth x (1 - trend p), capped by 1 - 1/n for length.

    For a not-accumulating verdict, one minus that, or the strength of the evidence that the
    growth stopped, whichever is larger.
    """
    grow = w_growth * (1.0 - p)
    conf = grow if accumulating else max(1.0 - grow, 1.0 - min(max(persist, 0.0), 1.0))
    return float(min(max(conf, 0.0), 1.0 - 1.0 / n))


# --- projection --------------------------------------------------------------------------------


def _projection(predict: Predict, last: int, horizon: int) -> Projection:
    step = last + horizon
    with np.errstate(all="ignore"):
        v = float(predict(np.array([float(step)]))[0])
    return Projection(step=step, value=v)


def _budget_step(predict: Predict, last: int, horizon: int, budget: float) -> int | None:
    """First step from ``last`` on where the model reaches ``budget`` (searching up to
    ``max(100 * horizon, 10000)`` steps ahead); None if it never does in that range."""
    limit = max(100 * horizon, 10_000)
    q = np.arange(last, last + limit + 1, dtype=np.float64)
    with np.errstate(all="ignore"):
        v = predict(q)
    hit = np.flatnonzero(v >= budget)
    return int(q[hit[0]]) if hit.size else None


# --- the three regimes -------------------------------------------------------------------------


def _growth_factor_last(y: FloatArray) -> float | None:
    if y.size < 2 or y[-1] <= 0 or y[-2] <= 0:
        return None
    return float(y[-1] / y[-2])


def _classify_tiny(x: FloatArray, y: FloatArray, n_in: int, ev: dict[str, float]) -> GrowthVerdict:
    """1-2 points: flat, not accumulating, low confidence."""
    c = float(y.mean())
    slope = float((y[-1] - y[0]) / (x[-1] - x[0])) if y.size == 2 else 0.0
    ev["theil_sen_slope"] = slope
    return GrowthVerdict(
        shape="flat",
        accumulating=False,
        confidence=LOW_CONFIDENCE,
        slope_per_step=slope,
        growth_factor_per_step=_growth_factor_last(y),
        change_point=None,
        fitted=tuple([c] * n_in),
        projection=None,
        evidence=ev,
    )


def _short_shape(y: FloatArray) -> str:
    """Shape of a short strictly increasing series: linear, superlinear or exponential."""
    d = np.diff(y)
    if d[-1] < SHORT_ACCEL_RATIO * d[0]:
        return "linear"
    if np.all(y > 0):
        lr = np.log(y[1:] / y[:-1])
        if lr.min() > 0 and lr.max() <= SHORT_EXP_RATIO_SPREAD * lr.min():
            return "exponential"
    return "superlinear"


def _short_level_shift(x: FloatArray, y: FloatArray) -> tuple[str, _Fit | None]:
    """Two-means rule for 3-4 non-growing points: ('warmup_then_flat'|'step_change'|'flat', fit)."""
    fit = _fit_step(x, y, visible=False)
    assert fit is not None
    t = int(np.searchsorted(x, fit.change_point if fit.change_point is not None else 0))
    m1, m2 = float(y[:t].mean()), float(y[t:].mean())
    low = min(abs(m1), abs(m2))
    if low <= 0:
        return "flat", None
    shift = abs(m2 - m1) / low
    spread = max(float(np.max(np.abs(y[:t] - m1))), float(np.max(np.abs(y[t:] - m2)))) / low
    if shift >= SHORT_MIN_SHIFT and spread * SHORT_SHIFT_TO_SPREAD <= shift:
        return ("warmup_then_flat" if t == 1 else "step_change"), fit
    return "flat", None


def _classify_short(
    x: FloatArray, y: FloatArray, n_in: int, horizon: int, budget: float | None,
    ev: dict[str, float],
) -> GrowthVerdict:
    """3-4 points: explicit rules (see SHORT_MIN_STEP_GROWTH)."""
    n = y.size
    trend = _trend(x, y)
    scale = _scale(y)
    base = np.where(y[:-1] > 0, y[:-1], scale)
    rel = np.diff(y) / base
    ev.update(
        kendall_tau=trend.tau, kendall_p=trend.p_up, theil_sen_slope=trend.slope,
        noise_sigma=robust_sigma(y), min_step_growth=float(rel.min()),
        relative_growth=float((y[-1] - y[0]) / (y[0] if y[0] > 0 else scale)), short_rule=1.0,
    )
    cap = 1.0 - 1.0 / n
    growing = bool(np.all(np.diff(y) > 0) and rel.min() >= SHORT_MIN_STEP_GROWTH)
    if growing:
        shape = _short_shape(y)
        fit = _short_fit(x, y, shape)
        last = n_in - 1
        return GrowthVerdict(
            shape=shape,
            accumulating=True,
            confidence=cap,
            slope_per_step=trend.slope,
            growth_factor_per_step=_growth_factor_last(y),
            change_point=None,
            fitted=tuple(float(v) for v in fit.predict(np.arange(n_in, dtype=np.float64))),
            projection=_projection(fit.predict, last, horizon),
            budget_step=None if budget is None else _budget_step(fit.predict, last, horizon,
                                                                 budget),
            evidence=ev,
        )
    shape, step_fit = _short_level_shift(x, y)
    fit = step_fit if step_fit is not None else _fit_constant(x, y)
    return GrowthVerdict(
        shape=shape,
        accumulating=False,
        confidence=cap * 0.8,
        slope_per_step=trend.slope,
        growth_factor_per_step=_growth_factor_last(y),
        change_point=fit.change_point,
        fitted=tuple(float(v) for v in fit.predict(np.arange(n_in, dtype=np.float64))),
        projection=None,
        evidence=ev,
    )


def _short_fit(x: FloatArray, y: FloatArray, shape: str) -> _Fit:
    if shape == "exponential":
        fit = _fit_exponential(x, y)
        if fit is not None:
            return fit
    return _fit_poly(x, y, 2 if shape == "superlinear" else 1)


def _classify_full(
    x: FloatArray, y: FloatArray, labels: list[str] | None, n_in: int, horizon: int,
    budget: float | None, ev: dict[str, float],
) -> GrowthVerdict:
    """5+ points: candidate models, BIC, trend test, effect size and persistence."""
    n = y.size
    scale = _scale(y)
    sigma = robust_sigma(y)
    trend = _trend(x, y)
    segments = _config_segments(labels) if labels is not None else None
    if segments is not None and len(segments) < 2:
        segments = None
    fits = _candidates(x, y, sigma, segments)
    floor = n * (REL_FLOOR * scale) ** 2
    bic = {f.name: _bic(f.rss, n, f.k, floor) for f in fits}
    for f in fits:
        ev[f"bic_{f.name}"] = bic[f.name]
        aicc = _aicc(f.rss, n, f.k, floor)
        if aicc is not None:
            ev[f"aicc_{f.name}"] = aicc
    best_trend = _best_trend([f for f in fits if f.name in TREND_MODELS], bic)
    best_other = _best([f for f in fits if f.name not in TREND_MODELS], bic)
    delta = bic[best_other.name] - bic[best_trend.name]  # > 0 favours growth
    g = _growth(best_trend, x, y, trend, sigma, segments)
    ev.update(
        kendall_tau=trend.tau, kendall_p=trend.p_up, kendall_p_decreasing=trend.p_down,
        theil_sen_slope=trend.slope, theil_sen_slope_lo=trend.slope_lo,
        theil_sen_slope_hi=trend.slope_hi, noise_sigma=sigma, noise_sigma_rel=sigma / scale,
        delta_bic_growth=delta, relative_growth=g.rel_growth, growth_sigmas=g.sigmas,
        end_slope_ratio=g.end_ratio, last_part_slope=g.last_slope,
        last_part_slope_hi_ratio=g.last_hi_ratio, growth_p=g.p,
        config_segments=float(len(segments) if segments else 1),
    )
    accumulating = False
    chosen = best_other
    if delta > 0:
        if g.rel_growth > 0 and _is_accumulating(g):
            chosen, accumulating = best_trend, True
        elif g.rel_growth < 0 and trend.p_down < ALPHA:
            chosen = best_trend  # a significant decrease keeps its trend shape
    shape = chosen.shape if chosen.name in TREND_MODELS else _NON_TREND_SHAPE[chosen.name]
    w_growth = 1.0 / (1.0 + math.exp(min(-delta / 2.0, 700.0)))
    persist = min(g.end_ratio, g.last_hi_ratio) if delta > 0 and g.rel_growth > 0 else 1.0
    last = n_in - 1
    growing = shape in GROWING_SHAPES
    exp_fit = next((f for f in fits if f.name == "exponential"), None)
    return GrowthVerdict(
        shape=shape,
        accumulating=accumulating,
        confidence=_confidence(n, w_growth, g.p, accumulating, persist),
        slope_per_step=trend.slope,
        growth_factor_per_step=(
            math.exp(exp_fit.rate) if exp_fit is not None and exp_fit.rate is not None else None
        ),
        change_point=None if growing else chosen.change_point,
        fitted=tuple(float(v) for v in chosen.predict(np.arange(n_in, dtype=np.float64))),
        projection=_projection(chosen.predict, last, horizon) if growing else None,
        budget_step=(
            _budget_step(chosen.predict, last, horizon, budget)
            if growing and budget is not None
            else None
        ),
        evidence=ev,
    )
