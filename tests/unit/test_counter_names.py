"""Counter names (wsprof.contracts.counters) and unit texts (wsprof.contracts.units): built and
taken apart in one place, each probe counter's unit decided by its builder's table."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from wsprof.capture.allocator import ALLOCATOR_KEYS, allocator_reading, total_reading
from wsprof.capture.nvml import Nvml
from wsprof.capture.process_stats import GrowingTypes, gc_reading, process_reading
from wsprof.contracts.counters import (
    CUDA_KEYS,
    GC_GEN_KEYS,
    NVML_GPU_KEYS,
    NVML_MEM_TOTAL_BYTES,
    NVML_PROCESS_GPU_BYTES,
    PERCENT_TEXT,
    PROC_KEYS,
    CounterName,
    CounterSource,
    counter_unit,
    counter_unit_text,
    cuda_counter,
    format_counter,
    gc_gen_counter,
    gc_type_counter,
    is_gpu_counter,
    is_nvml_gpu,
    nvml_gpu_counter,
    parse_counter,
    probe_cost_counter,
    proc_counter,
    total_bytes_of,
)
from wsprof.contracts.series import counter_unit as series_counter_unit
from wsprof.contracts.units import UNIT_TEXTS, UNIT_WORDS, Unit, unit_family, unit_of_word
from wsprof.importers.csv_series import UNIT_SUFFIXES, unit_of


def _every_built_name() -> list[tuple[str, CounterName]]:
    out = [(cuda_counter(3, k), CounterName(CounterSource.CUDA, 3, k)) for k in CUDA_KEYS]
    out += [
        (nvml_gpu_counter(1, k), CounterName(CounterSource.NVML_GPU, 1, k)) for k in NVML_GPU_KEYS
    ]
    out += [(proc_counter(k), CounterName(CounterSource.PROC, None, k)) for k in PROC_KEYS]
    out += [(gc_gen_counter(2, k), CounterName(CounterSource.GC_GEN, 2, k)) for k in GC_GEN_KEYS]
    out.append((gc_type_counter("a.b.C"), CounterName(CounterSource.GC_TYPE, None, "a.b.C")))
    out.append((probe_cost_counter("nvml"), CounterName(CounterSource.PROBE_COST, None, "nvml")))
    out.append(
        (NVML_PROCESS_GPU_BYTES, CounterName(CounterSource.NVML_PROCESS, None, "process_gpu_bytes"))
    )
    return out


@pytest.mark.parametrize(("name", "parsed"), _every_built_name())
def test_every_built_name_parses_back(name: str, parsed: CounterName) -> None:
    assert parse_counter(name) == parsed
    assert format_counter(parsed) == name


def test_names_are_the_ones_old_traces_hold() -> None:
    """The trace format stays readable both ways: the builders make the names as before."""
    assert cuda_counter(0, "reserved_bytes.all.current") == "cuda0.reserved_bytes.all.current"
    assert cuda_counter(0, "mappings") == "cuda0.mappings"
    assert cuda_counter(1, "total_bytes") == "cuda1.total_bytes"
    assert nvml_gpu_counter(2, "util_pct") == "nvml.gpu2.util_pct"
    assert nvml_gpu_counter(0, NVML_MEM_TOTAL_BYTES) == "nvml.gpu0.mem_total_bytes"
    assert NVML_PROCESS_GPU_BYTES == "nvml.process_gpu_bytes"
    assert proc_counter("rss_bytes") == "proc.rss_bytes"
    assert gc_gen_counter(0, "count") == "gc.gen0.count"
    assert gc_type_counter("builtins.dict") == "gc.type.builtins.dict"
    assert probe_cost_counter("allocator") == "wsprof.probe_us.allocator"


def test_a_builder_refuses_a_key_without_a_unit() -> None:
    with pytest.raises(ValueError, match="allocator counter"):
        cuda_counter(0, "no_such_key")
    with pytest.raises(ValueError):
        nvml_gpu_counter(0, "fan_pct")
    with pytest.raises(ValueError):
        proc_counter("rss")
    with pytest.raises(ValueError):
        gc_gen_counter(0, "collected")


def test_user_counters_are_no_probe_counter() -> None:
    for name in ("my_counter", "handles.open", "cudagraph.replays", "wsprof.other", "gc.", "proc."):
        assert parse_counter(name) is None or name == "wsprof.other", name
    assert parse_counter("wsprof.other") is None
    assert not is_gpu_counter("cudagraph.replays") and is_gpu_counter("cuda0.mappings")
    assert is_gpu_counter(NVML_PROCESS_GPU_BYTES) and is_gpu_counter("nvml.gpu0.util_pct")
    assert not is_gpu_counter("proc.rss_bytes")


def test_total_bytes_of_a_gpu_memory_counter() -> None:
    assert total_bytes_of("cuda0.reserved_bytes.all.current") == "cuda0.total_bytes"
    assert total_bytes_of("cuda7.allocated_bytes.all.current") == "cuda7.total_bytes"
    assert total_bytes_of("nvml.gpu3.mem_used_bytes") == "nvml.gpu3.mem_total_bytes"
    for name in ("cuda0.segment.all.current", "cuda0.total_bytes", NVML_PROCESS_GPU_BYTES, "x"):
        assert total_bytes_of(name) is None
    assert is_nvml_gpu("nvml.gpu0.mem_total_bytes", NVML_MEM_TOTAL_BYTES)
    assert not is_nvml_gpu("cuda0.total_bytes", NVML_MEM_TOTAL_BYTES)


def test_each_built_counter_has_its_tables_unit() -> None:
    for name, parsed in _every_built_name():
        unit = counter_unit(name)
        assert series_counter_unit(name) is unit  # one decision, re-exported
        if parsed.key.endswith("_bytes") or parsed.key.split(".", 1)[0].endswith("_bytes"):
            assert unit is Unit.BYTES, name
        elif parsed.key.endswith("_pct"):
            assert (unit, counter_unit_text(name)) == (Unit.OTHER, PERCENT_TEXT), name
        elif parsed.source is CounterSource.PROBE_COST:
            assert unit is Unit.MICROSECONDS
        else:
            assert unit is Unit.COUNT, name


# ----------------------------------------------------------------- what the probes record


def test_allocator_counters_get_bytes_and_count_units() -> None:
    stats: dict[str, Any] = {k: 1.0 for k in ALLOCATOR_KEYS}
    stats["num_device_alloc"], stats["num_device_free"] = 5.0, 2.0
    reading = allocator_reading(stats, 1)
    units = {name: counter_unit(name) for name, _ in reading}
    assert units["cuda1.reserved_bytes.all.current"] is Unit.BYTES
    assert units["cuda1.inactive_split_bytes.all.current"] is Unit.BYTES
    assert units["cuda1.segment.all.current"] is Unit.COUNT
    assert units["cuda1.num_device_alloc"] is Unit.COUNT
    assert dict(reading)["cuda1.mappings"] == 3.0 and units["cuda1.mappings"] is Unit.COUNT
    total = total_reading(reading, 80 * 2**30)
    assert total == ("cuda1.total_bytes", float(80 * 2**30))
    assert counter_unit(total[0]) is Unit.BYTES
    assert all(parse_counter(n) is not None for n, _ in reading)


class _FakeNvml:
    """The few pynvml calls :class:`Nvml` makes, for two GPUs and one process on GPU 1."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=self.pid, usedGpuMemory=2**30)] if h == 1 else []

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=40.0 + h)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=3 * 2**30, total=80 * 2**30)


def _nvml(pid: int) -> Nvml:
    nv = Nvml.__new__(Nvml)
    nv.ok, nv.why, nv._handles, nv._nv = True, "", [0, 1], _FakeNvml(pid)
    return nv


def test_nvml_counters_get_bytes_and_percent_units() -> None:
    reading = dict(_nvml(42).reading_for(42))
    assert set(reading) == {
        "nvml.process_gpu_bytes",
        "nvml.gpu1.util_pct",
        "nvml.gpu1.mem_used_bytes",
    }
    assert counter_unit("nvml.process_gpu_bytes") is Unit.BYTES
    assert counter_unit("nvml.gpu1.mem_used_bytes") is Unit.BYTES
    assert counter_unit("nvml.gpu1.util_pct") is Unit.OTHER
    assert counter_unit_text("nvml.gpu1.util_pct") == "%" and reading["nvml.gpu1.util_pct"] == 41.0
    sampled = _nvml(42).sample([42])[42]
    assert {n for n, _ in sampled} == {"nvml.gpu1.util_pct", "nvml.process_gpu_bytes"}
    assert _nvml(42).total_bytes() == {0: 80 * 2**30, 1: 80 * 2**30}


def test_process_and_gc_counters_get_bytes_count_and_percent_units() -> None:
    import psutil

    me = psutil.Process()
    me.cpu_percent(None)
    for name, _ in process_reading(me) + gc_reading():
        assert parse_counter(name) is not None, name
        unit = counter_unit(name)
        if name in ("proc.rss_bytes", "proc.host_total_bytes"):
            assert unit is Unit.BYTES
        elif name == "proc.cpu_pct":
            assert (unit, counter_unit_text(name)) == (Unit.OTHER, "%")
        else:
            assert unit is Unit.COUNT, name
    growing = GrowingTypes(top=3)
    growing()
    keep = [[object()] for _ in range(1000)]
    names = [n for n, _ in growing()]
    assert names and all(counter_unit(n) is Unit.COUNT for n in names)
    assert all(parse_counter(n).source is CounterSource.GC_TYPE for n in names)  # type: ignore[union-attr]
    del keep


# ----------------------------------------------------------------- unit texts


@pytest.mark.parametrize(
    ("text", "family", "scale"),
    [
        ("s", Unit.SECONDS, 1.0),
        ("ms", Unit.SECONDS, 1e-3),
        ("µs", Unit.SECONDS, 1e-6),
        ("us", Unit.SECONDS, 1e-6),
        ("min", Unit.SECONDS, 60.0),
        ("GiB", Unit.BYTES, 2.0**30),
        ("kB", Unit.BYTES, 1e3),
        ("%", Unit.SHARE, 0.01),
        ("count", Unit.COUNT, 1.0),
        ("tokens/s", Unit.OTHER, 1.0),
        ("", Unit.OTHER, 1.0),
    ],
)
def test_unit_family_and_scale(text: str, family: Unit, scale: float) -> None:
    assert unit_family(text) == (family, scale)


def test_parse_names_a_unit_only_at_its_own_scale() -> None:
    assert Unit.parse("µs") is Unit.MICROSECONDS and Unit.parse("us") is Unit.MICROSECONDS
    assert Unit.parse("ns") is Unit.NANOSECONDS and Unit.parse("B") is Unit.BYTES
    assert Unit.parse("fraction") is Unit.SHARE and Unit.parse("count") is Unit.COUNT
    for text in ("ms", "GiB", "%", "min", "tokens/s"):
        assert Unit.parse(text) is Unit.OTHER, text
    for unit in Unit:
        if unit is not Unit.OTHER:
            assert Unit.parse(unit.value) is unit and unit.value in UNIT_TEXTS


def test_every_unit_word_and_csv_suffix_names_a_known_unit_text() -> None:
    assert all(text in UNIT_TEXTS for text in UNIT_WORDS.values())
    assert set(UNIT_SUFFIXES.values()) <= set(UNIT_TEXTS)
    assert unit_of_word("GiB") == "GiB" and unit_of_word("sec") == "s" and unit_of_word("x") == ""
    assert unit_of("lat_µs") == "µs" and unit_family(unit_of("t_ms")) == (Unit.SECONDS, 1e-3)
