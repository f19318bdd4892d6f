"""Ray actor classes for ``tests/integration/test_ray_real.py`` (real Ray, loopback only).

The test wraps them with ``ray.remote``; Ray workers import this module by name (the test puts
``tests/targets`` on their ``PYTHONPATH``). Nothing here imports torch or ``ray.util.collective``
at module level: the import order inside a worker is what :class:`CollectiveActor` tests.
"""

from __future__ import annotations

import importlib
import os
import sys
from datetime import timedelta
from typing import Any

import wsprof

#: Seconds a gloo rendezvous may take before it fails the test (instead of hanging it).
RENDEZVOUS_TIMEOUT_S = 60

#: Modules each import order imports, in order. ``ray_first``: ``ray.util.collective`` imports
#: torch half-way through its own import, and the ``wsprof run`` bootstrap patches at the end of
#: torch's import, while ``ray.util.collective`` is still initialising.
IMPORT_ORDERS: dict[str, tuple[str, ...]] = {
    "torch_first": ("torch", "ray.util.collective"),
    "ray_first": ("ray.util.collective", "torch"),
}

#: The parameters of :class:`BroadcastActor`: (shape, torch dtype name); payloads in bytes are
#: 3*5*4 = 60, 7*2 = 14 and 2*2*8 = 32.
PARAMS: tuple[tuple[tuple[int, ...], str], ...] = (
    ((3, 5), "float32"),
    ((7,), "bfloat16"),
    ((2, 2), "int64"),
)


def _params(rank: int) -> list[Any]:
    """Deterministic parameters: rank 0's are the weights, the other ranks' are garbage."""
    import torch

    g = torch.Generator().manual_seed(1234 + rank)
    out = []
    for shape, dtype in PARAMS:
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dt))
        else:
            out.append(torch.randint(-1000, 1000, shape, generator=g, dtype=dt))
    return out


class BroadcastActor:
    """One rank of a 2-actor torch.distributed gloo group that broadcasts its weights.

    Args:
        rank: this actor's rank.
        world: the group's size.
        port: TCP port of rank 0's rendezvous store on 127.0.0.1.
    """

    def __init__(self, rank: int, world: int, port: int) -> None:
        self.rank, self.world, self.port = rank, world, port

    def setup(self) -> int:
        """Join the gloo group (every rank must call it concurrently).

        Returns:
            This worker's pid.
        """
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{self.port}",
            rank=self.rank,
            world_size=self.world,
            timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S),
        )
        return os.getpid()

    def sync(self, steps: int, out: str | None) -> dict[str, Any]:
        """Run ``steps`` weight syncs: rank 0 updates its parameters, then each parameter is
        broadcast from rank 0 with one ``dist.broadcast``; sync ``s`` is step ``s``.

        Args:
            steps: number of syncs.
            out: run folder for ``wsprof.patch(out=...)``; None: run unpatched.

        Returns:
            ``trace`` (the trace path, None unpatched) and ``results`` (each parameter's raw
            bytes after every step, in order).
        """
        import torch
        import torch.distributed as dist

        path = wsprof.patch(out=out) if out is not None else None
        params = _params(self.rank)
        results: list[bytes] = []
        for s in range(steps):
            wsprof.step(s)
            if self.rank == 0:
                for p in params:
                    p.add_(1)
            for p in params:
                dist.broadcast(p, src=0)
            results.extend(p.view(torch.uint8).numpy().tobytes() for p in params)
        return {"trace": path, "results": results}

    def unpatch(self) -> None:
        """``wsprof.unpatch()``, which writes everything recorded."""
        wsprof.unpatch()

    def leave(self) -> None:
        """Leave the gloo group."""
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class CollectiveActor:
    """One rank of a ``ray.util.collective`` gloo group, profiled by the ``wsprof run``
    bootstrap (``$WSPROF_RUN``, ``$WSPROF_OUT`` and ``hooks/`` on ``PYTHONPATH``).

    Args:
        order: a key of :data:`IMPORT_ORDERS`.
    """

    def __init__(self, order: str) -> None:
        self.torch_before = "torch" in sys.modules
        self.bootstrap = "wsprof.bootstrap" in sys.modules
        names = IMPORT_ORDERS.get(order)
        if names is None:
            raise ValueError(f"unknown import order {order!r}")
        for name in names:  # import_module: an import sorter cannot reorder these
            importlib.import_module(name)

    def state(self) -> dict[str, Any]:
        """What the imports left: whether torch was imported before ``__init__``, whether the
        bootstrap ran, the trace path and whether ``allreduce`` is hooked under both names."""
        import ray.util.collective as col
        import ray.util.collective.collective as impl

        from wsprof.capture import collectives

        return {
            "torch_before": self.torch_before,
            "bootstrap": self.bootstrap,
            "trace": wsprof.trace_path(),
            "hooked": collectives.is_hook(col.allreduce) and col.allreduce is impl.allreduce,
            "pid": os.getpid(),
        }

    def setup(self, rank: int, world: int) -> None:
        """Join the ``default`` collective group (every rank must call it concurrently)."""
        import ray.util.collective as col

        self.rank = rank
        col.init_collective_group(
            world,
            rank,
            backend="gloo",
            group_name="default",
            gloo_timeout=RENDEZVOUS_TIMEOUT_S * 1000,
        )

    def work(self, steps: int) -> list[bytes]:
        """Per step: ``allreduce``, ``broadcast``, ``allgather`` through ``ray.util.collective``,
        then one direct ``dist.all_reduce``; a ``barrier`` at the end.

        Returns:
            The raw bytes of every result tensor, in order.
        """
        import ray.util.collective as col
        import torch
        import torch.distributed as dist

        out: list[bytes] = []
        for s in range(steps):
            wsprof.step()
            a = torch.arange(6, dtype=torch.float32) * (self.rank + 1) + s
            col.allreduce(a)
            b = torch.full((4,), float(self.rank + s), dtype=torch.float64)
            col.broadcast(b, src_rank=0)
            parts = [torch.empty(3, dtype=torch.int32) for _ in range(2)]
            col.allgather(parts, torch.full((3,), self.rank + 10 * s, dtype=torch.int32))
            d = torch.ones(5, dtype=torch.float16) * (self.rank + 1)
            dist.all_reduce(d)
            out.extend(t.numpy().tobytes() for t in (a, b, *parts, d))
        col.barrier()
        return out

    def finish(self) -> str | None:
        """Unpatch (which writes the trace) and leave the group.

        Returns:
            The trace path.
        """
        import ray.util.collective as col

        path = wsprof.trace_path()
        wsprof.unpatch()
        col.destroy_collective_group("default")
        return path
