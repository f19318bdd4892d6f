"""Does the demo's verdict hold while other work keeps every core busy?

Starts one busy-looping process per CPU core (plain Python arithmetic, nothing shared with the
demo), then runs ``wsprof demo`` ``--runs`` times (alternating ``--markers`` and
``--no-markers``, and with ``--healthy`` also ``--fault none``), and prints, per run, where the
steps came from, the weight-sync series' shape and verdict, and the warning findings. Exits 1
when a faulty run is not called accumulating, or a healthy run gets a warning.

Run: ``python scripts/demo_under_load.py [--runs 10] [--healthy] [--burners N]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time


def _burn(stop: float) -> None:
    x = 0
    while time.monotonic() < stop:
        for i in range(10_000):
            x = (x * 31 + i) % 1_000_003


def _demo(out: str, markers: bool, fault: str) -> dict[str, object]:
    cmd = [
        sys.executable,
        "-m",
        "wsprof",
        "demo",
        "--no-pyspy",
        "--out",
        out,
        "--report",
        os.path.join(out, "report.html"),
        "--fault",
        fault,
        "--markers" if markers else "--no-markers",
    ]
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    wall = time.monotonic() - t0
    if res.returncode not in (0, 1):
        return {"error": res.stderr.strip().splitlines()[-1:] or ["?"], "wall_s": wall}
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "wsprof", "analyze", out, "--format", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    sync = next((s for s in doc["series"] if s["name"] == "weight_sync_s"), None)
    return {
        "wall_s": wall,
        "step_source": doc["step_source"],
        "verdict": doc["verdict"]["status"],
        "sync_shape": sync["shape"] if sync else None,
        "sync_accumulating": bool(sync and sync["accumulating"]),
        "sync_values": [round(v, 2) for v in sync["values"]] if sync else [],
        "warnings": sorted(
            {
                f["kind"] + (f":{f['evidence']['series']}" if "series" in f["evidence"] else "")
                for f in doc["findings"]
                if f["severity"] != "info"
            }
        ),
        "series": {
            s["name"]: [round(v, 2) for v in s["values"]]
            for s in doc["series"]
            if s["name"] in ("step_s", "rollout_s", "weight_sync_s")
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--healthy", action="store_true", help="also run --fault none each time")
    ap.add_argument("--burners", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    stop = time.monotonic() + 24 * 3600
    burners = [mp.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.burners)]
    for b in burners:
        b.start()
    bad = 0
    try:
        print(f"{args.burners} busy processes on {os.cpu_count()} cores")
        print(
            f"{'run':>3} {'fault':<6} {'markers':<8} {'steps from':<10} {'verdict':<12} "
            f"{'sync shape':<17} {'accum':<5} {'wall s':>6}  warnings"
        )
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                for fault in ("probe", "none") if args.healthy else ("probe",):
                    markers = i % 2 == 0
                    r = _demo(os.path.join(tmp, f"{i}-{fault}"), markers, fault)
                    if "error" in r:
                        print(f"{i:>3} {fault:<6} error: {r['error']}")
                        bad += 1
                        continue
                    ok = r["sync_accumulating"] if fault == "probe" else not r["warnings"]
                    bad += not ok
                    print(
                        f"{i:>3} {fault:<6} {'yes' if markers else 'no':<8} "
                        f"{r['step_source']!s:<10} {r['verdict']!s:<12} "
                        f"{r['sync_shape']!s:<17} {'yes' if r['sync_accumulating'] else 'no':<5} "
                        f"{r['wall_s']:6.0f}  {','.join(r['warnings']) or '-'}"
                        f"{'' if ok else '  WRONG ' + str(r['series'])}",
                        flush=True,
                    )
    finally:
        for b in burners:
            b.terminate()
    print(f"wrong verdicts: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
