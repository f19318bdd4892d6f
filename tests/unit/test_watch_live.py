"""``wsprof watch``'s layers on real SQLite traces written by TraceWriter while they are read:
the incremental reader, the live analysis against ``wsprof analyze`` of the same folder,
retention rewriting old steps under the reader, binning, and the OpenMetrics page (parsed by
``prometheus_client``'s own parser)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, load_script
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from wsprof.analysis.growth import classify
from wsprof.analysis.live import MAX_JUDGED_POINTS, LiveRun, binned
from wsprof.analysis.run import analyze_path
from wsprof.contracts.series import Series
from wsprof.contracts.units import Unit
from wsprof.report.openmetrics import FAMILIES, exposition
from wsprof.trace.follow import RunFollower, TraceFollower
from wsprof.trace.retention import Retention
from wsprof.trace.writer import TraceWriter

MANY = load_script("bench_many_ranks")
WATCH_BENCH = load_script("bench_watch")


def _writers(
    folder: Path, ranks: int, outlier: int | None, growth_ns: int = 50_000
) -> list[object]:
    return [
        WATCH_BENCH.RankWriter(str(folder), r, ranks, 2, growth_ns if r == outlier else 0, 1000 + r)
        for r in range(ranks)
    ]


# --- the incremental reader -----------------------------------------------------------------


def test_follower_reads_only_the_rows_added_since(tmp_path: Path) -> None:
    steps, calls = 6, 20
    schedule = MANY.step_schedule(steps, calls, 0)
    (w,) = _writers(tmp_path, 1, None)
    w.write(schedule, 0, 2, calls)
    f = TraceFollower(w.path)
    first = f.poll()
    assert first is not None and f.problem is None
    assert len(first.calls) == 2 * calls
    assert sorted({s.step for s in first.spans}) == [0, 1] and len(first.spans) == 8
    assert first.meta["rank"] == 0 and first.totals is not None and int(first.totals.n.sum()) == 40
    again = f.poll()
    assert again is not None and len(again.calls) == 0 and again.spans == []
    w.write(schedule, 2, 3, calls)
    third = f.poll()
    assert third is not None
    assert len(third.calls) == calls and set(third.calls.step.tolist()) == {2}
    assert {s.step for s in third.spans} == {2}
    # Strings interned before the cursor still resolve in later rows.
    assert set(third.calls.op.tolist()) == {"broadcast"}
    w.close()
    last = f.poll()
    assert last is not None and "closed" in last.meta
    # The writer's close checkpointed its WAL: the reader left no -wal or -shm behind.
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(w.path)]


def test_follower_waits_for_an_empty_file_and_names_a_bad_one(tmp_path: Path) -> None:
    empty = tmp_path / "a.wsprof"
    empty.write_bytes(b"")
    f = TraceFollower(str(empty))
    assert f.poll() is None and f.problem is None  # created, not flushed yet: no error
    junk = tmp_path / "b.wsprof"
    junk.write_bytes(b"not a trace at all" * 10)
    g = TraceFollower(str(junk))
    assert g.poll() is None
    assert g.problem is not None and "not a wsprof trace" in g.problem


def test_a_truncated_trace_is_read_up_to_its_last_complete_record(tmp_path: Path) -> None:
    run = tmp_path / "run"
    steps, calls = 300, 50
    schedule = MANY.step_schedule(steps, calls, 0)
    good, bad = _writers(run, 2, None)
    for w in (good, bad):
        for k in range(steps):  # one flush per step: rows in write order, step by step
            w.write(schedule, k, k + 1, calls)
        w.close()
    data = Path(bad.path).read_bytes()
    Path(bad.path).write_bytes(data[: int(len(data) * 0.6)])  # cut mid-page
    follower = RunFollower(str(run))
    got = dict(follower.poll())
    assert got[good.path] is not None and len(got[good.path].calls) == steps * calls
    part = got[bad.path]
    assert part is not None
    assert 0 < len(part.calls) < steps * calls
    (problem,) = follower.problems()
    assert problem.startswith(bad.path) and "corrupt or truncated" in problem
    assert "read up to its last complete record" in problem and "cut after rowid" in problem
    # Unchanged, it is not read again; what was read stays.
    again = dict(follower.poll())
    assert again[bad.path] is None and follower.problems() == [problem]
    snap = LiveRun(str(run)).refresh()
    assert snap.analysis.verdict.status != "no_problem"  # part of a trace: not judged whole
    assert any(bad.path in u for u in snap.analysis.unread)
    by_path = {r.path: r for r in snap.ranks}
    assert by_path[good.path].steps == steps
    assert by_path[bad.path].problem == problem


# --- the live analysis against `wsprof analyze` ---------------------------------------------


def _kinds(findings: object) -> list[tuple[str, str]]:
    return sorted((f.kind, f.severity) for f in findings)  # type: ignore[attr-defined]


def test_a_finished_run_gets_the_verdict_and_findings_of_analyze(tmp_path: Path) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=8, calls_per_rank=3_000, steps=30, outliers=(5,))
    whole = analyze_path(str(run))
    snap = LiveRun(str(run)).refresh()
    live = snap.analysis
    assert live.verdict.status == whole.verdict.status == "problems"
    assert _kinds(live.findings) == _kinds(whole.findings)
    assert [d.cause for d in live.diagnoses] == [d.cause for d in whole.diagnoses]
    assert "rank 5" in live.diagnoses[0].title
    assert live.headline is not None and whole.headline is not None
    assert live.headline.rollout_share_median == pytest.approx(whole.headline.rollout_share_median)
    assert [r.steps for r in snap.ranks] == [30] * 8
    assert len(snap.new_steps) == 8 * 30


def test_watch_and_analyze_say_the_same_words_with_the_same_numbers(tmp_path: Path) -> None:
    # Parity beyond (kind, severity): every finding's title and evidence. The hooks' cost is
    # the recorded calls times the cost per call measured at patch, in both (watch keeps the
    # count of calls, not per-op tables: it once said "about 0 s" where analyze said 13 ms).
    run = tmp_path / "run"
    MANY.generate_run(
        str(run), n_ranks=4, calls_per_rank=3_000, steps=30, outliers=(2,), hook_ns_per_call=1100
    )
    whole = analyze_path(str(run)).findings
    live = LiveRun(str(run)).refresh().analysis.findings
    assert [(f.kind, f.title) for f in live] == [(f.kind, f.title) for f in whole]
    assert [f.evidence for f in live] == [f.evidence for f in whole]
    own = next(f for f in whole if f.kind == "self_overhead")
    assert own.evidence.as_dict()["hooks_s"] == pytest.approx(4 * 3_000 * 1100 / 1e9, rel=0.01)


#: What the unit tests below compare of each process, beyond its findings: what watch reads of
#: the samples, the NVML readings against the sync phases and the calls' sites.
JOINED = ("hot_frames", "hot_stacks", "n_samples", "windows", "phase_source", "shift")
JOINED += ("early_stacks", "late_stacks", "gpu_util", "sync_site")


def test_samples_gpu_use_and_sync_site_followed_as_they_grow_end_where_analyze_ends(
    tmp_path: Path,
) -> None:
    # Three steps a flush, refreshed after each: a py-spy sampler's windows of rank 0 (in their
    # own trace), NVML readings that run ahead of the steps (some land in the open step, some
    # after the last one) and a caller site of the sync calls.
    run = tmp_path / "run"
    steps, calls = 12, 30
    schedule = MANY.step_schedule(steps, calls, 0)
    writers = _writers(run, 2, outlier=None)
    sampler = TraceWriter(str(run / "node-a-pyspy.wsprof"))
    sampler.set_meta({"host": "node-a", "pid": 7, "targets": [writers[0].pid]})
    stacks = {
        1: ["main (train.py:1)", "rollout (train.py:20)"],
        2: ["main (train.py:1)", "sync_weights (trainer/sync.py:80)"],
        3: ["main (train.py:1)", "sync_weights (trainer/sync.py:80)", "push (sync.py:88)"],
    }
    sampler.write({"stacks": [(i, json.dumps(f)) for i, f in stacks.items()]})
    for w in writers:
        w.w.write({"sites": [(0, "trainer/sync.py", 88, "push_weights")]})
    live = LiveRun(str(run))
    rng = np.random.default_rng(3)
    for k0 in range(0, steps, 3):
        for w in writers:
            w.write(schedule, k0, k0 + 3, calls)
            lo, hi = w.t0_mono + schedule[k0], w.t0_mono + schedule[min(k0 + 4, steps)]
            with sqlite3.connect(f"file:{w.path}?mode=ro", uri=True) as db:
                syncs = db.execute(
                    "SELECT t_start_ns, t_end_ns FROM spans WHERE name = 'weight_sync' "
                    "AND step >= ?",
                    (k0,),
                ).fetchall()
            inside = [a + (b - a) * j // 3 for a, b in syncs for j in range(3)]  # its start too
            ends = [b for _, b in syncs]  # a sync's end is outside it
            t = np.sort([*rng.integers(lo, hi + 5 * 10**9, 40), *inside, *ends])
            w.w.write(
                {
                    "counters": [
                        (int(x), "nvml.gpu0.util_pct", float(rng.integers(0, 100))) for x in t
                    ]
                }
            )
        t0 = writers[0].t0_mono
        rows = [
            (
                t0 + schedule[k] + j * 10**9,
                t0 + schedule[k] + (j + 1) * 10**9,
                writers[0].pid,
                1,
                s,
                c,
            )
            for k in range(k0, k0 + 3)
            for j in range(3)
            for s, c in ((1, 20 - 5 * j - k), (2 + k % 2, 5 + 4 * k))
        ]
        sampler.write({"samples": rows})
        live.refresh()
    for w in writers:
        w.close()
    sampler.close()
    got = live.refresh().analysis
    whole = analyze_path(str(run))
    assert [p.label for p in got.processes] == [p.label for p in whole.processes]
    assert got.processes[0].n_samples > 0 and got.processes[0].gpu_util is not None
    assert got.processes[0].sync_site == "push_weights (trainer/sync.py:88)"
    for a, b in zip(got.processes, whole.processes):
        for name in JOINED:
            assert getattr(a, name) == getattr(b, name), (a.label, name)
    assert [(f.kind, f.title) for f in got.findings] == [(f.kind, f.title) for f in whole.findings]
    assert [f.evidence for f in got.findings] == [f.evidence for f in whole.findings]


def test_refreshes_as_the_run_grows_end_where_analyze_ends(tmp_path: Path) -> None:
    run = tmp_path / "run"
    steps, calls = 24, 40
    schedule = MANY.step_schedule(steps, calls, 50_000)
    writers = _writers(run, 4, outlier=2)
    live = LiveRun(str(run))
    statuses, new = [], 0
    for k0 in range(0, steps, 3):
        for w in writers:
            w.write(schedule, k0, k0 + 3, calls)
        snap = live.refresh()
        new += len(snap.new_steps)
        assert [r.steps for r in snap.ranks] == [k0 + 3] * 4  # every written step, once
        statuses.append(snap.analysis.verdict.status)
        # Only what was added is read: a refresh's rows do not grow with the run.
        assert snap.rows_read <= 4 * 3 * (calls + 4 + 1) + 4 * 20
    idle = live.refresh()
    assert idle.rows_read == 0 and idle.new_steps == ()
    for w in writers:
        w.close()
    assert new == 4 * steps
    # Three steps cannot show a healthy run; the growing rank is found by the end.
    assert statuses[0] != "no_problem" and statuses[-1] == "problems"
    whole = analyze_path(str(run))
    assert _kinds(live.refresh().analysis.findings) == _kinds(whole.findings)
    for r, pa in zip(live.refresh().ranks, whole.processes):
        assert r.last is not None and r.last.weight_sync_s == pytest.approx(
            pa.steps[-1].weight_sync_s
        )


def test_retention_rewriting_old_steps_under_the_reader_counts_nothing_twice(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    steps, calls = 12, 60
    schedule = MANY.step_schedule(steps, calls, 0)
    (w,) = _writers(run, 1, None)
    w.w.retention = Retention(keep_steps=2, calls_per_thinned_step=5)
    live = LiveRun(str(run))
    for k in range(steps):
        w.write(schedule, k, k + 1, calls)
        live.refresh()
    w.close()
    snap = live.refresh()
    assert w.w.retention.calls_removed > 0  # old steps were thinned while being watched
    (proc,) = live.procs.values()
    assert [r.n_calls for r in proc.rows] == [calls] * steps
    (rank,) = snap.ranks
    assert rank.ops[0].op == "broadcast" and rank.ops[0].calls == steps * calls
    whole = analyze_path(str(run))
    assert [r.n_calls for r in whole.processes[0].steps] == [calls] * steps


def test_a_job_without_step_markers_is_not_called_healthy(tmp_path: Path) -> None:
    path = tmp_path / "run" / "h-1.wsprof"
    w = TraceWriter(str(path))
    w.set_meta({"host": "h", "pid": 1, "rank": 0, "world_size": 1, "source": "patch"})
    s = w.strings
    rows = np.zeros((200, 16), dtype=np.int64)
    rows[:, 0] = np.arange(200) * 1_000_000
    rows[:, 1] = rows[:, 0] + 500_000
    rows[:, 5], rows[:, 6], rows[:, 7] = s.intern("broadcast"), s.intern("dist.broadcast"), 0
    rows[:, 7] = s.intern("api")
    rows[:, 8], rows[:, 9], rows[:, 10], rows[:, 12], rows[:, 13] = 64, -1, -1, -1, -1
    rows[:, 14], rows[:, 15] = -1, -1
    w.write({}, call_matrix=rows)
    w.close()
    snap = LiveRun(str(path.parent)).refresh()
    assert snap.analysis.verdict.status == "inconclusive"
    assert any("no completed step markers yet in rank 0" in n for n in snap.analysis.notes)


# --- judging on a budget --------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=3_000),
    slope=st.floats(min_value=-5, max_value=5, allow_nan=False),
    start=st.integers(min_value=0, max_value=10_000),
    stride=st.integers(min_value=1, max_value=4),
)
def test_binning_keeps_the_slope_and_orders_the_steps(
    n: int, slope: float, start: int, stride: int
) -> None:
    steps = tuple(start + stride * i for i in range(n))
    s = Series("weight_sync_s", Unit.SECONDS, steps, tuple(1.0 + slope * x for x in steps))
    b = binned(s)
    assert len(b.values) <= MAX_JUDGED_POINTS
    if n <= MAX_JUDGED_POINTS:
        assert b == s
        return
    assert all(y > x for x, y in zip(b.steps, b.steps[1:]))
    fit = np.polyfit(np.asarray(b.steps, float), np.asarray(b.values), 1)[0]
    assert fit == pytest.approx(slope, rel=1e-3, abs=1e-6)


def test_a_long_linear_leak_is_judged_the_same_on_its_bins() -> None:
    rng = np.random.default_rng(3)
    n = 1_000
    values = 1.0 + 0.002 * np.arange(n) + 0.05 * rng.standard_normal(n)
    s = Series("weight_sync_s", Unit.SECONDS, tuple(range(n)), tuple(values.tolist()))
    whole = classify(s.values, steps=s.steps)
    b = binned(s)
    on_bins = classify(b.values, steps=b.steps)
    assert whole.accumulating and on_bins.accumulating
    assert on_bins.slope_per_step == pytest.approx(whole.slope_per_step, rel=0.1)


# --- the OpenMetrics page -------------------------------------------------------------------


def test_the_page_parses_and_names_every_family(tmp_path: Path) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=4, calls_per_rank=2_000, steps=20, outliers=(2,))
    snap = LiveRun(str(run)).refresh()
    text = exposition(snap)
    assert text.endswith("# EOF\n")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    # No link limit is known for these traces (no link description, no stated limit): the
    # family is left out, never a guessed number.
    assert set(fams) == set(FAMILIES) - {"wsprof_link_limit_bytes_per_second"}
    # Coverage needs c10d's counts (not in the generator's traces): no sample, never a 0.
    assert not fams["wsprof_coverage_issued_collectives"].samples
    for name, (kind, _) in FAMILIES.items():
        if name in fams:
            assert fams[name].type == kind, name
    sync = {s.labels["rank"]: s.value for s in fams["wsprof_weight_sync_seconds"].samples}
    assert set(sync) == {"0", "1", "2", "3"}
    for r in snap.ranks:
        assert r.last is not None and sync[str(r.rank)] == pytest.approx(r.last.weight_sync_s)
    calls = [s for s in fams["wsprof_collective_calls"].samples if s.name.endswith("_total")]
    assert {s.labels["op"] for s in calls} == {"broadcast"}
    assert sum(s.value for s in calls) == 4 * 2_000
    acc = {
        s.labels["rank"]: s.value
        for s in fams["wsprof_series_accumulating"].samples
        if s.labels["series"] == "weight_sync_s"
    }
    assert acc["2"] == 1 and acc["0"] == 0
    verdict = {s.labels["wsprof_verdict"]: s.value for s in fams["wsprof_verdict"].samples}
    assert verdict == {"problems": 1, "no_problem": 0, "inconclusive": 0}


def test_hostile_host_names_round_trip_through_the_page(tmp_path: Path) -> None:
    run = tmp_path / "run"
    schedule = MANY.step_schedule(4, 10, 0)
    (w,) = _writers(run, 1, None)
    hostile = 'evil"host\\name\n{rank="9"} # EOF'
    w.w.set_meta({"host": hostile})
    w.write(schedule, 0, 4, 10)
    w.close()
    snap = LiveRun(str(run)).refresh()
    assert snap.ranks[0].host == hostile
    fams = {f.name: f for f in text_string_to_metric_families(exposition(snap))}
    (sample,) = fams["wsprof_step"].samples
    assert sample.labels == {"rank": "0", "host": hostile}
    assert sample.value == 3


def test_nothing_here_leaves_files_behind(tmp_path: Path) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=1, calls_per_rank=500, steps=5)
    before = sorted(os.listdir(run))
    live = LiveRun(str(run))
    live.refresh()
    live.close()
    assert sorted(os.listdir(run)) == before  # a read-only reader writes nothing
    shutil.rmtree(run)


def test_a_verdict_judged_on_bins_speaks_of_every_step() -> None:
    from wsprof.analysis.live import _judge

    n = 400
    values = tuple(1.0 + 0.01 * i for i in range(n))
    s = Series("weight_sync_s", Unit.SECONDS, tuple(range(n)), values)
    res = _judge(s, {"weight_sync_s": 3600.0})
    assert res is not None and res.series == s
    assert len(res.verdict.fitted) == n
    assert res.verdict.evidence["judged_points"] == MAX_JUDGED_POINTS
    assert res.verdict.evidence["steps_per_point"] == 4
    assert res.verdict.slope_per_step == pytest.approx(0.01, rel=1e-3)
    assert res.verdict.fitted[-1] == pytest.approx(values[-1], rel=0.01)


def test_the_readme_lists_every_family_with_its_type() -> None:
    import re

    text = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(wsprof_[a-z_]+)` \| (\w+) \|", text, flags=re.M)
    listed = {name.removesuffix("_total"): kind for name, kind in rows}
    assert listed == {name: kind for name, (kind, _) in FAMILIES.items()}
    for name, kind in rows:
        assert name.endswith("_total") == (kind == "counter"), name


def test_readings_kept_for_the_audit_give_the_audit_of_all_of_them() -> None:
    from wsprof.analysis.coverage import audit_process
    from wsprof.analysis.live_process import _add_readings
    from wsprof.trace.model import CallTable, IssuedReading, ProcessTrace, RecordedIssued

    readings = [IssuedReading(0, -1, "0", "gloo", 0, "patch")]
    t, seq = 1, 0
    for step in range(6):
        for _ in range(3):  # three flushes per step, two groups interleaved
            seq += 2
            readings.append(IssuedReading(t, step, "0", "gloo", seq, "flush"))
            readings.append(IssuedReading(t + 1, step, "1", "gloo", seq // 2, "flush"))
            t += 2
        readings.append(IssuedReading(t, step, "0", "gloo", seq, "step"))
    readings.append(IssuedReading(t + 1, 5, "1", "gloo", 0, "flush"))  # a new group "1"
    recorded = [
        RecordedIssued(s, "0", "broadcast", "api", 6, 6, "dist.broadcast") for s in range(6)
    ]

    def audit(rs: list[IssuedReading]) -> object:
        trace = ProcessTrace(
            "p", {}, CallTable.empty(), {}, [], {}, [], issued=rs, recorded_issued=recorded
        )
        return audit_process(trace, "rank 0")

    kept: list[IssuedReading] = []
    last: dict[str, int] = {}
    for k in range(0, len(readings), 5):  # arriving a few at a time
        _add_readings(kept, last, readings[k : k + 5])
    assert len(kept) < len(readings) / 2
    assert audit(kept) == audit(readings)


def test_one_watch_per_node_follows_only_its_hosts_traces(tmp_path: Path) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=4, calls_per_rank=400, steps=4, hosts=2)
    (run / "node-a-x.wsprof").write_bytes(b"")  # not a trace name the recorder writes
    snap = LiveRun(str(run), host="node-b").refresh()
    assert [r.rank for r in snap.ranks] == [2, 3]
    assert {r.host for r in snap.ranks} == {"node-b"}
    assert len(LiveRun(str(run)).refresh().ranks) == 4


# --- from a break-it review ---------------------------------------------------------------


def test_a_file_shorter_than_a_page_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=1, calls_per_rank=400, steps=4)
    (src,) = run.glob("*.wsprof")
    cut = run / "node-a-1.wsprof"
    cut.write_bytes(src.read_bytes()[:3000])
    f = TraceFollower(str(cut))
    assert f.poll() is None
    assert f.problem is not None and "corrupt or truncated" in f.problem
    assert "shorter than one 4096-byte page" in f.problem


def test_a_fifo_named_like_a_trace_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "node-a-7.wsprof"
    os.mkfifo(fifo)
    f = TraceFollower(str(fifo))
    assert f.poll() is None and f.problem is not None and "not a regular file" in f.problem


def test_a_file_replaced_under_its_name_is_read_from_its_start(tmp_path: Path) -> None:
    run = tmp_path / "run"
    schedule = MANY.step_schedule(12, 10, 0)
    (w,) = _writers(run, 1, None)
    w.write(schedule, 0, 8, 10)
    live = LiveRun(str(run))
    assert live.refresh().ranks[0].steps == 8
    other = tmp_path / "other"
    (v,) = _writers(other, 1, None)
    v.write(schedule, 0, 2, 10)
    v.close()
    w.close()
    os.replace(v.path, w.path)
    snap = live.refresh()
    (rank,) = snap.ranks
    assert rank.steps == 2 and rank.last is not None and rank.last.step == 1
    assert rank.state == "closed"


def test_a_wal_left_by_a_killed_writer_is_read_without_touching_the_folder(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    schedule = MANY.step_schedule(6, 10, 0)
    (w,) = _writers(run, 1, None)
    w.write(schedule, 0, 6, 10)
    # What a SIGKILL leaves: the trace and its -wal (here copied while the writer is open),
    # and no -shm.
    dead = tmp_path / "dead"
    dead.mkdir()
    name = os.path.basename(w.path)
    shutil.copyfile(w.path, dead / name)
    shutil.copyfile(w.path + "-wal", dead / (name + "-wal"))
    w.close()
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in dead.iterdir()}
    live = LiveRun(str(dead))
    snap = live.refresh()
    assert snap.ranks[0].steps == 6  # the rows in the WAL were read
    assert live.refresh().rows_read == 0
    after = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in dead.iterdir()}
    assert after == before  # nothing created or changed beside it


def test_host_is_the_traces_own_host_not_a_name_prefix(tmp_path: Path) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=2, calls_per_rank=400, steps=4, hosts=2)
    (b,) = run.glob("node-b-*.wsprof")
    shutil.copyfile(b, run / "node-5000.wsprof")  # named like host "node", written on node-b
    snap = LiveRun(str(run), host="node").refresh()
    assert snap.ranks == ()


def test_a_restart_into_the_same_folder_shows_each_label_set_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    schedule = MANY.step_schedule(6, 10, 0)
    (first,) = _writers(run, 1, None)
    first.write(schedule, 0, 3, 10)
    first.close()
    (again,) = _writers(tmp_path / "restart", 1, None)  # rank 0 on node-a again ...
    again.w.set_meta({"pid": 50000, "anchor": {"monotonic_ns": 1, "unix_ns": 2 * 10**18}})
    again.write(schedule, 0, 5, 10)  # ... started later, further along
    again.close()
    shutil.copyfile(again.path, run / "node-a-50000.wsprof")
    snap = LiveRun(str(run)).refresh()
    assert len(snap.ranks) == 2
    fams = {f.name: f for f in text_string_to_metric_families(exposition(snap))}
    for fam in fams.values():
        keys = [(s.name, tuple(sorted(s.labels.items()))) for s in fam.samples]
        assert len(keys) == len(set(keys)), fam.name
    (step,) = fams["wsprof_step"].samples
    assert step.value == 4  # the later run's
