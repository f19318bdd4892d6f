"""A torchrun job for ``wsprof watch`` tests: rollout, then a weight sync that can grow.

Each step (marked with ``wsprof.step()``) every rank "generates" (a rollout phase of about
``ROLLOUT_S``), then rank 0 pushes ``PARAMS`` parameters, one ``dist.broadcast`` each, inside a
``weight_sync`` phase. On every rank the push goes through the job's own wrapper, which
spends ``GROWTH_MS`` x step milliseconds per sync on bookkeeping (0: the healthy twin), so
the weight sync grows linearly step after step.

The job times its own weight sync (``time.perf_counter`` around the phase) and appends
``{"rank", "step", "sync_s"}`` JSON lines to ``$TIMINGS.<rank>``. After its last step each
rank touches ``$DONE.<rank>`` and waits (at most 120 s) until ``$RELEASE`` exists, so that
a test can scrape the finished run while the job is still alive.

Environment: ``STEPS`` (12), ``GROWTH_MS`` (25), ``ROLLOUT_S`` (0.12), ``PARAMS`` (8),
``TIMINGS``, ``DONE``, ``RELEASE`` (paths).
"""

from __future__ import annotations

import json
import os
import time

import torch
import torch.distributed as dist

import wsprof

STEPS = int(os.environ.get("STEPS", "12"))
GROWTH_MS = float(os.environ.get("GROWTH_MS", "25"))
ROLLOUT_S = float(os.environ.get("ROLLOUT_S", "0.12"))
PARAMS = int(os.environ.get("PARAMS", "8"))


def push(t: torch.Tensor, step: int) -> None:
    """The job's wrapper: bookkeeping that costs GROWTH_MS x step per sync, spread over its
    broadcasts."""
    deadline = time.perf_counter() + GROWTH_MS * step / 1e3 / PARAMS
    while time.perf_counter() < deadline:
        pass
    dist.broadcast(t, 0)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    params = [torch.full((1024 * (i + 1),), float(i)) for i in range(PARAMS)]
    timings = f"{os.environ['TIMINGS']}.{rank}"
    for step in range(STEPS):
        wsprof.step(step)
        with wsprof.phase("rollout"):
            a = torch.ones(64, 64)
            deadline = time.perf_counter() + ROLLOUT_S
            while time.perf_counter() < deadline:
                a = a @ a / 64
        t0 = time.perf_counter()
        with wsprof.phase("weight_sync"):
            for p in params:
                push(p, step)
        sync_s = time.perf_counter() - t0
        with open(timings, "a") as fh:
            fh.write(json.dumps({"rank": rank, "step": step, "sync_s": sync_s}) + "\n")
    wsprof.step(STEPS)  # ends the last step (its span is written now)
    open(f"{os.environ['DONE']}.{rank}", "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.environ["RELEASE"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
