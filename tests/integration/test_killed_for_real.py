"""Every collective call that returned is in the trace, however the process dies: SIGKILL from
outside, ``os._exit`` from another thread, a real SIGSEGV, ``abort()``. None of these runs
``atexit`` or a signal handler, so nothing may depend on a last flush.

The target (``tests/targets/counted_loop.py``) broadcasts in a tight loop and, after each call
returns, stores the number of returned calls (and the step of the last one) in a file with
``os.pwrite``; the kernel keeps that whatever happens to the process. The trace must then hold
at least that many calls (and at most one more: the call under way when the process died may
or may not have been recorded), with the right step numbers. Real processes, killed for real.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import TARGETS, free_port

from wsprof.trace.reader import read_run

SCRIPT = TARGETS / "counted_loop.py"
#: Calls per ``wsprof.step()`` in the target.
CALLS_PER_STEP = 100
#: Seconds the target may take to start (torch import, gloo group) or to die.
START_TIMEOUT_S = 30
DIE_TIMEOUT_S = 30
#: SIGKILL once the counter passes a random number of calls in this range (the loop makes
#: about 10,000 a second, so the kill lands at a random point of the 0.5 s flush interval).
KILL_AFTER_CALLS = (3_000, 8_000)


def _read_counter(path: Path) -> tuple[int, int]:
    """(calls returned, step of the last returned call) as the target last stored them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, 16, 0)
    finally:
        os.close(fd)
    if len(data) < 16:
        return 0, -1
    n, step = np.frombuffer(data, dtype="<i8").tolist()
    return n, step


def _run_until_dead(tmp_path: Path, mode: str) -> tuple[int, Path, Path]:
    """Start the target in ``mode``, wait for ``ready``, let it die (SIGKILL it in mode
    ``sigkill``); return its exit status, run folder and counter file."""
    out, counter = tmp_path / "run", tmp_path / "count"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), str(counter), str(free_port()), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            k: v
            for k, v in {**os.environ, "PYTHONWARNINGS": "ignore"}.items()
            if k != "PYTHONFAULTHANDLER"
        },  # die by the signal itself
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            proc.wait(timeout=DIE_TIMEOUT_S)
            pytest.fail(f"target did not start (printed {line!r}):\n{proc.stderr.read()[-3000:]}")
        if mode == "sigkill":
            kill_after = random.randint(*KILL_AFTER_CALLS)
            deadline = time.monotonic() + START_TIMEOUT_S
            while _read_counter(counter)[0] < kill_after:
                assert proc.poll() is None, f"target ended by itself ({proc.returncode})"
                assert time.monotonic() < deadline, "target stopped counting"
                time.sleep(0.01)  # let the loop run
            proc.send_signal(signal.SIGKILL)
        rc = proc.wait(timeout=DIE_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return rc, out, counter


@pytest.mark.parametrize(
    ("mode", "status"),
    [
        ("sigkill", -signal.SIGKILL),
        ("exit-thread", 1),
        ("segv", -signal.SIGSEGV),
        ("abort", -signal.SIGABRT),
    ],
)
def test_every_returned_call_survives_the_death(tmp_path: Path, mode: str, status: int) -> None:
    rc, out, counter = _run_until_dead(tmp_path, mode)
    assert rc == status, f"{mode}: the target ended with {rc}, expected {status}"
    counted, last_step = _read_counter(counter)
    assert counted > CALLS_PER_STEP, f"{mode}: only {counted} calls before the death"
    assert last_step == (counted - 1) // CALLS_PER_STEP, (counted, last_step)

    [trace] = read_run(str(out))  # readable after the death
    calls = trace.calls
    n = len(calls)
    assert n >= counted, (
        f"{mode}: {counted - n} of the {counted} calls that returned are missing "
        f"(the trace holds {n}, up to step {int(calls.step.max()) if n else None}; "
        f"the target was in step {last_step})"
    )
    assert n <= counted + 1, f"{mode}: {n} calls recorded, only {counted} (+1 under way) made"
    assert set(calls.op.tolist()) == {"broadcast"}
    steps = np.asarray(calls.step)
    assert int(steps.max()) >= last_step, (
        f"{mode}: recorded steps reach {int(steps.max())}, the target was in step {last_step}"
    )
    # Call i (from 0) ran in step i // 100: every full step has all its calls, the last one at
    # least those that returned.
    per_step = np.bincount(steps[steps >= 0], minlength=last_step + 1)
    assert (per_step[:last_step] == CALLS_PER_STEP).all(), per_step[:last_step]
    assert per_step[last_step] >= counted - CALLS_PER_STEP * last_step
    assert len(per_step) <= last_step + 2
