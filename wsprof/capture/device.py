"""Device (CUDA) time of collectives, resolved lazily: never a synchronization on the hot path.

Two sources, both opt-in (``wsprof.patch(device_time=True)`` or ``WSPROF_DEVICE_TIME=1``):

* CUDA events: an API-layer call records a timing event on the current stream before and after
  the collective (``cudaEventRecord``: asynchronous, a few µs). The writer thread polls
  ``Event.query()`` (non-blocking) and, once the end event completed, stores
  ``start.elapsed_time(end)`` as the call's ``device_ns`` (a ``call_updates`` row). A synchronous
  NCCL collective makes the current stream wait for the NCCL stream, so this is the time the
  compute stream spent on the collective, queueing included.
* The NCCL completion hook (``ProcessGroup._register_on_completion_hook``, where the installed
  torch has it; ``TORCH_NCCL_ENABLE_TIMING=1`` makes NCCL time each work): each finished work's
  ``active_duration`` becomes a sample of the counter ``nccl.<op type>.active_s``.

Without CUDA nothing here is created; the hooks then skip device timing entirely.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from wsprof.capture.recorder import Recorder
from wsprof.contracts.events import EventKind

#: Most calls awaiting their end event; beyond it new calls are not timed (counted).
MAX_PENDING_EVENTS = 16_384


class DeviceTimer:
    """CUDA-event timing of collective calls for one process.

    Args:
        recorder: receives ``call_updates`` rows and NCCL counters.

    Raises:
        RuntimeError: CUDA is not available.
    """

    def __init__(self, recorder: Recorder) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device: device time needs a GPU")
        self._torch = torch
        self._rec = recorder
        self._pool: list[Any] = []
        self._pending: deque[tuple[int, int, Any, Any]] = deque()
        self._hooked_groups: set[int] = set()
        self._lock = threading.Lock()
        self.untimed = 0
        self.resolved = 0

    def start(self) -> Any:
        """Record a start event on the current stream; returns it (or None when not timing)."""
        if len(self._pending) >= MAX_PENDING_EVENTS:
            self.untimed += 1
            return None
        ev = self._pool.pop() if self._pool else self._new_event()
        ev.record()
        return ev

    def _new_event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def end(self, start: Any, t_start_ns: int, thread: int) -> None:
        """Record the end event of the call that started at ``t_start_ns`` on ``thread``."""
        ev = self._pool.pop() if self._pool else self._new_event()
        ev.record()
        self._pending.append((t_start_ns, thread, start, ev))

    def resolve(self) -> None:
        """Turn completed event pairs into ``device_ns`` updates (writer thread; non-blocking).

        Stops at the first pair whose end event has not completed: later ones were recorded
        later on the same or another stream and are polled again at the next flush.
        """
        with self._lock:
            pending = self._pending
            while pending:
                t0, thread, a, b = pending[0]
                if not b.query():
                    break
                pending.popleft()
                ns = int(a.elapsed_time(b) * 1e6)
                self._rec.updates.append((t0, thread, -1, ns))
                self._pool.append(a)
                self._pool.append(b)
                self.resolved += 1

    def watch_group(self, pg: Any) -> None:
        """Register the NCCL completion hook on ``pg`` once, where torch has it."""
        key = id(pg)
        if key in self._hooked_groups:
            return
        self._hooked_groups.add(key)
        register = getattr(pg, "_register_on_completion_hook", None)
        if register is None:
            return
        rec = self._rec

        def on_completion(info: Any) -> None:
            try:
                active = info.active_duration.total_seconds()
                op = str(getattr(info, "op_type", "work")).split(".")[-1].lower()
                rec.counters.append((_now(), f"nccl.{op}.active_s", float(active)))
            except Exception as e:  # noqa: BLE001 - never raise into NCCL's watchdog thread
                rec.internal_error("nccl_completion_hook", e)

        try:
            register(on_completion)
        except Exception as e:  # noqa: BLE001 - not NCCL, or hooks unsupported: skip
            rec.event(EventKind.DEVICE_TIME, f"no NCCL completion hook on {type(pg).__name__}: {e}")


def _now() -> int:
    import time

    return time.monotonic_ns()
