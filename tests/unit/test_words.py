"""Closed sets of words (wsprof/contracts/words.py): a member reads as its word wherever a
renderer or a comparison meets it, so JSON and text stay what they were as plain strings."""

from __future__ import annotations

import json

import pytest

from wsprof.analysis.model import SEVERITIES, AnalysisKind, Severity, StepSource, VerdictStatus
from wsprof.trace.salvage import END_STATES, TraceState

pytestmark = pytest.mark.pure


@pytest.mark.parametrize(
    "member", [*Severity, *VerdictStatus, *StepSource, *AnalysisKind, *TraceState]
)
def test_a_member_is_its_word(member: str) -> None:
    word = member.value  # type: ignore[attr-defined]
    assert member == word and hash(member) == hash(word)
    assert f"{member}" == str(member) == "{}".format(member) == word  # noqa: UP032
    assert json.dumps({"k": member}) == json.dumps({"k": word})
    assert {word: 1}[member] == 1  # a table keyed by the plain word finds the member


def test_severities_are_ordered_least_first() -> None:
    assert SEVERITIES == (Severity.INFO, Severity.WARNING, Severity.CRITICAL)
    assert max(["warning", "info"], key=SEVERITIES.index) == "warning"


def test_end_states_are_what_a_trace_can_end_as() -> None:
    assert TraceState.REMOVED not in END_STATES  # watch's own word, never a trace's
    assert {s.value for s in END_STATES} == {"closed", "live", "killed", "unknown"}
