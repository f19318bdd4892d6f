"""Stand-in for ``ray.util.collective``: re-exports from ``.collective``, as Ray does."""

from ray.util.collective.collective import (
    allgather,
    allgather_multigpu,
    allreduce,
    allreduce_multigpu,
    barrier,
    broadcast,
    broadcast_multigpu,
    get_rank,
    recv,
    recv_multigpu,
    reduce,
    reduce_multigpu,
    reducescatter,
    reducescatter_multigpu,
    send,
    send_multigpu,
)

__all__ = [
    "allgather",
    "allgather_multigpu",
    "allreduce",
    "allreduce_multigpu",
    "barrier",
    "broadcast",
    "broadcast_multigpu",
    "get_rank",
    "recv",
    "recv_multigpu",
    "reduce",
    "reduce_multigpu",
    "reducescatter",
    "reducescatter_multigpu",
    "send",
    "send_multigpu",
]
