"""The py-spy sampler against real target processes (tests/targets/busy_target.py).

Targets print ``ready`` and run until released (stdin closed) or until they exit on their own;
the tests synchronise on that line, on the sampler's windows and on process exit, never on
sleeps. Assertions are proportions of samples, not exact counts.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import BUSY_TARGET, running_target

from wsprof.analysis.samples import frame_shares_by_window, hot_frames, hot_stacks
from wsprof.capture.pyspy.binary import find_pyspy
from wsprof.capture.pyspy.ptrace import ptrace_problem
from wsprof.capture.pyspy.sampler import (
    STOP_CALLER,
    STOP_DURATION,
    STOP_PTRACE_DENIED,
    STOP_TARGET_EXITED,
    PySpySampler,
)
from wsprof.errors import InputError
from wsprof.trace.reader import read_trace

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = str(BUSY_TARGET)

#: Least share of active samples that must be inside hot_spin (it is the only busy thread).
MIN_HOT_SHARE = 0.5


def _pyspy_missing() -> str | None:
    try:
        find_pyspy()
    except InputError as e:
        return str(e)
    return None


_NO_PYSPY = _pyspy_missing()
_NO_PTRACE = ptrace_problem(os.getpid())

pytestmark = [
    pytest.mark.pyspy,
    pytest.mark.skipif(_NO_PYSPY is not None, reason=f"py-spy unavailable: {_NO_PYSPY}"),
]
needs_ptrace = pytest.mark.skipif(
    _NO_PTRACE is not None, reason=f"ptrace not allowed here: {_NO_PTRACE}"
)


def _function_share(frames: list[tuple[str, int, int]], function: str) -> float:
    return sum(n for f, n, _ in frames if f.startswith(f"{function} (")) / max(frames[0][2], 1)


@needs_ptrace
def test_samples_hot_function_in_proportion(tmp_path: Path) -> None:
    with running_target() as target:
        sampler = PySpySampler([target.pid], str(tmp_path), window_s=1, duration_s=2)
        sampler.start()
        reason = sampler.wait(timeout_s=30)
        assert target.poll() is None, "the target must outlive the sampling"

    assert reason == STOP_DURATION
    assert sampler.state == "stopped"
    assert sampler.windows == 2
    assert sampler.samples > 0
    assert sampler.errors == 0

    trace = read_trace(sampler.path)
    assert trace.meta["source"] == "attach"
    assert trace.meta["pid"] == os.getpid()
    assert trace.meta["targets"] == [target.pid]
    assert set(trace.meta["anchor"]) == {"monotonic_ns", "unix_ns"}
    assert trace.meta["sampler"]["stop_reason"] == STOP_DURATION
    assert sum(w.count for w in trace.samples) == sampler.samples
    assert {w.pid for w in trace.samples} == {target.pid}
    assert all(w.tid > 0 for w in trace.samples)
    assert all(w.t_start_ns < w.t_end_ns for w in trace.samples)

    inclusive = [
        (h.frame, h.samples, h.total)
        for h in hot_frames(trace.samples, inclusive=True, lines=False)
    ]
    assert _function_share(inclusive, "hot_spin") >= MIN_HOT_SHARE
    leaf = hot_frames(trace.samples, lines=False)
    assert leaf[0].frame.startswith("hot_spin (") and leaf[0].share >= MIN_HOT_SHARE
    top_stack, _ = hot_stacks(trace.samples, top=1)[0]
    assert top_stack[-1].startswith("hot_spin (")
    assert not any(f.startswith("thread (") for f in top_stack)

    per_window = frame_shares_by_window(trace.samples)
    assert len(per_window) == 2
    for shares in per_window:
        hot = [(h.frame, h.samples, h.total) for h in shares.frames]
        assert _function_share(hot, "hot_spin") >= MIN_HOT_SHARE

    details = [e.detail for e in trace.events if e.kind == "sampler"]
    assert details[0].startswith("started:") and details[-1].startswith(f"stopped: {reason}")

    db = sqlite3.connect(sampler.path)
    try:
        frames = [f for (f,) in db.execute("SELECT frames FROM stacks")]
    finally:
        db.close()
    assert len(frames) == len(set(frames)), "stacks must be interned"


@needs_ptrace
def test_stop_by_caller_keeps_samples(tmp_path: Path) -> None:
    with running_target() as target:
        sampler = PySpySampler([target.pid], str(tmp_path), window_s=1)
        sampler.start()
        assert sampler.wait_windows(1, timeout_s=20)
        reason = sampler.stop()

    assert reason == STOP_CALLER
    assert sampler.state == "stopped"
    assert sampler.windows >= 1 and sampler.samples > 0
    trace = read_trace(sampler.path)
    assert sum(w.count for w in trace.samples) == sampler.samples
    assert trace.meta["sampler"]["stop_reason"] == STOP_CALLER


@needs_ptrace
def test_target_exits_mid_window(tmp_path: Path) -> None:
    with running_target("--exit-after", "1") as target:
        sampler = PySpySampler([target.pid], str(tmp_path), window_s=5)
        sampler.start()
        reason = sampler.wait(timeout_s=30)

    assert reason == STOP_TARGET_EXITED
    assert sampler.state == "stopped"
    assert sampler.exited == [target.pid]
    assert sampler.samples > 0
    trace = read_trace(sampler.path)
    assert sum(w.count for w in trace.samples) == sampler.samples
    assert any(e.detail == f"target exited: pid {target.pid}" for e in trace.events)


@needs_ptrace
def test_samples_two_targets_in_one_window(tmp_path: Path) -> None:
    with running_target() as first, running_target() as second:
        sampler = PySpySampler([first.pid, second.pid], str(tmp_path), window_s=1, duration_s=1)
        sampler.start()
        assert sampler.wait(timeout_s=30) == STOP_DURATION

    trace = read_trace(sampler.path)
    assert {w.pid for w in trace.samples} == {first.pid, second.pid}
    assert len({(w.t_start_ns, w.t_end_ns) for w in trace.samples}) == 1
    for pid in (first.pid, second.pid):
        mine = [w for w in trace.samples if w.pid == pid]
        hot = [(h.frame, h.samples, h.total) for h in hot_frames(mine, inclusive=True, lines=False)]
        assert _function_share(hot, "hot_spin") >= MIN_HOT_SHARE


def test_no_such_pid_is_input_error(tmp_path: Path) -> None:
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as fh:
        missing = int(fh.read()) + 1  # above pid_max: can never exist
    sampler = PySpySampler([missing], str(tmp_path), window_s=1)
    with pytest.raises(InputError, match=rf"no such process: pid {missing}") as info:
        sampler.start()
    assert "\n" not in str(info.value)
    assert sampler.state == "created"
    assert not os.path.exists(sampler.path)


def test_missing_pyspy_is_input_error(tmp_path: Path) -> None:
    missing = os.path.join(str(tmp_path), "no-such-dir", "py-spy")
    with pytest.raises(InputError, match=r"pip install py-spy") as info:
        PySpySampler([os.getpid()], str(tmp_path), pyspy_path=missing)
    assert missing in str(info.value) and "\n" not in str(info.value)


_DENIED_CHILD = textwrap.dedent(
    """
    import sys
    from wsprof.capture.pyspy.sampler import PySpySampler
    from wsprof.errors import InputError
    sampler = PySpySampler([int(sys.argv[1])], sys.argv[2], window_s=1)
    sampler.start()
    try:
        sampler.wait(timeout_s=20)
    except InputError as e:
        print(sampler.state, sampler.stop_reason, str(e), sep=" | ")
        sys.exit(2)
    print("no error", sampler.state, sampler.stop_reason)
    """
)


@needs_ptrace
@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to drop CAP_SYS_PTRACE in a child",
)
def test_ptrace_denied_names_cause(tmp_path: Path) -> None:
    """A sampler without CAP_SYS_PTRACE against a target holding all of root's capabilities."""
    drop = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    env = dict(os.environ, PYTHONPATH=REPO)
    with running_target() as target:
        done = subprocess.run(
            [*drop, sys.executable, "-c", _DENIED_CHILD, str(target.pid), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=False,
        )
    if done.stderr.startswith("setpriv:"):
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()}")
    assert done.returncode == 2, done.stdout + done.stderr
    state, reason, message = done.stdout.strip().split(" | ")
    assert (state, reason) == ("failed", STOP_PTRACE_DENIED)
    assert "ptrace denied" in message and "CAP_SYS_PTRACE" in message
    assert "--cap-add SYS_PTRACE" in message or "root" in message
