"""Stand-in for ``vllm.distributed.device_communicators.pynccl`` (nccl4py version).

Method names and signatures follow vLLM's ``PyNcclCommunicator``; the work is done on CPU
tensors by a real gloo process group.
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
        self,
        in_tensor: torch.Tensor,
        out_tensor: torch.Tensor | None = None,
        op: ReduceOp = ReduceOp.SUM,
        stream: object = None,
    ) -> torch.Tensor:
        if out_tensor is None:
            out_tensor = torch.empty_like(in_tensor)
        out_tensor.copy_(in_tensor)
        dist.all_reduce(out_tensor, op=op, group=self.group)
        return out_tensor

    def all_gather(
        self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, stream: object = None
    ) -> None:
        dist.all_gather(list(output_tensor.chunk(self.world_size)), input_tensor, group=self.group)

    def all_gatherv(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        sizes: list[int],
        stream: object = None,
    ) -> None:
        assert output_tensor.shape[0] == sum(sizes)
        offset = 0
        for root, size in enumerate(sizes):
            part = output_tensor[offset : offset + size]
            if root == self.rank:
                part.copy_(input_tensor)
            dist.broadcast(part, root, group=self.group)
            offset += size

    def reduce_scatter(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        op: ReduceOp = ReduceOp.SUM,
        stream: object = None,
    ) -> None:
        _loopback.reduce_scatter(output_tensor, list(input_tensor.chunk(self.world_size)), op)

    def reduce_scatterv(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        sizes: list[int],
        op: ReduceOp = ReduceOp.SUM,
        stream: object = None,
    ) -> None:
        _loopback.reduce_scatter(output_tensor, list(input_tensor.split(sizes)), op)

    def send(self, tensor: torch.Tensor, dst: int, stream: object = None) -> None:
        _loopback.send(tensor, dst)

    def recv(self, tensor: torch.Tensor, src: int, stream: object = None) -> None:
        _loopback.recv(tensor, src)

    def broadcast(self, tensor: torch.Tensor, src: int, stream: object = None) -> None:
        dist.broadcast(tensor, src, group=self.group)
