"""The capture session (:mod:`wsprof.capture.session`): one object owns the recorder, the
hooks, the counter sampler, the SIGTERM handler and the atexit flush; ``wsprof.patch()`` and
friends are thin functions over the one place it is held (a real world-size-1 gloo group)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import gloo_world_of_one

import wsprof
from wsprof.capture import buffer, collectives, extra, markers, session
from wsprof.capture import settings as cfg
from wsprof.trace.reader import read_trace


@pytest.fixture(scope="module", autouse=True)
def gloo() -> Iterator[None]:
    with gloo_world_of_one():
        yield


def test_patch_unpatch_patch_makes_two_sessions_each_owning_its_parts(tmp_path: Path) -> None:
    originals = dist.broadcast, signal.getsignal(signal.SIGTERM)
    paths = []
    for _ in range(2):
        path = wsprof.patch(str(tmp_path), counters=False)
        s = session.current()
        assert s is not None and path is not None and s.path == path == wsprof.trace_path()
        assert wsprof.patch(str(tmp_path)) == path  # idempotent
        assert markers.STATE.recorder is s.recorder is session.current_recorder()
        assert collectives.installed() and dist.broadcast is not originals[0]
        assert signal.getsignal(signal.SIGTERM) is not originals[1]
        wsprof.step()
        dist.broadcast(torch.ones(2), 0)
        wsprof.flush()
        wsprof.unpatch()
        assert session.current() is None and wsprof.trace_path() is None
        assert markers.STATE.recorder is None and markers.STATE.step == -1
        assert not collectives.installed()
        assert (dist.broadcast, signal.getsignal(signal.SIGTERM)) == originals
        paths.append(path)
    assert paths[0] != paths[1]
    for path in paths:
        assert read_trace(path).calls.op.tolist() == ["broadcast"]
    wsprof.unpatch()  # nothing to stop


def test_no_module_copy_of_the_current_recorder() -> None:
    for name in ("_recorder", "_lock", "_flush_all", "_at_exit"):
        assert not hasattr(wsprof, name), name


def test_bad_tuning_settings_are_one_line_each_on_stderr_and_in_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(cfg.ENV_KEEP_STEPS, "-3")
    monkeypatch.setenv(cfg.ENV_PROBE_BUDGET_PCT, "200")
    path = wsprof.patch(str(tmp_path), counters=False)
    wsprof.unpatch()
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("wsprof:")]
    assert sorted(lines) == [
        "wsprof: ignoring WSPROF_KEEP_STEPS='-3': not an integer >= 0; using the default",
        "wsprof: ignoring WSPROF_PROBE_BUDGET_PCT='200': not a percent in (0, 100]; using 0.5",
    ]
    assert path is not None
    events = [e.detail for e in read_trace(path).events if e.kind == "settings"]
    assert events == [ln.removeprefix("wsprof: ") for ln in lines]


def test_settings_passed_in_are_used_instead_of_the_environment(tmp_path: Path) -> None:
    assert session.patch(str(tmp_path), settings=cfg.Settings(disable=True)) is None
    bad = cfg.read({cfg.ENV_LAYERS: "apis"})
    with pytest.raises(ValueError, match=r"^WSPROF_LAYERS='apis' is not one of both, api"):
        session.patch(str(tmp_path), settings=bad)
    path = session.patch(str(tmp_path), layers="api", settings=bad, counters=False)
    try:
        dist.broadcast(torch.ones(2), 0)
    finally:
        session.unpatch()
    assert path is not None and read_trace(path).calls.layer.tolist() == ["api"]


def test_settings_passed_in_reach_the_ring_and_the_extra_hooks(tmp_path: Path) -> None:
    """``Settings(native=False)`` gives a Python ring (and Python hooks), its ring size is the
    ring's, its ``extra`` targets are hooked: the session hands its settings down."""
    settings = cfg.Settings(native=False, ring_records=4096, extra=("wsprof_no_such_mod:f",))
    path = session.patch(str(tmp_path), counters=False, settings=settings)
    try:
        s = session.current()
        assert s is not None and s.recorder is not None
        assert type(s.recorder.ring) is buffer.PyRing and s.recorder.capacity == 4096
        assert collectives._STATE.native is False
        assert "wsprof_no_such_mod:f" in extra._STATE.seen
        dist.broadcast(torch.ones(2), 0)
    finally:
        session.unpatch()
    assert path is not None and read_trace(path).calls.op.tolist() == ["broadcast"]
    if buffer.compiled_module() is not None:  # and the default is the compiled ring
        path = session.patch(str(tmp_path), counters=False, settings=cfg.Settings())
        try:
            rec = session.current_recorder()
            assert rec is not None and rec.ring.native and collectives._STATE.native
        finally:
            session.unpatch()


def test_forget_unbinds_every_components_copy_of_the_recorder(tmp_path: Path) -> None:
    """The hot-path caches of the recorder (markers, collectives, extra) are bound by the
    session at start and unbound through each component by ``forget`` (a forked child)."""
    import atexit

    from wsprof.capture import signals

    assert session.patch(str(tmp_path), counters=False) is not None
    s = session.current()
    assert s is not None and s.recorder is not None
    rec = s.recorder
    assert markers.STATE.recorder is collectives._STATE.recorder is extra._STATE.recorder is rec
    wsprof.step()
    try:
        s.forget()
        assert s.recorder is None and markers.STATE.recorder is None
        assert collectives._STATE.recorder is None and extra._STATE.recorder is None
        assert not collectives.installed() and markers.STATE.step == -1
    finally:
        signals.uninstall()
        atexit.unregister(session._at_exit)
        session.unpatch()
        rec.close()


FORKED = textwrap.dedent("""
    import os, sys
    import torch.distributed as dist
    import wsprof
    from wsprof.capture import session
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    dist.init_process_group("gloo", rank=0, world_size=1)
    parent = wsprof.patch(sys.argv[1], counters=False)
    pid = os.fork()
    if pid == 0:
        child = wsprof.patch(sys.argv[1], counters=False)  # the parent's session is dropped
        ok = child != parent and session.current().pid == os.getpid()
        wsprof.unpatch()
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), session.current().path == parent)
    wsprof.unpatch()
    dist.destroy_process_group()
""")


def test_a_forked_child_patches_into_its_own_session(tmp_path: Path) -> None:
    from helpers import free_port

    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(tmp_path), str(free_port())],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, cfg.ENV_QUIET: "1", "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child 0 True"
    assert len(list(tmp_path.glob("*.wsprof"))) == 2
