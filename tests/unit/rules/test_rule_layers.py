"""BetweenLayers and PerCallVsCallCount (rules/layers.py) on hand-built facts: a growing time
between the collective name and the backend, more calls per step, and slower calls, each
against the thresholds that make them critical, a warning, information or nothing."""

from __future__ import annotations

import pytest
import rule_kit

from wsprof.analysis.model import CallCostModel, OpStats, ProcessAnalysis, WrapperFact
from wsprof.analysis.rules.base import MATERIAL_STEP_SHARE, SLOWDOWN_MATERIAL_SHARE
from wsprof.analysis.rules.layers import (
    BETWEEN_LAYERS_MATERIAL,
    BETWEEN_LAYERS_SHARE,
    BUCKET_BYTES,
    BetweenLayers,
    PerCallVsCallCount,
)
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    COLLECTIVE_CALLS,
    STEP_S,
    WEIGHT_SYNC_S,
    op_median_key,
)
from wsprof.contracts.units import Unit

pytestmark = pytest.mark.pure

BL = BetweenLayers()
PC = PerCallVsCallCount()
N = 10


def _linear(first: float, slope: float, n: int = N) -> list[float]:
    return [first + slope * i for i in range(n)]


def _wrapper(api: str, qualname: str = "probe_free_memory", between_s: float = 3.0) -> WrapperFact:
    return WrapperFact(
        api=api,
        kind="name",
        qualname=qualname,
        module="user.mod",
        file="user/mod.py",
        line=7,
        wraps=(),
        after_patch=False,
        between_s=between_s,
    )


# ----------------------------------------------------------------------------- BetweenLayers


def test_between_layers_growth_explaining_the_sync_growth_is_critical_at_the_wrapper() -> None:
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.05, 0.05))
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, 0.1))  # share 0.05 / 0.1 = 0.5
    wrappers = [
        _wrapper("dist.broadcast"),
        _wrapper("dist.all_reduce"),
        _wrapper("dist.barrier", qualname="other_wrapper", between_s=0.1),
    ]
    [f] = BL.match(rule_kit.facts([bl, sync], [rule_kit.process()], wrappers))
    assert f.kind == "between_layers"
    assert f.severity == "critical"
    assert f.where == wrappers[0].label()
    assert f.evidence["share_of_sync_growth"] == pytest.approx(0.5)
    assert f.evidence["slope_s_per_step"] == pytest.approx(0.05)
    assert f.evidence["first_s"] == pytest.approx(0.05)
    assert f.evidence["last_s"] == pytest.approx(0.5)
    assert f.evidence["wrapped_names"] == "dist.all_reduce, dist.broadcast"


def test_between_layers_share_below_the_threshold_is_a_warning() -> None:
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.05, 0.05))
    sync_slope = 0.05 / (0.8 * BETWEEN_LAYERS_SHARE)
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, sync_slope))
    [f] = BL.match(rule_kit.facts([bl, sync]))
    assert f.severity == "warning"
    assert f.evidence["share_of_sync_growth"] == pytest.approx(0.8 * BETWEEN_LAYERS_SHARE)
    assert f.where is None


def test_between_layers_growth_below_the_material_share_of_the_sync_is_no_finding() -> None:
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.01, 0.01))
    grown = 0.1 - 0.01  # max of the run less the least of its first third
    big = rule_kit.judged(WEIGHT_SYNC_S, [1.1 * grown / BETWEEN_LAYERS_MATERIAL] * N)
    small = rule_kit.judged(WEIGHT_SYNC_S, [0.9 * grown / BETWEEN_LAYERS_MATERIAL] * N)
    assert BL.match(rule_kit.facts([bl, big])) == []
    [f] = BL.match(rule_kit.facts([bl, small]))
    # A flat sync has no growth to share: a warning (the sync it sits in does not grow).
    assert f.evidence["share_of_sync_growth"] is None
    assert f.severity == "warning" and "does not grow" in f.title


def test_between_layers_growth_small_against_a_step_is_information() -> None:
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.01, 0.01))
    grown = 0.1 - 0.01
    sync = rule_kit.judged(WEIGHT_SYNC_S, [0.5] * N)
    long_step = rule_kit.judged(STEP_S, [1.1 * grown / MATERIAL_STEP_SHARE] * N)
    short_step = rule_kit.judged(STEP_S, [0.9 * grown / MATERIAL_STEP_SHARE] * N)
    [quiet] = BL.match(rule_kit.facts([bl, sync, long_step]))
    [loud] = BL.match(rule_kit.facts([bl, sync, short_step]))
    assert quiet.severity == "info"
    assert "not yet material" in quiet.title
    assert loud.severity == "warning"
    # With no weight sync to compare with, the wrapper's growth alone is the cause.
    [alone] = BL.match(rule_kit.facts([bl, short_step]))
    assert alone.severity == "critical"


def test_between_layers_without_the_series_or_without_growth_is_no_finding() -> None:
    assert BL.match(rule_kit.facts()) == []
    flat = rule_kit.judged(BETWEEN_LAYERS_S, [0.05] * N)
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, 0.5))
    assert BL.match(rule_kit.facts([flat, sync])) == []
    # Without a weight sync the step is the reference of materiality.
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.01, 0.01))
    step = rule_kit.judged(STEP_S, [1.1 * 0.09 / BETWEEN_LAYERS_MATERIAL] * N)
    assert BL.match(rule_kit.facts([bl, step])) == []


# ------------------------------------------------------------------------ PerCallVsCallCount


def _pa_with_payload(mib_per_step: int, n_steps: int = N, n_calls: int = 1000) -> ProcessAnalysis:
    steps = rule_kit.step_rows([1.0] * n_steps, sync_s=[0.5] * n_steps)
    op = OpStats(
        op="broadcast",
        apis=("dist.broadcast",),
        n_calls=n_calls,
        total_s=1.0,
        median_us=100.0,
        p99_us=200.0,
        between_layers_median_us=5.0,
        bytes_total=mib_per_step * 2**20 * n_steps,
    )
    model = CallCostModel(fixed_us=100.0, us_per_mib=1.0, n_sizes=3)
    pa: ProcessAnalysis = rule_kit.process(steps=steps, ops=(op,), cost_model=model)
    return pa


def test_growing_call_count_is_a_warning_with_a_bucketing_estimate() -> None:
    count = rule_kit.judged(COLLECTIVE_CALLS, _linear(100, 10), unit=Unit.COUNT)
    pa = _pa_with_payload(mib_per_step=(2 * BUCKET_BYTES) >> 20)  # two buckets per step
    found = PC.match(rule_kit.facts([count], [pa]))
    assert [f.kind for f in found] == ["call_count_growth"]
    [f] = found
    assert f.severity == "warning"
    assert f.evidence["slope_per_step"] == pytest.approx(10.0)
    assert f.evidence["fixed_us_per_call"] == pytest.approx(100.0)
    assert f.evidence["bucketing"] == pytest.approx(
        {"buckets": 2.0, "calls": 190.0, "saved_s": (190 - 2) * 100.0 / 1e6}
    )
    flat = rule_kit.judged(COLLECTIVE_CALLS, [100] * N, unit=Unit.COUNT)
    assert PC.match(rule_kit.facts([flat], [pa])) == []
    assert PC.match(rule_kit.facts()) == []


def test_slower_calls_while_the_sync_grows_are_a_warning_naming_the_op() -> None:
    op = rule_kit.judged(op_median_key("broadcast"), _linear(100, 20), unit=Unit.MICROSECONDS)
    count = rule_kit.judged(COLLECTIVE_CALLS, [100] * N, unit=Unit.COUNT)
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, 0.5))
    [f] = PC.match(rule_kit.facts([op, count, sync]))
    assert f.kind == "per_call_growth"
    assert f.severity == "warning"
    assert f.where == "broadcast"
    assert f.evidence["broadcast"]["first_us"] == pytest.approx(100)
    assert f.evidence["broadcast"]["last_us"] == pytest.approx(280)
    assert f.evidence["broadcast"]["slope_us_per_step"] == pytest.approx(20)
    assert "calls per step stay at 100" in f.title


def test_slower_calls_need_material_added_time_and_are_info_when_nothing_else_grows() -> None:
    op = rule_kit.judged(op_median_key("broadcast"), _linear(100, 20), unit=Unit.MICROSECONDS)
    count = rule_kit.judged(COLLECTIVE_CALLS, [100] * N, unit=Unit.COUNT)
    added_s = 20 * (N - 1) * 1e-6 * 100  # slope x steps spanned x calls per step
    short = rule_kit.judged(STEP_S, [0.9 * added_s / SLOWDOWN_MATERIAL_SHARE] * N)
    long = rule_kit.judged(STEP_S, [1.1 * added_s / SLOWDOWN_MATERIAL_SHARE] * N)
    assert PC.match(rule_kit.facts([op, count, long])) == []
    [f] = PC.match(rule_kit.facts([op, count, short]))
    assert f.kind == "per_call_growth"
    assert f.severity == "info"
    assert "do not grow" in f.title
