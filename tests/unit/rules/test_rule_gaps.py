"""Gaps and GpuIdleDuringSync (rules/gaps.py) on hand-built facts: weight-sync time in no
collective (a large flat share is information, material growth a warning) and GPUs idle during
a sync that takes a real share of the step."""

from __future__ import annotations

from dataclasses import replace

import pytest
import rule_kit

from wsprof.analysis.model import Finding, GpuUtil
from wsprof.analysis.rules.base import MATERIAL_STEP_SHARE, SLOWDOWN_MATERIAL_SHARE
from wsprof.analysis.rules.gaps import (
    GAP_SHARE,
    GPU_IDLE_MIN_SYNC_SHARE,
    GPU_IDLE_PCT,
    Gaps,
    GapsEvidence,
    GpuIdleDuringSync,
    GpuIdleEvidence,
)
from wsprof.contracts.series import STEP_S, SYNC_GAP_S, WEIGHT_SYNC_S, Series
from wsprof.contracts.units import Unit

pytestmark = pytest.mark.pure

GAPS = Gaps()
IDLE = GpuIdleDuringSync()
N = 10
SITE = "push_weights (trainer.py:88)"


def _gaps(f: Finding) -> GapsEvidence:
    assert isinstance(f.evidence, GapsEvidence)
    return f.evidence


def _idle(f: Finding) -> GpuIdleEvidence:
    assert isinstance(f.evidence, GpuIdleEvidence)
    return f.evidence


def _linear(first: float, slope: float, n: int = N) -> list[float]:
    return [first + slope * i for i in range(n)]


# ------------------------------------------------------------------------------------ Gaps


def test_a_flat_gap_share_at_the_threshold_is_information_and_below_it_nothing() -> None:
    sync = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N)
    at = rule_kit.judged(SYNC_GAP_S, [GAP_SHARE] * N)
    below = rule_kit.judged(SYNC_GAP_S, [0.9 * GAP_SHARE] * N)
    [f] = GAPS.match(rule_kit.facts([at, sync], [rule_kit.process(sync_site=SITE)]))
    assert f.kind == "gaps"
    assert f.severity == "info"
    assert f.where == SITE
    assert _gaps(f).median_gap_share == pytest.approx(GAP_SHARE)
    assert _gaps(f).accumulating is False
    assert _gaps(f).caller == SITE
    assert GAPS.match(rule_kit.facts([below, sync])) == []


def test_a_material_growing_gap_is_a_warning_without_a_caller_named_by_phase() -> None:
    gap = rule_kit.judged(SYNC_GAP_S, _linear(0.01, 0.01))  # +90 ms, share < GAP_SHARE
    sync = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N)
    grown = 0.1 - 0.01
    assert grown >= MATERIAL_STEP_SHARE * 1.0  # material against the 1 s sync
    [f] = GAPS.match(rule_kit.facts([gap, sync]))
    assert f.severity == "warning"
    assert f.where == "weight_sync phase"
    assert _gaps(f).accumulating is True
    assert _gaps(f).first_s == pytest.approx(0.01)
    assert _gaps(f).last_s == pytest.approx(0.1)
    assert _gaps(f).caller is None
    assert _gaps(f).median_gap_share < GAP_SHARE  # reported for its growth alone


def test_growth_small_against_the_sync_is_no_finding_and_small_against_a_step_is_info() -> None:
    gap = rule_kit.judged(SYNC_GAP_S, _linear(0.01, 0.01))
    grown = 0.1 - 0.01
    # Below MATERIAL_STEP_SHARE of the median sync: not growth, and the share is small.
    long_sync = rule_kit.judged(WEIGHT_SYNC_S, [1.1 * grown / MATERIAL_STEP_SHARE] * N)
    assert GAPS.match(rule_kit.facts([gap, long_sync])) == []
    # Growth material to the sync but not to the step: information. A part of the sync is
    # held to the bar of the whole (the slowdown rule's share of a step), never a lower one.
    sync = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N)
    long_step = rule_kit.judged(STEP_S, [1.1 * grown / SLOWDOWN_MATERIAL_SHARE] * N)
    short_step = rule_kit.judged(STEP_S, [0.9 * grown / SLOWDOWN_MATERIAL_SHARE] * N)
    [quiet] = GAPS.match(rule_kit.facts([gap, sync, long_step]))
    [loud] = GAPS.match(rule_kit.facts([gap, sync, short_step]))
    assert quiet.severity == "info"
    assert "not yet material" in quiet.title
    assert loud.severity == "warning"


def test_gaps_without_a_gap_a_sync_or_a_positive_sync_is_no_finding() -> None:
    gap = rule_kit.judged(SYNC_GAP_S, [0.5] * N)
    sync = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N)
    assert GAPS.match(rule_kit.facts()) == []
    assert GAPS.match(rule_kit.facts([gap])) == []
    assert GAPS.match(rule_kit.facts([sync])) == []
    zero_sync = rule_kit.judged(WEIGHT_SYNC_S, [0.0] * N)
    assert GAPS.match(rule_kit.facts([gap, zero_sync])) == []
    other_steps = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N, steps=range(100, 100 + N))
    assert GAPS.match(rule_kit.facts([gap, other_steps])) == []
    empty = replace(gap, series=Series(SYNC_GAP_S, Unit.SECONDS, (), ()))
    assert GAPS.match(rule_kit.facts([empty, sync])) == []


# ---------------------------------------------------------------------- GpuIdleDuringSync


def test_gpus_idle_at_the_threshold_during_a_long_sync_are_a_warning_per_process() -> None:
    idle = rule_kit.process(
        label="rank 0",
        steps=rule_kit.step_rows([2.0] * 4, sync_s=[1.0] * 4),
        gpu_util=GpuUtil(GPU_IDLE_PCT, 80.0, 50),
    )
    busy = rule_kit.process(
        label="rank 1",
        rank=1,
        steps=rule_kit.step_rows([2.0] * 4, sync_s=[1.0] * 4),
        gpu_util=GpuUtil(GPU_IDLE_PCT + 1.0, 80.0, 50),
    )
    [f] = IDLE.match(rule_kit.facts(processes=[idle, busy]))
    assert f.kind == "gpu_idle_during_sync"
    assert f.severity == "warning"
    assert f.where == "rank 0"
    assert _idle(f).sync_util_pct == pytest.approx(GPU_IDLE_PCT)
    assert _idle(f).other_util_pct == pytest.approx(80.0)
    assert _idle(f).samples == 50
    assert _idle(f).sync_share == pytest.approx(0.5)


def test_idle_gpus_during_a_short_sync_or_without_samples_or_steps_are_no_finding() -> None:
    idle = GpuUtil(0.0, None, 10)
    short = rule_kit.process(
        steps=rule_kit.step_rows([2.0] * 4, sync_s=[2.0 * 0.9 * GPU_IDLE_MIN_SYNC_SHARE] * 4),
        gpu_util=idle,
    )
    just_long = rule_kit.process(
        steps=rule_kit.step_rows([2.0] * 4, sync_s=[2.0 * GPU_IDLE_MIN_SYNC_SHARE] * 4),
        gpu_util=idle,
    )
    no_util = rule_kit.process(steps=rule_kit.step_rows([2.0] * 4, sync_s=[1.0] * 4))
    no_sync = rule_kit.process(steps=rule_kit.step_rows([2.0] * 4), gpu_util=idle)
    no_steps = rule_kit.process(gpu_util=idle)
    for pa_ in (short, no_util, no_sync, no_steps):
        assert IDLE.match(rule_kit.facts(processes=[pa_])) == []
    assert IDLE.match(rule_kit.facts()) == []
    [f] = IDLE.match(rule_kit.facts(processes=[just_long]))
    assert _idle(f).other_util_pct is None
    assert "outside it" not in f.title


def test_growth_is_the_fitted_trend_not_the_last_step_minus_the_first() -> None:
    # The healthy colocated job on a loaded CI machine: a trend of 2 ms a step, with a quick
    # first step and a slow last one. Its endpoints read 93 -> 149 ms (56 ms, over a tenth of
    # a 0.5 s step); its trend added 22 ms.
    vals = [0.1 + 0.002 * i for i in range(12)]
    vals[0], vals[-1] = 0.093, 0.149
    gap = rule_kit.judged(SYNC_GAP_S, vals)
    assert gap.verdict.accumulating
    assert vals[-1] - vals[0] >= SLOWDOWN_MATERIAL_SHARE * 0.5
    sync = rule_kit.judged(WEIGHT_SYNC_S, [v + 0.03 for v in vals])
    step = rule_kit.judged(STEP_S, [0.5] * 12)
    [f] = GAPS.match(rule_kit.facts([gap, sync, step]))
    assert f.severity == "info", f.title
    assert "not yet material" in f.title
    # The same trend over a 0.15 s step is material: a warning.
    short = rule_kit.judged(STEP_S, [0.15] * 12)
    [loud] = GAPS.match(rule_kit.facts([gap, sync, short]))
    assert loud.severity == "warning", loud.title


def test_a_slow_first_step_is_no_part_of_the_growth_said() -> None:
    # The healthy demo without markers: its first step's gaps took 1.35 s (set-up), then
    # 250 ms growing 10 ms a step. The growth is said from the judged first step on, never
    # "1.35 s -> 340 ms"; over 10% of a 0.5 s step it is a warning, under it information.
    vals = [1.35] + [0.25 + 0.01 * i for i in range(11)]
    gap = rule_kit.judged(SYNC_GAP_S, vals)
    assert gap.verdict.accumulating and gap.verdict.judged_from >= 1
    sync = rule_kit.judged(WEIGHT_SYNC_S, [v + 0.05 for v in vals])
    [loud] = GAPS.match(rule_kit.facts([gap, sync, rule_kit.judged(STEP_S, [0.5] * 12)]))
    assert loud.severity == "warning", loud.title
    assert _gaps(loud).first_s == pytest.approx(vals[gap.verdict.judged_from])
    assert "1.35 s" not in loud.title
    # 100 ms added: 8% of a 1.25 s step, over MATERIAL_STEP_SHARE yet under the slowdown bar.
    assert MATERIAL_STEP_SHARE * 1.25 < 0.1 < SLOWDOWN_MATERIAL_SHARE * 1.25
    [quiet] = GAPS.match(rule_kit.facts([gap, sync, rule_kit.judged(STEP_S, [1.25] * 12)]))
    assert quiet.severity == "info", quiet.title
