"""Issue 31's figures: what each weight sync put on the wire, against the jobs' own truth.

Runs ``tests/targets/wire_jobs.py`` (3 gloo ranks under ``wsprof run``, 8 steps) for each
variant, and prints per variant: steps whose bytes match the job's own (from the tensors it
sent) exactly, per op too; the median wire time against the job's own summed call time; the
headline; and, for ``--table VARIANT``, ``wsprof analyze``'s per-step transfer table. Then the
cost of the analysis's wire pass (:func:`wsprof.analysis.wire.with_wire`) on a synthetic trace of
``--calls`` calls.

    python scripts/wire_check.py [--variants per_param,bucketed,delta,growing,collectives]
        [--table per_param] [--calls 1000000] [--link-gbps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "targets" / "wire_jobs.py"
WORLD = 3
STEPS = 8


def _free_port() -> int:
    from wsprof.demo.ports import free_port

    return free_port()


def run_variant(base: Path, variant: str) -> tuple[Path, list[dict[str, object]]]:
    """Run one variant under ``wsprof run``; the run folder and rank 0's truth."""
    run, truth = base / f"run-{variant}", base / f"truth-{variant}"
    truth.mkdir(parents=True)
    cmd = [
        sys.executable, "-m", "wsprof", "run", "--out", str(run), "--no-report", "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
        "--master-port", str(_free_port()), str(JOB), str(truth),
        f"--variant={variant}", f"--steps={STEPS}",
    ]  # fmt: skip
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    if res.returncode != 0:
        raise SystemExit(f"{variant}: the job failed:\n{res.stderr[-2000:]}")
    lines = (truth / "truth-0.jsonl").read_text().splitlines()
    return run, [json.loads(x) for x in lines]


def check(run: Path, truth: list[dict[str, object]], link_gbps: float | None) -> str:
    from wsprof.analysis.run import analyze_path

    a = analyze_path(str(run), link_gbps)
    pa = a.primary
    assert pa is not None
    by_step = {int(t["step"]): t for t in truth}  # type: ignore[call-overload]
    exact = ops_exact = 0
    ratios = []
    for r in pa.steps:
        t = by_step.get(r.step)
        if t is None or r.wire is None:
            continue
        exact += int(r.wire.bytes == t["sync_bytes"])
        ops_exact += int({o.op: o.bytes for o in r.wire.ops} == t["ops"])
        calls_s = float(t["calls_s"])  # type: ignore[arg-type]
        if calls_s > 0:
            ratios.append(r.wire.wire_s / calls_s)
    head = a.headline
    growth = [f.severity for f in a.findings if f.kind == "sync_bytes_growth"]
    return (
        f"bytes exact {exact}/{len(truth)}, per op exact {ops_exact}/{len(truth)}, "
        f"wire/job time median {statistics.median(ratios):.3f}; "
        f"bytes growth finding: {growth[0] if growth else 'none'}\n"
        f"    {head.wire_summary() if head else None}"
    )


def wire_pass_cost(n_calls: int) -> str:
    """Seconds the wire pass takes on a synthetic trace: ``n_calls`` broadcasts and gathers
    over 100 steps, every step's sync holding its calls."""
    from wsprof.analysis.model import StepRow
    from wsprof.analysis.wire import with_wire
    from wsprof.trace.model import CallTable

    steps = 100
    per = n_calls // steps
    rows, calls = [], []
    t = 0
    for s in range(steps):
        rows.append(
            StepRow(s, t, t + 10**9, 1.0, None, None, 0.5, 0.0, per, 0.0, 0.0, None, t, None)
        )
        for i in range(per):
            op, api = (
                ("broadcast", "dist.broadcast")
                if i % 2
                else ("all_gather_into_tensor", "_c10d_functional.all_gather_into_tensor")
            )
            t0 = t + i * 1000
            calls.append(
                (t0, t0 + 500, 0, 1, 1, op, api, "api", 4096, "bfloat16", "0", False, -1, s,
                 None, None)
            )  # fmt: skip
        t += 10**9
    table = CallTable.from_rows(calls)
    meta = {"groups": [{"name": "0", "size": 8, "backend": "nccl"}]}
    t0 = time.perf_counter()
    out = with_wire(rows, table, [], meta)
    took = time.perf_counter() - t0
    assert all(r.wire is not None and r.wire.n_calls == per for r in out)
    per_call = took / n_calls * 1e6
    return f"wire pass: {n_calls:,} calls in {steps} steps: {took:.2f} s ({per_call:.2f} µs/call)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="per_param,bucketed,delta,growing,collectives")
    ap.add_argument("--table", default="per_param")
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--link-gbps", type=float, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wsprof-wire-") as tmp:
        for variant in args.variants.split(","):
            run, truth = run_variant(Path(tmp), variant)
            print(f"{variant}: {check(run, truth, args.link_gbps)}")
            if variant == args.table:
                cmd = [sys.executable, "-m", "wsprof", "analyze", str(run)]
                if args.link_gbps:
                    cmd += ["--link-gbps", str(args.link_gbps)]
                text = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
                lines = text.splitlines()
                start = next(
                    (i for i, x in enumerate(lines) if x.startswith("weight-sync transfers")), None
                )
                print("\n".join(lines[:5]))
                if start is not None:
                    print("\n".join(lines[start : start + STEPS + 6]))
    print(wire_pass_cost(args.calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
