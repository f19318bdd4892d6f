"""torch's Flight Recorder dumps read as plain data (:mod:`wsprof.trace.flight`), a folder of
them read as a run (:mod:`wsprof.trace.flight_dumps`), and the hang they show
(:mod:`wsprof.analysis.hang`, the ``collective_hang`` rule).

The dumps here have the shape torch 2.13 writes (``_dump_fr_trace()`` of a 3-rank gloo job:
version ``2.10``, ``pg_config`` keyed by ``''``, ``state`` always ``scheduled``, ``retired``
False only for an entry still open); a real job's dumps are read in
``tests/integration/test_flight.py``."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from wsprof.analysis.hang import hangs_of
from wsprof.analysis.run import analyze_path
from wsprof.contracts.ops import flight_op
from wsprof.errors import InputError
from wsprof.inputs import LoadedRun, load
from wsprof.trace import flight
from wsprof.trace.flight_dumps import dump_trace, find_dumps, stand_of

pytestmark = pytest.mark.pure

T0 = 1_796_337_022_752_887_978  # wall-clock ns, as c10d writes them


def entry(
    rid: int, seq: int, name: str = "gloo:all_reduce", retired: bool = True, **kw: Any
) -> dict[str, Any]:
    """One entry as torch 2.13 pickles it."""
    e = {
        "record_id": rid,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "thread_name": "python",
        "thread_id": "140194217343872",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": name,
        "time_created_ns": T0 + rid * 1_000_000,
        "input_sizes": [[10]],
        "input_dtypes": ["Float"],
        "output_sizes": [[10]],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": retired,
        "timeout_ms": 5000,
        "is_p2p": False,
    }
    e.update(kw)
    return e


def dump(entries: list[dict[str, Any]], ranks: str = "[0, 1, 2]") -> dict[str, Any]:
    last = max((e["collective_seq_id"] for e in entries if isinstance(e, dict)), default=0)
    return {
        "version": "2.10",
        "pg_config": {"": {"name": "", "desc": "", "ranks": ranks}},
        "comm_lib_version": "",
        "pg_status": {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": -1,
                "last_completed_collective": last,
            }
        },
        "entries": entries,
    }


def hung_job(folder: Path, as_json: bool = False) -> None:
    """Dumps of a 3-rank job: 3 steps of (all_reduce, broadcast, all_reduce), then ranks 0
    and 1 wait in all_reduce #10 that rank 2 never issues."""
    folder.mkdir(parents=True, exist_ok=True)
    names = ["gloo:all_reduce", "gloo:broadcast", "gloo:all_reduce"]
    for rank in range(3):
        entries = [entry(i, i + 1, names[i % 3]) for i in range(9)]
        if rank < 2:
            entries.append(entry(9, 10, retired=False))
        d = dump(entries)
        data = json.dumps(d).encode() if as_json else pickle.dumps(d)
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)


def test_real_shape_is_read_with_bytes_dtype_group_and_wall_times() -> None:
    d = flight.loads(pickle.dumps(dump([entry(0, 1), entry(1, 2, "gloo:broadcast")])))
    assert d.version == "2.10" and d.skipped == 0
    assert d.ranks == {"0": (0, 1, 2)}  # gloo keys the default group's config by ''
    assert d.status[0].last_completed == 2 and d.status[0].last_started == -1
    first, second = d.entries
    assert (first.group, first.group_desc, first.pg_id) == ("0", "default_pg", 0)
    assert (first.op, second.op, first.backend) == ("all_reduce", "broadcast", "gloo")
    assert (first.bytes, first.dtype) == (40, "torch.float32")
    assert first.thread == 140194217343872 and first.created_wall_ns == T0
    assert first.started_wall_ns is None and first.duration_ms is None


def test_json_form_reads_the_same() -> None:
    raw = dump([entry(0, 1, time_discovered_completed_ns=0)])
    raw["pg_status"]["0"] = {k: str(v) for k, v in raw["pg_status"]["0"].items()}  # JSON's
    a = flight.loads(pickle.dumps(dump([entry(0, 1)])))
    b = flight.loads(json.dumps(raw).encode())
    assert a.entries == b.entries  # 0 is "unknown" in JSON, None in the pickle
    assert b.status[0].last_enqueued == 1


def test_nccl_timing_fields_are_read() -> None:
    e = entry(
        0,
        1,
        "nccl:_allgather_base",
        time_discovered_started_ns=T0 + 5,
        time_discovered_completed_ns=T0 + 2_000_005,
        duration_ms=1.5,
        input_sizes=[[1024, 1024]],
        input_dtypes=["BFloat16"],
        state="completed",
    )
    [x] = flight.loads(pickle.dumps(dump([e]))).entries
    assert x.op == "all_gather_into_tensor" and x.backend == "nccl"
    assert (x.bytes, x.dtype) == (2 * 1024 * 1024, "torch.bfloat16")
    assert (x.completed_wall_ns, x.duration_ms) == (T0 + 2_000_005, 1.5)


def test_profiling_names_map_to_canonical_ops() -> None:
    assert flight_op("gloo:all_reduce") == "all_reduce"
    assert flight_op("nccl:reduce_scatter_tensor_coalesced") == "reduce_scatter_tensor"
    assert flight_op("nccl:send 0->1") == "send"
    assert flight_op("nccl:alltoall_base") == "all_to_all_single"
    assert flight_op("nccl:something_new") == "something_new"  # unknown: its own name


class _Runs:
    """An object whose unpickling would run ``touch MARK``."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.mark}",))


def test_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    hostile = dump([entry(0, 1)])
    hostile["entries"].append(_Runs(mark))
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(hostile))
    with pytest.raises(InputError) as err:
        flight.read_dump(str(path))
    line = str(err.value)
    assert "refused" in line and "posix.system" in line and "\n" not in line
    assert not mark.exists()
    # The same through the CLI's loader: one line, nothing run, the file unchanged.
    before = path.read_bytes()
    with pytest.raises(InputError):
        analyze_path(str(tmp_path))
    assert not mark.exists() and path.read_bytes() == before


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x04\x95",  # cut short
        b"\x80\x04K\x01.",  # a plain int, not a dump
        pickle.dumps({"version": "2.10"}),  # no entries
        pickle.dumps({"entries": [], "version": None}),
        b'{"entries": [',
        pickle.dumps(pickle.PickleBuffer(b"x"), protocol=5),
    ],
)
def test_not_a_dump_is_one_line(data: bytes) -> None:
    with pytest.raises(InputError) as err:
        flight.loads(data, "d")
    assert "\n" not in str(err.value)


def test_malformed_entries_are_skipped_and_counted() -> None:
    bad = [
        "x",
        entry(1, 2, record_id=[1]),
        entry(2, 3, process_group=["0"]),
        entry(3, 4, time_created_ns=-5),
        entry(4, 5, profiling_name=7),
    ]
    odd = [
        entry(5, 6, input_sizes=[[2**41]]),  # absurd shape: bytes unknown
        entry(6, 7, input_sizes=[[1]] * 5000, input_dtypes=["Float"] * 5000),
        entry(7, 8, input_dtypes=["NoSuchType"]),
        entry(8, 9, duration_ms=float("nan"), thread_id="t-1", timeout_ms=True),
    ]
    d = flight.loads(pickle.dumps(dump([entry(0, 1), *bad, *odd])))
    assert d.skipped == len(bad)
    assert [e.bytes for e in d.entries[1:]] == [-1, -1, -1, 40]
    assert d.entries[-1].duration_ms is None and d.entries[-1].thread == -1
    assert d.entries[-1].timeout_ms == -1


def test_shared_references_do_not_multiply_work() -> None:
    """A pickle may give every entry the same list of 4,096 shapes (its memo): each list is
    read once, so 20,000 such entries (1.3 billion dimensions if walked each time) parse in
    the time of 20,000 small ones."""
    big, dtypes = [[1] * 16] * 4096, ["Float"] * 4096
    rows = [entry(i, i + 1, input_sizes=big, input_dtypes=dtypes) for i in range(20_000)]
    d = flight.loads(pickle.dumps(dump(rows)))
    assert len(d.entries) == 20_000 and {e.bytes for e in d.entries} == {4096 * 4}


def test_a_pickle_that_would_fill_memory_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty sets cost a byte each in a pickle and about 200 bytes each in memory: decoding is
    bounded (here to 64 MiB beyond what the process maps) and fails in one line."""
    monkeypatch.setattr(flight, "MIN_DECODE_BYTES", 64 << 20)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"\x80\x04](" + b"\x8f" * 2_000_000 + b"e.")
    with pytest.raises(InputError) as err:
        flight.read_dump(str(path))
    assert "memory" in str(err.value) and "\n" not in str(err.value)
    # the limit is put back: the process allocates freely again
    assert len(bytearray(256 << 20)) == 256 << 20


def test_cut_pickle_is_unreadable_not_refused_as_code() -> None:
    with pytest.raises(InputError) as err:
        flight.loads(pickle.dumps(dump([entry(0, 1)]))[:-30], "d")
    assert "not a readable pickle" in str(err.value) and "run code" not in str(err.value)


def test_absurd_times_and_durations_are_unknown() -> None:
    entries = [
        entry(0, 1, duration_ms=1e300),
        entry(1, 2, time_created_ns=2**62 + 5),  # past what int64 sums hold: not read
        entry(2, 3, time_discovered_completed_ns=2**63 - 1),
    ]
    d = flight.loads(pickle.dumps(dump(entries)))
    assert [e.record_id for e in d.entries] == [0, 2] and d.skipped == 1
    assert d.entries[0].duration_ms is None and d.entries[1].completed_wall_ns is None
    assert len(dump_trace(d).calls) == 2


def test_a_rank_that_issued_nothing_never_arrived(tmp_path: Path) -> None:
    """torch's JSON of a rank with no entry leaves 'entries' out; its pickle has an empty
    list: either is that rank's evidence, not a missing dump."""
    hung_job(tmp_path)
    for r in (0, 1):  # ranks 0 and 1 wait in #1; rank 2 issued nothing
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(
            pickle.dumps(dump([entry(0, 1, retired=False)]))
        )
    bare = dump([])
    del bare["entries"]
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"\xef\xbb\xbf" + json.dumps(bare).encode())
    [h] = hangs_of([t.meta for t in load(str(tmp_path)).traces()])  # type: ignore[union-attr]
    assert (h.waiting, h.missing, h.no_dump) == ((0, 1), (2,), ())
    assert h.behind[0].seq == -1


def test_a_second_dump_of_a_rank_and_a_dump_without_rank_are_said(tmp_path: Path) -> None:
    hung_job(tmp_path)
    (tmp_path / "nccl_trace_rank_1.json").write_bytes(
        json.dumps(dump([entry(0, 1), entry(1, 2)])).encode()
    )
    (tmp_path / "dumpA").write_bytes(pickle.dumps(dump([entry(0, 1)])))
    analysis = analyze_path(str(tmp_path))
    assert any("a second dump of rank 1" in n for n in analysis.notes), analysis.notes
    assert any("dumpA: no rank in its file name" in n for n in analysis.notes)
    [f] = [f for f in analysis.findings if f.kind == "collective_hang"]
    assert f.evidence.as_dict()["missing_ranks"] == [2]  # the first dump of rank 1 was kept


def test_a_link_named_as_a_dump_is_refused_and_said(tmp_path: Path) -> None:
    hung_job(tmp_path / "fr")
    target = tmp_path / "elsewhere"
    (tmp_path / "fr" / "nccl_trace_rank_2").rename(target)
    (tmp_path / "fr" / "nccl_trace_rank_2").symlink_to(target)
    analysis = analyze_path(str(tmp_path / "fr"))
    assert any("nccl_trace_rank_2" in n and "link" in n for n in analysis.notes), analysis.notes


def test_only_entries_after_a_record_id_are_parsed() -> None:
    data = pickle.dumps(dump([entry(i, i + 1) for i in range(5)]))
    assert [e.record_id for e in flight.loads(data, after_id=2).entries] == [3, 4]


def test_files_a_link_a_fifo_and_a_huge_file_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "nccl_trace_rank_0"
    real.write_bytes(pickle.dumps(dump([entry(0, 1)])))
    assert flight.read_dump(str(real)).rank == 0
    link = tmp_path / "nccl_trace_rank_1"
    link.symlink_to(real)
    with pytest.raises(InputError, match="never through a link"):
        flight.read_dump(str(link))
    fifo = tmp_path / "fifo_2"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        flight.read_dump(str(fifo))
    huge = tmp_path / "nccl_trace_rank_3"
    with open(huge, "wb") as f:
        f.truncate(flight.MAX_FILE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(InputError, match="MiB"):
        flight.read_dump(str(huge))


def test_rank_from_torch_file_names() -> None:
    assert flight.rank_from_name("/tmp/nccl_trace_rank_12") == 12
    assert flight.rank_from_name("fr/trace_rank3.json") == 3
    assert flight.rank_from_name("dump") is None


def test_a_folder_of_dumps_is_a_run_of_one_process_per_rank(tmp_path: Path) -> None:
    hung_job(tmp_path / "fr")
    (tmp_path / "fr" / "notes.txt").write_text("not a dump")
    assert [os.path.basename(p) for p in find_dumps(str(tmp_path / "fr")) or []] == [
        f"nccl_trace_rank_{r}" for r in range(3)
    ]
    loaded = load(str(tmp_path / "fr"))
    assert isinstance(loaded, LoadedRun)
    traces = list(loaded.traces())
    assert [t.rank for t in traces] == [0, 1, 2]
    t0 = traces[0]
    assert t0.meta["source"] == "flight_recorder" and t0.meta["world_size"] == 3
    assert len(t0.calls) == 10 and set(t0.calls.layer.tolist()) == {"c10d"}
    assert t0.calls.op.tolist()[:3] == ["all_reduce", "broadcast", "all_reduce"]
    assert int(t0.calls.bytes.sum()) == 400
    # a run folder with a wsprof trace is never taken for dumps
    (tmp_path / "fr" / "x.wsprof").write_bytes(b"")
    assert find_dumps(str(tmp_path / "fr")) is None


@pytest.mark.parametrize("as_json", [False, True])
def test_analyze_names_the_rank_that_never_arrived(tmp_path: Path, as_json: bool) -> None:
    hung_job(tmp_path, as_json)
    analysis = analyze_path(str(tmp_path))
    [f] = [f for f in analysis.findings if f.kind == "collective_hang"]
    assert f.severity == "critical"
    assert f.title.startswith("rank 2 never arrived at all_reduce #10 of group 0 (default_pg)")
    assert "ranks 0, 1 wait" in f.title
    ev = f.evidence.as_dict()
    assert (ev["waiting_ranks"], ev["missing_ranks"], ev["no_dump_ranks"]) == ([0, 1], [2], [])
    assert ev["behind"] == ["rank 2: last issued all_reduce #9 (completed)"]
    assert ev["source"].startswith("c10d sequence numbers")
    assert f.where == "rank 2 (last issued all_reduce #9 (completed))"
    # c10d's own record is the audit: every collective it kept, none unseen
    cov = analysis.coverage
    assert cov is not None and cov.status == "complete"
    assert [(g.rank, g.issued, g.flight) for g in cov.groups] == [
        (0, 10, 10),
        (1, 10, 10),
        (2, 9, 9),
    ]
    assert not [f for f in analysis.findings if f.kind == "self_overhead"]  # nothing of wsprof's


def test_hang_with_a_rank_without_dump_and_none_when_all_finished(tmp_path: Path) -> None:
    hung_job(tmp_path)
    (tmp_path / "nccl_trace_rank_2").unlink()
    metas = [t.meta for t in load(str(tmp_path)).traces()]  # type: ignore[union-attr]
    [h] = hangs_of(metas)
    assert (h.waiting, h.missing, h.no_dump) == ((0, 1), (), (2,))
    assert "rank 2 left no dump" in h.summary
    done = [
        stand_of(flight.parse(dump([entry(i, i + 1) for i in range(4)]), rank=r)) for r in (0, 1)
    ]
    assert hangs_of([{"rank": r, "flight_dump": s} for r, s in enumerate(done)]) == ()


def test_hostile_summaries_in_a_trace_meta_are_ignored() -> None:
    assert hangs_of([{"rank": 0, "flight_dump": {"groups": {"0": {"last": {"seq": "x"}}}}}]) == ()
    assert hangs_of([{"rank": True, "flight_dump": []}, {"flight_dump": None}]) == ()


def test_dump_trace_times_are_wall_clock_and_ordered() -> None:
    d = flight.parse(dump([entry(1, 2), entry(0, 1)]), rank=0)
    t = dump_trace(d)
    assert t.calls.t_start_ns.tolist() == [T0, T0 + 1_000_000]
    assert t.meta["anchor"] == {"monotonic_ns": 0, "unix_ns": 0}


def pushing_job(folder: Path, late_ms: int = 50) -> None:
    """Dumps of 3 ranks, 10 steps each: a gradient all_reduce, then a weight push of 4
    broadcasts of 1 MiB; rank 2 reaches each push ``late_ms`` after the others, whose first
    broadcast then completes (gloo records no completion: their next one is created then)."""
    folder.mkdir(parents=True, exist_ok=True)
    ms = 1_000_000
    for rank in range(3):
        entries, seq = [], 0
        for step in range(10):
            t = T0 + step * 1000 * ms
            seq += 1
            entries.append(entry(len(entries), seq, time_created_ns=t + 100 * ms))
            push = t + 600 * ms
            for k in range(4):
                seq += 1
                created = (
                    (push if rank < 2 else push + late_ms * ms)
                    if k == 0
                    else push + (late_ms + k) * ms
                )
                entries.append(
                    entry(
                        len(entries),
                        seq,
                        "gloo:broadcast",
                        time_created_ns=created,
                        input_sizes=[[1024, 256]],
                    )
                )
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump(entries)))


def test_waits_come_from_the_join_by_sequence_number(tmp_path: Path) -> None:
    """The ranks' pushes start at the same collective (group 0, #2, #7, ...): the waits are
    the last rank's arrival there less each rank's own, and say so."""
    pushing_job(tmp_path)
    analysis = analyze_path(str(tmp_path))
    by_rank = {pa.rank: pa for pa in analysis.processes}
    for rank, wait_s in ((0, 0.050), (1, 0.050), (2, 0.0)):
        rows = by_rank[rank].steps
        assert len(rows) >= 8
        assert {r.sync_wait_source for r in rows} == {"c10d sequence numbers"}
        assert all(r.sync_key is not None and r.sync_key[0] == "0" for r in rows)
        assert all(abs((r.sync_wait_s or 0) - wait_s) < 1e-9 for r in rows), rank
    # the same collective on every rank, whatever step number each rank's rhythm gave it
    assert {r.sync_key for r in by_rank[0].steps} == {r.sync_key for r in by_rank[2].steps}
    assert {r.wait_source for r in analysis.ranks} == {"c10d sequence numbers"}
