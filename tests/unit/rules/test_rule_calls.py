"""PerCallVsCallCount (rules/calls/) on hand-built facts: more calls per step and slower
calls, each against the thresholds that make them a warning, information or nothing."""

from __future__ import annotations

import pytest
import rule_kit

from wsprof.analysis.bucketing import BUCKET_BYTES
from wsprof.analysis.model import CallCostModel, Finding, OpStats, ProcessAnalysis, WrapperFact
from wsprof.analysis.rules.base import SLOWDOWN_MATERIAL_SHARE
from wsprof.analysis.rules.calls.record import CallCountEvidence, PerCallEvidence
from wsprof.analysis.rules.calls.rule import PerCallVsCallCount
from wsprof.contracts.series import (
    COLLECTIVE_CALLS,
    STEP_S,
    WEIGHT_SYNC_S,
    op_median_key,
)
from wsprof.contracts.units import Unit

pytestmark = pytest.mark.pure

PC = PerCallVsCallCount()
N = 10


def _count(f: Finding) -> CallCountEvidence:
    assert isinstance(f.evidence, CallCountEvidence)
    return f.evidence


def _per_call(f: Finding) -> PerCallEvidence:
    assert isinstance(f.evidence, PerCallEvidence)
    return f.evidence


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
    assert _count(f).slope_per_step == pytest.approx(10.0)
    assert _count(f).fixed_us_per_call == pytest.approx(100.0)
    assert _count(f).bucketing == pytest.approx(
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
    growth = _per_call(f).ops["broadcast"]
    assert growth.first_us == pytest.approx(100)
    assert growth.last_us == pytest.approx(280)
    assert growth.slope_us_per_step == pytest.approx(20)
    # Its JSON keeps the old flat shape: one object per op, then the bucketing estimate.
    doc = f.evidence.as_dict()
    assert list(doc) == ["broadcast", "bucketing"]
    assert doc["broadcast"] == pytest.approx(
        {"first_us": 100, "last_us": 280, "slope_us_per_step": 20}
    )
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
