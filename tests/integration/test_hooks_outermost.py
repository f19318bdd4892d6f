"""Issue 28, item 1: hooks stay outermost.

A wrapper assigned to a hooked name after ``wsprof.patch()`` (slime's free-memory probe,
installed in the actor's init after ``wsprof run`` patched at torch import) goes under wsprof's
API hook the moment it is assigned: its time is between layers, the diagnosis names it, the
results are unchanged and ``unpatch()`` leaves the wrapper on the names. A real 2-rank gloo job
(``tests/targets/late_probe_job.py``) in every order, and in-process cases on a world of one.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from helpers import TARGETS, free_port, gloo_world_of_one, run_ranks

import wsprof
from wsprof.capture import collectives
from wsprof.trace.reader import read_run, read_trace

WORLD = 2
TARGET = TARGETS / "late_probe_job.py"
#: Job runs: plain (the reference), patch() then probe (natively and on the pure-Python
#: path), probe then patch(), and the probe after ``wsprof run`` patched.
MODES = ("plain", "after", "after_py", "before", "run")


def _job(out: Path, mode: str) -> None:
    out.mkdir()
    if mode == "run":
        cmd = [sys.executable, str(TARGET), "0", str(WORLD), str(free_port()), str(out)]
        res = subprocess.run(
            [sys.executable, "-m", "wsprof", "run", "--out", str(out), "--no-report", "--"]
            + [*cmd, "launch"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        assert res.returncode == 0, res.stderr[-3000:]
        return
    env = {"WSPROF_NATIVE": "0"} if mode == "after_py" else None
    run_ranks(TARGET, WORLD, str(out), mode.removesuffix("_py"), env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("outermost")
    out = {}
    for mode in MODES:
        out[mode] = root / mode
        _job(out[mode], mode)
    return out


def _results(run: Path) -> list[dict[str, Any]]:
    return [json.loads((run / f"result-{r}.json").read_text()) for r in range(WORLD)]


def _diagnosis(run: Path) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(run), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    diagnoses = json.loads(res.stdout)["diagnoses"]
    found = [d for d in diagnoses if d["cause"] == "wrapper"]
    assert found, [(d["cause"], d["title"]) for d in diagnoses]
    return dict(found[0])


def _probe_line() -> int:
    """Where the probe's code starts (its decorator line: ``co_firstlineno``)."""
    lines = TARGET.read_text().splitlines()
    at = next(i for i, s in enumerate(lines, 1) if "def probing_collective(" in s)
    assert lines[at - 2].strip() == "@functools.wraps(inner)"
    return at - 1


@pytest.mark.parametrize("mode", MODES[1:])
def test_results_are_bit_identical_to_the_unpatched_run(runs: dict[str, Path], mode: str) -> None:
    ref = _results(runs["plain"])
    got = _results(runs[mode])
    for r in range(WORLD):
        assert got[r]["params"] == ref[r]["params"], f"rank {r}, {mode}"
        assert got[r]["probed_names"] == ref[r]["probed_names"]


@pytest.mark.parametrize("mode", ["after", "after_py", "run"])
def test_between_layers_per_step_includes_the_wrapper_assigned_after_patch(
    runs: dict[str, Path], mode: str
) -> None:
    """Each step's time between layers (API rows on the main thread) holds the probe's own
    time, measured by the job; and so it grows with it."""
    traces = {t.rank: t for t in read_run(str(runs[mode])) if len(t.calls)}
    for r, res in enumerate(_results(runs[mode])):
        calls = traces[r].calls
        api = calls.take(calls.layer == "api")
        assert {f"dist.{n}" for n in res["probed_names"]} <= set(api.api.tolist())
        between = api.t_end_ns - api.t_start_ns - api.backend_ns
        edges = res["step_t0_ns"]
        per_step = [
            int(between[(api.t_start_ns >= a) & (api.t_start_ns < b)].sum())
            for a, b in zip(edges, edges[1:])
        ]
        probe = res["probe_ns"]
        assert len(per_step) == len(probe)
        for b, p in zip(per_step, probe):
            assert b >= p, (r, per_step, probe)  # the wrapper's time is inside the calls
        assert per_step[-1] - per_step[0] >= 0.8 * (probe[-1] - probe[0]), (per_step, probe)
        assert per_step[-1] > 5 * per_step[0], per_step


@pytest.mark.parametrize("mode", ["after", "after_py", "before", "run"])
def test_the_diagnosis_names_the_wrapper_in_every_order(runs: dict[str, Path], mode: str) -> None:
    d = _diagnosis(runs[mode])
    names = _results(runs["plain"])[0]["probed_names"]
    rows = {row["label"]: row["value"] for row in d["where"]["rows"]}
    who = rows["wrapper"]
    assert (
        who == f"install_probe.<locals>.make.<locals>.probing_collective ({TARGET}:{_probe_line()})"
    )
    assert rows[f"names it sits on ({len(names)})"] == ", ".join(f"dist.{n}" for n in names)
    assert (
        "probing_collective" in d["where"]["text"]
        and f"{TARGET}:{_probe_line()}" in d["where"]["text"]
    )
    assert d["severity"] in ("warning", "critical"), d["title"]
    before = _diagnosis(runs["before"])
    same = {r["label"]: r["value"] for r in before["where"]["rows"]}
    assert (d["cause"], d["title"].split(":")[0]) == (
        before["cause"],
        before["title"].split(":")[0],
    )
    assert [rows["wrapper"], rows[f"names it sits on ({len(names)})"]] == [
        same["wrapper"],
        same[f"names it sits on ({len(names)})"],
    ]


@pytest.mark.parametrize("mode", ["after", "after_py", "before"])
def test_unpatch_leaves_the_users_wrapper_on_the_names(runs: dict[str, Path], mode: str) -> None:
    for res in _results(runs[mode]):
        assert res["probe_on_names_after_unpatch"] == {n: True for n in res["probed_names"]}
    if mode != "before":  # named at assignment, as found after patch()
        for res in _results(runs[mode]):
            trace = read_trace(res["trace"])
            facts = [json.loads(e.detail) for e in trace.events if e.kind == "wrapper"]
            late = {f["api"] for f in facts if f.get("after_patch")}
            assert late == {f"dist.{n}" for n in res["probed_names"]}, facts


# ------------------------------------------------------------------- in-process, world of one
@pytest.fixture(scope="module")
def gloo() -> Iterator[None]:
    with gloo_world_of_one():
        yield


GENUINE = {n: dist.__dict__[n] for n in ("broadcast", "all_reduce", "all_gather_into_tensor")}


@pytest.fixture
def restored() -> Iterator[None]:
    try:
        yield
    finally:
        wsprof.unpatch()
        for n, fn in GENUINE.items():
            setattr(dist, n, fn)
            setattr(c10d, n, fn)


def _timer(prev: Callable[..., Any], seen: list[str]) -> Callable[..., Any]:
    @functools.wraps(prev)
    def framework_timer(*args: Any, **kwargs: Any) -> Any:
        seen.append("in")
        return prev(*args, **kwargs)

    return framework_timer


def test_assignment_after_patch_is_hooked_at_once_and_recorded_once(
    gloo: None, restored: None, tmp_path: Path
) -> None:
    path = wsprof.patch(str(tmp_path))
    assert type(dist) is not types.ModuleType and type(c10d) is not types.ModuleType
    seen: list[str] = []
    wrapper = _timer(dist.broadcast, seen)
    dist.broadcast = wrapper
    c10d.broadcast = wrapper  # the same wrapper on both names: one hook, names identical
    assert collectives.is_hook(dist.broadcast) and dist.broadcast is c10d.broadcast
    assert dist.broadcast.__wrapped__ is wrapper
    t = torch.arange(3.0)
    assert dist.broadcast(t, 0) is None and t.tolist() == [0.0, 1.0, 2.0]
    work = dist.broadcast(t, 0, async_op=True)
    assert isinstance(work, dist.Work) and work.wait()
    with pytest.raises(Exception) as raised:
        dist.broadcast(t, 5)  # an invalid rank: the exception passes through unchanged
    dist.all_reduce(t)  # an untouched name still recorded by its first hook
    wsprof.unpatch()
    assert dist.__dict__["broadcast"] is wrapper and c10d.__dict__["broadcast"] is wrapper
    assert type(dist) is types.ModuleType and type(c10d) is types.ModuleType
    assert seen == ["in"] * 3
    calls = read_trace(str(path)).calls
    assert calls.api.tolist() == ["dist.broadcast"] * 3 + ["dist.all_reduce"]
    assert calls.error.tolist() == [None, None, type(raised.value).__name__, None]
    assert calls.is_async.tolist() == [False, True, False, False]
    late = dist.broadcast
    dist.broadcast = _timer(late, seen)  # after unpatch: left alone
    assert not collectives.is_hook(dist.broadcast)


def test_putting_the_genuine_function_back_keeps_the_name_hooked(
    gloo: None, restored: None, tmp_path: Path
) -> None:
    wsprof.patch(str(tmp_path))
    hook = dist.all_reduce
    dist.all_reduce = _timer(hook, [])
    dist.all_reduce = GENUINE["all_reduce"]
    assert dist.all_reduce is hook
    dist.all_reduce = lambda *a, **k: None  # a replacement that is no wrapper
    assert collectives.is_hook(dist.all_reduce)
    wsprof.unpatch()
    assert dist.all_reduce.__name__ == "<lambda>"
