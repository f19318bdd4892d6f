"""One rank of a real gloo job that runs the collective paths of RL weight sync, for coverage.

Usage: python coverage_paths.py RANK WORLD_SIZE PORT OUT_DIR PATHS (--wsprof | --bare)

``PATHS`` is one path name, several joined by commas, or ``all`` (every path of this world
size; see :data:`PATHS`). Every path of one process shares its gloo group and runs in its own
steps, each step under its own ``torch.profiler`` (CPU activity, in both modes), after
``wsprof.step()`` when patched. For each path it writes ``OUT_DIR/result-PATH-RANK.json``:

* ``sha256``: of every result (tensor bytes, or ``repr`` of other values) in order, to prove
  results are bit-identical with and without wsprof; ``step_sha256`` per step;
* ``exception``: ``[type, message]`` of the first exception a step raised (or of setup), else
  None; ``errors`` per step;
* ``steps``: per step, its window ``t0_ns``/``t1_ns`` (``time.monotonic_ns``, wsprof's clock,
  so the trace's calls of that step can be selected) and the ground truth from the profiler:
  ``c10d`` (top-level ``c10d::`` op events by name) and ``gloo`` (``gloo:`` backend events),
  with ``funcol`` and ``nested`` to cross-check the rule below; ``probe`` (``compiled``:
  torch._dynamo's graph, frame and graph-break counts);
* ``expect``: path-specific facts (e.g. the coalesced payload's bytes);
* ``trace``: ``wsprof.trace_path()`` when patched, else None.

Ground-truth rule (found from the profiler's events on torch 2.13): every op a
``ProcessGroup`` is asked for through the dispatcher is one ``c10d::`` event (``c10d::
broadcast_``, ``c10d::allreduce_coalesced_``, ...). A functional collective is a
``_c10d_functional::`` event with its ``c10d::`` op as a child, so only ``c10d::`` events are
counted and only those with no ``c10d::`` ancestor. ``_c10d_functional::wait_tensor`` and
``_wrap_tensor_autograd`` are not collectives and carry no ``c10d::`` child. Counting
``_c10d_functional::`` events instead would over-count: they also fire while torch.compile
traces with fake tensors (22 in ``compiled``'s compiling step, where 2 collectives run), while
``c10d::`` events fire only for work given to a process group. Calls made on a
``Backend`` object directly (``pg._get_backend(dev).allreduce``) bypass the dispatcher and
make no ``c10d::`` event; gloo's own ``gloo:`` events (on its worker threads, one per work
item) see those too, and for every dispatched op they are one per ``c10d::`` event.

Everything (funcol, DTensor, FSDP2, ``_coalescing_manager``) is imported before
``wsprof.patch()``, as a framework does it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.distributed_c10d import _coalescing_manager
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.profiler import ProfilerActivity, profile

import wsprof

warnings.simplefilter("ignore")

#: Steps each path runs (the first of ``compiled`` compiles).
STEPS = 3


class Sink:
    """Collects a step's results into a hash (tensor bytes; ``repr`` of anything else)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.n = 0

    def __call__(self, *values: Any) -> None:
        for v in values:
            self.n += 1
            if isinstance(v, DTensor):
                v = v.to_local()
            if isinstance(v, torch.Tensor):
                v = v.detach()
                if v.is_sparse:
                    v = v.coalesce()
                    self(v.indices(), v.values())
                    continue
                v = v.contiguous().cpu()
                self.h.update(f"{v.dtype}{tuple(v.shape)}".encode())
                self.h.update(v.reshape(-1).view(torch.uint8).numpy().tobytes())
            else:
                self.h.update(repr(v).encode())


@dataclass
class CovPath:
    """A path: ``setup(rank, world)`` once (outside every window), then ``step(state, i, out)``
    per step; ``expect`` is what the judge needs to know beyond the counts; ``probe`` what
    the step did besides (informational, kept per step)."""

    world: int
    setup: Callable[[int, int], Any]
    step: Callable[[Any, int, Sink], None]
    steps: int = STEPS
    expect: Callable[[Any], dict[str, Any]] | None = None
    probe: Callable[[], dict[str, Any]] | None = None  # after each step, outside its window


def _mlp(rank: int, sizes: tuple[int, ...] = (16, 32, 32, 4)) -> nn.Sequential:
    """3 Linear layers (6 parameters), different on each rank unless synced."""
    torch.manual_seed(1000 + rank)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _sharded(rank: int) -> nn.Sequential:
    torch.manual_seed(7)  # FSDP2 expects the same initial weights on every rank
    model = _mlp(0)
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m)
    fully_shard(model)
    return model


# --- plain_broadcast -----------------------------------------------------------------------


def plain_broadcast_step(model: nn.Module, i: int, out: Sink) -> None:
    for p in model.parameters():
        if dist.get_rank() == 0:
            p.data.add_(0.01 * (i + 1))
        dist.broadcast(p.data, src=0)
        out(p.data)


# --- FSDP2 ---------------------------------------------------------------------------------


def fsdp2_train_setup(rank: int, world: int) -> Any:
    model = _sharded(rank)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def fsdp2_train_step(state: Any, i: int, out: Sink) -> None:
    model, opt = state
    g = torch.Generator().manual_seed(100 * i + dist.get_rank())
    x = torch.randn(8, 16, generator=g)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    out(loss, *(p.to_local() for p in model.parameters()))


def fsdp2_full_tensor_step(model: nn.Module, i: int, out: Sink) -> None:
    for p in model.parameters():
        out(p.full_tensor())


def fsdp2_state_dict_step(model: nn.Module, i: int, out: Sink) -> None:
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    for k in sorted(sd):
        out(k, sd[k])


# --- DTensor -------------------------------------------------------------------------------


def dtensor_1d_setup(rank: int, world: int) -> Any:
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(11)
    return mesh, distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])


def dtensor_1d_step(state: Any, i: int, out: Sink) -> None:
    mesh, x = state
    out(x.redistribute(mesh, [Replicate()]).to_local())
    part = DTensor.from_local(torch.full((4, 4), float(dist.get_rank() + i)), mesh, [Partial()])
    out(part.redistribute(mesh, [Replicate()]).to_local())


def dtensor_2d_setup(rank: int, world: int) -> Any:
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(12)
    return mesh, distribute_tensor(torch.randn(8, 8), mesh, [Shard(0), Shard(1)])


def dtensor_2d_step(state: Any, i: int, out: Sink) -> None:
    mesh, x = state
    out(x.redistribute(mesh, [Replicate(), Replicate()]).to_local())
    out(x.redistribute(mesh, [Shard(0), Replicate()]).to_local())
    local = torch.arange(16.0).reshape(4, 4) + dist.get_rank() + i
    part = DTensor.from_local(local, mesh, [Partial(), Shard(0)])
    out(part.redistribute(mesh, [Replicate(), Replicate()]).to_local())
    out(x.full_tensor())


# --- functional collectives ----------------------------------------------------------------


def funcol_step(_: Any, i: int, out: Sink) -> None:
    g = dist.group.WORLD
    w = dist.get_world_size()
    t = torch.arange(4.0 * w) + dist.get_rank() + i
    out(funcol.all_gather_tensor(t, 0, g).wait())  # AsyncCollectiveTensor.wait()
    out(funcol.wait_tensor(funcol.all_reduce(t, "sum", g)))
    out(funcol.broadcast(t, 0, g) + 0)  # plain use waits
    out(funcol.reduce_scatter_tensor(t, "sum", 0, g) * 1)
    out(funcol.all_to_all_single(t, None, None, g).wait())
    out(*(x + 0 for x in funcol.all_reduce_coalesced([t, t * 2], "sum", g)))
    # The functional point-to-point op (its tensors are not the first argument).
    peer = 1 - dist.get_rank()
    recv = torch.zeros(4)
    outs = torch.ops._c10d_functional.batch_p2p_ops(
        ["isend", "irecv"], [peer, peer], [0, 0], [t[:4].clone(), recv], g.group_name
    )
    out(*(funcol.wait_tensor(o) for o in outs))


# --- torch.compile -------------------------------------------------------------------------


def compiled_setup(rank: int, world: int) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        dist.all_reduce(y)
        z = funcol.all_reduce(x + 1, "sum", dist.group.WORLD)
        return y + z

    return torch.compile(fn, backend="aot_eager")


def dynamo_counts() -> dict[str, Any]:
    """Graphs compiled, frames recompiled and graph breaks so far (torch._dynamo's counters)."""
    from torch._dynamo.utils import counters

    return {
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "frames_compiled": int(counters["frames"].get("ok", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


def compiled_step(cfn: Any, i: int, out: Sink) -> None:
    out(cfn(torch.arange(8.0) + dist.get_rank() + i))


# --- coalescing, Backend objects, DDP's module sync, sparse --------------------------------


def coalescing_setup(rank: int, world: int) -> Any:
    return [torch.full((4,), float(rank + k)) for k in range(3)]


def coalescing_step(ts: list[torch.Tensor], i: int, out: Sink) -> None:
    with _coalescing_manager(group=None, async_ops=False):
        for t in ts:
            dist.all_reduce(t)
    out(*ts)


def backend_setup(rank: int, world: int) -> Any:
    return dist.group.WORLD._get_backend(torch.device("cpu"))


def backend_step(be: Any, i: int, out: Sink) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.arange(4.0) + rank + i
    be.allreduce([t]).wait()
    b = torch.full((4,), float(rank + i))
    be.broadcast([b]).wait()
    outs = [torch.empty(4) for _ in range(world)]
    be.allgather([outs], [t]).wait()
    out(t, b, *outs)


def broadcast_coalesced_step(model: nn.Module, i: int, out: Sink) -> None:
    tensors = [p.data for p in model.parameters()]
    if dist.get_rank() == 0:
        for t in tensors:
            t.add_(0.5)
    dist._broadcast_coalesced(dist.group.WORLD, tensors, 1 << 20, 0)  # one bucket
    dist._broadcast_coalesced(dist.group.WORLD, tensors, 256, 0)  # a bucket per tensor or so
    out(*tensors)


def sparse_step(_: Any, i: int, out: Sink) -> None:
    rank = dist.get_rank()
    s = torch.sparse_coo_tensor(
        torch.tensor([[rank, 2 + i]]), torch.tensor([1.0, 2.0 + rank]), (8,)
    )
    work = dist.group.WORLD.allreduce([s])
    work.wait()
    out(*work.result())


# --- Python subclasses of ProcessGroup and Work --------------------------------------------


class MyPG(dist.ProcessGroup):
    """A Python ProcessGroup that overrides no collective (as torch's own tests build one)."""

    def __init__(self, rank: int, world: int) -> None:
        super().__init__(rank, world)


class MyWork(dist.Work):
    """A Python Work that overrides only ``wait``."""

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True


def pg_subclass_step(_: Any, i: int, out: Sink) -> None:
    w = MyWork()
    out(w.is_completed(), w.wait())
    pg = MyPG(0, 1)
    out(pg.rank(), pg.size())
    pg.allreduce([torch.ones(2)])  # no backend: raises, identically with and without wsprof


PATHS: dict[str, CovPath] = {
    "plain_broadcast": CovPath(2, lambda r, w: _mlp(r, (8, 8, 8, 4)), plain_broadcast_step),
    "fsdp2_train": CovPath(2, fsdp2_train_setup, fsdp2_train_step),
    "fsdp2_full_tensor": CovPath(2, lambda r, w: _sharded(r), fsdp2_full_tensor_step),
    "fsdp2_state_dict": CovPath(2, lambda r, w: _sharded(r), fsdp2_state_dict_step),
    "dtensor_redistribute": CovPath(2, dtensor_1d_setup, dtensor_1d_step),
    "dtensor_2d": CovPath(4, dtensor_2d_setup, dtensor_2d_step),
    "funcol": CovPath(2, lambda r, w: None, funcol_step),
    "compiled": CovPath(2, compiled_setup, compiled_step, steps=4, probe=dynamo_counts),
    "coalescing_by_name": CovPath(
        2,
        coalescing_setup,
        coalescing_step,
        expect=lambda ts: {"coalesced_bytes": sum(int(t.nbytes) for t in ts), "blocks_per_step": 1},
    ),
    "backend_object": CovPath(2, backend_setup, backend_step),
    "broadcast_coalesced": CovPath(2, lambda r, w: _mlp(r, (8, 8, 8, 4)), broadcast_coalesced_step),
    "sparse_allreduce": CovPath(2, lambda r, w: None, sparse_step),
    "pg_subclass": CovPath(2, lambda r, w: None, pg_subclass_step),
}


def paths_for(world: int) -> list[str]:
    """The paths a job of ``world`` ranks runs for ``all``."""
    return [name for name, p in PATHS.items() if p.world == world]


#: ``_c10d_functional::`` events that are not collectives (they carry no ``c10d::`` child).
FUNCOL_NOT_COLLECTIVES = (
    "_c10d_functional::wait_tensor",
    "_c10d_functional::_wrap_tensor_autograd",
)


def ground_truth(prof: Any) -> dict[str, Counter[str]]:
    """Events of one profiled window, by name: ``c10d`` the top-level ``c10d::`` op events (the
    ground truth), ``gloo`` gloo's work events, and for the cross-check of the rule ``funcol``
    the functional collectives (``_c10d_functional::`` less waits) and ``nested`` the
    ``c10d::`` events under another ``c10d::`` or ``_c10d_functional::`` event, by parent."""
    out: dict[str, Counter[str]] = {k: Counter() for k in ("c10d", "gloo", "funcol", "nested")}
    for e in prof.events():
        name = e.name
        if name.startswith("gloo:"):
            out["gloo"][name] += 1
        elif name.startswith("_c10d_functional::") and name not in FUNCOL_NOT_COLLECTIVES:
            out["funcol"][name] += 1
        elif name.startswith("c10d::"):
            parent = e.cpu_parent
            while parent is not None and not parent.name.startswith(
                ("c10d::", "_c10d_functional::")
            ):
                parent = parent.cpu_parent
            if parent is not None:
                out["nested"][f"{parent.name} > {name}"] += 1
            while parent is not None and not parent.name.startswith("c10d::"):
                parent = parent.cpu_parent
            if parent is None:
                out["c10d"][name] += 1
    return out


def _exc(e: BaseException) -> list[str]:
    return [type(e).__name__, str(e)[:2000]]


def run_path(name: str, rank: int, world: int, patched: bool) -> dict[str, Any]:
    """Set up and run one path; every exception is recorded, none escapes."""
    path = PATHS[name]
    result: dict[str, Any] = {
        "path": name,
        "rank": rank,
        "world": world,
        "mode": "wsprof" if patched else "bare",
        "steps": [],
        "exception": None,
        "errors": [],
        "expect": {},
        "n_results": 0,
    }
    sink = Sink()
    try:
        state = path.setup(rank, world)
        if path.expect is not None:
            result["expect"] = path.expect(state)
    except Exception as e:  # noqa: BLE001 - recorded for the bare/wsprof comparison
        result["exception"] = _exc(e)
        result["sha256"] = sink.h.hexdigest()
        return result
    dist.barrier()  # every rank's setup done: no step window sees another rank's setup
    step_hashes = []
    for i in range(path.steps):
        if patched:
            wsprof.step()
        step_sink = Sink()
        err = None
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.monotonic_ns()
            try:
                path.step(state, i, step_sink)
            except Exception as e:  # noqa: BLE001 - recorded for the bare/wsprof comparison
                err = _exc(e)
            t1 = time.monotonic_ns()
        truth = ground_truth(prof)
        probe = path.probe() if path.probe is not None else None
        result["steps"].append(
            {
                "t0_ns": t0,
                "t1_ns": t1,
                "error": err,
                "probe": probe,
                **{k: dict(v) for k, v in truth.items()},
            }
        )
        result["errors"].append(err)
        if err is not None and result["exception"] is None:
            result["exception"] = err
        step_hashes.append(step_sink.h.hexdigest())
        sink.h.update(step_sink.h.digest())
        result["n_results"] += step_sink.n
    result["sha256"] = sink.h.hexdigest()
    result["step_sha256"] = step_hashes
    return result


def main() -> None:
    rank, world, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    names = paths_for(world) if sys.argv[5] == "all" else sys.argv[5].split(",")
    mode = sys.argv[6]
    if mode not in ("--wsprof", "--bare"):
        raise SystemExit(f"mode must be --wsprof or --bare, not {mode!r}")
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        raise SystemExit(f"unknown paths {unknown}; known: {sorted(PATHS)}")
    patched = mode == "--wsprof"
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    trace = wsprof.patch(os.path.join(out_dir, "trace-wsprof")) if patched else None
    for name in names:
        res = run_path(name, rank, world, patched)
        res["trace"] = trace
        if patched:
            wsprof.flush()
        with open(os.path.join(out_dir, f"result-{name}-{rank}.json"), "w") as fh:
            json.dump(res, fh)
        dist.barrier()
    if patched:
        wsprof.unpatch()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
