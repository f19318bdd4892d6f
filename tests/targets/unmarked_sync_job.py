"""A torchrun job with no wsprof markers whose weight sync gets slower every step.

Shaped like a report from a user (issue 15): each step every rank trains (compute of uneven
length: rank 0 is the fastest), optionally meets the others at a barrier, then rank 0 pushes
16 parameters, one ``dist.broadcast`` each, through the user's own wrapper :func:`push`. On
rank ``$LEAK_RANK`` the wrapper checks every earlier push for a duplicate: it scans a list that
grows by ``$GROWTH`` entries per push, so its Python overhead grows every step and sits
*between* the broadcasts. The other ranks' wrapper is cheap; they wait for the slow one.

Environment: ``GROWTH`` (entries per push; 0 is the healthy twin), ``STEPS`` (10),
``BARRIER`` (1 = barrier before the sync), ``TRAIN_S`` (rank 0's compute per step, s),
``LEAK_RANK`` (the rank whose wrapper scans its history, 0; every rank pushes through the
wrapper, the others' is cheap).
It knows nothing about wsprof: run it under ``wsprof run -- torchrun ...``.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

GROWTH = int(os.environ.get("GROWTH", "12000"))
STEPS = int(os.environ.get("STEPS", "10"))
BARRIER = os.environ.get("BARRIER", "1") == "1"
TRAIN_S = float(os.environ.get("TRAIN_S", "0.15"))
LEAK_RANK = int(os.environ.get("LEAK_RANK", "0"))

_pushed: list[int] = []


def push(t: torch.Tensor, src: int, leaky: bool) -> None:
    """The user's wrapper: refuses a tensor pushed before (by scanning every earlier push)."""
    if leaky:
        key = id(t) & 0xFFFF
        for k in _pushed:  # O(history): this is the bug
            if k == key + 0x10000:
                raise RuntimeError("pushed twice")
        _pushed.extend([0] * GROWTH)
    dist.broadcast(t, src)


def train(rank: int, step: int) -> torch.Tensor:
    """Compute of about ``TRAIN_S * (1 + rank / 2)`` s: the other ranks are slower than rank 0."""
    a = torch.full((64, 64), 1.0 / 64)
    deadline = time.monotonic() + TRAIN_S * (1 + rank / 2)
    while time.monotonic() < deadline:
        a = a @ a + 1.0 / 64
        time.sleep(0.005)
    return a


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    params = [torch.full((256 * (i + 1),), float(i)) for i in range(16)]
    for step in range(STEPS):
        train(rank, step)
        if BARRIER:
            dist.barrier()
        for p in params:
            push(p, 0, rank == LEAK_RANK)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
