"""A marked run with many steps, for retention: ``STEPS`` steps of ``CALLS`` broadcasts each.

Usage: ``python long_run.py RANK WORLD PORT OUT STEPS CALLS KEEP_STEPS THINNED_STEP_CALLS``
(real gloo process group; ``wsprof.patch(keep_steps=KEEP_STEPS)`` with
``$WSPROF_THINNED_STEP_CALLS`` set to ``THINNED_STEP_CALLS``).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import wsprof


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    steps, calls, keep, thin = (int(v) for v in sys.argv[5:9])
    os.environ["WSPROF_THINNED_STEP_CALLS"] = str(thin)
    wsprof.patch(out, keep_steps=keep, flush_interval_s=0.05)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    t = torch.zeros(16)
    for _ in range(steps):
        wsprof.step()
        with wsprof.phase("weight_sync"):
            for _ in range(calls):
                dist.broadcast(t, src=0)
        wsprof.flush()  # several flushes, so that thinning runs while the run goes on
    dist.destroy_process_group()
    wsprof.unpatch()


if __name__ == "__main__":
    main()
