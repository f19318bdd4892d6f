"""``wsprof run`` asks slime for its own weight-sync timeline in the run folder (issue 36),
unless the user set the variable or said ``--no-framework-timeline``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wsprof.cli.run import timeline_env
from wsprof.frameworks import RUN_TIMELINE_DIR

PRINT = "import os; print(os.environ.get('SLIME_COMMUNICATION_TIMELINE'))"


def test_the_variable_points_into_the_run_folder_unless_set(tmp_path: Path) -> None:
    got = timeline_env(str(tmp_path), {})
    assert got == {
        "SLIME_COMMUNICATION_TIMELINE": str(
            tmp_path / RUN_TIMELINE_DIR / "slime-{role}-{rank}.jsonl"
        )
    }
    assert timeline_env(str(tmp_path), {"SLIME_COMMUNICATION_TIMELINE": "/mine/{rank}"}) == {}


def _run(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k != "SLIME_COMMUNICATION_TIMELINE"}
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "run", "--no-report", *flags, "--out",
         str(tmp_path / "run"), "--", sys.executable, "-c", PRINT],
        capture_output=True, text=True, timeout=120, check=False, env={**base, **(env or {})},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_wsprof_run_sets_it_and_the_flag_turns_it_off(tmp_path: Path) -> None:
    run = (tmp_path / "run").resolve()
    assert _run(tmp_path) == str(run / RUN_TIMELINE_DIR / "slime-{role}-{rank}.jsonl")
    assert _run(tmp_path, "--no-framework-timeline") == "None"
    mine = {"SLIME_COMMUNICATION_TIMELINE": "/elsewhere/{rank}.jsonl"}
    assert _run(tmp_path, env=mine) == "/elsewhere/{rank}.jsonl"
