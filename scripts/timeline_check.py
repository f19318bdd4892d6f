"""Issue 36's numbers: slime's communication timeline read alone and joined with a recorded run.

For each case written by ``tests/targets/slime_timeline_cases.py`` (from slime's documented
layout, with its own truth) and for the slime-shaped gloo job that writes the timeline around
its own buckets under ``wsprof run`` (``tests/jobs/slime_timeline``), one row: steps found
against the truth, the weight sync's largest error per step, bytes per sync exact or not, and
what the diagnosis names. Then the reader's speed on a large timeline.

    python scripts/timeline_check.py [--no-job] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "targets"))

from slime_timeline_cases import CASES, write_case  # noqa: E402
from slime_timeline_writer import ManualClock, Timeline  # noqa: E402

from wsprof.analysis.model import Analysis  # noqa: E402
from wsprof.analysis.run import analyze_path  # noqa: E402
from wsprof.demo.ports import free_port  # noqa: E402
from wsprof.errors import InputError  # noqa: E402
from wsprof.importers.slime_timeline import read_timeline  # noqa: E402


def _series(a: Analysis, name: str) -> dict[int, float]:
    r = next((r for r in a.series if r.series.name == name), None)
    return dict(zip(r.series.steps, r.series.values)) if r is not None else {}


def _named(a: Analysis) -> str:
    if not a.diagnoses:
        return f"- ({a.verdict.status})"
    d = a.diagnoses[0]
    f = next((f for f in a.findings if f.kind == "sync_part"), None)
    if f is not None:
        ev = f.evidence.as_dict()
        what = "payload" if ev.get("bytes_flat") is False else f"{ev['part']}, bytes flat"
        buckets = ev.get("grown_buckets") or []
        spread = (
            "every bucket"
            if len(buckets) == ev.get("buckets")
            else "bucket " + ",".join(map(str, buckets))
        )
        return f"{d.severity}: {what}, {spread}"
    return f"{d.severity}: {d.cause}: {d.title[:60]}"


def case_row(name: str, root: Path) -> str:
    folder = root / name
    folder.mkdir()
    truth = write_case(name, folder)
    try:
        a = analyze_path(str(folder))
    except InputError as e:
        return f"| {name} | - | - | - | error, exit 2: {str(e)[:90]} |"
    if "runs" in truth:  # two runs: the newer is read
        truth = {**truth, **truth["runs"][truth["run_ids"][0]]}
    sync = _series(a, "weight_sync_s")
    nbytes = _series(a, "weight_sync_bytes")
    want = dict(zip(truth["steps"], truth["sync_s"]))
    failed = {f["weight_version"] - 1 for f in truth.get("failed", [])}
    want = {s: v for s, v in want.items() if v is not None and s not in failed}
    errs = [abs(sync[s] - v) / v for s, v in want.items() if s in sync]
    exact = all(
        nbytes.get(s) == b
        for s, b in zip(truth["steps"], truth["bytes"])
        if s in want and s not in failed
    )
    steps = f"{len(sync)}/{len(want)}"
    err = f"{max(errs) * 100:.3f}%" if errs else "-"
    named = _named(a)
    if any(f.kind == "sync_failed" for f in a.findings):
        named = next(f.title for f in a.findings if f.kind == "sync_failed")
    return f"| {name} | {steps} | {err} | {'exact' if exact else 'NO'} | {named} |"


def job_row(root: Path, leak: int, steps: int) -> str:
    out = root / f"job-{leak}"
    truth = root / f"job-{leak}.truth.jsonl"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("SLIME_COMMUNICATION_TIMELINE", None)
    cmd = [
        sys.executable, "-m", "wsprof", "run", "--no-report", "--out", str(out), "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(REPO / "tests" / "jobs" / "slime_timeline" / "job_slime_timeline.py"),
        "--steps", str(steps), "--leak", str(leak), "--truth", str(truth),
    ]  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        return f"| job leak={leak} | - | - | - | job failed: {res.stderr[-200:]} |"
    a = analyze_path(str(out))
    pa = a.primary
    rows = [json.loads(x) for x in truth.read_text().splitlines() if x.strip()]
    own = {
        r["step"]: r["sync_s"]
        for r in rows
        if r.get("role") == "trainer" and r.get("role_rank") == 0 and r["step"] >= 0
    }
    found = {r.step: r.weight_sync_s for r in pa.steps} if pa is not None else {}
    errs = [abs(found[s] - v) / v for s, v in own.items() if found.get(s) is not None]
    src = pa.step_source if pa is not None else "-"
    named = _named(a)
    top = a.diagnoses[0] if a.diagnoses else None
    if top is not None and top.where is not None and "in the wrapper" in top.where.text:
        inside = top.where.text.split("; inside ", 1)[-1]
        named = f"{top.severity}: wrapper named inside the buckets ({inside[:80]}...)"
    return (
        f"| job leak={leak} ({wall:.0f} s) | {len(found)}/{len(own)} from {src} | "
        f"{max(errs) * 100:.1f}% (vs the job's own sync) | - | {named} |"
    )


def read_speed(root: Path, syncs: int = 1500, buckets: int = 32) -> str:
    clock = ManualClock(1_760_000_000_000_000_000, 5_000_000_000_000)
    folder = root / "big"
    tl = Timeline(str(folder / "slime-{role}-{rank}.jsonl"), rank=0, world_size=1, clock=clock)
    for step in range(syncs):
        with tl.context(global_step=step, rollout_id=step), tl.span("train_forward_backward"):
            clock.advance(0.5)
        with tl.context(weight_version=step + 1, transport="nccl", global_step=step):
            for b in range(buckets):
                with tl.span("weight_convert", bucket_id=b, message_bytes=1 << 20):
                    clock.advance(0.001)
                tl.event("weight_bucket_ready", bucket_id=b, message_bytes=1 << 20)
                with tl.span("weight_bucket_send", bucket_id=b, message_bytes=1 << 20):
                    clock.advance(0.002)
                tl.event("engine_bucket_receive", bucket_id=b, message_bytes=1 << 20)
                with tl.span("engine_load_weights", bucket_id=b, message_bytes=1 << 20):
                    clock.advance(0.001)
                tl.event("weight_bucket_reusable", bucket_id=b, message_bytes=1 << 20)
            tl.event("weight_sync_complete")
    tl.close()
    path = folder / "slime-trainer-0.jsonl"
    size = path.stat().st_size
    t0 = time.perf_counter()
    read = read_timeline(str(folder))
    t1 = time.perf_counter()
    lines = sum(len(p.spans) for r in read.runs.values() for p in r.processes.values())
    a = analyze_path(str(folder))
    t2 = time.perf_counter()
    assert len(next(r for r in a.series if r.series.name == "weight_sync_s").series.values)
    return (
        f"read {lines:,} records ({size / 1e6:.0f} MB, {syncs} syncs x {buckets} buckets) in "
        f"{t1 - t0:.1f} s ({lines / (t1 - t0) / 1e3:.0f} k records/s); whole analysis "
        f"{t2 - t1:.1f} s more"
    )


def many_syncs(root: Path, syncs: int = 50_000) -> str:
    """A timeline of many short syncs (one training span and one end each): the reader is one
    pass over the syncs, not a pass per sync."""
    clock = ManualClock(1_760_000_000_000_000_000, 5_000_000_000_000)
    folder = root / "many"
    tl = Timeline(str(folder / "slime-{role}-{rank}.jsonl"), rank=0, world_size=1, clock=clock)
    for step in range(syncs):
        with tl.context(global_step=step), tl.span("train_forward_backward"):
            clock.advance(0.001)
        with tl.context(weight_version=step + 1):
            tl.event("weight_sync_complete")
        clock.advance(0.001)
    tl.close()
    t0 = time.perf_counter()
    a = analyze_path(str(folder))
    wall = time.perf_counter() - t0
    n = len(next(r for r in a.series if r.series.name == "step_s").series.values)
    return f"{syncs:,} syncs of two records each: analysed in {wall:.1f} s ({n:,} steps)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--no-job", action="store_true", help="skip the gloo job (about 1 min)")
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("| case | steps found/true | sync error (max per step) | bytes | diagnosis |")
        print("|---|---|---|---|---|")
        for name in CASES:
            print(case_row(name, root), flush=True)
        if not args.no_job:
            for leak in (0, 4000):
                print(job_row(root, leak, args.steps), flush=True)
        print()
        print(read_speed(root))
        print(many_syncs(root))


if __name__ == "__main__":
    main()
