"""How long ``wsprof attach --inject`` stops its target: per inject and per detach.

    python scripts/bench_inject.py [--rounds 5] [--world 1]

Starts the test job ``tests/targets/inject_job.py`` (gloo, its own wrapper on
``dist.broadcast``; ``--world`` ranks), injects ``patch`` and ``unpatch`` into rank 0
``--rounds`` times while it runs, and prints per action: the pause (the target seen stopped in
``/proc/<pid>/stat`` while gdb holds it), the time from queuing to the target's answer, and
the time the target's main thread spent patching or unpatching. Then whether the job finished
with its own ``dist.broadcast`` and the checksum of an uninjected run.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from wsprof.capture.inject.injector import check, inject

JOB = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "targets", "inject_job.py"
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(world: int, steps: int) -> list[subprocess.Popen[str]]:
    port = str(_port())
    return [
        subprocess.Popen(
            [sys.executable, JOB, str(r), str(world), port, str(steps), "0.04"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]


def _tail(p: subprocess.Popen[str]) -> list[str]:
    out, _ = p.communicate(timeout=300)
    return [ln for ln in out.splitlines() if ln.startswith(("checksum", "identity"))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--world", type=int, default=1)
    args = ap.parse_args()
    steps = 60 + 40 * args.rounds
    plain = _job(args.world, steps)
    expected = [_tail(p) for p in plain]
    procs = _job(args.world, steps)
    assert procs[0].stdout is not None
    for line in procs[0].stdout:
        if line.startswith("step 5"):
            break
    target = check(procs[0].pid)
    rows: dict[str, list[tuple[float, float, float]]] = {"patch": [], "unpatch": []}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.rounds):
            for action in ("patch", "unpatch"):
                r = inject(target, action, out)
                assert r.ack.get("ok"), r.ack
                rows[action].append((r.pause_s, r.wall_s, float(r.ack.get("in_target_s", 0))))
                time.sleep(0.3)
        got = [_tail(p) for p in procs]
    print(f"target: pid {target.pid}, {target.mechanism}, Python {target.python}")
    print(
        f"{'action':<8} {'pause ms (median / max)':>24} {'to answer ms':>14} {'in target ms':>14}"
    )
    for action, vals in rows.items():
        pause = [v[0] * 1e3 for v in vals]
        wall = [v[1] * 1e3 for v in vals]
        inside = [v[2] * 1e3 for v in vals]
        print(
            f"{action:<8} {statistics.median(pause):>12.0f} / {max(pause):<9.0f} "
            f"{statistics.median(wall):>14.0f} {statistics.median(inside):>14.0f}"
        )
    print(f"finished as uninjected: {got == expected} ({got[0]})")
    return 0 if got == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
