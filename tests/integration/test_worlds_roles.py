"""The slime-shaped job (``shared/jobs/slime_shaped``: trainers and an SGLang-shaped engine in
separate worlds, joined by the weight-update group ``slime-pp_0``) under ``wsprof run`` with no
markers: two worlds, their roles and pids as the job's own truth says, trainer rank 0 as the
primary, no rank comparison across worlds, and the worlds in the JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import helpers

from wsprof.analysis.run import analyze_path
from wsprof.demo.ports import free_port
from wsprof.report.jsonout import render_json

#: The shared jobs folder: ``$WSPROF_JOBS``, else ``../shared/jobs`` beside the checkout.
JOBS = Path(os.environ.get("WSPROF_JOBS", helpers.REPO.parent / "shared" / "jobs"))
JOB = JOBS / "slime_shaped" / "job_slime.py"


def test_slime_worlds_and_roles(tmp_path: Path) -> None:
    helpers.require_cases(JOB)
    out, truth_file = tmp_path / "run", tmp_path / "truth.jsonl"
    cmd = [
        sys.executable, "-m", "wsprof", "run", "--out", str(out), "--no-report", "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(JOB), "--steps", "6", "--truth", str(truth_file),
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=helpers.REPO, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    truth = [json.loads(line) for line in truth_file.read_text().splitlines() if line.strip()]
    pids = {role: {t["pid"] for t in truth if t["role"] == role} for role in ("trainer", "engine")}
    trainer0 = {t["pid"] for t in truth if t["role"] == "trainer" and t["role_rank"] == 0}

    a = analyze_path(str(out))
    roles = {w.role: set(w.pids) for w in a.worlds}
    assert len(a.worlds) == 2, [w.line() for w in a.worlds]
    assert roles == {"trainer": pids["trainer"], "inference engine": pids["engine"]}
    assert a.primary is not None and {a.primary.pid} == trainer0
    world_of = {pid: w.label for w in a.worlds for pid in w.pids}
    for r in a.ranks:  # each rank row carries its world: rows are compared within one
        assert r.pid is not None and r.world == world_of[r.pid]
    for f in a.findings:  # an outlier is judged against its own world's ranks only
        if f.kind == "outlier_rank":
            peers = {r.pid for r in a.ranks if r.world == world_of[f.evidence.as_dict()["pid"]]}
            assert peers <= pids["trainer"] or peers <= pids["engine"], f.title
    data = json.loads(render_json(a))
    assert sorted(w["role"] for w in data["worlds"]) == ["inference engine", "trainer"]
    assert all(r["world"] is not None for r in data["ranks"])
