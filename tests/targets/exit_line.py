"""One rank that patches, forms a gloo group, destroys it and exits: the exit line naming the
trace must come from rank 0 only, though no group is left at exit.

Usage: python exit_line.py RANK WORLD_SIZE PORT OUT_DIR
"""

from __future__ import annotations

import os
import sys

import torch.distributed as dist

import wsprof

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
os.environ.pop("RANK", None)  # as under multiprocessing.spawn: no launcher environment
wsprof.patch(out)
dist.init_process_group("gloo", rank=rank, world_size=world)
dist.barrier()
dist.destroy_process_group()
