"""TensorBoard log directories in (``wsprof/importers/tensorboard.py``, ``wsprof/inputs.py``).

The three published slime runs of ``shared/cases/tensorboard/`` against their
``expected.json``; event files written here by ``torch.utils.tensorboard.SummaryWriter`` the
way slime writes them (one writer per process, each in a timestamped folder: the train process
``perf/update_weights_time`` and ``train/*``, the rollout process ``perf/rollout_time``); and
damaged inputs: a file cut mid-record, a record with flipped bytes, a folder with no scalar.

Unit tier (not pure): it imports torch and tensorboard.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import helpers
import pytest
from torch.utils.tensorboard import SummaryWriter

from wsprof.analysis.kinds import ACCUMULATING_KINDS, series_kind
from wsprof.analysis.model import Analysis, Finding, VerdictStatus
from wsprof.analysis.run import analyze_path
from wsprof.contracts.series import STEP_S, WEIGHT_SYNC_S
from wsprof.errors import EXIT_USAGE, InputError
from wsprof.importers.logs import SERIES_KEYS
from wsprof.importers.tensorboard import load_tensorboard, read_event_file
from wsprof.inputs import LoadedSeries, load

CASES = helpers.CASES / "tensorboard"
EXPECTED = CASES / "expected.json"
RUNS = ("qwen3-4b-perf-test", "glm4-9b-perf-test", "slime-vs-verl-async-80g")
#: Severities that make a finding a warning or worse.
WARNING_OR_WORSE = frozenset({"warning", "critical"})
#: Steps of the written runs.
N_STEPS = 30


def _headline_name(key: str) -> str:
    """The series a framework key is read as (``perf/update_weights_time`` ->
    ``weight_sync_s``)."""
    return next(name for name, keys in SERIES_KEYS.items() if key in keys)


def _advice_on(findings: tuple[Finding, ...], metric: str) -> list[str]:
    return [
        f"{f.kind}: {f.title}"
        for f in findings
        if f.where == metric
        or metric in (f.evidence.as_dict().get("series"), f.evidence.as_dict().get("counter"))
    ]


def _expected() -> dict[str, dict[str, Any]]:
    helpers.require_cases(EXPECTED)
    out: dict[str, dict[str, Any]] = json.loads(EXPECTED.read_text())
    return out


@pytest.mark.parametrize("run", RUNS)
def test_published_slime_run(run: str) -> None:
    want = _expected()[run]
    helpers.require_cases(CASES / run)
    a = analyze_path(str(CASES / run))
    assert a.notes[0].startswith("read as TensorBoard event files: 2 file(s), slime tags")
    series = {r.series.name: r for r in a.series}
    for field, key in (("weight_sync", "weight_sync_key"), ("step", "step_key")):
        name = _headline_name(want[key])
        assert name in series, (run, name, sorted(series))
        v = series[name].verdict
        assert v.accumulating is want[field]["accumulating"], (run, name, v)
        assert v.shape in want[field]["shapes"], (run, name, v.shape, v.evidence)
    bad = [
        f"[{f.severity}] {f.kind}: {f.title}" for f in a.findings if f.severity in WARNING_OR_WORSE
    ]
    assert not (want["no_warning_findings"] and bad), bad
    for metric in want["never_leak_advice_on"]:
        assert metric in series, (run, metric, "not read")
        assert _advice_on(a.findings, metric) == [], (run, metric)
        assert series_kind(series[metric].series).kind not in ACCUMULATING_KINDS, (run, metric)
    assert a.verdict.status is VerdictStatus.NO_PROBLEM, a.verdict
    # train/* is per optimizer step in slime: named in a note, never a per-step series
    assert not [n for n in series if n.startswith("train/")]
    assert any(n.startswith("kept apart") and "train/loss" in n for n in a.notes), a.notes


def test_the_cases_folder_holds_three_runs_and_is_refused() -> None:
    helpers.require_cases(EXPECTED)
    with pytest.raises(InputError) as e:
        load(str(CASES))
    msg = str(e.value)
    assert "\n" not in msg and "3 TensorBoard runs found" in msg
    assert all(repr(r) in msg for r in RUNS), msg


def _write_slime_like(root: Path, sync_s: list[float], rollout_s: float = 40.0) -> Path:
    """Two writers as slime's two processes: each its own timestamped folder under ``root``."""
    train = SummaryWriter(str(root / "20260101_000010"))
    rollout = SummaryWriter(str(root / "20260101_000000"))
    for step, sync in enumerate(sync_s):
        rollout.add_scalar("rollout/step", step, step)
        rollout.add_scalar("perf/rollout_time", rollout_s + 0.3 * math.sin(step), step)
        rollout.add_scalar("rollout/response_lengths", 500 + 10 * math.cos(step), step)
        train.add_scalar("perf/update_weights_time", sync, step)
        train.add_scalar("perf/train_time", 20.0 + 0.2 * math.cos(step), step)
        train.add_scalar("perf/step_time", rollout_s + 20.0 + sync, step)
        for micro in range(4):  # train/* per optimizer step: 4 a rollout, another axis
            train.add_scalar("train/loss", 0.5 / (1 + step), step * 4 + micro)
    train.close()
    rollout.close()
    return root


def _series_of(path: Path) -> dict[str, Any]:
    loaded = load(str(path))
    assert isinstance(loaded, LoadedSeries) and loaded.imported.format == "tensorboard"
    return {s.name: s for s in loaded.imported.series}


def test_growing_sync_written_by_summary_writer_is_accumulating(tmp_path: Path) -> None:
    growing = [2.0 + 0.5 * k for k in range(N_STEPS)]
    a = analyze_path(str(_write_slime_like(tmp_path / "grow", growing)))
    v = {r.series.name: r for r in a.series}[WEIGHT_SYNC_S].verdict
    assert v.accumulating, v
    assert a.verdict.status is VerdictStatus.PROBLEMS, a.verdict


def test_flat_sync_twin_is_not_accumulating(tmp_path: Path) -> None:
    flat = [2.0 + 0.02 * math.sin(k) for k in range(N_STEPS)]
    a = analyze_path(str(_write_slime_like(tmp_path / "flat", flat)))
    v = {r.series.name: r for r in a.series}[WEIGHT_SYNC_S].verdict
    assert not v.accumulating, v
    assert not [f for f in a.findings if f.severity in WARNING_OR_WORSE]


def test_train_axis_is_kept_apart_and_steps_merge_across_writers(tmp_path: Path) -> None:
    sync = [1.0 + 0.01 * k for k in range(N_STEPS)]
    root = _write_slime_like(tmp_path / "run", sync)
    series = _series_of(root)
    assert "train/loss" not in series  # 120 points on train/step: never a per-step series
    assert "rollout/step" not in series  # the step axis itself is no metric
    assert series["rollout_s"].steps == tuple(range(N_STEPS))  # from the rollout writer
    # from the train writer; slime logs step k's sync at k+1: the first value is dropped
    assert series[WEIGHT_SYNC_S].steps == tuple(range(N_STEPS - 1))
    assert series[WEIGHT_SYNC_S].values[0] == pytest.approx(sync[1])
    assert series[STEP_S].steps[-1] == N_STEPS - 1
    notes = load_tensorboard(str(root)).notes
    assert any("kept apart" in n and "train/step" in n and "'train/loss'" in n for n in notes)


def _case_file(run: str, index: int) -> Path:
    folder = CASES / run
    helpers.require_cases(folder)
    return sorted(folder.glob("*/events.out.tfevents.*"))[index]


def test_truncated_file_is_read_up_to_its_last_complete_record(tmp_path: Path) -> None:
    src = _case_file("qwen3-4b-perf-test", 1)  # the train process: perf/update_weights_time
    whole = read_event_file(str(src))
    data = src.read_bytes()
    cut = tmp_path / "run" / "proc"
    cut.mkdir(parents=True)
    (cut / src.name).write_bytes(
        data[: len(data) - 5]
    )  # into the last record: its data checksum and a byte
    got = read_event_file(str(cut / src.name))
    assert got.truncated and not got.corrupt
    assert got.records == whole.records - 1
    imported = load_tensorboard(str(tmp_path / "run"))
    cut_notes = [n for n in imported.notes if "cut mid-record" in n]
    assert len(cut_notes) == 1 and src.name in cut_notes[0]
    assert any(s.name == WEIGHT_SYNC_S for s in imported.series)


def test_corrupt_record_is_skipped_and_counted(tmp_path: Path) -> None:
    src = _case_file("glm4-9b-perf-test", 1)
    whole = read_event_file(str(src))
    data = bytearray(src.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 4] = bytes(b ^ 0xFF for b in data[mid : mid + 4])
    run = tmp_path / "run" / "proc"
    run.mkdir(parents=True)
    (run / src.name).write_bytes(bytes(data))
    got = read_event_file(str(run / src.name))
    assert 1 <= got.corrupt <= 2 and not got.truncated and not got.lost_tail
    values = sum(len(v) for v in got.scalars.values())
    assert whole.records - 3 <= got.records <= whole.records
    assert sum(len(v) for v in whole.scalars.values()) - 3 <= values
    notes = load_tensorboard(str(tmp_path / "run")).notes
    assert any("corrupt record(s) skipped" in n and src.name in n for n in notes), notes


def test_a_folder_with_no_scalars_is_one_line(tmp_path: Path) -> None:
    w = SummaryWriter(str(tmp_path / "empty"))
    w.add_text("config", "lr=1e-6", 0)
    w.close()
    with pytest.raises(InputError) as e:
        load(str(tmp_path / "empty"))
    assert "no scalar" in str(e.value) and "\n" not in str(e.value)


def test_cli_on_a_folder_with_no_scalars_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "no-scalars"
    w = SummaryWriter(str(folder))
    w.add_text("config", "lr=1e-6", 0)
    w.close()
    before = sorted(os.listdir(folder))
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=helpers.REPO,
    )
    assert res.returncode == EXIT_USAGE, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no scalar" in lines[0], res.stderr
    assert "Traceback" not in res.stderr
    assert sorted(os.listdir(folder)) == before  # never writes into the input folder


def test_without_tensorboard_installed_the_answer_is_how_to_install_it() -> None:
    # a fresh interpreter in which the package cannot be imported (None in sys.modules)
    helpers.require_cases(CASES / RUNS[0])
    probe = (
        "import sys; sys.modules['tensorboard'] = None\n"
        "from wsprof.errors import InputError\n"
        "from wsprof.inputs import load\n"
        "try:\n"
        f"    load({str(CASES / RUNS[0])!r})\n"
        "except InputError as e:\n"
        "    print(e)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and "pip install 'wsprof[tensorboard]'" in lines[0], res.stdout


def test_run_folder_with_traces_is_still_a_run(tmp_path: Path) -> None:
    # event files beside a .wsprof trace: the folder stays a run folder
    src = _case_file("qwen3-4b-perf-test", 0)
    shutil.copy(src, tmp_path / src.name)
    (tmp_path / "rank0.wsprof").write_bytes(b"")
    assert not isinstance(load(str(tmp_path)), LoadedSeries)


def test_reading_never_writes_into_the_input(tmp_path: Path) -> None:
    # reading never writes into the input: a copy's folder holds the same files after
    helpers.require_cases(CASES / RUNS[0])
    copy = tmp_path / "copy"
    shutil.copytree(CASES / RUNS[0], copy)
    before = sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))
    a: Analysis = analyze_path(str(copy))
    assert a.series
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == before


# --------------------------------------------------------------------------- hostile folders


def test_a_fifo_named_like_an_event_file_is_not_waited_on(tmp_path: Path) -> None:
    root = _write_slime_like(tmp_path / "run", [2.0 + 0.1 * k for k in range(N_STEPS)])
    fifo = root / "20260101_000000" / "events.out.tfevents.0.fifo"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert fifo.name not in res.stdout
    with pytest.raises(InputError, match="not a regular file"):
        read_event_file(str(fifo))


def test_folders_nested_deeper_than_the_recursion_limit_are_walked(tmp_path: Path) -> None:
    deep = tmp_path / "run"
    deep.mkdir()
    for _ in range(sys.getrecursionlimit() + 100):  # os.walk recursed once a level
        deep = deep / "d"
        deep.mkdir(parents=False)  # one at a time: os.makedirs recurses too
    _write_slime_like(deep, [2.0 + 0.1 * k for k in range(N_STEPS)])
    try:
        series = load_tensorboard(str(tmp_path / "run")).series
        assert any(s.name == WEIGHT_SYNC_S for s in series)
    finally:
        # pytest's clean-up (shutil.rmtree) recurses once a level: empty the chain here,
        # deepest first, so that it never meets it
        stack, order = [str(tmp_path / "run")], []
        while stack:  # iterative: os.walk recurses too on Python 3.11
            top = stack.pop()
            order.append(top)
            for entry in os.scandir(top):
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    os.remove(entry.path)
        for top in reversed(order):
            os.rmdir(top)


def _scalars_plugin_event(step: int, dims: list[int]) -> bytes:
    """An event of one ``scalars``-plugin tensor of shape ``dims`` holding one float."""
    from tensorboard.compat.proto import (
        event_pb2,
        summary_pb2,
        tensor_pb2,
        tensor_shape_pb2,
        types_pb2,
    )

    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, float_val=[2.5])
    plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    value = summary_pb2.Summary.Value(
        tag="perf/step_time",
        tensor=tensor,
        metadata=summary_pb2.SummaryMetadata(plugin_data=plugin),
    )
    event = event_pb2.Event(step=step, summary=summary_pb2.Summary(value=[value]))
    return bytes(event.SerializeToString())


def test_a_tensor_declaring_a_huge_shape_is_never_allocated(tmp_path: Path) -> None:
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = tmp_path / "events.out.tfevents.1.h"
    with path.open("wb") as fh:
        writer = RecordWriter(fh)
        writer.write(_scalars_plugin_event(0, []))  # a scalar: read
        writer.write(_scalars_plugin_event(1, [1 << 40]))  # 4 TiB if filled from float_val
    got = read_event_file(str(path))
    assert got.scalars == {"perf/step_time": {0: 2.5}}
    assert got.other_summaries == 1


def test_records_read_under_one_folder_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wsprof.importers import tensorboard as tb_in

    root = _write_slime_like(tmp_path / "run", [2.0 + 0.1 * k for k in range(N_STEPS)])
    files = sorted(str(p) for p in root.rglob("events.out.tfevents.*"))
    first = read_event_file(files[0])
    monkeypatch.setattr(tb_in, "MAX_RECORDS_READ", first.records + 3)
    got, unread = tb_in._read_all(files, tb_in._TensorBoard())
    assert [f.records for f in got] == [first.records, 3] and unread == 0
    assert got[1].budget_left and not got[1].capped
    notes = load_tensorboard(str(root)).notes
    assert any("records read under one folder" in n for n in notes), notes
