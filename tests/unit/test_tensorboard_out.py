"""``wsprof export --format tensorboard`` and ``wsprof watch --tensorboard``.

Real run folders written by :class:`~wsprof.trace.writer.TraceWriter` (the benchmarks'
generators), exported by the real CLI (a child process where the brief is "as a user runs it"),
read back with TensorBoard's own reader (``EventAccumulator``) and held against ``wsprof analyze
--format json`` of the same folder. Not marked pure: they import tensorboard."""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import CASES, REPO, load_script
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from wsprof.analysis.live import LiveRun
from wsprof.cli import main
from wsprof.report.tensorboard_out import (
    INSTALL_HINT,
    MARKER,
    SPAN_NAME,
    VERDICT_TAG,
    TensorBoardOut,
    run_name,
    tag_of,
    verdict_text,
)
from wsprof.report.watch import verdict_key

MANY = load_script("bench_many_ranks")
WATCH_BENCH = load_script("bench_watch")
STEPS = 12
RANKS = 3
#: The run's ranks as TensorBoard runs.
RUNS = [f"rank{r}" for r in range(RANKS)]


def _wsprof(*args: str, block_tensorboard: bool = False) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process; ``block_tensorboard``: as where the extra is not
    installed (``import tensorboard`` fails, as it does without the package)."""
    block = "sys.modules['tensorboard'] = None; " if block_tensorboard else ""
    code = f"import sys; {block}from wsprof.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip


def _events(folder: Path) -> EventAccumulator:
    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _scalars(ea: EventAccumulator, tag: str) -> dict[int, float]:
    """step -> value of ``tag``; each step once (a step written twice would be a bug)."""
    events = ea.Scalars(tag)
    steps = [e.step for e in events]
    assert steps == sorted(set(steps)), (tag, steps)
    return {e.step: e.value for e in events}


def _f32(values: dict[int, Any]) -> dict[int, float]:
    """What a TensorBoard scalar holds of each value (a 32-bit float), None and NaN left out."""
    return {
        k: float(np.float32(v)) for k, v in values.items() if v is not None and math.isfinite(v)
    }


def _texts(ea: EventAccumulator) -> list[tuple[int, str]]:
    out = []
    for e in ea.Tensors(VERDICT_TAG):
        assert e.tensor_proto.dtype == 7  # DT_STRING
        out.append((e.step, e.tensor_proto.string_val[0].decode("utf-8")))
    return out


def _event_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "tfevents" in p.name)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 3-rank run (rank 2's wrapper grows), its export and what ``wsprof analyze`` says."""
    base = tmp_path_factory.mktemp("tb")
    run = base / "run"
    MANY.generate_run(
        str(run), n_ranks=RANKS, calls_per_rank=STEPS * 20, steps=STEPS, outliers=(2,),
        growth_us=2000.0,
    )  # fmt: skip
    out = base / "tb"
    res = _wsprof("export", str(run), "--format", "tensorboard", "-o", str(out))
    assert res.returncode == 0, res.stderr
    doc = _wsprof("analyze", str(run), "--format", "json")
    text = _wsprof("analyze", str(run))
    return {
        "run": run,
        "out": out,
        "stdout": res.stdout,
        "doc": json.loads(doc.stdout),
        "text": text.stdout,
    }


# --------------------------------------------------------------------------- export


def test_export_is_one_run_per_rank_under_the_folder(exported: dict[str, Any]) -> None:
    out: Path = exported["out"]
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, *RUNS])
    for name in RUNS:
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o700
        assert len(_event_files(out / name)) == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    (line,) = exported["stdout"].splitlines()
    assert line.startswith(f"{out}: ") and "3 run(s) (rank0, rank1, rank2)" in line


def test_the_primarys_scalars_are_analyzes_series(exported: dict[str, Any]) -> None:
    doc = exported["doc"]
    ea = _events(exported["out"] / "rank0")
    tags = set(ea.Tags()["scalars"])
    names = [s["name"] for s in doc["series"]]
    # the judged series, counters and op latencies included, each under wsprof/<its name>
    assert {"weight_sync_s", "weight_sync_bytes", "weight_sync_busbw"} <= set(names)
    assert any(n.startswith("counter:") for n in names)
    assert any(n.startswith("median_us:") for n in names)
    assert {tag_of(n) for n in names} <= tags
    assert all(t.startswith("wsprof/") for t in tags)
    for s in doc["series"]:
        want = _f32(dict(zip(s["steps"], s["values"])))
        assert want and _scalars(ea, tag_of(s["name"])) == want, s["name"]
    # the step rows' numbers beside them: the sync's whole span and the wire per step
    steps = doc["steps"]
    assert _scalars(ea, tag_of(SPAN_NAME)) == _f32({s["step"]: s["weight_sync_s"] for s in steps})
    wire = {s["step"]: s["wire"] for s in steps}
    assert _scalars(ea, "wsprof/weight_sync_bytes") == _f32(
        {k: w["bytes"] for k, w in wire.items()}
    )
    assert _scalars(ea, "wsprof/weight_sync_algbw") == _f32(
        {k: w["algbw_bytes_per_s"] for k, w in wire.items()}
    )
    assert _scalars(ea, "wsprof/collective_calls") == _f32({s["step"]: s["n_calls"] for s in steps})


def test_every_ranks_weight_sync_is_analyzes_per_rank(exported: dict[str, Any]) -> None:
    doc = exported["doc"]
    assert [run_name(r["label"]) for r in doc["ranks"]] == RUNS
    for r in doc["ranks"]:
        ea = _events(exported["out"] / run_name(r["label"]))
        for key in ("weight_sync_s", "step_s", "between_layers_s"):
            want = _f32(dict(zip(r["steps"], r[key])))
            assert len(want) == STEPS and _scalars(ea, tag_of(key)) == want, (r["label"], key)
    # rank 2's sync grows, the others' do not: the curves are each rank's own
    sync = {n: _scalars(_events(exported["out"] / n), "wsprof/weight_sync_s") for n in RUNS}
    assert sync["rank2"][STEPS - 1] > 5 * sync["rank0"][STEPS - 1]
    # only the primary carries the analysis's own series and the verdict
    others = set(_events(exported["out"] / "rank1").Tags()["scalars"])
    assert not any(":" in t for t in others)
    assert _events(exported["out"] / "rank1").Tags()["tensors"] == []


def test_wall_times_are_the_steps_ends_on_the_wall_clock(exported: dict[str, Any]) -> None:
    ea = _events(exported["out"] / "rank0")
    walls = {e.step: e.wall_time for e in ea.Scalars("wsprof/step_s")}
    first_end = walls[0] - MANY.RUN_UNIX_NS / 1e9  # the generator's first step starts there
    steps = _scalars(ea, "wsprof/step_s")
    assert first_end == pytest.approx(steps[0], abs=0.01)
    assert all(walls[k + 1] > walls[k] for k in range(STEPS - 1))


def test_the_verdict_and_diagnoses_are_a_text_summary(exported: dict[str, Any]) -> None:
    doc = exported["doc"]
    assert doc["verdict"]["status"] == "problems" and doc["diagnoses"]
    ea = _events(exported["out"] / "rank0")
    assert ea.Tags()["tensors"] == [VERDICT_TAG]
    assert ea.summary_metadata[VERDICT_TAG].plugin_data.plugin_name == "text"
    ((step, text),) = _texts(ea)
    assert step == STEPS - 1
    verdict = next(ln for ln in exported["text"].splitlines() if ln.startswith("VERDICT: "))
    assert f"    {verdict}\n" in text
    for d in doc["diagnoses"]:
        assert f"{d['id']} [{d['severity']}]" in text
    # a Markdown code block: every line indented, so no name in it can end the block
    assert all(ln.startswith("    ") for ln in text.splitlines() if ln.strip())


def test_a_second_export_replaces_the_first(exported: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "tb"
    shutil.copytree(exported["out"], out)
    (out / "rank0" / "notes.txt").write_text("mine\n")
    assert main(["export", str(exported["run"]), "--format", "tensorboard", "-o", str(out)]) == 0
    for name in RUNS:
        (events,) = _event_files(out / name)
        assert events not in _event_files(exported["out"] / name)  # a new file, the old gone
    assert (out / "rank0" / "notes.txt").read_text() == "mine\n"  # not ours: left
    ea = _events(out / "rank0")
    assert len(_scalars(ea, "wsprof/weight_sync_s")) == STEPS and len(_texts(ea)) == 1


@pytest.mark.parametrize("kind", ["foreign", "link", "shared", "file"])
def test_a_folder_that_is_not_ours_to_write_is_refused(
    exported: dict[str, Any], tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    if kind == "foreign":  # the user's own folder with other files: never mixed into
        out.mkdir(mode=0o700)
        (out / "train.log").write_text("loss 1.0\n")
        expect = "holds no earlier wsprof TensorBoard output"
    elif kind == "link":
        out.symlink_to(target)
        expect = "is a symbolic link; not written through it"
    elif kind == "shared":
        out.mkdir()
        out.chmod(0o777)
        expect = "writable by group or others"
    else:
        out.write_text("x\n")
        expect = "exists and is not a folder"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    rc = main(["export", str(exported["run"]), "--format", "tensorboard", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"wsprof: error: {out}") and expect in err, err
    assert "--allow-shared-out" not in err and "-o" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_without_the_extra_one_line_says_how_to_install(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "tb"
    for args in (
        ["export", str(exported["run"]), "--format", "tensorboard", "-o", str(out)],
        ["watch", str(exported["run"]), "--once", "--tensorboard", str(out)],
    ):
        res = _wsprof(*args, block_tensorboard=True)
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.startswith("wsprof: error: TensorBoard output needs the tensorboard")
        assert f"`{INSTALL_HINT}`" in res.stderr and res.stdout == ""
        assert not out.exists()


def test_a_training_logs_series_are_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "verl.log"
    log.write_text(
        "".join(
            f"step:{i} - timing_s/gen:{2 + 0.01 * i} - timing_s/update_weights:{0.5 + 0.1 * i} "
            f"- timing_s/step:{4 + 0.1 * i}\n"
            for i in range(1, 11)
        )
    )
    out = tmp_path / "tb"
    assert main(["analyze", str(log), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["export", str(log), "--format", "tensorboard", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "series"])
    ea = _events(out / "series")
    for s in doc["series"]:
        assert _scalars(ea, tag_of(s["name"])) == _f32(dict(zip(s["steps"], s["values"])))
    assert [k for k, _ in _texts(ea)] == [10]


def test_names_from_a_trace_are_made_safe() -> None:
    assert run_name("rank 0") == "rank0" and run_name("pid 4242") == "pid4242"
    assert run_name("../../etc\x1b[2J") == "_.._etc__2J"
    assert "/" not in run_name("a/b") and run_name("..") == "process"
    assert tag_of("counter:cuda0.reserved_bytes") == "wsprof/counter:cuda0.reserved_bytes"
    assert tag_of("counter:a b\x1b\n") == "wsprof/counter:a_b__"


# --------------------------------------------------------------------------- watch


def test_watch_appends_each_new_step_once_as_it_completes(tmp_path: Path) -> None:
    """``watch --tensorboard``'s sink, refresh by refresh on traces written while they are read:
    each step's scalars once per rank, readable after each flush, the verdict again only when
    it changes."""
    run, out = tmp_path / "run", tmp_path / "tb"
    steps, calls, growth_ns = 12, 20, 2_000_000
    schedule = MANY.step_schedule(steps, calls, growth_ns)
    writers = [
        WATCH_BENCH.RankWriter(str(run), r, 2, 2, growth_ns if r == 0 else 0, 1000 + r)
        for r in range(2)
    ]
    live = LiveRun(str(run))
    tb = TensorBoardOut(str(out), "--tensorboard")
    said: list[tuple[int, str]] = []  # (step, text) at each verdict change
    key: object = None
    try:
        for k0 in range(0, steps, 4):
            for w in writers:
                w.write(schedule, k0, k0 + 4, calls)
            snap = live.refresh()
            assert tb.add(snap.analysis) > 0
            tb.flush()
            if verdict_key(snap.analysis) != key:
                key = verdict_key(snap.analysis)
                said.append((k0 + 3, verdict_text(snap.analysis)))
            for label, name in (("rank 0", "rank0"), ("rank 1", "rank1")):
                pa = next(p for p in snap.analysis.processes if p.label == label)
                got = _scalars(_events(out / name), "wsprof/weight_sync_s")
                assert got == _f32({r.step: r.own_sync_s for r in pa.steps})
                assert sorted(got) == list(range(k0 + 4))
            # nothing new: nothing written
            assert tb.add(live.refresh().analysis) == 0
        assert _texts(_events(out / "rank0")) == said
        assert len(said) >= 2  # inconclusive at first, then rank 0's growing sync
        assert snap.analysis.verdict.status == "problems"
    finally:
        tb.close()
        live.close()
        for w in writers:
            w.close()
    assert sorted(os.listdir(out)) == sorted([MARKER, "rank0", "rank1"])


def test_watch_once_writes_what_export_writes(exported: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "tb"
    res = _wsprof("watch", str(exported["run"]), "--once", "--tensorboard", str(out))
    assert res.returncode == 0, res.stderr
    for name in RUNS:
        live, whole = _events(out / name), _events(exported["out"] / name)
        assert set(live.Tags()["scalars"]) >= {
            t for t in whole.Tags()["scalars"] if not t.startswith("wsprof/median_us:")
        }
        for tag in ("wsprof/weight_sync_s", "wsprof/step_s", "wsprof/weight_sync_bytes"):
            assert _scalars(live, tag) == _scalars(whole, tag), (name, tag)
    verdict = next(ln for ln in exported["text"].splitlines() if ln.startswith("VERDICT: "))
    ((_, text),) = _texts(_events(out / "rank0"))
    assert f"    {verdict}\n" in text


def test_a_second_export_leaves_event_files_wsprof_did_not_write(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "tb"
    shutil.copytree(exported["out"], out)
    mine = out / "myrun" / "events.out.tfevents.1.myhost"
    mine.parent.mkdir()
    shutil.copyfile(_case_event_file(), mine)  # the user's own run, put beside wsprof's
    (out / "empty").mkdir()
    assert main(["export", str(exported["run"]), "--format", "tensorboard", "-o", str(out)]) == 0
    assert mine.read_bytes() == _case_event_file().read_bytes()
    assert (out / "empty").is_dir()
    for name in RUNS:
        (events,) = _event_files(out / name)  # wsprof's own: replaced
        assert events not in _event_files(exported["out"] / name)


def _case_event_file() -> Path:
    """An event file another writer (slime's SummaryWriter) wrote."""
    return next(
        p
        for p in sorted((CASES / "tensorboard").rglob("*"))
        if p.is_file() and p.name.startswith("events.out.tfevents.")
    )
