"""Issue 3: every way a collective is reached is recorded once, by the right layer.

One real 3-rank gloo job (``tests/targets/hook_cases.py``) runs every scenario, each in its own
``wsprof.patch()``/``wsprof.unpatch()`` cycle with its own trace; each test reads what every
rank saw from inside (``result-RANK.json``) and what its trace recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TARGETS, run_ranks

from wsprof.trace.model import CallTable, ProcessTrace
from wsprof.trace.reader import read_trace

WORLD = 3
TARGET = TARGETS / "hook_cases.py"
#: Must match hook_cases.py.
PROBE_SLEEP_NS = 2_000_000
N_WRAPPED_CALLS = 5
N_THREADS = 3
N_PER_THREAD = 200


@dataclass
class Rank:
    """One rank's view of one scenario."""

    rank: int
    res: dict[str, Any]
    trace: ProcessTrace

    @property
    def calls(self) -> CallTable:
        return self.trace.calls


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hook_cases")
    run_ranks(TARGET, WORLD, str(out))
    return out


def _ranks(job: Path, scenario: str) -> list[Rank]:
    ranks = []
    for r in range(WORLD):
        res = json.loads((job / f"result-{r}.json").read_text())[scenario]
        assert "exception" not in res, f"rank {r}, {scenario}:\n{res['exception']}"
        assert res["trace"], f"rank {r}, {scenario}: patch() returned no trace"
        ranks.append(Rank(r, res, read_trace(res["trace"])))
    return ranks


def _bc_value(rank: int, plus: int = 0) -> list[float]:
    """What hook_cases.py broadcasts from ``rank``."""
    return [float(10 * rank + i + plus) for i in range(4)]


def _between_ns(calls: CallTable) -> np.ndarray:
    return calls.t_end_ns - calls.t_start_ns - calls.backend_ns


def _rows(calls: CallTable) -> list[tuple[str, str, str]]:
    return list(zip(calls.layer.tolist(), calls.api.tolist(), calls.op.tolist()))


# 1 -------------------------------------------------------------------------------------------
def test_reference_captured_before_patch_is_recorded_by_the_backend_layer(job: Path) -> None:
    for rk in _ranks(job, "captured"):
        assert rk.res["still_original"] and rk.res["patched_name_differs"]
        assert rk.res["result"] == _bc_value(0)
        calls = rk.calls
        assert _rows(calls) == [("backend", "ProcessGroup.broadcast", "broadcast")], (
            f"rank {rk.rank}: {_rows(calls)}"
        )
        assert calls.n_backend[0] >= 1 and calls.bytes[0] == 16
        assert calls.error[0] is None
        site = rk.trace.sites[int(calls.site[0])]
        assert site.file == str(TARGET) and site.function == "captured", site


# 2 -------------------------------------------------------------------------------------------
def test_wrapper_installed_after_patch_each_call_recorded_once(job: Path) -> None:
    for rk in _ranks(job, "wrapped_after"):
        calls = rk.calls
        rows = _rows(calls)
        assert len(rows) == 2 * N_WRAPPED_CALLS, f"rank {rk.rank}: {rows}"
        assert rows.count(("api", "dist.broadcast", "broadcast")) == N_WRAPPED_CALLS, rows
        assert (
            rows.count(("api", "dist.all_gather_into_tensor", "all_gather_into_tensor"))
            == N_WRAPPED_CALLS
        ), rows
        assert (calls.n_backend >= 1).all(), calls.n_backend.tolist()
        for i, (bc, full) in enumerate(rk.res["results"]):
            assert bc == _bc_value(i % WORLD, i)
            assert full == sum((_bc_value(r) for r in range(WORLD)), [])


def test_wrapper_installed_after_patch_is_inside_the_recorded_call(job: Path) -> None:
    """Issue 28: the framework's wrapper assigned after ``patch()`` goes under a fresh API hook
    at once (the hook it calls passes through), so each row starts before the wrapper's probe
    and ends after the wrapper returns: the probe's cost is between layers."""
    for rk in _ranks(job, "wrapped_after"):
        for api, key in (
            ("dist.broadcast", "bc_windows"),
            ("dist.all_gather_into_tensor", "ag_windows"),
        ):
            sel = rk.calls.take(rk.calls.api == api)
            windows = rk.res[key]
            assert len(windows) == len(sel) == N_WRAPPED_CALLS
            for (w0, w1), t0, t1 in zip(windows, sel.t_start_ns.tolist(), sel.t_end_ns.tolist()):
                assert t0 <= w0 and w0 + PROBE_SLEEP_NS <= w1 <= t1, (rk.rank, api, w0, w1, t0, t1)
            assert (_between_ns(sel) >= PROBE_SLEEP_NS).all(), _between_ns(sel).tolist()


def test_wrapper_installed_after_patch_survives_unpatch_and_is_reported(job: Path) -> None:
    for rk in _ranks(job, "wrapped_after"):
        res = rk.res
        assert res["still_wrapper_after_unpatch"], "unpatch() removed the framework's wrapper"
        assert res["chain_reaches_genuine"] == {"broadcast": True, "all_gather_into_tensor": True}
        assert res["wrapper_ran_after_unpatch"]
        bc, full = res["after_unpatch_results"]
        assert bc == _bc_value(0)
        assert full == sum((_bc_value(r) for r in range(WORLD)), [])
        rewrapped = [e.detail for e in rk.trace.events if e.kind == "rewrapped"]
        assert any(d.endswith(".broadcast") for d in rewrapped), rewrapped
        assert any(d.endswith(".all_gather_into_tensor") for d in rewrapped), rewrapped
        # The re-wrap is named in the wrapper audit, as found after patch().
        facts = [json.loads(e.detail) for e in rk.trace.events if e.kind == "wrapper"]
        late = {f["api"]: f for f in facts if f.get("after_patch")}
        assert {"dist.broadcast", "dist.all_gather_into_tensor"} <= set(late), facts
        assert late["dist.broadcast"]["qualname"].endswith("framework_after")
        assert late["dist.broadcast"]["file"].endswith("hook_cases.py")


# 3 -------------------------------------------------------------------------------------------
def _probe_lines() -> set[int]:
    """The decorator line and the ``def`` line of the probe wrapper in the target script."""
    lines = TARGET.read_text().splitlines()
    marker = next(i for i, s in enumerate(lines, 1) if "PROBE-WRAPPER" in s)
    assert lines[marker].lstrip().startswith("def probe_before(")
    return {marker, marker + 1}


def test_wrapper_installed_before_patch_is_named_timed_and_put_back(job: Path) -> None:
    for rk in _ranks(job, "wrapped_before"):
        assert rk.res["probe_restored"], "unpatch() did not put the framework's wrapper back"
        for i, got in enumerate(rk.res["results"]):
            assert got == _bc_value(i % WORLD, i)
        facts = [json.loads(e.detail) for e in rk.trace.events if e.kind == "wrapper"]
        named = [f for f in facts if f.get("qualname") == rk.res["probe_qualname"]]
        assert named, f"rank {rk.rank}: no wrapper event for the probe: {facts}"
        fact = named[0]
        assert fact["file"] == str(TARGET) and fact["line"] in _probe_lines(), fact
        assert fact["module"] == "__main__", fact
        assert fact["wraps"] and fact["wraps"][0].endswith("broadcast"), fact
        calls = rk.calls
        assert _rows(calls) == [("api", "dist.broadcast", "broadcast")] * N_WRAPPED_CALLS
        assert (calls.n_backend >= 1).all()
        between = _between_ns(calls)
        assert (between >= PROBE_SLEEP_NS).all(), f"rank {rk.rank}: {between.tolist()} ns"


# 4 -------------------------------------------------------------------------------------------
def _split(calls: CallTable, marks: list[int]) -> list[CallTable]:
    edges = [np.iinfo(np.int64).min, *marks, np.iinfo(np.int64).max]
    return [
        calls.take((calls.t_start_ns >= a) & (calls.t_start_ns < b))
        for a, b in zip(edges, edges[1:])
    ]


def test_plain_forwarding_group_is_recorded_by_the_backend_layer(job: Path) -> None:
    for rk in _ranks(job, "forwarding_group"):
        assert rk.res["plain_result"] == _bc_value(0)
        plain = _split(rk.calls, rk.res["t_between"])[0]
        assert _rows(plain) == [("backend", "ProcessGroup.broadcast", "broadcast")], _rows(plain)
        assert plain.grp.tolist() == [rk.res["inner_name"]]
        assert plain.n_backend[0] >= 1 and plain.bytes[0] == 16


def test_processgroup_subclass_is_recorded_once(job: Path) -> None:
    """torch 2.13: ``class G(dist.ProcessGroup)`` constructs with ``(rank, size)``; called
    directly its forwarding ``broadcast`` reaches the hooked inner group (a backend row);
    ``dist.broadcast(group=G)`` is refused until c10d knows the group, then calls the override
    (one API row with the inner backend call attributed)."""
    for rk in _ranks(job, "forwarding_group"):
        res = rk.res
        assert res["sub_direct_result"] == _bc_value(0)
        assert res["sub_api_result"] == _bc_value(0)
        assert res["sub_forwarded"] == 2, "dist.broadcast did not call the override"
        assert "not initialized" in str(res["sub_unregistered_error"])
        _, direct, refused, via_api = _split(rk.calls, res["t_between"])
        assert _rows(direct) == [("backend", "ProcessGroup.broadcast", "broadcast")]
        assert _rows(refused) == [("api", "dist.broadcast", "broadcast")]
        assert refused.error.tolist() == ["ValueError"] and refused.n_backend[0] == 0
        assert _rows(via_api) == [("api", "dist.broadcast", "broadcast")], _rows(via_api)
        assert via_api.error[0] is None and via_api.n_backend[0] >= 1


# 5 -------------------------------------------------------------------------------------------
def test_threads_each_on_their_own_group_are_attributed_per_thread(job: Path) -> None:
    for rk in _ranks(job, "threads"):
        res = rk.res
        assert res["errors"] == []
        assert [t["sum"] for t in res["threads"]] == res["expected_sums"]
        assert len({t["grp"] for t in res["threads"]}) == N_THREADS
        calls = rk.calls
        assert len(calls) == N_THREADS * N_PER_THREAD, f"rank {rk.rank}: {len(calls)} rows"
        for t in res["threads"]:
            mine = calls.take(calls.thread == t["ident"])
            assert len(mine) == N_PER_THREAD, (rk.rank, t, len(mine))
            assert set(_rows(mine)) == {("api", "dist.all_reduce", "all_reduce")}
            assert (mine.n_backend >= 1).all(), mine.n_backend.tolist()
            dur = mine.t_end_ns - mine.t_start_ns
            assert (mine.backend_ns <= dur).all()
            assert set(mine.grp.tolist()) == {t["grp"]}, (t, set(mine.grp.tolist()))


# 6 -------------------------------------------------------------------------------------------
def test_object_collectives_and_batches_are_one_logical_call(job: Path) -> None:
    for rk in _ranks(job, "logical_calls"):
        res = rk.res
        assert res["broadcast_object_list"] == [{"from": 0, "x": [0, 1, 2, 3, 4]}, "two"]
        assert res["all_gather_object"] == [{"r": r} for r in range(WORLD)]
        assert res["batch_recv"] == res["expected_batch_recv"] and res["n_reqs"] >= 1
        calls = rk.calls
        assert _rows(calls) == [
            ("api", "dist.broadcast_object_list", "broadcast"),
            ("api", "dist.all_gather_object", "all_gather"),
            ("api", "dist.batch_isend_irecv", "batch_p2p"),
        ], f"rank {rk.rank}: {_rows(calls)}"
        # Each is two backend calls in torch: sizes then payload; one send and one recv.
        assert (calls.n_backend > 1).all(), calls.n_backend.tolist()
        assert calls.is_async.tolist() == [False, False, True]


# 7 -------------------------------------------------------------------------------------------
def test_coalescing_manager_results_unchanged(job: Path) -> None:
    for rk in _ranks(job, "coalescing"):
        assert rk.res["patched"] == rk.res["unpatched"]
        assert rk.res["unpatched"][0] == [float(sum(r + i for r in range(WORLD))) for i in range(4)]


def test_coalescing_manager_is_one_logical_call(job: Path) -> None:
    """Desired: the coalesced block is one row with its backend call attributed, not two
    empty API rows plus an orphan backend row for ``ProcessGroup.allreduce_coalesced``."""
    for rk in _ranks(job, "coalescing"):
        calls = rk.calls
        rows = _rows(calls)
        detail = f"rank {rk.rank}: rows {rows}, n_backend {calls.n_backend.tolist()}"
        assert ("backend", "ProcessGroup.allreduce_coalesced", "all_reduce") not in rows, detail
        assert len(rows) == 1, detail
        assert rows[0][2] in ("all_reduce", "coalesced"), detail
        assert calls.n_backend[0] >= 1, detail


# 8 -------------------------------------------------------------------------------------------
def test_async_op_row_is_async_and_results_unchanged(job: Path) -> None:
    for rk in _ranks(job, "async_op"):
        assert rk.res["patched"] == rk.res["unpatched"]
        assert rk.res["patched"][1] != "NoneType"
        calls = rk.calls
        assert _rows(calls) == [("api", "dist.all_reduce", "all_reduce")], _rows(calls)
        assert calls.is_async.tolist() == [True]
        assert calls.n_backend[0] >= 1
