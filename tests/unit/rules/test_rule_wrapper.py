"""BetweenLayers (rules/wrapper.py) on hand-built facts: a growing time between the collective
name and the backend against the thresholds that make it critical, a warning, information or
nothing."""

from __future__ import annotations

import pytest
import rule_kit

from wsprof.analysis.model import Finding, WrapperFact
from wsprof.analysis.rules.base import MATERIAL_STEP_SHARE
from wsprof.analysis.rules.wrapper import (
    BETWEEN_LAYERS_MATERIAL,
    BETWEEN_LAYERS_SHARE,
    BetweenLayers,
    BetweenLayersEvidence,
)
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    STEP_S,
    WEIGHT_SYNC_S,
)

pytestmark = pytest.mark.pure

BL = BetweenLayers()
N = 10


def _ev(f: Finding) -> BetweenLayersEvidence:
    assert isinstance(f.evidence, BetweenLayersEvidence)
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
    assert _ev(f).share_of_sync_growth == pytest.approx(0.5)
    assert _ev(f).slope_s_per_step == pytest.approx(0.05)
    assert _ev(f).first_s == pytest.approx(0.05)
    assert _ev(f).last_s == pytest.approx(0.5)
    assert _ev(f).wrapped_names == "dist.all_reduce, dist.broadcast"


def test_between_layers_share_below_the_threshold_is_a_warning() -> None:
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.05, 0.05))
    sync_slope = 0.05 / (0.8 * BETWEEN_LAYERS_SHARE)
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, sync_slope))
    [f] = BL.match(rule_kit.facts([bl, sync]))
    assert f.severity == "warning"
    assert _ev(f).share_of_sync_growth == pytest.approx(0.8 * BETWEEN_LAYERS_SHARE)
    assert f.where is None


def test_between_layers_growth_below_the_material_share_of_the_sync_is_no_finding() -> None:
    bl = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.01, 0.01))
    grown = 0.1 - 0.01  # max of the run less the least of its first third
    big = rule_kit.judged(WEIGHT_SYNC_S, [1.1 * grown / BETWEEN_LAYERS_MATERIAL] * N)
    small = rule_kit.judged(WEIGHT_SYNC_S, [0.9 * grown / BETWEEN_LAYERS_MATERIAL] * N)
    assert BL.match(rule_kit.facts([bl, big])) == []
    [f] = BL.match(rule_kit.facts([bl, small]))
    # A flat sync has no growth to share: a warning (the sync it sits in does not grow).
    assert _ev(f).share_of_sync_growth is None
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
