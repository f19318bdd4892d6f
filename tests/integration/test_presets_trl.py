"""The TRL preset on a real traced process (``wsprof run``, TRL stand-ins with TRL 1.16.0's
names and signatures): generation without vLLM is rollout; a preset whose entry points never
ran is said in the analysis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import REPO, TARGETS, free_port

from wsprof.analysis.run import analyze_path
from wsprof.trace.reader import read_run

JOB = str(TARGETS / "run_job.py")
STANDINS = str(REPO / "tests" / "standins" / "presets")
IDLE = "trl preset installed; none of its entry points ran: no phases marked from it"


def _run(out: Path, *args: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--out", str(out), "--"]
        + [sys.executable, JOB, "trl", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": STANDINS},
    )
    assert res.returncode == 0, res.stderr[-3000:]


def _phases(out: Path) -> dict[str, int]:
    names: dict[str, int] = {}
    for t in read_run(str(out)):
        for sp in t.spans:
            if sp.kind == "phase":
                names[sp.name] = names.get(sp.name, 0) + 1
    return names


def test_trl_generation_without_vllm_is_rollout(tmp_path: Path) -> None:
    _run(tmp_path / "run", "generate")
    assert _phases(tmp_path / "run") == {"rollout": 3}
    assert IDLE not in analyze_path(str(tmp_path / "run")).notes


def test_a_preset_whose_entry_points_never_ran_is_said(tmp_path: Path) -> None:
    _run(tmp_path / "run")
    assert _phases(tmp_path / "run") == {}
    notes = analyze_path(str(tmp_path / "run")).notes
    assert IDLE in notes, notes
