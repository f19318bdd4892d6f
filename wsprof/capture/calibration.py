"""The hooks' start-up calibration: the host ns one hooked call pays, measured at install.

The trace's ``self_overhead`` finding multiplies it by the number of calls (an estimate of the
hooks' host time; ``scripts/bench_hooks.py`` is the measurement).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from wsprof.capture import buffer
from wsprof.capture import collectives as col

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_now = time.monotonic_ns

#: Calls per repetition and repetitions of the start-up calibration (about 1 ms in all).
CALIBRATION_CALLS, CALIBRATION_REPEATS = 200, 5


def calibrate(rec: Recorder, layers: str) -> int:
    """Median ns a call pays for wsprof's hooks, measured once before any hook is installed.

    Times a no-op "collective" bare and through the same hook code the real names get (API
    hook, and with ``layers='both'`` a backend hook and a ``Work.wait``-style hook inside it),
    recording into a scratch ring of the same kind as ``rec``'s, under the recorder's lock.

    Args:
        rec: the session's recorder (hooks are created against it; nothing is recorded).
        layers: ``both`` or ``api``, as installed.

    Returns:
        The median added ns per call, >= 0.
    """
    state = col._STATE
    native = col._NATIVE
    tensor = state.tensor_type(1) if state.tensor_type is not None else None

    def wait_noop(self: Any) -> None:
        return None

    def backend_noop(self: Any, t: Any) -> None:
        return None

    def anything(cls: type) -> bool:
        return True  # the calibration's "group" is None: timed as a C++ group would be

    backend = col._backend_wrapper(backend_noop, "calibration", "calibration", classify=anything)
    wait = col._wait_wrapper(wait_noop, classify=anything)

    def bare(t: Any, src: int = 0) -> None:
        if layers == "both":
            backend_noop(None, t)
            wait_noop(None)

    def collective(t: Any, src: int = 0) -> None:
        if layers == "both":
            backend(None, t)
            wait(None)

    hook = col._api_wrapper(collective, "calibration", "calibration")
    # Into a scratch ring of the same kind (anonymous memory): the calibration's records are
    # not the job's.
    scratch = buffer.scratch_ring(rec.ring, CALIBRATION_CALLS * CALIBRATION_REPEATS)
    with rec.lock:
        was, put = state.active, state.put
        state.active, state.put = True, scratch.put
        if state.native:
            native.set_ring(scratch)
        try:
            added: list[float] = []
            for _ in range(CALIBRATION_REPEATS):
                t0 = _now()
                for _ in range(CALIBRATION_CALLS):
                    bare(tensor, 0)
                t1 = _now()
                for _ in range(CALIBRATION_CALLS):
                    hook(tensor, 0)
                t2 = _now()
                added.append(((t2 - t1) - (t1 - t0)) / CALIBRATION_CALLS)
        finally:
            state.active, state.put = was, put
            if state.native:
                native.set_ring(rec.ring)
            scratch.close()
    return max(0, int(statistics.median(added)))
