"""One rank of a real gloo DDP job (started by torchrun) whose gradient all-reduces come from C++.

Usage: python -m torch.distributed.run --nproc-per-node N ddp_flight.py OUT_DIR [--steps=S]

A ``DistributedDataParallel`` model of three layers (small buckets: several all-reduces per
backward) trains ``S`` steps on 127.0.0.1; DDP's C++ reducer all-reduces the gradient buckets
with no Python name on the way (no hook sees them; c10d's Flight Recorder does). After each
step rank 0's parameters are pushed with one ``dist.broadcast`` each (a weight sync the hooks
see). Every step runs under ``torch.profiler`` (CPU), whose ``c10d::`` op events are the ground
truth of what was issued. Works with and without ``wsprof run`` (``wsprof.step()`` only when
wsprof is loaded). Writes ``OUT_DIR/result-RANK.json``: ``sha256`` of the final parameters
(bit-identical with and without wsprof), per step the profiler's ``c10d::`` event counts by
name, the gradient bytes one backward all-reduces, and the trace path when patched.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from collections import Counter

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

warnings.simplefilter("ignore")


def _c10d_events(prof: profile) -> dict[str, int]:
    """Top-level ``c10d::`` op events by name (one per op given to a process group)."""
    out: Counter[str] = Counter()
    for e in prof.events():
        if not e.name.startswith("c10d::"):
            continue
        parent, nested = e.cpu_parent, False
        while parent is not None:
            if parent.name.startswith("c10d::"):
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            out[e.name] += 1
    return dict(out)


def main() -> None:
    out = sys.argv[1]
    steps = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--steps=")), 6)
    wsprof = sys.modules.get("wsprof")  # loaded by `wsprof run`, absent in the bare run
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.Linear(256, 4),
    )
    model = DDP(net, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    grad_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    gen = torch.Generator().manual_seed(rank)
    per_step = []
    for _ in range(steps):
        if wsprof is not None:
            wsprof.step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = model(torch.randn(16, 64, generator=gen)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            for p in net.parameters():
                dist.broadcast(p.data, src=0)
        per_step.append(_c10d_events(prof))
    h = hashlib.sha256()
    for p in net.parameters():
        h.update(p.detach().numpy().tobytes())
    trace = wsprof.trace_path() if wsprof is not None else None
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"result-{rank}.json"), "w") as f:
        json.dump(
            {
                "sha256": h.hexdigest(),
                "steps": per_step,
                "grad_bytes": grad_bytes,
                "params": len(list(net.parameters())),
                "trace": trace,
            },
            f,
        )


if __name__ == "__main__":
    main()
