"""One constructor of a process's analysis for ``wsprof analyze`` and ``wsprof watch``
(:func:`wsprof.analysis.process.process_analysis`): on a finished run folder, what watch keeps
exactly (per-op calls, time, bytes and API names, the number of calls, the per-step series)
equals what analyze derives from the whole traces."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import load_script

from wsprof.analysis.live import LiveRun
from wsprof.analysis.process import op_stats_of_sums, primary_key
from wsprof.analysis.run import analyze_path

MANY = load_script("bench_many_ranks")


def test_watch_builds_the_process_analysis_of_analyze_from_its_exact_totals(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    MANY.generate_run(str(run), n_ranks=3, calls_per_rank=900, steps=12, outliers=(1,))
    whole = {pa.rank: pa for pa in analyze_path(str(run)).processes}
    live = LiveRun(str(run))
    live.refresh()
    procs = {p.rank: p for p in live.procs.values()}
    assert sorted(procs) == sorted(whole) == [0, 1, 2]
    for rank, p in procs.items():
        pa, want = p.analysis(), whole[rank]
        assert pa.label == want.label and pa.step_source == want.step_source == "markers"
        assert pa.calls.n_total == want.calls.n_total == 900
        assert pa.sync_evidence == want.sync_evidence
        assert [(o.op, o.apis, o.n_calls, o.bytes_total) for o in pa.ops] == [
            (o.op, o.apis, o.n_calls, o.bytes_total) for o in want.ops
        ]
        assert [o.total_s for o in pa.ops] == pytest.approx([o.total_s for o in want.ops])
        # Watch released the calls: the per-call distribution is unknown, not made up.
        assert all(math.isnan(o.median_us) and math.isnan(o.p99_us) for o in pa.ops)
        assert pa.calls.index == () and pa.cost_model is None
        assert pa.sync_site == want.sync_site  # from running counts of the sync's call sites
    # The per-step series (rows, per-op medians, counters) have one home: the same values.
    primary = live._ordered()[0]
    live_series = {s.name: s for s in primary.series()}
    judged = {r.series.name: r.series for r in analyze_path(str(run)).series}
    medians = [n for n in judged if n.startswith("median_us:")]
    assert medians
    for name in medians:
        assert live_series[name].steps == judged[name].steps
        assert live_series[name].values == judged[name].values


def test_op_stats_of_sums_orders_as_op_stats_and_leaves_medians_unknown() -> None:
    stats = op_stats_of_sums(
        {"broadcast": [4, 2e9], "all_reduce": [10, 3e9], "barrier": [1, 2e9]},
        {"broadcast": {"dist.broadcast"}, "all_reduce": {"dist.all_reduce", "backend"}},
        {"broadcast": 1024},
    )
    assert [s.op for s in stats] == ["all_reduce", "barrier", "broadcast"]
    assert stats[0].apis == ("backend", "dist.all_reduce") and stats[0].total_s == 3.0
    assert stats[2].bytes_total == 1024 and stats[1].apis == () and stats[1].bytes_total == 0
    assert all(math.isnan(s.between_layers_median_us) for s in stats)


def test_primary_key_puts_steps_then_rank_then_most_calls_first() -> None:
    keys = {
        "no steps, rank 0": primary_key(False, 0, 100, 1),
        "rank 1": primary_key(True, 1, 100, 2),
        "unknown rank": primary_key(True, None, 500, 3),
        "rank 0 few calls": primary_key(True, 0, 10, 4),
        "rank 0 many calls": primary_key(True, 0, 20, 5),
    }
    assert sorted(keys, key=keys.__getitem__) == [
        "rank 0 many calls",
        "rank 0 few calls",
        "rank 1",
        "unknown rank",
        "no steps, rank 0",
    ]
