"""Many ranks: run-clock alignment, per-rank comparison and the outlier_rank finding, on traces
written with TraceWriter by the many-ranks benchmark's generator (small: 8 ranks x 2k calls)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import load_script

from wsprof.analysis.align import (
    BASIS_HOST,
    BASIS_NONE,
    BASIS_PROCESS,
    ClockInput,
    align,
    anchor_of,
)
from wsprof.analysis.model import Analysis, Finding
from wsprof.analysis.robust import robust_z
from wsprof.analysis.rules.ranks.rule import OUTLIER_Z
from wsprof.analysis.run import analyze_path, analyze_run
from wsprof.report.jsonout import to_dict
from wsprof.report.text import render_text
from wsprof.trace.reader import read_run, read_trace

BENCH = load_script("bench_many_ranks")
#: 8 ranks x 2,000 calls: 20 steps of 100 per-parameter broadcasts; ranks 0-3 on node-a,
#: 4-7 on node-b.
SMALL: dict[str, Any] = {"n_ranks": 8, "calls_per_rank": 2_000, "steps": 20, "hosts": 2}


def _outliers(a: Analysis) -> list[Finding]:
    return [f for f in a.findings if f.kind == "outlier_rank"]


# --- alignment (pure) ----------------------------------------------------------------------


def test_same_wall_time_maps_to_same_run_time_across_hosts() -> None:
    # Host a booted 1,000 s before the run, host b 900,000 s: monotonic clocks far apart.
    wall = 1_795_000_000 * 10**9
    inputs = [
        ClockInput("rank 0", "a", 1_000 * 10**9, wall, 1_000 * 10**9 + 5),
        ClockInput("rank 1", "a", 1_000 * 10**9 + 7_000, wall + 7_000, 1_000 * 10**9 + 9),
        ClockInput("rank 2", "b", 900_000 * 10**9, wall + 3, 900_000 * 10**9 + 1),
    ]
    clock = align(inputs)
    assert [c.basis for c in clock.clocks] == [BASIS_HOST] * 3
    # One event at wall time wall + 60 s, read on each process's own monotonic clock:
    event = [1_060 * 10**9, 1_060 * 10**9, 900_060 * 10**9 - 3]
    run = [c.run_ns(t) for c, t in zip(clock.clocks, event)]
    assert run[0] == run[1] == run[2]
    assert clock.origin_unix_ns == wall + 4  # the earliest first record: rank 2 at wall + 4
    assert clock.hosts == ("a", "b")
    assert any("clock skew" in n for n in clock.notes)


def test_one_host_shares_its_offset_and_a_disagreeing_host_does_not() -> None:
    # Processes of one host read their anchors with a few µs between the two clock reads:
    # they get the host's one offset, so their monotonic times compare exactly.
    same = align(
        [
            ClockInput(f"rank {i}", "a", 10**12 + i, 5 * 10**18 + i + jitter, 10**12)
            for i, jitter in enumerate((0, 3_000, -2_000))
        ]
    )
    assert len({c.offset_ns for c in same.clocks}) == 1 and not same.notes
    # Two machines under one host name: anchors 50 s apart cannot share a monotonic clock.
    split = align(
        [
            ClockInput("rank 0", "a", 10**12, 5 * 10**18, 10**12),
            ClockInput("rank 1", "a", 10**12, 5 * 10**18 + 50 * 10**9, 10**12),
        ]
    )
    assert [c.basis for c in split.clocks] == [BASIS_PROCESS] * 2
    assert "do not share one monotonic clock" in split.notes[0]


def test_process_without_anchor_is_kept_on_its_own_clock() -> None:
    clock = align(
        [
            ClockInput("rank 0", "a", 10**12, 5 * 10**18, 10**12 + 10),
            ClockInput("rank 1", "a", None, None, 777),
        ]
    )
    c = clock.clocks[1]
    assert c.basis == BASIS_NONE and not c.aligned and c.run_ns(777) == 0
    assert any("no clock anchor" in n and "rank 1" in n for n in clock.notes)
    assert anchor_of({"anchor": [1, 2]}) is None  # malformed: a list
    assert anchor_of({"anchor": {"monotonic_ns": True, "unix_ns": 3}}) is None
    assert anchor_of({"anchor": {"monotonic_ns": 1, "unix_ns": 3}}) == (1, 3)


def test_robust_z_and_its_mad_zero_fallback() -> None:
    z = robust_z([1.0, 1.1, 0.9, 1.0, 1.05, 3.0])
    assert z[-1] > OUTLIER_Z and max(abs(v) for v in z[:-1]) < OUTLIER_Z
    # More than half the values equal: MAD is 0, the mean absolute deviation stands in.
    z0 = robust_z([2.0, 2.0, 2.0, 2.0, 2.0, 9.0])
    assert z0[:5] == [0.0] * 5 and z0[-1] > OUTLIER_Z
    assert robust_z([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]


# --- whole runs written with TraceWriter -----------------------------------------------------


def test_written_anchors_align_steps_across_hosts(tmp_path: Path) -> None:
    run = BENCH.generate_run(str(tmp_path), **SMALL, outliers=(), skew_ms=0.0)
    traces = [read_trace(r.path) for r in run.ranks]
    # Raw monotonic step starts differ by the hosts' boot times (~900,000 s) ...
    first = [min(s.t_start_ns for s in t.spans if s.kind == "step") for t in traces]
    assert max(first) - min(first) > 10**14
    # ... the run clock puts a known instant (wall time of the first step) at one run time.
    clock = align(
        [
            ClockInput(t.label, t.meta["host"], *anchor_of(t.meta) or (None, None), f)
            for t, f in zip(traces, first)
        ]
    )
    wall = BENCH.RUN_UNIX_NS
    at = [c.run_ns(wall - r.mono_to_unix_ns) for c, r in zip(clock.clocks, run.ranks)]
    assert len(set(at)) == 1
    a = analyze_run(traces, str(tmp_path))
    assert [r.clock for r in a.ranks] == [BASIS_HOST] * 8
    # Every rank marks step k within 2 ms of the others (the generator's jitter).
    for k in (0, 10, 19):
        starts = [r.start_s[k] for r in a.ranks]
        assert max(starts) - min(starts) < 0.0025, starts
    assert all(r.sync_lag_s is not None and r.sync_lag_s < 0.5 for r in a.ranks)


def test_growing_rank_is_named_with_host_pid_and_numbers(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=(6,), growth_us=20.0)
    a = analyze_path(str(tmp_path))
    assert len(a.ranks) == 8
    found = _outliers(a)
    assert len(found) == 1, [f.title for f in found]
    f = found[0]
    ev = f.evidence.as_dict()
    assert (ev["rank"], ev["host"], ev["pid"]) == (6, "node-b", 40_006)
    assert f.where == "rank 6 (host node-b, pid 40006)" and f.title.startswith(f.where)
    assert "sync_growth" in ev["reasons"] and "own_growth" in ev["reasons"]
    # 100 calls per step, +20 µs per call per step: +2 ms per step, about 10 ms -> 48 ms.
    assert ev["slope_s_per_step"] == pytest.approx(0.002, rel=0.15)
    assert ev["first_weight_sync_s"] < 0.02 and ev["last_weight_sync_s"] > 0.04
    assert ev["others_flat"] == 7 and ev["ranks"] == 8
    assert f.severity == "critical"  # more than doubled
    assert "wsprof attach 40006" in f.next_step and "node-b" in f.next_step
    slow = next(r for r in a.ranks if r.rank == 6)
    assert slow.sync is not None and slow.sync.accumulating
    assert all(r.sync is not None and not r.sync.accumulating for r in a.ranks if r.rank != 6)


def test_constantly_slow_rank_is_found_by_robust_z(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=(), slow={3: 2.5})
    found = _outliers(analyze_path(str(tmp_path)))
    assert len(found) == 1
    ev = found[0].evidence.as_dict()
    assert ev["rank"] == 3 and ev["reasons"] == ["level"] and ev["robust_z"] > OUTLIER_Z
    assert ev["median_weight_sync_s"] > 2 * ev["others_median_weight_sync_s"]
    assert found[0].severity == "warning" and "robust z" in found[0].title


def test_no_finding_when_all_ranks_alike(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=())
    a = analyze_path(str(tmp_path))
    assert len(a.ranks) == 8 and not _outliers(a)


def test_no_finding_with_two_ranks(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **{**SMALL, "n_ranks": 2}, outliers=(1,), growth_us=20.0)
    a = analyze_path(str(tmp_path))
    assert len(a.ranks) == 2 and not _outliers(a)
    assert a.ranks[1].sync is not None and a.ranks[1].sync.accumulating


def test_traces_without_anchor_are_kept_with_a_note(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=(6,), growth_us=20.0, no_anchor=(2,))
    a = analyze_path(str(tmp_path))
    r2 = next(r for r in a.ranks if r.rank == 2)
    assert r2.clock == BASIS_NONE and r2.sync_lag_s is None
    assert r2.start_s[0] == pytest.approx(0.0, abs=0.01)  # its own clock, from its first record
    assert any("no clock anchor" in n and "rank 2" in n for n in a.notes)
    assert [f.evidence.as_dict()["rank"] for f in _outliers(a)] == [6]


def test_text_table_and_json_ranks(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=(6,), growth_us=20.0)
    a = analyze_path(str(tmp_path))
    text = render_text(a)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    table = text[text.index("\nranks: 8 on 2 hosts") :]
    rows = [
        line
        for line in table.splitlines()
        if line.split()[:2][-1:] != ["host"] and line.startswith("rank ")
    ]
    assert len(rows) == 8 and any(r.startswith("rank 6     node-b") for r in rows)
    row6 = next(line for line in table.splitlines() if line.startswith("rank 6 "))
    assert row6.endswith(" *") and " yes " in row6
    doc = json.loads(json.dumps(to_dict(a)))
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    r6 = doc["ranks"][6]
    assert r6["host"] == "node-b" and r6["sync"]["accumulating"] is True
    assert len(r6["weight_sync_s"]) == len(r6["steps"]) == len(r6["start_s"]) == 20


def test_many_ranks_text_shows_outliers_and_a_summary(tmp_path: Path) -> None:
    BENCH.generate_run(
        str(tmp_path),
        n_ranks=20,
        calls_per_rank=400,
        steps=8,
        hosts=2,
        outliers=(13,),
        growth_us=200.0,
    )
    a = analyze_path(str(tmp_path))
    text = render_text(a)
    table = text[text.index("\nranks: 20 on 2 hosts") :]
    rows = [line for line in table.splitlines() if line.startswith("rank ")]
    assert [r.split()[1] for r in rows] == ["host", "0", "13"]  # the primary, for reference, and 13
    assert "(+18 more ranks" in table


def test_streamed_path_equals_in_memory_run(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=(6,), growth_us=20.0)
    streamed = analyze_path(str(tmp_path))
    whole = analyze_run(read_run(str(tmp_path)), str(tmp_path))
    assert [f.title for f in streamed.findings] == [f.title for f in whole.findings]
    assert streamed.ranks == whole.ranks
    assert streamed.processes == whole.processes
