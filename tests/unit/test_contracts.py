"""The contracts between the layers (:mod:`wsprof.contracts`): units, series keys, events and
the self-overhead record, and the bug they fix by construction: a counter in bytes whose name
does not end in ``_bytes`` (``cuda0.reserved_bytes.all.current``) had its slope written as a
bare number ("per 1,000") while the report said bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wsprof.analysis.run import analyze_path
from wsprof.contracts.events import (
    Event,
    EventKind,
    Patched,
    PresetMarked,
    PresetMissing,
    ProbeTrouble,
    SamplerStarted,
    SamplerStopped,
    SamplerTargetExited,
    SamplerWindowFailed,
    SamplerWindowLost,
    TargetExited,
    WrapperFound,
    parse_event,
)
from wsprof.contracts.overhead import ProbeBudget, SelfOverhead, self_overhead_from_meta
from wsprof.contracts.series import (
    COUNTER_PREFIX,
    OP_MEDIAN_PREFIX,
    KeyFamily,
    Series,
    counter_key,
    counter_of,
    counter_unit,
    imported_series,
    op_median_key,
    op_of,
    parse_series_key,
)
from wsprof.contracts.units import Unit, fmt_in_unit
from wsprof.report.jsonout import to_dict
from wsprof.trace.reader import read_trace
from wsprof.trace.writer import TraceWriter

MIB = 2**20
GIB = 2**30
#: The allocator counter of the bug: bytes, but its name ends in ``.all.current``.
RESERVED = "cuda0.reserved_bytes.all.current"


def _call(t0: int, dur_ns: int, step: int) -> tuple[object, ...]:
    return (
        t0,
        t0 + dur_ns,
        dur_ns // 2,
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


def _write_leaky_trace(path: Path, steps: int = 8) -> Path:
    """A rank whose weight sync grows with the CUDA allocator's reserved bytes (+64 MiB and
    +20 ms per step), as ``wsprof.patch()`` writes it."""
    w = TraceWriter(str(path))
    w.set_meta({"pid": 4242, "rank": 0, "world_size": 1, "host": "h"})
    step_ns = 10**9
    for s in range(steps):
        t = s * step_ns
        sync_ns = (100 + 20 * s) * 10**6
        per_call = sync_ns // 50
        w.write(
            {
                "sites": [(0, "train.py", 42, "sync_weights")],
                "calls": [_call(t + i * per_call, per_call - 1000, s) for i in range(50)],
                "spans": [
                    ("step", str(s), t, t + step_ns - 1, s, 7),
                    ("phase", "weight_sync", t, t + sync_ns, s, 7),
                ],
                "counters": [(t + step_ns - 10, RESERVED, float(GIB + 64 * MIB * s))],
            }
        )
    w.close()
    return path


def test_bytes_counter_slope_is_in_bytes(tmp_path: Path) -> None:
    """The bug: the finding and the JSON give the reserved-bytes slope as bytes per step, and
    its correlation with weight-sync time per GiB, never "per 1,000"."""
    a = analyze_path(str(_write_leaky_trace(tmp_path / "h-4242.wsprof")))
    growth = [f for f in a.findings if f.kind == "memory_growth" and f.where == RESERVED]
    assert growth, [f.title for f in a.findings]
    assert "+64 MiB/step" in growth[0].title, growth[0].title
    assert "(1 GiB -> 1.44 GiB" in growth[0].title and "GiB" in growth[0].title, growth[0].title
    corr = [f for f in a.findings if f.kind == "counter_correlation" and f.where == RESERVED]
    assert corr, [f.title for f in a.findings]
    assert "per GiB" in corr[0].title and "1,000" not in corr[0].title, corr[0].title
    series = {s["name"]: s for s in to_dict(a)["series"]}
    assert series[counter_key(RESERVED)]["unit"] == "bytes"


@pytest.mark.parametrize(
    ("counter", "unit"),
    [
        (RESERVED, Unit.BYTES),
        ("proc.rss_bytes", Unit.BYTES),
        ("nvml.gpu0.mem_used_bytes", Unit.BYTES),
        ("cuda0.segment.all.current", Unit.COUNT),
        ("proc.cpu_pct", Unit.OTHER),
        ("gc.gen0", Unit.OTHER),
        ("my.pool_bytes", Unit.BYTES),  # a user counter: the name rule
        ("my.pool", Unit.OTHER),
        ("cuda0.requested_bytes.all.peak", Unit.BYTES),  # a key an older wsprof recorded
        ("cuda0.allocation.all.current", Unit.COUNT),
    ],
)
def test_counter_unit_from_its_name(counter: str, unit: Unit) -> None:
    assert counter_unit(counter) is unit


def test_keys_are_built_and_parsed_in_one_place() -> None:
    assert op_median_key("all_gather") == OP_MEDIAN_PREFIX + "all_gather"
    assert counter_key("proc.rss_bytes") == COUNTER_PREFIX + "proc.rss_bytes"
    assert parse_series_key(op_median_key("a:b")) == parse_series_key("median_us:a:b")
    assert parse_series_key("median_us:a:b").name == "a:b"
    assert parse_series_key("counter:x").family is KeyFamily.COUNTER
    assert parse_series_key("weight_sync_s").family is KeyFamily.PLAIN
    assert op_of("median_us:broadcast") == "broadcast" and op_of("counter:x") is None
    assert counter_of("counter:x") == "x" and counter_of("weight_sync_s") is None


def test_unit_formats_values_and_slopes() -> None:
    assert Unit.BYTES.fmt_slope(1.2 * MIB) == "+1.2 MiB/step"
    assert Unit.SECONDS.fmt_slope(-0.0034) == "-3.4 ms/step"
    assert Unit.SHARE.fmt(0.53) == "53%"
    assert Unit.MICROSECONDS.fmt(1500.0) == "1.5 ms"
    assert Unit.OTHER.fmt(3.25, "tokens/s") == "3.25 tokens/s"
    assert Unit.OTHER.fmt_slope(2.0, "tokens/s") == "+2 tokens/s/step"
    assert Unit.parse("µs") is Unit.MICROSECONDS and Unit.parse("GiB") is Unit.OTHER
    assert fmt_in_unit(2.0 * GIB, "bytes") == "2 GiB" and fmt_in_unit(3.0, "GiB") == "3 GiB"
    assert fmt_in_unit(5, "count") == "5 count" and fmt_in_unit(None, "s") == "—"


def test_imported_series_keeps_its_unit_text() -> None:
    s = imported_series("gen_tokens_per_s", "tokens/s", (0, 1), (1.0, 2.0))
    assert s.unit is Unit.OTHER and s.unit_label == "tokens/s" and s.fmt(2.0) == "2 tokens/s"
    t = imported_series("sync_s", "s", (0, 1), (1.0, 2.0))
    assert t.unit is Unit.SECONDS and t.unit_text == "" and t.unit_label == "s"
    # a column named as a trace's counter (an exported CSV) keeps the counter's unit
    c = imported_series(counter_key(RESERVED), "", (0, 1), (1.0, 2.0))
    assert c.unit is Unit.BYTES
    assert Series("x", Unit.COUNT, (0,), (3.0,)).fmt(3.0) == "3"


# --- events -------------------------------------------------------------------------------


def test_event_kinds_are_the_on_disk_strings() -> None:
    assert EventKind.WRAPPER == "wrapper" and EventKind("preset_missing") is (
        EventKind.PRESET_MISSING
    )
    assert {k.value for k in EventKind} >= {
        "wrapper",
        "patched",
        "sampler",
        "internal_error",
        "extra_missing",
        "device_time",
        "probe_off",
    }


def test_unknown_kind_and_bad_detail_stay_plain_events() -> None:
    e = parse_event(5, "from_the_future", "x")
    assert type(e) is Event and e.kind == "from_the_future" and e.detail == "x"
    bad = parse_event(5, "wrapper", "{not json")
    assert type(bad) is Event and bad.kind is EventKind.WRAPPER
    assert type(parse_event(5, "memory_snapshot", "[1]")) is Event


def test_sampler_details_are_parsed_once() -> None:
    stopped = parse_event(
        1, "sampler", "stopped: target exited; window failed: x; samples=12 windows=3 errors=1"
    )
    assert isinstance(stopped, SamplerStopped)
    assert (stopped.reason, stopped.samples, stopped.windows, stopped.errors) == (
        "target exited; window failed: x",
        12,
        3,
        1,
    )
    lost = parse_event(1, "sampler", "py-spy killed by signal 9 while sampling pid 7; window lost")
    assert isinstance(lost, SamplerWindowLost)
    failed = parse_event(1, "sampler", "window failed: ptrace denied")
    assert isinstance(failed, SamplerWindowFailed) and failed.reason == "ptrace denied"
    exited = parse_event(1, "sampler", "target exited: pid 4242")
    assert isinstance(exited, SamplerTargetExited) and exited.pid == 4242
    assert isinstance(parse_event(1, "sampler", "started: targets=[1] rate_hz=100"), SamplerStarted)
    old = parse_event(1, "sampler", "stopped: duration reached")  # no counts: still stopped
    assert isinstance(old, SamplerStopped) and old.samples is None


def test_wrapper_patched_preset_probe_events() -> None:
    w = parse_event(
        1,
        "wrapper",
        json.dumps(
            {"api": "dist.broadcast", "qualname": "f", "line": 3, "wraps": ["a.b"], "module": None}
        ),
    )
    assert isinstance(w, WrapperFound)
    assert (w.api, w.wrapper_kind, w.qualname, w.line, w.wraps, w.module, w.after_patch) == (
        "dist.broadcast",
        "name",
        "f",
        3,
        ("a.b",),
        None,
        False,
    )
    p = parse_event(1, "patched", json.dumps({"layers": "api", "api_names": 40}))
    assert isinstance(p, Patched) and p.layers == "api" and p.api_names == 40
    assert isinstance(old := parse_event(1, "patched", "hooks"), Patched) and old.layers == "both"
    m = parse_event(
        1,
        "preset_missing",
        "verl: a.b:C.f not found; the weight_sync phase is not marked (framework version?)",
    )
    assert isinstance(m, PresetMissing) and m.preset == "verl" and m.what.startswith("a.b:C.f")
    u = parse_event(1, "preset_missing", "WSPROF_PRESET='x' is not one of slime; no phases")
    assert isinstance(u, PresetMissing) and u.preset is None
    mk = parse_event(1, "preset", "slime: rollout marked on slime.ray.rollout:RolloutManager.g")
    assert isinstance(mk, PresetMarked) and (mk.preset, mk.phase) == ("slime", "rollout")
    off = parse_event(1, "probe_off", "nvml: off after 3 errors in a row (OSError: x)")
    assert isinstance(off, ProbeTrouble) and off.off and off.probe == "nvml"
    assert isinstance(t := parse_event(1, "target_exited", "pid 9 exited"), TargetExited)
    assert t.pid == 9


def test_reader_gives_typed_events_and_self_overhead(tmp_path: Path) -> None:
    path = tmp_path / "h-1.wsprof"
    w = TraceWriter(str(path))
    w.set_meta(
        {
            "pid": 1,
            "self": {
                "dropped_calls": 3,
                "dropped_by_step": {"2": 3, "x": 1},
                "hook_ns_per_call": 900,
                "flush_ns_total": 2e9,
                "probes": {"spent_ns": 1e6, "share": 0.005},
            },
        }
    )
    w.write({"events": [(1, "sampler", "window failed: boom"), (2, "mystery", "?")]})
    w.close()
    t = read_trace(str(path))
    assert isinstance(t.events[0], SamplerWindowFailed) and type(t.events[1]) is Event
    own = t.self_overhead
    assert (own.dropped_calls, own.dropped_by_step, own.hook_ns_per_call) == (3, {2: 3}, 900)
    assert own.flush_s == 2.0 and own.internal_errors == 0 and own.recorded
    assert own.probes is not None and own.probes.spent_s == 1e-3


@pytest.mark.parametrize(
    "record", [None, "text", {}, {"dropped_calls": "many", "hook_ns_per_call": True, "probes": [1]}]
)
def test_old_or_edited_self_records_still_read(record: object) -> None:
    own = self_overhead_from_meta({} if record is None else {"self": record})
    assert own.dropped_calls == 0 and own.hook_ns_per_call is None and own.probes is None
    assert own == SelfOverhead(recorded=isinstance(record, dict))


def test_the_self_record_written_is_the_one_read_back() -> None:
    """The recorder writes ``meta['self']`` through the typed record (SelfOverhead.to_meta):
    reading it back gives the same record, on-disk names and JSON-safe values."""
    probes = ProbeBudget(
        spent_ns=2e6,
        share=0.004,
        by_probe={"nvml": {"runs": 3, "off": False}},
        budget_fraction=0.02,
    )
    own = SelfOverhead(
        dropped_calls=5,
        dropped_records=6,
        dropped_by_step={3: 2, 1: 3},
        lost_calls=1,
        forgotten_async=2,
        internal_errors=3,
        write_errors=4,
        journal_write_errors=5,
        flush_ns_total=7_000,
        flush_cpu_ns_total=6_000,
        hook_ns_per_call=1100,
        ring_records=65536,
        native_hooks=True,
        probes=probes,
        recorded=True,
    )
    meta = json.loads(json.dumps({"self": own.to_meta()}))
    assert list(meta["self"]["dropped_by_step"]) == ["1", "3"]
    assert self_overhead_from_meta(meta) == own
    assert self_overhead_from_meta({"self": SelfOverhead().to_meta()}) == SelfOverhead(
        recorded=True
    )


def test_every_table_counter_has_a_kind_and_gauges_are_what_a_process_holds() -> None:
    """A counter's unit and kind are two columns of one table: every key has both, and
    is_gauge reads the kind (held or level), not name patterns."""
    from wsprof.contracts import counters as c

    for units, kinds in (
        (c.CUDA_KEYS, c.CUDA_KINDS),
        (c.NVML_GPU_KEYS, c.NVML_GPU_KINDS),
        (c.PROC_KEYS, c.PROC_KINDS),
        (c.GC_GEN_KEYS, c.GC_GEN_KINDS),
    ):
        assert set(units) == set(kinds)
    held = [c.cuda_counter(0, "segment.all.current"), c.proc_counter("rss_bytes"), "my.pool"]
    assert all(c.is_gauge(n) for n in [*held, c.nvml_gpu_counter(1, c.NVML_UTIL_PCT)])
    not_held = [
        c.cuda_counter(0, "num_device_alloc"),
        "cuda0.num_ooms",  # beyond the table: an allocator event count all the same
        c.cuda_counter(0, c.CUDA_TOTAL_BYTES),
        c.proc_counter("host_total_bytes"),  # the host's size, recorded once
        c.gc_gen_counter(0, "count"),
        c.probe_cost_counter("cuda"),
    ]
    assert not [n for n in not_held if c.is_gauge(n)]
    assert c.counter_kind("cuda0.allocation.all.peak") is c.CounterKind.HELD
