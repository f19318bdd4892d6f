"""``wsprof.patch()`` guards: two threads patching at once, bad arguments and bad ``WSPROF_*``
settings, in this process (a real world-size-1 gloo group) and through the ``wsprof run``
bootstrap (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import gloo_world_of_one

import wsprof
from wsprof.capture import collectives
from wsprof.trace.reader import read_trace

#: Threads that call ``wsprof.patch()`` at the same moment.
RACING_THREADS = 2
#: Seconds a racing thread may take to patch.
PATCH_TIMEOUT_S = 60


@pytest.fixture(scope="module", autouse=True)
def gloo() -> Iterator[None]:
    with gloo_world_of_one():
        yield


def test_two_threads_patching_at_once_make_one_session(tmp_path: Path) -> None:
    barrier = threading.Barrier(RACING_THREADS)
    paths: list[str | None] = []
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            barrier.wait(timeout=PATCH_TIMEOUT_S)
            paths.append(wsprof.patch(str(tmp_path)))
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=racer) for _ in range(RACING_THREADS)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(PATCH_TIMEOUT_S)
        assert not errors, errors
        # Every collective is hooked once: one hook of wsprof's in each name's wrapper chain.
        for name in ("broadcast", "all_reduce", "all_gather", "barrier"):
            assert _hooks_in(getattr(dist, name)) == 1, name
        dist.broadcast(torch.ones(2), 0)
    finally:
        wsprof.unpatch()
        wsprof.unpatch()  # the loser of the race has no second session to end
    assert len(paths) == RACING_THREADS and len(set(paths)) == 1, paths
    assert [p.name for p in tmp_path.glob("*.wsprof")] == [Path(str(paths[0])).name]
    trace = read_trace(str(paths[0]))
    assert [e.kind for e in trace.events].count("patched") == 1
    assert trace.calls.op.tolist() == ["broadcast"]  # one hook, one row


def _hooks_in(fn: object) -> int:
    """How many of wsprof's hooks ``fn`` is or wraps (``__wrapped__``, functools.wraps)."""
    n = 0
    while fn is not None:
        n += collectives.is_hook(fn)
        fn = getattr(fn, "__wrapped__", None)
    return n


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan"), float("inf"), "0.5", True])
def test_a_bad_flush_interval_is_refused_before_patching(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match=r"flush_interval_s=.*finite number of seconds > 0"):
        wsprof.patch(str(tmp_path), flush_interval_s=bad)  # type: ignore[arg-type]
    assert wsprof.trace_path() is None and not collectives.installed()
    assert list(tmp_path.iterdir()) == []  # no trace, no writer thread spinning


def test_a_small_flush_interval_is_accepted(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path), flush_interval_s=0.01)
    try:
        assert path is not None
    finally:
        wsprof.unpatch()


def test_a_bad_layers_argument_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"layers='backend'.*both, api"):
        wsprof.patch(str(tmp_path), layers="backend")
    assert not collectives.installed()


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        (
            "WSPROF_DISABLE",
            "maybe",
            "WSPROF_DISABLE='maybe' is not a yes/no flag; set it to one "
            "of 1, true, yes, on, 0, false, no, off or unset it",
        ),
        (
            "WSPROF_LAYERS",
            "apis",
            "WSPROF_LAYERS='apis' is not one of both, api; set it to one of them or unset it",
        ),
    ],
)
def test_a_bad_setting_is_a_value_error_from_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, words: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as err:
        wsprof.patch(str(tmp_path))
    assert str(err.value) == words
    assert not collectives.installed() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("value", "patched"), [("TRUE", False), ("on", False), ("0", True), ("no", True), ("", True)]
)
def test_disable_takes_every_spelling_of_a_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, patched: bool
) -> None:
    monkeypatch.setenv("WSPROF_DISABLE", value)
    path = wsprof.patch(str(tmp_path))
    try:
        assert (path is not None) == patched
    finally:
        wsprof.unpatch()


def test_layers_from_the_environment_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WSPROF_LAYERS", " API ")
    path = wsprof.patch(str(tmp_path))
    try:
        dist.broadcast(torch.ones(2), 0)
    finally:
        wsprof.unpatch()
    assert read_trace(str(path)).calls.layer.tolist() == ["api"]


#: A training stand-in for the bootstrap: imports torch (so it gets patched), says it ran.
JOB = "import torch, torch.distributed, wsprof; print('trained', wsprof.trace_path() is not None)"


def _wsprof_run(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--out", str(out), "--", sys.executable, "-c", JOB],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "WSPROF_QUIET": "1", **env},
    )


def _wsprof_lines(stderr: str) -> list[str]:
    """wsprof's lines while the job ran: up to the run's closing (its verdict and report,
    or that it holds no trace, then where its folder is)."""
    out: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(("wsprof: run folder", "wsprof: no trace in ")) or (
            line.startswith("wsprof: /") and "\nVERDICT" in stderr
        ):
            break
        if line.startswith("wsprof:"):
            out.append(line)
    return out


def test_bootstrap_bad_disable_warns_once_and_trains_unprofiled(tmp_path: Path) -> None:
    done = _wsprof_run(tmp_path / "run", {"WSPROF_DISABLE": "maybe"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "trained False"
    assert _wsprof_lines(done.stderr) == [
        "wsprof: not profiling: WSPROF_DISABLE='maybe' is not a yes/no flag; set it to one of "
        "1, true, yes, on, 0, false, no, off or unset it"
    ]
    assert "Traceback" not in done.stderr
    assert list((tmp_path / "run").glob("*.wsprof")) == []


def test_bootstrap_bad_layers_warns_once_and_profiles_with_both(tmp_path: Path) -> None:
    done = _wsprof_run(tmp_path / "run", {"WSPROF_LAYERS": "apis"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "trained True"
    assert _wsprof_lines(done.stderr) == [
        "wsprof: WSPROF_LAYERS='apis' is not one of both, api; set it to one of them or unset "
        "it; using both"
    ]
    [trace] = (tmp_path / "run").glob("*.wsprof")
    [patched] = [e for e in read_trace(str(trace)).events if e.kind == "patched"]
    assert json.loads(patched.detail)["layers"] == "both"
