"""Real 3-process gloo jobs: wsprof's hooks record every op and change nothing."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import TARGETS, run_ranks

from wsprof.analysis.run import analyze_path
from wsprof.trace.reader import read_trace

WORLD = 3


def _results(out: Path) -> list[dict[str, object]]:
    return [json.loads((out / f"result-{r}.json").read_text()) for r in range(WORLD)]


def test_hooks_change_no_result_exception_or_handle(tmp_path: Path) -> None:
    run_ranks(TARGETS / "gloo_ops.py", WORLD, str(tmp_path))
    for r, res in enumerate(_results(tmp_path)):
        assert res["differences"] == {}, f"rank {r}: results differ with wsprof"
        assert "broadcast" in res["ops_run"] and "all_gather_into_tensor" in res["ops_run"]
        assert res["hooked"], "patch() did not replace the collectives"
        assert res["same_path_twice"] and not res["double_wrapped"], "patch() twice != once"
        assert res["p2p_identity"], "dist.isend is no longer distributed_c10d.isend"
        assert res["restored"], "unpatch() did not restore the originals"
        assert res["error"] and res["error"][0] == "RuntimeError"


def test_every_call_recorded_with_name_layer_site_step(tmp_path: Path) -> None:
    run_ranks(TARGETS / "gloo_ops.py", WORLD, str(tmp_path))
    res = _results(tmp_path)[0]
    trace = read_trace(str(res["trace"]))
    calls = trace.calls
    apis = set(calls.api.tolist())
    for name in (
        "dist.broadcast",
        "dist.all_gather",
        "dist.all_gather_into_tensor",
        "dist.all_reduce",
        "dist.barrier",
        "dist.send",
        "dist.recv",
    ):
        assert name in apis, f"{name} not recorded"
    ops = set(calls.op.tolist())
    assert {"broadcast", "all_gather", "all_gather_into_tensor", "all_reduce"} <= ops
    # Deprecated and new aliases map to one canonical op and are counted once each.
    agit = calls.api[calls.op == "all_gather_into_tensor"].tolist()
    assert sorted(agit) == sorted(
        {"dist.all_gather_into_tensor", "dist._all_gather_base", "dist.all_gather_single"}
        & set(agit)
    )
    assert (calls.step == 0).all(), "calls after wsprof.step() carry step 0"
    assert (calls.n_backend[calls.error == None] >= 1).all()  # noqa: E711
    assert (calls.t_end_ns >= calls.t_start_ns).all()
    bc = calls.take(calls.api == "dist.broadcast")
    assert (bc.bytes[bc.error == None] == 16).all()  # noqa: E711 - 4 float32
    assert trace.meta["rank"] == 0 and trace.meta["world_size"] == WORLD
    sites = {trace.sites[s].file for s in calls.site.tolist() if s >= 0}
    assert sites == {str(TARGETS / "gloo_ops.py")}, sites
    assert sorted(calls.is_async.tolist()).count(True) == 2  # the two async all_reduce


def test_recording_failure_never_reaches_training(tmp_path: Path) -> None:
    run_ranks(TARGETS / "gloo_ops.py", WORLD, str(tmp_path), "inject")
    res = _results(tmp_path)[0]
    assert res["differences"] == {}
    trace = read_trace(str(res["trace"]))
    assert trace.meta["self"]["internal_errors"] > 0
    analysis = analyze_path(str(res["trace"]))
    over = [f for f in analysis.findings if f.kind == "self_overhead"]
    assert over and over[0].severity == "warning"
    assert "internal errors" in over[0].title
