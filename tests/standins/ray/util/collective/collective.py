"""Stand-in for ``ray.util.collective.collective``: same function names and signatures as
Ray's, run on the default gloo group (``group_name`` must be ``"default"``).

Like the real module it imports ``types`` from its package, so importing this module runs
``ray/util/collective/__init__.py`` first.
"""

from __future__ import annotations

import _loopback
import torch
import torch.distributed as dist

from ray.util.collective import types


def _check(group_name: str, rank: int = 0) -> None:
    if group_name != "default":
        raise RuntimeError(f"The collective group '{group_name}' is not initialized.")
    if rank < 0 or rank >= dist.get_world_size():
        raise ValueError(f"rank '{rank}' must be less than world size '{dist.get_world_size()}'")


def get_rank(group_name: str = "default") -> int:
    return dist.get_rank()


def allreduce(tensor: torch.Tensor, group_name: str = "default", op=types.ReduceOp.SUM) -> None:
    _check(group_name)
    dist.all_reduce(tensor, op=op)


def allreduce_multigpu(
    tensor_list: list[torch.Tensor], group_name: str = "default", op=types.ReduceOp.SUM
) -> None:
    _check(group_name)
    for t in tensor_list:
        dist.all_reduce(t, op=op)


def barrier(group_name: str = "default") -> None:
    _check(group_name)
    dist.barrier()


def reduce(
    tensor: torch.Tensor, dst_rank: int = 0, group_name: str = "default", op=types.ReduceOp.SUM
) -> None:
    _check(group_name, dst_rank)
    dist.reduce(tensor, dst_rank, op=op)


def reduce_multigpu(
    tensor_list: list[torch.Tensor],
    dst_rank: int = 0,
    dst_tensor: int = 0,
    group_name: str = "default",
    op=types.ReduceOp.SUM,
) -> None:
    _check(group_name, dst_rank)
    dist.reduce(tensor_list[dst_tensor], dst_rank, op=op)


def broadcast(tensor: torch.Tensor, src_rank: int = 0, group_name: str = "default") -> None:
    _check(group_name, src_rank)
    dist.broadcast(tensor, src_rank)


def broadcast_multigpu(
    tensor_list: list[torch.Tensor],
    src_rank: int = 0,
    src_tensor: int = 0,
    group_name: str = "default",
) -> None:
    _check(group_name, src_rank)
    dist.broadcast(tensor_list[src_tensor], src_rank)
    for t in tensor_list:
        t.copy_(tensor_list[src_tensor])


def allgather(
    tensor_list: list[torch.Tensor], tensor: torch.Tensor, group_name: str = "default"
) -> None:
    _check(group_name)
    if len(tensor_list) != dist.get_world_size():
        raise RuntimeError("The length of the tensor list must be equal to world_size.")
    dist.all_gather(tensor_list, tensor)


def allgather_multigpu(
    output_tensor_lists: list[list[torch.Tensor]],
    input_tensor_list: list[torch.Tensor],
    group_name: str = "default",
) -> None:
    _check(group_name)
    for out, t in zip(output_tensor_lists, input_tensor_list):
        dist.all_gather(out, t)


def reducescatter(
    tensor: torch.Tensor,
    tensor_list: list[torch.Tensor],
    group_name: str = "default",
    op=types.ReduceOp.SUM,
) -> None:
    _check(group_name)
    _loopback.reduce_scatter(tensor, tensor_list, op)


def reducescatter_multigpu(
    output_tensor_list: list[torch.Tensor],
    input_tensor_lists: list[list[torch.Tensor]],
    group_name: str = "default",
    op=types.ReduceOp.SUM,
) -> None:
    _check(group_name)
    for out, chunks in zip(output_tensor_list, input_tensor_lists):
        _loopback.reduce_scatter(out, chunks, op)


def send(tensor: torch.Tensor, dst_rank: int, group_name: str = "default") -> None:
    _check(group_name, dst_rank)
    _loopback.send(tensor, dst_rank)


def send_multigpu(
    tensor: torch.Tensor,
    dst_rank: int,
    dst_gpu_index: int,
    group_name: str = "default",
    n_elements: int = 0,
) -> None:
    _check(group_name, dst_rank)
    _loopback.send(tensor.flatten()[:n_elements] if n_elements else tensor, dst_rank)


def recv(tensor: torch.Tensor, src_rank: int, group_name: str = "default") -> None:
    _check(group_name, src_rank)
    _loopback.recv(tensor, src_rank)


def recv_multigpu(
    tensor: torch.Tensor,
    src_rank: int,
    src_gpu_index: int,
    group_name: str = "default",
    n_elements: int = 0,
) -> None:
    _check(group_name, src_rank)
    _loopback.recv(tensor.flatten()[:n_elements] if n_elements else tensor, src_rank)
