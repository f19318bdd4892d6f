"""The injector's side of ``wsprof attach --inject``: checks, injection, ack, pause.

Every check that can fail is made before anything touches the target (:func:`check`): the
process exists and may be ptraced, it runs CPython (the C API the injection calls), it has
torch loaded (else there is nothing to hook), and gdb is there when it is the mechanism. Then
:func:`inject` queues the bootstrap (:mod:`~wsprof.capture.inject.mechanism`) and waits for
the target's answer; on any failure the target is as it was (a request the target had not yet
run is withdrawn: its folder is removed, so the queued call finds nothing to do).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from wsprof._version import __version__
from wsprof.capture.inject import mechanism
from wsprof.capture.inject.request import BOOTSTRAP_NAME, Request, read_ack
from wsprof.errors import InputError

#: Seconds the target's main thread has to run the queued call (it runs Python between any
#: two bytecodes, but not while blocked in C: a long NCCL wait, a sleep).
DEFAULT_ACK_TIMEOUT_S = 20.0
#: Seconds gdb may take to attach, queue and detach before it is killed.
DEFAULT_GDB_TIMEOUT_S = 30.0
#: Seconds between two looks for the ack.
ACK_POLL_S = 0.01
#: Oldest CPython whose C API the injection uses as it is.
MIN_PYTHON = (3, 9)

_LIBPYTHON = re.compile(r"libpython(\d+)\.(\d+)")
_EXE = re.compile(r"python(\d+)\.(\d+)")


@dataclass(frozen=True)
class Target:
    """What :func:`check` found about a target.

    Attributes:
        pid: the process.
        python: its CPython major.minor, None when it cannot be told from its maps.
        mechanism: ``remote_exec`` or ``gdb``.
        gdb: the gdb binary (``gdb`` mechanism).
    """

    pid: int
    python: tuple[int, int] | None
    mechanism: str
    gdb: str | None


@dataclass(frozen=True)
class InjectResult:
    """One injection's outcome.

    Attributes:
        pid: the target.
        action: ``patch`` or ``unpatch``.
        mechanism: ``gdb`` or ``remote_exec``.
        pause_s: how long the target was stopped, s.
        wall_s: from queuing to the target's answer, s.
        ack: the target's answer (``ok``, ``trace``, ``identical``, ...).
    """

    pid: int
    action: str
    mechanism: str
    pause_s: float
    wall_s: float
    ack: dict[str, Any] = field(default_factory=dict)


def _maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as e:
        raise InputError(
            f"pid {pid}: cannot read /proc/{pid}/maps ({e.strerror}); attach as the process's user"
        ) from e


def python_of(pid: int, maps: str | None = None) -> tuple[int, int] | None:
    """The CPython major.minor of ``pid`` from its mapped libpython, else its executable's
    name; None when neither tells."""
    text = _maps(pid) if maps is None else maps
    m = _LIBPYTHON.search(text)
    if m is None:
        try:
            m = _EXE.search(os.path.basename(os.readlink(f"/proc/{pid}/exe")))
        except OSError:
            m = None
    return (int(m.group(1)), int(m.group(2))) if m else None


def check(pid: int) -> Target:
    """Everything that must hold before the target is touched.

    Raises:
        InputError: one line: no such process; not Python; Python too old; torch not
            loaded; ptrace not allowed; gdb missing (each with what to do).
    """
    from wsprof.capture.pyspy.ptrace import ptrace_problem

    if not os.path.exists(f"/proc/{pid}"):
        raise InputError(f"no such process: pid {pid}; check the pid with `ps -p {pid}`")
    maps = _maps(pid)
    state = mechanism.state_of(pid)
    if not maps.strip() or state in ("Z", "X"):  # exited, its parent has not reaped it yet
        raise InputError(f"pid {pid} has exited; inject into a process that runs")
    if state in ("T", "t"):
        raise InputError(
            f"pid {pid} is stopped (Ctrl-Z, SIGSTOP or a debugger): resume it (kill -CONT "
            f"{pid}) and inject again"
        )
    tracer = mechanism.tracer_of(pid)
    if tracer:
        raise InputError(
            f"pid {pid} is already traced by pid {tracer} (a debugger, py-spy --blocking or "
            "another injection): wait until it detaches"
        )
    version = python_of(pid, maps)
    if version is None and "python" not in maps.lower():
        raise InputError(
            f"pid {pid} is not a Python process (no libpython or python executable mapped); "
            "inject into the Python processes of the job"
        )
    if version is not None and version < MIN_PYTHON:
        raise InputError(
            f"pid {pid} runs Python {version[0]}.{version[1]}: --inject needs CPython "
            f">= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}; restart it under `wsprof run` instead"
        )
    if "libtorch" not in maps and "/torch/_C" not in maps:
        raise InputError(
            f"torch is not loaded in pid {pid}: there is no collective to hook; inject into "
            "the processes that train or serve (the ranks), after they import torch"
        )
    problem = ptrace_problem(pid)
    if problem is not None:
        raise InputError(problem)
    if mechanism.can_remote_exec(version):
        return Target(pid, version, "remote_exec", None)
    gdb = mechanism.find_gdb()
    if gdb is None:
        raise InputError(
            "gdb is not installed: --inject needs it for a target on Python < 3.14 "
            "(apt-get install gdb; dnf install gdb)"
        )
    return Target(pid, version, "gdb", gdb)


def _bootstrap_source() -> str:
    return resources.files("wsprof.capture.inject").joinpath("bootstrap.py").read_text("utf-8")


def inject(
    target: Target,
    action: str,
    out: str,
    layers: str = "both",
    ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S,
    gdb_timeout_s: float = DEFAULT_GDB_TIMEOUT_S,
) -> InjectResult:
    """Ask ``target`` to patch or unpatch and wait for its answer.

    Args:
        target: from :func:`check`.
        action: ``patch`` or ``unpatch``.
        out: absolute run folder for the target's trace.
        layers: ``both`` or ``api``.
        ack_timeout_s: how long the target's main thread has to run the call.
        gdb_timeout_s: how long gdb may take.

    Returns:
        The outcome; ``ack['ok']`` says whether the target did it.

    Raises:
        InputError: the call could not be queued, the target exited, or it did not answer in
            time (its request withdrawn: it does nothing when it runs it later).
    """
    folder = tempfile.mkdtemp(prefix=f"wsprof-inject-{target.pid}-")
    try:
        boot = os.path.join(folder, BOOTSTRAP_NAME)
        with open(boot, "w", encoding="utf-8") as fh:
            fh.write(_bootstrap_source())
        Request(
            action=action,
            version=__version__,
            out=os.path.abspath(out),
            layers=layers,
            injector_pid=os.getpid(),
            deadline_unix=time.time() + ack_timeout_s,
        ).write(folder)
        t0 = time.perf_counter()
        try:
            if target.mechanism == "remote_exec":
                queued = mechanism.queue_with_remote_exec(target.pid, boot)
            else:
                assert target.gdb is not None
                queued = mechanism.queue_with_gdb(target.pid, boot, target.gdb, gdb_timeout_s)
        except mechanism.InjectFailed as e:
            raise InputError(f"pid {target.pid}: {e}") from e
        while True:
            ack = read_ack(folder)
            if ack is not None:
                return InjectResult(
                    target.pid,
                    action,
                    queued.mechanism,
                    queued.pause_s,
                    time.perf_counter() - t0,
                    ack,
                )
            if not mechanism.running(target.pid):
                raise InputError(f"pid {target.pid} exited before it ran the injected call")
            if time.perf_counter() - t0 > ack_timeout_s:
                raise InputError(
                    f"pid {target.pid}: its main thread did not run the injected call within "
                    f"{ack_timeout_s:g} s (blocked outside Python?); nothing was done and the "
                    "call was withdrawn; try again while it runs Python"
                )
            time.sleep(ACK_POLL_S)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
