"""The outlier_rank rule on hand-built per-rank series: a rank whose weight sync grows alone, whose
own time in its collectives grows, or whose median weight-sync time is far above its world's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest
import rule_kit

from wsprof.analysis.model import Finding, RankSeries
from wsprof.analysis.rules.ranks.record import OutlierEvidence
from wsprof.analysis.rules.ranks.rule import (
    OUTLIER_MAX_FINDINGS,
    OUTLIER_MAX_SHARE,
    OUTLIER_MIN_EXCESS,
    OUTLIER_MIN_RANKS,
    OUTLIER_OWN_GROWTH_SHARE,
    OUTLIER_Z,
    OutlierRank,
)
from wsprof.contracts.series import BETWEEN_LAYERS_S, WEIGHT_SYNC_S

pytestmark = pytest.mark.pure

N = 10  # steps per rank


def _ev(f: Finding) -> OutlierEvidence:
    """An outlier_rank finding's evidence, typed."""
    assert isinstance(f.evidence, OutlierEvidence)
    return f.evidence


def _rank(
    i: int,
    sync: Sequence[float],
    between: Sequence[float] | None = None,
    world: str | None = None,
    step: float = 10.0,
) -> RankSeries:
    """Rank ``i`` with per-step weight-sync (and between-layers) times, judged; steps of
    ``step`` s."""
    steps = tuple(range(len(sync)))
    own = list(between) if between is not None else [0.001] * len(sync)
    return RankSeries(
        label=f"rank {i}",
        rank=i,
        host="node-a",
        pid=4000 + i,
        step_source="markers",
        steps=steps,
        weight_sync_s=tuple(sync),
        step_s=tuple(step for _ in sync),
        between_layers_s=tuple(own),
        start_s=tuple(step * s for s in steps),
        sync_start_s=tuple(None for _ in sync),
        clock="host",
        sync=rule_kit.judged(WEIGHT_SYNC_S, sync).verdict,
        between=rule_kit.judged(BETWEEN_LAYERS_S, own).verdict,
        median_weight_sync_s=float(np.median(sync)),
        median_step_s=step,
        world=world,
    )


def _flat(level: float = 1.0, n: int = N) -> list[float]:
    """A flat weight sync with a little noise (medians differ a little between ranks)."""
    return [level + 0.002 * ((i * 7) % 5) for i in range(n)]


def _ranks(
    n: int, odd: Mapping[int, Sequence[float]], world: str | None = None, step: float = 10.0
) -> list[RankSeries]:
    return [_rank(i, odd.get(i, _flat(1.0 + 0.001 * i)), world=world, step=step) for i in range(n)]


def _match(ranks: Sequence[RankSeries]) -> list[tuple[str | None, list[str], str]]:
    found = OutlierRank().match(rule_kit.facts(ranks=ranks))
    assert all(f.kind == "outlier_rank" for f in found)
    return [(f.where, _ev(f).reasons, f.severity) for f in found]


def test_a_rank_far_slower_than_the_others_is_an_outlier() -> None:
    ranks = _ranks(8, {5: _flat(2.0)})
    found = OutlierRank().match(rule_kit.facts(ranks=ranks))
    assert [(f.where, f.severity) for f in found] == [("rank 5 (host node-a, pid 4005)", "warning")]
    ev = _ev(found[0])
    assert ev.reasons == ["level"]
    assert ev.robust_z > OUTLIER_Z
    assert ev.median_weight_sync_s is not None
    assert ev.added_s == pytest.approx(ev.median_weight_sync_s - ev.ranks_median_weight_sync_s)
    assert ev.added_s == pytest.approx(1.0, abs=0.01)
    assert (ev.ranks, ev.outlier_ranks, ev.others_flat) == (8, 1, 7)
    assert ev.process_named() == "rank 5" and ev.rank_named() == 5  # the report draws it
    # Without the own growth there is no wrapper key; outlier_ranks comes last.
    keys = list(ev.as_dict())
    assert "wrapper" not in keys and "own_growth_s" not in keys
    assert keys[-2:] == ["added_s", "outlier_ranks"]
    assert "wsprof attach 4005" in found[0].next_step


def test_a_slower_rank_needs_the_minimum_excess_over_the_median() -> None:
    # Ranks that agree exactly make any difference a large z-score: the excess decides.
    def reasons(level: float) -> list[tuple[str | None, list[str], str]]:
        return _match([_rank(i, [level if i == 3 else 1.0] * N) for i in range(8)])

    assert reasons(1.0 + OUTLIER_MIN_EXCESS + 0.01) == [
        ("rank 3 (host node-a, pid 4003)", ["level"], "warning")
    ]
    assert reasons(1.0 + OUTLIER_MIN_EXCESS - 0.01) == []


def test_a_rank_whose_weight_sync_grows_alone_is_an_outlier() -> None:
    doubling = [1.0 + 0.15 * i for i in range(N)]  # 1.0 s -> 2.35 s: more than doubles
    assert _match(_ranks(8, {2: doubling})) == [
        ("rank 2 (host node-a, pid 4002)", ["sync_growth", "level"], "critical")
    ]
    slower = [1.0 + 0.02 * i for i in range(N)]  # 1.0 s -> 1.18 s, median below the excess
    assert _match(_ranks(8, {2: slower}, step=1.5)) == [
        ("rank 2 (host node-a, pid 4002)", ["sync_growth"], "warning")
    ]


def test_a_rank_whose_sync_grows_by_little_of_a_step_is_information() -> None:
    """0.18 s added to steps of 10 s (under SLOWDOWN_MATERIAL_SHARE) is said at info, as the
    run's own slowdown would be; the same growth in steps of 1 s is a warning."""
    slower = [1.0 + 0.02 * i for i in range(N)]
    ranks = _ranks(8, {2: slower}, step=10.0)
    found = OutlierRank().match(rule_kit.facts(ranks=ranks))
    assert [(f.where, _ev(f).reasons, f.severity) for f in found] == [
        ("rank 2 (host node-a, pid 4002)", ["sync_growth"], "info")
    ]
    assert "of a step: watch it, not yet material" in found[0].title
    assert _match(_ranks(8, {2: slower}, step=1.0))[0][2] == "warning"


def test_growth_on_more_than_a_share_of_the_ranks_is_not_one_ranks() -> None:
    n = 8
    most = max(1, int(n * OUTLIER_MAX_SHARE))
    growing = [1.0 + 0.15 * i for i in range(N)]
    assert len(_match(_ranks(n, dict.fromkeys(range(most), growing)))) == most
    assert _match(_ranks(n, dict.fromkeys(range(most + 1), growing))) == []


def test_a_rank_whose_own_time_in_the_collectives_grows_is_named_with_the_wrapper() -> None:
    ranks = _ranks(6, {})
    sync = _flat(1.0)
    growth = OUTLIER_OWN_GROWTH_SHARE * float(np.median(sync))
    per_step = (growth + 0.01) / (N - 1)
    own = [0.001 + per_step * i for i in range(N)]
    ranks[4] = _rank(4, sync, between=own)
    found = OutlierRank().match(rule_kit.facts(ranks=ranks))
    assert [_ev(f).reasons for f in found] == [["own_growth"]]
    ev = _ev(found[0])
    assert ev.own_growth_s == pytest.approx(growth + 0.01)
    assert ev.wrapper is None
    # With the own growth the wrapper is in the JSON, null when none was found, after added_s.
    keys = list(ev.as_dict())
    assert ev.as_dict()["wrapper"] is None
    assert keys[-3:] == ["added_s", "wrapper", "outlier_ranks"]
    assert keys.index("others_median_between_layers_s") < keys.index("added_s")
    assert "around the collectives" in found[0].next_step
    # A rise short of the share of its weight-sync time is not the rank's own.
    per_step = (growth - 0.01) / (N - 1)
    ranks[4] = _rank(4, sync, between=[0.001 + per_step * i for i in range(N)])
    assert _match(ranks) == []


def test_too_few_ranks_or_ranks_of_other_worlds_are_not_compared() -> None:
    slow = _flat(3.0)
    few = _ranks(OUTLIER_MIN_RANKS - 1, {0: slow})
    assert _match(few) == []
    # Three ranks of one world are compared among themselves, not with the other world's.
    assert len(_match(_ranks(OUTLIER_MIN_RANKS, {0: slow}))) == 1
    trainers = _ranks(OUTLIER_MIN_RANKS - 1, {0: slow}, world="world 1")
    engines = _ranks(OUTLIER_MIN_RANKS, {}, world="world 2")
    assert _match([*trainers, *engines]) == []
    one_world = [*_ranks(OUTLIER_MIN_RANKS - 1, {0: slow}), *_ranks(OUTLIER_MIN_RANKS, {})]
    assert len(_match(one_world)) == 1


def test_at_most_the_worst_outliers_are_listed_and_the_rest_counted() -> None:
    n = 4 * (OUTLIER_MAX_FINDINGS + 1)  # enough ranks for OUTLIER_MAX_FINDINGS + 1 outliers
    odd = {i: _flat(2.0 + 0.1 * i) for i in range(OUTLIER_MAX_FINDINGS + 1)}
    found = OutlierRank().match(rule_kit.facts(ranks=_ranks(n, odd)))
    assert len(found) == OUTLIER_MAX_FINDINGS
    added = [_ev(f).added_s for f in found]
    assert added == sorted(added, reverse=True)  # worst first
    assert [_ev(f).rank for f in found] == list(range(OUTLIER_MAX_FINDINGS, 0, -1))
    assert all(_ev(f).outlier_ranks == OUTLIER_MAX_FINDINGS + 1 for f in found)
    assert _ev(found[-1]).more_outlier_ranks == ["rank 0 (host node-a, pid 4000)"]
    assert list(found[-1].evidence.as_dict())[-2:] == ["more_outlier_ranks", "outlier_ranks"]
    assert all("more_outlier_ranks" not in f.evidence.as_dict() for f in found[:-1])
    assert "; 1 more outlier rank (the rank table" in found[-1].title
