"""Step and phase markers and user counters: ``wsprof.step()``, ``wsprof.phase()``,
``wsprof.counter()``.

The current step and phase are read by the hooks on every call (a few attribute reads).
Markers are no-ops costing a function call while wsprof is not patched.

Phases are per context (:mod:`contextvars`), not per thread: the phase stack of the current
context is :data:`PHASE_VAR`. Threads each have their own context, and asyncio tasks copy the
context they are created in, so a task inherits the phases open where it was created and the
phases it enters stay its own (two tasks interleaving on one thread, one in ``rollout`` and one
in ``weight_sync``, each stamp their own phase). A context with no phase of its own (a thread
that never entered one) inherits the main thread's innermost phase (:func:`current_phase`).

The step is process-wide, not per context: steps are the trainer's loop boundaries, and the step
spans of one process never overlap.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_now = time.monotonic_ns


#: The phase stack of the current context, innermost last (an immutable tuple; ``()``: none).
PHASE_VAR: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("wsprof_phases")


#: Step starts :attr:`MarkerState.recent_starts` keeps.
RECENT_STARTS = 10_000


class MarkerState:
    """What the hooks stamp on every call: the step number and the innermost phase.

    The step is process-wide. Phases are per context (:data:`PHASE_VAR`); a context that has no
    phase of its own inherits the main thread's (:attr:`main_stack`): see :func:`current_phase`.
    """

    def __init__(self) -> None:
        self.recorder: Recorder | None = None
        self.step = -1
        self.step_start_ns: int | None = None
        #: :data:`PHASE_VAR`, here for the hooks (an attribute read, no import).
        self.phase_var = PHASE_VAR
        #: The phase stack of the main thread's current context, after its latest phase entry
        #: or exit: what a context with no phase of its own inherits.
        self.main_stack: tuple[str, ...] = ()
        #: Bumped at every step and phase boundary (the counter sampler watches it).
        self.boundaries = 0
        #: Bumped at every step start.
        self.steps_started = 0
        #: The latest step starts, ``(monotonic ns, step)`` oldest first: what stamps a call
        #: recorded after its step ended (:mod:`wsprof.capture.flight`).
        self.recent_starts: deque[tuple[int, int]] = deque(maxlen=RECENT_STARTS)


STATE = MarkerState()


def current_phase() -> str | None:
    """The innermost phase of the current context, else of the main thread's; None if neither
    has one."""
    stack = PHASE_VAR.get(()) or STATE.main_stack
    return stack[-1] if stack else None


def _recorder() -> Recorder | None:
    """The recorder markers write to: None when not patched, and in a forked child that did not
    patch for itself (the parent's queues are never drained there: they would only grow)."""
    rec = STATE.recorder
    if rec is not None and getattr(rec, "pid", None) != os.getpid():
        return None
    return rec


def bind(rec: Recorder) -> None:
    """Point the markers at ``rec`` (the capture session does, at start)."""
    STATE.recorder = rec


def unbind() -> None:
    """Detach the markers from the session's recorder and forget the step (at stop)."""
    STATE.recorder = None
    STATE.step = -1
    STATE.step_start_ns = None
    STATE.recent_starts.clear()


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
    STATE.recent_starts.append((t, STATE.step))
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

    Standard names: ``rollout``, ``train``, ``weight_sync``; any name is accepted and recorded
    as given. Analysis reads their aliases (:data:`wsprof.contracts.phases.PHASE_ALIASES`:
    ``sync``, ``generation``, ...) and other spellings (``Weight-Sync``) as the standard name,
    as sampled phases do (:func:`wsprof.contracts.phases.canonical_phase`).

    Args:
        name: the phase name.
    """

    def __init__(self, name: str) -> None:
        self.name = str(name)  # an enum or other object would poison the trace's strings
        self._t0 = 0
        self._token: contextvars.Token[tuple[str, ...]] | None = None
        self._stack: tuple[str, ...] = ()

    def __enter__(self) -> phase:
        stack = (*PHASE_VAR.get(()), self.name)
        self._token = PHASE_VAR.set(stack)
        self._stack = stack
        if threading.get_ident() == threading.main_thread().ident:
            STATE.main_stack = stack
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
        token, self._token = self._token, None
        stack = PHASE_VAR.get(())
        done = False
        if token is not None and stack is self._stack:
            try:
                PHASE_VAR.reset(token)
                done = True
            except (ValueError, RuntimeError):  # entered in another context, or reset already
                pass
        if not done:
            # Not nested as entered (phases exited out of order, or this instance entered
            # twice at once): drop this phase's name from the current stack.
            if stack and stack[-1] == self.name:
                PHASE_VAR.set(stack[:-1])
            elif self.name in stack:
                i = stack.index(self.name)
                PHASE_VAR.set(stack[:i] + stack[i + 1 :])
        ident = threading.get_ident()
        if ident == threading.main_thread().ident:
            STATE.main_stack = PHASE_VAR.get(())
        rec = _recorder()
        if rec is not None:
            rec.spans.append(("phase", self.name, self._t0, t, STATE.step, ident))


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
        rec.internal_error(
            "counter",
            ValueError(
                f"counter {str(name)[:80]!r}: value {str(value)[:40]!r} is not a number ({e})"
            ),
        )
        return
    rec.counters.append((_now(), str(name), v))
