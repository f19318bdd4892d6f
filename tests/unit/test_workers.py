"""``--workers``: the traces of a run digested in a pool of processes give the analysis of one
process, byte for byte in the JSON (issue 33), on runs of the many-ranks benchmark's generator;
a trace that cannot be read is skipped the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import load_script

from wsprof.analysis import run as run_module
from wsprof.analysis.digest import digest_trace
from wsprof.analysis.pool import AUTO_POOL_MIN_BYTES, default_workers, workers_for
from wsprof.analysis.run import analyze_loaded_run
from wsprof.cli import cli
from wsprof.inputs import LoadedRun, load
from wsprof.report.jsonout import to_dict
from wsprof.trace.reader import read_trace

BENCH = load_script("bench_many_ranks")
#: 6 ranks x 2,000 calls over 20 steps on 2 hosts; rank 4 slows.
SMALL: dict[str, Any] = {"n_ranks": 6, "calls_per_rank": 2_000, "steps": 20, "hosts": 2}


def _json(path: Path, workers: int) -> str:
    res = CliRunner().invoke(
        cli, ["analyze", str(path), "--format", "json", "--workers", str(workers)]
    )
    assert res.exit_code == 0, res.output
    return res.output


def test_pool_gives_the_json_of_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=(4,), growth_us=20.0)
    one = _json(tmp_path, 1)
    assert '"outlier_rank"' in one, "the run has a finding to compare"
    assert _json(tmp_path, 2) == one
    # The ranks' own series judged in the pool too (at any count, not only from 256 series).
    monkeypatch.setattr(run_module, "POOL_MIN_SERIES", 1)
    assert _json(tmp_path, 4) == one


def test_an_unreadable_trace_is_skipped_alike_by_the_pool(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=())
    bad = tmp_path / "zz-rank9.wsprof"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    by = {}
    for workers in (1, 3):
        run = load(str(tmp_path))
        assert isinstance(run, LoadedRun)
        a = analyze_loaded_run(run, workers=workers, keep_primary=False).analysis
        by[workers] = to_dict(a)
        assert len(a.unread) == 1 and "zz-rank9" in a.unread[0], a.unread
    assert by[1] == by[3]


def test_digest_holds_no_calls_and_keeps_what_the_run_needs(tmp_path: Path) -> None:
    """A digest releases the calls; what the run-level analysis reads from them is kept."""
    run = BENCH.generate_run(str(tmp_path), **SMALL, outliers=(4,), growth_us=20.0)
    t = read_trace(run.ranks[0].path)
    d = digest_trace(t, 7)
    assert d.index == 7 and d.n_calls == len(t.calls) > 0
    assert len(d.trace.calls) == 0
    assert d.pa.steps and d.op_meds and all(len(v) == len(d.pa.steps) for v in d.op_meds.values())
    assert d.last_step == max(s.step for s in t.spans)


def test_primary_trace_for_diff_is_read_again_with_its_calls(tmp_path: Path) -> None:
    BENCH.generate_run(str(tmp_path), **SMALL, outliers=())
    run = load(str(tmp_path))
    assert isinstance(run, LoadedRun)
    res = analyze_loaded_run(run, workers=2)
    assert res.primary_trace is not None and len(res.primary_trace.calls) > 0
    lean = analyze_loaded_run(run, keep_primary=False)
    assert lean.primary_trace is not None and len(lean.primary_trace.calls) == 0


def test_auto_workers_start_a_pool_only_for_large_runs(tmp_path: Path) -> None:
    small = [str(tmp_path / f"{i}.wsprof") for i in range(4)]
    for p in small:
        Path(p).write_bytes(b"x" * 1000)
    assert workers_for(small, None) == 1
    assert workers_for(small, 3) == 3
    assert workers_for(small, 16) == 4  # at most one per trace
    big = tmp_path / "big.wsprof"
    with open(big, "wb") as f:
        f.truncate(AUTO_POOL_MIN_BYTES)  # sparse: its size counts, not its blocks
    assert workers_for([str(big), *small], None) == min(default_workers(), 5)
    assert default_workers() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("bad", ["0", "-1", "x"])
def test_workers_must_be_a_positive_count(tmp_path: Path, bad: str) -> None:
    res = CliRunner().invoke(cli, ["analyze", str(tmp_path), "--workers", bad])
    assert res.exit_code == 2 and "--workers" in res.output
