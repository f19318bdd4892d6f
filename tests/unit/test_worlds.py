"""Worlds and roles from hand-built trace metadata (pure tier): grouping by token, by store
and size with repeated ranks split, and the role rules (cross-world group source, modules,
command line)."""

from __future__ import annotations

from typing import Any

import pytest

from wsprof.analysis.worlds import find_worlds

pytestmark = pytest.mark.pure


def _meta(
    pid: int,
    rank: int,
    token: str | None,
    store: str = "h:1",
    size: int = 2,
    groups: list[dict[str, Any]] | None = None,
    modules: list[str] | None = None,
    argv: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "pid": pid,
        "rank": rank,
        "argv": argv or ["job.py"],
        "modules": modules or [],
        "world": {"rank": rank, "size": size, "store": store, "token": token},
        "groups": groups or [],
    }


def _update_group(rank: int) -> dict[str, Any]:
    return {
        "name": "slime-pp_0",
        "rank": rank,
        "size": 3,
        "store": "h:1",
        "token": "upd",
        "default": False,
    }


def test_two_worlds_by_token_and_cross_group_roles() -> None:
    metas = [
        _meta(13, 0, "E", groups=[_update_group(1)]),
        _meta(14, 1, "E", groups=[_update_group(2)]),
        _meta(11, 0, "T", groups=[_update_group(0)]),
        _meta(12, 1, "T"),
    ]
    worlds, idx = find_worlds(metas)
    assert [w.role for w in worlds] == ["trainer", "inference engine"]
    assert worlds[0].pids == (11, 12) and worlds[1].pids == (13, 14)
    assert idx == [1, 1, 0, 0]
    assert "slime-pp_0" in worlds[0].evidence[0]


def test_store_and_size_split_where_ranks_repeat() -> None:
    metas = [_meta(p, r, None) for p, r in ((1, 0), (2, 1), (3, 0), (4, 1))]
    worlds, _ = find_worlds(metas)
    assert sorted(w.pids for w in worlds) == [(1, 2), (3, 4)]


def test_modules_decide_without_a_cross_group() -> None:
    metas = [
        _meta(1, 0, "A", modules=["sglang"]),
        _meta(2, 0, "B", modules=["megatron"]),
    ]
    worlds, _ = find_worlds(metas)
    assert [(w.role, w.pids) for w in worlds] == [("trainer", (2,)), ("inference engine", (1,))]


def test_command_line_words_and_no_evidence() -> None:
    worlds, _ = find_worlds([_meta(1, 0, "A", argv=["vllm_server.py"]), _meta(2, 0, "B")])
    assert {w.pids: w.role for w in worlds} == {(1,): "inference engine", (2,): "other"}
    one, _ = find_worlds([_meta(1, 0, "A"), _meta(2, 1, "A")])
    assert [w.role for w in one] == ["trainer"] and "only world" in one[0].evidence[-1]


def test_legacy_traces_are_one_world() -> None:
    worlds, idx = find_worlds([{"pid": 1, "rank": 0}, {"pid": 2, "rank": 1}])
    assert len(worlds) == 1 and idx == [0, 0]
