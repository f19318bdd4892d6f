"""The injector's side of ``wsprof attach --inject``: checks, injection, ack, pause.

Every check that can fail is made before anything touches the target (:func:`check`): the
process exists and may be ptraced, it runs CPython (the C API the injection calls), it has
torch loaded (else there is nothing to hook), and gdb is there when it is the mechanism. Then
:func:`inject` queues the bootstrap (:mod:`~wsprof.capture.inject.mechanism`) and waits for
the target's answer; on any failure the target is as it was (a request the target had not yet
run is withdrawn: renamed away, so the queued call finds nothing to do).

Nothing another user can write is ever run in the target (py-spy's and memray's standard):
each injection's folder is made by ``mkdtemp`` in a parent of the user's own, mode 0700
(:func:`private_root`); the folder is never removed while a queued call may still run (only
once the target answered or exited: :func:`clean_stale` at the next injection); the 1-line
program checks owner, mode and symlinks before it runs anything
(:func:`~wsprof.capture.inject.mechanism.program`), and the bootstrap imports wsprof from the
injector's own installation, checked the same way (:func:`wsprof_root`).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import wsprof
from wsprof._version import __version__
from wsprof.capture.inject import mechanism
from wsprof.capture.inject.bootstrap import untrusted, untrusted_tree
from wsprof.capture.inject.request import (
    ACK_NAME,
    BOOTSTRAP_NAME,
    Request,
    read_ack,
    withdraw,
)
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
#: Seconds an answered injection's folder is kept before a later injection removes it (its
#: injector may still be reading the ack).
ANSWERED_KEEP_S = 60.0
#: An injection's folder name: ``inject-<target pid>-<its start time in ticks>-<random>``.
_FOLDER = re.compile(r"^inject-(\d+)-(\d+)-[A-Za-z0-9_]+$")

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
            loaded; ptrace not allowed; gdb missing, or unable to call a function in a
            process on this machine (:func:`mechanism.gdb_call_problem`; each with what to do).
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
    broken = mechanism.gdb_call_problem(gdb)
    if broken is not None:
        raise InputError(f"pid {pid}: {broken}")
    return Target(pid, version, "gdb", gdb)


def _bootstrap_source() -> str:
    return resources.files("wsprof.capture.inject").joinpath("bootstrap.py").read_text("utf-8")


def _not_private(path: str) -> str | None:
    """Why ``path`` is not a private folder of this user (a folder, not a symlink, owned by
    the effective uid, mode 0700 or stricter), or None. ``lstat``: a symlink is refused."""
    problem = untrusted(path, (os.geteuid(),))
    if problem is None and stat.S_IMODE(os.lstat(path).st_mode) & 0o077:
        return f"{path} is open to other users (mode {stat.S_IMODE(os.lstat(path).st_mode):04o})"
    return problem


def private_root() -> str:
    """This user's parent folder of injection folders, mode 0700: ``$XDG_RUNTIME_DIR/wsprof``
    when ``$XDG_RUNTIME_DIR`` is this user's own 0700 folder, else ``<tmp>/wsprof-<euid>``
    (``TMPDIR`` or ``/tmp``). Created when missing; never one another user made or can write.

    Raises:
        InputError: the folder exists and is a symlink, another user's, or open to others.
    """
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isabs(xdg) and mechanism.SAFE_PATH.fullmatch(xdg) and not _not_private(xdg):
        base = os.path.join(xdg, "wsprof")
    else:
        base = os.path.join(tempfile.gettempdir(), f"wsprof-{os.geteuid()}")
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise InputError(
            f"cannot create {base} ({e.strerror}); set TMPDIR to a folder of yours"
        ) from e
    problem = _not_private(base)
    if problem is not None:
        raise InputError(
            f"{problem}: --inject runs code from there in the target, so it must be a 0700 "
            f"folder of uid {os.geteuid()}; remove it, or set XDG_RUNTIME_DIR to such a folder"
        )
    return base


def wsprof_root() -> str:
    """The folder that holds this process's ``wsprof`` package (the target imports it from
    there).

    Raises:
        InputError: the package or anything in it is a symlink, or writable by a user other
            than this one and root.
    """
    package = os.path.dirname(os.path.abspath(wsprof.__file__ or "."))
    root = os.path.dirname(package)
    owners = (0, os.geteuid())
    problem = untrusted(root, owners) or untrusted_tree(package, owners)
    if problem is not None:
        raise InputError(
            f"{problem}: --inject imports wsprof into the target from {package}, so only its "
            "user (or root) may write there; reinstall wsprof into such a folder"
        )
    return root


def start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22):
    with the pid, it names one process (a pid is reused, the pair is not); None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        return int(raw[raw.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def clean_stale(parent: str, now: float | None = None) -> list[str]:
    """Remove the injection folders in ``parent`` whose call can no longer run: the target
    exited (its pid gone or now another process), or it answered over
    :data:`ANSWERED_KEEP_S` ago. A folder whose target runs and has not answered is kept: its
    call may still be queued. Returns the folders removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        m = _FOLDER.match(name)
        if m is None:
            continue
        folder = os.path.join(parent, name)
        gone = start_ticks(int(m.group(1))) != int(m.group(2))
        try:
            answered = now - os.lstat(os.path.join(folder, ACK_NAME)).st_mtime > ANSWERED_KEEP_S
        except OSError:
            answered = False
        if gone or answered:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@dataclass(frozen=True)
class Prepared:
    """One injection's private folder, ready to be queued.

    Attributes:
        folder: the folder (bootstrap and request in it), in :func:`private_root`.
        program: the 1-line program that runs the bootstrap, checked, in the target.
    """

    folder: str
    program: str


def prepare(pid: int, action: str, out: str, layers: str, ack_timeout_s: float) -> Prepared:
    """Make the injection's folder: stale folders cleaned, a new one in :func:`private_root`
    with the bootstrap and the request (created new, never through a symlink, mode 0600).

    Raises:
        InputError: the private parent or the wsprof installation fails its checks, or the
            target is gone.
    """
    root = wsprof_root()
    parent = private_root()
    clean_stale(parent)
    ticks = start_ticks(pid)
    if ticks is None:
        raise InputError(f"pid {pid} has exited; inject into a process that runs")
    folder = tempfile.mkdtemp(prefix=f"inject-{pid}-{ticks}-", dir=parent)
    try:
        fd = os.open(
            os.path.join(folder, BOOTSTRAP_NAME),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
            0o600,
        )
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(_bootstrap_source())
        Request(
            action=action,
            version=__version__,
            out=os.path.abspath(out),
            layers=layers,
            injector_pid=os.getpid(),
            deadline_unix=time.time() + ack_timeout_s,
            wsprof_root=root,
        ).write(folder)
        text = mechanism.program(folder, os.geteuid(), BOOTSTRAP_NAME)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing was queued yet
        raise
    return Prepared(folder, text)


def await_ack(pid: int, folder: str, timeout_s: float) -> dict[str, Any] | None:
    """The target's answer, once it is there; None when ``timeout_s`` passed first and the
    request was withdrawn (its call, when it runs, does nothing).

    A request the target claimed just as the time ran out is not withdrawn: its call runs,
    and its answer is awaited ``timeout_s`` more.

    Raises:
        InputError: the target exited before it answered.
    """
    t0 = time.perf_counter()
    extended = False
    while True:
        ack = read_ack(folder)
        if ack is not None:
            return ack
        if not mechanism.running(pid):
            raise InputError(f"pid {pid} exited before it ran the injected call")
        if time.perf_counter() - t0 > timeout_s:
            if extended or withdraw(folder):
                return None
            extended, t0 = True, time.perf_counter()  # claimed: it runs; its answer follows
        time.sleep(ACK_POLL_S)


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
    prepared = prepare(target.pid, action, out, layers, ack_timeout_s)
    answered = False
    try:
        t0 = time.perf_counter()
        try:
            if target.mechanism == "remote_exec":
                queued = mechanism.queue_with_remote_exec(
                    target.pid, prepared.folder, prepared.program
                )
            else:
                assert target.gdb is not None
                queued = mechanism.queue_with_gdb(
                    target.pid, prepared.program, target.gdb, gdb_timeout_s
                )
        except mechanism.InjectFailed as e:
            raise InputError(f"pid {target.pid}: {e}") from e
        ack = await_ack(target.pid, prepared.folder, ack_timeout_s)
        if ack is None:
            raise InputError(
                f"pid {target.pid}: its main thread did not run the injected call within "
                f"{ack_timeout_s:g} s (blocked outside Python?); nothing was done and the "
                "call was withdrawn; try again while it runs Python"
            )
        answered = True
        return InjectResult(
            target.pid, action, queued.mechanism, queued.pause_s, time.perf_counter() - t0, ack
        )
    finally:
        # Freed only once no call can run from it: answered, or the target is gone. Else
        # the request is withdrawn and the folder left (removed by a later injection's
        # clean_stale once the target exits or answers).
        if answered or not mechanism.running(target.pid):
            shutil.rmtree(prepared.folder, ignore_errors=True)
        else:
            withdraw(prepared.folder)
