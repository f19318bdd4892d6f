"""A process group destroyed and created again (``destroy_process_group`` then
``init_process_group``, as a restarted trainer or an elastic re-rendezvous does) reuses its name,
and c10d's count starts again at 0. The audit takes the new group's readings as the same
group's, subtracts the old lifetime's count from them and hides what the new group issued
unseen: the run is called complete with DDP's C++ gradient all-reduces never recorded."""

from __future__ import annotations

from pathlib import Path

from helpers import NO_FLIGHT, REPO, job_coverage

CODE = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
import torch, torch.distributed as dist, wsprof
from torch.nn.parallel import DistributedDataParallel as DDP
from wsprof.demo.ports import free_port
rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
wsprof.patch(out)
dist.init_process_group("gloo", rank=rank, world_size=world)
for _ in range(6):
    wsprof.step()
    dist.all_reduce(torch.ones(2))  # seen
wsprof.step()
dist.destroy_process_group()
os.environ["MASTER_PORT"] = str(free_port())  # world size 1: this rank alone picks it
dist.init_process_group("gloo", rank=rank, world_size=world)  # group "0" again, count 0
model = DDP(torch.nn.Linear(4, 4))
for _ in range(3):
    wsprof.step()
    model(torch.ones(2, 4)).sum().backward()  # one bucket all-reduce from C++: unseen
wsprof.step()
dist.destroy_process_group()
wsprof.unpatch()
"""


def test_recreated_group_is_not_hidden_by_the_old_count(tmp_path: Path) -> None:
    cov = job_coverage(tmp_path, CODE, env=NO_FLIGHT)  # the recorder would record them
    assert cov.status == "incomplete", [(g.group, g.issued, g.recorded) for g in cov.groups]
