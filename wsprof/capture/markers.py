"""Step and phase markers and user counters: ``wsprof.step()``, ``wsprof.phase()``,
``wsprof.counter()``.

The current step and phase live in one module-level object read by the hooks (two attribute
reads per call). Markers are no-ops costing a function call while wsprof is not patched.
"""

from __future__ import annotations

import os
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_now = time.monotonic_ns


class MarkerState:
    """What the hooks stamp on every call: the step number and the innermost phase.

    Phases are per thread (a rollout thread and the weight-sync thread of an async trainer
    each have their own); a thread that never entered a phase inherits the main thread's.
    """

    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        self.step = -1
        self.step_start_ns: int | None = None
        self.phases: dict[int, list[str]] = {}
        #: Bumped at every step and phase boundary (the counter sampler watches it).
        self.boundaries = 0
        #: Bumped at every step start.
        self.steps_started = 0
        self.main_ident = threading.main_thread().ident

    def phase_of(self, ident: int) -> str | None:
        """Innermost phase of thread ``ident`` (else of the main thread), or None."""
        stack = self.phases.get(ident) or self.phases.get(self.main_ident or -1)
        return stack[-1] if stack else None


STATE = MarkerState()


def _recorder() -> Recorder | None:
    """The recorder markers write to: None when not patched, and in a forked child that did not
    patch for itself (the parent's queues are never drained there: they would only grow)."""
    rec = STATE.recorder
    if rec is not None and getattr(rec, "pid", None) != os.getpid():
        return None
    return rec


#: Largest step number a trace row holds (int64), with room for ``+ 1``.
MAX_STEP = 2**62


def _step_number(number: Any) -> int:
    try:
        n = int(number)
    except (TypeError, ValueError, OverflowError):
        return STATE.step + 1
    return max(-1, min(n, MAX_STEP))


def step(number: int | None = None) -> int:
    """Mark the start of a training step (and the end of the previous one).

    Call it at the top of each step of the training loop. Calls before the first ``step()``
    are stamped step -1.

    Args:
        number: the step's number; default: previous + 1 (0 for the first).

    Returns:
        The number of the step that starts now.
    """
    t = _now()
    rec = _recorder()
    if rec is not None:
        from wsprof.capture import audit

        audit.read(rec, "step")  # c10d's counts at the end of the step that ends now
    if rec is not None and STATE.step_start_ns is not None:
        rec.spans.append(
            ("step", str(STATE.step), STATE.step_start_ns, t, STATE.step, threading.get_ident())
        )
    # int(): a tensor, numpy or float step number must never poison the trace's rows; clamped
    # to what a trace row (int64) holds.
    STATE.step = _step_number(number) if number is not None else STATE.step + 1
    STATE.step_start_ns = t
    STATE.boundaries += 1
    STATE.steps_started += 1
    return STATE.step


def close_step() -> None:
    """End the open step span (at unpatch or exit) without starting another."""
    rec = _recorder()
    if rec is not None:
        from wsprof.capture import audit

        audit.read(rec, "close")
    if rec is not None and STATE.step_start_ns is not None:
        t = _now()
        rec.spans.append(
            ("step", str(STATE.step), STATE.step_start_ns, t, STATE.step, threading.get_ident())
        )
    STATE.step_start_ns = None


class phase:  # used like a function: ``with wsprof.phase("rollout"):``
    """Context manager marking a phase of the current step.

    Standard names: ``rollout``, ``train``, ``weight_sync``; any name is accepted.

    Args:
        name: the phase name.
    """

    def __init__(self, name: str) -> None:
        self.name = str(name)  # an enum or other object would poison the trace's strings
        self._t0 = 0

    def __enter__(self) -> phase:
        STATE.phases.setdefault(threading.get_ident(), []).append(self.name)
        STATE.boundaries += 1
        self._t0 = _now()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        t = _now()
        STATE.boundaries += 1
        ident = threading.get_ident()
        stack = STATE.phases.get(ident, [])
        if stack and stack[-1] == self.name:
            stack.pop()
        elif self.name in stack:
            stack.remove(self.name)
        if not stack:
            # A thread that left its last phase holds no entry (threads come and go).
            STATE.phases.pop(ident, None)
        rec = _recorder()
        if rec is not None:
            rec.spans.append(("phase", self.name, self._t0, t, STATE.step, threading.get_ident()))


def counter(name: str, value: float) -> None:
    """Record a user counter sample (e.g. ``wsprof.counter("segments", n)``).

    Args:
        name: counter name; use units in the name (``staging_bytes``, ``queue_len``).
        value: the value now.
    """
    rec = _recorder()
    if rec is None:
        return
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError) as e:
        # Training must not change behaviour because it is profiled: count and drop.
        rec.internal_error("counter", ValueError(f"counter {str(name)[:80]!r}: value "
                                                 f"{str(value)[:40]!r} is not a number ({e})"))
        return
    rec.counters.append((_now(), str(name), v))
