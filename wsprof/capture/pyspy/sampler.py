"""The py-spy sampler: samples one or more live Python processes in successive windows.

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
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import psutil

from wsprof.capture import settings as cfg
from wsprof.capture.pyspy.binary import PYSPY_INSTALL_HINT, find_pyspy
from wsprof.capture.pyspy.parse import MAX_ERROR_CHARS, error_line, parse_raw, permission_denied
from wsprof.capture.pyspy.ptrace import SYSCTL_FIX, ptrace_problem
from wsprof.capture.recorder import identity_meta, new_trace_path
from wsprof.contracts.events import (
    EventKind,
    SamplerStarted,
    SamplerStopped,
    SamplerTargetExited,
    SamplerWindowFailed,
    SamplerWindowLost,
)
from wsprof.errors import InputError, WsprofError
from wsprof.trace.model import SampleWindow
from wsprof.trace.writer import TraceWriter

_now = time.monotonic_ns

#: Seconds stop() waits for py-spy to write its partial window after SIGINT before killing it.
STOP_GRACE_S = 5.0
#: Windows in a row lost to a killed py-spy before the sampler gives up.
MAX_LOST_WINDOWS = 3
#: A duration's remainder shorter than this (s) is not sampled (py-spy windows are whole seconds).
MIN_TAIL_WINDOW_S = 0.5
#: Default sampling rate, samples per second per thread.
DEFAULT_RATE_HZ = 100
#: Default window length, whole seconds (py-spy's ``--duration`` takes an integer).
DEFAULT_WINDOW_S = 5
#: Inserted before ``.wsprof`` so the sampler's trace differs from its own process trace.
TRACE_TAG = "-pyspy"
#: ``kind`` of the events this sampler writes.
EVENT_KIND = EventKind.SAMPLER.value

SamplerState = Literal["created", "running", "stopped", "failed"]

STOP_DURATION = "duration reached"
STOP_CALLER = "stopped by caller"
STOP_TARGET_EXITED = "target exited"
STOP_PTRACE_DENIED = "ptrace denied"
#: Followed by ``: <message>``.
STOP_PYSPY_FAILED = "py-spy failed"
#: An error inside wsprof (e.g. the trace cannot be written); followed by ``: <message>``.
STOP_SAMPLER_FAILED = "sampler failed"


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


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
            self._writer = TraceWriter(self.path, allow_shared_out=cfg.read().allow_shared_out)
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
        return SamplerStarted(
            targets=tuple(self.pids),
            rate_hz=self.rate_hz,
            window_s=self.window_s,
            every_s=self.every_s,
            blocking=self.blocking,
            native=self.native,
            pyspy_version=self.binary.version_str,
        ).encode()

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
                result.lost.append(SamplerWindowLost(signal=-proc.returncode, pid=pid).encode())
                continue
            with open(err, encoding="utf-8", errors="replace") as fh:
                stderr = fh.read()
            result.failed_runs += 1
            if result.failure is not None:
                continue
            if permission_denied(stderr):
                cause = ptrace_problem(pid) or (
                    "the kernel refused access to its memory; fix: run wsprof as the same user "
                    f"as the target, {SYSCTL_FIX}, or in a container `--cap-add SYS_PTRACE`"
                )
                result.failure = STOP_PTRACE_DENIED
                result.error = InputError(f"cannot sample pid {pid}: ptrace denied: {cause}")
            else:
                message = error_line(stderr)
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
        events = [(t, EVENT_KIND, SamplerTargetExited(pid=pid).encode()) for pid in result.exited]
        events += [(t, EVENT_KIND, detail) for detail in result.lost]
        self._lost_in_a_row = self._lost_in_a_row + 1 if result.lost else 0
        if result.failure is not None:
            events.append((t, EVENT_KIND, SamplerWindowFailed(reason=result.failure).encode()))
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
                detail = SamplerStopped(
                    reason=reason, samples=self.samples, windows=self.windows, errors=self.errors
                ).encode()
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
