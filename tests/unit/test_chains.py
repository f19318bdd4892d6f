"""The chain builder (wsprof/analysis/chains.py) names no rule kind: a new cause is one rule
module. A throwaway cause rule written to a new file here gets its own diagnosis, with the
run's slowdown as its symptom and its own where and next step, with no edit to the builder."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest
import rule_kit

from wsprof.analysis import chains
from wsprof.analysis.chains import diagnose
from wsprof.analysis.facts import Facts
from wsprof.analysis.rules import RULES, run_rules
from wsprof.contracts.series import STEP_S, WEIGHT_SYNC_S

pytestmark = pytest.mark.pure

#: A rule module as a developer would write it: a rule whose finding names a cause, and that
#: cause's chain (where, next step), importing only what a rule module may import.
THROWAWAY = """
from wsprof.analysis.chain import Cause, ChainContext, Draft
from wsprof.analysis.evidence import FreeEvidence
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Link
from wsprof.analysis.rules.base import Rule


class LockstepCause(Cause):
    kind = "lockstep_barrier"
    cause = "lockstep"
    order = 50

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        return Draft(
            self.cause,
            "a barrier before every bucket waits for the slowest engine",
            [f],
            where=Link("where", f"barrier at {f.where}", (f.id,)),
            places=("bucket_barrier",),
            explains=1.0,
            process=ctx.process,
        )

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        return "barrier once per sync, not once per bucket; then measure again"


class LockstepRule(Rule):
    kind = "lockstep_barrier"
    description = "a barrier before every bucket"
    causes = (LockstepCause(),)

    def match(self, facts: Facts) -> list[Finding]:
        found = Finding(self.kind, "warning", "a barrier per", FreeEvidence(), "sync.py:12", "")
        return [found]
"""


def _module(tmp_path: Path) -> ModuleType:
    path = tmp_path / "lockstep_rule.py"
    path.write_text(THROWAWAY)
    spec = importlib.util.spec_from_file_location("lockstep_rule", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lockstep_rule"] = mod
    spec.loader.exec_module(mod)
    return mod


def _slowing_sync() -> Facts:
    sync = [1.0 + 0.4 * i for i in range(10)]
    steps = rule_kit.step_rows([s + 2.0 for s in sync], sync_s=sync)
    return rule_kit.facts(
        [rule_kit.judged(WEIGHT_SYNC_S, sync), rule_kit.judged(STEP_S, [s + 2 for s in sync])],
        [rule_kit.process(steps=steps, n_calls=100)],
    )


def test_a_new_cause_rule_in_one_module_gets_its_diagnosis(tmp_path: Path) -> None:
    facts = _slowing_sync()
    before = diagnose(run_rules(facts), facts)
    assert [d.cause for d in before][:1] == ["unexplained"], [d.title for d in before]

    rules = (*RULES, _module(tmp_path).LockstepRule())
    findings = run_rules(facts, rules)
    got = diagnose(findings, facts, rules)
    d = got[0]
    assert d.cause == "lockstep", [x.title for x in got]
    assert d.title == "a barrier before every bucket waits for the slowest engine"
    assert d.where is not None and d.where.text == "barrier at sync.py:12"
    assert d.next_step == "barrier once per sync, not once per bucket; then measure again"
    assert d.symptom_series == WEIGHT_SYNC_S  # the run's slowdown is its symptom
    kinds = {f.id: f.kind for f in findings}
    assert {kinds[i] for i in d.finding_ids} == {"lockstep_barrier", "accumulating_slowdown"}
    assert "unexplained" not in [x.cause for x in got]


def test_the_chain_builder_names_no_rule_kind() -> None:
    source = inspect.getsource(chains)
    kinds = {r.kind for r in RULES} | {c.kind for r in RULES for c in r.causes}
    kinds |= {k for r in RULES for k, _ in r.roles}
    named = sorted(k for k in kinds if f'"{k}"' in source or f"'{k}'" in source)
    assert not named, named


def test_a_plug_in_slowdown_without_a_typed_record_is_still_the_symptom(tmp_path: Path) -> None:
    """A rule of a plug-in that gives its evidence as plain keys (FreeEvidence) takes the
    slowdown role when it has the role's keys: its finding is the chain's symptom."""
    from wsprof.analysis.evidence import FreeEvidence
    from wsprof.analysis.model import Finding, Severity

    facts = _slowing_sync()
    plain = Finding(
        "accumulating_slowdown",
        Severity.WARNING,
        "weight sync grows",
        FreeEvidence({"series": WEIGHT_SYNC_S, "slope_per_step": 0.4, "confidence": 0.9}),
        None,
        "",
        id="F1",
    )
    got = diagnose([plain], facts)
    assert got and got[0].cause == "unexplained" and got[0].symptom_series == WEIGHT_SYNC_S
