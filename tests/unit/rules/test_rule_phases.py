"""The phase-share rules on hand-built facts: the rollout share of each step with the weight-sync
time (rollout_share), and the weight-sync share of sampled windows and whether it rises
(sampled_phase_share)."""

from __future__ import annotations

import dataclasses

import pytest
import rule_kit

from wsprof.analysis.model import Finding, ProcessAnalysis, WindowSummary
from wsprof.analysis.rules.phases import (
    HIGH_ROLLOUT_SHARE,
    LOW_ROLLOUT_SHARE,
    SAMPLED_SHARE_MIN_RISE,
    SAMPLED_SHARE_MIN_SHIFT,
    SAMPLED_SHARE_MIN_WINDOWS,
    RolloutShare,
    RolloutShareEvidence,
    SampledPhaseShare,
    SampledShareEvidence,
)
from wsprof.contracts.series import STEP_S as STEP_SERIES
from wsprof.contracts.series import WEIGHT_SYNC_S, WINDOW_WEIGHT_SYNC_SHARE
from wsprof.contracts.units import Unit

pytestmark = pytest.mark.pure

N = 8  # steps
STEP_S = 10.0


def _rollout_ev(f: Finding) -> RolloutShareEvidence:
    """A rollout_share finding's evidence, typed."""
    assert isinstance(f.evidence, RolloutShareEvidence)
    return f.evidence


def _sampled_ev(f: Finding) -> SampledShareEvidence:
    """A sampled_phase_share finding's evidence, typed."""
    assert isinstance(f.evidence, SampledShareEvidence)
    return f.evidence


# ----------------------------------------------------------------------------- rollout share


def _stepped(rollout_s: float | None, sync_s: float | None) -> ProcessAnalysis:
    pa: ProcessAnalysis = rule_kit.process(
        steps=rule_kit.step_rows(
            [STEP_S] * N,
            sync_s=[sync_s] * N if sync_s is not None else None,
            rollout_s=[rollout_s] * N if rollout_s is not None else None,
        )
    )
    return pa


def test_rollout_share_gives_the_two_headline_numbers_at_info() -> None:
    found = RolloutShare().match(rule_kit.facts(processes=[_stepped(2.0, 1.0)]))
    assert [(f.kind, f.severity, f.where) for f in found] == [("rollout_share", "info", "rank 0")]
    ev = _rollout_ev(found[0])
    assert ev.steps == N
    assert ev.median_step_s == pytest.approx(STEP_S)
    assert ev.median_rollout_share == pytest.approx(0.2)
    assert ev.median_weight_sync_s == pytest.approx(1.0)
    assert ev.last_weight_sync_s == pytest.approx(1.0)
    assert ev.median_weight_sync_share == pytest.approx(0.1)
    assert ev.median_sync_wait_s is None
    assert list(ev.as_dict()) == [
        "steps",
        "median_step_s",
        "median_rollout_share",
        "median_weight_sync_s",
        "last_weight_sync_s",
        "median_weight_sync_share",
    ]
    assert "rollout 20% of each step" in found[0].title


def test_rollout_share_advice_follows_the_share_thresholds() -> None:
    def advice(rollout_s: float | None) -> str:
        (f,) = RolloutShare().match(rule_kit.facts(processes=[_stepped(rollout_s, 1.0)]))
        return f.next_step

    assert "wait on the rest of the step" in advice(LOW_ROLLOUT_SHARE * STEP_S)
    assert "the rest of the step is training" in advice(LOW_ROLLOUT_SHARE * STEP_S + 0.1)
    assert "the rest of the step is training" in advice(HIGH_ROLLOUT_SHARE * STEP_S - 0.1)
    assert "generation dominates" in advice(HIGH_ROLLOUT_SHARE * STEP_S)
    assert advice(None).startswith("mark rollout")


def test_rollout_share_reports_the_wait_for_slower_ranks_apart_from_the_own_sync() -> None:
    pa = _stepped(2.0, 1.5)
    rows = tuple(dataclasses.replace(r, sync_wait_s=0.5) for r in pa.steps)
    (f,) = RolloutShare().match(rule_kit.facts(processes=[dataclasses.replace(pa, steps=rows)]))
    ev = _rollout_ev(f)
    assert ev.median_weight_sync_s == pytest.approx(1.0)  # 1.5 s less 0.5 s waiting
    assert ev.median_sync_wait_s == pytest.approx(0.5)
    assert list(ev.as_dict())[-1] == "median_sync_wait_s"
    assert "waiting for slower ranks" in f.title


def test_no_rollout_share_without_steps_or_numbers() -> None:
    rule = RolloutShare()
    assert rule.match(rule_kit.facts()) == []
    assert rule.match(rule_kit.facts(processes=[rule_kit.process()])) == []  # no steps
    assert rule.match(rule_kit.facts(processes=[_stepped(None, None)])) == []


# ----------------------------------------------------------------------------- sampled shares


def _windows(
    sync: list[float], rollout: float = 0.3, active: int = 100
) -> tuple[WindowSummary, ...]:
    return tuple(
        WindowSummary(
            t_start_ns=i * rule_kit.S,
            t_end_ns=(i + 1) * rule_kit.S,
            n_samples=active,
            n_active=active,
            top_frame=None,
            common_frame=None,
            phase_shares={},
            rollout_share=rollout,
            weight_sync_share=s,
        )
        for i, s in enumerate(sync)
    )


def _sampled(sync: list[float], rollout: float = 0.3, active: int = 100) -> ProcessAnalysis:
    pa: ProcessAnalysis = rule_kit.process(
        windows=_windows(sync, rollout, active), phase_source="verl"
    )
    return pa


def test_a_weight_sync_share_that_rises_by_the_minimum_shift_is_a_warning() -> None:
    low = 0.25
    rule = SampledPhaseShare()
    # Six windows, k = 2: the first two against the last two.
    at = [low, low, 0.3, 0.4, low + SAMPLED_SHARE_MIN_SHIFT, low + SAMPLED_SHARE_MIN_SHIFT]
    (f,) = rule.match(rule_kit.facts(processes=[_sampled(at)]))
    assert (f.kind, f.severity, f.where) == ("sampled_phase_share", "warning", "rank 0")
    ev = _sampled_ev(f)
    assert (ev.windows, ev.k_windows, ev.phase_source) == (6, 2, "verl")
    assert ev.early_weight_sync_share == pytest.approx(low)
    assert ev.late_weight_sync_share == pytest.approx(low + SAMPLED_SHARE_MIN_SHIFT)
    assert ev.grows is True
    # No judged share series: its keys are left out, and ``grows`` comes last.
    assert ev.shape is None and "shape" not in ev.as_dict()
    assert list(ev.as_dict())[-4:] == [
        "k_windows",
        "early_weight_sync_share",
        "late_weight_sync_share",
        "grows",
    ]
    assert dict(rule.symptom_rows(f))["phase patterns"] == "verl"
    assert "rises per window" in f.title
    below = [*at[:4], at[4] - 0.01, at[5] - 0.01]
    (g,) = rule.match(rule_kit.facts(processes=[_sampled(below)]))
    assert (g.severity, _sampled_ev(g).grows) == ("info", False)


def test_too_few_windows_or_none_active_are_not_judged() -> None:
    rule = SampledPhaseShare()
    # 0 -> 90 % in the last window: judged from SAMPLED_SHARE_MIN_WINDOWS windows, not before.
    enough = [0.0] * (SAMPLED_SHARE_MIN_WINDOWS - 1) + [0.9]
    (f,) = rule.match(rule_kit.facts(processes=[_sampled(enough[1:])]))
    assert f.severity == "info" and _sampled_ev(f).grows is False
    (g,) = rule.match(rule_kit.facts(processes=[_sampled(enough)]))
    assert g.severity == "warning"
    assert rule.match(rule_kit.facts(processes=[_sampled([0.1, 0.9], active=0)])) == []
    assert rule.match(rule_kit.facts(processes=[rule_kit.process()])) == []


def test_windows_no_pattern_matched_say_so() -> None:
    (f,) = SampledPhaseShare().match(rule_kit.facts(processes=[_sampled([0.0] * 4, rollout=0.0)]))
    assert f.severity == "info"
    assert "no sample matched" in f.title
    assert "--phase" in f.next_step


def test_a_share_series_that_grows_by_the_minimum_rise_is_a_warning() -> None:
    # 12 windows rising by less than the shift between thirds (0.096 < 0.2): only the judged
    # series of the shares can say it grows.
    def severity(per_window: float, with_series: bool = True) -> str:
        shares = [0.1 + per_window * i for i in range(12)]
        series = [rule_kit.judged(WINDOW_WEIGHT_SYNC_SHARE, shares, unit=Unit.SHARE)]
        assert series[0].verdict.accumulating
        f = rule_kit.facts(series if with_series else [], [_sampled(shares)])
        (found,) = SampledPhaseShare().match(f)
        keys = list(found.evidence.as_dict())
        assert ("fitted_rise" in keys) == with_series and keys[-1] == "grows"
        return found.severity

    rises_enough = SAMPLED_SHARE_MIN_RISE / 11 + 0.001  # fitted rise over 11 windows
    assert severity(rises_enough) == "warning"
    assert severity(rises_enough, with_series=False) == "info"
    assert severity(SAMPLED_SHARE_MIN_RISE / 11 - 0.001) == "info"


def test_a_rising_share_is_information_where_the_timed_weight_sync_is_flat() -> None:
    sync = [0.1, 0.1, 0.2, 0.3, 0.6, 0.6]
    pa = dataclasses.replace(
        _sampled(sync), steps=rule_kit.step_rows([STEP_S] * N, sync_s=[1.0] * N)
    )
    flat = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N)
    (f,) = SampledPhaseShare().match(rule_kit.facts([flat], [pa]))
    assert f.severity == "info"
    assert _sampled_ev(f).grows is False
    assert "the per-step weight-sync time does not grow materially" in f.title
    growing = rule_kit.judged(WEIGHT_SYNC_S, [1.0 + 0.1 * i for i in range(N)])
    assert [x.severity for x in SampledPhaseShare().match(rule_kit.facts([growing], [pa]))] == [
        "warning"
    ]


def test_a_rising_share_follows_the_per_step_materiality_bar() -> None:
    """A per-step sync that grows 0.7 s over the run is information against 10 s steps (7 % of
    a step, under SLOWDOWN_MATERIAL_SHARE) and a warning against 5 s steps (14 %): the sampled
    share says the same, never a warning where the per-step rule says "watch it" (the healthy
    demo on a loaded CI machine)."""
    sync = [0.1, 0.1, 0.2, 0.3, 0.6, 0.6]
    pa = dataclasses.replace(
        _sampled(sync), steps=rule_kit.step_rows([STEP_S] * N, sync_s=[1.0] * N)
    )
    growing = rule_kit.judged(WEIGHT_SYNC_S, [1.0 + 0.1 * i for i in range(N)])
    assert growing.verdict.accumulating

    def severity(step_s: float) -> str:
        steps = rule_kit.judged(STEP_SERIES, [step_s] * N)
        (f,) = SampledPhaseShare().match(rule_kit.facts([growing, steps], [pa]))
        assert _sampled_ev(f).grows is (f.severity == "warning")
        return f.severity

    assert severity(10.0) == "info"
    assert severity(5.0) == "warning"
