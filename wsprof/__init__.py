"""wsprof: weight-sync profiler and leak detector for distributed RL post-training.

In-process use::

    import wsprof
    wsprof.patch()                 # hooks every collective; trace in $WSPROF_OUT or ./wsprof-out
    for step in range(n):
        wsprof.step()
        with wsprof.phase("rollout"):
            ...
        with wsprof.phase("weight_sync"):
            ...

Nothing is patched on import. Analysis (``wsprof.analysis``) never imports torch.
"""

from __future__ import annotations

import atexit
import math
import numbers
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from wsprof.capture.markers import close_step, counter, phase, step

__version__ = "0.1.0"
__all__ = ["__version__", "counter", "flush", "memory_snapshot", "patch", "phase", "step",
           "trace_path", "unpatch"]

_recorder: Any = None
#: Serialises :func:`patch` and :func:`unpatch` (two threads patching at once make one session).
#: Re-entrant: ``patch()`` imports torch, and under ``wsprof run`` the bootstrap's import hook
#: calls ``patch()`` again from inside that import, in the same thread.
_lock = threading.RLock()


def _new_lock_in_child() -> None:
    """After ``fork()``: a lock another thread of the parent held stays held in the child for
    ever; the child gets a fresh one."""
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def patch(
    out: str | None = None,
    *,
    flush_interval_s: float = 0.5,
    extra: Sequence[str] | None = None,
    layers: str | None = None,
    device_time: bool | None = None,
    keep_steps: int | None = None,
    counters: bool | None = None,
) -> str | None:
    """Hook every collective of ``torch.distributed`` and start recording.

    Calling it twice, or from two threads at once, is the same as calling it once (one trace,
    each collective hooked once). ``WSPROF_DISABLE=1`` (or ``true``/``yes``/``on``) turns it into
    a no-op.

    Args:
        out: run folder; default ``$WSPROF_OUT``, else ``./wsprof-out/<timestamp>``. The trace is
            ``<out>/<host>-<pid>.wsprof``.
        flush_interval_s: seconds between background writes (the most a SIGKILL can lose); a
            finite number > 0.
        extra: more communicators outside ``torch.distributed`` to hook, as
            ``"module:qualname"`` or ``"module:qualname=op"`` (e.g.
            ``"mylib.sync:push_weights=broadcast"``); added to the built-in vLLM, SGLang and
            ``ray.util.collective`` targets and to ``$WSPROF_EXTRA`` (comma-separated). A target
            whose module is not imported yet is hooked when it is; one that cannot be hooked is an
            ``extra_missing`` event in the trace, never an exception.
        layers: ``both`` (default, or ``$WSPROF_LAYERS``): API names and the ``ProcessGroup``
            backend, so the time between them is known; ``api``: names only (cheapest).
        device_time: also measure each collective's device time with CUDA events and the NCCL
            completion hook (default ``$WSPROF_DEVICE_TIME=1``); costs a few µs per call, so off
            by default; without CUDA it is skipped (an event in the trace says so).
        keep_steps: full per-call detail is kept for the first and the last ``keep_steps``
            step numbers (default ``$WSPROF_KEEP_STEPS``, else 20; 0 keeps every call). Steps
            in between keep exact per-step totals and an evenly spaced sample of
            ``$WSPROF_THINNED_STEP_CALLS`` (default 2,000) calls, so a long run's trace stays
            bounded (:mod:`wsprof.trace.retention`). Needs step markers (``wsprof.step()``).

    Returns:
        The trace file path, or None when disabled or when the trace cannot be created (a one-line
        warning goes to stderr; training goes on unprofiled).

    Raises:
        ValueError: a bad argument (``flush_interval_s`` not a finite number > 0, ``layers``
            not ``both``/``api``) or a bad ``$WSPROF_DISABLE`` / ``$WSPROF_LAYERS`` (one line
            naming it, its value and the accepted values); raised before anything is patched.
    """
    from wsprof.capture.collectives import LAYERS
    from wsprof.capture.settings import env_choice, env_flag

    if isinstance(flush_interval_s, bool) or not isinstance(flush_interval_s, numbers.Real) or \
            not math.isfinite(flush_interval_s) or flush_interval_s <= 0:
        raise ValueError(f"wsprof.patch(flush_interval_s={flush_interval_s!r}): expected a "
                         "finite number of seconds > 0, e.g. 0.5")
    if layers is not None and layers not in LAYERS:
        raise ValueError(f"wsprof.patch(layers={layers!r}): expected one of "
                         f"{', '.join(LAYERS)}")
    if env_flag("WSPROF_DISABLE"):
        return None
    layers = layers or env_choice("WSPROF_LAYERS", LAYERS, "both")
    with _lock:
        return _patch_locked(out, flush_interval_s, extra, layers, device_time, keep_steps,
                             counters)


def _patch_locked(out: str | None, flush_interval_s: float, extra: Sequence[str] | None,
                  layers: str, device_time: bool | None, keep_steps: int | None,
                  counters: bool | None) -> str | None:
    """:func:`patch`, arguments checked, under ``_lock``."""
    global _recorder
    if _recorder is not None and getattr(_recorder, "pid", None) != os.getpid():
        _forget_parent()  # a forked child patches for itself, into its own trace
    if _recorder is not None:
        return str(_recorder.path)
    from wsprof.capture import collectives
    from wsprof.capture.markers import STATE
    from wsprof.capture.recorder import Recorder, default_out_dir
    from wsprof.capture.settings import env_int
    from wsprof.trace import retention as ret

    out_dir = out or default_out_dir()
    try:
        keep = keep_steps if keep_steps is not None else env_int(
            "WSPROF_KEEP_STEPS", ret.DEFAULT_KEEP_STEPS)
        retention = ret.Retention(max(int(keep), 0), env_int(
            "WSPROF_THINNED_STEP_CALLS", ret.DEFAULT_THINNED_STEP_CALLS, minimum=1))
        rec = Recorder(out_dir, flush_interval_s=flush_interval_s, retention=retention)
    except Exception as e:  # noqa: BLE001 - never raise into training
        sys.stderr.write(
            f"wsprof: not profiling: cannot create a trace in {out_dir!r} "
            f"({type(e).__name__}: {e}); set WSPROF_OUT to a writable folder\n"
        )
        return None
    _recorder = rec
    STATE.recorder = rec
    try:
        if device_time is None:
            device_time = os.environ.get("WSPROF_DEVICE_TIME") == "1"
        collectives.install(rec, layers, device_time)
    except Exception as e:  # noqa: BLE001 - never raise into training
        sys.stderr.write(f"wsprof: collectives not hooked ({type(e).__name__}: {e})\n")
        rec.internal_error("install", e)
    if counters is None:
        counters = os.environ.get("WSPROF_COUNTERS", "1").strip().lower() not in (
            "0", "false", "no", "off")
    if counters:
        try:
            from wsprof.capture import counters as counter_probes

            rec.sampler = counter_probes.install(rec, lambda: STATE.boundaries,
                                                 lambda: STATE.steps_started)
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("counters", e)
    try:
        from wsprof.capture import extra as extra_hooks

        extra_hooks.install(extra_hooks.targets_from(extra), recorder=rec)
    except Exception as e:  # noqa: BLE001 - never raise into training
        rec.internal_error("extra", e)
    try:
        from wsprof.capture import signals

        why_not = signals.install(_flush_all)
        if why_not:
            rec.event("signals", f"no SIGTERM flush: {why_not}")
    except Exception as e:  # noqa: BLE001 - never raise into training
        rec.internal_error("signals", e)
    atexit.register(_at_exit)
    return str(rec.path)


def unpatch() -> None:
    """Restore every original collective, close the open step and write everything recorded.

    Serialised with :func:`patch` (a patch() racing it in another thread waits for it)."""
    with _lock:
        _unpatch_locked()


def _unpatch_locked() -> None:
    global _recorder
    from wsprof.capture import collectives
    from wsprof.capture import extra as extra_hooks
    from wsprof.capture.markers import STATE

    if _recorder is None:
        return
    from wsprof.capture import signals

    collectives.uninstall()
    extra_hooks.uninstall()
    signals.uninstall()
    close_step()
    _recorder.close()
    STATE.recorder = None
    STATE.step = -1
    STATE.step_start_ns = None
    _recorder = None
    atexit.unregister(_at_exit)


def flush() -> None:
    """Write everything recorded so far to the trace file now."""
    if _recorder is not None:
        _recorder.flush()


def memory_snapshot(reason: str = "requested") -> dict[str, Any] | None:
    """Summarise the CUDA caching allocator's state now (``torch.cuda.memory_snapshot()``) into
    the trace, as a ``memory_snapshot`` event; the raw snapshot is never stored.

    It walks every segment and block, so its cost grows with the allocator: call it when you
    need it, not per step. Never raises.

    Returns:
        The summary (segments, expandable segments, reserved/allocated bytes, blocks, a
        segment-size histogram, the largest blocks in bytes, its own cost in ns), or None when
        not patched or CUDA is not initialised in this process.
    """
    if _recorder is None:
        return None
    from wsprof.capture.counters import record_snapshot

    try:
        return record_snapshot(_recorder, str(reason))
    except Exception as e:  # noqa: BLE001 - never raise into training
        _recorder.internal_error("memory_snapshot", e)
        return None


def trace_path() -> str | None:
    """The current trace file, or None when not patched."""
    return None if _recorder is None else str(_recorder.path)


def _forget_parent() -> None:
    """In a forked child: drop the parent's recorder (it writes nothing here) and its hooks."""
    global _recorder
    from wsprof.capture import collectives
    from wsprof.capture import extra as extra_hooks
    from wsprof.capture.markers import STATE

    try:
        collectives.uninstall()
        extra_hooks.uninstall()
    except Exception:  # noqa: BLE001 - never raise into training
        pass
    STATE.recorder = None
    _recorder = None


def _flush_all(final: bool) -> None:
    """On SIGTERM: write everything recorded; when the process ends now, close the open step
    span first (a user handler that carries on keeps its step open)."""
    if _recorder is not None:
        if final:
            close_step()
        # Never wait for ever in a signal handler: when the signal interrupted this thread's
        # own flush (wsprof.flush() in the loop), that flush cannot finish while we wait.
        _recorder.flush(timeout_s=2.0)


def _at_exit() -> None:
    if _recorder is not None:
        close_step()
        _recorder.close()
        _say_where(_recorder)


def _say_where(rec: Any) -> None:
    """One line on stderr at exit saying where the trace is: from rank 0 (or a process whose
    rank is unknown) only, so a 1,000-rank job prints one line; ``WSPROF_QUIET=1`` silences it,
    and so does ``wsprof run`` (``WSPROF_RUN=1``), which names the run folder once itself. The
    rank is the one the process group had (remembered when it is destroyed before exit)."""
    if os.environ.get("WSPROF_QUIET") == "1" or os.environ.get("WSPROF_RUN") == "1":
        return
    try:
        rank = rec._identity().get("rank") if hasattr(rec, "_identity") else None
        if rank in (None, 0):
            folder = os.path.dirname(str(rec.path))
            sys.stderr.write(f"wsprof: trace {rec.path} (wsprof analyze {folder})\n")
    except Exception:  # noqa: BLE001 - a message must never fail an exit
        pass
