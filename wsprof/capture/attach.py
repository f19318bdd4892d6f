"""``wsprof attach``: sample running processes from outside, with no change to them.

Two parts run side by side until the duration ends, the targets exit or the caller stops:

* :class:`~wsprof.capture.pyspy.sampler.PySpySampler` writes stack samples, window after window, to
  ``<out>/<host>-<wsprofpid>-pyspy.wsprof``;
* :class:`ProcessPoller` writes, per target, ``<out>/<host>-<pid>-attach.wsprof``: the target's
  identity (pid, command line, host; never its environment) and counters polled every
  ``interval_s``: ``proc.rss_bytes``, ``proc.threads``, ``proc.open_fds``, ``proc.cpu_pct``
  (psutil) and, where NVML is available, ``nvml.process_gpu_bytes`` (the target's GPU memory)
  and ``nvml.gpu<i>.util_pct`` of the GPUs it uses.

Analysis joins each target's samples to its attach trace by pid, so ``wsprof analyze`` and
``wsprof report`` read an attach run like any other.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from wsprof.capture import settings as cfg
from wsprof.capture.nvml import Nvml
from wsprof.capture.process_stats import process_reading
from wsprof.capture.pyspy.ptrace import ptrace_problem
from wsprof.capture.recorder import identity_meta
from wsprof.contracts.events import EventKind, TargetExited
from wsprof.errors import InputError
from wsprof.trace.model import TRACE_SUFFIX
from wsprof.trace.outputs import unique_path
from wsprof.trace.writer import TraceWriter

_now = time.monotonic_ns

#: Seconds between two polls of the targets' process counters.
DEFAULT_POLL_S = 1.0
#: Inserted before ``.wsprof``: the trace of a target attached to.
TRACE_TAG = "-attach"


def parse_phase(text: str) -> tuple[str, str]:
    """``NAME=REGEX`` -> (name, regex).

    Raises:
        InputError: no ``=``, an empty name, or a regex that does not compile.
    """
    name, sep, regex = text.partition("=")
    name = name.strip()
    if not sep or not name or not regex:
        raise InputError(f"--phase {text!r}: expected NAME=REGEX, e.g. weight_sync=update_weights")
    try:
        re.compile(regex)
    except re.error as e:
        raise InputError(f"--phase {text!r}: bad regular expression ({e})") from e
    return name, regex


def _ancestors() -> set[int]:
    out = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        out |= {p.pid for p in psutil.Process().parents()}
    return out


#: A file mapped by a Python process: the interpreter or its library (``python3.11``,
#: ``libpython3.11.so.1.0``, ``python.exe``), matched in the file's base name.
_PYTHON_FILE_RE = re.compile(r"^(lib)?python", re.IGNORECASE)


def python_process(pid: int) -> bool | None:
    """Whether ``pid`` runs a Python interpreter: its executable, or a file it maps
    (``/proc/<pid>/maps``: ``libpython...``), is named ``python...``.

    Args:
        pid: the process.

    Returns:
        True or False; None when it cannot be told (maps unreadable, not Linux, gone).
    """
    try:
        exe = psutil.Process(pid).exe()
    except psutil.Error:
        exe = ""
    if exe and _PYTHON_FILE_RE.match(os.path.basename(exe)):
        return True
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read()
    except OSError:
        return None
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and _PYTHON_FILE_RE.match(os.path.basename(parts[5].strip())):
            return True
    return False if maps else None


def _process_name(pid: int) -> str:
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return "?"


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie has)."""
    try:
        return bool(pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def resolve_targets(
    pids: Sequence[int],
    match: str | None = None,
    check_ptrace: bool = True,
    say: Callable[[str], None] | None = None,
) -> list[int]:
    """The processes to attach to: ``pids`` plus every Python process whose command line
    matches ``match`` (wsprof itself and its parents excluded), each checked to exist and,
    where the OS tells, to be ptrace-able.

    A matched process that is not Python (a shell wrapper, ``sleep``) is skipped with one line
    through ``say``; a pid given explicitly is never skipped (py-spy has the last word).

    Args:
        pids: process ids given on the command line.
        match: a regular expression searched in each process's command line (space-joined).
        check_ptrace: refuse targets this process may not ptrace (with the cause and the fix).
        say: where the line about each skipped process goes (default: nowhere).

    Returns:
        Distinct pids, in the order given then found.

    Raises:
        InputError: no target; a pid that does not exist or has exited; a bad regex; only
            non-Python processes match; ptrace not allowed.
    """
    found: list[int] = []
    for pid in pids:
        if not _running(pid):
            raise InputError(f"no such process: pid {pid}; check the pid with `ps -p {pid}`")
        found.append(pid)
    if match:
        try:
            rx = re.compile(match)
        except re.error as e:
            raise InputError(f"--match {match!r}: bad regular expression ({e})") from e
        skip = _ancestors()
        matched: list[int] = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(proc.info.get("cmdline") or [])
            if proc.info["pid"] not in skip and cmd and rx.search(cmd):
                matched.append(int(proc.info["pid"]))
        if not matched and not pids:
            raise InputError(
                f"--match {match!r}: no running process's command line matches; list them with "
                "`ps -eo pid,args`"
            )
        not_python = [p for p in matched if p not in pids and python_process(p) is False]
        for pid in not_python:
            if say is not None:
                say(
                    f"wsprof attach: skipping pid {pid} ({_process_name(pid)}): matches "
                    f"--match but is not a Python process; give its pid to try it anyway"
                )
        found += [p for p in matched if p not in not_python]
        if not found:
            raise InputError(
                f"--match {match!r}: only non-Python processes match (pid "
                f"{', '.join(map(str, not_python))}); match the Python processes' command lines"
            )
    if not found:
        raise InputError("nothing to attach to: give a PID or --match REGEX")
    targets = list(dict.fromkeys(found))
    if check_ptrace:
        for pid in targets:
            problem = ptrace_problem(pid)
            if problem is not None:
                raise InputError(f"cannot attach to pid {pid}: {problem}")
    return targets


class ProcessPoller:
    """Polls each target's process counters into its own attach trace.

    Args:
        pids: targets.
        out_dir: run folder.
        interval_s: seconds between polls.
        extra_meta: added to every target's trace meta (sampling options, phase patterns).

    Raises:
        OSError: a trace file cannot be created.

    Attributes:
        exited: targets seen to exit, with the monotonic ns when first missed.
        paths: pid -> trace path.
        write_errors: polls that could not be written (disk full, folder removed).
    """

    def __init__(
        self,
        pids: Sequence[int],
        out_dir: str,
        interval_s: float = DEFAULT_POLL_S,
        extra_meta: dict[str, Any] | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.exited: dict[int, int] = {}
        self.paths: dict[int, str] = {}
        self.write_errors = 0
        self._writers: dict[int, TraceWriter] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._nvml = Nvml()
        host = socket.gethostname()
        allow_shared = cfg.read().allow_shared_out
        for pid in pids:
            path = unique_path(os.path.join(out_dir, f"{host}-{pid}{TRACE_TAG}"), TRACE_SUFFIX)
            w = TraceWriter(path, allow_shared_out=allow_shared)
            meta = {
                **identity_meta("attach"),
                **(extra_meta or {}),
                "pid": pid,
                "attached_by_pid": os.getpid(),
            }
            try:
                proc = psutil.Process(pid)
                meta["argv"] = proc.cmdline()
                meta["process_name"] = proc.name()
                self._procs[pid] = proc
                proc.cpu_percent(None)  # primes the CPU% counter
            except psutil.Error:
                self.exited[pid] = _now()
            if not self._nvml.ok:
                meta["nvml"] = f"unavailable ({self._nvml.why})"
            w.set_meta(meta)
            self._writers[pid] = w
            self.paths[pid] = path
        self._thread = threading.Thread(target=self._run, name="wsprof-poller", daemon=True)

    def start(self) -> None:
        """Poll once now and then every ``interval_s`` in a background thread."""
        self.poll()
        self._thread.start()

    def stop(self) -> None:
        """Poll a last time, stop and close every trace. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.poll()
        for w in self._writers.values():
            with contextlib.suppress(Exception):
                w.close()

    def alive(self) -> list[int]:
        """Targets not seen to exit."""
        return [p for p in self._writers if p not in self.exited]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def poll(self) -> None:
        """One poll of every live target (never raises: a failure is an event in its trace)."""
        t = _now()
        live = self.alive()
        gpu = self._nvml.sample(live)
        for pid in live:
            w = self._writers[pid]
            rows: list[tuple[int, str, float]] = []
            events: list[tuple[int, str, str]] = []
            proc = self._procs.get(pid)
            try:
                if proc is None or not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                    raise psutil.NoSuchProcess(pid)
                rows += [(t, name, value) for name, value in process_reading(proc)]
                rows += [(t, name, value) for name, value in gpu.get(pid, [])]
            except psutil.NoSuchProcess:
                self.exited[pid] = t
                events.append((t, EventKind.TARGET_EXITED.value, TargetExited(pid=pid).encode()))
            except psutil.Error as e:
                events.append((t, EventKind.POLL_ERROR.value, f"{type(e).__name__}: {e}"))
            try:
                w.write({"counters": rows, "events": events})
            except Exception:  # noqa: BLE001 - counted; sampling goes on
                self.write_errors += 1
