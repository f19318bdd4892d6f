"""``wsprof run -- CMD``: real multi-process gloo jobs through torchrun and multiprocessing
spawn, framework presets on stand-in modules, exit codes, and a wheel install."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from helpers import REPO, TARGETS, free_port

from wsprof.trace.reader import read_run

JOB = str(TARGETS / "run_job.py")
PRESETS = str(REPO / "tests" / "standins" / "presets")


def wsprof_run(
    out: Path,
    *cmd: str,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    opts: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "wsprof", "run", "--out", str(out), *opts, "--", *cmd],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
    )


def _calls_by_rank(out: Path) -> dict[int | None, int]:
    return {t.rank: len(t.calls) for t in read_run(str(out))}


def test_torchrun_job_every_rank_patched_launcher_not(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = wsprof_run(
        out,
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        JOB,
        "plain",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert _calls_by_rank(out) == {0: 60, 1: 60}  # two traces: the launcher wrote none
    assert f"wsprof: run folder {out}" in res.stderr
    # It ends with the verdict lines of `wsprof analyze` and the report, kept in the folder.
    lines = res.stderr.splitlines()
    assert any(line.startswith("VERDICT:") for line in lines), res.stderr[-2000:]
    report = next(line for line in lines if line.startswith("wsprof: report "))
    path = Path(report.removeprefix("wsprof: report "))
    assert path.parent == out and path.suffix == ".html" and path.stat().st_size > 10_000


ACCELERATE = str(REPO / "tests" / "standins" / "accelerate")


def test_accelerate_launch_is_a_launcher_its_workers_are_patched(tmp_path: Path) -> None:
    """``accelerate launch`` (a stand-in shaped like accelerate's ``multi_gpu_launcher``: it
    imports torch and runs ``torch.distributed.run`` in its own process), by module and by
    its console script: the workers are patched, the launcher writes no trace."""
    script = tmp_path / "bin" / "accelerate"  # shaped like pip's console script
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "from accelerate.commands.accelerate_cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    env = {"PYTHONPATH": os.pathsep.join([ACCELERATE, os.environ.get("PYTHONPATH", "")])}
    for name, cmd in [
        ("module", [sys.executable, "-m", "accelerate.commands.launch"]),
        ("script", [str(script), "launch"]),
    ]:
        out = tmp_path / name
        res = wsprof_run(
            out,
            *cmd,
            "--num_processes",
            "2",
            "--main_process_port",
            str(free_port()),
            JOB,
            "plain",
            env=env,
            opts=("--no-report",),
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert _calls_by_rank(out) == {0: 60, 1: 60}, name  # no trace of the launcher


def test_multiprocessing_spawn_children_are_patched(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = wsprof_run(out, sys.executable, JOB, "spawn", str(free_port()), opts=("--no-report",))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "VERDICT" not in res.stderr and not list(out.glob("*.html"))
    # 60 broadcasts and a barrier each (the parent imports torch too: a trace without calls)
    assert sorted(len(t.calls) for t in read_run(str(out))) == [0, 61, 61]


def test_exit_codes_pass_through(tmp_path: Path) -> None:
    assert (
        wsprof_run(tmp_path / "a", sys.executable, "-c", "import sys; sys.exit(3)").returncode == 3
    )
    killed = wsprof_run(
        tmp_path / "b",
        sys.executable,
        "-c",
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
    )
    assert killed.returncode == 128 + signal.SIGTERM
    # A process that never imports torch is never patched: nothing written.
    assert wsprof_run(tmp_path / "c", sys.executable, "-c", "print(1)").returncode == 0
    assert list((tmp_path / "c").iterdir()) == []
    bad = wsprof_run(tmp_path / "d", "no-such-command-wsprof")
    assert bad.returncode == 2 and bad.stderr.startswith("wsprof: error: cannot start")
    assert bad.stderr.count("\n") == 1


def _phases(out: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    [trace] = [t for t in read_run(str(out)) if len(t.calls)]
    names: dict[str, int] = {}
    for sp in trace.spans:
        if sp.kind == "phase":
            names[sp.name] = names.get(sp.name, 0) + 1
    events = [(e.kind, e.detail) for e in trace.events if e.kind.startswith("preset")]
    return names, events


def test_presets_mark_the_framework_phases(tmp_path: Path) -> None:
    env = {"PYTHONPATH": PRESETS}
    res = wsprof_run(tmp_path / "auto", sys.executable, JOB, "slime", str(free_port()), env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    names, events = _phases(tmp_path / "auto")
    assert names == {"rollout": 3, "weight_sync": 3}
    assert (
        "preset",
        "slime: weight_sync marked on slime.backends.megatron_utils.update_weight."
        "update_weight_from_distributed:UpdateWeightFromDistributed.update_weights",
    ) in events
    missing = [d for k, d in events if k == "preset_missing"]
    assert any(
        d.startswith(
            "verl: verl.checkpoint_engine.base:CheckpointEngineManager.update_weights not found"
        )
        for d in missing
    ), events
    # The broadcasts of update_weights are stamped with the phase.
    [trace] = [t for t in read_run(str(tmp_path / "auto")) if len(t.calls)]
    assert set(trace.calls.phase[trace.calls.op == "broadcast"].tolist()) == {"weight_sync"}
    # A named preset wraps only its own framework.
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "wsprof",
            "run",
            "--preset",
            "verl",
            "--out",
            str(tmp_path / "verl"),
            "--",
            sys.executable,
            JOB,
            "slime",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    names, events = _phases(tmp_path / "verl")
    assert names == {} and not [e for e in events if e[1].startswith("slime")]


def test_bad_preset_is_a_warning_not_an_error(tmp_path: Path) -> None:
    res = wsprof_run(
        tmp_path / "run",
        sys.executable,
        JOB,
        "slime",
        str(free_port()),
        env={"PYTHONPATH": PRESETS, "WSPROF_PRESET": "nemo"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "WSPROF_PRESET='nemo' is not one of slime, verl" in res.stderr


def test_works_from_a_wheel_install(tmp_path: Path) -> None:
    """Build a wheel, install it (without dependencies) into a venv that sees the test
    interpreter's torch, and run a job through that install: the bootstrap ships inside the
    wheel."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    [wheel] = list(wheels.glob("wsprof-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    py = str(env_dir / "bin" / "python")
    # torch and the other dependencies come from the interpreter running the tests (a venv on
    # a fresh machine, where the base interpreter has none of them): its site-packages go on
    # the new venv's path after the venv's own, so the wheel's wsprof is the one imported.
    own = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(own) / "wsprof_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    subprocess.run(
        [py, "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    where = subprocess.run(
        [py, "-c", "import wsprof; print(wsprof.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(env_dir)), where
    out = tmp_path / "run"
    res = subprocess.run(
        [py, "-m", "wsprof", "run", "--out", str(out), "--", py, JOB, "spawn", str(free_port())],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(len(t.calls) for t in read_run(str(out))) == [0, 61, 61]
