"""Analysis speed on one long trace: ``--steps`` x ``--calls`` collective calls (default
100 x 100,000 = 10M), every call kept in detail (retention off), with step and weight-sync
phase markers. Prints the time and peak memory of ``analyze_path`` measured in a fresh
process (the trace is written first, by the real recorder and writer). Not a test.

The analyzer issue's budget: 10M call records analysed in <= 20 s and <= 4 GB on 2 cores.

With ``--report``, the child also renders the HTML report and prints its size (the report
issue's budget: <= 5 MB for a run of 1M calls: ``--steps 10 --calls 100000 --report``).

Usage: python scripts/bench_analysis.py [--steps 100] [--calls 100000] [--report]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from wsprof.capture.recorder import Recorder
from wsprof.trace import ring
from wsprof.trace.retention import Retention

_CHILD = """
import json, resource, sys, time
t0 = time.monotonic()
from wsprof.analysis.run import analyze_path
a = analyze_path(sys.argv[1])
dt = time.monotonic() - t0
size = None
if len(sys.argv) > 2:
    import os
    from wsprof.report.html import write_html
    t1 = time.monotonic()
    write_html(a, sys.argv[2])
    size = (os.path.getsize(sys.argv[2]), time.monotonic() - t1)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "report": size, "peak_rss_kib": peak,
                  "steps": len(a.primary.steps), "findings": [f.kind for f in a.findings],
                  "calls": sum(o.n_calls for o in a.primary.ops)}))
"""


def write_trace(steps: int, calls: int) -> str:
    rng = random.Random(0)
    rec = Recorder(
        tempfile.mkdtemp(prefix="wsprof-analysis-"),
        flush_interval_s=3600,
        ring_records=calls + 2,  # one step's records (calls and 2 spans) fit
        retention=Retention(keep_steps=0),
    )
    # API-layer hooks as ids 0 and 1; a call record's word 1 is its kind and hook id, as the
    # hooks of wsprof.capture.collectives put it.
    hooks = []
    for i, (op, api) in enumerate(
        [("broadcast", "dist.broadcast"), ("all_gather_into_tensor", "dist.all_gather_into_tensor")]
    ):
        rec.register_hook(i, op, api, "api")
        hooks.append(ring.CALL | (i << 8))
    put = rec.ring.put
    dt, grp, phase = (rec.strings.intern(s) for s in ("bfloat16", "0", "weight_sync"))
    sizes = [rng.choice([4096, 2**20, 4 * 2**20, 16 * 2**20]) for _ in range(300)]
    t = time.monotonic_ns()
    ident = 140_000_000_000_123
    for step in range(steps):
        t_step = t
        sync_start = t + 50_000_000
        t = sync_start
        for i in range(calls):
            dur = rng.randint(20_000, 60_000) + step * 200  # per-call cost grows a little
            # The call record as the hooks put it (collectives._record_slow): word 1, then
            # t0, t1, backend_ns, n_backend, thread, bytes, dtype, grp, is_async, site, step,
            # phase, error.
            put(
                hooks[i % 50 == 0],
                t,
                t + dur,
                dur - 5_000,
                2,
                ident,
                sizes[i % 300],
                dt,
                grp,
                0,
                i % 3,
                step,
                phase,
                -1,
            )
            t += dur + rng.randint(1_000, 5_000)
        rec.spans.append(("phase", "weight_sync", sync_start, t, step, ident))
        t += 50_000_000
        rec.spans.append(("step", str(step), t_step, t, step, ident))
        rec.flush()
    rec.close()
    assert rec.dropped_calls == 0 and rec.written() == steps * calls, "calls dropped"
    return rec.path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--report", action="store_true", help="also render the HTML report")
    args = ap.parse_args()
    t0 = time.monotonic()
    path = write_trace(args.steps, args.calls)
    print(
        f"wrote {args.steps} steps x {args.calls:,} calls = {args.steps * args.calls:,} calls "
        f"({os.path.getsize(path) / 2**20:.0f} MiB) in {time.monotonic() - t0:.0f} s"
    )
    report = [os.path.join(os.path.dirname(path), "report.html")] if args.report else []
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, path, *report], capture_output=True, text=True, check=True
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"analyze_path: {r['seconds']:.1f} s, peak RSS {r['peak_rss_kib'] / 2**20:.2f} GiB, "
        f"{r['calls']:,} calls in {r['steps']} steps; findings: {', '.join(r['findings'])}"
    )
    if r["report"]:
        print(f"HTML report: {r['report'][0] / 2**20:.2f} MiB, rendered in {r['report'][1]:.1f} s")


if __name__ == "__main__":
    main()
