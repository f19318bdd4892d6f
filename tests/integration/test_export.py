"""``wsprof export``: Perfetto trace JSON from a real 2-rank gloo run, speedscope from sampled
stacks, the per-step CSV read back by ``wsprof analyze``, and bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TARGETS, run_ranks

from wsprof.analysis.run import analyze_path
from wsprof.trace.reader import read_run
from wsprof.trace.writer import TraceWriter

WSPROF = [sys.executable, "-c", "import sys; from wsprof.cli import main; sys.exit(main())"]
STEPS = 3


def wsprof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WSPROF, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "run"
    run_ranks(TARGETS / "counters_target.py", 2, str(out), str(STEPS), "10", "0.05")
    return out


def test_perfetto_has_a_track_per_process_and_thread_and_every_call(
    run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "trace.json"
    res = wsprof("export", str(run), "--format", "perfetto", "-o", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    assert doc["displayTimeUnit"] == "ms" and events
    assert {e["ph"] for e in events} == {"M", "X", "C"}
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["name"]
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0
        if e["ph"] == "C":
            assert isinstance(e["args"]["value"], float)
    traces = read_run(str(run))
    pids = {t.meta["pid"] for t in traces}
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert set(names) == pids and {n.split(" (")[0] for n in names.values()} == {"rank 0", "rank 1"}
    colls = [e for e in events if e.get("cat") == "collective"]
    assert len(colls) == sum(len(t.calls) for t in traces)
    bcast = [e for e in colls if e["args"]["api"] == "dist.broadcast"]
    assert bcast and all(
        e["args"]["bytes"] == 32 and e["args"]["phase"] == "weight_sync" for e in bcast
    )
    assert all(e["args"]["site"] and "counters_target.py" in e["args"]["site"] for e in bcast)
    steps = [e for e in events if e.get("cat") == "step"]
    assert len(steps) == 2 * STEPS
    # one run clock: the ranks' first broadcasts are the same collective, so they line up
    first = {pid: min(e["ts"] for e in bcast if e["pid"] == pid) for pid in pids}
    assert max(first.values()) - min(first.values()) < 200_000, first  # µs
    assert any(e["ph"] == "C" and e["name"] == "proc.rss_bytes" for e in events)


def test_csv_is_the_step_table_and_reads_back(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "steps.csv"
    res = wsprof("export", str(run), "--format", "csv", "-o", str(out))
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(out.open()))
    a = analyze_path(str(run))
    assert [int(r["step"]) for r in rows] == [s.step for s in a.primary.steps]  # type: ignore[union-attr]
    assert [float(r["weight_sync_s"]) for r in rows] == pytest.approx(
        [s.weight_sync_s for s in a.primary.steps]
    )  # type: ignore[union-attr]
    assert "counter:proc.rss_bytes" in rows[0]
    back = analyze_path(str(out))
    sync = [r for r in back.series if r.series.name == "weight_sync_s"][0]
    assert list(sync.series.values) == pytest.approx([float(r["weight_sync_s"]) for r in rows])


def test_speedscope_from_sampled_stacks(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    w = TraceWriter(str(p))
    w.set_meta({"pid": 5})
    w.write(
        {
            "stacks": [
                (0, json.dumps(["main (train.py:1)", "sync (train.py:9)"])),
                (1, json.dumps(["main (train.py:1)", "<script>x</script> (evil.py:3)"])),
            ],
            "samples": [(0, 10, 5, 7, 0, 30), (10, 20, 5, 7, 1, 12), (0, 10, 5, 8, 0, 4)],
        }
    )
    w.close()
    out = tmp_path / "s.json"
    res = wsprof("export", str(p), "--format", "speedscope", "-o", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    assert [f["name"] for f in frames] == ["main", "sync", "<script>x</script>"]
    assert frames[1] == {"name": "sync", "file": "train.py", "line": 9}
    profs = doc["profiles"]
    assert [p["name"] for p in profs] == ["pid 5 thread 7", "pid 5 thread 8"]
    assert profs[0]["samples"] == [[0, 1], [0, 2]] and profs[0]["weights"] == [30, 12]
    assert profs[0]["endValue"] == 42 and profs[1]["weights"] == [4]


def test_bad_exports_are_one_line_and_exit_2(run: Path, tmp_path: Path) -> None:
    cases = [
        (
            ["export", str(run), "--format", "speedscope", "-o", str(tmp_path / "s.json")],
            "no py-spy samples",
        ),
        (
            ["export", str(tmp_path / "nope"), "--format", "perfetto", "-o", str(tmp_path / "x")],
            "nope",
        ),
        (
            ["export", str(run), "--format", "perfetto", "-o", str(tmp_path / "no" / "dir" / "x")],
            "cannot write",
        ),
    ]
    for args, expect in cases:
        res = wsprof(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert res.stderr.startswith("wsprof: error: ") and res.stderr.count("\n") == 1
        assert expect in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "s.json.part").exists()
