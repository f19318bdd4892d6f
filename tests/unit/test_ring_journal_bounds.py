"""Rings and journals are read in blocks: memory is bounded by what the file really holds, never
by what its header claims (a sparse 2 GiB ring whose header says 2^24 records, a 3 GiB sparse
journal), and the records and entries read are exactly those written, across block edges.

Memory is measured with :mod:`tracemalloc` (numpy reports its buffers to it), time with a
generous bound for a loaded 2-core machine.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from wsprof.capture import buffer
from wsprof.trace import journal as jfmt
from wsprof.trace import ring as fmt

T = TypeVar("T")
#: Peak Python/numpy allocation allowed for reading a hostile file, bytes (the old reader
#: allocated 2 GiB for the ring, 3 GiB for the journal).
PEAK_BOUND = 64 << 20
#: Seconds allowed (the old reader took 17 s and 18 s on an idle machine).
TIME_BOUND_S = 20.0
CLAIMED = 1 << 24  # records a hostile header claims: 2 GiB of slots


def _bounded(fn: Callable[[], T]) -> tuple[T, int, float]:
    """``fn()``, its peak traced allocation (bytes) and its wall time (s)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak, time.perf_counter() - t0


def _fingerprint(path: Path) -> tuple[int, int, str]:
    """Size, mtime and a digest of the data regions (holes skipped) of a sparse file."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        fd, pos = fh.fileno(), 0
        while pos < st.st_size:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
                stop = min(os.lseek(fd, pos, os.SEEK_HOLE), st.st_size)
            except OSError:
                break
            h.update(pos.to_bytes(8, "little") + os.pread(fd, stop - pos, pos))
            pos = stop
    return st.st_size, st.st_mtime_ns, h.hexdigest()


def _header(cap: int) -> bytes:
    return struct.pack(
        "<8s8q", fmt.MAGIC, fmt.VERSION, fmt.RECORD_BYTES, cap, fmt.HEADER_BYTES, 1, 0, 0, 0
    )


def _record(seq: int, i: int) -> bytes:
    words = [seq, fmt.CALL | (3 << 8), 1000 + i, 2000 + i, 7, 1, 99, 4 * i, 0, 1, 0, 2, 0, -1, -1]
    return struct.pack(f"<{fmt.RECORD_WORDS}q", *words, fmt.check_word(words))


@pytest.fixture
def sparse_ring(tmp_path: Path) -> Iterator[tuple[Path, list[int]]]:
    """A 2 GiB sparse ring whose header claims 2^24 records; real records at a few slots
    (start, middle, last), sequence numbers as a ring of that capacity would give them."""
    path = tmp_path / "h-1.wsprof.ring"
    seqs = [*range(1, 41), CLAIMED // 2 + 5, CLAIMED - 1]
    with open(path, "wb") as fh:
        fh.write(_header(CLAIMED))
        for i, seq in enumerate(seqs):
            fh.seek(fmt.HEADER_BYTES + (seq % CLAIMED) * fmt.RECORD_BYTES)
            fh.write(_record(seq, i))
        fh.truncate(fmt.HEADER_BYTES + CLAIMED * fmt.RECORD_BYTES)
    yield path, seqs
    path.unlink()


def test_a_sparse_2gib_ring_is_read_in_bounded_memory_and_time(
    sparse_ring: tuple[Path, list[int]],
) -> None:
    path, seqs = sparse_ring
    assert path.stat().st_size > 2 << 30
    before = _fingerprint(path)
    tail, peak, took = _bounded(lambda: fmt.read_tail(str(path), drained=0))
    assert peak < PEAK_BOUND, f"{peak / 2**20:.0f} MiB"
    assert took < TIME_BOUND_S
    assert tail.words[:, 0].tolist() == seqs
    assert tail.problems == []
    assert _fingerprint(path) == before
    # only the records after the drained one
    tail = fmt.read_tail(str(path), drained=40)
    assert tail.words[:, 0].tolist() == seqs[-2:]


def test_a_header_claiming_more_records_than_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "h-1.wsprof.ring"
    path.write_bytes(
        _header(CLAIMED).ljust(fmt.HEADER_BYTES, b"\0")
        + b"\0" * fmt.RECORD_BYTES  # slot 0 empty
        + b"".join(_record(s, s) for s in range(1, 300))
        + b"\1" * 5  # and a torn tail
    )
    before = path.read_bytes()
    tail, peak, took = _bounded(lambda: fmt.read_tail(str(path), drained=0))
    assert tail.words[:, 0].tolist() == list(range(1, 300))
    [problem] = tail.problems
    assert "ring file truncated" in problem and str(fmt.HEADER_BYTES + CLAIMED * 128) in problem
    assert peak < 4 << 20 and took < TIME_BOUND_S
    assert path.read_bytes() == before


def _pyring(path: Path, capacity: int) -> tuple[Any, mmap.mmap]:
    fd = fmt.create(str(path), capacity, os.getpid())
    try:
        mm = mmap.mmap(fd, fmt.HEADER_BYTES + capacity * fmt.RECORD_BYTES)
    finally:
        os.close(fd)
    return buffer.PyRing(mm, capacity), mm


def test_records_across_read_blocks_are_all_read_in_order(tmp_path: Path) -> None:
    """20,000 records written by the ring writer span three read blocks; a damaged one in
    the second block is the only one missing."""
    n = 20_000
    assert n > 2 * fmt.READ_BLOCK_RECORDS
    path = tmp_path / "h-1.wsprof.ring"
    ring, mm = _pyring(path, 32_768)
    for i in range(n):
        ring.put(fmt.CALL | (3 << 8), 1000 + i, 2000 + i, 7, 1, 99, 4 * i, 0, 1, 0, 2, 0, -1, -1)
    ring.close()
    mm.close()
    damaged = fmt.READ_BLOCK_RECORDS + 17  # slot of record seq == slot
    with open(path, "r+b") as fh:
        fh.seek(fmt.HEADER_BYTES + damaged * fmt.RECORD_BYTES + 8 * 4)
        fh.write(b"\xff" * 8)
    tail = fmt.read_tail(str(path), drained=1_000)
    want = [s for s in range(1_001, n + 1) if s != damaged]
    assert tail.words[:, 0].tolist() == want
    assert tail.words[:, 2].tolist() == [1000 + s - 1 for s in want]  # t_start_ns of put i
    assert tail.problems == [f"{path}: 1 damaged or torn record(s) in the ring file skipped"]
    assert tail.missing == 1


# -- journals ----------------------------------------------------------------------------------


def test_a_sparse_3gib_journal_is_read_in_bounded_memory_and_time(tmp_path: Path) -> None:
    """Entries, a 20 MiB hole (a line that runs into it is damage), entries after it, then a
    hole to 3 GiB: what is before the replay bound is read, the rest is one line."""
    path = tmp_path / "h-1.wsprof.journal"
    first = [["s", i, f"name{i}"] for i in range(5)]
    later = [["e", 7, "kind", "detail"], ["s", 9, "late"]]
    with open(path, "wb") as fh:
        fh.write(b"".join(jfmt.json.dumps(e).encode() + b"\n" for e in first) + b'["s", 5,')
        fh.seek(20 << 20)
        fh.write(b"\n" + b"".join(jfmt.json.dumps(e).encode() + b"\n" for e in later))
        fh.truncate(3 << 30)
    before = _fingerprint(path)
    (entries, problems), peak, took = _bounded(lambda: jfmt.read_entries(str(path), 0))
    assert peak < PEAK_BOUND, f"{peak / 2**20:.0f} MiB"
    assert took < TIME_BOUND_S
    assert entries == first + later
    assert any("1 damaged journal line(s) skipped" in p for p in problems), problems
    assert any(f"longer than {jfmt.MAX_JOURNAL_BYTES >> 20} MiB" in p for p in problems)
    assert _fingerprint(path) == before
    path.unlink()


def test_an_endless_journal_line_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "h-1.wsprof.journal"
    endless = b'["s", 0, "' + b"x" * (8 * jfmt.MAX_LINE_BYTES) + b'"]\n'
    path.write_bytes(endless + b'["s", 1, "after"]\n')
    (entries, problems), peak, _ = _bounded(lambda: jfmt.read_entries(str(path), 0))
    assert entries == [["s", 1, "after"]]
    assert problems == [f"{path}: 1 damaged journal line(s) skipped"]
    assert peak < 4 * jfmt.MAX_LINE_BYTES + (4 << 20), f"{peak / 2**20:.0f} MiB"


def test_journal_entries_across_read_blocks_and_from_an_offset(tmp_path: Path) -> None:
    """What the journal writer wrote is read back exactly, from the start and from the
    length the trace stored after some of it."""
    path = tmp_path / "h-1.wsprof.journal"
    j = jfmt.Journal(str(path))
    written: list[list[Any]] = []
    cut = 0
    for i in range(40_000):
        e: list[Any] = ["site", i, f"/src/train_{i % 97}.py", i, "step" * (i % 9)]
        j.add(e)
        written.append(e)
        if i == 25_000:
            cut = j.take()[1]
    j.close()
    assert path.stat().st_size > 2 * jfmt.READ_BLOCK_BYTES
    entries, problems = jfmt.read_entries(str(path), 0)
    assert entries == written and problems == []
    entries, problems = jfmt.read_entries(str(path), cut)
    assert entries == written[25_001:] and problems == []
    assert np.array_equal(
        np.array([e[1] for e in entries]), np.arange(25_001, 40_000)
    )  # nothing repeated at block edges


def test_outputs_are_created_exclusively(tmp_path: Path) -> None:
    """A ring or journal name that exists (a dangling link above all) is never opened."""
    victim = tmp_path / "victim"
    for name, make in (
        ("r", lambda p: fmt.create(p, 1024, 1)),
        ("j", lambda p: jfmt.Journal(p)),
    ):
        link = tmp_path / name
        link.symlink_to(victim)
        with pytest.raises(FileExistsError):
            make(str(link))
        assert not victim.exists()
