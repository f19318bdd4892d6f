"""With ``layers='api'`` the audit counts each API-layer row once (``calls``), also the rows of
the C++ helpers whose hook measured how many collectives they issued (``n_backend`` from
c10d's count): a ``dist._broadcast_coalesced`` that issued 4 broadcasts counts 1, and a run where
every collective went through a hooked name is called incomplete (false alarm)."""

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
wsprof.patch(out, layers="api")
for _ in range(2):
    wsprof.step()
    # 4 tensors of 400 bytes, 64-byte buckets: 4 broadcasts issued from C++, all by the hooked name
    dist._broadcast_coalesced(dist.group.WORLD, [torch.ones(100) for _ in range(4)], 64, 0)
wsprof.step()
wsprof.unpatch()
dist.destroy_process_group()
"""


def test_helper_rows_count_what_they_issued_with_api_layer(tmp_path: Path) -> None:
    cov = job_coverage(tmp_path, CODE)
    assert cov.status == "complete", cov.lines()
