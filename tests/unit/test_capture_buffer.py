"""The capture buffer: both ring writers (compiled and pure Python) against one reader, a full
ring's drops per step, and a reader that survives any damage to the ring or journal file."""

from __future__ import annotations

import json
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsprof.capture import buffer
from wsprof.capture import settings as cfg
from wsprof.trace import journal as jfmt
from wsprof.trace import ring as fmt

WRITERS: list[Any] = [buffer.PyRing]
#: The compiled writer where built and ``WSPROF_NATIVE`` allows (the Python-path run sets 0).
_native = buffer.native_module(cfg.read())
if _native is not None:
    WRITERS.append(_native.Ring)


def test_the_ring_kind_follows_the_settings_passed(tmp_path: Path) -> None:
    assert buffer.native_module(cfg.Settings(native=False)) is None
    assert buffer.native_module(cfg.Settings()) is buffer.compiled_module()
    for native in (False, True):
        ring, mm = buffer.open_ring(str(tmp_path / f"{native}.ring"), 64, os.getpid(), native)
        compiled = native and buffer.compiled_module() is not None
        assert type(ring) is (buffer.compiled_module().Ring if compiled else buffer.PyRing)
        assert bool(getattr(ring, "native", False)) is compiled
        _close(ring, mm)


def _open(path: Path, capacity: int, writer: Any) -> tuple[Any, mmap.mmap]:
    fd = fmt.create(str(path), capacity, os.getpid())
    try:
        mm = mmap.mmap(fd, fmt.HEADER_BYTES + capacity * fmt.RECORD_BYTES)
    finally:
        os.close(fd)
    return writer(mm, capacity), mm


def _call(i: int, step: int = 0) -> tuple[int, ...]:
    # w1 (kind, hook 3), then t_start, t_end, backend_ns, n_backend, thread, bytes, dtype, grp,
    # is_async, site, step, phase, error
    return (fmt.CALL | (3 << 8), 1000 + i, 2000 + i, 7, 1, 99, 4 * i, 0, 1, 0, 2, step, -1, -1)


def _close(ring: Any, mm: mmap.mmap) -> None:
    ring.close()
    mm.close()


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.__module__.split(".")[-1])
def test_records_written_are_read_back_in_order(tmp_path: Path, writer: Any) -> None:
    path = tmp_path / "t.wsprof.ring"
    ring, mm = _open(path, 1024, writer)
    for i in range(300):
        assert ring.put(*_call(i, step=i // 100))
    ring.put(fmt.SPAN, 0, 1, 5, 9, 2, 99, 0, 0, 0, 0, 0, 0, 0)
    assert ring.head == 301 and ring.calls == 300
    tail = fmt.read_tail(str(path), drained=100)
    assert tail.problems == [] and tail.missing == 0
    assert tail.words[:, 0].tolist() == list(range(101, 302))
    dec = fmt.decode(tail.words, ["step", "3"])
    assert len(dec.calls) == 200 and dec.spans == [("step", "3", 5, 9, 2, 99)]
    assert dec.calls[0].tolist() == [1100, 2100, 7, 1, 99, 3, 400, 0, 1, 0, 2, 1, -1, -1]
    _close(ring, mm)


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.__module__.split(".")[-1])
def test_a_full_ring_drops_new_records_and_counts_them_per_step(
    tmp_path: Path, writer: Any
) -> None:
    ring, mm = _open(tmp_path / "r", 1024, writer)
    ok = [ring.put(*_call(i, step=i // 1000)) for i in range(1500)]
    assert ok == [True] * 1024 + [False] * 476
    assert ring.dropped == 476 and dict(ring.dropped_by_step) == {1: 476}
    ring.drained = 1000  # the writer thread drained 1000: room again
    assert ring.put(*_call(1500, step=1))
    assert ring.head == 1025
    _close(ring, mm)


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.__module__.split(".")[-1])
def test_a_closed_ring_writes_nothing(tmp_path: Path, writer: Any) -> None:
    ring, mm = _open(tmp_path / "r", 1024, writer)
    ring.disable_in_child()
    assert not ring.put(*_call(0))
    assert ring.head == 0
    ring.close()
    mm.close()


def test_the_ring_wraps_and_the_reader_takes_only_the_latest_lap(tmp_path: Path) -> None:
    path = tmp_path / "r"
    ring, mm = _open(path, 1024, WRITERS[-1])
    for i in range(2500):
        ring.drained = max(0, ring.head - 10)  # a writer thread keeping up
        ring.put(*_call(i))
    tail = fmt.read_tail(str(path), drained=2490)
    assert tail.words[:, 0].tolist() == list(range(2491, 2501)) and tail.problems == []
    _close(ring, mm)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 1500),
    cut=st.one_of(st.none(), st.integers(0, 4096 + 1024 * 128)),
    flips=st.lists(st.integers(0, 4096 + 1024 * 128 - 1), max_size=6),
    drained=st.integers(0, 200),
)
def test_fuzz_a_damaged_ring_gives_its_intact_records_and_one_line_for_the_rest(
    tmp_path_factory: Any, n: int, cut: int | None, flips: list[int], drained: int
) -> None:
    path = tmp_path_factory.mktemp("ring") / "r"
    ring, mm = _open(path, 1024, WRITERS[-1])
    for i in range(n):
        ring.drained = max(0, ring.head - 1000)
        ring.put(*_call(i))
    _close(ring, mm)
    original = path.read_bytes()
    data = bytearray(original)
    for off in flips:
        data[off] ^= 0x5A  # the same offset twice restores the byte: compared below
    if cut is not None:
        data = data[:cut]
    path.write_bytes(bytes(data))
    tail = fmt.read_tail(str(path), drained)  # never raises
    # What must come back: each record after `drained` of the last lap whose bytes are whole
    # and as written, provided the header survived.
    header_ok = len(data) >= 4096 and data[:72] == original[:72]
    expected = []
    for seq in range(max(drained + 1, n - 1023), n + 1):
        off = 4096 + (seq % 1024) * 128
        if off + 128 <= len(data) and data[off : off + 128] == original[off : off + 128]:
            expected.append(seq)
    got = tail.words[:, 0].tolist()
    if header_ok:
        assert got == expected
    else:
        assert set(got) <= set(expected)
    damaged = (cut is not None and cut < 4096 + 1024 * 128) or any(
        o < 72 or (o >= 4096 and _written(o, n)) for o in flips
    )
    if damaged:
        assert len(tail.problems) >= 1 or got == expected
    for p in tail.problems:
        assert "\n" not in p and p.startswith(str(path))


def _written(off: int, n: int) -> bool:
    """Byte ``off`` of a 1,024-slot ring lies in a slot that holds a record after n writes."""
    slot = (off - 4096) // 128
    return slot <= n if n < 1024 else True


def test_a_ring_that_is_not_a_ring_gives_one_line(tmp_path: Path) -> None:
    p = tmp_path / "r"
    for content in (b"", b"x" * 10, b"not a ring" * 1000):
        p.write_bytes(content)
        tail = fmt.read_tail(str(p), 0)
        assert len(tail.words) == 0 and len(tail.problems) == 1
    assert fmt.read_tail(str(tmp_path / "missing"), 0).problems


def test_journal_entries_survive_and_a_torn_or_damaged_line_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t.wsprof.journal"
    j = jfmt.Journal(str(path))
    j.add(["s", 0, "broadcast"])
    j.add(["site", 0, "train.py", 12, "sync"])
    j.add(["hook", 0, 0, 0, 0])
    j.add(["e", 5, "wrapper", json.dumps({"api": "dist.broadcast"})])
    entries, offset = j.take()
    assert len(entries) == 4 and offset == path.stat().st_size
    j.close()
    with open(path, "ab") as fh:
        fh.write(b'not json\n["s", 1, "tor')  # a damaged line, then a torn last line
    got, problems = jfmt.read_entries(str(path))
    rows = jfmt.rows(got)
    assert rows.strings == [(0, "broadcast")] and rows.sites == [(0, "train.py", 12, "sync")]
    assert rows.hooks == {0: (0, 0, 0)} and rows.events[0][1] == "wrapper"
    assert len(problems) == 2 and all("\n" not in p for p in problems)
    after, _ = jfmt.read_entries(str(path), offset)
    assert after == []
    assert jfmt.rows([["s"], ["?", 1], ["hook", "x", 1, 2, 3]]).bad == 3


def test_header_counts_are_written_where_the_reader_looks(tmp_path: Path) -> None:
    path = tmp_path / "r"
    ring, mm = _open(path, 1024, WRITERS[-1])
    ring.put(*_call(0))
    fmt.write_header_counts(mm, drained=0, dropped=7, closed=True)
    _close(ring, mm)
    tail = fmt.read_tail(str(path), 0)
    assert tail.dropped == 7 and tail.closed and len(tail.words) == 1
    assert np.array_equal(tail.words[0, 2:4], [1000, 2000])
