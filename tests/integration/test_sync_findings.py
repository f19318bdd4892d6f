"""Findings about the weight sync from real and written traces: time outside any collective
(gaps), idle GPUs during sync, what bucketing would save, and the step at which a per-step
time reaches its budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import TARGETS, run_ranks

from wsprof.analysis.bucketing import BUCKET_BYTES, bucketing_estimate
from wsprof.analysis.process import analyze_process, call_cost_model
from wsprof.analysis.run import analyze_path
from wsprof.trace.model import CallTable
from wsprof.trace.reader import read_trace
from wsprof.trace.writer import TraceWriter


def test_growing_gap_inside_the_sync_is_found_in_a_real_run(tmp_path: Path) -> None:
    """Two gloo ranks; each weight sync sleeps 0.04 s x step between its broadcasts and its end."""
    out = tmp_path / "run"
    run_ranks(
        TARGETS / "counters_target.py",
        2,
        str(out),
        "7",
        "0",
        "0.02",
        "0.04",
        env={"WSPROF_COUNTERS": "0"},
    )
    a = analyze_path(str(out))
    gaps = [s for s in a.primary.steps]  # type: ignore[union-attr]
    values = [s.sync_gap_s for s in gaps]
    assert all(v is not None for v in values)
    # the sleep is the gap: 0.04 s more each step (scheduling noise aside)
    assert values[-1] - values[0] == pytest.approx(0.04 * 6, abs=0.05), values
    found = [f for f in a.findings if f.kind == "gaps"]
    assert found and found[0].severity == "warning", [f.title for f in a.findings]
    assert "in no collective" in found[0].title and "grows" in found[0].title


def _trace(
    path: Path,
    util_in_sync: float,
    steps: int = 6,
    calls_per_step: int = 50,
    growing_calls: bool = False,
) -> Path:
    """A written trace: steps of 1 s with a 0.5 s weight-sync phase full of 1 MiB broadcasts, and
    NVML utilization samples every 50 ms (``util_in_sync`` inside the sync, 90 outside)."""
    w = TraceWriter(str(path))
    w.set_meta({"pid": 1, "rank": 0})
    calls, spans, counters = [], [], []
    for step in range(steps):
        t0 = step * 10**9
        spans.append(("step", str(step), t0, t0 + 10**9, step, 7))
        spans.append(("phase", "weight_sync", t0 + 5 * 10**8, t0 + 10**9, step, 7))
        n = calls_per_step * (step + 1) if growing_calls else calls_per_step
        for i in range(n):
            c0 = t0 + 5 * 10**8 + i * (5 * 10**8 // n)
            calls.append(
                (
                    c0,
                    c0 + 200_000 + (i % 3) * 1000,
                    150_000,
                    1,
                    7,
                    "broadcast",
                    "dist.broadcast",
                    "api",
                    2**20 * (1 + i % 4),
                    "bfloat16",
                    "0",
                    0,
                    0,
                    step,
                    "weight_sync",
                    None,
                )
            )
        for k in range(20):
            t = t0 + k * 50_000_000
            counters.append((t, "nvml.gpu0.util_pct", util_in_sync if k >= 10 else 90.0))
    w.write({"calls": calls, "spans": spans, "counters": counters})
    w.close()
    return path


def test_idle_gpus_during_sync_are_named(tmp_path: Path) -> None:
    a = analyze_path(str(_trace(tmp_path / "h-1.wsprof", util_in_sync=2.0)))
    idle = [f for f in a.findings if f.kind == "gpu_idle_during_sync"]
    assert idle, [f.title for f in a.findings]
    assert idle[0].evidence.as_dict()["sync_util_pct"] == pytest.approx(2.0)
    assert idle[0].evidence.as_dict()["other_util_pct"] == pytest.approx(90.0)
    busy = analyze_path(str(_trace(tmp_path / "busy" / "h-1.wsprof", util_in_sync=85.0)))
    assert not [f for f in busy.findings if f.kind == "gpu_idle_during_sync"]


def test_cost_model_recovers_the_fixed_per_call_cost() -> None:
    """latency = 50 µs + 10 µs per MiB, sizes from 4 KiB to 64 MiB, 1 % noise."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(3000):
        nbytes = int(2 ** rng.integers(12, 27))
        dur = (50.0 + 10.0 * nbytes / 2**20) * (1 + 0.01 * rng.standard_normal()) * 1e3
        rows.append(
            (
                i * 10**6,
                i * 10**6 + int(dur),
                0,
                1,
                7,
                "broadcast",
                "dist.broadcast",
                "api",
                nbytes,
                "float32",
                "0",
                0,
                0,
                0,
                None,
                None,
            )
        )
    model = call_cost_model(CallTable.from_rows(rows))
    assert model is not None and model.n_sizes == 15
    assert model.fixed_us == pytest.approx(50.0, rel=0.1)
    assert model.us_per_mib == pytest.approx(10.0, rel=0.05)


def test_more_calls_each_step_come_with_a_bucketing_estimate(tmp_path: Path) -> None:
    path = _trace(tmp_path / "h-1.wsprof", util_in_sync=50.0, growing_calls=True)
    a = analyze_path(str(path))
    grow = [f for f in a.findings if f.kind == "call_count_growth"]
    assert grow, [f.title for f in a.findings]
    est = grow[0].evidence.as_dict()["bucketing"]
    pa = analyze_process(read_trace(str(path)))
    assert est == bucketing_estimate(pa, 300.0, pa.cost_model.fixed_us)  # type: ignore[union-attr]
    # 6 steps of 50..300 calls averaging 2.5 MiB: about 27 MiB per step on average -> 2 buckets
    assert est["buckets"] == np.ceil(sum(o.bytes_total for o in pa.ops) / 6 / BUCKET_BYTES)
    assert f"would be {est['buckets']:.0f}" in grow[0].title


def test_a_growing_sync_names_the_step_it_reaches_an_hour(tmp_path: Path) -> None:
    """The motivating series (143, 363, 966, 1596 s): the projection crosses 1 h per sync."""
    csv = tmp_path / "sync.csv"
    csv.write_text("step,weight_sync_s\n0,143\n1,363\n2,966\n3,1596\n")
    a = analyze_path(str(csv))
    slow = [f for f in a.findings if f.kind == "accumulating_slowdown"]
    assert slow and "reaches 60 min at step" in slow[0].title, [f.title for f in a.findings]
    assert slow[0].evidence.as_dict()["budget_step"] > 3
