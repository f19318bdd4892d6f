"""Step numbers in growth verdicts: slopes per logged step, projections after the last step.

Properties (hypothesis): shifting the step numbers changes no verdict and moves every step in it
by the shift; logging every ``k`` steps divides slopes by ``k`` and leaves shapes alone;
``steps=None`` is ``steps=range(n)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wsprof.analysis.growth import classify

pytestmark = pytest.mark.pure

fast = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

KINDS = ("flat", "linear", "exponential", "step", "spike", "warmup")


def _series(kind: str, n: int, noise: float, seed: int) -> list[float]:
    t = np.arange(n, dtype=float)
    f = {
        "flat": np.ones(n),
        "linear": 1 + 0.05 * t,
        "exponential": 1.08**t,
        "step": np.where(t < n // 2, 1.0, 2.0),
        "spike": np.where(t == n - 1, 3.0, 1.0),
        "warmup": np.where(t < 1, 4.0, 1.0),
    }[kind]
    rng = np.random.default_rng(seed)
    return [float(v) for v in 100 * f * (1 + noise * rng.standard_normal(n))]


@fast
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(3, 60),
    noise=st.floats(0.0, 0.1),
    seed=st.integers(0, 2**32 - 1),
    offset=st.integers(1, 100_000),
)
def test_shifted_steps_shift_only_the_steps(
    kind: str, n: int, noise: float, seed: int, offset: int
) -> None:
    y = _series(kind, n, noise, seed)
    a = classify(y, budget=1e3)
    b = classify(y, steps=range(offset, offset + n), budget=1e3)
    assert (a.shape, a.accumulating, a.change_point) == (b.shape, b.accumulating, b.change_point)
    assert b.outlier_steps == tuple(s + offset for s in a.outlier_steps)
    assert math.isclose(a.slope_per_step, b.slope_per_step, rel_tol=1e-6, abs_tol=1e-9)
    assert (a.projection is None) == (b.projection is None)
    if a.projection is not None and b.projection is not None:
        assert b.projection.step == a.projection.step + offset
        assert math.isclose(a.projection.value, b.projection.value, rel_tol=1e-5, abs_tol=1e-6)
    if a.budget_step is not None and b.budget_step is not None:
        assert abs(b.budget_step - (a.budget_step + offset)) <= 1
    assert np.allclose(a.fitted, b.fitted, rtol=1e-5, atol=1e-6)


@fast
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(3, 60),
    noise=st.floats(0.0, 0.1),
    seed=st.integers(0, 2**32 - 1),
    stride=st.integers(2, 10),
    start=st.integers(0, 1000),
)
def test_a_logging_stride_divides_slopes(
    kind: str, n: int, noise: float, seed: int, stride: int, start: int
) -> None:
    y = _series(kind, n, noise, seed)
    a = classify(y)
    b = classify(y, steps=[start + stride * i for i in range(n)])
    assert (a.shape, a.accumulating, a.change_point) == (b.shape, b.accumulating, b.change_point)
    assert math.isclose(a.slope_per_step, stride * b.slope_per_step, rel_tol=1e-6, abs_tol=1e-9)
    if a.growth_factor_per_step is not None and b.growth_factor_per_step is not None:
        assert math.isclose(
            math.log(a.growth_factor_per_step),
            stride * math.log(b.growth_factor_per_step),
            rel_tol=1e-4,
            abs_tol=1e-9,
        )
    if b.projection is not None:
        assert b.projection.step > start + stride * (n - 1)


@fast
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 40),
    noise=st.floats(0.0, 0.1),
    seed=st.integers(0, 2**32 - 1),
)
def test_no_steps_means_positions(kind: str, n: int, noise: float, seed: int) -> None:
    y = _series(kind, n, noise, seed)
    assert classify(y) == classify(y, steps=range(n))


def test_seeded_strided_linear_slopes() -> None:
    """Seeded loop: noisy +2/step growth logged every 5 steps has a slope near 2 per step."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(6, 40))
        steps = 10 + 5 * np.arange(n)
        y = 100 + 2.0 * steps * (1 + 0.01 * rng.standard_normal(n))
        v = classify(list(y), steps=[int(s) for s in steps])
        assert v.accumulating
        assert abs(v.slope_per_step - 2.0) < 0.3
