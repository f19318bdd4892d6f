"""Labelled synthetic corpus for :func:`wsprof.analysis.growth.classify`: how often is it right?

Generates a seeded corpus of per-step series over every shape, runs the classifier on each, and
prints precision and recall of ``accumulating`` and shape accuracy, by noise band and length band,
plus the row the bar applies to (noise <= 10% and >= 5 points). Exits 1 when that row misses
precision >= 0.98 or recall >= 0.95.

The corpus is defined here from what the shapes look like in practice, independently of the
classifier's thresholds:

* **Noise.** Multiplicative Gaussian, ``y = f * (1 + sigma * e)``, sigma drawn uniformly within a
  noise band (1-5%, 5-10%, 10-25%, each band equally often).
* **Length.** A length band (3-4, 5-10, 11-50, 51-200, equally often), then uniform within it.
  Sawtooth series need at least three periods, so they are drawn from the two longer bands.
* **Level.** Log-uniform 0.5 .. 5000 (the classifier must not care).
* **Growth** (linear, superlinear, exponential): the total relative rise over the series ``G``
  is log-uniform between ``max(10%, 3 sigma)`` and 900% (a 10x rise, like the motivating
  143 s -> 1596 s). The floor is the fairness rule: a rise under ~3 noise standard deviations over
  the whole series cannot be told from noise by any method (a flat series produces such
  excursions by chance), and under 10% it is not a problem worth a finding. Superlinear is
  ``1 + G u^p`` with ``p`` in 1.5..3; exponential is ``(1 + G)^u``.
* **Time is the step number.** Every shape is a function of ``u = (step - step_0) /
  (step_last - step_0)`` (the position / (n-1) when every step is logged), so a series logged at
  irregular intervals is still a straight line, a curve or a ramp in steps, which is what its
  label says; level changes (warm-up, step change, excursion, dip, config switch) are at points.
* **Plateau** (growth that stops; not accumulating): the same rise over the first 20-50% of the
  series, then flat for at least ``max(4, n/3)`` points (so at least 5 points in all). The
  fairness rule: a flat part must be long enough to be *seen* to be flat. Over 3 points no trend
  test can tell flat from rising (the smallest one-sided Mann-Kendall p of 3 points is 1/6; of
  4 points 1/24 < 5%), and a pause shorter than a third of the series is what a noisy rise
  shows by chance; a "plateau" with a flat part of 2-3 points cannot be told from noisy growth
  by any method, so it would be a labelling error (even 4 of 8 points stay ambiguous at 10%
  noise: the demo 0.83, 1.55, 2.13, 2.66, 3.68, 3.08, 4.48, 3.63 s must be growth). This is
  the classifier's own definition of a plateau (``PLATEAU_MIN_FLAT_POINTS``,
  ``PLATEAU_MIN_FLAT_FRACTION`` in ``wsprof.analysis.growth``). And the stop must be visible:
  the rise is redrawn until the plateau's distance from its best straight line (the
  noncentrality, as for curvature below) is at least 3 noise units; a smaller bend cannot be
  told from a rise that goes on, as a smaller rise cannot be told from noise.
* **Warm-up:** the first 1-3 points 20-300% off the level (log-uniform; up 70% of the time, as
  first steps are usually slower), later warm-up points decaying by a factor 0.3-1 each, and at
  least 3 flat points after them ("then flat" cannot be seen in two points: any two points are
  a line).
* **Step change:** level ratio 1.3-8 (log-uniform, up or down), change in the middle half; half of
  them carry a ``config`` column that changes at the step.
* **Sawtooth:** period 4-20 logged intervals (in steps: that many times the mean interval) at a
  random phase, rise within a period log-uniform between
  ``max(20%, 3 sigma)`` and 200%, flat peaks.
* **Flat with one excursion** (``flat_spike``; a checkpoint save, an eval step): flat, and one
  point (the last one a third of the time, else any after the first) 1.5-5x the level (at least
  8 sigma, so it is an excursion, not noise); at least 6 points. Not accumulating; flat, or a
  step change when it is the last point.
* **Linear growth with dips** (``linear_dips``, like the demo under CPU load: 0.83, 1.55, 2.13,
  2.66, 3.68, 3.08, 4.48, 3.63 s): a straight rise as for ``linear`` (at least +100%), with 1-2
  points after the first third 10-25% below the line; at least 6 points. Accumulating.
* **Early config switch** (``config_switch``): a step change with a ``config`` column that
  switches after the first 1-3 points (the 2,655 s -> 270 s report): a ``step_change`` only.
* **Logging strides.** A quarter of all series (of every kind) are logged every 2-10 steps from a
  step 0-1000, and a tenth of the rest at irregular intervals (1-3 steps): the verdict must not
  depend on it, so the labels do not change (the shapes are functions of the step number, see
  above).

A shape counts as right when it is in the acceptable set of its kind: superlinear and
exponential are interchangeable; a straight line and a curve are interchangeable when the
curvature is not visible (its noncentrality, the true curve's distance from the best straight
line or exponential summed in noise units, is under 3); a warm-up may be called a step change
(and flat when every warm-up point is within 3 sigma); a step change at index <= 3 may be called
a warm-up (and flat when the shift is under 3 sigma); a plateau may be called warm-up or step
change.

With ~600 series in the bar row (~240 accumulating), the standard error of the measured
precision is ~0.006 and of the recall ~0.012; use ``--n`` / ``--seed`` to check other corpora.

Run: ``python scripts/growth_corpus.py [--n 1200] [--seed 20240917] [--show-errors 20]``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from wsprof.analysis.growth import classify
from wsprof.analysis.model import SHAPES

SEED = 20240917
N_SERIES = 1200
#: Noise bands, relative sigma (fraction of the level).
NOISE_BANDS = ((0.01, 0.05), (0.05, 0.10), (0.10, 0.25))
#: Length bands, points (inclusive).
LENGTH_BANDS = ((3, 4), (5, 10), (11, 50), (51, 200))
#: Every shape the classifier names, plus plateaus (a ramp that stops; expected as
#: warmup_then_flat, not accumulating).
KINDS = (*SHAPES, "plateau", "flat_spike", "linear_dips", "config_switch")
GROWING = frozenset({"linear", "superlinear", "exponential", "linear_dips"})
#: Growth floor: the rise must be at least this many noise sigmas ...
GROWTH_MIN_SIGMAS = 3.0
#: ... and at least this fraction of the level.
GROWTH_MIN = 0.10
#: Largest total rise (9 = a 10x rise).
GROWTH_MAX = 9.0
#: Curvature is visible when its noncentrality (noise units) is at least this.
CURVATURE_VISIBLE = 3.0
#: Sawtooth period range, points.
SAW_MIN_PERIOD = 4
SAW_MAX_PERIOD = 20
#: A plateau's flat part: at least this many points (a trend test over 4 points can reach 5%,
#: over 3 it cannot) ...
PLATEAU_MIN_FLAT = 4
#: ... and at least this fraction of the series (see the module docstring).
PLATEAU_MIN_FLAT_FRACTION = 1 / 3
#: Bar for the row "noise <= 10% and >= 5 points".
BAR_PRECISION = 0.98
BAR_RECALL = 0.95


@dataclass(frozen=True)
class Case:
    """One labelled series."""

    kind: str
    values: tuple[float, ...]
    config: tuple[str, ...] | None
    steps: tuple[int, ...] | None
    noise: float
    accumulating: bool
    acceptable: frozenset[str]

    @property
    def n(self) -> int:
        return len(self.values)


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(max(hi, lo)))))


def _line_distance(f: np.ndarray, sigma: float, t: np.ndarray) -> float:
    """Noncentrality of f's curvature: distance from its best straight line (in ``t``, the
    step numbers) in noise units."""
    line = np.polyval(np.polyfit(t, f, 1), t)
    return float(np.sqrt(np.sum(((f - line) / (sigma * f)) ** 2)))


def _exp_distance(f: np.ndarray, sigma: float, t: np.ndarray) -> float:
    """Distance of a straight line f from its best exponential (in ``t``), in noise units."""
    b0, a0 = np.polyfit(t, np.log(f), 1)

    def model(q: np.ndarray, a: float, b: float) -> np.ndarray:
        return a * np.exp(b * q)

    try:
        p, _ = optimize.curve_fit(model, t, f, p0=(math.exp(a0), b0), maxfev=2000)
    except RuntimeError:
        p = (math.exp(a0), b0)
    return float(np.sqrt(np.sum(((f - model(t, *p)) / (sigma * f)) ** 2)))


def _growth_rise(rng: np.random.Generator, sigma: float) -> float:
    return _log_uniform(rng, max(GROWTH_MIN, GROWTH_MIN_SIGMAS * sigma), GROWTH_MAX)


def _gen_growing(
    kind: str, rng: np.random.Generator, u: np.ndarray, sigma: float
) -> tuple[np.ndarray, frozenset[str]]:
    g = _growth_rise(rng, sigma)
    if kind == "linear":
        f = 1 + g * u
        curved = u.size >= 3 and _exp_distance(f, sigma, u) >= CURVATURE_VISIBLE
        ok = {"linear"} if curved else {"linear", "superlinear", "exponential"}
        return f, frozenset(ok)
    f = 1 + g * u ** rng.uniform(1.5, 3.0) if kind == "superlinear" else (1 + g) ** u
    curved = _line_distance(f, sigma, u) >= CURVATURE_VISIBLE
    ok = {"superlinear", "exponential"} | (set() if curved else {"linear"})
    return f, frozenset(ok)


def _gen_warmup(
    rng: np.random.Generator, n: int, sigma: float
) -> tuple[np.ndarray, frozenset[str]]:
    k = int(rng.integers(1, min(3, max(1, n - 3)) + 1))  # >= 3 flat points after
    off = _log_uniform(rng, 0.2, 3.0) * rng.uniform(0.3, 1.0) ** np.arange(k)
    up = rng.random() < 0.7
    f = np.ones(n)
    f[:k] = 1 + off if up else 1 / (1 + off)
    tiny = bool(np.all(np.abs(f[:k] - 1) < GROWTH_MIN_SIGMAS * sigma * np.maximum(f[:k], 1)))
    ok = {"warmup_then_flat", "step_change"} | ({"flat"} if tiny else set())
    return f, frozenset(ok)


def _gen_step(
    rng: np.random.Generator, n: int, sigma: float
) -> tuple[np.ndarray, frozenset[str], tuple[str, ...] | None]:
    ratio = _log_uniform(rng, 1.3, 8.0)
    ratio = ratio if rng.random() < 0.5 else 1 / ratio
    cp = int(rng.integers(max(1, math.ceil(n / 4)), max(2, math.floor(3 * n / 4)) + 1))
    cp = min(max(cp, 1), n - 1)
    f = np.where(np.arange(n) < cp, 1.0, ratio)
    ok = {"step_change"}
    if cp <= 3:
        ok.add("warmup_then_flat")
    if abs(ratio - 1) < GROWTH_MIN_SIGMAS * sigma * max(ratio, 1):
        ok.add("flat")
    config = None
    if rng.random() < 0.5:
        config = tuple("tp=8" if i < cp else "tp=16" for i in range(n))
    return f, frozenset(ok), config


def _gen_sawtooth(rng: np.random.Generator, u: np.ndarray, sigma: float) -> np.ndarray:
    """Periodic in steps: ``t = u (n-1)`` counts mean logging intervals."""
    n = u.size
    period = int(rng.integers(SAW_MIN_PERIOD, min(SAW_MAX_PERIOD, n // 3) + 1))
    amp = _log_uniform(rng, max(0.2, GROWTH_MIN_SIGMAS * sigma), 2.0)
    phase = np.mod(u * (n - 1) + int(rng.integers(0, period)), period)
    return 1 + amp * phase / (period - 1)


def _gen_plateau(rng: np.random.Generator, u: np.ndarray, sigma: float) -> np.ndarray:
    """A ramp over the first ``m`` intervals, then flat for ``max(4, n/3)``+ points."""
    n = u.size
    min_flat = max(PLATEAU_MIN_FLAT, math.ceil(PLATEAU_MIN_FLAT_FRACTION * n))
    m = min(max(1, round(rng.uniform(0.2, 0.5) * n)), n - min_flat)  # points m.. are flat
    for _ in range(100):  # the rise, redrawn until the stop is visible (module docstring)
        f = 1 + _growth_rise(rng, sigma) * np.minimum(1.0, u / u[m])
        if _line_distance(f, sigma, u) >= CURVATURE_VISIBLE:
            break
    return f


def _gen_spike(rng: np.random.Generator, n: int, sigma: float) -> tuple[np.ndarray, frozenset[str]]:
    f = np.ones(n)
    at = n - 1 if rng.random() < 1 / 3 else int(rng.integers(1, n))
    f[at] = max(rng.uniform(1.5, 5.0), 1 + 8 * sigma)
    return f, frozenset({"flat", "step_change"} if at == n - 1 else {"flat"})


def _gen_linear_dips(rng: np.random.Generator, u: np.ndarray, sigma: float) -> np.ndarray:
    n = u.size
    g = _log_uniform(rng, max(1.0, GROWTH_MIN_SIGMAS * sigma), GROWTH_MAX)
    f = 1 + g * u
    k = int(rng.integers(1, 3))
    at = rng.choice(np.arange(max(1, n // 3), n), size=min(k, n - max(1, n // 3)), replace=False)
    f[at] *= 1 - rng.uniform(0.10, 0.25, size=at.size)
    return f


def _gen_config_switch(rng: np.random.Generator, n: int) -> tuple[np.ndarray, tuple[str, ...]]:
    cp = int(rng.integers(1, 4))
    ratio = _log_uniform(rng, 1.5, 10.0)
    ratio = ratio if rng.random() < 0.5 else 1 / ratio
    config = tuple("batch=64" if i < cp else "batch=256" for i in range(n))
    return np.where(np.arange(n) < cp, 1.0, ratio), config


def _gen_steps(rng: np.random.Generator, n: int) -> tuple[int, ...] | None:
    """Step numbers as logged: every 2-10 steps from step 0-1000 (a quarter of the series),
    irregular 1-3 step intervals (a tenth of the rest), else None (consecutive from 0)."""
    r = rng.random()
    if r < 0.25:
        start, stride = int(rng.integers(0, 1001)), int(rng.integers(2, 11))
        return tuple(start + stride * i for i in range(n))
    if r < 0.25 + 0.075:
        start = int(rng.integers(0, 1001))
        return tuple(int(v) for v in start + np.cumsum(rng.integers(1, 4, size=n)))
    return None


def make_case(rng: np.random.Generator) -> Case:
    """Draw one labelled series (see the module docstring for the distributions)."""
    kind = KINDS[int(rng.integers(len(KINDS)))]
    lo_s, hi_s = NOISE_BANDS[int(rng.integers(len(NOISE_BANDS)))]
    sigma = float(rng.uniform(lo_s, hi_s))
    bands = LENGTH_BANDS[2:] if kind == "sawtooth" else LENGTH_BANDS
    lo_n, hi_n = bands[int(rng.integers(len(bands)))]
    if kind == "sawtooth":
        lo_n = max(lo_n, 3 * SAW_MIN_PERIOD)  # at least three periods
    if kind in ("flat_spike", "linear_dips"):
        lo_n, hi_n = max(lo_n, 6), max(hi_n, 6)
    if kind == "plateau":  # a ramp and a flat part of PLATEAU_MIN_FLAT+ points
        lo_n, hi_n = max(lo_n, PLATEAU_MIN_FLAT + 1), max(hi_n, PLATEAU_MIN_FLAT + 1)
    if kind == "config_switch":
        lo_n, hi_n = max(lo_n, 5), max(hi_n, 5)  # at least 2 points after the switch
    n = int(rng.integers(lo_n, hi_n + 1))
    steps = _gen_steps(rng, n)
    x = np.arange(n, dtype=float) if steps is None else np.asarray(steps, dtype=float)
    u = (x - x[0]) / (x[-1] - x[0])  # every shape is a function of the step number
    config = None
    if kind == "linear_dips":
        f, ok = _gen_linear_dips(rng, u, sigma), frozenset({"linear", "superlinear", "exponential"})
    elif kind in GROWING:
        f, ok = _gen_growing(kind, rng, u, sigma)
    elif kind == "warmup_then_flat":
        f, ok = _gen_warmup(rng, n, sigma)
    elif kind == "step_change":
        f, ok, config = _gen_step(rng, n, sigma)
    elif kind == "sawtooth":
        f, ok = _gen_sawtooth(rng, u, sigma), frozenset({"sawtooth"})
    elif kind == "plateau":
        f, ok = _gen_plateau(rng, u, sigma), frozenset({"warmup_then_flat", "step_change"})
    elif kind == "flat_spike":
        f, ok = _gen_spike(rng, n, sigma)
    elif kind == "config_switch":
        (f, config), ok = _gen_config_switch(rng, n), frozenset({"step_change"})
    else:
        f, ok = np.ones(n), frozenset({"flat"})
    level = _log_uniform(rng, 0.5, 5000.0)
    y = level * f * (1 + sigma * rng.standard_normal(n))
    return Case(kind, tuple(float(v) for v in y), config, steps, sigma, kind in GROWING, ok)


def make_corpus(n: int = N_SERIES, seed: int = SEED) -> list[Case]:
    """The seeded corpus."""
    rng = np.random.default_rng(seed)
    return [make_case(rng) for _ in range(n)]


@dataclass
class Tally:
    """Counts for one row of the table."""

    n: int = 0
    tp: int = 0
    fp: int = 0
    fn: int = 0
    shape_ok: int = 0

    def add(self, truth: bool, said: bool, shape_ok: bool) -> None:
        self.n += 1
        self.tp += truth and said
        self.fp += said and not truth
        self.fn += truth and not said
        self.shape_ok += shape_ok

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else math.nan

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else math.nan

    def row(self, label: str) -> str:
        shape = self.shape_ok / self.n if self.n else math.nan
        return (
            f"{label:<28}{self.n:>6}{self.tp + self.fn:>6}{self.tp:>6}{self.fp:>6}{self.fn:>6}"
            f"{self.precision:>8.3f}{self.recall:>8.3f}{shape:>8.3f}"
        )


def _noise_band(s: float) -> str:
    return "noise <=5%" if s <= 0.05 else "noise 5-10%" if s <= 0.10 else "noise 10-25%"


def _length_band(n: int) -> str:
    for lo, hi in LENGTH_BANDS:
        if lo <= n <= hi:
            return f"len {lo}-{hi}"
    return "len ?"


def evaluate(
    corpus: Sequence[Case], run: Callable[[Case], tuple[bool, str]]
) -> tuple[dict[str, Tally], list[tuple[Case, bool, str]]]:
    """Classify every case; tally by band, kind and overall."""
    rows: dict[str, Tally] = {}
    results = []
    for case in corpus:
        said, shape = run(case)
        results.append((case, said, shape))
        keys = [
            "all",
            _noise_band(case.noise),
            _length_band(case.n),
            f"{_noise_band(case.noise)}, {_length_band(case.n)}",
            f"kind {case.kind}",
            "logged with strides" if case.steps is not None else "consecutive steps",
        ]
        if case.noise <= 0.10 and case.n >= 5:
            keys.append("BAR noise<=10%, n>=5")
        for k in keys:
            rows.setdefault(k, Tally()).add(case.accumulating, said, shape in case.acceptable)
    return rows, results


def _run(case: Case) -> tuple[bool, str]:
    v = classify(case.values, steps=case.steps, config=case.config)
    return v.accumulating, v.shape


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; return 1 when the bar is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=N_SERIES, help="number of series")
    ap.add_argument("--seed", type=int, default=SEED, help="random seed")
    ap.add_argument("--show-errors", type=int, default=0, help="print up to this many misses")
    args = ap.parse_args(argv)
    corpus = make_corpus(args.n, args.seed)
    t0 = time.perf_counter()
    rows, results = evaluate(corpus, _run)
    elapsed = time.perf_counter() - t0
    head = (
        f"{'rows':<28}{'n':>6}{'pos':>6}{'TP':>6}{'FP':>6}{'FN':>6}"
        f"{'prec':>8}{'recall':>8}{'shape':>8}"
    )
    print(f"growth corpus: {args.n} series, seed {args.seed}")
    print(head)
    print("-" * len(head))
    order = (
        ["all"]
        + [_noise_band(hi) for _, hi in NOISE_BANDS]
        + [f"len {lo}-{hi}" for lo, hi in LENGTH_BANDS]
        + [f"{_noise_band(s)}, len {lo}-{hi}" for _, s in NOISE_BANDS for lo, hi in LENGTH_BANDS]
        + [f"kind {k}" for k in KINDS]
        + ["consecutive steps", "logged with strides"]
    )
    for key in order:
        if key in rows:
            print(rows[key].row(key))
    bar = rows.get("BAR noise<=10%, n>=5", Tally())
    print("-" * len(head))
    print(bar.row("BAR noise<=10%, n>=5"))
    print(f"runtime: {elapsed:.2f} s ({1000 * elapsed / max(len(corpus), 1):.2f} ms/series)")
    ok = bar.precision >= BAR_PRECISION and bar.recall >= BAR_RECALL
    print(f"bar precision >= {BAR_PRECISION}, recall >= {BAR_RECALL}: {'met' if ok else 'MISSED'}")
    shown = 0
    for case, said, shape in results:
        if shown >= args.show_errors:
            break
        if said != case.accumulating or shape not in case.acceptable:
            shown += 1
            vals = ", ".join(f"{v:.4g}" for v in case.values[:40])
            print(
                f"MISS kind={case.kind} n={case.n} noise={case.noise:.3f} said={said}/{shape} "
                f"ok={sorted(case.acceptable)} cfg={case.config is not None} "
                f"steps={None if case.steps is None else case.steps[:3]}\n  [{vals}]"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
