"""What each weight sync put on the wire (:mod:`wsprof.analysis.wire`) and the link it is held
against (:mod:`wsprof.analysis.link_limit`), on hand-built calls and metas: NCCL tests' sizes
and bus factors, the union of overlapping async calls, barriers and object collectives, the
limit's choice and its unknowns; and the wire rules on hand-built facts."""

from __future__ import annotations

from typing import Any

import pytest
import rule_kit

from wsprof.analysis.headline import headline_of
from wsprof.analysis.link_limit import link_limit
from wsprof.analysis.model import Severity, StepRow
from wsprof.analysis.rules.wire import SyncWireRule
from wsprof.analysis.wire import bus_factor, sync_backends, whole_bytes, with_wire
from wsprof.contracts.series import SYNC_BYTES, WEIGHT_SYNC_S
from wsprof.contracts.units import Unit, fmt_bytes_decimal, fmt_rate
from wsprof.trace.model import CallTable, Span

pytestmark = pytest.mark.pure

MS = 1_000_000  # ns
META: dict[str, Any] = {
    "groups": [
        {"name": "0", "size": 4, "backend": "nccl"},
        {"name": "push", "size": 3, "backend": "gloo"},
    ]
}


def _call(
    t0_ms: float,
    t1_ms: float,
    op: str,
    nbytes: int,
    api: str = "dist.broadcast",
    grp: str = "0",
    layer: str = "api",
    done_ms: float | None = None,
) -> tuple[Any, ...]:
    t0, t1 = int(t0_ms * MS), int(t1_ms * MS)
    return (
        t0,
        t1,
        0,
        1,
        1,
        op,
        api,
        layer,
        nbytes,
        "float32",
        grp,
        done_ms is not None,
        -1,
        0,
        None,
        None,
    )


def _table(rows: list[tuple[Any, ...]], done: list[float | None]) -> CallTable:
    t = CallTable.from_rows(rows)
    for i, d in enumerate(done):
        if d is not None:
            t.t_done_ns[i] = int(d * MS)
    return t


def _sync(calls: CallTable, lo_ms: float, hi_ms: float) -> StepRow:
    (row,) = rule_kit.step_rows([1.0])
    row = StepRow(
        **{**row.__dict__, "sync_start_ns": int(lo_ms * MS), "weight_sync_s": (hi_ms - lo_ms) / 1e3}
    )
    (out,) = with_wire([row], calls, [], META)
    assert out.wire is not None
    return out


def test_bus_factors_are_nccl_tests() -> None:
    # nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n; allgather, reducescatter, alltoall
    # (n-1)/n; broadcast, reduce 1.
    assert bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_factor("all_gather_into_tensor", 4) == pytest.approx(0.75)
    assert bus_factor("reduce_scatter_tensor", 8) == pytest.approx(0.875)
    assert bus_factor("all_to_all_single", 2) == pytest.approx(0.5)
    assert bus_factor("broadcast", None) == 1.0
    assert bus_factor("all_reduce", None) is None
    assert bus_factor("gather", 4) is None


def test_sizes_follow_the_argument_order_of_each_name() -> None:
    # dist.all_gather_into_tensor(output, input): the whole buffer was recorded.
    assert (
        whole_bytes("all_gather_into_tensor", "dist.all_gather_into_tensor", "api", 400, 4) == 400
    )
    # _c10d_functional.all_gather_into_tensor(input, ...): one rank's share, times n.
    assert (
        whole_bytes(
            "all_gather_into_tensor",
            "_c10d_functional.all_gather_into_tensor",
            "functional",
            100,
            4,
        )
        == 400
    )
    # ProcessGroup.allgather(outputs: list of lists, inputs): the inputs were recorded.
    assert whole_bytes("all_gather", "ProcessGroup.allgather", "backend", 100, 4) == 400
    # dist.reduce_scatter_tensor(output, input): the output, one rank's share.
    assert whole_bytes("reduce_scatter_tensor", "dist.reduce_scatter_tensor", "api", 100, 4) == 400
    # the Flight Recorder carries input sizes: a reduce-scatter's whole input.
    assert whole_bytes("reduce_scatter_tensor", "gloo:reduce_scatter", "c10d", 400, 4) == 400
    assert whole_bytes("all_gather", "gloo:all_gather", "c10d", 100, 4) == 400
    assert whole_bytes("broadcast", "dist.broadcast", "api", 123, None) == 123
    assert whole_bytes("all_gather", "ProcessGroup.allgather", "backend", 100, None) is None
    assert whole_bytes("broadcast", "dist.broadcast_object_list", "api", -1, 4) is None


def test_a_sync_sums_bytes_per_op_and_counts_overlapping_async_calls_once() -> None:
    rows = [
        # two async broadcasts overlapping: [10, 30) and [20, 40) -> 30 ms of wire
        _call(10, 11, "broadcast", 1000, done_ms=30),
        _call(20, 21, "broadcast", 3000, done_ms=40),
        # a barrier moves nothing
        _call(45, 50, "barrier", -1, api="dist.barrier"),
        # a gathered 4 x 250 bytes from the functional op's input
        _call(
            50,
            60,
            "all_gather_into_tensor",
            250,
            api="_c10d_functional.all_gather_into_tensor",
            layer="functional",
        ),
        # an object broadcast: unknown size, counted, not timed
        _call(60, 70, "broadcast", -1, api="dist.broadcast_object_list"),
        # after the sync: not in it
        _call(150, 160, "broadcast", 99_999),
    ]
    calls = _table(rows, [30, 40, None, None, None, None])
    row = _sync(calls, 0, 100)
    w = row.wire
    assert w is not None
    assert w.bytes == 1000 + 3000 + 1000
    assert w.n_calls == 4 and w.n_unknown == 1
    assert w.wire_s == pytest.approx(0.030 + 0.010)
    ops = {o.op: o for o in w.ops}
    assert ops["broadcast"].bytes == 4000 and ops["broadcast"].wire_s == pytest.approx(0.030)
    assert ops["all_gather_into_tensor"].bytes == 1000
    assert ops["all_gather_into_tensor"].bus_bytes == pytest.approx(750)
    assert w.bus_bytes == pytest.approx(4000 + 750)
    assert w.algbw == pytest.approx(5000 / 0.040)
    assert w.busbw == pytest.approx(4750 / 0.040)
    assert [o.op for o in w.ops] == ["broadcast", "all_gather_into_tensor"]  # most bytes first
    # the sync's own 100 ms less 40 ms of transfers
    assert row.outside_transfers_s == pytest.approx(0.060)
    assert w.groups == ("0",)
    assert sync_backends([row], META) == {"nccl"}


def test_a_call_is_clipped_to_the_sync_and_marked_phases_are_the_sync() -> None:
    calls = _table([_call(90, 91, "broadcast", 10, done_ms=130)], [130])
    assert _sync(calls, 0, 100).wire.wire_s == pytest.approx(0.010)  # type: ignore[union-attr]
    (row,) = rule_kit.step_rows([1.0])
    spans = [Span("phase", "weight_sync", 85 * MS, 95 * MS, row.step, 1)]
    (out,) = with_wire([row], calls, spans, META)
    assert out.wire is not None and out.wire.wire_s == pytest.approx(0.005)


def test_thinned_steps_and_steps_without_a_sync_get_no_wire() -> None:
    calls = _table([_call(10, 20, "broadcast", 10)], [None])
    (row,) = rule_kit.step_rows([1.0])
    bare = StepRow(**{**row.__dict__, "sync_start_ns": None, "weight_sync_s": None})
    assert with_wire([bare], calls, [], META)[0].wire is None
    synced = StepRow(**{**row.__dict__, "sync_start_ns": 0, "weight_sync_s": 0.1})
    thinned = {**META, "retention": {"first_thinned_step": 0, "last_thinned_step": 0}}
    assert with_wire([synced], calls, [], thinned)[0].wire is None


# ----------------------------------------------------------------------------- the link limit

LINKS: dict[str, Any] = {
    "nvlink": [
        {"gpu": 0, "links_up": 18, "version": 4, "gbytes_per_s": 450.0},
        {"gpu": 1, "links_up": 12, "version": 4, "gbytes_per_s": 300.0},
    ],
    "pcie": [{"gpu": 0, "gen": 5, "width": 16, "gbytes_per_s": 63.0}],
    "nics": [
        {
            "device": "mlx5_0",
            "port": 1,
            "state": "4: ACTIVE",
            "link_layer": "InfiniBand",
            "gbit_per_s": 400.0,
            "gbytes_per_s": 50.0,
        },
        {
            "device": "mlx5_1",
            "port": 1,
            "state": "1: DOWN",
            "link_layer": "InfiniBand",
            "gbit_per_s": 800.0,
            "gbytes_per_s": 100.0,
        },
    ],
    "why": {},
}


def _meta(links: dict[str, Any] | None = None, local: int = 8, size: int = 8) -> dict[str, Any]:
    world = {"size": size, "launcher": {"LOCAL_WORLD_SIZE": str(local)}}
    return {"world": world, **({"links": links} if links is not None else {})}


def test_the_limit_is_the_link_the_peers_share() -> None:
    one_host = link_limit(_meta(LINKS), {"nccl"}, {"node-a"})
    assert one_host.bytes_per_s == pytest.approx(300e9)  # the slowest GPU's NVLink
    assert one_host.name == "NVLink 4 x12"
    pcie = link_limit(_meta({**LINKS, "nvlink": []}), {"nccl"}, {"node-a"})
    assert pcie.bytes_per_s == pytest.approx(63e9) and pcie.name == "PCIe gen5 x16"
    across = link_limit(_meta(LINKS, local=8, size=16), {"nccl"}, {"node-a"})
    assert across.bytes_per_s == pytest.approx(50e9)  # the active port, not the down one
    assert "mlx5_0" in across.name and "400 Gb/s" in across.name
    hosts = link_limit(_meta(LINKS), {"nccl"}, {"node-a", "node-b"})
    assert hosts.bytes_per_s == pytest.approx(50e9)


def test_unknown_is_said_never_guessed() -> None:
    gloo = link_limit(_meta(LINKS), {"gloo"}, {"node-a"})
    assert gloo.bytes_per_s is None and gloo.name.startswith("unknown")
    assert "--link-gbps" in gloo.why
    assert link_limit(_meta(LINKS), set(), ()).bytes_per_s is None
    assert link_limit(_meta(None), {"nccl"}, ()).bytes_per_s is None
    nothing = {"nvlink": [], "pcie": [], "nics": [], "why": {"nvml": "NVMLError: no driver"}}
    none = link_limit(_meta(nothing), {"nccl"}, ())
    assert none.bytes_per_s is None and "no driver" in none.why
    # a stated limit wins, over gloo too; one stated at capture when none is stated here
    assert link_limit(_meta(LINKS), {"gloo"}, (), 12.5).bytes_per_s == pytest.approx(12.5e9)
    at_capture = _meta({**LINKS, "stated_gbytes_per_s": 7.0})
    assert link_limit(at_capture, {"nccl"}, ()).bytes_per_s == pytest.approx(7e9)


def test_rates_and_decimal_bytes_read_as_bandwidth_is_written() -> None:
    assert fmt_rate(7.5e9) == "7.5 GB/s" and fmt_rate(812e6) == "812 MB/s"
    assert fmt_bytes_decimal(14.2e9) == "14.2 GB" and fmt_bytes_decimal(96) == "96 B"
    assert Unit.parse("GB/s") is Unit.OTHER  # a scaled text is the family's, not the unit
    assert Unit.parse("bytes/s") is Unit.BYTES_PER_SECOND
    assert Unit.BYTES_PER_SECOND.fmt(45e9) == "45 GB/s"


# ----------------------------------------------------------------------------- rules


def _wired_steps(nbytes: list[int], sync_s: list[float], calls: int = 100) -> tuple[StepRow, ...]:
    from wsprof.analysis.model import SyncWire

    rows = rule_kit.step_rows([2.0] * len(nbytes), sync_s=sync_s)
    return tuple(
        StepRow(
            **{
                **r.__dict__,
                "wire": SyncWire(calls, b, float(b), s * 0.2, 0, (), ("0",)),
            }
        )
        for r, b, s in zip(rows, nbytes, sync_s)
    )


def _facts(nbytes: list[int], sync_s: list[float], calls: int = 100) -> Any:
    steps = _wired_steps(nbytes, sync_s, calls)
    pa = rule_kit.process(steps=steps)
    series = [
        rule_kit.judged(SYNC_BYTES, [float(b) for b in nbytes], unit=Unit.BYTES),
        rule_kit.judged(WEIGHT_SYNC_S, sync_s),
    ]
    head = headline_of(pa, series, "run", [pa], link_limit({}, {"gloo"}, ()))
    return rule_kit.facts(series, [pa], headline=head)


def test_bytes_that_grow_are_a_finding_of_their_own() -> None:
    n = 10
    found = SyncWireRule().match(
        _facts([100_000_000 + 20_000_000 * i for i in range(n)], [1.0 + 0.2 * i for i in range(n)])
    )
    kinds = {f.kind: f for f in found}
    f = kinds["sync_bytes_growth"]
    assert f.severity == Severity.CRITICAL  # 100 MB -> 280 MB: more than doubled
    assert "100 MB -> 280 MB" in f.title
    assert "sync_bytes_flat" not in kinds


def test_a_sync_that_grows_at_flat_bytes_says_so_and_tiny_calls_are_named() -> None:
    n = 10
    found = SyncWireRule().match(
        _facts([50_000_000] * n, [1.0 + 0.2 * i for i in range(n)], calls=5000)
    )
    kinds = {f.kind: f for f in found}
    assert "sync_bytes_growth" not in kinds
    assert kinds["sync_bytes_flat"].severity == Severity.INFO
    assert "50 MB" in kinds["sync_bytes_flat"].title
    # 80% of each sync outside transfers (wire is 20% of it), the limit unknown
    assert "80% of each weight sync" in kinds["wire_not_the_limit"].title
    assert "5000 transfers of 10 kB" in kinds["tiny_transfers"].title


def test_the_headline_says_the_third_number() -> None:
    facts = _facts([14_200_000_000] * 5, [1.9] * 5)
    head = facts.headline
    text = head.wire_summary()
    assert text.startswith("14.2 GB per sync at ")
    assert "(link limit unknown: gloo over TCP)" in text
    assert "80% of the sync outside transfers" in text
    stated = headline_of(
        facts.primary,
        list(facts.series.values()),
        "run",
        [facts.primary],
        link_limit({}, {"gloo"}, (), 45.0),
    )
    assert stated.link_share == pytest.approx(stated.sync_bandwidth_median / 45e9)
    assert "of the 45 GB/s stated (--link-gbps) limit" in stated.wire_summary()


def test_a_logged_sync_size_is_the_third_number(tmp_path: Any) -> None:
    from wsprof.analysis.run import analyze_path
    from wsprof.contracts.phases import sync_size_series

    assert sync_size_series("perf/update_weights_gb") == "size"
    assert sync_size_series("weight_sync_bytes") == "size"
    assert sync_size_series("timing_s/update_weights_bandwidth") == "rate"
    assert sync_size_series("rollout/response_lengths") is None
    assert sync_size_series("perf/update_weights_time") is None
    csv = tmp_path / "run.csv"
    csv.write_text(
        "step,update_weights_time_s,update_weights_gb\n"
        + "".join(f"{i},{1.9 + 0.01 * i},14.2\n" for i in range(8))
    )
    head = analyze_path(str(csv)).headline
    assert head is not None
    assert head.sync_bytes_median == pytest.approx(14.2e9)
    assert "14.2 GB per sync" in (head.summary() or "")


def test_a_wrappers_time_before_the_backend_is_outside_transfers() -> None:
    # A call of 10 ms whose backend took the last 4 ms (a free-memory probe ran for 6 ms
    # before it): 4 ms on the wire, 6 ms outside transfers.
    row = list(_call(0, 10, "broadcast", 1_000_000))
    row[2] = 4 * MS  # backend_ns
    calls = _table([tuple(row)], [None])
    out = _sync(calls, 0, 10)
    assert out.wire is not None and out.wire.wire_s == pytest.approx(0.004)
    assert out.outside_transfers_s == pytest.approx(0.006)
