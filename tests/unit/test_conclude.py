"""conclude_on_cause_rank on hand-built facts: where the primary's slowdown is its waits for
another rank of its world, the cause is read and named on that rank (issue 28; the CI run where
AReaL's rank 0 all-gathers, waiting for a probed rank 1, read 'each all_gather call gets slower
in the backend' on rank 0)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import rule_kit

from wsprof.analysis.conclude import conclude_on_cause_rank
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import ProcessAnalysis, RankSeries, WrapperFact
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    COLLECTIVE_CALLS,
    STEP_S,
    SYNC_GAP_S,
    WEIGHT_SYNC_S,
    op_median_key,
)
from wsprof.contracts.units import Unit

pytestmark = pytest.mark.pure

N = 12


def _linear(first: float, slope: float) -> list[float]:
    return [first + slope * i for i in range(N)]


def _flat(level: float) -> list[float]:
    return [level + 0.0005 * ((i * 7) % 5) for i in range(N)]


def _probe(api: str) -> WrapperFact:
    return WrapperFact(
        api=api,
        kind="name",
        qualname="install_memory_probe.<locals>.probed",
        module="job_areal",
        file="job_areal.py",
        line=402,
        wraps=(),
        after_patch=True,
        between_s=2.0,
    )


def _row(label: str, rank: int, sync: Sequence[float], between: Sequence[float]) -> RankSeries:
    gap = [0.01] * N
    return RankSeries(
        label=label,
        rank=rank,
        host="node-a",
        pid=4000 + rank,
        step_source="updates",
        steps=tuple(range(N)),
        weight_sync_s=tuple(sync),
        step_s=tuple(2.0 for _ in sync),
        between_layers_s=tuple(between),
        start_s=tuple(2.0 * s for s in range(N)),
        sync_start_s=tuple(None for _ in sync),
        clock="host",
        sync=rule_kit.judged(WEIGHT_SYNC_S, sync).verdict,
        between=rule_kit.judged(BETWEEN_LAYERS_S, between).verdict,
        median_weight_sync_s=float(np.median(sync)),
        median_step_s=2.0,
        sync_gap_s=tuple(gap),
        gap=rule_kit.judged(SYNC_GAP_S, gap).verdict,
        world="world 1",
    )


def _facts(rank1_between: Sequence[float]) -> tuple[Facts, dict[str, list[WrapperFact]]]:
    """Trainer rank 0 (the primary, no wrapper): its sync grows, its all-gathers each slower,
    its own time flat; trainer rank 1: ``rank1_between`` in its wrapper on the names."""
    sync = _linear(0.2, 0.03)
    rows = rule_kit.step_rows([2.0] * N, sync_s=sync, between_s=_flat(0.005), gap_s=[0.01] * N)
    mine: ProcessAnalysis = rule_kit.process("trainer rank 0", 0, steps=rows, n_calls=185 * N)
    theirs = rule_kit.process(
        "trainer rank 1",
        1,
        steps=rule_kit.step_rows([2.0] * N, sync_s=sync, between_s=rank1_between, gap_s=[0.01] * N),
        n_calls=185 * N,
    )
    series = [
        rule_kit.judged(WEIGHT_SYNC_S, sync),
        rule_kit.judged(STEP_S, [2.0] * N),
        rule_kit.judged(BETWEEN_LAYERS_S, _flat(0.005)),
        rule_kit.judged(COLLECTIVE_CALLS, [185.0] * N, unit=Unit.COUNT),
        rule_kit.judged(op_median_key("all_gather"), _linear(500, 150), unit=Unit.MICROSECONDS),
    ]
    ranks = [
        _row("trainer rank 0", 0, sync, _flat(0.005)),
        _row("trainer rank 1", 1, sync, rank1_between),
    ]
    facts = rule_kit.facts(series, [mine, theirs], ranks=ranks)
    return facts, {"trainer rank 1": [_probe("dist.barrier"), _probe("dist.broadcast")]}


def test_calls_that_wait_for_a_growing_wrapper_on_another_rank_are_named_there() -> None:
    facts, wrappers = _facts(_linear(0.005, 0.03))
    notes: list[str] = []
    _, diagnoses = conclude_on_cause_rank(facts, wrappers, notes)
    top = diagnoses[0]
    assert top.process == "trainer rank 1", [(d.process, d.title) for d in diagnoses]
    assert top.cause == "wrapper", top.title
    assert "probed" in top.title or (top.where is not None and "probed" in top.where.text)
    # No diagnosis blames the backend for rank 0's waits.
    assert not [d for d in diagnoses if d.cause == "per_call"], [d.title for d in diagnoses]
    assert any("trainer rank 1" in n and "waits for it" in n for n in notes), notes


def test_calls_slower_with_no_rank_growing_stay_the_backends() -> None:
    facts, wrappers = _facts(_flat(0.005))
    notes: list[str] = []
    _, diagnoses = conclude_on_cause_rank(facts, wrappers, notes)
    top = diagnoses[0]
    assert (top.process, top.cause) == ("trainer rank 0", "per_call"), top.title
    assert "gets slower in the backend" in top.title
    assert notes == []
