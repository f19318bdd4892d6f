"""With ``layers='api'`` no call knows its group, and the audit counts every recorded call for
every group: collectives on a second group that wsprof never saw are covered by the default
group's calls, and the run is called complete."""

from __future__ import annotations

from pathlib import Path

from helpers import NO_FLIGHT, REPO, job_coverage

CODE = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
import torch, torch.distributed as dist, wsprof
rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("gloo", rank=rank, world_size=world)
sub = dist.new_group([0])
wsprof.patch(out, layers="api")
for _ in range(3):
    wsprof.step()
    t = torch.ones(4)
    dist.all_reduce(t)  # default group: seen
    sub._get_backend(torch.device("cpu")).allreduce([t]).wait()  # not seen with layers='api'
wsprof.step()
wsprof.unpatch()
dist.destroy_process_group()
"""


def test_unseen_subgroup_collectives_are_not_called_complete(tmp_path: Path) -> None:
    cov = job_coverage(tmp_path, CODE, env=NO_FLIGHT)  # the recorder would record them
    # 3 collectives on the subgroup went by no hook: never "complete".
    assert cov.status != "complete", [(g.group, g.issued, g.recorded) for g in cov.groups]
