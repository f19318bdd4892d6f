"""Training logs (slime, verl, OpenRLHF, AReaL) and metric exports to per-step series.

Each log below is small and written for the purpose, in the shape the framework prints (checked
against its sources: slime ``train_metric_utils.py``, verl ``aggregate_logger.py``, OpenRLHF
``ppo_trainer.py``, AReaL ``stats_logger.py``), with Ray prefixes, ANSI colour codes and noise
lines mixed in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import wsprof.importers.logs as logs
from wsprof.analysis.run import analyze_path
from wsprof.cli import main
from wsprof.contracts.series import Series
from wsprof.errors import EXIT_USAGE, InputError
from wsprof.importers.logs import (
    clean_line,
    load_log,
    metric_unit,
    parse_log_lines,
    parse_table_row,
)
from wsprof.importers.metrics_csv import load_csv

pytestmark = pytest.mark.pure

ESC = "\x1b"
GROWING = (143.0, 363.0, 966.0, 1596.0)
FLAT = (143.0, 141.0, 144.0, 142.0)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _by_name(series: tuple[Series, ...]) -> dict[str, Series]:
    return {s.name: s for s in series}


# Line cleaning ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("(pid=1234) step:1 - a:1", "step:1 - a:1"),
        ("(RayTrainWorker pid=1234, ip=10.0.0.1) perf 2: {}", "perf 2: {}"),
        ("(TaskRunner pid=99) step:3 - a:2\n", "step:3 - a:2"),
        (f"{ESC}[36m(TaskRunner pid=99){ESC}[0m step:3 - a:2", "step:3 - a:2"),
        (f"{ESC}[32mINFO{ESC}[0m Train step 1/4 done.\r\n", "INFO Train step 1/4 done."),
        ("(pid=7) (WorkerDict pid=8, ip=1.2.3.4) x", "x"),
        ("step:1 - a:1 [repeated 3x across cluster]", "step:1 - a:1"),
        ("(raylet) something", "(raylet) something"),
    ],
)
def test_clean_line(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


# slime -----------------------------------------------------------------------------------------


def slime_log(sync_s: tuple[float, ...]) -> str:
    """A slime log: line ``perf N`` of the actor holds the sync that ran before rollout N, so
    ``sync_s[k]`` (the sync after training step k) is logged on line k+1; line 0 holds the
    initial sync (30.5 s)."""
    actor = f"{ESC}[36m(MegatronTrainRayActor pid=2211, ip=10.0.0.1){ESC}[0m"
    lines = ["[2025-08-01 10:00:00] arguments.py:88 - Using rollout batch size 128"]
    for n in range(len(sync_s) + 1):
        sync = 30.5 if n == 0 else sync_s[n - 1]
        lines += [
            f"(RolloutManager pid=2300) [2025-08-01 10:0{n}:00] rollout.py:512 - perf {n}: "
            f"{{'perf/rollout_time': {68.0 + n / 10}, 'perf/tokens_per_gpu_per_sec': 900.5}}",
            "Loading checkpoint shards: 100%|██████████| 4/4 [00:02<00:00,  1.9it/s]",
            f"{actor} [2025-08-01 10:0{n}:30] timer.py:30 - Timer update_weights end "
            f"(elapsed: {sync:.1f}s)",
            f"{actor} [2025-08-01 10:0{n}:31] train_metric_utils.py:45 - perf {n}: "
            f"{{'perf/update_weights_time': {sync}, 'perf/actor_train_time': {200 + n}.0, "
            f"'perf/step_time': {400 + n}.0, 'perf/actor_train_tok_per_s': 1234.5, "
            f"'perf/wait_time_ratio': 0.25}}",
        ]
    return "\n".join(lines) + "\n"


def test_slime_values_and_alignment(tmp_path: Path) -> None:
    imp = load_log(_write(tmp_path, "slime.log", slime_log(GROWING)))
    assert imp.format == "slime"
    s = _by_name(imp.series)
    # Line N holds the sync before rollout N: the sync after training step k is on line k+1.
    # The initial sync (30.5 s, line 0) is dropped; step 4's sync is logged on no line.
    assert s["weight_sync_s"].steps == (0, 1, 2, 3)
    assert s["weight_sync_s"].values == GROWING
    assert s["weight_sync_s"].unit_label == "s"
    assert s["rollout_s"].steps == (0, 1, 2, 3, 4)
    assert s["rollout_s"].values == (68.0, 68.1, 68.2, 68.3, 68.4)
    assert s["step_s"].values == (400.0, 401.0, 402.0, 403.0, 404.0)  # perf/step_time, not moved
    assert s["perf/actor_train_time"].steps == (0, 1, 2, 3, 4)
    assert s["perf/actor_train_time"].unit_label == "s"
    assert s["perf/actor_train_tok_per_s"].unit_label == ""  # a rate, not a time
    assert s["perf/wait_time_ratio"].unit_label == ""
    assert "perf/update_weights_time" not in s and "perf/rollout_time" not in s
    assert [x.name for x in imp.series][:3] == ["weight_sync_s", "rollout_s", "step_s"]
    assert any("perf/update_weights_time logged at step k+1" in n for n in imp.notes)


def test_slime_json_body_and_resumed_run() -> None:
    """JSON bodies read too; a run resumed at rollout 100 drops its first line's sync."""
    lines = [
        f'perf {n}: {{"perf/update_weights_time": {v}, "perf/rollout_time": 60}}'
        for n, v in ((100, 5.0), (101, 10.0), (102, 20.0))
    ]
    s = _by_name(parse_log_lines(lines, "x.log").series)
    assert s["weight_sync_s"].steps == (100, 101) and s["weight_sync_s"].values == (10.0, 20.0)
    assert s["rollout_s"].steps == (100, 101, 102)


# verl ------------------------------------------------------------------------------------------


def verl_log(sync_s: tuple[float, ...], key: str = "timing_s/update_weights") -> str:
    lines = [
        "(TaskRunner pid=67763) Using LocalLogger is deprecated.",
        "(TaskRunner pid=67763) step:0 - val-core/openai/gsm8k/reward/mean@1:0.45",
    ]
    for i, sync in enumerate(sync_s, start=1):
        lines.append(
            f"{ESC}[36m(TaskRunner pid=67763){ESC}[0m step:{i} - actor/pg_loss:-0.0123 - "
            f"actor/lr:1e-06 - critic/score/mean:np.float64(0.{i}) - "
            f"timing_s/gen:np.float64({68 + i}.5) - {key}:{sync} - timing_s/step:{300 + i}.25 - "
            f"timing_per_token_ms/gen:0.0{i} - response_length/clip_ratio:0.0 - "
            f"perf/throughput:1234.5 - actor/is_clipped:True"
        )
        lines.append(f"(WorkerDict pid=9, ip=10.0.0.2) INFO {i} weights loaded in 3.2s")
    lines.append("(TaskRunner pid=67763) wandb:    timing_s/update_weights ▁▂▅█")
    lines.append("(TaskRunner pid=67763) wandb:    timing_s/update_weights 1596.0")
    return "\n".join(lines) + "\n"


def test_verl_values(tmp_path: Path) -> None:
    imp = load_log(_write(tmp_path, "train.log", verl_log(GROWING)))
    assert imp.format == "verl"
    s = _by_name(imp.series)
    assert s["weight_sync_s"].steps == (1, 2, 3, 4)  # no shift: the step's own sync
    assert s["weight_sync_s"].values == GROWING
    assert s["rollout_s"].values == (69.5, 70.5, 71.5, 72.5)  # np.float64(...) unwrapped
    assert s["step_s"].values == (301.25, 302.25, 303.25, 304.25)
    assert s["critic/score/mean"].values == (0.1, 0.2, 0.3, 0.4)
    assert s["actor/pg_loss"].values == (-0.0123,) * 4
    assert s["actor/lr"].values == (1e-06,) * 4
    assert s["timing_per_token_ms/gen"].unit_label == "ms"
    assert s["val-core/openai/gsm8k/reward/mean@1"].steps == (0,)
    assert "actor/is_clipped" not in s  # booleans are not metrics
    assert s["perf/throughput"].unit_label == ""
    assert s["response_length/clip_ratio"].unit_label == ""


def test_verl_older_reshard_key() -> None:
    s = _by_name(
        parse_log_lines(verl_log(FLAT, key="timing_s/reshard").splitlines(), "x.log").series
    )
    assert s["weight_sync_s"].values == FLAT
    assert "timing_s/reshard" not in s


def test_duplicate_steps_keep_last_and_unsorted_steps_are_sorted() -> None:
    lines = [
        "step:3 - timing_s/update_weights:30 - timing_s/gen:5",
        "step:1 - timing_s/update_weights:10 - timing_s/gen:5",
        "step:2 - timing_s/update_weights:20",
        "step:2 - timing_s/update_weights:25",  # logged again (a resumed run): last wins
        "step:1 - timing_s/gen:nan",  # a missing value does not replace one
    ]
    s = _by_name(parse_log_lines(lines, "x.log").series)
    assert s["weight_sync_s"].steps == (1, 2, 3)
    assert s["weight_sync_s"].values == (10.0, 25.0, 30.0)
    assert s["rollout_s"].steps == (1, 3) and s["rollout_s"].values == (5.0, 5.0)


# OpenRLHF --------------------------------------------------------------------------------------


def openrlhf_log(sync_s: tuple[float, ...]) -> str:
    lines = [
        "[2025-08-01 10:00:00,001] [INFO] [launch.py:256:main] process 811 spawned",
        "Episode [1/1]:   0%|          | 0/4 [00:00<?, ?it/s]",
    ]
    for i, sync in enumerate(sync_s, start=1):
        lines.append(
            f"(PPOTrainer pid=811) [2025-08-01 10:0{i}:00] [INFO] ppo_trainer.py:512 - Global step "
            f"{i}: {{'policy_loss': -0.01, 'kl': 0.0012, 'reward': np.float64(0.{i}), "
            f"'response_length': 512.25, 'timing/make_experience': 80.5, "
            f"'timing/ppo_train': 120.0, 'timing/broadcast': {sync}, "
            f"'timing/generation': 68.{i}, 'timing/step_total': {400 + i}.0, "
            f"'generated_samples': ['hello', 'world'], 'lr': None}}"
        )
    return "\n".join(lines) + "\n"


def test_openrlhf_values(tmp_path: Path) -> None:
    imp = load_log(_write(tmp_path, "openrlhf.log", openrlhf_log(GROWING)))
    assert imp.format == "OpenRLHF"
    s = _by_name(imp.series)
    assert s["weight_sync_s"].steps == (1, 2, 3, 4) and s["weight_sync_s"].values == GROWING
    assert s["rollout_s"].values == (68.1, 68.2, 68.3, 68.4)
    assert s["step_s"].values == (401.0, 402.0, 403.0, 404.0)
    assert s["reward"].values == (0.1, 0.2, 0.3, 0.4)
    assert s["timing/ppo_train"].unit_label == "s"
    assert "lr" not in s and "generated_samples" not in s


# AReaL -----------------------------------------------------------------------------------------


def areal_log(sync_s: tuple[float, ...]) -> str:
    lines = ["20250801-10:00:00.001 Launcher INFO: starting trial"]
    for i, sync in enumerate(sync_s, start=1):
        lines += [
            f"20250801-10:0{i}:00.100 StatsLogger INFO: Epoch 1/1 Step {i}/4 Train step {i}/4 "
            "done.",
            "20250801-10:0{i}:00.101 StatsLogger INFO: Stats (1/1):",
            "20250801-10:0{i}:00.102 StatsLogger INFO: ",
            "╒═══════════════════════════╤════════════╤═════════════════════════╤════════════╕",
            f"│ ppo_actor/task_reward/avg │ 5.000{i}e-01 │ timeperf/rollout        │ "
            f"6.8{i}00e+01 │",
            "├───────────────────────────┼────────────┼─────────────────────────┼────────────┤",
            f"│ timeperf/train_step       │ 2.0000e+02 │ timeperf/update_weights │ {sync:.4e} │",
            "├───────────────────────────┼────────────┼─────────────────────────┼────────────┤",
            "│ ppo_actor/seq_len/avg     │ 5.1200e+02 │                         │            │",
            "╘═══════════════════════════╧════════════╧═════════════════════════╧════════════╛",
            f"(RemoteSGLangEngine pid=55) INFO: {i} requests served in 3 s",
        ]
    return "\n".join(lines) + "\n"


def test_areal_values(tmp_path: Path) -> None:
    imp = load_log(_write(tmp_path, "areal.log", areal_log(GROWING)))
    assert imp.format == "AReaL"
    s = _by_name(imp.series)
    assert s["weight_sync_s"].steps == (1, 2, 3, 4) and s["weight_sync_s"].values == GROWING
    assert s["rollout_s"].values == (68.1, 68.2, 68.3, 68.4)
    assert s["ppo_actor/task_reward/avg"].values == (0.50001, 0.50002, 0.50003, 0.50004)
    assert s["ppo_actor/seq_len/avg"].values == (512.0,) * 4
    assert s["timeperf/train_step"].unit_label == "s"
    assert "step_s" not in s


def test_areal_plain_and_pipe_rows() -> None:
    lines = [
        "Train step 1/2 done.",
        "timeperf/update_weights  12.5   timeperf/rollout  68",
        "| timeperf/train_step | 200 |",
        "epoch 3",  # no '/' in the key: not a row
        "Train step 2/2 done.",
        "  timeperf/update_weights\t13.5",
    ]
    s = _by_name(parse_log_lines(lines, "x.log").series)
    assert s["weight_sync_s"].values == (12.5, 13.5)
    assert s["rollout_s"].steps == (1,) and s["timeperf/train_step"].values == (200.0,)
    assert "epoch" not in s


@pytest.mark.parametrize(
    ("row", "pairs"),
    [
        ("| a/b | 1.5 | c | 2 |", {"a/b": 1.5, "c": 2.0}),
        ("│ a/b │ 1.5e+02 │  │  │", {"a/b": 150.0}),
        ("| name | value |", None),
        ("a/b 1 c/d x", None),
        ("a/b 1 c/d", None),
        ("a/b 1 c/d 2", {"a/b": 1.0, "c/d": 2.0}),
    ],
)
def test_table_row(row: str, pairs: dict[str, float] | None) -> None:
    assert parse_table_row(row) == pairs


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("weight_sync_s", "s"),
        ("timing_s/old_log_prob", "s"),
        ("timing/broadcast", "s"),
        ("timeperf/eval", "s"),
        ("perf/log_probs_time", "s"),
        ("perf/log_probs_tflops", ""),
        ("perf/max_memory_allocated_gb", "GB"),
        ("timing_s/generation_timing/topk_ratio", ""),
        ("actor/loss", ""),
        ("perf/time_per_step", "s"),
        ("global_seqlen/balanced_min", ""),
        ("timing_per_token_ms/gen", "ms"),
    ],
)
def test_metric_unit(key: str, unit: str) -> None:
    assert metric_unit(key) == unit


# Through the command line: the growth analysis judges the series ------------------------------

LOGS = {"slime": slime_log, "verl": verl_log, "openrlhf": openrlhf_log, "areal": areal_log}


def _sync_findings(out: str) -> list[dict[str, object]]:
    doc = json.loads(out)
    return [
        f
        for f in doc["findings"]
        if f["kind"] == "accumulating_slowdown" and f["evidence"]["series"] == "weight_sync_s"
    ]


@pytest.mark.parametrize("fmt", sorted(LOGS))
def test_analyze_reports_growing_sync_and_not_flat(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    grow = _write(tmp_path, "grow.log", LOGS[fmt](GROWING))
    assert main(["analyze", grow, "--format", "json"]) == 0
    found = _sync_findings(capsys.readouterr().out)
    assert len(found) == 1, found
    assert found[0]["evidence"]["first"] == 143.0 and found[0]["evidence"]["last"] == 1596.0
    flat = _write(tmp_path, "flat.log", LOGS[fmt](FLAT))
    assert main(["analyze", flat, "--format", "json"]) == 0
    assert _sync_findings(capsys.readouterr().out) == []


def test_counters_and_quality_metrics_of_a_healthy_log_get_no_advice(tmp_path: Path) -> None:
    """verl's step counter (+1 per step), epoch, a rising advantage maximum and per-token time,
    a falling loss: shown in the series, never a memory_growth or slowdown finding."""
    lines = [
        f"(TaskRunner pid=1) step:{i} - training/global_step:{i} - training/epoch:{i // 4} - "
        f"critic/advantages/max:{2.2 + 0.05 * i:.3f} - actor/pg_loss:{1.0 / i:.4f} - "
        f"timing_per_token_ms/values:{0.07 + 0.0004 * i:.5f} - "
        f"rollout/too_good_sample_ratio:{0.01 * i * i:.3f} - timing_s/step:{55 + i % 2}.1"
        for i in range(71, 81)
    ]
    a = analyze_path(_write(tmp_path, "healthy.log", "\n".join(lines) + "\n"))
    assert a.findings == (), [f.title for f in a.findings]
    kinds = {r.series.name: r.series.kind for r in a.series}
    assert kinds["training/global_step"] == "monotonic_counter"
    assert kinds["critic/advantages/max"] == "quality"
    assert kinds["timing_per_token_ms/values"] == "rate" and kinds["step_s"] == "duration"
    assert any(n.startswith("not judged for accumulation") for n in a.notes)


def test_memory_metric_of_a_log_still_grows(tmp_path: Path) -> None:
    lines = [
        f"step:{i} - perf/max_memory_reserved_gb:{20 + 1.0 * i + 0.01 * (i % 3)} - "
        f"training/global_step:{i}"
        for i in range(1, 9)
    ]
    a = analyze_path(_write(tmp_path, "leak.log", "\n".join(lines) + "\n"))
    assert [f.where for f in a.findings if f.kind == "memory_growth"] == [
        "perf/max_memory_reserved_gb"
    ]


def test_real_command_line_on_a_log(tmp_path: Path) -> None:
    path = _write(tmp_path, "train.log", verl_log(GROWING))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wsprof",
            "analyze",
            path,
            "--format",
            "json",
            "--fail-on",
            "critical",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert len(_sync_findings(r.stdout)) == 1
    assert any(n.startswith("read as a verl log") for n in json.loads(r.stdout)["notes"])


# Bad input: one line, exit 2 -------------------------------------------------------------------


def _one_line_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == EXIT_USAGE and out == ""
    assert err.startswith("wsprof: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and ";" in err
    return err


def test_no_recognisable_line_names_the_formats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "train.log", "INFO starting\nstep 3 took 4s\n(pid=1) loss 0.5\n")
    err = _one_line_error(["analyze", path], capsys)
    assert path in err
    for shape in ("perf N: {", "step:N - ", "Global step N: {", "Train step N/M done."):
        assert shape in err, shape


def test_step_lines_without_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "train.log", "perf 0: {'a': 'x'}\nperf 1: {'b': None}\n")
    err = _one_line_error(["analyze", path], capsys)
    assert "2 slime step line(s) but no numeric value" in err


@pytest.mark.parametrize(
    ("data", "expect"),
    [
        (b"\x00\x01\x02ELF", "a binary file"),
        (b"\x1f\x8b\x08\x00\x00\x00", "gzip-compressed"),
        (b"", "empty file"),
    ],
    ids=["binary", "gzip", "empty"],
)
def test_binary_gzip_or_empty_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, expect: str
) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(data)
    err = _one_line_error(["analyze", str(path)], capsys)
    assert expect in err and "neither a wsprof trace nor a CSV" in err


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "train.log", verl_log(FLAT))

    def refuse(*args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(logs, "open", refuse, raising=False)
    with pytest.raises(InputError, match="cannot read \\(Permission denied\\); check"):
        load_log(path)


def test_missing_file() -> None:
    with pytest.raises(InputError, match="no such file"):
        load_log("/nonexistent/train.log")


def test_undecodable_bytes_are_replaced(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"\xff\xfe junk\n\xffstep:1 - timing_s/update_weights:2.5\n")
    (s,) = load_log(str(path)).series
    assert s.name == "weight_sync_s" and s.values == (2.5,)


# Metric exports (W&B CSV) ----------------------------------------------------------------------


def test_wandb_history_csv(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "history.csv",
        (
            "_step,_runtime,rollout/step,perf/update_weights_time,perf/rollout_time,train/loss\n"
            "0,12.5,0,30.5,68.0,\n"
            "1,13.0,,,,0.71\n"
            "2,900.3,1,143,67.1,\n"
            "3,901.0,2,363,67.5,\n"
            "4,999.0,3,966,NaN,\n"
            "5,1200.0,4,1596,68.2,\n"
        ),
    )
    imp = load_csv(path)
    assert imp.format == "metrics-csv"
    s = _by_name(imp.series)
    assert s["weight_sync_s"].steps == (0, 1, 2, 3)  # slime's alignment, step = rollout/step
    assert s["weight_sync_s"].values == GROWING
    assert s["rollout_s"].steps == (0, 1, 2, 4)
    assert "_runtime" not in s and "train/loss" not in s  # its rows have no rollout/step


def test_wandb_panel_export_csv(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "panel.csv",
        (
            "Step,run-7 - timing_s/update_weights,run-7 - timing_s/update_weights__MIN,"
            "run-7 - timing_s/update_weights__MAX,run-8 - timing_s/update_weights\n"
            "3,966,960,970,1\n1,143,140,150,1\n2,363,360,370,1\n4,1596,1590,1600,1\n2,363,0,0,1\n"
        ),
    )
    imp = load_csv(path)
    (sync,) = imp.series
    assert sync.name == "weight_sync_s" and sync.steps == (1, 2, 3, 4) and sync.values == GROWING
    assert any("several columns" in n for n in imp.notes)


def test_verl_wandb_export_steps_by_training_global_step(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "verl.csv",
        ("_step,training/global_step,timing_s/update_weights\n0,1,5\n1,2,6\n2,3,7\n"),
    )
    s = _by_name(load_csv(path).series)
    assert s["weight_sync_s"].steps == (1, 2, 3)
    assert "training/global_step" not in s  # the step column, not a metric


def test_global_step_csv_keeps_other_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "m.csv", "global_step,timing/broadcast,kl,name\n1,5,0.1,a\n2,6,x,b\n")
    s = _by_name(load_csv(path).series)
    assert s["weight_sync_s"].values == (5.0, 6.0)
    assert s["kl"].steps == (1,) and "name" not in s


def test_plain_csv_is_read_as_before(tmp_path: Path) -> None:
    path = _write(tmp_path, "m.csv", "step,update_weights_time_s,weight_sync_s\n0,1,2\n1,3,4\n")
    imp = load_csv(path)
    assert imp.format == "csv"
    assert [s.name for s in imp.series] == ["update_weights_time_s", "weight_sync_s"]
    dup = _write(tmp_path, "d.csv", "step,sync_s\n0,1\n0,2\n")
    with pytest.raises(InputError, match="appears more than once"):
        load_csv(dup)


def test_wandb_csv_bad_step_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "h.csv", "_step,perf/update_weights_time\n0,1\nlast,2\n")
    err = _one_line_error(["analyze", path], capsys)
    assert "line 3, column '_step': 'last' is not a whole number" in err


def test_analyze_path_of_wandb_csv(tmp_path: Path) -> None:
    rows = "\n".join(f"{i},{v}" for i, v in enumerate(GROWING))
    a = analyze_path(_write(tmp_path, "h.csv", f"_step,timeperf/update_weights\n{rows}\n"))
    assert [
        f.evidence.as_dict()["series"] for f in a.findings if f.kind == "accumulating_slowdown"
    ] == ["weight_sync_s"]


# Fuzz: random lines and bytes raise nothing but InputError -------------------------------------

_FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_fragment = st.sampled_from(
    [
        "perf ",
        "step:",
        "Global step ",
        "Train step ",
        "/4 done.",
        ": {",
        "}",
        "'",
        '"',
        ": ",
        " - ",
        ":",
        "|",
        "│",
        "timing_s/update_weights",
        "perf/update_weights_time",
        "timeperf/rollout",
        "np.float64(",
        ")",
        "tensor(",
        "nan",
        "inf",
        "-1e309",
        "9" * 30,
        "1.5",
        "0",
        "-3",
        "(pid=1) ",
        "(TaskRunner pid=99, ip=1.2.3.4) ",
        f"{ESC}[36m",
        f"{ESC}[0m",
        ESC,
        " ",
        "\t",
        "\r",
        "\x00",
        "\u2603",
        " [repeated 2x across cluster]",
        "True",
        "None",
        ",",
    ]
)
_line = st.lists(_fragment | st.text(max_size=6), max_size=14).map("".join)
_key = st.sampled_from(
    [
        "timing_s/update_weights",
        "perf/update_weights_time",
        "timing/broadcast",
        "timeperf/update_weights",
        "timing_s/gen",
        "a",
        "x/y",
        "",
        "'",
        ":",
    ]
)
_value = st.sampled_from(
    [
        "1",
        "-2.5",
        "1e3",
        "nan",
        "inf",
        "1e400",
        "np.float64(3)",
        "True",
        "None",
        "'t'",
        "9" * 40,
        "tensor(2.0, device='cuda:0')",
        "",
    ]
)
_step_no = st.integers(-3, 12).map(str) | st.sampled_from(["9" * 19, "1e3", ""])


@st.composite
def step_lines(draw: st.DrawFn) -> str:
    """A step line of one of the formats, with random keys, values, prefixes and a random cut."""
    n, k, v = draw(_step_no), draw(_key), draw(_value)
    line = draw(
        st.sampled_from(
            [
                f"perf {n}: {{'{k}': {v}, '{k}x': {v}}}",
                f'perf {n}: {{"{k}": {v}}}',
                f"step:{n} - {k}:{v} - {k}:{v}",
                f"Global step {n}: {{'{k}': {v}}}",
                f"Train step {n}/9 done.",
                f"│ {k} │ {v} │ {k} │",
                f"{k}  {v}",
            ]
        )
    )
    prefix = draw(
        st.sampled_from(
            [
                "",
                "(pid=1) ",
                f"{ESC}[36m(TaskRunner pid=9){ESC}[0m ",
                "[2025-01-01 00:00:00] x.py:1 - ",
            ]
        )
    )
    cut = draw(st.integers(0, len(line)))
    return prefix + (line[:cut] if draw(st.integers(0, 3)) == 0 else line)


def _check_log(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "train.log")
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            imp = load_log(path)
        except InputError as e:
            text = str(e)
            assert path in text and "\n" not in text and "\r" not in text and ";" in text, text
            assert len(text) <= len(path) + 500, text
            event("InputError")
            return
    event("read")
    assert imp.series and imp.notes
    for s in imp.series:
        assert len(s.steps) == len(s.values) >= 1
        assert all(a < b for a, b in zip(s.steps, s.steps[1:]))
        assert all(isinstance(v, float) and v == v and abs(v) != float("inf") for v in s.values)


@_FUZZ
@given(st.lists(step_lines() | _line, max_size=12))
def test_fuzz_log_lines(lines: list[str]) -> None:
    _check_log("\n".join(lines).encode("utf-8", "surrogatepass"))


_csv_cell = st.sampled_from(
    ["", "0", "1", "2", "2.0", "-1", "nan", "x", "1e400", "9" * 30, '"1,5"', "\u2603"]
)
_csv_head = st.sampled_from(
    [
        "_step",
        "Step",
        "global_step",
        "rollout/step",
        "perf/rollout_time",
        "timing/broadcast",
        "r - timing_s/gen",
        "r - timing_s/gen__MIN",
        "_runtime",
        "Wall time",
        "kl",
        "",
    ]
)


@st.composite
def metric_csvs(draw: st.DrawFn) -> str:
    """A metric export: usually a step column first and rows as wide as the header."""
    header = draw(st.lists(_csv_head, min_size=2, max_size=5))
    if draw(st.booleans()):
        header[0] = draw(st.sampled_from(["_step", "global_step", "Step"]))
    rows = [header]
    for _ in range(draw(st.integers(0, 6))):
        width = len(header) if draw(st.integers(0, 4)) else draw(st.integers(0, 6))
        rows.append([draw(st.integers(-1, 6).map(str) | _csv_cell) for _ in range(width)])
    return "\n".join(",".join(r) for r in rows) + "\n"


@_FUZZ
@given(metric_csvs())
def test_fuzz_metrics_csv(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "history.csv")
        Path(path).write_text(text, encoding="utf-8")
        try:
            imp = load_csv(path)
        except InputError as e:
            assert "\n" not in str(e) and ";" in str(e), str(e)
            event("InputError")
            return
    event("read")
    for s in imp.series:
        assert len(s.steps) == len(s.values) >= 1
        assert all(a < b for a, b in zip(s.steps, s.steps[1:]))


@_FUZZ
@given(st.binary(max_size=600))
def test_fuzz_log_bytes(data: bytes) -> None:
    _check_log(data)
