"""A functional collective called with ``group_name=`` as a keyword after positional arguments
is recorded on the group named by the last positional string (the reduce op), so the coverage
audit calls a fully recorded run incomplete (false alarm)."""

from __future__ import annotations

from pathlib import Path

from helpers import REPO, job_coverage

CODE = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
import torch, torch.distributed as dist, wsprof
rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("gloo", rank=rank, world_size=world)
wsprof.patch(out)
for _ in range(2):
    wsprof.step()
    r = torch.ops._c10d_functional.all_reduce(
        torch.ones(2), "sum", group_name=dist.group.WORLD.group_name)
    torch.ops._c10d_functional.wait_tensor(r)
wsprof.unpatch()
dist.destroy_process_group()
"""


def test_keyword_group_name_is_the_group_recorded(tmp_path: Path) -> None:
    cov = job_coverage(tmp_path, CODE)
    # Every collective went through the hooked op: nothing may be called missing.
    assert cov.status == "complete", cov.lines()
