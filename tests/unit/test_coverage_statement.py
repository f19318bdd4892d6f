"""Coverage statements built from plain records: ops named, the likely issuer only from
evidence, the limit apart from gaps, and no "before the first step" for an unmarked run."""

from __future__ import annotations

import pytest

from wsprof.analysis.coverage import ddp_reducer
from wsprof.analysis.coverage_model import Coverage, GroupCoverage

pytestmark = pytest.mark.pure


def _group(likely: bool, first: int = 0, last: int = 3) -> GroupCoverage:
    return GroupCoverage(
        "rank 0",
        0,
        "0",
        "gloo",
        25,
        19,
        first,
        last,
        (0, 1, 2, 3) if first >= 0 else (),
        recorded_ops=(("broadcast", 17), ("all_gather", 2)),
        likely=ddp_reducer("0") if likely else None,
    )


def test_ddp_evidence_names_the_reducer_and_is_a_limit() -> None:
    g = _group(likely=True)
    assert g.is_limit
    s = g.statement
    assert "seen: broadcast 17, all_gather 2" in s
    assert "likely all_reduce: 6 issued during backward" in s
    assert "DDP's C++ reducer" in s and "a limit, not a gap" in s
    cov = Coverage((g,))
    assert cov.status == "incomplete" and cov.incomplete == (g,) and cov.gaps == ()


def test_without_evidence_no_issuer_is_guessed_and_it_is_a_gap() -> None:
    g = _group(likely=False)
    assert not g.is_limit
    assert "likely" not in g.statement
    assert "no evidence of their issuer in the trace" in g.statement
    assert Coverage((g,)).gaps == (g,)


def test_unmarked_run_is_not_said_to_be_before_the_first_step() -> None:
    s = _group(likely=True, first=-1, last=-1).statement
    assert "before the first step" not in s
    assert "over the whole run (no step marked while recording" in s
