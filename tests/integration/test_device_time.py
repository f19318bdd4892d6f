"""CUDA device time of collectives (skipped without CUDA): CUDA events resolved lazily."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import free_port

import wsprof
from wsprof.trace.reader import read_trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def nccl() -> Iterator[None]:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    yield
    dist.destroy_process_group()


def test_device_time_is_recorded_per_call(tmp_path: Path, nccl: None) -> None:
    path = wsprof.patch(str(tmp_path), device_time=True)
    try:
        t = torch.ones(1 << 20, device="cuda")
        for _ in range(20):
            dist.all_reduce(t)
        torch.cuda.synchronize()
    finally:
        wsprof.unpatch()
    calls = read_trace(str(path)).calls
    assert len(calls) == 20
    timed = calls.device_ns[calls.device_ns >= 0]
    assert len(timed) == 20, "every call's end event completed after synchronize()"
    assert (timed > 0).all()
    # The device time of a synchronous all_reduce is no longer than the time to completion
    # observed on the host plus the queue ahead of it (loose, but cannot pass when device_ns
    # holds garbage such as milliseconds or nanoseconds since boot).
    assert int(timed.max()) < 10**10


def test_without_device_time_nothing_is_timed(tmp_path: Path, nccl: None) -> None:
    path = wsprof.patch(str(tmp_path))
    try:
        dist.all_reduce(torch.ones(8, device="cuda"))
        torch.cuda.synchronize()
    finally:
        wsprof.unpatch()
    assert read_trace(str(path)).calls.device_ns.tolist() == [-1]
