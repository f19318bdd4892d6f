"""Stand-in for ``sglang.srt.distributed.device_communicators.pynccl``.

SGLang's ``PyNcclCommunicator`` (adapted from vLLM 0.6.4) reduces in place and takes
``sizes=`` on ``all_gather``/``reduce_scatter`` instead of separate ``*v`` methods; it has
no ``all_gatherv``.
"""

from __future__ import annotations

import _loopback
import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup, ReduceOp


class PyNcclCommunicator:
    def __init__(self, group: ProcessGroup | None = None, device: str = "cpu") -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = torch.device(device)
        self.disabled = False

    def all_reduce(
        self, tensor: torch.Tensor, op: ReduceOp = ReduceOp.SUM, stream: object = None
    ) -> None:
        dist.all_reduce(tensor, op=op, group=self.group)

    def all_gather(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        stream: object = None,
        sizes: list[int] | None = None,
    ) -> None:
        parts = output_tensor.split(sizes) if sizes else output_tensor.chunk(self.world_size)
        dist.all_gather(list(parts), input_tensor, group=self.group)

    def reduce_scatter(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        op: ReduceOp = ReduceOp.SUM,
        stream: object = None,
        sizes: list[int] | None = None,
    ) -> None:
        parts = input_tensor.split(sizes) if sizes else input_tensor.chunk(self.world_size)
        _loopback.reduce_scatter(output_tensor, list(parts), op)

    def send(self, tensor: torch.Tensor, dst: int, stream: object = None) -> None:
        _loopback.send(tensor, dst)

    def recv(self, tensor: torch.Tensor, src: int, stream: object = None) -> None:
        _loopback.recv(tensor, src)

    def broadcast(self, tensor: torch.Tensor, src: int, stream: object = None) -> None:
        dist.broadcast(tensor, src, group=self.group)
