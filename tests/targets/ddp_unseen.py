"""One rank of a real gloo job whose gradient all-reduces no Python hook can see.

Usage: python ddp_unseen.py RANK WORLD_SIZE PORT OUT_DIR [--destroy] [--steps=N]

A ``DistributedDataParallel`` model trains ``STEPS`` steps: DDP's C++ reducer all-reduces the
gradient buckets straight from C++ (no ``torch.distributed`` name, no ``ProcessGroup`` method
in Python). After each step the rank pushes its parameters with one ``dist.broadcast`` each
(a weight sync wsprof does see). Writes ``OUT_DIR/result-RANK.json`` with the trace path and
c10d's own count of collectives issued on the default group while patched.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import wsprof

warnings.simplefilter("ignore")
STEPS = 4


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    trace = wsprof.patch(out)  # before the group: the group's count starts under the hooks
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--steps=")), STEPS)
    for _ in range(steps):
        wsprof.step()
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with wsprof.phase("weight_sync"):
            for p in model.module.parameters():
                dist.broadcast(p.data, src=0)
    issued = dist.group.WORLD._get_sequence_number_for_group()
    if "--destroy" in sys.argv:
        dist.destroy_process_group()
    wsprof.unpatch()
    with open(os.path.join(out, f"result-{rank}.json"), "w") as f:
        json.dump({"trace": trace, "issued": issued, "params": 4}, f)


if __name__ == "__main__":
    main()
