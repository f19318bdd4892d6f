"""Counters on a budget: the token bucket, the sampler thread with probes whose cost the test
controls, failing probes, and the snapshot summary."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import pytest

from wsprof.capture.allocator import allocator_reading, summarize_snapshot
from wsprof.capture.counters import MAX_CONSECUTIVE_ERRORS, Budget, CounterSampler, Probe
from wsprof.capture.process_stats import GrowingTypes


class _Recorder:
    """What the sampler writes to: the recorder's queues (a real Recorder would also start a
    writer thread and a trace file, which these tests do not look at)."""

    def __init__(self) -> None:
        self.calls: deque[bytes] = deque()
        self.counters: deque[tuple[Any, ...]] = deque()
        self.events: list[tuple[str, str]] = []
        self.errors: list[str] = []

    def event(self, kind: str, detail: str) -> None:
        self.events.append((kind, detail))

    def written(self) -> int:
        return len(self.calls)

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.errors.append(f"{where}: {exc}")


def _burn_cpu(ns: int) -> None:
    """Spend ``ns`` of this thread's CPU time (the cost a probe is charged)."""
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def test_budget_bounds_spending_over_any_interval() -> None:
    """Probes of 0.5 ms tried every fake ms for 10 fake s at 1 %: spent <= cap + 1 % x 10 s +
    one probe."""
    now = [0]
    b = Budget(0.01, cap_ns=1_000_000, clock=lambda: now[0])
    ran = 0
    for _ in range(10_000):
        now[0] += 1_000_000
        if b.allows(500_000):
            b.spend(500_000)
            ran += 1
    assert b.spent_ns <= 1_000_000 + 0.01 * 10e9 + 500_000
    assert b.spent_ns >= 0.01 * 10e9 - 500_000  # and it does spend what it may
    assert ran == b.spent_ns // 500_000


def test_budget_refuses_while_in_debt_and_rejects_bad_fractions() -> None:
    now = [0]
    b = Budget(0.5, cap_ns=100, clock=lambda: now[0])
    assert b.allows(5) and b.allows(100)  # starts full
    b.spend(60)
    assert not b.allows(50)  # 40 left
    b.spend(240)  # a probe that cost more than expected: in debt (-200)
    now[0] = 100
    assert not b.allows(0)  # 50 earned, still -150
    now[0] = 460  # 180 more: +30
    assert b.allows(30) and not b.allows(40)
    assert not b.allows(10**9)
    now[0] = 500  # +50: half the cap
    assert b.allows(10**9)  # dearer than half the cap: runs when the bucket is half full
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            Budget(bad)


def _run_sampler(
    probes: list[Probe], fraction: float, seconds: float, rec: _Recorder | None = None
) -> tuple[CounterSampler, float]:
    rec = rec or _Recorder()
    sampler = CounterSampler(rec, probes, Budget(fraction, cap_ns=2_000_000), tick_s=0.005)  # type: ignore[arg-type]
    t0 = time.monotonic()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sampler, time.monotonic() - t0


def test_an_expensive_probe_is_held_to_the_budget() -> None:
    """A probe costing 5 ms of CPU, due every tick: at a 2 % budget it runs about 2 % / 5 ms per
    second, not 200 times; the share stays within budget plus the cap and one probe."""
    probe = Probe(
        "costly",
        lambda: (_burn_cpu(5_000_000), [("x", 1.0)])[1],
        frozenset({"periodic"}),
        interval_s=0.0,
    )
    sampler, wall = _run_sampler([probe], 0.02, 1.5)
    spent = sampler.budget.spent_ns / 1e9
    assert spent <= 0.02 * wall + 0.002 + 0.006, (spent, wall)
    assert probe.skipped > 10 * probe.runs, probe.stats()
    assert 2 <= probe.runs <= 12, probe.stats()
    assert probe.stats()["mean_ns"] >= 5_000_000


def test_a_cheap_probe_keeps_its_cadence_and_records_its_cost() -> None:
    rec = _Recorder()
    probe = Probe("cheap", lambda: [("x", 1.0)], frozenset({"periodic"}), interval_s=0.05)
    sampler, wall = _run_sampler([probe], 0.005, 1.0, rec)
    assert probe.skipped == 0
    assert wall / 0.05 * 0.6 <= probe.runs <= wall / 0.05 + 2, probe.stats()
    names = {r[1] for r in rec.counters}
    assert names == {"x", "wsprof.probe_us.cheap"}


def test_a_probe_whose_cost_grows_runs_less_often() -> None:
    """The probe of the motivating case: each run costs 1 ms more than the last. The budget
    spaces the runs out as the cost grows, and the share stays bounded."""
    stamps: list[float] = []

    def growing() -> list[tuple[str, float]]:
        stamps.append(time.monotonic())
        _burn_cpu(1_000_000 * len(stamps))
        return [("y", float(len(stamps)))]

    probe = Probe("growing", growing, frozenset({"periodic"}), interval_s=0.0)
    sampler, wall = _run_sampler([probe], 0.05, 2.5)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(gaps) >= 4, stamps
    assert gaps[-1] > 2 * gaps[0], gaps
    assert sampler.budget.spent_ns / 1e9 <= 0.05 * wall + 0.002 + 0.001 * (len(stamps) + 1)


def test_boundary_probes_run_at_step_boundaries_only() -> None:
    rec = _Recorder()
    boundary = [0]
    probe = Probe("steps", lambda: [("z", float(boundary[0]))], frozenset({"boundary"}))
    sampler = CounterSampler(
        rec,
        [probe],
        Budget(0.5),
        boundaries=lambda: boundary[0],  # type: ignore[arg-type]
        tick_s=0.01,
    )
    sampler.start()
    time.sleep(0.1)
    runs_idle = probe.runs
    for _ in range(3):
        boundary[0] += 1
        time.sleep(0.05)
    sampler.stop()
    assert runs_idle == 1  # the baseline at start only
    assert probe.runs == 1 + 3 + 1  # one per boundary, and the last round at stop
    assert [r[2] for r in rec.counters if r[1] == "z"] == [0.0, 1.0, 2.0, 3.0, 3.0]


def test_a_failing_probe_is_counted_switched_off_and_never_raises() -> None:
    rec = _Recorder()
    calls = [0]

    def broken() -> list[tuple[str, float]]:
        calls[0] += 1
        raise OSError("no such device")

    bad = Probe("bad", broken, frozenset({"periodic"}), interval_s=0.0)
    good = Probe("good", lambda: [("ok", 1.0)], frozenset({"periodic"}), interval_s=0.0)
    sampler, _ = _run_sampler([bad, good], 0.5, 0.3, rec)
    assert bad.off and bad.errors == MAX_CONSECUTIVE_ERRORS == calls[0]
    assert ("probe_error", "bad: OSError: no such device") in rec.events
    assert any(k == "probe_off" and d.startswith("bad: off after 3 errors") for k, d in rec.events)
    assert good.runs > 10 and not rec.errors
    assert sampler.stats()["by_probe"]["bad"]["off"] is True


def test_burst_probes_follow_recorded_calls() -> None:
    """A ``burst`` probe runs while calls arrive in the recorder's queue, not while it is idle."""
    rec = _Recorder()
    probe = Probe("alloc", lambda: [("a", 1.0)], frozenset({"burst"}), interval_s=0.02)
    sampler = CounterSampler(rec, [probe], Budget(0.5), tick_s=0.01)  # type: ignore[arg-type]
    sampler.start()
    time.sleep(0.2)
    idle = probe.runs
    stop = threading.Event()

    def calls() -> None:
        while not stop.is_set():
            rec.calls.append(bytes(8))
            time.sleep(0.002)

    th = threading.Thread(target=calls)
    th.start()
    time.sleep(0.4)
    stop.set()
    th.join()
    busy = probe.runs - idle
    sampler.stop()
    assert idle == 1  # the baseline only
    assert 8 <= busy <= 0.4 / 0.02 + 2, busy


def test_growing_types_names_what_the_process_keeps() -> None:
    class Kept:
        pass

    keep: list[Kept] = []
    types = GrowingTypes(top=5)
    assert types() == []  # the baseline
    keep += [Kept() for _ in range(5000)]
    reading = dict(types())
    name = f"gc.type.{Kept.__module__}.{Kept.__qualname__}"
    assert reading.get(name) == 5000, sorted(reading)
    keep += [Kept() for _ in range(1000)]
    assert dict(types())[name] == 6000


def test_allocator_reading_derives_mappings() -> None:
    """From a ``torch.cuda.memory_stats()`` dict with expandable segments: one segment, many
    mappings."""
    stats = {
        "segment.all.current": 1,
        "reserved_bytes.all.current": 8 << 30,
        "num_device_alloc": 260,
        "num_device_free": 4,
        "num_alloc_retries": 0,
        "unrelated.key": 7,
    }
    reading = dict(allocator_reading(stats, 3))
    assert reading["cuda3.mappings"] == 256
    assert reading["cuda3.segment.all.current"] == 1
    assert "cuda3.unrelated.key" not in reading


def test_snapshot_summary_keeps_no_raw_snapshot() -> None:
    """A snapshot in the shape ``torch.cuda.memory_snapshot()`` returns (segments with blocks)."""
    snap = [
        {
            "device": 0,
            "address": 1,
            "total_size": 2 << 20,
            "allocated_size": 1 << 20,
            "is_expandable": False,
            "frames": [{"filename": "secret.py"}],
            "blocks": [
                {"size": 1 << 20, "state": "active_allocated"},
                {"size": 1 << 20, "state": "inactive"},
            ],
        },
        {
            "device": 0,
            "address": 2,
            "total_size": 1 << 30,
            "allocated_size": 0,
            "is_expandable": True,
            "blocks": [{"size": 1 << 30, "state": "inactive"}],
        },
    ]
    s = summarize_snapshot(snap)
    assert s["segments"] == 2 and s["expandable_segments"] == 1
    assert s["reserved_bytes"] == (2 << 20) + (1 << 30) and s["allocated_bytes"] == 1 << 20
    assert s["largest_blocks"][0] == [1 << 30, "inactive"]
    assert s["segment_size_histogram"] == {"<=2^21": 1, "<=2^30": 1}
    assert "secret.py" not in repr(s)
    assert summarize_snapshot({"segments": snap})["segments"] == 2


def test_step_probes_wait_for_the_sync_burst_to_end() -> None:
    """A costly once-per-step probe never starts while collective calls are arriving: a stall
    there would be counted as weight-sync time."""
    rec = _Recorder()
    steps = [0]
    ran_at: list[int] = []
    burst = threading.Event()
    probe = Probe(
        "per_step", lambda: (ran_at.append(len(rec.calls)), [("s", 1.0)])[1], frozenset({"step"})
    )
    sampler = CounterSampler(
        rec,
        [probe],
        Budget(0.5),
        steps=lambda: steps[0],  # type: ignore[arg-type]
        tick_s=0.01,
    )
    sampler.start()
    stop = threading.Event()

    def calls() -> None:
        while not stop.is_set():
            if burst.is_set():
                rec.calls.append(bytes(8))
            time.sleep(0.002)

    th = threading.Thread(target=calls)
    th.start()
    burst.set()
    time.sleep(0.05)
    steps[0] += 1  # a step starts while the burst goes on
    time.sleep(0.2)
    during = probe.runs
    n_at_end = len(rec.calls)
    burst.clear()
    time.sleep(0.1)
    stop.set()
    th.join()
    sampler.stop()
    assert during == 0  # a once-per-step probe has no baseline at start
    assert probe.runs == 2  # once for the step, after the burst; the last round at stop
    assert ran_at[0] >= n_at_end  # it ran after the last call of the burst


def test_probe_registry_shares_sum_to_the_whole_budget_exactly() -> None:
    from wsprof.capture.counters import PROBES, check_shares

    check_shares(PROBES)
    assert sum(p.share_pct for p in PROBES) == 100
    assert [p.name for p in PROBES] == [
        "allocator",
        "process",
        "gc_types",
        "sharing",
        "shm_files",
        "share_holders",
        "snapshot",
        "flight",
        "nvml",
    ]


def test_a_new_probe_needs_an_explicit_share_taken_from_the_others() -> None:
    from wsprof.capture.counters import PROBES, ProbeSpec, check_shares

    with pytest.raises(TypeError):
        ProbeSpec(
            "new",
            when=frozenset({"step"}),
            interval_s=1.0,  # type: ignore[call-arg]
            make=lambda ctx: list,
        )
    extra = ProbeSpec("new", 10, frozenset({"step"}), 1.0, lambda ctx: list)
    with pytest.raises(ValueError, match=r"sum to 110 %, not 100 %"):
        check_shares((*PROBES, extra))
    with pytest.raises(ValueError, match=r"share_pct must be an integer percent > 0"):
        check_shares((*PROBES, ProbeSpec("free", 0, frozenset({"step"}), 1.0, lambda ctx: list)))
    with pytest.raises(ValueError, match=r"named twice"):
        check_shares((*PROBES, PROBES[0]))


def test_install_builds_each_probe_with_its_share_and_skips_unavailable_ones() -> None:
    from wsprof.capture import counters

    rec = _Recorder()
    specs = (
        counters.ProbeSpec("a", 60, frozenset({"periodic"}), None, lambda ctx: lambda: []),
        counters.ProbeSpec("b", 30, frozenset({"periodic"}), 2.0, lambda ctx: lambda: []),
        counters.ProbeSpec("gone", 10, frozenset({"periodic"}), 1.0, lambda ctx: "no source"),
    )
    sampler = counters.install(
        rec,
        lambda: 0,
        lambda: 0,  # type: ignore[arg-type]
        fraction=0.01,
        interval_s=0.25,
        probes=specs,
    )
    try:
        by_name = {p.name: p for p in sampler.probes}
        assert sorted(by_name) == ["a", "b"]
        assert by_name["a"].interval_s == 0.25 and by_name["b"].interval_s == 2.0
        assert by_name["a"].budget is not None and by_name["b"].budget is not None
        assert by_name["a"].budget.fraction == pytest.approx(0.006)
        assert by_name["b"].budget.fraction == pytest.approx(0.003)
        assert ("counters", "no source") in rec.events
    finally:
        sampler.stop()
