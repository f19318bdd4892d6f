"""Counters in real training processes (2 gloo ranks): process and gc counters at step
boundaries, the growing type named by memory_growth, NVML faults that never reach training."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from helpers import REPO, TARGETS, run_ranks

from wsprof.analysis.run import analyze_path
from wsprof.trace.reader import read_run

STEPS, LEAK = 10, 2000
#: A generous probe budget (the object count's share of it is a fifth) and steps of 0.6 s, so
#: that the object count (about 35 ms in a process that imported torch) runs at every step of
#: a short test run; the default budget is checked by tests/unit/test_counters.py.
BUDGET = {"WSPROF_PROBE_BUDGET_PCT": "100"}
STEP_SLEEP_S = "0.6"
LEAKY = "gc.type.__main__.Leaky"


def _with_standin(name: str) -> dict[str, str]:
    path = os.pathsep.join(
        [str(REPO / "tests" / "standins" / name), os.environ.get("PYTHONPATH", "")]
    )
    return {**BUDGET, "PYTHONPATH": path}


def test_counters_follow_steps_and_name_what_grows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_ranks(
        TARGETS / "counters_target.py", 2, str(out), str(STEPS), str(LEAK), STEP_SLEEP_S, env=BUDGET
    )
    traces = read_run(str(out))
    assert len(traces) == 2
    for t in traces:
        for name in (
            "proc.rss_bytes",
            "proc.threads",
            "gc.gen0.count",
            "wsprof.probe_us.process",
            LEAKY,
        ):
            assert name in t.counters, sorted(t.counters)
        _, kept = t.counters[LEAKY]
        # LEAK more each step: the count rises by LEAK between consecutive samples at boundaries
        steps_seen = np.unique(kept)
        # the first count is the baseline; on a loaded machine the budget skips steps (a CI
        # run on a slow 2-core VM saw 5 of the 10)
        assert len(steps_seen) >= STEPS // 2, kept
        assert set(np.diff(steps_seen).tolist()) <= {float(LEAK * k) for k in range(1, 5)}
        probes = t.meta["self"]["probes"]
        assert probes["by_probe"]["gc_types"]["runs"] >= STEPS // 2
    a = analyze_path(str(out))
    growth = [f for f in a.findings if f.kind == "memory_growth"]
    assert any(f.where == LEAKY for f in growth), [f.title for f in a.findings]
    # Counters that are not gauges never make a finding (wsprof's own, cumulative, gc churn)
    assert not any((f.where or "").startswith(("wsprof.", "gc.gen")) for f in a.findings)
    assert any("no CUDA allocator or NVML counters" in n for n in a.notes), a.notes
    overhead = next(f for f in a.findings if f.kind == "self_overhead")
    assert "counter probes" in overhead.title and overhead.evidence.as_dict()["probe_share"] > 0


def test_nvml_lost_mid_run_never_reaches_training(tmp_path: Path) -> None:
    """NVML initialises, then every query fails: the probe is switched off after 3 errors, the
    broadcasts stay right (the target checks every result), the analysis says what happened."""
    out = tmp_path / "run"
    run_ranks(
        TARGETS / "counters_target.py", 2, str(out), "4", "10", env=_with_standin("flaky_nvml")
    )
    for t in read_run(str(out)):
        kinds = {(e.kind, e.detail.split(":")[0]) for e in t.events}
        assert ("probe_error", "nvml") in kinds and ("probe_off", "nvml") in kinds, kinds
        assert t.meta["self"]["probes"]["by_probe"]["nvml"]["off"] is True
        assert t.meta["self"]["internal_errors"] == 0
        assert len(t.calls) >= 4 * 20
    notes = analyze_path(str(out)).notes
    assert any(n.startswith("counter probe: nvml: NVMLError: GPU is lost") for n in notes), notes


def test_nvml_without_a_driver_is_an_event_not_an_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_ranks(
        TARGETS / "counters_target.py", 2, str(out), "3", "10", env=_with_standin("broken_nvml")
    )
    for t in read_run(str(out)):
        assert any(e.kind == "counters" and "Driver Not Loaded" in e.detail for e in t.events)
        assert "nvml" not in t.meta["self"]["probes"]["by_probe"]
