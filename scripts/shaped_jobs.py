"""Framework-shaped jobs under ``wsprof run`` with no markers, against their own ground truth.

Runs the slime-, verl- and AReaL-shaped jobs (``../shared/jobs/slime_shaped``,
``tests/jobs/verl_shaped``, ``tests/jobs/areal_shaped``; 4 processes each, gloo on CPU),
healthy and leaking, and compares what ``wsprof analyze`` reads with what each job logged: the
issue 28 table (job x variant -> steps found/true per trainer and engine, primary, per-step
weight-sync error of the primary, verdict, the top diagnosis's ``where``, the steps the leak
needed to be found).

    python scripts/shaped_jobs.py [--jobs slime,verl,areal] [--variants healthy,leak]
        [--repeats 2] [--steps 12] [--out DIR]

:func:`run_job` and :func:`compare` are what ``tests/integration/test_shaped_jobs.py`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from wsprof.analysis.model import Analysis
from wsprof.analysis.run import analyze_path, classify_series, row_series
from wsprof.demo.ports import free_port

REPO = Path(__file__).resolve().parents[1]
#: The shared jobs folder (the slime-shaped job and the ``common`` the others import).
SHARED_JOBS = Path(os.environ.get("WSPROF_JOBS", REPO.parent / "shared" / "jobs"))
JOBS = {
    "slime": SHARED_JOBS / "slime_shaped" / "job_slime.py",
    "verl": REPO / "tests" / "jobs" / "verl_shaped" / "job_verl.py",
    "areal": REPO / "tests" / "jobs" / "areal_shaped" / "job_areal.py",
    "colocated": REPO / "tests" / "jobs" / "colocated_shaped" / "job_colocated.py",
}
#: ``--leak`` of each job's leaking twin: segments the probe walks more each step (AReaL's on
#: trainer rank 1 only, its default ``--leak-rank``); the colocated job's: what keeps the sent
#: weight buckets alive (``trainer_list``: a list on the trainer's ``UpdateWeightFromTensor``).
LEAK = {"slime": 4000, "verl": 8000, "areal": 8000, "colocated": "trainer_list"}
#: Processes per job (torchrun ``--nproc-per-node``); 4 unless named here.
NPROC = {"colocated": 3}
#: The colocated job's other variants, by name: its flags (``double_open`` can only run under
#: the ``file_system`` sharing strategy; ``_fs`` runs a variant under ``file_system``).
VARIANT_ARGS = {
    "colocated": {
        "engine_keeps": ["--leak", "engine_keeps"],
        "trainer_list": ["--leak", "trainer_list"],
        "double_open": ["--leak", "double_open", "--sharing", "file_system"],
        "healthy_fs": ["--sharing", "file_system"],
        "leak_fs": ["--leak", "trainer_list", "--sharing", "file_system"],
        "engine_keeps_fs": ["--leak", "engine_keeps", "--sharing", "file_system"],
    },
}


@dataclass
class Row:
    """One job run read by wsprof, against its truth."""

    job: str
    variant: str
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)  # label -> (found, true)
    primary_ok: bool = False
    sync_err_pct: float | None = None  # median per-step error of the primary's weight sync
    #: the same for every process whose truth logs a sync (trainers and engines), by label
    sync_err_by: dict[str, float] = field(default_factory=dict)
    verdict: str = ""
    top: str = ""
    where: str = ""
    leak_found_at: int | None = None  # fewest steps after which the leak is named

    def line(self) -> str:
        steps = ", ".join(f"{k} {a}/{b}" for k, (a, b) in self.steps.items())
        err = "-" if self.sync_err_pct is None else f"{self.sync_err_pct:+.1f}%"
        others = ", ".join(f"{k} {v:+.1f}%" for k, v in self.sync_err_by.items())
        return (
            f"| {self.job} | {self.variant} | {steps} | {'yes' if self.primary_ok else 'NO'} | "
            f"{err} | {self.verdict} | {self.top[:90]} | {self.where[:110]} | "
            f"{self.leak_found_at if self.leak_found_at is not None else '-'} | {others} |"
        )


def run_job(
    job: str,
    variant: str,
    out: Path,
    steps: int = 12,
    timeout_s: float = 600,
    under_wsprof: bool = True,
) -> Path:
    """Run ``job`` (a key of :data:`JOBS`) under ``wsprof run --no-report`` with no markers
    (``under_wsprof`` False: plain ``torchrun``, nothing of wsprof imported); returns the truth
    file (the run folder is ``out``). Raises ``RuntimeError`` on failure."""
    truth = out.with_suffix(".truth.jsonl")
    wsprof_run = [sys.executable, "-m", "wsprof", "run", "--out", str(out), "--no-report", "--"]
    cmd = [
        *(wsprof_run if under_wsprof else []),
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC.get(job, 4)),
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(JOBS[job]), "--steps", str(steps), "--truth", str(truth),
    ]  # fmt: skip
    if variant == "leak":
        cmd += ["--leak", str(LEAK[job])]
    elif variant in VARIANT_ARGS.get(job, {}):
        cmd += VARIANT_ARGS[job][variant]
    env = {**os.environ, "WSPROF_JOBS": str(SHARED_JOBS), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{job} {variant} failed ({done.returncode}): {done.stderr[-2000:]}")
    return truth


def weights_sums(truth_file: Path) -> dict[tuple[str, int], list[float]]:
    """Per (role, role rank): the checksum of the weights each update moved, in step order
    (verl's job logs the sum of the bf16 values sent or received): equal lists in a run under
    wsprof and a plain run mean training and the push were bit-identical."""
    out: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for t in _truth(truth_file):
        if "weights_sum" in t:
            key = (str(t["role"]), int(str(t["role_rank"])))
            out.setdefault(key, []).append((int(str(t["step"])), float(str(t["weights_sum"]))))
    return {k: [w for _, w in sorted(v)] for k, v in out.items()}


def _truth(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare(job: str, variant: str, run: Path, truth_file: Path) -> tuple[Row, Analysis]:
    """What wsprof reads from ``run`` against the job's truth."""
    a = analyze_path(str(run))
    truth = [t for t in _truth(truth_file) if isinstance(t.get("step"), int) and t["step"] >= 0]
    row = Row(job, variant)
    for p in a.processes:
        mine = sorted(
            (t for t in truth if t.get("pid") == p.pid), key=lambda t: int(str(t["step"]))
        )
        if mine:
            row.steps[p.label] = (len(p.steps), len(mine))
        errs = [
            (r.weight_sync_s / float(str(t["sync_s"])) - 1) * 100
            for r, t in zip(p.steps, mine)
            if r.weight_sync_s is not None and float(str(t.get("sync_s") or 0)) > 0
        ]
        if errs:
            row.sync_err_by[p.label] = statistics.median(errs)
    t0 = [t for t in truth if t.get("role") == "trainer" and t.get("role_rank") == 0]
    pid0 = t0[0]["pid"] if t0 else None
    row.primary_ok = a.primary is not None and a.primary.pid == pid0
    if a.primary is not None:
        row.sync_err_pct = row.sync_err_by.get(a.primary.label)
    row.verdict = a.verdict.status
    if a.diagnoses:
        d = a.diagnoses[0]
        row.top = f"{d.severity}: {d.title}"
        row.where = d.where.text if d.where is not None else ""
    return row, a


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default="slime,verl,areal")
    ap.add_argument("--variants", default="healthy,leak")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="wsprof-shaped-"))
    print(
        "| job | variant | steps found/true | primary = trainer rank 0 | sync error (median) | "
        "verdict | top diagnosis | where | leak named after steps | sync error per process |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for job in args.jobs.split(","):
        for variant in args.variants.split(","):
            for k in range(args.repeats):
                run = out / f"{job}-{variant}-{k}"
                truth = run_job(job, variant, run, args.steps)
                row, a = compare(job, variant, run, truth)
                if variant == "leak":
                    row.leak_found_at = _steps_needed(a)
                print(row.line(), flush=True)
    return 0


def _steps_needed(a: Analysis) -> int | None:
    """Fewest steps of the primary's after which the diagnosis is critical: the analysis of
    the first n steps' series (``wsprof analyze`` of a run cut there), n = 3..all."""
    pa = a.primary
    if pa is None:
        return None
    for n in range(3, len(pa.steps) + 1):
        series = row_series(pa.steps[:n], pa.step_source)
        res = classify_series(series, [])
        if any(r.series.name == "weight_sync_s" and r.verdict.accumulating for r in res):
            return n
    return None


if __name__ == "__main__":
    raise SystemExit(main())
