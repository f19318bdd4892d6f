"""Retention: exact per-step totals for every call, full detail for the first and last steps,
an evenly spaced sample for the steps between; on real SQLite files and a real gloo job."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from helpers import TARGETS, run_ranks

from wsprof.analysis.process import analyze_process
from wsprof.analysis.run import analyze_path
from wsprof.trace.reader import read_run, read_trace
from wsprof.trace.retention import Retention
from wsprof.trace.writer import TraceWriter

STEPS, CALLS, KEEP, THIN = 8, 100, 2, 5


def _calls(step: int, first: int, n: int) -> list[tuple[object, ...]]:
    """``n`` calls of ``step``; call i of the step lasts (1000 + i) ns and starts at a unique
    time."""
    out = []
    for i in range(first, first + n):
        t0 = (step * 10_000 + i) * 100_000
        out.append(
            (
                t0,
                t0 + 1000 + i,
                400,
                1,
                7,
                "broadcast",
                "dist.broadcast",
                "api",
                64,
                "float32",
                "0",
                0,
                0,
                step,
                "weight_sync",
                None,
            )
        )
    return out


def _write(path: Path, retention: Retention | None) -> None:
    w = TraceWriter(str(path), retention=retention)
    w.set_meta({"pid": 1, "rank": 0})
    for step in range(STEPS):
        t0 = step * 10_000 * 100_000
        # each step in two writes, so that a step's calls span chunks
        w.write(
            {
                "calls": _calls(step, 0, CALLS // 2),
                "spans": [("step", str(step), t0, t0 + 10_000 * 100_000, step, 7)],
            }
        )
        w.write({"calls": _calls(step, CALLS // 2, CALLS // 2)})
    w.close()


def test_first_and_last_steps_full_middle_thinned_totals_exact(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    _write(p, Retention(keep_steps=KEEP, calls_per_thinned_step=THIN))
    t = read_trace(str(p))
    per_step = {s: int((t.calls.step == s).sum()) for s in range(STEPS)}
    assert per_step == {0: CALLS, 1: CALLS, 2: THIN, 3: THIN, 4: THIN, 5: THIN, 6: CALLS, 7: CALLS}
    # evenly spaced: every (CALLS / THIN)-th call of the step, across its two chunks
    kept_i = (t.calls.t_start_ns[t.calls.step == 3] // 100_000) - 3 * 10_000
    assert kept_i.tolist() == list(range(0, CALLS, CALLS // THIN))
    r = t.meta["retention"]
    assert r["thinned_steps"] == 4 and r["calls_removed"] == 4 * (CALLS - THIN)
    assert (r["first_thinned_step"], r["last_thinned_step"]) == (2, 5)
    assert t.thinned and t.totals is not None
    # totals: every call counted, durations summed exactly (sum of 1000 + i over the step)
    for s in range(STEPS):
        m = t.totals.step == s
        assert int(t.totals.n[m].sum()) == CALLS
        assert int(t.totals.duration_ns[m].sum()) == sum(1000 + i for i in range(CALLS))
        assert int(t.totals.between_layers_ns[m].sum()) == sum(600 + i for i in range(CALLS))
        assert int(t.totals.max_duration_ns[m].max()) == 1000 + CALLS - 1
    # analysis takes per-step numbers from the totals: thinning changes none of them
    pa = analyze_process(t)
    assert [r.n_calls for r in pa.steps] == [CALLS] * STEPS
    expect_s = sum(1000 + i for i in range(CALLS)) / 1e9
    assert all(r.collective_s == pytest.approx(expect_s) for r in pa.steps)
    assert pa.ops[0].n_calls == STEPS * CALLS


def test_same_numbers_with_and_without_retention(tmp_path: Path) -> None:
    full, thin = tmp_path / "full" / "h-1.wsprof", tmp_path / "thin" / "h-1.wsprof"
    _write(full, None)
    _write(thin, Retention(keep_steps=KEEP, calls_per_thinned_step=THIN))
    a, b = analyze_process(read_trace(str(full))), analyze_process(read_trace(str(thin)))
    assert not read_trace(str(full)).thinned
    assert [(r.n_calls, r.collective_s, r.between_layers_s) for r in a.steps] == [
        (r.n_calls, r.collective_s, r.between_layers_s) for r in b.steps
    ]
    assert (a.ops[0].n_calls, a.ops[0].total_s) == (b.ops[0].n_calls, b.ops[0].total_s)
    assert thin.stat().st_size < full.stat().st_size


def test_keep_steps_zero_keeps_everything(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    _write(p, Retention(keep_steps=0, calls_per_thinned_step=THIN))
    t = read_trace(str(p))
    assert len(t.calls) == STEPS * CALLS and not t.thinned and "retention" not in t.meta


def test_a_version_2_trace_is_still_read(tmp_path: Path) -> None:
    """Written before ``call_totals`` existed: read, with no totals; numbers from the calls."""
    p = tmp_path / "h-1.wsprof"
    _write(p, None)
    db = sqlite3.connect(p)
    db.execute("DROP TABLE call_totals")
    db.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    db.commit()
    db.close()
    t = read_trace(str(p))
    assert t.totals is None and len(t.calls) == STEPS * CALLS
    assert [r.n_calls for r in analyze_process(t).steps] == [CALLS] * STEPS


def test_real_gloo_run_is_thinned_while_it_runs(tmp_path: Path) -> None:
    """Two real ranks, 8 marked steps of 60 broadcasts, keep_steps=2, 10 calls per thinned step:
    the analysed per-step call counts are exact, the detail is thinned, the note says so."""
    out = tmp_path / "run"
    run_ranks(TARGETS / "long_run.py", 2, str(out), "8", "60", "2", "10")
    traces = read_run(str(out))
    assert len(traces) == 2
    for t in traces:
        assert t.thinned
        kept = np.bincount(t.calls.step[t.calls.step >= 0], minlength=8)
        assert kept.tolist() == [60, 60, 10, 10, 10, 10, 60, 60]
    a = analyze_path(str(out))
    for pa in a.processes:
        assert [r.n_calls for r in pa.steps] == [60] * 8
    assert any(n.startswith("retention:") and "steps 2-5" in n for n in a.notes), a.notes
