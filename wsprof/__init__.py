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

from collections.abc import Sequence
from typing import Any

from wsprof._version import __version__
from wsprof.capture import session as _session
from wsprof.capture.markers import counter, phase, step

__all__ = [
    "__version__",
    "counter",
    "flush",
    "memory_snapshot",
    "patch",
    "phase",
    "step",
    "trace_path",
    "unpatch",
]


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
        counters: sample counters (allocator, NVML, process, gc) on a budget (default
            ``$WSPROF_COUNTERS``, else on).

    Returns:
        The trace file path, or None when disabled or when the trace cannot be created (a one-line
        warning goes to stderr; training goes on unprofiled).

    Raises:
        ValueError: a bad argument (``flush_interval_s`` not a finite number > 0, ``layers``
            not ``both``/``api``) or a bad ``$WSPROF_DISABLE`` / ``$WSPROF_LAYERS`` (one line
            naming it, its value and the accepted values); raised before anything is patched.
    """
    return _session.patch(
        out,
        flush_interval_s=flush_interval_s,
        extra=extra,
        layers=layers,
        device_time=device_time,
        keep_steps=keep_steps,
        counters=counters,
    )


def unpatch() -> None:
    """Restore every original collective, close the open step and write everything recorded.

    Serialised with :func:`patch` (a patch() racing it in another thread waits for it)."""
    _session.unpatch()


def flush() -> None:
    """Write everything recorded so far to the trace file now."""
    _session.flush()


def memory_snapshot(reason: str = "requested") -> dict[str, Any] | None:
    """Summarise the CUDA caching allocator's state now (``torch.cuda.memory_snapshot()``) into
    the trace, as a ``memory_snapshot`` event; the raw snapshot is never stored.

    It walks every segment and block, so its cost grows with the allocator: call it when you
    need it, not per step. Never raises.

    Args:
        reason: why, recorded with the summary.

    Returns:
        The summary (segments, expandable segments, reserved/allocated bytes, blocks, a
        segment-size histogram, the largest blocks in bytes, its own cost in ns), or None when
        not patched or CUDA is not initialised in this process.
    """
    return _session.memory_snapshot(reason)


def trace_path() -> str | None:
    """The current trace file, or None when not patched."""
    return _session.trace_path()
