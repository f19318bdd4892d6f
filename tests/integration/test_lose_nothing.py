"""Recorded data survives the ways a training process ends: SIGKILL loses at most the last
flush interval; SIGTERM (with or without the user's own handler), an uncaught exception and a
normal exit lose nothing. Real processes, killed for real."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TARGETS, free_port

from wsprof.trace.reader import read_run

SCRIPT = TARGETS / "killed_rank.py"
FLUSHED, UNFLUSHED = 40, 25


def _start(out: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), mode, str(free_port())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")
    return proc


def _calls_and_steps(out: Path) -> tuple[int, list[str]]:
    [trace] = read_run(str(out))
    return len(trace.calls), [s.name for s in trace.spans if s.kind == "step"]


def test_sigkill_loses_at_most_the_last_flush_interval(tmp_path: Path) -> None:
    proc = _start(tmp_path, "wait")
    proc.kill()
    proc.wait(timeout=30)
    n, _ = _calls_and_steps(tmp_path)  # readable after SIGKILL
    assert FLUSHED <= n <= FLUSHED + UNFLUSHED


def test_sigterm_loses_nothing_and_still_terminates(tmp_path: Path) -> None:
    proc = _start(tmp_path, "wait")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # the default action still happens
    n, steps = _calls_and_steps(tmp_path)
    assert n == FLUSHED + UNFLUSHED
    assert steps == ["0", "1"], "the open step is closed before the process ends"


def test_sigterm_chains_to_the_users_handler(tmp_path: Path) -> None:
    proc = _start(tmp_path, "handler")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 3
    assert (tmp_path / "handler-ran").read_text() == "yes"
    n, _ = _calls_and_steps(tmp_path)
    assert n == FLUSHED + UNFLUSHED


@pytest.mark.parametrize(("mode", "status"), [("raise", 1), ("exit", 0)])
def test_exit_by_exception_or_normally_loses_nothing(
    tmp_path: Path, mode: str, status: int
) -> None:
    proc = _start(tmp_path, mode)
    assert proc.wait(timeout=30) == status
    n, steps = _calls_and_steps(tmp_path)
    assert n == FLUSHED + UNFLUSHED and steps == ["0", "1"]
