"""A real 4-process gloo job in which one rank's wrapper around its collectives gets slower every
step: the outlier_rank finding names that rank (the others' weight sync grows too, since they
wait for it in each broadcast; only its own time in the collectives tells it apart)."""

from __future__ import annotations

from pathlib import Path

from helpers import TARGETS, run_ranks

from wsprof.analysis.run import analyze_path

WORLD = 4
SLOW_RANK = 2


def test_outlier_rank_names_the_slow_rank(tmp_path: Path) -> None:
    run_ranks(TARGETS / "outlier_rank.py", WORLD, str(tmp_path), str(SLOW_RANK), timeout=60)
    a = analyze_path(str(tmp_path))
    assert [r.rank for r in a.ranks] == list(range(WORLD))
    assert {r.clock for r in a.ranks} == {"host"}  # one machine: one monotonic clock
    found = [f for f in a.findings if f.kind == "outlier_rank"]
    assert [f.evidence.as_dict()["rank"] for f in found] == [SLOW_RANK], [f.title for f in found]
    f = found[0]
    assert "own_growth" in f.evidence.as_dict()["reasons"]
    assert f.evidence.as_dict()["pid"] == a.ranks[SLOW_RANK].pid and f.where is not None
    assert f.where.startswith(f"rank {SLOW_RANK} (host ")
    # Its own time grows by about 12 calls x 2 ms per step; the others' stays flat.
    assert f.evidence.as_dict()["between_slope_s_per_step"] > 0.012
    assert "probing_wrapper" in (f.evidence.as_dict()["wrapper"] or "")
