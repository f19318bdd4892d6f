"""torch's Flight Recorder on real gloo jobs (issue 30): what c10d issued from C++ recorded under
``wsprof run`` (:mod:`wsprof.capture.flight`), entries the ring overwrote counted, and dumps
written at a hang read by ``wsprof analyze`` (:mod:`wsprof.trace.flight_dumps`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from helpers import TARGETS, run_ranks
from test_run import wsprof_run

from wsprof.analysis.run import analyze_path
from wsprof.demo.ports import free_port
from wsprof.trace.reader import read_trace

WORLD = 3
DDP_STEPS = 6


def _torchrun(out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(WORLD),
        "--master-port",
        str(free_port()),
        str(TARGETS / "ddp_flight.py"),
        str(out),
        f"--steps={DDP_STEPS}",
    ]


def test_ddp_reducer_all_reduces_are_recorded_with_their_bytes(tmp_path: Path) -> None:
    """Every collective DDP's C++ reducer issued is in the trace (layer ``c10d``, its bytes,
    its step), as many as torch.profiler's ``c10d::`` events say; coverage is complete; the
    training's results are bit-identical with and without wsprof."""
    bare, patched = tmp_path / "bare", tmp_path / "patched"
    bare.mkdir()
    patched.mkdir()
    res = subprocess.run(_torchrun(bare), capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    res = wsprof_run(tmp_path / "run", *_torchrun(patched))
    assert res.returncode == 0, res.stderr[-3000:]
    for rank in range(WORLD):
        without = json.loads((bare / f"result-{rank}.json").read_text())
        got = json.loads((patched / f"result-{rank}.json").read_text())
        assert got["sha256"] == without["sha256"]
        trace = read_trace(got["trace"])
        calls = trace.calls
        c10d = calls.layer == "c10d"
        assert trace.meta["flight"]["lost"] == 0 and trace.meta["flight"]["waiting"] == 0
        for step, truth in enumerate(got["steps"]):
            in_step = calls.step == step
            reduces = c10d & in_step & (calls.op == "all_reduce")
            # no hook sees an all_reduce in this job: each one is the reducer's, from c10d
            assert int(reduces.sum()) == truth["c10d::allreduce_"], (rank, step)
            assert int(calls.bytes[reduces].sum()) == got["grad_bytes"], (rank, step)
            # broadcasts: the push (hooked) plus DDP's own from C++ after its first step
            seen = Counter(calls.op[in_step].tolist())
            assert seen["broadcast"] == truth["c10d::broadcast_"], (rank, step)
            assert int((~c10d & in_step & (calls.op == "broadcast")).sum()) == got["params"]
    analysis = analyze_path(str(tmp_path / "run"))
    cov = analysis.coverage
    assert cov is not None and cov.status == "complete", cov.lines()
    g0 = next(g for g in cov.groups if g.rank == 0)
    assert g0.flight > 0 and "from c10d's Flight Recorder" in g0.statement
    # the Perfetto export shows them, named by c10d
    out = tmp_path / "trace.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wsprof",
            "export",
            str(tmp_path / "run"),
            "--format",
            "perfetto",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    named = [e for e in events if e.get("args", {}).get("layer") == "c10d"]
    assert {e["args"]["api"] for e in named} >= {"gloo:all_reduce"}


def test_entries_the_ring_overwrote_are_counted_as_lost(tmp_path: Path) -> None:
    """A ring of 3 entries and 5 collectives a step: what it overwrote before wsprof read it
    is counted, and the coverage audit says so instead of calling the run complete."""
    run_ranks(
        TARGETS / "ddp_unseen.py",
        2,
        str(tmp_path),
        "--steps=6",
        env={"TORCH_FR_BUFFER_SIZE": "3"},
    )
    res = json.loads((tmp_path / "result-0.json").read_text())
    flight = read_trace(res["trace"]).meta["flight"]
    assert flight["lost"] > 0
    # every entry of the process is read, kept as recorded or matched, or counted lost
    assert flight["entries"] + flight["lost"] >= res["issued"] - 2  # init's barrier: before
    cov = analyze_path(str(tmp_path)).coverage
    assert cov is not None and cov.status == "incomplete"
    g0 = next(g for g in cov.groups if g.rank == 0)
    assert g0.flight_lost == flight["lost"]
    assert "overwritten before wsprof read them (raise TORCH_FR_BUFFER_SIZE" in g0.statement


def test_dumps_at_a_hang_name_the_rank_that_never_arrived(tmp_path: Path) -> None:
    """Ranks 0 and 1 block in an all_reduce rank 2 never issues; each rank's dump, written
    while blocked, read by ``wsprof analyze`` (pickle and JSON alike)."""
    run_ranks(TARGETS / "flight_hang.py", WORLD, str(tmp_path), timeout=90)
    for folder in ("fr_dumps", "fr_dumps_json"):
        proc = subprocess.run(
            [sys.executable, "-m", "wsprof", "analyze", str(tmp_path / folder), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode in (0, 1), proc.stderr
        doc = json.loads(proc.stdout)
        [hang] = [f for f in doc["findings"] if f["kind"] == "collective_hang"]
        assert hang["severity"] == "critical"
        ev = hang["evidence"]
        assert (ev["waiting_ranks"], ev["missing_ranks"]) == ([0, 1], [2])
        assert (ev["op"], ev["collective_seq"]) == ("all_reduce", 10)
        # rank 2 dumped right after #9: gloo may not have retired it yet
        [behind] = ev["behind"]
        assert behind.startswith("rank 2: last issued all_reduce #9 ("), behind
        assert 1.0 <= ev["waited_s"] < 30
        assert hang["title"].startswith("rank 2 never arrived at all_reduce #10 of group 0")
    text = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(tmp_path / "fr_dumps")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    assert "rank 2 never arrived at all_reduce #10 of group 0" in " ".join(text.split())
