"""A real job whose weight sync is mostly the user's own wrapper, for ``wsprof attach``.

The shape of the leaking rank of issue 15: rank 0 pushes :data:`N_PARAMS` parameters with one
``dist.broadcast`` each, through the user's wrapper :func:`sync_param`, whose Python overhead
grows every step (it scans a list that grows by :data:`GROWTH_PER_STEP` entries per step).
Most samples of the sync are inside the wrapper's scan, only some inside the broadcast.
Between two syncs, :func:`compute` spins for :data:`COMPUTE_S` (the rest of the step).

Run as rank 0 (what the test attaches to): it starts rank 1 itself (same script,
``--rank 1``), a gloo group of two on the loopback, prints ``ready`` (flushed) and repeats
steps until stdin closes (the test releases it); then it tells rank 1 to stop with one more
broadcast and both exit.

Usage: ``python sync_wrapper_target.py [--rank 1 --port PORT]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

#: Parameters pushed per step, one broadcast each.
N_PARAMS = 16
#: Elements of each parameter (float32): 256 KiB, a broadcast of well under a millisecond.
PARAM_NUMEL = 64 * 1024
#: Entries the wrapper's list gains every step (the leak); it starts with as many.
GROWTH_PER_STEP = 60_000
#: Seconds of the step outside the weight sync (constant).
COMPUTE_S = 0.05
#: Additions between two clock reads in :func:`compute`.
SPIN_CHUNK = 5_000
#: Steps after which the list stops growing (keeps a long test from running out of time).
MAX_GROWTH_STEPS = 400

_released = threading.Event()


def compute(seconds: float) -> int:
    """The rest of the step: burn CPU for ``seconds``."""
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline:
        for i in range(SPIN_CHUNK):
            x += i
    return x


def sync_param(dist: object, tensor: object, seen: list[int], key: int) -> None:
    """The user's wrapper: a registry lookup that scans a growing list, then the broadcast."""
    if key in seen:  # a miss: scans the whole list, in this frame
        return
    dist.broadcast(tensor, src=0)  # type: ignore[attr-defined]


def push_weights(dist: object, params: list[object], seen: list[int]) -> None:
    """Rank 0's weight sync: every parameter through the wrapper."""
    for i, p in enumerate(params):
        sync_param(dist, p, seen, -1 - i)


def keep_going(dist: object, torch: object, go: bool) -> bool:
    """One control broadcast: rank 0 says whether another step follows."""
    flag = torch.tensor([1 if go else 0])  # type: ignore[attr-defined]
    dist.broadcast(flag, src=0)  # type: ignore[attr-defined]
    return bool(flag.item())


def _wait_for_stdin_close() -> None:
    sys.stdin.read()
    _released.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    import torch
    import torch.distributed as dist

    port = args.port
    peer = None
    if args.rank == 0:
        from wsprof.demo.ports import free_port

        port = free_port()
        peer = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--rank", "1", "--port", str(port)],
            stdin=subprocess.DEVNULL,
        )
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=args.rank, world_size=2
    )
    params = [torch.zeros(PARAM_NUMEL) for _ in range(N_PARAMS)]
    if args.rank == 1:
        while keep_going(dist, torch, True):
            for p in params:
                dist.broadcast(p, src=0)
        dist.destroy_process_group()
        return
    threading.Thread(target=_wait_for_stdin_close, name="release", daemon=True).start()
    seen = list(range(GROWTH_PER_STEP))
    print("ready", flush=True)
    step = 0
    while keep_going(dist, torch, not _released.is_set()):
        compute(COMPUTE_S)
        push_weights(dist, params, seen)
        if step < MAX_GROWTH_STEPS:
            seen.extend(range(len(seen), len(seen) + GROWTH_PER_STEP))
        step += 1
    dist.destroy_process_group()
    if peer is not None:
        peer.wait(timeout=30)


if __name__ == "__main__":
    main()
