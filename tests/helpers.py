"""Helpers shared by tests: repo paths and running real multi-process jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wsprof.demo.run import free_port

REPO = Path(__file__).resolve().parents[1]
TARGETS = REPO / "tests" / "targets"
#: The shared cases folder: ``$WSPROF_CASES``, else ``../shared/cases`` beside the checkout.
CASES = Path(os.environ.get("WSPROF_CASES", REPO.parent / "shared" / "cases"))


def run_ranks(script: Path, world: int, *args: str, timeout: float = 120) -> None:
    """Run ``script RANK WORLD PORT *args`` as ``world`` real processes; fail on any error."""
    port = str(free_port())
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), port, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        outputs.append(out)
    bad = [(i, p.returncode, outputs[i]) for i, p in enumerate(procs) if p.returncode != 0]
    assert not bad, f"rank {bad[0][0]} exited {bad[0][1]}:\n{bad[0][2][-3000:]}"
