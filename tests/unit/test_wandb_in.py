"""W&B runs in: real offline runs written by the ``wandb`` SDK, read back by
:mod:`wsprof.importers.wandb_run` and judged by the series analysis; a W&B panel CSV export
read by :mod:`wsprof.importers.metrics_csv`.

One child process writes every run of the module (``WANDB_MODE=offline``, every wandb folder
and ``HOME`` inside the test's folder, proxies pointed at a local socket the test watches:
nothing may reach the network, and nothing may try).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from wsprof.analysis.model import Analysis
from wsprof.analysis.run import analyze_series
from wsprof.errors import InputError
from wsprof.importers.metrics_csv import load_csv
from wsprof.importers.wandb_run import is_wandb_run, load_wandb_run

#: What each run logs (run name -> what the child does), verl-shaped unless named otherwise.
WRITE_RUNS = textwrap.dedent(
    """
    import random, sys
    import wandb

    out = sys.argv[1]
    quiet = wandb.Settings(
        x_disable_stats=True, x_disable_meta=True, console="off", save_code=False
    )

    def verl(name, grows):
        rng = random.Random(7)
        run = wandb.init(project="t", dir=out, name=name, id=name, settings=quiet)
        for step in range(1, 13):
            sync = 2.0 + 0.5 * step if grows else 2.0 + rng.uniform(-0.05, 0.05)
            run.log(
                {
                    "timing_s/update_weights": sync,
                    "timing_s/gen": 10.0 + rng.uniform(-0.05, 0.05),
                    "timing_s/step": 14.0 + sync,
                    "training/global_step": step,
                    # skipped, not a number; at step 6 a row longer than a 32 KiB block
                    "val/sample": "some text" * (12_000 if step == 6 else 1),
                },
                step=step,  # verl: logger.log(data=metrics, step=self.global_steps)
            )
        run.finish()

    def openrlhf(name):
        # openrlhf/trainer/ppo_trainer.py: train/* against train/global_step (step_sync);
        # each row is {"train/%s" % k: v} of the console line's dict, eval rows between.
        run = wandb.init(project="t", dir=out, name=name, id=name, settings=quiet)
        run.define_metric("train/global_step")
        run.define_metric("train/*", step_metric="train/global_step", step_sync=True)
        run.define_metric("eval/global_step")
        run.define_metric("eval/*", step_metric="eval/global_step", step_sync=True)
        for step in range(1, 13):
            run.log(
                {
                    "train/timing/broadcast": 1.0 + 0.25 * step,
                    "train/timing/generation": 30.0,
                    "train/global_step": step,
                }
            )
            if step % 4 == 0:
                run.log({"eval/global_step": step, "eval/score": 0.5})
        run.finish()

    def text_only(name):
        run = wandb.init(project="t", dir=out, name=name, id=name, settings=quiet)
        for step in range(5):
            run.log({"sample": f"text {step}", "flag": True})
        run.finish()

    verl("leak", True)
    verl("healthy", False)
    openrlhf("openrlhf")
    text_only("text")
    """
)


def _quiet_env(home: Path, proxy: str) -> dict[str, str]:
    """An environment that keeps wandb offline and inside ``home``: no key, no config of
    the user, every proxy at ``proxy`` (a socket the test watches)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(home),
        "WANDB_CONFIG_DIR": str(home / "wandb-config"),
        "WANDB_CACHE_DIR": str(home / "wandb-cache"),
        "WANDB_DATA_DIR": str(home / "wandb-data"),
        "WANDB_ARTIFACT_DIR": str(home / "wandb-artifacts"),
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_BASE_URL": proxy,
    }
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = proxy
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run name -> its run folder (``wandb/offline-run-*``), written by the real SDK."""
    home = tmp_path_factory.mktemp("wandb_home")
    with socket.socket() as watch:
        watch.bind(("127.0.0.1", 0))
        watch.listen(8)
        proxy = f"http://127.0.0.1:{watch.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-c", WRITE_RUNS, str(home)],
            env=_quiet_env(home, proxy),
            cwd=home,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        watch.setblocking(False)
        with pytest.raises(BlockingIOError):
            watch.accept()  # nobody tried the network (through a proxy or W&B's URL)
    found = {f.name.rsplit("-", 1)[-1]: f for f in (home / "wandb").glob("offline-run-*")}
    assert sorted(found) == ["healthy", "leak", "openrlhf", "text"]  # run id = run name
    return found


def _analysis(folder: Path) -> Analysis:
    return analyze_series(load_wandb_run(str(folder)).series, str(folder))


def _verdicts(a: Analysis) -> dict[str, bool]:
    return {r.series.name: r.verdict.accumulating for r in a.series}


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def test_growing_sync_is_accumulating_and_the_input_is_untouched(runs: dict[str, Path]) -> None:
    """verl's timing_s/update_weights growing 0.5 s a step: read at verl's own steps (1-12),
    named as the log importer names it, judged accumulating; the folder is not written."""
    folder = runs["leak"]
    before = _snapshot(folder.parent)
    imported = load_wandb_run(str(folder))
    assert imported.format == "wandb"
    by_name = {s.name: s for s in imported.series}
    sync = by_name["weight_sync_s"]
    assert sync.steps == tuple(range(1, 13))
    assert sync.values == pytest.approx([2.0 + 0.5 * s for s in range(1, 13)])
    assert {"rollout_s", "step_s", "training/global_step"} <= set(by_name)
    assert "val/sample" not in by_name
    assert any("weight_sync_s = timing_s/update_weights" in n for n in imported.notes)
    assert any("12 non-numeric value(s) skipped" in n for n in imported.notes)
    verdicts = _verdicts(_analysis(folder))
    assert verdicts["weight_sync_s"] is True
    assert verdicts["rollout_s"] is False
    assert _snapshot(folder.parent) == before


def test_healthy_twin_is_not_accumulating(runs: dict[str, Path]) -> None:
    """The same run with a flat, noisy sync: no timer accumulates, no finding (verl's
    training/global_step grows by design: a step counter, never a finding)."""
    a = _analysis(runs["healthy"])
    verdicts = _verdicts(a)
    assert not any(verdicts[n] for n in ("weight_sync_s", "rollout_s", "step_s"))
    assert a.findings == ()


def test_openrlhf_steps_come_from_its_step_metric(runs: dict[str, Path]) -> None:
    """OpenRLHF's train/* against train/global_step (define_metric): steps 1-12 although
    _step runs to 14 with the eval rows; train/timing/broadcast is the weight sync."""
    imported = load_wandb_run(str(runs["openrlhf"]))
    by_name = {s.name: s for s in imported.series}
    assert by_name["weight_sync_s"].steps == tuple(range(1, 13))
    assert by_name["rollout_s"].steps == tuple(range(1, 13))
    assert by_name["eval/score"].steps == (4, 8, 12)
    assert "train/global_step" not in by_name and "eval/global_step" not in by_name
    assert "from train/global_step, eval/global_step" in imported.notes[0]
    assert any("train/timing/broadcast as timing/broadcast" in n for n in imported.notes)
    assert _verdicts(_analysis(runs["openrlhf"]))["weight_sync_s"] is True


def test_where_a_run_is(runs: dict[str, Path], tmp_path: Path) -> None:
    """A run folder, its .wandb file and a wandb/ folder of one run are runs; a wandb/
    folder of several is one line naming them and how to choose; anything else is not."""
    folder = runs["leak"]
    (log,) = folder.glob("*.wandb")
    assert is_wandb_run(str(folder)) and is_wandb_run(str(log))
    latest = folder.parent / "latest-run"  # W&B's link to the newest run: not a 5th run
    assert latest.is_symlink() and is_wandb_run(str(latest))
    single = tmp_path / "wandb"
    shutil.copytree(folder, single / folder.name)
    assert is_wandb_run(str(single))
    assert load_wandb_run(str(single)).series == load_wandb_run(str(log)).series
    with pytest.raises(InputError) as e:
        is_wandb_run(str(folder.parent))
    message = str(e.value)
    assert "4 W&B runs" in message and "give one run's folder" in message
    assert "\n" not in message
    assert not is_wandb_run(str(tmp_path / "missing"))
    assert not is_wandb_run(str(folder / "files"))
    with pytest.raises(InputError, match="no W&B run here"):
        load_wandb_run(str(folder / "files"))


def test_truncated_copy_is_read_to_its_last_record(runs: dict[str, Path], tmp_path: Path) -> None:
    """A copy cut in the middle (a run still writing, a copy interrupted) gives the steps
    before the cut and one note; so does a byte flipped in the middle."""
    (log,) = runs["leak"].glob("*.wandb")
    data = log.read_bytes()
    for name, damaged in (
        ("cut", data[: len(data) // 2]),
        (
            "flipped",
            data[: len(data) // 2]
            + bytes([data[len(data) // 2] ^ 0xFF])
            + data[len(data) // 2 + 1 :],
        ),
    ):
        copy = tmp_path / name / log.name
        copy.parent.mkdir()
        copy.write_bytes(damaged)
        imported = load_wandb_run(str(copy))
        sync = {s.name: s for s in imported.series}["weight_sync_s"]
        assert 1 <= len(sync.steps) < 12, name
        assert sync.steps == tuple(range(1, len(sync.steps) + 1))
        damage = [n for n in imported.notes if n.startswith("read up to the last good record")]
        assert len(damage) == 1, imported.notes
    # whole: no damage note
    assert not any("last good record" in n for n in load_wandb_run(str(log)).notes)


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 16,  # garbage
        b"",  # empty
        b":W&B\xe1\xbe\x00" + bytes(range(7, 250)) * 8,  # a header, then garbage
    ],
    ids=["garbage", "empty", "header-then-garbage"],
)
def test_bad_file_is_one_line(content: bytes, tmp_path: Path) -> None:
    """Not a W&B log: one line, no traceback."""
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(content)
    with pytest.raises(InputError) as e:
        load_wandb_run(str(bad))
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)


def test_no_numeric_history_is_one_line(runs: dict[str, Path]) -> None:
    """A run that logged only text and booleans."""
    with pytest.raises(InputError, match="no numeric history") as e:
        load_wandb_run(str(runs["text"]))
    assert "\n" not in str(e.value)


def test_without_wandb_one_line_on_installing_it(runs: dict[str, Path]) -> None:
    """wandb not importable (a child where ``import wandb`` fails): one line naming the
    extra."""
    code = (
        "import sys; sys.modules['wandb'] = None\n"
        "from wsprof.errors import InputError\n"
        "from wsprof.importers.wandb_run import load_wandb_run\n"
        "try:\n    load_wandb_run(sys.argv[1])\n"
        "except InputError as e:\n    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(runs["leak"])],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pip install 'wsprof[wandb]'" in done.stdout
    assert done.stdout.count("\n") == 1


def test_wandb_panel_csv_export(tmp_path: Path) -> None:
    """A W&B panel's "Export CSV": ``Step``, then ``<run name> - <metric>`` with its
    ``__MIN``/``__MAX`` band, every cell quoted, blank where a step was not sampled. The
    band is not read; the metric is, under the log importer's names."""
    header = ["Step"]
    for metric in ("timing_s/update_weights", "timing_s/gen"):
        header += [f"leaky-run-3 - {metric}{band}" for band in ("", "__MIN", "__MAX")]
    rows = []
    for step in range(1, 13):
        sync, gen = 2.0 + 0.5 * step, 10.0
        cells = [step, sync, sync - 100, sync + 100, gen, gen - 100, gen + 100]
        rows.append(["" if (step == 5 and i == 1) else str(c) for i, c in enumerate(cells)])
    text = "\n".join(",".join(f'"{c}"' for c in row) for row in [header, *rows]) + "\n"
    path = tmp_path / "wandb_export_2026-01-01.csv"
    path.write_text(text)
    imported = load_csv(str(path))
    assert imported.format == "metrics-csv"
    by_name = {s.name: s for s in imported.series}
    assert set(by_name) == {"weight_sync_s", "rollout_s"}
    sync = by_name["weight_sync_s"]
    assert sync.steps == tuple(s for s in range(1, 13) if s != 5)
    assert sync.values == pytest.approx([2.0 + 0.5 * s for s in sync.steps])
    verdicts = _verdicts(analyze_series(imported.series, str(path)))
    assert verdicts == {"weight_sync_s": True, "rollout_s": False}


def test_a_huge_value_json_is_not_parsed() -> None:
    from wandb.proto import wandb_internal_pb2

    from wsprof.importers import wandb_run

    item = wandb_internal_pb2.HistoryItem(key="wide")
    keys = wandb_run.MAX_VALUE_JSON_BYTES // 10 + 1
    item.value_json = "{" + ",".join(f'"k{i:07d}":1' for i in range(keys)) + "}"
    assert len(item.value_json) > wandb_run.MAX_VALUE_JSON_BYTES
    assert wandb_run._item_value(item) is None  # a million keys never parsed nor flattened
    item.value_json = '{"a": 1.5}'
    assert wandb_run._item_value(item) == {"a": 1.5}
