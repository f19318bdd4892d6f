"""The series-kind classifier (:mod:`wsprof.analysis.kinds`): names first, values second, and
only durations, bytes and resource counts ever get slowdown or memory-growth findings.

Property tests (hypothesis): a counter whose increment equals its logging stride is a monotonic
counter whatever its stride or gaps; a loss-named series never gets advice whatever its values;
a bytes-named series that grows stays eligible (and is found) even when it grows as regularly
as a counter.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wsprof.analysis.facts import Facts
from wsprof.analysis.kinds import (
    ACCUMULATING_KINDS,
    SeriesKind,
    counter_by_values,
    kind_by_name,
    series_kind,
)
from wsprof.analysis.model import GrowthVerdict, SeriesResult
from wsprof.analysis.rules.counters import CounterGrowth
from wsprof.analysis.rules.slowdown import AccumulatingSlowdown
from wsprof.analysis.run import analyze_series
from wsprof.contracts.series import Series, imported_series
from wsprof.contracts.series import SeriesKind as ContractKind
from wsprof.contracts.units import Unit
from wsprof.importers.logs import metric_unit

pytestmark = pytest.mark.pure

_PROPS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Names that say nothing about what they measure (the values decide).
_SILENT_NAMES = ("x", "my_metric", "foo/bar", "custom.thing", "q7")
#: Training-quality names of the four frameworks and of plain CSVs.
LOSS_NAMES = (
    "loss",
    "train/loss",
    "actor/pg_loss",
    "critic/vf_loss",
    "policy_loss",
    "actor/kl_loss",
    "eval/loss",
    "sft_loss",
    "counter:loss",
)
#: Bytes names: log keys, CSV columns (units from their suffix) and trace counters.
BYTES_NAMES = (
    ("perf/max_memory_allocated_gb", "GB"),
    ("reserved_gib", "GiB"),
    ("used_mib", "MiB"),
    ("counter:cuda0.reserved_bytes.all.current", ""),
    ("counter:proc.rss_bytes", ""),
    ("counter:nvml.process_gpu_bytes", ""),
    ("gpu_memory_gb", "GB"),
)


def _forced(series: Series) -> SeriesResult:
    """The series with a verdict that says it grows: the rules alone decide."""
    n = len(series.values)
    return SeriesResult(
        series,
        GrowthVerdict(
            shape="linear",
            accumulating=True,
            confidence=1.0,
            slope_per_step=1.0,
            growth_factor_per_step=None,
            change_point=None,
            fitted=series.values[:n],
            projection=None,
        ),
    )


def _rules(series: Series, *, time: bool, counter: bool) -> list[str]:
    name = series.name
    facts = Facts(
        {name: _forced(series)},
        [],
        time_series=(name,) if time else (),
        counter_series=(name,) if counter else (),
    )
    return [f.kind for rule in (AccumulatingSlowdown(), CounterGrowth()) for f in rule.match(facts)]


def test_kinds_are_the_json_texts() -> None:
    """One kind vocabulary (contracts.series.SeriesKind), written to JSON as these texts."""
    assert tuple(k.value for k in SeriesKind) == (
        "duration",
        "bytes",
        "resource_count",
        "monotonic_counter",
        "quality",
        "lr_schedule",
        "rate",
        "other",
    )
    assert SeriesKind is ContractKind
    assert {k.value for k in ACCUMULATING_KINDS} == {"duration", "bytes", "resource_count"}


@pytest.mark.parametrize(
    ("name", "unit", "kind"),
    [
        # verl (ray_trainer.py, metric_utils.py, dp_actor.py, fsdp_workers.py)
        ("training/global_step", "", SeriesKind.COUNTER),
        ("training/epoch", "", SeriesKind.COUNTER),
        ("critic/advantages/mean", "", SeriesKind.QUALITY),
        ("critic/advantages/max", "", SeriesKind.QUALITY),
        ("critic/values/mean", "", SeriesKind.QUALITY),
        ("actor/ppo_kl", "", SeriesKind.QUALITY),
        ("actor/lr", "", SeriesKind.LR_SCHEDULE),
        ("timing_s/values", "s", SeriesKind.DURATION),
        ("timing_s/reward", "s", SeriesKind.DURATION),
        ("timing_s/generation_timing/topk_ratio", "", SeriesKind.RATE),
        ("timing_per_token_ms/gen", "ms", SeriesKind.RATE),
        ("perf/time_per_step", "s", SeriesKind.DURATION),
        ("perf/throughput", "", SeriesKind.RATE),
        ("perf/mfu/actor", "", SeriesKind.RATE),
        ("perf/total_num_tokens", "", SeriesKind.OTHER),
        ("perf/cpu_memory_used_gb", "GB", SeriesKind.BYTES),
        ("rollout/too_good_sample_ratio", "", SeriesKind.QUALITY),
        ("reward_extra_info/num_steps", "", SeriesKind.QUALITY),
        ("training/cumulative_step_time_s", "s", SeriesKind.COUNTER),
        # slime, OpenRLHF, AReaL, Megatron
        ("rollout/step", "", SeriesKind.COUNTER),
        ("perf/actor_train_time", "s", SeriesKind.DURATION),
        ("perf/log_probs_tflops", "", SeriesKind.RATE),
        ("actor_lr", "", SeriesKind.LR_SCHEDULE),
        ("consumed_samples", "", SeriesKind.COUNTER),
        ("timeperf/update_weights", "s", SeriesKind.DURATION),
        ("_runtime", "", SeriesKind.COUNTER),
        # headline series, CSV columns, wsprof's trace counters
        ("weight_sync_s", "s", SeriesKind.DURATION),
        ("epoch_time_s", "s", SeriesKind.DURATION),
        ("step_time_s", "s", SeriesKind.DURATION),
        ("tokens_per_s", "s", SeriesKind.RATE),
        ("handles_count", "count", SeriesKind.RESOURCE),
        ("counter:cuda0.segment.all.current", "", SeriesKind.RESOURCE),
        ("counter:cuda0.num_alloc_retries", "", SeriesKind.COUNTER),
        ("counter:proc.open_fds", "", SeriesKind.RESOURCE),
        ("counter:proc.cpu_pct", "", SeriesKind.RATE),
        ("counter:gc.type.__main__.Leaky", "", SeriesKind.RESOURCE),
        ("counter:demo.allocator_segments", "", SeriesKind.RESOURCE),
        ("counter:nvml.gpu0.util_pct", "", SeriesKind.RATE),
    ],
)
def test_kind_by_name(name: str, unit: str, kind: SeriesKind) -> None:
    got = kind_by_name(name, unit)
    assert got is not None and got.kind is kind, (name, got)


@pytest.mark.parametrize("name", _SILENT_NAMES)
def test_silent_names_leave_it_to_the_values(name: str) -> None:
    assert kind_by_name(name, "") is None


@st.composite
def _stride_counter(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Step numbers with a stride (or gaps: missed log lines) and a counter that follows them."""
    n = draw(st.integers(3, 40))
    start = draw(st.integers(0, 10_000))
    if draw(st.booleans()):
        stride = draw(st.integers(1, 50))
        steps = tuple(start + stride * i for i in range(n))
    else:
        gaps = draw(st.lists(st.integers(1, 20), min_size=n - 1, max_size=n - 1))
        steps = (start, *(start + sum(gaps[: i + 1]) for i in range(n - 1)))
    offset = draw(st.integers(-1000, 1000) | st.floats(-1e3, 1e3, allow_nan=False))
    return steps, tuple(float(s + offset) for s in steps)


@_PROPS
@given(_stride_counter(), st.sampled_from(_SILENT_NAMES))
def test_increment_equal_to_stride_is_a_counter(
    data: tuple[tuple[int, ...], tuple[float, ...]], name: str
) -> None:
    steps, values = data
    assert counter_by_values(steps, values) is not None
    k = series_kind(imported_series(name, "", steps, values))
    assert k.kind is SeriesKind.COUNTER and not k.can_accumulate


@_PROPS
@given(st.integers(3, 40), st.integers(1, 20), st.integers(1, 4096), st.integers(0, 10**6))
def test_whole_number_constant_increment_is_a_counter(
    n: int, stride: int, per_step: int, start: int
) -> None:
    steps = tuple(1 + stride * i for i in range(n))
    values = tuple(float(start + per_step * s) for s in steps)
    assert series_kind(imported_series("samples", "", steps, values)).kind is SeriesKind.COUNTER


@_PROPS
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=3, max_size=30))
def test_not_a_counter_unless_increments_are_constant(values: list[float]) -> None:
    steps = tuple(range(len(values)))
    why = counter_by_values(steps, tuple(values))
    rates = [b - a for a, b in zip(values, values[1:])]
    if why is not None:
        assert min(rates) > 0
        assert max(rates) - min(rates) <= 1e-6 * max(rates)


def test_flat_noisy_or_falling_series_are_not_counters() -> None:
    steps = (1, 2, 3, 4, 5)
    for values in [
        (3.0,) * 5,
        (1.0, 2.0, 3.0, 5.0, 6.0),
        (5.0, 4.0, 3.0, 2.0, 1.0),
        (1.5, 2.5, 3.5, 4.5, math.inf),
    ]:
        assert counter_by_values(steps, values) is None, values
    assert counter_by_values((1, 2), (1.0, 2.0)) is None  # two points: any line
    assert counter_by_values((2, 2, 3), (1.0, 2.0, 3.0)) is None  # steps not increasing


@_PROPS
@given(
    st.sampled_from(LOSS_NAMES),
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=30),
    st.integers(1, 10),
)
def test_a_loss_is_never_leak_advised(name: str, values: list[float], stride: int) -> None:
    s = imported_series(
        name, metric_unit(name), tuple(stride * i for i in range(len(values))), tuple(values)
    )
    assert series_kind(s).kind is SeriesKind.QUALITY
    # whatever the growth verdict says, and wherever the facts list it
    assert _rules(s, time=True, counter=True) == []
    assert analyze_series([s], "x.csv").findings == ()


def test_a_loss_that_grows_is_shown_but_not_judged() -> None:
    s = imported_series("train/loss", "", tuple(range(8)), tuple(2.0**i for i in range(8)))
    a = analyze_series([s], "x.log")
    assert a.findings == ()
    assert [r.series.kind for r in a.series] == ["quality"]
    assert any(n.startswith("not judged for accumulation") and "1 quality" in n for n in a.notes)


@_PROPS
@given(st.sampled_from(BYTES_NAMES), st.integers(4, 30), st.integers(1, 5), st.floats(0.5, 64.0))
def test_bytes_named_growth_stays_eligible(
    name_unit: tuple[str, str], n: int, stride: int, per_step: float
) -> None:
    name, unit = name_unit
    steps = tuple(1 + stride * i for i in range(n))
    # as regular as a counter (exactly +1 per step number for per_step == 1): names come first
    values = tuple(10.0 + per_step * s for s in steps)
    s = imported_series(name, unit, steps, values)
    k = series_kind(s)
    assert k.kind is SeriesKind.BYTES and k.can_accumulate
    assert _rules(s, time=False, counter=True) == ["memory_growth"]


def test_stranded_buffer_is_still_found() -> None:
    """+1 GiB per step with a little noise: the memory_growth finding stays (and a step counter
    beside it, exactly as regular, gets none)."""
    steps = tuple(range(10))
    noise = (0.01, -0.02, 0.015, -0.01, 0.0, 0.02, -0.015, 0.01, -0.005, 0.0)
    mem = imported_series(
        "reserved_gib", "GiB", steps, tuple(20.0 + s + e for s, e in zip(steps, noise))
    )
    step = imported_series("training/global_step", "", steps, tuple(float(s + 1) for s in steps))
    a = analyze_series([mem, step], "x.csv")
    where = [f.where for f in a.findings if f.kind == "memory_growth"]
    assert where == ["reserved_gib"], [f.title for f in a.findings]


@_PROPS
@given(
    _stride_counter(),
    st.sampled_from(
        ["training/global_step", "training/epoch", "rollout/step", "consumed_samples", "x"]
    ),
)
def test_counters_get_no_findings(
    data: tuple[tuple[int, ...], tuple[float, ...]], name: str
) -> None:
    steps, values = data
    s = imported_series(name, "", steps, values)
    assert _rules(s, time=True, counter=True) == []
    assert analyze_series([s], "x.log").findings == ()


def test_trace_user_counter_defaults_to_a_resource() -> None:
    """A trace's ``counter:<name>`` that says nothing is something held (wsprof.counter()):
    its growth is still reported; one that grows by exactly 1 per step is a step counter."""
    steps = tuple(range(6))
    held = imported_series("counter:cache", "", steps, (1.0, 3.0, 7.0, 8.0, 13.0, 20.0))
    assert series_kind(held, default=SeriesKind.RESOURCE).kind is SeriesKind.RESOURCE
    assert _rules(held, time=False, counter=True) == ["memory_growth"]
    ticks = imported_series("counter:i", "", steps, tuple(float(s) for s in steps))
    assert _rules(ticks, time=False, counter=True) == []


def test_per_token_time_and_clock_get_no_slowdown() -> None:
    steps = tuple(range(6))
    for name, unit in [
        ("timing_per_token_ms/update_actor", "ms"),
        ("elapsed_s", "s"),
        ("perf/throughput", ""),
    ]:
        s = imported_series(name, unit, steps, tuple(1.0 + 0.5 * i for i in steps))
        assert _rules(s, time=True, counter=True) == [], name
    sync = imported_series(
        "weight_sync_s", "s", steps, (143.0, 363.0, 966.0, 1596.0, 2400.0, 3300.0)
    )
    assert _rules(sync, time=True, counter=False) == ["accumulating_slowdown"]


def test_kind_given_by_an_importer_wins() -> None:
    s = Series("x", Unit.OTHER, (1, 2, 3), (1.0, 2.0, 3.0), kind="bytes")
    assert series_kind(s).kind is SeriesKind.BYTES
