"""AccumulatingSlowdown (rules/slowdown.py) on hand-built facts: a per-step time that grows is
critical once it doubled, a warning below, information while the growth is small against a step
or explained by the workload; flat, missing and non-duration series give no finding."""

from __future__ import annotations

import pytest
import rule_kit

from wsprof.analysis.model import Finding, WrapperFact
from wsprof.analysis.rules.base import CRITICAL_GROWTH_RATIO, SLOWDOWN_MATERIAL_SHARE
from wsprof.analysis.rules.slowdown import AccumulatingSlowdown, SlowdownEvidence
from wsprof.contracts.series import STEP_S, WEIGHT_SYNC_S

pytestmark = pytest.mark.pure

RULE = AccumulatingSlowdown()
SITE = "sync_weights (trainer.py:42)"


def _ev(f: Finding) -> SlowdownEvidence:
    assert isinstance(f.evidence, SlowdownEvidence)
    return f.evidence


def _wrapper(api: str = "dist.broadcast") -> WrapperFact:
    return WrapperFact(
        api=api,
        kind="name",
        qualname="probe_free_memory",
        module="user.mod",
        file="user/mod.py",
        line=7,
        wraps=("torch.distributed.broadcast",),
        after_patch=False,
        between_s=3.0,
    )


def _linear(first: float, last: float, n: int = 10) -> list[float]:
    return [first + (last - first) * i / (n - 1) for i in range(n)]


def test_a_weight_sync_that_more_than_doubles_is_critical_at_the_sync_site() -> None:
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, 5.5))  # +0.5 s per step
    f = rule_kit.facts([sync], [rule_kit.process(sync_site=SITE)])
    [finding] = RULE.match(f)
    assert finding.kind == "accumulating_slowdown"
    assert finding.severity == "critical"
    assert finding.where == SITE
    ev = _ev(finding)
    assert ev.series == WEIGHT_SYNC_S
    assert ev.first == pytest.approx(1.0)
    assert ev.last == pytest.approx(5.5)
    assert ev.growth_ratio == pytest.approx(5.5)
    assert ev.slope_per_step == pytest.approx(0.5)
    assert ev.added_s == pytest.approx(0.5 * 9)
    assert ev.projection is not None
    assert "projection" in ev.as_dict()


def test_growth_just_below_the_critical_ratio_is_a_warning_and_at_it_critical() -> None:
    below = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, 0.97 * CRITICAL_GROWTH_RATIO))
    at = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, CRITICAL_GROWTH_RATIO))
    [warn] = RULE.match(rule_kit.facts([below]))
    [crit] = RULE.match(rule_kit.facts([at]))
    assert warn.severity == "warning"
    assert _ev(warn).growth_ratio < CRITICAL_GROWTH_RATIO
    assert crit.severity == "critical"
    assert _ev(crit).growth_ratio == pytest.approx(CRITICAL_GROWTH_RATIO)


def test_growth_small_against_the_step_is_information_and_material_growth_is_not() -> None:
    sync = rule_kit.judged(WEIGHT_SYNC_S, _linear(1.0, 5.5))  # adds 4.5 s over the run
    added = 4.5
    big_step = rule_kit.judged(STEP_S, [1.05 * added / SLOWDOWN_MATERIAL_SHARE] * 10)
    small_step = rule_kit.judged(STEP_S, [0.95 * added / SLOWDOWN_MATERIAL_SHARE] * 10)
    quiet = RULE.match(rule_kit.facts([sync, big_step]))
    loud = RULE.match(rule_kit.facts([sync, small_step]))
    assert [x.severity for x in quiet] == ["info"]
    assert "not yet material" in quiet[0].title
    assert [x.severity for x in loud] == ["critical"]


def test_a_slow_first_step_is_left_out_of_the_growth() -> None:
    vals = [3.0] + _linear(1.0, 2.0, 11)
    sync = rule_kit.judged(WEIGHT_SYNC_S, vals)
    assert sync.verdict.judged_from == 1
    [finding] = RULE.match(rule_kit.facts([sync]))
    assert _ev(finding).first == pytest.approx(1.0)  # not the slow 3.0
    assert _ev(finding).growth_ratio == pytest.approx(2.0)
    assert "after a slow first" in finding.title


def test_a_step_time_names_the_wrapper_not_the_sync_site_and_workload_makes_it_info() -> None:
    tokens = [1000.0 + 100.0 * i for i in range(10)]
    step = rule_kit.judged(STEP_S, [t / 1000.0 for t in tokens])  # flat time per token
    work = rule_kit.judged("num_tokens", tokens)
    pa = rule_kit.process(sync_site=SITE)
    [alone] = RULE.match(rule_kit.facts([step], [pa]))
    assert alone.severity == "warning"
    assert alone.where is None  # no wrapper; the sync site is only for the weight sync
    [wrapped] = RULE.match(rule_kit.facts([step], [pa], [_wrapper()]))
    assert wrapped.where == _wrapper().label()
    [worked] = RULE.match(rule_kit.facts([step, work], [pa]))
    assert worked.severity == "info"
    workload = _ev(worked).workload
    assert workload is not None
    assert workload.series == "num_tokens"
    assert worked.evidence.as_dict()["workload"]["series"] == "num_tokens"
    # The weight sync is never explained away by the workload.
    sync = rule_kit.judged(WEIGHT_SYNC_S, [t / 1000.0 for t in tokens])
    [kept] = RULE.match(rule_kit.facts([sync, work], [pa]))
    assert kept.severity == "warning"
    assert _ev(kept).workload is None
    assert "workload" not in kept.evidence.as_dict()


def test_flat_missing_and_non_duration_series_give_no_finding() -> None:
    assert RULE.match(rule_kit.facts()) == []
    flat = rule_kit.judged(WEIGHT_SYNC_S, [1.0, 1.01] * 5)
    assert RULE.match(rule_kit.facts([flat], [rule_kit.process()])) == []
    rate = rule_kit.judged("perf/time_per_token", _linear(1.0, 5.5))
    assert rate.verdict.accumulating
    assert RULE.match(rule_kit.facts([rate], time_series=("perf/time_per_token",))) == []
