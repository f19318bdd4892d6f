"""Faults inside wsprof never reach training, and show up afterwards: a full disk, a read-only
run folder. Real processes, real file-system errors (RLIMIT_FSIZE gives a real EFBIG)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import TARGETS, free_port

from wsprof.analysis.run import analyze_path
from wsprof.trace.reader import read_trace

SCRIPT = TARGETS / "faulty_disk.py"


def _run(out: Path, mode: str) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(free_port()), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_full_disk_never_reaches_training_and_is_reported(tmp_path: Path) -> None:
    res, stderr = _run(tmp_path / "run", "full")
    assert res["same"] is True, "collective results changed"
    lines = [ln for ln in stderr.splitlines() if ln.startswith("wsprof:")]
    assert len(lines) == 1 and "cannot write" in lines[0], stderr  # said once, not per flush
    assert "stay in" in lines[0] and ".ring" in lines[0]  # nothing is lost while it is full
    trace = read_trace(str(res["path"]))  # still readable
    own = trace.meta["self"]
    assert own["write_errors"] >= 1 and own["lost_calls"] == 0
    # The calls made while the disk was full waited in the capture buffer and were written
    # once it had room again: all 4 steps x 60 calls.
    assert len(trace.calls) == 240 and trace.meta["end"]["state"] == "closed"
    over = [f for f in analyze_path(str(tmp_path / "run")).findings if f.kind == "self_overhead"]
    assert over[0].severity == "warning" and "write" in over[0].title


def test_unwritable_run_folder_means_no_profiling_and_one_line(tmp_path: Path) -> None:
    res, stderr = _run(tmp_path / "run", "notadir")
    assert res["same"] is True and res["path"] is None
    lines = [ln for ln in stderr.splitlines() if ln.startswith("wsprof:")]
    assert len(lines) == 1 and "not profiling" in lines[0] and "WSPROF_OUT" in lines[0]
