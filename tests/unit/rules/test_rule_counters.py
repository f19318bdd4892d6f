"""The counter rules on hand-built facts: a growing counter that tracks a growing time
(counter_correlation), and held memory or resources that grow (memory_growth)."""

from __future__ import annotations

import numpy as np
import pytest
import rule_kit
from scipy import stats

from wsprof.analysis.model import Finding, SeriesResult
from wsprof.analysis.process import counter_per_step
from wsprof.analysis.rules import counters
from wsprof.analysis.rules.counters import (
    CORRELATION_MAX_FINDINGS,
    CORRELATION_MIN_STEPS,
    MEMORY_HORIZON,
    MEMORY_MATERIAL_SHARE,
    CounterCorrelation,
    CounterCorrelationEvidence,
    CounterGrowth,
    CounterGrowthEvidence,
)
from wsprof.contracts.counters import (
    NVML_PROCESS_GPU_BYTES,
    cuda_counter,
    gc_type_counter,
    proc_counter,
    share_counter,
)
from wsprof.contracts.series import BETWEEN_LAYERS_S, WEIGHT_SYNC_S, counter_key, op_median_key
from wsprof.contracts.units import Unit
from wsprof.trace.model import CallTable, ProcessTrace, Span

pytestmark = pytest.mark.pure

N = 10  # steps of every series unless a test says otherwise
GIB = 2**30
MAPPINGS = cuda_counter(0, "mappings")
ALLOCATED = cuda_counter(0, "allocated_bytes.all.current")
RSS = proc_counter("rss_bytes")


def _sync(n: int = N) -> SeriesResult:
    """Weight-sync time growing 0.1 s a step from 1 s."""
    res: SeriesResult = rule_kit.judged(WEIGHT_SYNC_S, [1.0 + 0.1 * i for i in range(n)])
    return res


def _counter(
    name: str, values: list[float], unit: Unit = Unit.COUNT, steps: list[int] | None = None
) -> SeriesResult:
    res: SeriesResult = rule_kit.judged(counter_key(name), values, unit=unit, steps=steps)
    return res


def _linear(first: float, slope: float, n: int = N) -> list[float]:
    return [first + slope * i for i in range(n)]


def _corr(f: Finding) -> CounterCorrelationEvidence:
    """A counter_correlation finding's evidence, typed."""
    assert isinstance(f.evidence, CounterCorrelationEvidence)
    return f.evidence


def _growth(f: Finding) -> CounterGrowthEvidence:
    """A memory_growth finding's evidence, typed."""
    assert isinstance(f.evidence, CounterGrowthEvidence)
    return f.evidence


# ----------------------------------------------------------------------------- correlation


def test_a_counter_that_grows_with_the_weight_sync_is_named_with_its_cost_per_unit() -> None:
    sync = _sync()
    mappings = _counter(MAPPINGS, _linear(100.0, 10.0))
    assert sync.verdict.accumulating and mappings.verdict.accumulating
    found = rule_kit.match(CounterCorrelation(), rule_kit.facts([sync, mappings]))
    assert len(found) == 1
    f = found[0]
    assert (f.kind, f.severity, f.where) == ("counter_correlation", "warning", MAPPINGS)
    ev = _corr(f)
    assert ev.counter == MAPPINGS
    assert ev.series == WEIGHT_SYNC_S
    assert ev.spearman_rho == pytest.approx(1.0)
    assert ev.slope_per_unit == pytest.approx(0.01)  # 0.1 s per 10 mappings
    assert ev.unit == "1,000"  # a count is reported per 1,000
    assert ev.r_squared == pytest.approx(1.0)
    assert (ev.series_named(), ev.counter_named()) == (WEIGHT_SYNC_S, MAPPINGS)
    assert list(ev.as_dict()) == [
        "counter",
        "series",
        "spearman_rho",
        "slope_per_unit",
        "unit",
        "r_squared",
    ]


def test_a_bytes_counter_is_reported_per_gib_and_an_op_latency_is_a_target() -> None:
    latency = rule_kit.judged(
        op_median_key("broadcast"), _linear(50.0, 5.0), unit=Unit.MICROSECONDS
    )
    allocated = _counter(ALLOCATED, _linear(GIB, 0.25 * GIB), unit=Unit.BYTES)
    found = rule_kit.match(CounterCorrelation(), rule_kit.facts([latency, allocated]))
    assert [_corr(f).series for f in found] == [op_median_key("broadcast")]
    assert _corr(found[0]).unit == "GiB"
    assert "broadcast per-call latency" in found[0].title


def test_a_noisy_counter_below_the_rho_threshold_is_not_a_correlation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zigzag = [100.0, 140, 120, 160, 110, 180, 150, 170, 140, 200, 190, 210]
    sync = _sync(len(zigzag))
    counter = _counter(MAPPINGS, zigzag)
    assert counter.verdict.accumulating  # it grows, but out of step with the sync
    rho = float(stats.spearmanr(zigzag, sync.series.values).statistic)
    assert rho < counters.CORRELATION_RHO
    f = rule_kit.facts([sync, counter])
    assert rule_kit.match(CounterCorrelation(), f) == []
    # At the threshold (rho >= CORRELATION_RHO) it is reported; just above it, not.
    monkeypatch.setattr(counters, "CORRELATION_RHO", rho)
    assert [_corr(x).spearman_rho for x in rule_kit.match(CounterCorrelation(), f)] == [
        pytest.approx(rho)
    ]
    monkeypatch.setattr(counters, "CORRELATION_RHO", rho + 1e-9)
    assert rule_kit.match(CounterCorrelation(), f) == []


def test_fewer_shared_steps_than_the_minimum_give_no_correlation() -> None:
    sync = _sync()
    # The counter's steps overlap the sync's in only CORRELATION_MIN_STEPS - 1 (or exactly
    # CORRELATION_MIN_STEPS) steps: too few pairs, then just enough.
    for shared, expected in ((CORRELATION_MIN_STEPS - 1, 0), (CORRELATION_MIN_STEPS, 1)):
        start = N - shared
        counter = _counter(MAPPINGS, _linear(100.0, 10.0), steps=list(range(start, start + N)))
        found = rule_kit.match(CounterCorrelation(), rule_kit.facts([sync, counter]))
        assert len(found) == expected, shared


def test_no_correlation_without_growth_on_both_sides_or_for_a_non_gauge() -> None:
    growing = _linear(100.0, 10.0)
    flat_sync = rule_kit.judged(WEIGHT_SYNC_S, [1.0] * N)
    flat_counter = _counter(MAPPINGS, [100.0] * N)
    probe_cost = _counter("wsprof.probe_us.memory", growing)  # wsprof's own cost: no gauge
    between = rule_kit.judged(BETWEEN_LAYERS_S, _linear(0.01, 0.01))
    rule = CounterCorrelation()
    assert rule.match(rule_kit.facts([flat_sync, _counter(MAPPINGS, growing)])) == []
    assert rule.match(rule_kit.facts([_sync(), flat_counter])) == []
    assert rule.match(rule_kit.facts([_sync(), probe_cost])) == []
    # The time between layers is a target of its own.
    found = rule.match(rule_kit.facts([between, _counter(MAPPINGS, growing)]))
    assert [_corr(f).series for f in found] == [BETWEEN_LAYERS_S]


def test_at_most_the_strongest_correlations_are_reported() -> None:
    sync = _sync(12)
    perfect = [_counter(f"my.pool{i}_objects", _linear(100.0 * (i + 1), 7.0, 12)) for i in range(4)]
    weaker = _counter(
        "my.cache_objects", [100.0, 100, 120, 120, 140, 140, 160, 170, 180, 190, 205, 210]
    )
    assert weaker.verdict.accumulating
    # Alone it is reported (rho 0.99); behind the perfect ones it is left out.
    assert len(rule_kit.match(CounterCorrelation(), rule_kit.facts([sync, weaker]))) == 1
    found = rule_kit.match(CounterCorrelation(), rule_kit.facts([sync, weaker, *perfect]))
    assert len(found) == CORRELATION_MAX_FINDINGS
    assert "my.cache_objects" not in [_corr(f).counter for f in found]
    assert all(_corr(f).spearman_rho == pytest.approx(1.0) for f in found)


# ----------------------------------------------------------------------------- growth


def _gpu_total(total: float) -> SeriesResult:
    return _counter(cuda_counter(0, "total_bytes"), [total] * N, unit=Unit.BYTES)


def test_gpu_memory_growth_names_the_step_it_reaches_the_gpus_total() -> None:
    allocated = _counter(ALLOCATED, _linear(GIB, 0.5 * GIB), unit=Unit.BYTES)
    slope = allocated.verdict.slope_per_step
    last = allocated.series.values[-1]
    rule = CounterGrowth()
    # Room for 100 more steps: a warning, with the step of the out-of-memory.
    far = rule.match(rule_kit.facts([allocated, _gpu_total(last + 100 * slope)]))
    assert [(f.kind, f.severity, f.where) for f in far] == [("memory_growth", "warning", ALLOCATED)]
    ev = _growth(far[0])
    assert ev.steps_to_oom == pytest.approx(100.0)
    assert ev.oom_step == pytest.approx(N - 1 + 100)
    assert ev.gpu_total_bytes == last + 100 * slope
    assert (ev.first, ev.last, ev.kind) == (GIB, last, "bytes")
    assert list(ev.as_dict()) == [
        "counter",
        "slope_per_step",
        "first",
        "last",
        "kind",
        "gpu_total_bytes",
        "steps_to_oom",
        "oom_step",
    ]
    # Full within as many steps as were seen: critical; one step further: a warning.
    near = rule.match(rule_kit.facts([allocated, _gpu_total(last + N * slope)]))
    assert [f.severity for f in near] == ["critical"]
    assert [
        f.severity
        for f in rule.match(rule_kit.facts([allocated, _gpu_total(last + (N + 1) * slope)]))
    ] == ["warning"]
    # Full only far beyond the steps seen (the same horizon as the host's memory): information.
    horizon = rule_kit.facts([allocated, _gpu_total(last + MEMORY_HORIZON * N * slope)])
    assert [f.severity for f in rule.match(horizon)] == ["warning"]
    beyond = rule_kit.facts([allocated, _gpu_total(last + (MEMORY_HORIZON * N + 1) * slope)])
    [f] = rule.match(beyond)
    assert f.severity == "info" and "not yet material" in f.title


def test_rss_growth_is_judged_against_the_hosts_memory() -> None:
    rss = _counter(RSS, _linear(GIB, 0.05 * GIB), unit=Unit.BYTES)  # grows 45 %: material
    # gc objects kept beside it: the RSS is not alone (see the RSS-alone tests below)
    kept = _counter(gc_type_counter("dict"), _linear(1e5, 1e4))
    slope = rss.verdict.slope_per_step
    last = rss.series.values[-1]
    host_key = proc_counter("host_total_bytes")

    def severity(steps_left: int) -> list[str]:
        host = _counter(host_key, [last + steps_left * slope] * N, unit=Unit.BYTES)
        found = CounterGrowth().match(rule_kit.facts([rss, host, kept]))
        found = [f for f in found if f.where == RSS]
        assert [_growth(f).counter for f in found] == [RSS]  # the flat total is no growth
        assert _growth(found[0]).steps_to_host == pytest.approx(steps_left)
        return [f.severity for f in found]

    assert severity(MEMORY_HORIZON * N) == ["warning"]
    assert severity(MEMORY_HORIZON * N + 1) == ["info"]  # beyond the horizon
    assert severity(N) == ["critical"]  # the host is full within the steps seen
    assert severity(N + 1) == ["warning"]


def test_bytes_that_grew_less_than_the_material_share_are_information() -> None:
    first = 9e8
    per_step = MEMORY_MATERIAL_SHARE * first / (N - 1)  # exactly the share over the run
    at = _counter("my.pool_bytes", _linear(first, per_step), unit=Unit.BYTES)
    below = _counter("my.pool_bytes", _linear(first, 0.99 * per_step), unit=Unit.BYTES)
    assert at.verdict.accumulating and below.verdict.accumulating
    assert [f.severity for f in CounterGrowth().match(rule_kit.facts([at]))] == ["warning"]
    found = CounterGrowth().match(rule_kit.facts([below]))
    assert [f.severity for f in found] == ["info"]
    assert "not yet material" in found[0].title


def test_only_held_gauges_that_grow_are_memory_growth() -> None:
    growing = _linear(100.0, 10.0)
    series = [
        _counter(MAPPINGS, growing),  # a resource count: the one finding
        _counter(proc_counter("threads"), growing),  # a busier process is no leak
        _counter(proc_counter("cpu_pct"), growing, unit=Unit.OTHER),
        _counter("wsprof.probe_us.memory", growing),  # not a gauge
        _counter("trainer.global_step", growing),  # a counter by design
        _counter(proc_counter("open_fds"), [100.0] * N),  # flat
    ]
    found = CounterGrowth().match(rule_kit.facts(series))
    assert [(f.where, f.severity, _growth(f).kind) for f in found] == [
        (MAPPINGS, "warning", "resource_count")
    ]
    assert _growth(found[0]).slope_per_step == pytest.approx(10.0)
    # Neither the host's nor the GPU's memory is known: only the keys every growth has.
    assert list(found[0].evidence.as_dict()) == [
        "counter",
        "slope_per_step",
        "first",
        "last",
        "kind",
    ]
    # Only the counters the facts name are judged.
    assert CounterGrowth().match(rule_kit.facts(series, counter_series=())) == []


# ----------------------------------------------------------------------------- memory read honestly


def _warmup(n: int, settle: int = 6) -> list[float]:
    """An RSS that rises over its first ``settle`` steps (allocator arenas, the interpreter's
    caches filling: 60 MiB, then 30, 15 ...) and stays flat after, with a little noise."""
    mib = 2**20
    wobble = [0.0, 0.4, -0.3, 0.2, -0.1, 0.3, -0.2, 0.1]
    return [
        800 * mib + 120 * mib * (1 - 0.5 ** min(i, settle)) + wobble[i % 8] * mib for i in range(n)
    ]


@pytest.mark.parametrize("n", [12, 30])
def test_rss_that_rises_then_levels_off_is_warm_up_not_growth(n: int) -> None:
    rss = _counter(RSS, _warmup(n), unit=Unit.BYTES)
    assert rss.verdict.shape == "warmup_then_flat" and not rss.verdict.accumulating
    assert CounterGrowth().match(rule_kit.facts([rss])) == []


def test_rss_growing_alone_is_information_and_says_so() -> None:
    rss = _counter(RSS, _linear(GIB, 0.05 * GIB), unit=Unit.BYTES)
    flat_allocator = _counter(ALLOCATED, [GIB] * N, unit=Unit.BYTES)
    threads = _counter(proc_counter("threads"), _linear(10.0, 1.0))  # no retention
    [f] = CounterGrowth().match(rule_kit.facts([rss, flat_allocator, threads]))
    assert (f.where, f.severity) == (RSS, "info")
    assert f.title.startswith("RSS grows with nothing wsprof tracks growing beside it: ")
    assert f.title.endswith("(1 GiB -> 1.45 GiB, linear)")
    assert _growth(f).rss_alone is True
    assert f.next_step == counters.RSS_ALONE_HINT
    assert _growth(f).as_dict()["rss_alone"] is True


@pytest.mark.parametrize(
    "explaining",
    [
        ALLOCATED,
        NVML_PROCESS_GPU_BYTES,
        gc_type_counter("Tensor"),
        share_counter("alive_bytes"),
        share_counter("imported_alive_bytes"),
        proc_counter("rss_shmem_bytes"),
    ],
)
def test_rss_growing_beside_a_held_counter_keeps_its_severity(explaining: str) -> None:
    rss = _counter(RSS, _linear(GIB, 0.05 * GIB), unit=Unit.BYTES)
    unit = Unit.COUNT if explaining.startswith("gc.") else Unit.BYTES
    held = _counter(explaining, _linear(1e6, 1e5), unit=unit)
    found = CounterGrowth().match(rule_kit.facts([rss, held]))
    [f] = [f for f in found if f.where == RSS]
    assert f.severity == "warning"
    assert not f.title.startswith("RSS grows with nothing")
    assert "rss_alone" not in _growth(f).as_dict()
    assert counters.rss_explained_by(rule_kit.facts([rss, held])) == [explaining]


def test_a_held_counter_that_grows_alone_keeps_its_severity() -> None:
    # only the RSS is read as "nothing retained": allocator bytes growing alone stay a warning
    found = CounterGrowth().match(
        rule_kit.facts([_counter(ALLOCATED, _linear(GIB, 0.05 * GIB), unit=Unit.BYTES)])
    )
    assert [(f.where, f.severity) for f in found] == [(ALLOCATED, "warning")]


def test_a_steps_counter_value_is_never_the_sample_at_process_exit() -> None:
    # 3 steps cut by time (no markers): the last one runs to the last record, which is the
    # counters' own sample at exit, after the job released what it held (54 -> 32)
    rows = rule_kit.step_rows([1.0, 1.0, 1.0])
    s = rule_kit.S
    t = np.array([0, s // 2, 3 * s // 2, 5 * s // 2, 3 * s - 1], dtype=np.int64)
    v = np.array([10.0, 20.0, 38.0, 54.0, 32.0])
    last_work = Span("phase", "train", 2 * s, 5 * s // 2 + 10, 2, 1)  # ends after the 54
    trace = ProcessTrace("p", {}, CallTable.empty(), {}, [last_work], {RSS: (t, v)}, [])
    assert counter_per_step(trace, rows) == {RSS: [20.0, 38.0, 54.0]}
    # with nothing recorded but counters, the step's own end holds
    bare = ProcessTrace("p", {}, CallTable.empty(), {}, [], {RSS: (t, v)}, [])
    assert counter_per_step(bare, rows) == {RSS: [20.0, 38.0, 32.0]}
    # a step marked to its end (markers: the last step's span) keeps what it holds
    marked = Span("step", "2", 2 * s, 3 * s, 2, 1)
    closed = ProcessTrace("p", {}, CallTable.empty(), {}, [marked], {RSS: (t, v)}, [])
    assert counter_per_step(closed, rows) == {RSS: [20.0, 38.0, 32.0]}
