"""The finding rules, one module per family (modelled on ``torch.profiler._pattern_matcher``: a
rule has a ``kind``, a ``description`` and ``match(facts) -> list[Finding]``; thresholds are
module constants with their reason), their registry :data:`RULES` and :func:`run_rules`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from wsprof.analysis.facts import Facts
from wsprof.analysis.model import SEVERITIES, Finding
from wsprof.analysis.rules.base import Rule
from wsprof.analysis.rules.calls.rule import PerCallVsCallCount
from wsprof.analysis.rules.counters import CounterCorrelation, CounterGrowth
from wsprof.analysis.rules.frames import EarlyLateShift, HotFrame
from wsprof.analysis.rules.gaps import Gaps, GpuIdleDuringSync
from wsprof.analysis.rules.hang import CollectiveHang
from wsprof.analysis.rules.overhead import SelfOverhead
from wsprof.analysis.rules.phases import RolloutShare, SampledPhaseShare
from wsprof.analysis.rules.ranks.rule import OutlierRank
from wsprof.analysis.rules.sharing import SharedBucketsKept
from wsprof.analysis.rules.slowdown import AccumulatingSlowdown
from wsprof.analysis.rules.timeline import TimelineParts
from wsprof.analysis.rules.wire import SyncWireRule
from wsprof.analysis.rules.wrapper import BetweenLayers

RULES: tuple[Rule, ...] = (
    CollectiveHang(),
    AccumulatingSlowdown(),
    BetweenLayers(),
    PerCallVsCallCount(),
    SyncWireRule(),
    TimelineParts(),
    CounterCorrelation(),
    SharedBucketsKept(),
    CounterGrowth(),
    Gaps(),
    GpuIdleDuringSync(),
    RolloutShare(),
    HotFrame(),
    EarlyLateShift(),
    SampledPhaseShare(),
    OutlierRank(),
    SelfOverhead(),
)


def run_rules(facts: Facts, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule's findings, most severe first (stable within a severity)."""
    found: list[Finding] = []
    for rule in rules:
        found.extend(rule.match(facts))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    ranked = sorted(found, key=lambda f: -order.get(f.severity, 0))
    return [replace(f, id=f"F{i}") for i, f in enumerate(ranked, 1)]
