"""Collectives c10d issued from C++, taken from torch's own Flight Recorder.

The hooks see what goes through Python names; DDP's reducer all-reduces gradient buckets from
C++, where no hook is. c10d records every collective it issues in its Flight Recorder
(:mod:`wsprof.trace.flight`). :class:`FlightReader` reads it from the counter sampler's
thread, as the ``flight`` probe (:data:`wsprof.capture.counters.PROBES`: its cost is recorded
and paid from the probe budget like every probe's), and only when it pays: when c10d's
per-group counts, read at the last drain, show more collectives than the hooks recorded, or
entries wait to be decided; at step starts (the ``step`` trigger) and at close.

A read dumps the whole recorder (c10d has no incremental read; about 10 ms for 2,000 entries
on a 2-core machine, never with stack traces) and keeps the entries after the last
``record_id`` taken; an entry that the ring overwrote before it was read is counted as lost
(``meta['flight'].lost``), never silently. Each new entry is then *decided*:

* **seen**: a call the hooks recorded on the entry's thread spans its creation time (the
  entry is that call's collective, or one of those it issued): nothing is added; with NCCL's
  timing (``TORCH_NCCL_ENABLE_TIMING=1``) its device time is joined to that call;
* **unseen**: no recorded call spans it and the thread is known to have left it (a later call
  of that thread was drained, or the entry was retired one drain ago, or at close): it
  becomes a recorded call of its own, layer ``c10d`` (op, bytes, dtype, group, step, time
  created; device start and end when timing is on), with ``n_backend`` 1, so that the
  coverage audit counts it and the analysis sees it;
* otherwise it waits for the next read (a call still open on its thread).

Clocks: entries carry wall-clock ns; each read converts them with a paired reading of the
wall and monotonic clocks, the tightest of :data:`OFFSET_READINGS` (a reading whose thread was
preempted between its two monotonic reads is off by half the preemption: on a loaded 2-core
machine, enough to leave a 20 µs call unmatched and record its collective twice). Matching
allows :data:`MATCH_SLACK_NS` plus half that reading's width.
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from wsprof.capture import audit
from wsprof.capture.markers import STATE
from wsprof.contracts.ops import FLIGHT_LAYER
from wsprof.trace.flight import FlightEntry, loads

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_now = time.monotonic_ns
#: Clock skew allowed when an entry's creation time is matched to a recorded call, ns (the
#: wall/monotonic pairing is exact to about a µs; a hooked call spans its entry by more).
MATCH_SLACK_NS = 5_000
#: Paired wall/monotonic readings per read; the narrowest one converts the entries' times.
OFFSET_READINGS = 5
#: Recorded calls remembered per thread for matching (the oldest are forgotten).
MAX_CALLS_PER_THREAD = 200_000
#: Entries kept waiting at most; past it the oldest are decided unseen.
MAX_PENDING = 100_000


def _dump_bytes() -> bytes | None:
    """The recorder's contents without stack traces; None when torch has no recorder or no
    process group is up (nothing to read)."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None or "torch.distributed.distributed_c10d" not in sys.modules:
        return None
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is None:
        return None
    out = dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
    if not isinstance(out, bytes):
        raise TypeError(f"_dump_fr_trace returned {type(out).__name__}, not bytes")
    return out


def _wall_offset_ns() -> tuple[int, int]:
    """(wall ns - monotonic ns, its uncertainty in ns): the wall clock read between two
    monotonic reads, the narrowest pair of :data:`OFFSET_READINGS`; the uncertainty is half
    that pair's width (a few hundred ns unless every reading was preempted)."""
    m0, w, m1 = min(
        ((_now(), time.time_ns(), _now()) for _ in range(OFFSET_READINGS)),
        key=lambda r: r[2] - r[0],
    )
    return w - (m0 + m1) // 2, (m1 - m0 + 1) // 2


class _Waiting:
    """An entry read but not yet decided."""

    __slots__ = ("entry", "t_ns", "slack_ns", "retired_at_flush")

    def __init__(self, entry: FlightEntry, t_ns: int, slack_ns: int, retired_at_flush: int) -> None:
        self.entry = entry
        self.t_ns = t_ns  # creation, monotonic ns
        #: matching slack: MATCH_SLACK_NS and the uncertainty of the conversion of t_ns
        self.slack_ns = slack_ns
        self.retired_at_flush = retired_at_flush  # the drain count when seen retired; -1 not


class FlightReader:
    """Reads c10d's Flight Recorder into one process's trace (see the module docstring).

    Args:
        recorder: the process's recorder; unseen entries become call records in its ring.
        dump: returns the recorder's bytes (default: torch's ``_dump_fr_trace``); a test
            passes its own.

    Thread-safety: :meth:`saw` runs on the writer thread (each drain), :meth:`read` on the
    sampler thread; both take the reader's lock.
    """

    def __init__(self, recorder: Recorder, dump: Any = _dump_bytes) -> None:
        self.rec = recorder
        self._dump = dump
        self._lock = threading.Lock()
        self.start_wall_ns = time.time_ns()
        self.last_id = -1
        self.reads = 0
        self.entries_read = 0
        self.matched = 0
        self.unseen = 0
        self.lost = 0
        self.device_times = 0
        self.unavailable: str | None = None
        self._pending: deque[_Waiting] = deque()
        # thread -> deque of (starts, ends) sorted arrays of the calls drained
        self._calls: dict[int, deque[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]] = {}
        self._n_calls: dict[int, int] = {}
        self._latest_start: dict[int, int] = {}
        self._flushes = 0
        self._recorded = 0  # collectives the hooks recorded (sum of n_backend), drained
        #: c10d's count of each group live now: what was issued before this reader began
        #: is no one's to record (a group made later counts from 0)
        self._issued_base = {
            audit.group_name(pg): max(audit.seq_of(pg), 0) for pg in audit._groups()
        }
        self._issued_at_flush = 0
        #: hook ids of the calls this reader adds (never matched against)
        self._own_hooks: set[int] = set()

    # ------------------------------------------------------------------ the writer's side

    def saw(self, calls: npt.NDArray[np.int64]) -> None:
        """A drain's decoded calls (raw ring columns: t_start, t_end, backend_ns, n_backend,
        thread, hook id, ...): remember each thread's call intervals; read c10d's counts as
        of this drain. Never raises."""
        try:
            with self._lock:
                self._flushes += 1
                if len(calls):
                    self._remember(calls)
                self._issued_at_flush = self._issued_now()
        except Exception as e:  # noqa: BLE001 - never raise into training
            self.rec.internal_error("flight", e)

    def _remember(self, calls: npt.NDArray[np.int64]) -> None:
        if self._own_hooks:
            calls = calls[~np.isin(calls[:, 5], list(self._own_hooks))]
            if not len(calls):
                return
        t0, t1, nb, thread = calls[:, 0], calls[:, 1], calls[:, 3], calls[:, 4]
        self._recorded += int(np.maximum(nb, 0).sum())
        for th in np.unique(thread).tolist():
            m = thread == th
            order = np.argsort(t0[m], kind="stable")
            starts, ends = t0[m][order], t1[m][order]
            q = self._calls.setdefault(th, deque())
            q.append((starts, ends))
            self._n_calls[th] = self._n_calls.get(th, 0) + len(starts)
            while self._n_calls[th] > MAX_CALLS_PER_THREAD and len(q) > 1:
                self._n_calls[th] -= len(q.popleft()[0])
            self._latest_start[th] = max(self._latest_start.get(th, 0), int(starts[-1]))

    def _issued_now(self) -> int:
        """Collectives c10d counted on every live group since this reader began (a group
        first seen later counts from 0)."""
        total = 0
        for pg in audit._groups():
            seq = audit.seq_of(pg)
            if seq < 0:
                continue
            total += max(seq - self._issued_base.get(audit.group_name(pg), 0), 0)
        return total

    # ------------------------------------------------------------------ the sampler's side

    def due(self) -> bool:
        """Whether a read pays: c10d counted more than the hooks and earlier reads recorded,
        as of the last drain, or entries wait to be decided and a drain came since."""
        return bool(self._pending) or self._issued_at_flush > self._recorded

    def read(self, final: bool = False, force: bool = False) -> list[tuple[str, float]]:
        """One read when it pays, or ``force``d (always when ``final``: at close, after the
        last drain, every waiting entry is decided). Returns no counter readings (its
        accounting is the trace's ``meta['flight']``, :meth:`stats`); raises what the dump
        raises (the probe counts it)."""
        if self.unavailable is not None or not (final or force or self.due()):
            return []
        data = self._dump()
        if data is None:
            c10d = sys.modules.get("torch._C._distributed_c10d")
            if c10d is not None and not hasattr(c10d, "_dump_fr_trace"):
                self.unavailable = "this torch has no Flight Recorder (_dump_fr_trace)"
            return []
        # Waiting entries are parsed again: whether they retired since is what decides them.
        oldest = self._pending[0].entry.record_id - 1 if self._pending else self.last_id
        dump = loads(data, after_id=min(oldest, self.last_id))
        offset, uncertain = _wall_offset_ns()
        with self._lock:
            self.reads += 1
            self._refresh(dump.entries)
            new = [e for e in dump.entries if e.record_id > self.last_id]
            new.sort(key=lambda e: e.record_id)
            if new:
                first = new[0].record_id
                if self.last_id >= 0:
                    self.lost += max(first - (self.last_id + 1), 0)
                elif new[0].created_wall_ns >= self.start_wall_ns:
                    self.lost += first  # the ring wrapped before the first read
                self.last_id = new[-1].record_id
            for e in new:
                if e.created_wall_ns < self.start_wall_ns:
                    continue  # before this session: no hook could have seen it
                self.entries_read += 1
                self._pending.append(
                    _Waiting(e, e.created_wall_ns - offset, MATCH_SLACK_NS + uncertain, -1)
                )
            self._decide(final, offset)
        return []

    def _refresh(self, entries: tuple[FlightEntry, ...]) -> None:
        """Mark waiting entries that retired since they were read (or that the ring dropped:
        long done) as retired at this drain."""
        if not self._pending:
            return
        now = {e.record_id: e for e in entries if e.record_id <= self.last_id}
        for w in self._pending:
            if w.retired_at_flush >= 0:
                continue
            e = now.get(w.entry.record_id)
            if e is None or e.retired or e.state == "completed":
                w.retired_at_flush = self._flushes

    def _decide(self, final: bool, offset: int) -> None:
        keep: deque[_Waiting] = deque()
        unseen: list[_Waiting] = []
        while len(self._pending) > MAX_PENDING:
            unseen.append(self._pending.popleft())
        for w in self._pending:
            e = w.entry
            span = self._covering(e.thread, w.t_ns, w.slack_ns)
            if span is not None:
                self.matched += 1
                self._device_time(e, span)
                continue
            left = self._latest_start.get(e.thread, -1) > w.t_ns
            if not left and w.retired_at_flush >= 0 and self._flushes > w.retired_at_flush:
                left = True
            if left or final:
                unseen.append(w)
                continue
            if e.retired or e.state == "completed":
                w.retired_at_flush = self._flushes
            keep.append(w)
        self._pending = keep
        for w in unseen:
            self._record(w, offset)

    def _covering(self, thread: int, t_ns: int, slack: int) -> tuple[int, int] | None:
        """The recorded call of ``thread`` whose interval, widened by ``slack`` ns each side,
        holds ``t_ns`` (calls of one thread never overlap: only the outermost is recorded);
        None."""
        for starts, ends in reversed(self._calls.get(thread, ())):
            if not len(starts) or starts[0] > t_ns + slack:
                continue
            i = int(np.searchsorted(starts, t_ns + slack, side="right")) - 1
            if i >= 0 and ends[i] + slack >= t_ns:
                return int(starts[i]), int(ends[i])
            return None
        return None

    def _device_time(self, e: FlightEntry, span: tuple[int, int]) -> None:
        """NCCL's timed duration of a seen entry, joined to its call (``call_updates``)."""
        if e.duration_ms is None:
            return
        self.rec.updates.append((span[0], e.thread, -1, int(e.duration_ms * 1e6)))
        self.device_times += 1

    def _step_at(self, t_ns: int) -> int:
        """The step current at ``t_ns`` (monotonic): the latest step start before it."""
        starts = list(STATE.recent_starts)
        i = bisect.bisect_right(starts, (t_ns, 2**63)) - 1
        return starts[i][1] if i >= 0 else -1

    def _record(self, w: _Waiting, offset: int) -> None:
        """An unseen entry as a call record of layer ``c10d``."""
        from wsprof.capture import collectives

        e = w.entry
        rec = self.rec
        t0 = w.t_ns
        t1 = t0
        device = -1
        if e.completed_wall_ns is not None and e.completed_wall_ns >= e.created_wall_ns:
            t1 = e.completed_wall_ns - offset
        if e.duration_ms is not None:
            device = int(e.duration_ms * 1e6)
            t1 = max(t1, t0 + device)
        intern = rec.strings.intern
        hook = collectives._hook_word(e.op, e.profiling_name, FLIGHT_LAYER)
        hook_id = hook >> 8
        if hook_id not in self._own_hooks:
            self._own_hooks.add(hook_id)
            rec.register_hook(hook_id, e.op, e.profiling_name, FLIGHT_LAYER)
        rec.ring.put(
            hook,
            t0,
            t1,
            t1 - t0,  # all of it in the backend: nothing of Python's around it
            1,
            e.thread,
            e.bytes,
            -1 if e.dtype is None else intern(e.dtype),
            intern(e.group),
            0,
            -1,
            self._step_at(t0),
            -1,
            -1,
        )
        if device >= 0:
            rec.updates.append((t0, e.thread, -1, device))
            self.device_times += 1
        self.unseen += 1

    def stats(self) -> dict[str, Any]:
        """``meta['flight']``: reads, entries read, how they were decided, entries lost."""
        with self._lock:
            return {
                "reads": self.reads,
                "entries": self.entries_read,
                "matched": self.matched,
                "recorded": self.unseen,
                "lost": self.lost,
                "waiting": len(self._pending),
                "device_times": self.device_times,
                "last_record_id": self.last_id,
                "unavailable": self.unavailable,
            }
