"""Growth rules for what real training logs show (issue 28, item 6), on synthetic curves.

Periodic spikes (a checkpoint save or an eval every N steps) are named and left out of the
trend, never a ``sawtooth``; a real sawtooth (a rise within each period, then a reset) still is
one; one level change, up or down, is a ``step_change``; a slope whose sign or size the data
cannot support is ``flat``; a real slow leak under the same noise stays accumulating.
"""

from __future__ import annotations

import numpy as np
import pytest

from wsprof.analysis.growth import classify

pytestmark = pytest.mark.pure

SEEDS = range(8)


def _noisy(f: np.ndarray, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.asarray(f * (1 + noise * rng.standard_normal(f.size)))


def _with_spikes(y: np.ndarray, at: range, height: float) -> list[float]:
    out = y.copy()
    out[list(at)] *= height
    return [float(v) for v in out]


@pytest.mark.parametrize("seed", SEEDS)
def test_periodic_spikes_on_a_flat_base_are_flat_and_named(seed: int) -> None:
    base = _noisy(np.full(64, 28.0), 0.02, seed)
    v = classify(_with_spikes(base, range(20, 64, 20), 4.5))
    assert v.shape == "flat" and not v.accumulating, v.evidence
    assert v.spike_steps == (20, 40, 60) and v.spike_period == 20
    assert set(v.spike_steps) <= set(v.outlier_steps)
    assert v.evidence["n_spikes"] == 3


@pytest.mark.parametrize("seed", SEEDS)
def test_spikes_every_ten_steps_with_one_step_late(seed: int) -> None:
    base = _noisy(np.full(50, 10.0), 0.02, seed)
    v = classify(_with_spikes(base, range(0, 0), 1.0))
    assert v.spike_period is None and v.spike_steps == ()
    y = _with_spikes(base, range(0, 0), 1.0)
    for s in (9, 19, 30, 39):  # 30: logged one step late
        y[s] *= 1.3
    v = classify(y)
    assert v.spike_steps == (9, 19, 30, 39) and v.spike_period == 10
    assert v.shape == "flat" and not v.accumulating


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("period", [4, 8])
def test_a_real_sawtooth_is_still_a_sawtooth(seed: int, period: int) -> None:
    t = np.arange(64)
    v = classify(
        [float(x) for x in _noisy(10 * (1 + 0.8 * (t % period) / (period - 1)), 0.03, seed)]
    )
    assert v.shape == "sawtooth" and not v.accumulating
    assert v.spike_steps == ()


@pytest.mark.parametrize("seed", SEEDS)
def test_two_spikes_are_no_period(seed: int) -> None:
    base = _noisy(np.full(40, 5.0), 0.02, seed)
    v = classify(_with_spikes(base, range(10, 40, 20), 3.0))
    assert v.spike_steps == () and v.spike_period is None


@pytest.mark.parametrize("seed", SEEDS)
def test_one_step_down_is_a_step_change(seed: int) -> None:
    f = np.where(np.arange(63) < 21, 2.17, 1.64)
    v = classify([float(x) for x in _noisy(f, 0.01, seed)])
    assert v.shape == "step_change" and not v.accumulating
    assert v.change_point == 21


@pytest.mark.parametrize("seed", SEEDS)
def test_one_small_step_up_between_spikes_is_a_step_change(seed: int) -> None:
    """GLM-9B's step time: ~75 s, +3.5 s at step 47, eval spikes every 20 steps."""
    f = np.where(np.arange(64) < 47, 75.0, 78.5)
    v = classify(_with_spikes(_noisy(f, 0.01, seed), range(20, 64, 20), 1.4))
    assert v.shape == "step_change" and not v.accumulating, v.evidence
    assert v.spike_steps == (20, 40, 60)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("drift", [-0.01, 0.01])
def test_a_slope_smaller_than_the_noise_is_flat(seed: int, drift: float) -> None:
    """A drift of 1% over 60 steps under 2% noise: whatever its fitted sign, no trend."""
    f = 1.0 + drift * np.arange(60) / 59
    v = classify([float(x) for x in _noisy(f, 0.02, seed)])
    assert v.shape == "flat" and not v.accumulating, v.evidence


@pytest.mark.parametrize("seed", SEEDS)
def test_bimodal_base_with_a_creep_is_not_linear(seed: int) -> None:
    """Qwen3-4B's sync: 1.14-1.2 s with irregular 1.65 s steps, a 4% creep under them."""
    rng = np.random.default_rng(100 + seed)
    f = 1.14 + 0.045 * np.arange(63) / 62
    y = _noisy(f, 0.01, seed)
    y[rng.choice(63, 12, replace=False)] = 1.65
    v = classify([float(x) for x in y])
    assert v.shape != "linear" and not v.accumulating, v.evidence


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("spikes", [False, True])
def test_a_slow_leak_under_the_same_noise_stays_accumulating(seed: int, spikes: bool) -> None:
    f = 1.0 * (1 + 0.005 * np.arange(60))  # +30% over 60 steps under 2% noise
    y = _noisy(f, 0.02, seed)
    v = classify(_with_spikes(y, range(15, 60, 15), 4.0) if spikes else [float(x) for x in y])
    assert v.accumulating and v.shape in ("linear", "exponential"), v.evidence
    if spikes:
        assert v.spike_steps == (15, 30, 45)


def test_a_decrease_the_data_support_is_still_a_falling_line() -> None:
    v = classify([float(x) for x in _noisy(100 - 1.0 * np.arange(40), 0.01, 0)])
    assert v.shape == "linear" and not v.accumulating and v.slope_per_step < 0
