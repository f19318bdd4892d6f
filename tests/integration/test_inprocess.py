"""wsprof.patch() inside this process, on a real world-size-1 gloo group."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import TARGETS, gloo_world_of_one, run_ranks

import wsprof
from wsprof.trace.reader import read_trace


@pytest.fixture(scope="module", autouse=True)
def gloo() -> Iterator[None]:
    with gloo_world_of_one():
        yield


def test_occupied_trace_path_gets_a_new_file_and_repatch_never_mixes(tmp_path: Path) -> None:
    first = wsprof.patch(str(tmp_path))
    assert first is not None
    dist.broadcast(torch.ones(2), 0)
    wsprof.unpatch()
    junk = Path(first[: -len(".wsprof")] + "-2.wsprof")
    junk.write_text("not a trace")
    second = wsprof.patch(str(tmp_path))
    try:
        assert second not in (first, str(junk)) and second is not None
        dist.all_reduce(torch.ones(2))
    finally:
        wsprof.unpatch()
    assert read_trace(first).calls.op.tolist() == ["broadcast"]
    assert read_trace(second).calls.op.tolist() == ["all_reduce"]


def test_keyword_arguments_keep_the_payload(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path))
    try:
        dist.broadcast(tensor=torch.ones(4), src=0)
    finally:
        wsprof.unpatch()
    calls = read_trace(str(path)).calls
    assert calls.bytes.tolist() == [16] and calls.dtype.tolist() == ["float32"]


def test_phases_are_per_thread(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path))
    entered, release = threading.Event(), threading.Event()

    def rollout_thread() -> None:
        with wsprof.phase("rollout"):
            entered.set()
            release.wait(timeout=30)

    t = threading.Thread(target=rollout_thread)
    t.start()
    try:
        entered.wait(timeout=30)
        with wsprof.phase("weight_sync"):
            dist.broadcast(torch.ones(2), 0)
        release.set()
        t.join()
        dist.broadcast(torch.ones(2), 0)  # main thread, no phase
    finally:
        release.set()
        wsprof.unpatch()
    assert read_trace(str(path)).calls.phase.tolist() == ["weight_sync", None]


def test_p2pop_identity_check_still_holds(tmp_path: Path) -> None:
    wsprof.patch(str(tmp_path))
    try:
        dist.P2POp(dist.isend, torch.ones(1), 0)  # raises ValueError if identity broke
    finally:
        wsprof.unpatch()


def test_nan_counter_does_not_break_analysis(tmp_path: Path) -> None:
    from wsprof.analysis.run import analyze_path

    wsprof.patch(str(tmp_path))
    try:
        for v in (1.0, float("nan"), 3.0):
            wsprof.step()
            wsprof.counter("loss", v)
            dist.broadcast(torch.ones(2), 0)
    finally:
        wsprof.unpatch()
    analysis = analyze_path(str(tmp_path))
    assert analysis.primary is not None and len(analysis.primary.steps) == 3


def test_async_completion_is_joined_to_its_call(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path), device_time=True)
    try:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        before_wait = time.monotonic_ns()
        w.wait()
        w2 = dist.all_reduce(torch.ones(4), async_op=True)
        while not w2.is_completed():
            time.sleep(0.001)
        w3 = dist.all_reduce(torch.ones(4), async_op=True)  # never waited: completion unknown
        dist.broadcast(torch.ones(2), 0)
    finally:
        wsprof.unpatch()
    trace = read_trace(str(path))
    calls = trace.calls
    assert calls.is_async.tolist() == [True, True, True, False]
    assert calls.t_done_ns[0] >= before_wait
    assert calls.t_done_ns[1] >= calls.t_end_ns[1]
    assert calls.t_done_ns[2] == -1
    assert calls.t_done_ns[3] == calls.t_end_ns[3]
    del w3
    # No CUDA here: device time is off, said once, and nothing else changed.
    if not torch.cuda.is_available():
        assert any(e.kind == "device_time" and "off" in e.detail for e in trace.events)
        assert (calls.device_ns == -1).all()


def test_layers_option_hooks_only_what_it_names(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path), layers="api")
    try:
        from wsprof.capture.collectives import is_hook

        assert not is_hook(dist.ProcessGroup.__dict__["broadcast"])
        assert is_hook(dist.__dict__["broadcast"])
        dist.broadcast(torch.ones(2), 0)
    finally:
        wsprof.unpatch()
    calls = read_trace(str(path)).calls
    assert calls.layer.tolist() == ["api"] and calls.n_backend.tolist() == [0]
    with pytest.raises(ValueError, match="layers"):
        from wsprof.capture import collectives

        collectives.install(None, "backend")  # type: ignore[arg-type]


def test_a_full_capture_buffer_drops_calls_and_says_how_many_in_which_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wsprof.analysis.run import analyze_path

    monkeypatch.setenv("WSPROF_RING_RECORDS", "1024")  # the smallest ring; no drain for 60 s
    path = wsprof.patch(str(tmp_path), flush_interval_s=60)
    try:
        for _ in range(2):
            wsprof.step()
            for _ in range(600):
                dist.broadcast(torch.ones(2), 0)
    finally:
        wsprof.unpatch()
    trace = read_trace(str(path))
    own = trace.meta["self"]
    assert own["ring_records"] == 1024
    dropped = own["dropped_calls"]
    hooked = trace.calls.layer != "c10d"
    assert 0 < dropped < 600 and int(hooked.sum()) + dropped == 1200  # every call accounted for
    # what the full buffer dropped, c10d's Flight Recorder still had: recorded from it
    assert int((~hooked).sum()) == dropped
    assert own["dropped_by_step"] == {"1": dropped}  # the ring filled during step 1
    a = analyze_path(str(tmp_path))
    over = [f for f in a.findings if f.kind == "self_overhead"]
    assert over[0].severity == "warning" and f"dropped {dropped} calls" in over[0].title
    assert any("capture buffer was full" in n and "step(s) 1" in n for n in a.notes)
    assert any("dropped by a full capture buffer" in r for r in a.verdict.reasons)


def test_p2p_names_taken_before_patch_still_work(tmp_path: Path) -> None:
    from torch.distributed import P2POp, irecv, isend  # as a framework module does at import

    wsprof.patch(str(tmp_path))
    try:
        made = [P2POp(isend, torch.ones(1), 0), P2POp(irecv, torch.ones(1), 0)]
    finally:
        wsprof.unpatch()
    assert [m.op for m in made] == [isend, irecv]  # torch's identity checks passed


def test_wrappers_in_installed_packages_are_named() -> None:
    from wsprof.capture.wrappers import STDLIB, foreign_wrapper

    torch_file = torch.__file__
    site = os.path.join(STDLIB, "site-packages")
    for where in (
        os.path.join(site, "mylib", "wrap.py"),
        os.path.join(os.path.dirname(os.path.dirname(torch_file)), "torchrl", "wrap.py"),
    ):
        src = "def probe(*a, **k):\n    return None\n"
        ns: dict[str, object] = {}
        exec(compile(src, where, "exec"), ns)
        fact = foreign_wrapper(ns["probe"], torch_file)
        assert fact is not None and fact["file"] == where, where


def test_exit_line_from_rank_0_only_after_the_group_is_gone(tmp_path: Path) -> None:
    outs = run_ranks(TARGETS / "exit_line.py", 3, str(tmp_path))
    assert [o.count("wsprof: trace ") for o in outs] == [1, 0, 0], outs
    quiet = run_ranks(TARGETS / "exit_line.py", 3, str(tmp_path / "run"), env={"WSPROF_RUN": "1"})
    assert not any("wsprof: trace " in o for o in quiet), "wsprof run names the folder itself"


def test_a_name_captured_in_one_session_records_in_the_next(tmp_path: Path) -> None:
    """``patch()`` -> ``unpatch()`` -> ``patch()``: a hook a framework captured in the first
    session (``from torch.distributed import broadcast``) records into the second session's
    trace with that trace's own strings and sites, never into the closed first one."""
    wsprof.patch(str(tmp_path / "one"))
    captured = dist.broadcast  # session 1's hook, as a module-level import would keep it
    dist.all_reduce(torch.ones(3, dtype=torch.float64))  # interns dtype and site in session 1
    wsprof.unpatch()
    second = wsprof.patch(str(tmp_path / "two"))
    try:
        with wsprof.phase("weight_sync"):
            captured(torch.ones(4, dtype=torch.float16), 0)
            dist.broadcast(torch.ones(8), 0)
    finally:
        wsprof.unpatch()
    assert captured is not dist.broadcast  # the original is back on the name
    calls = read_trace(str(second)).calls
    trace = read_trace(str(second))
    assert calls.op.tolist() == ["broadcast", "broadcast"]
    assert calls.dtype.tolist() == ["float16", "float32"]
    assert calls.bytes.tolist() == [8, 32]
    assert calls.phase.tolist() == ["weight_sync", "weight_sync"]
    lines = [trace.sites[s].line for s in calls.site.tolist()]
    assert all(trace.sites[s].file == __file__ for s in calls.site.tolist())
    assert lines[1] == lines[0] + 1
    first = read_trace(str(next((tmp_path / "one").glob("*.wsprof"))))
    assert first.calls.op.tolist() == ["all_reduce"]
