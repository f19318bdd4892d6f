"""One rank of a real gloo job in which one rank's weight sync gets slower every step.

Usage: python outlier_rank.py RANK WORLD_SIZE PORT OUT_DIR SLOW_RANK

Every rank runs :data:`STEPS` steps marked with ``wsprof.step()``; each step is a short
"rollout" then a ``weight_sync`` phase of :data:`PARAMS` per-parameter ``dist.broadcast`` calls
from rank 0, made through a framework-style wrapper installed before ``wsprof.patch()`` (so its
time is time between layers). On ``SLOW_RANK`` the wrapper sleeps
``SLOW_SLEEP_S_PER_STEP * step`` before each collective (a probe whose cost grows); on the other
ranks it does nothing extra. A barrier ends each step, so the ranks stay in lockstep. The trace
goes to ``OUT_DIR`` (one file per rank).
"""

from __future__ import annotations

import functools
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

import wsprof

warnings.simplefilter("ignore")

STEPS = 8
PARAMS = 12
#: Seconds of every rank's wrapper per call (a constant probe: makes sync times comparable).
BASE_SLEEP_S = 0.001
#: Extra seconds per call per step on the slow rank.
SLOW_SLEEP_S_PER_STEP = 0.002
ROLLOUT_S = 0.02

_step = 0


def probing_wrapper(fn: Callable[..., Any], slow: bool) -> Callable[..., Any]:
    """A framework-style wrapper around a collective: a probe before every call."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        time.sleep(BASE_SLEEP_S + (SLOW_SLEEP_S_PER_STEP * _step if slow else 0.0))
        return fn(*args, **kwargs)

    return wrapper


def main() -> None:
    global _step
    rank, world, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    slow_rank = int(sys.argv[5])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dist.broadcast = probing_wrapper(dist.broadcast, rank == slow_rank)  # type: ignore[assignment]
    wsprof.patch(out_dir)
    params = [torch.full((256,), float(i)) for i in range(PARAMS)]
    for step in range(STEPS):
        _step = step
        wsprof.step()
        with wsprof.phase("rollout"):
            time.sleep(ROLLOUT_S)
        with wsprof.phase("weight_sync"):
            for p in params:
                dist.broadcast(p, src=0)
        dist.barrier()
    wsprof.unpatch()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
