"""SelfOverhead (rules/overhead.py) on hand-built facts: wsprof's own cost summed over the
processes, information when nothing was lost, a warning when calls were dropped or lost or
wsprof failed, and no finding without a process."""

from __future__ import annotations

import pytest
import rule_kit

from wsprof.analysis.model import Finding
from wsprof.analysis.rules.overhead import SelfOverhead as SelfOverheadRule
from wsprof.analysis.rules.overhead import SelfOverheadEvidence
from wsprof.contracts.overhead import ProbeBudget, SelfOverhead

pytestmark = pytest.mark.pure

RULE = SelfOverheadRule()


def _ev(f: Finding) -> SelfOverheadEvidence:
    assert isinstance(f.evidence, SelfOverheadEvidence)
    return f.evidence


def test_no_process_is_no_finding() -> None:
    assert RULE.match(rule_kit.facts()) == []
    assert RULE.match(rule_kit.facts(internal_errors=["boom"])) == []


def test_a_clean_process_is_information_with_its_writer_time() -> None:
    own = SelfOverhead(flush_ns_total=1.5e9, recorded=True)
    [f] = RULE.match(rule_kit.facts(processes=[rule_kit.process(self_overhead=own)]))
    assert f.kind == "self_overhead"
    assert f.severity == "info"
    assert f.where is None
    assert f.next_step == "nothing to do"
    assert _ev(f).flush_s == pytest.approx(1.5)
    assert _ev(f).hooks_s == 0.0
    assert _ev(f).hook_ns_per_call == []
    assert _ev(f).probe_share is None
    assert "1.50 s" in f.title


def test_losses_and_errors_are_summed_over_processes_into_a_warning() -> None:
    a = SelfOverhead(dropped_calls=3, lost_calls=1, flush_ns_total=1e9)
    b = SelfOverhead(internal_errors=2, write_errors=4, flush_ns_total=2e9)
    errors = [f"error {i}" for i in range(7)]
    f_ = rule_kit.facts(
        processes=[
            rule_kit.process(self_overhead=a),
            rule_kit.process(label="rank 1", rank=1, self_overhead=b),
        ],
        internal_errors=errors,
    )
    [f] = RULE.match(f_)
    assert f.severity == "warning"
    ev = _ev(f)
    assert (ev.dropped_calls, ev.lost_calls) == (3, 1)
    assert (ev.internal_errors, ev.write_errors) == (2, 4)
    assert ev.flush_s == pytest.approx(3.0)
    assert ev.first_errors == errors[:5]
    assert "dropped 3 calls" in f.title
    assert f.next_step != "nothing to do"


@pytest.mark.parametrize(
    "own",
    [
        SelfOverhead(dropped_calls=1),
        SelfOverhead(lost_calls=1),
        SelfOverhead(internal_errors=1),
        SelfOverhead(write_errors=1),
    ],
)
def test_any_one_loss_or_error_is_a_warning(own: SelfOverhead) -> None:
    [f] = RULE.match(rule_kit.facts(processes=[rule_kit.process(self_overhead=own)]))
    assert f.severity == "warning"


def test_forgotten_async_calls_alone_are_counted_but_stay_information() -> None:
    own = SelfOverhead(forgotten_async=5)
    [f] = RULE.match(rule_kit.facts(processes=[rule_kit.process(self_overhead=own)]))
    assert f.severity == "info"
    assert _ev(f).forgotten_async == 5


def test_hook_and_probe_costs_are_measured_against_steps_and_wall_time() -> None:
    # 2 µs per call over 1,000,000 calls = 2 s of hooks, in 4 steps of 50 s = 1% of step time.
    probes = ProbeBudget(spent_ns=0.5e9, share=0.01)  # 0.5 s of a 50 s wall
    own = SelfOverhead(hook_ns_per_call=2000, probes=probes)
    pa = rule_kit.process(
        steps=rule_kit.step_rows([50.0] * 4), n_calls=1_000_000, self_overhead=own
    )
    unbudgeted = rule_kit.process(
        label="rank 1",
        rank=1,
        self_overhead=SelfOverhead(hook_ns_per_call=500, probes=ProbeBudget(spent_ns=9e9)),
    )
    [f] = RULE.match(rule_kit.facts(processes=[pa, unbudgeted]))
    ev = _ev(f)
    assert ev.hooks_s == pytest.approx(2.0)  # the second process recorded no calls
    assert ev.hook_ns_per_call == [2000, 500]
    assert ev.probe_s == pytest.approx(0.5)  # a probe record without a share is left out
    assert ev.probe_share == pytest.approx(0.01)
    assert "1.00% of step time" in f.title
    assert "2.0 µs per call" in f.title
    assert f.severity == "info"
