"""Untrusted trace files (issue 37 items 5, 6, 10, 12): nothing in a trace is executed, no
allocation follows what a file claims, reading changes nothing beside the input, and long
py-spy frames keep the analysis linear. Each hostile input is built here from a real trace
(:mod:`tests.hostile_traces`)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import hostile_traces as h
from wsprof.analysis import phases
from wsprof.errors import InputError
from wsprof.trace import untrusted
from wsprof.trace.follow import TraceFollower
from wsprof.trace.reader import CUT_FRAME_MARK, MAX_FRAME_CHARS, read_trace
from wsprof.trace.salvage import readable_copy

#: Generous bounds for a loaded 2-core CI machine.
SECONDS = 20.0
PEAK_BYTES = 64 << 20


def _read_bounded(path: Path) -> tuple[object, float, int]:
    """(the trace or the InputError, seconds, peak bytes Python allocated) of one read."""
    tracemalloc.start()
    t = time.monotonic()
    try:
        result: object = read_trace(str(path))
    except InputError as e:
        result = e
    finally:
        elapsed = time.monotonic() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, elapsed, peak


@pytest.mark.parametrize(
    ("build", "expect"),
    [
        (h.endless_view, "'view' 'counters'"),
        (h.blob_view, "'view' 'strings'"),
        (h.killed_with_trigger, "'trigger' 'hang'"),
        (h.default_column, "column 'pad' of table 'events'"),
    ],
    ids=["endless-view", "blob-view", "trigger-in-salvage", "default-column"],
)
def test_schema_that_would_run_code_is_one_line(
    tmp_path: Path, build: Callable[[Path], Path], expect: str
) -> None:
    p = build(tmp_path / "h-1.wsprof")
    before = h.folder_state(tmp_path)
    result, elapsed, peak = _read_bounded(p)
    assert isinstance(result, InputError), result
    msg = str(result)
    assert msg.startswith(f"{p}: not a wsprof trace") and expect in msg and "\n" not in msg
    assert elapsed < SECONDS and peak < PEAK_BYTES
    assert h.folder_state(tmp_path) == before


def test_a_follower_refuses_a_view_too(tmp_path: Path) -> None:
    p = h.endless_view(tmp_path / "h-1.wsprof")
    f = TraceFollower(str(p))
    assert f.poll() is None
    assert f.problem is not None and "'view' 'counters'" in f.problem


def test_progress_handler_stops_an_endless_query() -> None:
    db = untrusted.harden(sqlite3.connect(":memory:"), 0)
    t = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        db.execute(f"{h.ENDLESS}SELECT count(*) FROM r").fetchone()
    assert time.monotonic() - t < 60
    # the next statement starts with a full budget
    assert db.execute("SELECT 1").fetchone() == (1,)


def test_length_limit_refuses_a_huge_value() -> None:
    db = untrusted.harden(sqlite3.connect(":memory:"), 0)
    with pytest.raises(sqlite3.DataError, match="too big"):
        db.execute("SELECT zeroblob(?)", (untrusted.MAX_VALUE_BYTES + 1,)).fetchone()


@pytest.mark.parametrize(
    ("build", "expect"),
    [
        (h.call_chunk_bomb, "a call chunk inflates to more than"),
        (h.update_chunk_bomb, "an update chunk inflates to more than"),
    ],
    ids=["call-chunk", "update-chunk"],
)
def test_zlib_bomb_is_one_line_in_bounded_memory(
    tmp_path: Path, build: Callable[[Path], Path], expect: str
) -> None:
    p = build(tmp_path / "h-1.wsprof")  # 1 GiB of zeros, deflated
    result, elapsed, peak = _read_bounded(p)
    assert isinstance(result, InputError), result
    assert expect in str(result) and "\n" not in str(result)
    assert elapsed < SECONDS and peak < PEAK_BYTES, (elapsed, peak)


def test_hook_id_of_ten_to_the_fifteen_is_recovered(tmp_path: Path) -> None:
    p = h.killed_trace_with_hook(tmp_path / "h-1.wsprof")
    before = h.folder_state(tmp_path)
    t, elapsed, peak = _read_bounded(p)
    assert not isinstance(t, InputError), t
    calls = t.calls  # type: ignore[attr-defined]
    assert len(calls) == h.STEPS * h.CALLS_PER_STEP + 1
    assert list(calls.op).count("all_reduce") == 1
    assert t.meta["end"]["state"] == "killed"  # type: ignore[attr-defined]
    assert t.meta["end"]["recovered"]["calls"] == 1  # type: ignore[attr-defined]
    assert elapsed < SECONDS and peak < PEAK_BYTES
    assert h.folder_state(tmp_path) == before


def test_hook_the_journal_does_not_name_is_skipped(tmp_path: Path) -> None:
    p = h.killed_trace_with_hook(tmp_path / "h-1.wsprof")
    # the ring names 10^15, the journal 10^15 + 1: nothing to name the call with
    jp = Path(f"{p}.journal")
    jp.write_text(jp.read_text().replace(str(h.HUGE_HOOK), str(h.HUGE_HOOK + 1)))
    t = read_trace(str(p))
    assert len(t.calls) == h.STEPS * h.CALLS_PER_STEP
    assert "name a hook the journal lacks" in " ".join(t.meta["end"]["recovered"]["problems"])


@pytest.mark.parametrize("shm", [False, True], ids=["wal", "wal-and-shm"])
def test_leftover_wal_is_read_and_left_as_it_was(tmp_path: Path, shm: bool) -> None:
    p = h.leftover_wal(tmp_path / "h-1.wsprof", shm=shm)
    before = h.folder_state(tmp_path)
    t = read_trace(str(p))
    assert t.counters["from.wal"][1].tolist() == [7.0]  # the WAL's transaction was read
    assert h.folder_state(tmp_path) == before  # bytes, names and the folder's mtime


def test_hot_journal_is_read_rolled_back_and_left_as_it_was(tmp_path: Path) -> None:
    p = h.hot_journal(tmp_path / "h-1.wsprof")
    before = h.folder_state(tmp_path)
    assert "h-1.wsprof-journal" in before[0]
    t = read_trace(str(p))
    assert len(t.calls) == h.STEPS * h.CALLS_PER_STEP  # as committed: the delete rolled back
    assert not [e for e in t.events if e.kind == "pad"]
    assert h.folder_state(tmp_path) == before


def test_follower_reads_a_hot_journal_from_a_private_copy(tmp_path: Path) -> None:
    p = h.hot_journal(tmp_path / "h-1.wsprof")
    before = h.folder_state(tmp_path)
    delta = TraceFollower(str(p)).poll()
    assert delta is not None and len(delta.calls) == h.STEPS * h.CALLS_PER_STEP
    assert h.folder_state(tmp_path) == before


def test_closed_trace_read_creates_nothing_beside_it(tmp_path: Path) -> None:
    p = h.write_trace(tmp_path / "h-1.wsprof")
    time.sleep(0.01)  # a file created and removed at once would still move the mtime
    before = h.folder_state(tmp_path)
    read_trace(str(p))
    TraceFollower(str(p)).poll()
    assert h.folder_state(tmp_path) == before


def test_private_copy_is_user_only_and_removed(tmp_path: Path) -> None:
    p = h.leftover_wal(tmp_path / "h-1.wsprof", shm=False)
    with untrusted.private_copy(str(p)) as copy:
        folder = Path(copy).parent
        assert folder.stat().st_mode & 0o777 == 0o700
        assert sorted(x.name for x in folder.iterdir()) == ["trace", "trace-wal"]
    assert not folder.exists()


def test_damaged_trace_is_copied_in_bounded_memory(tmp_path: Path) -> None:
    p = h.write_trace(tmp_path / "h-1.wsprof", frames=["x" * 4000] * 2000)  # about 50 MB
    data = p.read_bytes()
    p.write_bytes(data[: len(data) * 2 // 3])
    tracemalloc.start()
    try:
        with readable_copy(str(p)) as (db, cut):
            assert db.execute("SELECT count(*) FROM meta").fetchone()[0] > 0
            assert cut
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) // 4, (peak, len(data))


def test_long_frames_are_cut_at_read_and_analysed_in_linear_time(tmp_path: Path) -> None:
    # A 65 KB qualified name of dots: the framework patterns backtracked on it for 17 s.
    long_frame = "a." * 32_500 + "f (x.py:2)"
    p = h.write_trace(tmp_path / "h-1.wsprof", frames=["main (train.py:1)", long_frame])
    t = read_trace(str(p))
    frame = t.samples[0].frames[1]
    assert len(frame) == MAX_FRAME_CHARS and frame.endswith(CUT_FRAME_MARK)
    start = time.monotonic()
    phases.detect_framework([*t.samples, *_uncut(t.samples[0], long_frame)])
    assert time.monotonic() - start < 5.0


def _uncut(window: object, frame: str) -> list[object]:
    """The window with its frame as long as the file held it (analysis linear even uncut)."""
    from dataclasses import replace

    return [replace(window, frames=("main (train.py:1)", frame))]  # type: ignore[type-var]


def test_pattern_text_keeps_what_patterns_name() -> None:
    f = "slime.backends.megatron_utils.actor.MegatronTrainRayActor.update_weights (actor.py:9)"
    assert phases.pattern_text(f) == f
    long = "m." * 40 + "Actor.update_weights (actor.py:9)"
    cut = phases.pattern_text(long)
    assert cut == "m." * 6 + "Actor.update_weights (actor.py:9)"  # the last 8 name parts


def _private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp folder of the test's own for every copy: it must be empty afterwards."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize(
    ("build", "expect"),
    [
        (h.wal_to_dev_zero, "-wal: a symbolic link beside a trace"),
        (
            lambda p: h.sparse_sidecar(p, "-journal", untrusted.MAX_COPY_BYTES + 1),
            "over the 8 GiB",
        ),
        (lambda p: h.sparse_sidecar(p, "-wal", 1 << 40), "over the 8 GiB"),
    ],
    ids=["wal-link-to-dev-zero", "sparse-9gib-journal", "sparse-1tb-wal"],
)
def test_sidecar_that_would_fill_the_disk_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build: Callable[[Path], Path], expect: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    tmp = _private_tmp(tmp_path, monkeypatch)
    p = build(run / "h-1.wsprof")
    before = h.link_state(run)
    result, elapsed, peak = _read_bounded(p)
    assert isinstance(result, InputError) and expect in str(result), result
    assert "\n" not in str(result)
    follower = TraceFollower(str(p))
    assert follower.poll() is None and expect in str(follower.problem), follower.problem
    assert elapsed < SECONDS and peak < PEAK_BYTES
    assert list(tmp.iterdir()) == []  # nothing copied, nothing left behind
    assert h.link_state(run) == before


def test_sparse_terabyte_trace_with_a_small_journal_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = _private_tmp(tmp_path, monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    p = h.hot_journal(run / "h-1.wsprof")
    os.truncate(p, 1 << 40)
    before = h.link_state(run)
    result, elapsed, _ = _read_bounded(p)
    assert isinstance(result, InputError) and "over the 8 GiB" in str(result), result
    assert elapsed < SECONDS and list(tmp.iterdir()) == []
    assert h.link_state(run) == before


def test_sparse_wal_within_bounds_is_copied_without_its_holes(tmp_path: Path) -> None:
    p = h.leftover_wal(tmp_path / "h-1.wsprof", shm=False)
    with open(f"{p}-wal", "r+b") as f:
        f.truncate(64 << 20)  # a 64 MiB hole after the frames: SQLite ignores it
    with untrusted.private_copy(str(p)) as copy:
        st = os.stat(copy + "-wal")
        assert st.st_size == 64 << 20 and st.st_blocks * 512 < 8 << 20
    assert read_trace(str(p)).counters["from.wal"][1].tolist() == [7.0]


def test_looped_overflow_chain_is_one_line_in_bounded_memory(tmp_path: Path) -> None:
    p = h.looped_overflow(tmp_path / "h-1.wsprof", sparse_bytes=1 << 30)
    before = h.link_state(tmp_path)
    result, elapsed, peak = _read_bounded(p)
    assert isinstance(result, InputError), result
    assert "2nd reference to page" in str(result) and "\n" not in str(result)
    assert elapsed < SECONDS and peak < PEAK_BYTES, (elapsed, peak)
    # A follower's first read checks the pages too; its damaged-trace path (rows up to the
    # first unreadable one) stops at the bytes the file holds.
    tracemalloc.start()
    follower = TraceFollower(str(p))
    follower.poll()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < PEAK_BYTES and "corrupt" in str(follower.problem), follower.problem
    with readable_copy(str(p)) as (_, cut):
        assert any(c.startswith("strings: cut after rowid") for c in cut), cut
    assert h.link_state(tmp_path) == before


def test_follower_reads_sidecars_it_does_not_own_from_a_copy(tmp_path: Path) -> None:
    vic = tmp_path / "victim"
    vic.mkdir()
    precious = vic / "precious"
    precious.write_bytes(b"do not touch\n" * 3000)
    run = tmp_path / "run"
    run.mkdir()
    p = h.write_trace(run / "vm-1.wsprof")
    Path(f"{p}-wal").write_bytes(b"")
    os.link(precious, f"{p}-shm")  # a -shm linked to a file elsewhere: 2 links
    fifo = tmp_path / "fifo-run"
    fifo.mkdir()
    q = h.write_trace(fifo / "vm-2.wsprof")
    os.mkfifo(f"{q}-wal", 0o644)
    Path(f"{q}-shm").write_bytes(b"")
    before = (h.folder_state(vic), h.link_state(run), h.link_state(fifo))
    assert not untrusted.may_read_in_place(str(p)) and not untrusted.may_read_in_place(str(q))
    delta = TraceFollower(str(p)).poll()
    assert delta is not None and len(delta.calls) == h.STEPS * h.CALLS_PER_STEP
    follower = TraceFollower(str(q))
    assert follower.poll() is None and "not a regular file" in str(follower.problem)
    assert (h.folder_state(vic), h.link_state(run), h.link_state(fifo)) == before
    with pytest.raises(InputError, match="not read in place"):
        untrusted.open_live(str(p))
