"""How :class:`wsprof.capture.flight.FlightReader` decides each Flight Recorder entry: seen
(a recorded call on its thread spans it), unseen (recorded as a ``c10d`` call once its thread
has moved on), or waiting; and what it counts as lost. A real recorder and trace; the
recorder's dumps are built in the shape torch 2.13 writes (``test_flight_dump.entry``)."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
from test_flight_dump import dump, entry

from wsprof.capture.flight import FlightReader
from wsprof.capture.recorder import Recorder
from wsprof.trace.reader import read_trace

THREAD = 140194217343872
MS = 1_000_000


class FakeRecorder:
    """What c10d's recorder holds now: the test sets its entries."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def __call__(self) -> bytes:
        return pickle.dumps(dump(self.entries))


def _wall(mono_ns: int) -> int:
    return mono_ns + time.time_ns() - time.monotonic_ns()


def _calls(*spans: tuple[int, int]) -> np.ndarray:
    """Raw drained call rows (t_start, t_end, backend_ns, n_backend, thread, hook id, ...)."""
    rows = np.zeros((len(spans), 14), dtype=np.int64)
    for i, (t0, t1) in enumerate(spans):
        rows[i, :6] = (t0, t1, t1 - t0, 1, THREAD, 0)
    return rows


def test_entries_are_seen_unseen_or_wait_until_their_thread_moves_on(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path))
    fr = FakeRecorder()
    reader = FlightReader(rec, fr)
    t = time.monotonic_ns() + 10 * MS
    # a hooked broadcast [t, t+2 ms]; DDP's all-reduce at t+5 ms (no hook); one at t+9 ms
    reader.saw(_calls((t, t + 2 * MS)))
    fr.entries = [
        entry(0, 1, "gloo:broadcast", time_created_ns=_wall(t + MS)),
        entry(1, 2, time_created_ns=_wall(t + 5 * MS), retired=False),
    ]
    reader.read(force=True)
    assert (reader.matched, reader.unseen, len(reader._pending)) == (1, 0, 1)
    # the next hooked call on that thread started after it: the all-reduce was no hook's
    reader.saw(_calls((t + 7 * MS, t + 8 * MS)))
    fr.entries.append(entry(2, 3, time_created_ns=_wall(t + 9 * MS), retired=False))
    reader.read(force=True)
    assert (reader.matched, reader.unseen, len(reader._pending)) == (1, 1, 1)
    # #3 retires; one drain later its thread has left it
    fr.entries[2] = entry(2, 3, time_created_ns=_wall(t + 9 * MS), retired=True)
    reader.read(force=True)
    assert reader.unseen == 1 and reader._pending[0].retired_at_flush >= 0
    reader.saw(_calls())
    reader.read(force=True)
    assert (reader.unseen, len(reader._pending), reader.lost) == (2, 0, 0)
    # entries 3 and 4 overwritten before this read: counted
    fr.entries = [entry(5, 4, time_created_ns=_wall(t + 20 * MS), retired=True)]
    reader.read(final=True)
    assert (reader.lost, reader.unseen, reader.entries_read) == (2, 3, 4)
    rec.close()
    calls = read_trace(str(rec.path)).calls
    c10d = calls.layer == "c10d"
    assert calls.api[c10d].tolist() == ["gloo:all_reduce"] * 3
    assert calls.op[c10d].tolist() == ["all_reduce"] * 3
    assert set(calls.bytes[c10d].tolist()) == {40} and set(calls.grp[c10d].tolist()) == {"0"}
    assert calls.thread[c10d].tolist() == [THREAD] * 3
    starts = calls.t_start_ns[c10d]
    assert abs(int(starts[0]) - (t + 5 * MS)) < 200_000  # its creation, on the trace's clock


def test_nothing_is_read_when_every_collective_was_seen(tmp_path: Path) -> None:
    rec = Recorder(str(tmp_path))
    fr = FakeRecorder()
    reader = FlightReader(rec, fr)
    fr.entries = [entry(0, 1, time_created_ns=_wall(time.monotonic_ns()))]
    assert not reader.due()
    reader.read()
    assert reader.reads == 0  # c10d's counts (none here) show nothing the hooks missed
    rec.close()


def test_the_clock_offset_is_the_tightest_reading_and_its_error_is_bounded() -> None:
    # An entry's wall-clock creation time becomes monotonic through one paired reading; a
    # reading preempted between its two monotonic reads was off by half the preemption (a CI
    # run recorded a 20 µs broadcast twice). The tightest of several readings is used, and its
    # half-width, added to the matching slack, bounds the error: two readings agree within
    # the sum of their bounds.
    from wsprof.capture.flight import MATCH_SLACK_NS, _wall_offset_ns

    readings = [_wall_offset_ns() for _ in range(50)]
    for (o1, u1), (o2, u2) in zip(readings, readings[1:]):
        assert u1 >= 0 and u2 >= 0
        assert abs(o1 - o2) <= u1 + u2 + 1_000, (o1, u1, o2, u2)  # 1 µs: the wall clock's slew
    assert min(u for _, u in readings) < MATCH_SLACK_NS
