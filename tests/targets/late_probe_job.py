"""A gloo job shaped like slime's weight sync with its free-memory probe (issue 28, item 1).

slime's ``monkey_patch_torch_dist`` wraps ``dist.broadcast``, ``all_gather``,
``all_gather_into_tensor`` (and ``_allgather_base`` where torch has it) with a probe of free
memory, in the actor's init: after torch was imported, so after ``wsprof run`` patched. Here the
probe (:func:`install_probe`, the wrapper :func:`probing_collective`) walks a pool that grows
every step, so its cost per call grows; steps carry no markers.

Usage: ``python late_probe_job.py RANK WORLD PORT OUT MODE``, MODE one of

* ``plain``: no wsprof call (the reference results; also what runs under ``wsprof run``);
* ``after``: ``wsprof.patch(OUT)`` then the probe (the seed order);
* ``before``: the probe, then ``wsprof.patch(OUT)``;
* ``launch``: start WORLD ranks of this script in ``plain`` mode as child processes (what
  ``wsprof run -- python late_probe_job.py 0 WORLD PORT OUT launch`` runs) and wait for them.

Each rank writes ``OUT/result-RANK.json``: the parameters after the last step (as lists of
floats: bit-identical comparisons), the step start times and the probe's own time per step
(``time.monotonic_ns``, the trace's clock), and after ``wsprof.unpatch()`` whether each name
still holds the probe.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

#: Steps of the job (no markers: wsprof finds them).
STEPS = 12
#: Parameters broadcast from rank 0 per step, and their elements.
N_PARAMS = 6
PARAM_NUMEL = 4096
#: Segments the probe's pool gains each step (its walk grows by as many per call).
GROWTH_PER_STEP = 12_000
#: Seconds of compute per step outside the sync.
COMPUTE_S = 0.03
#: The names slime wraps (those the installed torch has).
PROBED = ("broadcast", "all_gather", "all_gather_into_tensor", "_allgather_base")

#: The probe's pool ("free segments") and its own time per step.
POOL: list[int] = []
PROBE_NS: list[int] = [0]


def free_bytes() -> int:
    """The probe: walk every segment of the pool (cost grows with it)."""
    total = 0
    for seg in POOL:
        total += seg
    return total


def install_probe() -> dict[str, Callable[..., Any]]:
    """Wrap the collectives the way slime does; returns the wrappers by name."""
    installed = {}
    for name in PROBED:
        fn = dist.__dict__.get(name)
        if fn is None:
            continue

        def make(inner: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(inner)
            def probing_collective(*args: Any, **kwargs: Any) -> Any:
                t0 = time.monotonic_ns()
                free_bytes()
                PROBE_NS[-1] += time.monotonic_ns() - t0
                return inner(*args, **kwargs)

            return probing_collective

        installed[name] = make(fn)
        setattr(dist, name, installed[name])
    return installed


def compute(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline:
        for i in range(2_000):
            x += i


def train(rank: int, world: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1234 + rank)
    params = [torch.randn(PARAM_NUMEL, generator=gen) for _ in range(N_PARAMS)]
    step_t0 = []
    for step in range(STEPS):
        step_t0.append(time.monotonic_ns())
        PROBE_NS.append(0)
        compute(COMPUTE_S)
        for p in params:
            p.mul_(1.0001).add_(0.5 * rank + step)
        for p in params:  # the weight push: one broadcast per tensor from rank 0
            dist.broadcast(p, src=0)
        stats = torch.tensor([float(step), float(rank)])
        gathered = [torch.empty(2) for _ in range(world)]
        dist.all_gather(gathered, stats)
        full = torch.empty(2 * world)
        dist.all_gather_into_tensor(full, stats)
        params[0].add_(full.sum() * 1e-3 + sum(float(g.sum()) for g in gathered) * 1e-3)
        POOL.extend([2 << 20] * GROWTH_PER_STEP)
    return {
        "params": [p.tolist() for p in params],
        "step_t0_ns": [*step_t0, time.monotonic_ns()],
        "probe_ns": PROBE_NS[1:],
    }


def main() -> None:
    rank, world, port, out, mode = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        sys.argv[3],
        sys.argv[4],
        sys.argv[5],
    )
    if mode == "launch":
        procs = [
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(r), str(world), port, out, "plain"]
            )
            for r in range(world)
        ]
        sys.exit(max(p.wait() for p in procs))
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    res: dict[str, Any] = {"mode": mode}
    wrappers: dict[str, Callable[..., Any]] = {}
    if mode == "before":
        wrappers = install_probe()
    if mode in ("before", "after"):
        import wsprof

        res["trace"] = wsprof.patch(out)
    if mode in ("after", "plain"):
        wrappers = install_probe()
    res.update(train(rank, world))
    if mode in ("before", "after"):
        import wsprof

        wsprof.unpatch()
        res["probe_on_names_after_unpatch"] = {
            n: dist.__dict__.get(n) is w for n, w in wrappers.items()
        }
    res["probed_names"] = sorted(wrappers)
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"result-{rank}.json"), "w") as fh:
        json.dump(res, fh)


if __name__ == "__main__":
    main()
