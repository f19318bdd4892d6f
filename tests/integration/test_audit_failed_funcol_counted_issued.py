"""A functional collective that raises before issuing anything (unknown group name) is
recorded as one issued collective, so it cancels out a collective wsprof never saw and the
coverage audit calls a run complete that is not (DDP's C++ gradient all-reduce unseen)."""

from __future__ import annotations

from pathlib import Path

from helpers import NO_FLIGHT, REPO, job_coverage

CODE = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
import torch, torch.distributed as dist, wsprof
from torch.nn.parallel import DistributedDataParallel as DDP
rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("gloo", rank=rank, world_size=world)
wsprof.patch(out)
model = DDP(torch.nn.Linear(4, 4))
wsprof.step()
model(torch.ones(2, 4)).sum().backward()  # one bucket all-reduce from C++: no hook sees it
try:
    torch.ops._c10d_functional.all_reduce(torch.ones(2), "sum", "no-such-group")
except RuntimeError:
    pass  # raised before anything was issued
wsprof.step()
wsprof.unpatch()
dist.destroy_process_group()
"""


def test_failed_functional_op_does_not_hide_an_unseen_collective(tmp_path: Path) -> None:
    cov = job_coverage(tmp_path, CODE, env=NO_FLIGHT)  # the recorder would record it
    assert cov.status == "incomplete", [(g.issued, g.recorded) for g in cov.groups]
