"""Shared by the stand-ins: a world-size-1 point-to-point mailbox and sliced reductions.

gloo cannot send a tensor to its own rank, so ``send``/``recv`` to self go through a FIFO of
copies; everything else runs real ``torch.distributed`` collectives on the default group.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist

MAILBOX: deque[torch.Tensor] = deque()


def send(tensor: torch.Tensor, dst: int) -> None:
    if dst != dist.get_rank():
        raise ValueError(f"stand-in can only send to its own rank, not {dst}")
    MAILBOX.append(tensor.detach().clone())


def recv(tensor: torch.Tensor, src: int) -> None:
    if src != dist.get_rank():
        raise ValueError(f"stand-in can only receive from its own rank, not {src}")
    tensor.copy_(MAILBOX.popleft())


def reduce_scatter(output: torch.Tensor, chunks: list[torch.Tensor], op: object) -> None:
    """Reduce every chunk across the group (all_reduce), keep this rank's."""
    reduced = [c.clone() for c in chunks]
    for c in reduced:
        dist.all_reduce(c, op=op)  # type: ignore[arg-type]
    output.copy_(reduced[dist.get_rank()])
