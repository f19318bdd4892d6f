"""The GPU check: run once on a machine with an NVIDIA GPU (about 1 minute).

Checks what cannot be checked on CPU machines and prints one line per check, PASS or FAIL:

1. CUDA device time: ``wsprof.patch(device_time=True)`` on a world-size-1 NCCL group, 200
   ``all_reduce`` calls of 64 MiB: every call gets ``device_ns`` from CUDA events (resolved by
   the writer thread, no synchronisation on the calling thread), and device time per call is
   within sane bounds of the host-observed time to completion.
2. NCCL completion hook: with ``TORCH_NCCL_ENABLE_TIMING=1`` the counters
   ``nccl.<op>.active_s`` appear (where the installed torch has the hook).
3. Hook cost on NCCL: added host time per call, patched against unpatched (both layers).
4. The CUDA-only tests of the suite (``pytest -m cuda``).

Usage: python scripts/gpu_check.py [--calls 200]
Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")

import torch
import torch.distributed as dist

import wsprof
from wsprof.trace.reader import read_trace

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)


def per_call_host_ns(t: torch.Tensor, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("FAIL  no CUDA device: run this on a GPU machine", flush=True)
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29571")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    big = torch.ones(16 * 2**20, device="cuda")  # 64 MiB
    out = tempfile.mkdtemp(prefix="wsprof-gpu-")
    path = wsprof.patch(out, device_time=True)
    for _ in range(args.calls):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    wsprof.unpatch()
    trace = read_trace(str(path))
    calls = trace.calls
    timed = calls.device_ns[calls.device_ns >= 0]
    check("device time on every call", len(timed) == args.calls == len(calls),
          f"{len(timed)} of {len(calls)} calls timed")
    if len(timed):
        dev_ms = statistics.median(timed.tolist()) / 1e6
        host_ms = statistics.median(calls.duration_ns.tolist()) / 1e6
        check("device time is plausible", 0 < dev_ms < 1000,
              f"median device {dev_ms:.3f} ms, host {host_ms:.3f} ms per 64 MiB all_reduce")
    nccl = [k for k in trace.counters if k.startswith("nccl.")]
    has_hook = hasattr(dist.ProcessGroup, "_register_on_completion_hook")
    check("NCCL completion hook counters", bool(nccl) or not has_hook,
          f"{nccl or 'none'} (torch has the hook: {has_hook})")
    small = torch.ones(1024, device="cuda")
    per_call_host_ns(small, 100)
    base, hooked = [], []
    for _ in range(5):
        base.append(per_call_host_ns(small, 500))
        wsprof.patch(tempfile.mkdtemp(prefix="wsprof-gpu-bench-"))
        hooked.append(per_call_host_ns(small, 500))
        wsprof.unpatch()
    b, h = statistics.median(base), statistics.median(hooked)
    check("hook cost on NCCL", h - b < 10_000,
          f"{b:.0f} -> {h:.0f} ns per 4 KiB all_reduce (+{h - b:.0f} ns, ratio {h / b:.3f})")
    dist.destroy_process_group()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests"],
                          capture_output=True, text=True, check=False)
    tail = done.stdout.strip().splitlines()[-1:] or ["no output"]
    check("pytest -m cuda", done.returncode == 0 and "skipped" not in tail[0], tail[0])
    failed = [r for r in RESULTS if not r[1]]
    print(f"{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
