"""The capture session: one object owns what ``wsprof.patch()`` starts.

A :class:`CaptureSession` owns the recorder, the installed hooks (collectives, extra
communicators), the counter sampler, the SIGTERM handler and the ``atexit`` flush; its
:meth:`~CaptureSession.start` installs them in order and :meth:`~CaptureSession.stop` takes
them down in reverse. The process has at most one session at a time, held here and nowhere
else (:func:`current`); ``wsprof.patch()``, ``unpatch()``, ``flush()``, ``memory_snapshot()``
and ``trace_path()`` are the functions of this module.

The session owns the recorder; three components keep a reference to it as a hot-path cache,
so that a hook or marker reads one attribute instead of asking the session on every call:
``markers.STATE.recorder`` (bound by :func:`wsprof.capture.markers.bind`, cleared by
``markers.unbind``), ``collectives._STATE.recorder`` (set by
:func:`wsprof.capture.collectives.install`, cleared by ``collectives.uninstall``) and
``extra._STATE.recorder`` (``extra.install`` / ``extra.uninstall``). Each is bound only by
:meth:`CaptureSession.start` and unbound only by :meth:`~CaptureSession.stop` or
:meth:`~CaptureSession.forget`, through those functions; nothing else sets them, so they are
always this session's recorder or None.

The session's :class:`~wsprof.capture.settings.Settings` are read once (by :func:`patch`, or
passed in) and handed down: to the recorder (ring size, compiled or Python ring), the counter
sampler (budget, interval) and the extra hooks (``WSPROF_EXTRA``); nothing below re-reads the
environment.

``patch()`` is idempotent (a second call, or a racing one in another thread, returns the same
trace) and reversible (``unpatch()`` puts every original back; patch again for a new trace).
In a forked child the parent's session is dropped at the child's first ``patch()``: the child
records into a trace of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import numbers
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wsprof.capture import markers
from wsprof.capture import settings as cfg
from wsprof.contracts.events import EventKind

if TYPE_CHECKING:
    from wsprof.capture.counters import CounterSampler
    from wsprof.capture.recorder import Recorder


class CaptureSession:
    """One recording of this process: a recorder and everything that feeds it.

    Args:
        out_dir: run folder; the trace is ``<out_dir>/<host>-<pid>.wsprof``.
        settings: the ``WSPROF_*`` settings (:func:`wsprof.capture.settings.read`).
        flush_interval_s: seconds between background writes, a finite number > 0.
        extra: more communicators to hook (``module:qualname[=op]``).
        layers: ``both`` or ``api``.
        device_time: measure device time (CUDA events, NCCL completion hook).
        keep_steps: steps kept in full at each end of the run (0: all).
        counters: run the counter sampler.
    """

    def __init__(
        self,
        out_dir: str,
        settings: cfg.Settings,
        *,
        flush_interval_s: float,
        extra: Sequence[str] | None,
        layers: str,
        device_time: bool,
        keep_steps: int | None,
        counters: bool,
        source: str = "patch",
    ) -> None:
        self.out_dir = out_dir
        self.source = source
        self.settings = settings
        self.flush_interval_s = flush_interval_s
        self.extra = extra
        self.layers = layers
        self.device_time = device_time
        self.keep_steps = keep_steps
        self.counters = counters
        self.recorder: Recorder | None = None
        #: The counter sampler (:mod:`wsprof.capture.counters`) while it runs; the recorder
        #: reports its stats in the trace's metadata.
        self.sampler: CounterSampler | None = None
        self.pid = os.getpid()

    @property
    def path(self) -> str | None:
        """The trace file, or None before :meth:`start` or after it failed."""
        return None if self.recorder is None else str(self.recorder.path)

    def start(self) -> str | None:
        """Create the trace and install everything that records into it. Never raises: a part
        that cannot be installed is an internal error in the trace (or, for the trace itself, a
        one-line warning on stderr).

        Returns:
            The trace file path, or None when the trace cannot be created.
        """
        from wsprof.capture.recorder import Recorder
        from wsprof.trace import retention as ret

        s = self.settings
        for line in s.warnings:
            sys.stderr.write(f"wsprof: {line}\n")
        try:
            keep = self.keep_steps if self.keep_steps is not None else s.keep_steps
            retention = ret.Retention(
                max(int(ret.DEFAULT_KEEP_STEPS if keep is None else keep), 0),
                s.thinned_step_calls or ret.DEFAULT_THINNED_STEP_CALLS,
            )
            rec = Recorder(
                self.out_dir,
                source=self.source,
                flush_interval_s=self.flush_interval_s,
                retention=retention,
                settings=s,
            )
        except Exception as e:  # noqa: BLE001 - never raise into training
            sys.stderr.write(
                f"wsprof: not profiling: cannot create a trace in {self.out_dir!r} "
                f"({type(e).__name__}: {e}); set {cfg.ENV_OUT} to a writable folder\n"
            )
            return None
        self.recorder = rec
        for line in s.warnings:
            rec.event(EventKind.SETTINGS, line)
        markers.bind(rec)
        self._install_collectives(rec)
        try:
            from wsprof.capture.flight import FlightReader

            rec.flight = FlightReader(rec)
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("flight", e)
        try:
            from wsprof.capture import sharing

            sharing.install(rec)
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("sharing", e)
        if self.counters:
            self._start_counters(rec)
        try:
            from wsprof.capture import extra as extra_hooks

            extra_hooks.install(extra_hooks.targets_from(self.extra, s.extra), recorder=rec)
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("extra", e)
        try:
            from wsprof.capture import signals

            why_not = signals.install(_on_signal)
            if why_not:
                rec.event(EventKind.SIGNALS, f"no SIGTERM flush: {why_not}")
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("signals", e)
        atexit.register(_at_exit)
        return str(rec.path)

    def _install_collectives(self, rec: Recorder) -> None:
        try:
            from wsprof.capture import collectives

            collectives.install(rec, self.layers, self.device_time)
        except Exception as e:  # noqa: BLE001 - never raise into training
            sys.stderr.write(f"wsprof: collectives not hooked ({type(e).__name__}: {e})\n")
            rec.internal_error("install", e)

    def _start_counters(self, rec: Recorder) -> None:
        s = self.settings
        try:
            from wsprof.capture import counters as counter_probes

            self.sampler = rec.sampler = counter_probes.install(
                rec,
                lambda: markers.STATE.boundaries,
                lambda: markers.STATE.steps_started,
                fraction=s.probe_budget_fraction or cfg.DEFAULT_PROBE_BUDGET_FRACTION,
                interval_s=(s.probe_interval_ms or cfg.DEFAULT_PROBE_INTERVAL_MS) / 1e3,
            )
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("counters", e)

    def stop(self) -> None:
        """Put every original back, close the open step and write everything recorded."""
        from wsprof.capture import collectives, signals
        from wsprof.capture import extra as extra_hooks

        rec = self.recorder
        if rec is None:
            return
        collectives.uninstall()
        extra_hooks.uninstall()
        signals.uninstall()
        markers.close_step()
        self._stop_sampler()
        from wsprof.capture import sharing

        sharing.uninstall()  # after the sampler's last round: it reads the ledger
        rec.close()
        markers.unbind()
        self.recorder = None
        atexit.unregister(_at_exit)

    def _stop_sampler(self) -> None:
        """Stop the counter sampler after its last round (before the recorder's last flush)."""
        sampler, self.sampler = self.sampler, None
        if sampler is not None and self.pid == os.getpid():  # a forked child has no thread
            try:
                sampler.stop()
            except Exception as e:  # noqa: BLE001 - never raise into training
                if self.recorder is not None:
                    self.recorder.internal_error("counters", e)

    def forget(self) -> None:
        """In a forked child: drop the parent's recorder (it writes nothing here) and its
        hooks, without writing anything: each component unbinds its copy of the recorder."""
        from wsprof.capture import collectives, sharing
        from wsprof.capture import extra as extra_hooks

        def drop_sharing() -> None:
            sharing.uninstall(record=False)

        for unbind in (collectives.uninstall, extra_hooks.uninstall, drop_sharing):
            with contextlib.suppress(Exception):  # never raise into training
                unbind()
        markers.unbind()
        self.recorder = None

    def flush(self, timeout_s: float | None = None) -> None:
        """Write everything recorded so far to the trace file now.

        Args:
            timeout_s: the most seconds to wait for a flush already running; None: no limit.
        """
        if self.recorder is not None:
            self.recorder.flush(timeout_s=timeout_s)

    def memory_snapshot(self, reason: str) -> dict[str, Any] | None:
        """Summarise the CUDA caching allocator into the trace (see ``wsprof.memory_snapshot``).
        Never raises."""
        rec = self.recorder
        if rec is None:
            return None
        from wsprof.capture.counters import record_snapshot

        try:
            return record_snapshot(rec, reason)
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("memory_snapshot", e)
            return None

    def on_signal(self, final: bool) -> None:
        """On SIGTERM: write everything recorded; when the process ends now, close the open step
        span first (a user handler that carries on keeps its step open)."""
        if self.recorder is not None:
            if final:
                markers.close_step()
            # Never wait for ever in a signal handler: when the signal interrupted this
            # thread's own flush (wsprof.flush() in the loop), that flush cannot finish
            # while we wait.
            self.flush(timeout_s=2.0)

    def at_exit(self) -> None:
        """At interpreter exit: close the open step, write and close the trace, say where."""
        rec = self.recorder
        if rec is not None:
            markers.close_step()
            self._stop_sampler()
            from wsprof.capture import sharing

            sharing.record_update_in_progress()
            rec.close()
            self._say_where(rec)

    def _say_where(self, rec: Recorder) -> None:
        """One line on stderr at exit saying where the trace is: from rank 0 (or a process whose
        rank is unknown) only, so a 1,000-rank job prints one line; ``WSPROF_QUIET=1`` silences
        it, and so does ``wsprof run`` (``WSPROF_RUN=1``), which names the run folder once
        itself. The rank is the one the process group had (remembered when it is destroyed
        before exit)."""
        if self.settings.quiet or self.settings.run:
            return
        try:
            rank = rec._identity().get("rank") if hasattr(rec, "_identity") else None
            if rank in (None, 0):
                folder = os.path.dirname(str(rec.path))
                sys.stderr.write(f"wsprof: trace {rec.path} (wsprof analyze {folder})\n")
        except Exception:  # noqa: BLE001 - a message must never fail an exit
            pass


class _Holder:
    """The one place the current session is held."""

    def __init__(self) -> None:
        self.session: CaptureSession | None = None
        #: Serialises patch() and unpatch() (two threads patching at once make one session).
        #: Re-entrant: ``patch()`` imports torch, and under ``wsprof run`` the bootstrap's
        #: import hook calls ``patch()`` again from inside that import, in the same thread.
        self.lock = threading.RLock()

    def after_fork_in_child(self) -> None:
        """After ``fork()``: a lock another thread of the parent held stays held in the child
        for ever; the child gets a fresh one."""
        self.lock = threading.RLock()


_HOLDER = _Holder()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_HOLDER.after_fork_in_child)


def current() -> CaptureSession | None:
    """The running session of this process, or None when not patched."""
    return _HOLDER.session


def current_recorder() -> Recorder | None:
    """The running session's recorder, or None when not patched."""
    s = _HOLDER.session
    return None if s is None else s.recorder


def patch(
    out: str | None = None,
    *,
    flush_interval_s: float = 0.5,
    extra: Sequence[str] | None = None,
    layers: str | None = None,
    device_time: bool | None = None,
    keep_steps: int | None = None,
    counters: bool | None = None,
    settings: cfg.Settings | None = None,
    source: str = "patch",
) -> str | None:
    """Start the process's capture session (``wsprof.patch()``; its docstring has the
    arguments). A second call returns the running session's trace.

    Args:
        out: run folder; default ``$WSPROF_OUT``, else ``./wsprof-out/<timestamp>``.
        flush_interval_s: seconds between background writes, a finite number > 0.
        extra: more communicators to hook.
        layers: ``both`` or ``api``; default ``$WSPROF_LAYERS``.
        device_time: default ``$WSPROF_DEVICE_TIME``.
        keep_steps: steps kept in full at each end; default ``$WSPROF_KEEP_STEPS``.
        counters: default ``$WSPROF_COUNTERS``.
        settings: the ``WSPROF_*`` settings already read (the bootstrap's); default: read now.
        source: the trace's ``source`` (``patch``; ``inject`` for ``wsprof attach --inject``).

    Returns:
        The trace file path, or None when disabled or when the trace cannot be created.

    Raises:
        ValueError: a bad argument, or a bad ``$WSPROF_DISABLE`` / ``$WSPROF_LAYERS`` (one
            line); raised before anything is patched.
    """
    if (
        isinstance(flush_interval_s, bool)
        or not isinstance(flush_interval_s, numbers.Real)
        or not math.isfinite(flush_interval_s)
        or flush_interval_s <= 0
    ):
        raise ValueError(
            f"wsprof.patch(flush_interval_s={flush_interval_s!r}): expected a "
            "finite number of seconds > 0, e.g. 0.5"
        )
    if layers is not None and layers not in cfg.LAYERS:
        raise ValueError(
            f"wsprof.patch(layers={layers!r}): expected one of {', '.join(cfg.LAYERS)}"
        )
    s = cfg.read() if settings is None else settings
    s.raise_for(cfg.ENV_DISABLE)
    if s.disable:
        return None
    if layers is None:
        s.raise_for(cfg.ENV_LAYERS)
        layers = s.layers
    with _HOLDER.lock:
        running = _HOLDER.session
        if running is not None and running.pid != os.getpid():
            running.forget()  # a forked child patches for itself, into its own trace
            _HOLDER.session = running = None
        if running is not None:
            return running.path
        from wsprof.capture.recorder import default_out_dir

        session = CaptureSession(
            out or default_out_dir(s),
            s,
            flush_interval_s=float(flush_interval_s),
            extra=extra,
            layers=layers,
            device_time=s.device_time if device_time is None else device_time,
            keep_steps=keep_steps,
            counters=s.counters if counters is None else counters,
            source=source,
        )
        # Held before it starts: a patch() re-entered from inside start() (the bootstrap's
        # import hook, when start() imports torch) returns this session's trace.
        _HOLDER.session = session
        path = session.start()
        if path is None:
            _HOLDER.session = None
        return path


def unpatch() -> None:
    """Stop the current session (``wsprof.unpatch()``); nothing when not patched. Serialised
    with :func:`patch`."""
    with _HOLDER.lock:
        session, _HOLDER.session = _HOLDER.session, None
        if session is not None:
            session.stop()


def flush() -> None:
    """Write everything the current session recorded so far (``wsprof.flush()``)."""
    session = _HOLDER.session
    if session is not None:
        session.flush()


def memory_snapshot(reason: str = "requested") -> dict[str, Any] | None:
    """``wsprof.memory_snapshot()`` on the current session; None when not patched."""
    session = _HOLDER.session
    return None if session is None else session.memory_snapshot(str(reason))


def trace_path() -> str | None:
    """The current trace file, or None when not patched."""
    session = _HOLDER.session
    return None if session is None else session.path


def _on_signal(final: bool) -> None:
    """The SIGTERM handler's flush: the current session's (a forked child that patched for
    itself flushes its own trace through the handler it inherited)."""
    session = _HOLDER.session
    if session is not None:
        session.on_signal(final)


def _at_exit() -> None:
    """The ``atexit`` flush: the current session's."""
    session = _HOLDER.session
    if session is not None:
        session.at_exit()
