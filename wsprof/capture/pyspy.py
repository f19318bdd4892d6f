"""The py-spy driver: samples one or more live Python processes in successive windows.

Each window runs ``py-spy record --format raw`` once per target (concurrently), parses the raw
collapsed stacks (``frame;frame;... count``, root first; never py-spy's human text) and writes
them to ``<out_dir>/<host>-<samplerpid>-pyspy.wsprof`` in one transaction, so a window is
either fully written or not at all, and everything written survives a target that exits or a
caller that stops. ``t_start_ns``/``t_end_ns`` are ``time.monotonic_ns()`` of the sampler;
on Linux that clock is system-wide, so windows line up with the targets' own traces.

Lifecycle::

    sampler = PySpySampler([pid], out_dir, window_s=2, duration_s=60)
    sampler.start()            # InputError: no such pid
    reason = sampler.wait()    # InputError: ptrace denied, py-spy failed
    print(sampler.state, reason, sampler.samples, sampler.windows, sampler.errors)

py-spy's stderr is matched only to classify failures (ptrace denied or not).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import psutil

from wsprof.capture.recorder import identity_meta, new_trace_path
from wsprof.errors import InputError, WsprofError
from wsprof.trace.model import SampleWindow
from wsprof.trace.writer import TraceWriter

_now = time.monotonic_ns

#: Oldest py-spy whose ``record --format raw --nonblocking`` output this module understands.
MIN_PYSPY_VERSION = (0, 3, 14)
#: What to run when py-spy is missing or too old.
PYSPY_INSTALL_HINT = "pip install py-spy"
PYSPY_EXE = "py-spy.exe" if os.name == "nt" else "py-spy"
#: Seconds allowed for ``py-spy --version``.
VERSION_TIMEOUT_S = 10.0
#: Seconds stop() waits for py-spy to write its partial window after SIGINT before killing it.
STOP_GRACE_S = 5.0
#: Windows in a row lost to a killed py-spy before the sampler gives up.
MAX_LOST_WINDOWS = 3
#: A duration's remainder shorter than this (s) is not sampled (py-spy windows are whole seconds).
MIN_TAIL_WINDOW_S = 0.5
#: Longest py-spy error message kept in a stop reason or an event, characters.
MAX_ERROR_CHARS = 300
#: Default sampling rate, samples per second per thread.
DEFAULT_RATE_HZ = 100
#: Default window length, whole seconds (py-spy's ``--duration`` takes an integer).
DEFAULT_WINDOW_S = 5
#: Inserted before ``.wsprof`` so the sampler's trace differs from its own process trace.
TRACE_TAG = "-pyspy"
#: ``kind`` of the events this sampler writes.
EVENT_KIND = "sampler"

#: Bit of CAP_SYS_PTRACE in the capability masks of ``/proc/<pid>/status``.
CAP_SYS_PTRACE_BIT = 19
PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"
#: What each value of kernel.yama.ptrace_scope allows.
PTRACE_SCOPE_MEANING = {
    0: "classic: any process of the same user may attach",
    1: "restricted: a process may attach only to its own descendants",
    2: "admin-only: only processes with CAP_SYS_PTRACE may attach",
    3: "no attach: ptrace is disabled until reboot",
}
SYSCTL_FIX = "`sudo sysctl kernel.yama.ptrace_scope=0`"

SamplerState = Literal["created", "running", "stopped", "failed"]

STOP_DURATION = "duration reached"
STOP_CALLER = "stopped by caller"
STOP_TARGET_EXITED = "target exited"
STOP_PTRACE_DENIED = "ptrace denied"
#: Followed by ``: <message>``.
STOP_PYSPY_FAILED = "py-spy failed"
#: An error inside wsprof (e.g. the trace cannot be written); followed by ``: <message>``.
STOP_SAMPLER_FAILED = "sampler failed"

_VERSION_RE = re.compile(r"py-spy (\d+)\.(\d+)\.(\d+)")
_THREAD_FRAME_RE = re.compile(r"^thread \((0x[0-9A-Fa-f]+|\d+)\)(?:: .*)?$")
_PROCESS_FRAME_RE = re.compile(r'^process (\d+):"')
_CAUSE_RE = re.compile(r"^\s*\d+: (.+)$")
_DENIED_MARKERS = ("permission denied", "operation not permitted", "sys_ptrace")


# ---------------------------------------------------------------------------------------------
# Binary lookup


@dataclass(frozen=True)
class PySpyBinary:
    """A py-spy executable and its version."""

    path: str
    version: tuple[int, int, int]

    @property
    def version_str(self) -> str:
        """``major.minor.patch``."""
        return ".".join(str(v) for v in self.version)


def _script_dirs() -> list[str]:
    dirs = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    return [d for i, d in enumerate(dirs) if d and d not in dirs[:i]]


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_pyspy(path: str | None = None) -> PySpyBinary:
    """Find py-spy and check its version.

    Args:
        path: an explicit py-spy binary; default: the one installed with the ``py-spy`` Python
            package (this interpreter's scripts folder), else ``py-spy`` on ``PATH``.

    Returns:
        The binary and its version.

    Raises:
        InputError: not found, not runnable, not py-spy, or older than
            :data:`MIN_PYSPY_VERSION`.
    """
    if path is not None:
        if not _is_executable(path):
            raise InputError(
                f"py-spy not found at {path} (no such executable); install it with "
                f"`{PYSPY_INSTALL_HINT}` or give the path of a py-spy binary"
            )
        chosen = path
    else:
        candidates = [os.path.join(d, PYSPY_EXE) for d in _script_dirs()]
        on_path = shutil.which("py-spy")
        if on_path:
            candidates.append(on_path)
        found = [c for c in candidates if _is_executable(c)]
        if not found:
            raise InputError(
                f"py-spy not found (looked in {', '.join(_script_dirs())} and PATH); install it "
                f"with `{PYSPY_INSTALL_HINT}`"
            )
        chosen = found[0]
    version = _pyspy_version(chosen)
    if version < MIN_PYSPY_VERSION:
        minimum = ".".join(str(v) for v in MIN_PYSPY_VERSION)
        have = ".".join(str(v) for v in version)
        raise InputError(
            f"{chosen} is py-spy {have}, wsprof needs {minimum} or newer; upgrade with "
            f"`{PYSPY_INSTALL_HINT} --upgrade`"
        )
    return PySpyBinary(chosen, version)


def _pyspy_version(path: str) -> tuple[int, int, int]:
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(
            f"cannot run {path} --version ({e}); reinstall with `{PYSPY_INSTALL_HINT}`"
        ) from e
    m = _VERSION_RE.search(done.stdout)
    if m is None:
        said = (done.stdout or done.stderr).strip().splitlines()[:1]
        raise InputError(
            f"{path} is not py-spy (--version printed {said[0] if said else 'nothing'!r}); "
            f"install it with `{PYSPY_INSTALL_HINT}`"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


# ---------------------------------------------------------------------------------------------
# ptrace permission


def _status_fields(pid: int | str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def _cap_mask(fields: dict[str, str], key: str) -> int | None:
    try:
        return int(fields[key], 16)
    except (KeyError, ValueError):
        return None


def _ptrace_scope() -> int | None:
    try:
        with open(PTRACE_SCOPE_PATH, encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        with open("/proc/1/cgroup", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return False
    return any(k in text for k in ("docker", "kubepods", "containerd", "lxc"))


def ptrace_problem(pid: int) -> str | None:
    """Why py-spy (started by this process, with its credentials) could not read ``pid``.

    Checks, in the kernel's order: kernel.yama.ptrace_scope, then (without CAP_SYS_PTRACE in
    this process's effective set, ``/proc/self/status`` CapEff bit 19) the target's user and
    whether the target holds capabilities this process lacks (a container started without
    ``--cap-add SYS_PTRACE``). Linux only; elsewhere it cannot tell.

    Args:
        pid: the target process.

    Returns:
        One line naming the cause and the fix, or None when ptrace should be allowed (or the
        cause cannot be told). A target that called ``prctl(PR_SET_PTRACER)`` may still be
        allowed under ptrace_scope=1.
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return f"pid {pid} has exited (zombie); nothing to attach to"
    except psutil.NoSuchProcess:
        return f"no such process: pid {pid}; check the pid with `ps -p {pid}`"
    except psutil.AccessDenied:
        proc = None
    if not sys.platform.startswith("linux"):
        return None
    own = _status_fields("self")
    eff = _cap_mask(own, "CapEff")
    has_cap = eff is not None and bool(eff >> CAP_SYS_PTRACE_BIT & 1)
    container = _in_container()
    cap_fix = (
        "start the container with `--cap-add SYS_PTRACE`"
        if container
        else "run wsprof with CAP_SYS_PTRACE (e.g. as root)"
    )
    scope = _ptrace_scope()
    if scope is not None and scope >= 3:
        return (
            f"kernel.yama.ptrace_scope={scope} ({PTRACE_SCOPE_MEANING[3]}); fix: reboot with a "
            "lower kernel.yama.ptrace_scope"
        )
    if has_cap:
        return None
    where = " (this is a container)" if container else ""
    if scope in (1, 2):
        return (
            f"kernel.yama.ptrace_scope={scope} ({PTRACE_SCOPE_MEANING[scope]}) and this process "
            f"lacks CAP_SYS_PTRACE{where}; fix: {SYSCTL_FIX} on the host, or {cap_fix}"
        )
    if proc is not None:
        try:
            uids = proc.uids()
            gids = proc.gids()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            uids = gids = None
        if uids is not None and gids is not None:
            me_uid, me_gid = os.getuid(), os.getgid()
            if {uids.real, uids.effective, uids.saved} != {me_uid} or {
                gids.real,
                gids.effective,
                gids.saved,
            } != {me_gid}:
                return (
                    f"pid {pid} runs as uid {uids.effective}, this process as uid {me_uid}, "
                    f"without CAP_SYS_PTRACE; fix: run wsprof as the same user as the target, "
                    f"or {cap_fix}"
                )
    target_prm = _cap_mask(_status_fields(pid), "CapPrm")
    own_prm = _cap_mask(own, "CapPrm")
    if target_prm is not None and own_prm is not None and target_prm & ~own_prm:
        return (
            f"pid {pid} holds capabilities this process lacks and this process has no "
            f"CAP_SYS_PTRACE{where}; fix: {cap_fix}, or run wsprof with the target's privileges"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Raw output parsing


def _split_frames(stack: str) -> list[str]:
    """Split ``a;b;c`` into frames, keeping ``process N:"cmd; with; semicolons"`` whole."""
    parts = stack.split(";")
    frames: list[str] = []
    i = 0
    while i < len(parts):
        part = parts[i]
        if _PROCESS_FRAME_RE.match(part):
            while not part.endswith('"') and i + 1 < len(parts):
                i += 1
                part = f"{part};{parts[i]}"
        frames.append(part)
        i += 1
    return frames


def parse_raw(
    text: str, *, pid: int, t_start_ns: int, t_end_ns: int
) -> tuple[list[SampleWindow], int]:
    """Parse ``py-spy record --format raw`` output.

    Each line is ``frame;frame;... count``, root first. With ``--threads`` one frame is the
    thread (``thread (TID): name``; TID decimal native id, or hex Python id); with
    ``--subprocesses`` the first frames are processes (``process PID:"cmdline"``, outermost
    first). Frames are kept as py-spy wrote them, pseudo-frames included.

    Args:
        text: the raw file's content.
        pid: the target; used when no process frame names another.
        t_start_ns: window start, monotonic ns.
        t_end_ns: window end, monotonic ns.

    Returns:
        One :class:`SampleWindow` per (pid, thread, stack), and the number of lines that could
        not be parsed. ``tid`` is -1 where the output has no thread frame.
    """
    counts: dict[tuple[int, int, tuple[str, ...]], int] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        stack, sep, count_s = line.rpartition(" ")
        if not sep or not stack or not count_s.isdigit():
            bad += 1
            continue
        frames = tuple(_split_frames(stack))
        frame_pid, tid = pid, -1
        for frame in frames:
            pm = _PROCESS_FRAME_RE.match(frame)
            if pm:
                frame_pid = int(pm.group(1))
                continue
            tm = _THREAD_FRAME_RE.match(frame)
            if tm:
                tid = int(tm.group(1), 0)
            break
        key = (frame_pid, tid, frames)
        counts[key] = counts.get(key, 0) + int(count_s)
    windows = [
        SampleWindow(t_start_ns, t_end_ns, p, t, frames, n) for (p, t, frames), n in counts.items()
    ]
    return windows, bad


def _error_line(stderr: str) -> str:
    """One line from py-spy's stderr: the ``Error:`` line plus its first cause."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    main = next((ln[len("Error:") :].strip() for ln in lines if ln.startswith("Error:")), None)
    if main is None:
        main = lines[0] if lines else "no message"
        if "panicked at" in main and len(lines) > 1:
            main = f"{main} {lines[1]}"
    cause = None
    if "Caused by:" in lines:
        after = lines[lines.index("Caused by:") + 1 :]
        m = _CAUSE_RE.match(after[0]) if after else None
        cause = m.group(1) if m else None
    out = f"{main} ({cause})" if cause and cause not in main else main
    return out[:MAX_ERROR_CHARS]


def _permission_denied(stderr: str) -> bool:
    low = stderr.lower()
    return any(k in low for k in _DENIED_MARKERS)


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


# ---------------------------------------------------------------------------------------------
# The sampler


@dataclass
class _Window:
    """What one window produced."""

    samples: list[SampleWindow] = field(default_factory=list)
    written: bool = False  # at least one py-spy wrote output
    bad_lines: int = 0
    exited: list[int] = field(default_factory=list)
    failed_runs: int = 0
    lost: list[str] = field(default_factory=list)  # windows lost to a killed py-spy
    failure: str | None = None  # stop reason
    error: WsprofError | None = None
    skipped: bool = False  # stop requested before py-spy started


class PySpySampler:
    """Samples one or more processes with py-spy, window after window, into a trace file.

    Args:
        pids: target processes (each a Python process).
        out_dir: run folder; the trace is ``<out_dir>/<host>-<samplerpid>-pyspy.wsprof`` (a
            ``-2``, ``-3``... is appended when that file exists).
        rate_hz: samples per second per thread.
        window_s: length of one window, whole seconds (py-spy's ``--duration``).
        every_s: seconds from one window's start to the next; default back to back.
        duration_s: stop after this many seconds (from start); default until :meth:`stop`.
        blocking: pause the target while sampling (py-spy's default; more exact, slower).
        native: include native (C/C++) frames; needs ``blocking=True``.
        threads: add the thread as the first frame (``-t``); gives ``tid`` in the trace.
        subprocesses: sample the targets' child processes too.
        idle: keep samples of idle threads (``--idle``).
        pyspy_path: py-spy binary; default see :func:`find_pyspy`.

    Raises:
        ValueError: no pid, a non-positive rate or window, ``every_s < window_s``, or
            ``native`` without ``blocking``.
        InputError: py-spy missing or too old (see :func:`find_pyspy`).

    Attributes:
        state: 'created' | 'running' | 'stopped' | 'failed'.
        stop_reason: :data:`STOP_DURATION`, :data:`STOP_CALLER`, :data:`STOP_TARGET_EXITED`,
            :data:`STOP_PTRACE_DENIED`, ``'py-spy failed: <message>'`` or
            ``'sampler failed: <message>'``; None while running.
        samples: samples written (one per thread per tick, as py-spy counts them).
        windows: windows written.
        errors: py-spy runs that failed without the target exiting, plus unparsable lines.
        error: the error :meth:`wait` raises once the sampler has failed.
        path: the trace file.
    """

    def __init__(
        self,
        pids: Sequence[int],
        out_dir: str,
        *,
        rate_hz: int = DEFAULT_RATE_HZ,
        window_s: float = DEFAULT_WINDOW_S,
        every_s: float | None = None,
        duration_s: float | None = None,
        blocking: bool = False,
        native: bool = False,
        threads: bool = True,
        subprocesses: bool = False,
        idle: bool = False,
        pyspy_path: str | None = None,
    ) -> None:
        if not pids:
            raise ValueError("PySpySampler needs at least one pid")
        if rate_hz < 1:
            raise ValueError(f"rate_hz must be >= 1, got {rate_hz}")
        if int(window_s) != window_s or window_s < 1:
            raise ValueError(f"window_s must be a whole number of seconds >= 1, got {window_s}")
        if every_s is not None and every_s < window_s:
            raise ValueError(f"every_s ({every_s}) must be >= window_s ({window_s})")
        if duration_s is not None and duration_s <= 0:
            raise ValueError(f"duration_s must be > 0, got {duration_s}")
        if native and not blocking:
            raise ValueError("native=True needs blocking=True (py-spy pauses the target to unwind)")
        self.pids = tuple(int(p) for p in pids)
        self.out_dir = out_dir
        self.rate_hz = int(rate_hz)
        self.window_s = int(window_s)
        self.every_s = float(every_s) if every_s is not None else float(window_s)
        self.duration_s = duration_s
        self.blocking = blocking
        self.native = native
        self.threads = threads
        self.subprocesses = subprocesses
        self.idle = idle
        self.binary = find_pyspy(pyspy_path)
        self.out_dir = out_dir
        self.path = new_trace_path(out_dir, TRACE_TAG)
        self.state: SamplerState = "created"
        self.stop_reason: str | None = None
        self.samples = 0
        self.windows = 0
        self.errors = 0
        self.error: WsprofError | None = None
        self.exited: list[int] = []
        self._cond = threading.Condition()
        self._stop_requested = threading.Event()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._thread: threading.Thread | None = None
        self._writer: TraceWriter | None = None
        self._stack_ids: dict[tuple[str, ...], int] = {}
        self._lost_in_a_row = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Check the targets, create the trace and start sampling in a background thread.

        Raises:
            RuntimeError: the sampler was already started.
            InputError: a pid does not exist (or has exited).
            OSError: the trace file cannot be created.
        """
        with self._cond:
            if self.state != "created":
                raise RuntimeError(f"PySpySampler.start(): already {self.state}")
            for pid in self.pids:
                if not _alive(pid):
                    raise InputError(
                        f"no such process: pid {pid} (not running); check the pid with "
                        f"`ps -p {pid}`"
                    )
            self.path = new_trace_path(self.out_dir, TRACE_TAG)
            self._writer = TraceWriter(self.path)
            self._writer.set_meta(self._meta())
            self._writer.write({"events": [(_now(), EVENT_KIND, self._started_detail())]})
            self.state = "running"
            atexit.register(self.stop)  # before the thread, which unregisters it when it ends
            self._thread = threading.Thread(target=self._run, name="wsprof-pyspy", daemon=True)
            self._thread.start()

    def stop(self) -> str | None:
        """Stop sampling: py-spy writes the current partial window, which is kept. Idempotent.

        Never raises the sampler's own failure (see :meth:`wait` for that).

        Returns:
            The stop reason (:data:`STOP_CALLER` unless the sampler had already stopped).
        """
        with self._cond:
            if self.state == "created":
                self.state = "stopped"
                self.stop_reason = STOP_CALLER
                return self.stop_reason
            self._stop_requested.set()
            for proc in self._procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
        thread = self._thread
        if thread is not None:
            thread.join(STOP_GRACE_S)
            if thread.is_alive():
                with self._cond:
                    for proc in self._procs:
                        if proc.poll() is None:
                            proc.kill()
                thread.join()
        return self.stop_reason

    def request_stop(self) -> None:
        """Ask sampling to end without waiting: every py-spy now running gets SIGINT (it writes
        its partial window, which is kept) and no new window starts; :meth:`wait` then returns
        :data:`STOP_CALLER`. Takes no lock and never blocks, so a signal handler may call it.
        """
        self._stop_requested.set()
        for proc in list(self._procs):
            with contextlib.suppress(OSError):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)

    def wait(self, timeout_s: float | None = None) -> str | None:
        """Wait until sampling ends (duration reached, target exited, stopped or failed).

        Args:
            timeout_s: most seconds to wait; None waits until the end.

        Returns:
            The stop reason, or None if still running after ``timeout_s`` (or never started).

        Raises:
            InputError: the sampler failed: ptrace denied (message names the cause and the fix)
                or py-spy failed.
        """
        thread = self._thread
        if thread is None:
            return self.stop_reason
        thread.join(timeout_s)
        if thread.is_alive():
            return None
        if self.error is not None:
            raise self.error
        return self.stop_reason

    def wait_windows(self, n: int, timeout_s: float | None = None) -> bool:
        """Block until ``n`` windows are written or sampling has ended.

        Args:
            n: windows to wait for.
            timeout_s: most seconds to wait; None has no limit.

        Returns:
            True when at least ``n`` windows are written.
        """
        with self._cond:
            self._cond.wait_for(
                lambda: self.windows >= n or self.state not in ("created", "running"),
                timeout_s,
            )
            return self.windows >= n

    def __enter__(self) -> PySpySampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return {
            **identity_meta("attach"),
            "targets": list(self.pids),
            "pyspy_version": self.binary.version_str,
            "rate_hz": self.rate_hz,
            "window_s": self.window_s,
            "every_s": self.every_s,
            "duration_s": self.duration_s,
            "blocking": self.blocking,
            "native": self.native,
            "threads": self.threads,
            "subprocesses": self.subprocesses,
            "idle": self.idle,
        }

    def _started_detail(self) -> str:
        return (
            f"started: targets={list(self.pids)} rate_hz={self.rate_hz} window_s={self.window_s} "
            f"every_s={self.every_s:g} blocking={self.blocking} native={self.native} "
            f"py-spy {self.binary.version_str}"
        )

    def _status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "stop_reason": self.stop_reason,
            "samples": self.samples,
            "windows": self.windows,
            "errors": self.errors,
            "exited": list(self.exited),
        }

    def _command(self, pid: int, window_s: int, out: str) -> list[str]:
        cmd = [self.binary.path, "record", "--pid", str(pid), "--format", "raw"]
        cmd += ["--rate", str(self.rate_hz), "--duration", str(window_s), "-o", out]
        if not self.blocking:
            cmd.append("--nonblocking")
        if self.threads:
            cmd.append("--threads")
        if self.native:
            cmd.append("--native")
        if self.subprocesses:
            cmd.append("--subprocesses")
        if self.idle:
            cmd.append("--idle")
        return cmd

    def _run(self) -> None:
        t0 = _now()
        live = list(self.pids)
        reason: str | None = None
        error: WsprofError | None = None
        tmp = tempfile.mkdtemp(prefix="wsprof-pyspy-")
        index = 0
        try:
            while True:
                if self._stop_requested.is_set():
                    reason = STOP_CALLER
                    break
                start_ns = max(_now(), t0 + int(index * self.every_s * 1e9))
                window_s = self.window_s
                if self.duration_s is not None:
                    remaining_s = self.duration_s - (start_ns - t0) / 1e9
                    if remaining_s < MIN_TAIL_WINDOW_S:
                        reason = STOP_DURATION
                        break
                    window_s = min(window_s, max(1, round(remaining_s)))
                delay_s = (start_ns - _now()) / 1e9
                if delay_s > 0 and self._stop_requested.wait(delay_s):
                    reason = STOP_CALLER
                    break
                result = self._sample_window(live, window_s, tmp, index)
                index += 1
                self._record(result)
                if result.failure is not None:
                    reason, error = result.failure, result.error
                    break
                live = [p for p in live if p not in result.exited]
                if not live:
                    reason = STOP_TARGET_EXITED
                    break
                if result.skipped or self._stop_requested.is_set():
                    reason = STOP_CALLER
                    break
        except Exception as e:  # noqa: BLE001 - becomes the stop reason; wait() raises it
            reason = f"{STOP_SAMPLER_FAILED}: {type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
            error = WsprofError(f"py-spy sampler failed: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            self._finish(reason or STOP_CALLER, error)

    def _sample_window(self, live: list[int], window_s: int, tmp: str, index: int) -> _Window:
        result = _Window()
        runs: list[tuple[int, str, str, subprocess.Popen[bytes]]] = []
        t_start = _now()
        with self._cond:
            if self._stop_requested.is_set():
                result.skipped = True
                return result
            for pid in live:
                out = os.path.join(tmp, f"{pid}-{index}.txt")
                err = os.path.join(tmp, f"{pid}-{index}.err")
                try:
                    with open(err, "wb") as err_fh:
                        proc = subprocess.Popen(
                            self._command(pid, window_s, out),
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL,
                            stderr=err_fh,
                        )
                except OSError as e:
                    result.failure = f"{STOP_PYSPY_FAILED}: cannot run {self.binary.path}: {e}"
                    result.error = InputError(
                        f"cannot run {self.binary.path} ({e}); reinstall with "
                        f"`{PYSPY_INSTALL_HINT}`"
                    )
                    break
                runs.append((pid, out, err, proc))
                self._procs.append(proc)
            if self._stop_requested.is_set():  # request_stop() ran while these started
                for *_, proc in runs:
                    with contextlib.suppress(OSError):
                        proc.send_signal(signal.SIGINT)
        for *_, proc in runs:
            proc.wait()
        t_end = _now()
        with self._cond:
            self._procs.clear()
        for pid, out, err, proc in runs:
            if os.path.exists(out):
                with open(out, encoding="utf-8", errors="replace") as fh:
                    parsed, bad = parse_raw(fh.read(), pid=pid, t_start_ns=t_start, t_end_ns=t_end)
                result.samples.extend(parsed)
                result.bad_lines += bad
                result.written = True
            alive = _alive(pid)
            if not alive:
                result.exited.append(pid)
            if proc.returncode == 0 or not alive:
                continue
            if self._stop_requested.is_set() and proc.returncode < 0:
                continue  # interrupted by stop() before py-spy could write its window
            if proc.returncode < 0 and self._lost_in_a_row < MAX_LOST_WINDOWS:
                # py-spy was killed (OOM killer, a stray kill): this window is lost, the next
                # one starts a new py-spy; only repeated deaths end the sampling.
                result.failed_runs += 1
                result.lost.append(f"py-spy killed by signal {-proc.returncode} while sampling "
                                   f"pid {pid}; window lost")
                continue
            with open(err, encoding="utf-8", errors="replace") as fh:
                stderr = fh.read()
            result.failed_runs += 1
            if result.failure is not None:
                continue
            if _permission_denied(stderr):
                cause = ptrace_problem(pid) or (
                    "the kernel refused access to its memory; fix: run wsprof as the same user "
                    f"as the target, {SYSCTL_FIX}, or in a container `--cap-add SYS_PTRACE`"
                )
                result.failure = STOP_PTRACE_DENIED
                result.error = InputError(f"cannot sample pid {pid}: ptrace denied: {cause}")
            else:
                message = _error_line(stderr)
                result.failure = f"{STOP_PYSPY_FAILED}: {message}"
                result.error = InputError(
                    f"py-spy failed on pid {pid}: {message}; check that pid {pid} is a Python "
                    f"process py-spy supports (`py-spy dump --pid {pid}` shows the full error)"
                )
        return result

    def _record(self, result: _Window) -> None:
        """Write one window's samples and events in one transaction, then update counts."""
        assert self._writer is not None
        new_stacks: list[tuple[int, str]] = []
        rows: list[tuple[int, int, int, int, int, int]] = []
        for w in result.samples:
            sid = self._stack_ids.get(w.frames)
            if sid is None:
                sid = len(self._stack_ids) + 1
                self._stack_ids[w.frames] = sid
                new_stacks.append((sid, json.dumps(list(w.frames))))
            rows.append((w.t_start_ns, w.t_end_ns, w.pid, w.tid, sid, w.count))
        t = _now()
        events = [(t, EVENT_KIND, f"target exited: pid {pid}") for pid in result.exited]
        events += [(t, EVENT_KIND, detail) for detail in result.lost]
        self._lost_in_a_row = self._lost_in_a_row + 1 if result.lost else 0
        if result.failure is not None:
            events.append((t, EVENT_KIND, f"window failed: {result.failure}"))
        if rows or events:
            self._writer.write({"stacks": new_stacks, "samples": rows, "events": events})
        with self._cond:
            self.samples += sum(w.count for w in result.samples)
            self.windows += int(result.written)
            self.errors += result.bad_lines + result.failed_runs
            self.exited.extend(result.exited)
            self._cond.notify_all()
        if result.written:
            self._writer.set_meta({"sampler": self._status()})

    def _finish(self, reason: str, error: WsprofError | None) -> None:
        with self._cond:
            self.stop_reason = reason
            self.error = error
            self.state = "failed" if error is not None else "stopped"
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                detail = (
                    f"stopped: {reason}; samples={self.samples} windows={self.windows} "
                    f"errors={self.errors}"
                )
                writer.write({"events": [(_now(), EVENT_KIND, detail)]})
                writer.set_meta({"sampler": self._status()})
            except Exception as e:  # noqa: BLE001 - the data already written stays
                sys.stderr.write(f"wsprof: cannot finish {self.path}: {e}\n")
            finally:
                with contextlib.suppress(Exception):
                    writer.close()
        with self._cond:
            self._cond.notify_all()
        atexit.unregister(self.stop)
