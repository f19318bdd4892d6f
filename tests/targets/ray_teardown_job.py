"""A Ray job whose driver tears the cluster down right after the last weight sync, the way a
training script's ``ray.shutdown()`` does (real Ray, everything on 127.0.0.1).

Usage: python ray_teardown_job.py OUT_DIR RAY_TEMP_DIR

Starts a local Ray cluster (``_node_ip_address="127.0.0.1"``, Ray's files in RAY_TEMP_DIR; the
caller sets ``HOME``, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` and ``GLOO_SOCKET_IFNAME=lo``),
then :data:`WORLD` actors join a torch.distributed gloo group over 127.0.0.1, each calls
``wsprof.patch(OUT_DIR)`` inside the actor and runs :data:`SYNCS` weight syncs of
:data:`PARAMS` (``wsprof.step(s)`` then one ``dist.broadcast`` per parameter from rank 0):
``SYNCS * len(PARAMS)`` = 24 broadcasts each. The actor returns as soon as its last broadcast
returns, and the driver calls ``ray.shutdown()`` as soon as all three have returned. Nothing
calls ``wsprof.unpatch()`` or ``wsprof.flush()``: Ray force-kills the workers ("Force kill actor
request has received. exiting immediately"), so neither ``atexit`` nor a SIGTERM handler runs.

Prints one JSON line after the shutdown: ``node_ip`` (the driver's node address), ``nodes``
(every node's address as the cluster saw it) and ``actors``: per rank, its ``rank``, ``pid``,
``trace`` path, the number of broadcasts that returned (``calls``) and which ``wsprof`` it
imported.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

#: Actors in the gloo group.
WORLD = 3
#: Weight syncs per actor.
SYNCS = 3
#: The weights, one broadcast each per sync: (shape, float32), 8 MiB in all.
PARAMS: tuple[tuple[int, ...], ...] = (
    (1024, 1024),
    (1024,),
    (512, 1024),
    (512,),
    (1024, 512),
    (1024,),
    (256, 1024),
    (256,),
)
#: Broadcasts per actor.
CALLS = SYNCS * len(PARAMS)
#: Seconds a gloo rendezvous or a ``ray.get`` may take before the job fails instead of hanging.
TIMEOUT_S = 120


class SyncActor:
    """One rank of the gloo group that receives (rank 0: sends) the weights."""

    def __init__(self, rank: int, world: int, port: int) -> None:
        self.rank, self.world, self.port = rank, world, port

    def setup(self) -> int:
        """Join the gloo group (every rank concurrently); return this worker's pid."""
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{self.port}",
            rank=self.rank,
            world_size=self.world,
            timeout=timedelta(seconds=TIMEOUT_S),
        )
        return os.getpid()

    def sync(self, out: str) -> dict[str, Any]:
        """Patch, then :data:`SYNCS` syncs of every parameter; return at once after the last
        broadcast (no unpatch, no flush)."""
        import torch
        import torch.distributed as dist

        import wsprof

        path = wsprof.patch(out)
        params = [torch.full(shape, float(self.rank)) for shape in PARAMS]
        calls = 0
        for s in range(SYNCS):
            wsprof.step(s)
            for p in params:
                if self.rank == 0:
                    p.add_(1)
                dist.broadcast(p, src=0)
                calls += 1
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "trace": path,
            "calls": calls,
            "wsprof": wsprof.__file__,
        }


def main() -> None:
    out, temp_dir = sys.argv[1], sys.argv[2]
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read at ray's import
    import ray

    from wsprof.demo.ports import free_port

    ray.init(
        address="local",
        _node_ip_address="127.0.0.1",
        _temp_dir=temp_dir,
        include_dashboard=False,
        num_cpus=WORLD,
        log_to_driver=True,
    )
    try:
        node_ip = ray.util.get_node_ip_address()
        nodes = [n["NodeManagerAddress"] for n in ray.nodes()]
        port = free_port()
        env = {
            k: os.environ[k]
            for k in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "GLOO_SOCKET_IFNAME", "PYTHONWARNINGS")
            if k in os.environ
        }
        remote = ray.remote(SyncActor).options(runtime_env={"env_vars": env})
        actors = [remote.remote(r, WORLD, port) for r in range(WORLD)]
        ray.get([a.setup.remote() for a in actors], timeout=TIMEOUT_S)
        results = ray.get([a.sync.remote(out) for a in actors], timeout=TIMEOUT_S)
    finally:
        ray.shutdown()  # right after the last collective returned: the bug's teardown
    print(json.dumps({"node_ip": node_ip, "nodes": nodes, "actors": results}), flush=True)


if __name__ == "__main__":
    main()
