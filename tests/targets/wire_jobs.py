"""One rank of a real gloo job whose weight sync puts known bytes on the wire (issue 31).

Usage: python -m torch.distributed.run --nproc-per-node N wire_jobs.py OUT_DIR
       --variant=VARIANT [--steps=S]

Every step is marked with ``wsprof.step()``: a little training (a small matmul and an in-place
update of rank 0's weights), then the weight sync inside ``wsprof.phase("weight_sync")``, then
a barrier outside the sync (the ranks stay in lockstep). The sync of each variant:

* ``per_param``: one ``dist.broadcast`` from rank 0 per tensor of a model's state dict, shapes
  and dtypes mixed (embedding, linears, layer norms in float32, a float16 linear, a bfloat16
  buffer);
* ``bucketed``: the same tensors packed per dtype into buckets of at most
  :data:`BUCKET_CAP_BYTES`, each flattened with ``torch._utils._flatten_dense_tensors`` (as
  slime's and verl's bucketed updates do), broadcast, and copied back on the receivers;
* ``delta``: each step a different subset of the tensors (seeded by the step, the same on every
  rank), as delta-sync frameworks send only what changed;
* ``growing``: a list of tensors kept across steps, one more appended every step, each sent:
  the bytes per sync grow linearly (the leak shape);
* ``collectives``: ``dist.all_gather_into_tensor``, ``dist.reduce_scatter_tensor``,
  ``dist.all_reduce`` and ``dist.all_gather`` (a list) of known sizes, for the bus factors.

Each rank writes ``OUT_DIR/truth-RANK.jsonl``, one line per step: ``step``, ``world``,
``sync_bytes`` (the size NCCL's tests give each collective, from the tensors actually sent:
all-gather the whole gathered buffer, reduce-scatter the whole input, broadcast and all-reduce
the tensor), ``ops`` (canonical op -> bytes), ``op_calls`` (canonical op -> calls),
``n_calls``, ``calls_s`` (the job's own clock around each collective call, summed),
``call_spans_ns`` (each call as ``[op, start_ns, end_ns]``, ``time.monotonic_ns``: wsprof's
clock) and ``sync_s`` (the whole sync). Runs only under ``wsprof run`` (imports wsprof).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

import wsprof

warnings.simplefilter("ignore")

VARIANTS = ("per_param", "bucketed", "delta", "growing", "collectives")
#: Bucket cap of the bucketed variant, bytes: the float32 tensors of :func:`model` take
#: several buckets, the float16 and bfloat16 ones one each.
BUCKET_CAP_BYTES = 4 * 1024
#: Elements of each tensor the growing variant appends per step (float32: 16 KiB).
GROW_NUMEL = 4096
#: Elements of one rank's share in the collectives variant.
SHARE_NUMEL = 2048


class Sync:
    """One weight sync's collective calls as the job itself saw them: what each sent (the
    size NCCL's tests give it) and how long each call took."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.bytes: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        #: Each call as ``(op, start_ns, end_ns)``, ``time.monotonic_ns`` (wsprof's clock).
        self.spans: list[tuple[str, int, int]] = []

    @property
    def calls_s(self) -> float:
        """The job's own time in its collective calls, summed, s."""
        return sum(end - start for _, start, end in self.spans) / 1e9

    def call(self, op: str, nbytes: int, fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """Call ``fn(*args, **kw)`` (one collective of canonical ``op`` moving ``nbytes``)."""
        t0 = time.monotonic_ns()
        fn(*args, **kw)
        self.spans.append((op, t0, time.monotonic_ns()))
        self.bytes[op] += nbytes
        self.calls[op] += 1

    def broadcast(self, t: torch.Tensor) -> None:
        self.call("broadcast", t.nbytes, dist.broadcast, t, src=0)


def model() -> torch.nn.Module:
    """A small model with parameters of several shapes and dtypes and a bfloat16 buffer."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Embedding(97, 24),
        torch.nn.Linear(24, 40),
        torch.nn.LayerNorm(40),
        torch.nn.Linear(40, 40, bias=False),
        torch.nn.LayerNorm(40),
        torch.nn.Linear(40, 13),
    )
    net[3].half()  # one float16 linear
    net.register_buffer("rope", torch.randn(33, 8).to(torch.bfloat16))
    return net


def tensors(net: torch.nn.Module) -> list[torch.Tensor]:
    """What the sync sends: every parameter and buffer, in state-dict order."""
    return [t.detach() for t in net.state_dict().values()]


def buckets(ts: list[torch.Tensor], cap: int) -> list[list[torch.Tensor]]:
    """``ts`` grouped per dtype into buckets of at most ``cap`` bytes (a tensor larger than
    ``cap`` is a bucket of its own), in order."""
    out: list[list[torch.Tensor]] = []
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in ts:
        by_dtype.setdefault(t.dtype, []).append(t)
    for group in by_dtype.values():
        cur: list[torch.Tensor] = []
        size = 0
        for t in group:
            if cur and size + t.nbytes > cap:
                out.append(cur)
                cur, size = [], 0
            cur.append(t)
            size += t.nbytes
        if cur:
            out.append(cur)
    return out


def sync_bucketed(sync: Sync, ts: list[torch.Tensor]) -> None:
    for bucket in buckets(ts, BUCKET_CAP_BYTES):
        flat = _flatten_dense_tensors(bucket)
        sync.broadcast(flat)
        for t, new in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
            t.copy_(new)


def sync_delta(sync: Sync, ts: list[torch.Tensor], step: int) -> None:
    rng = random.Random(step)
    chosen = sorted(rng.sample(range(len(ts)), rng.randint(1, len(ts))))
    for i in chosen:
        sync.broadcast(ts[i])


def sync_collectives(sync: Sync, rank: int) -> None:
    world = sync.world
    share = torch.full((SHARE_NUMEL,), float(rank))
    whole = torch.empty(SHARE_NUMEL * world)
    assert whole.nbytes == world * share.nbytes  # S: the whole gathered buffer
    sync.call(
        "all_gather_into_tensor",
        whole.nbytes,
        dist.all_gather_into_tensor,
        whole,
        share,
    )
    out = torch.empty(SHARE_NUMEL // 2)
    inp = torch.ones(SHARE_NUMEL // 2 * world, dtype=torch.float32)
    assert inp.nbytes == world * out.nbytes  # S: the whole input
    sync.call("reduce_scatter_tensor", inp.nbytes, dist.reduce_scatter_tensor, out, inp)
    red = torch.ones(3 * SHARE_NUMEL, dtype=torch.float64)
    sync.call("all_reduce", red.nbytes, dist.all_reduce, red)
    piece = torch.arange(SHARE_NUMEL // 4, dtype=torch.int32) + rank
    pieces = [torch.empty_like(piece) for _ in range(world)]
    sync.call("all_gather", sum(p.nbytes for p in pieces), dist.all_gather, pieces, piece)


def train(net: torch.nn.Module, rank: int) -> None:
    """A little training: a small matmul, and rank 0 nudges its weights (what the sync sends)."""
    x = torch.randn(64, 64)
    for _ in range(4):
        x = torch.tanh(x @ x.T / 64)
    if rank == 0:
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.01)


def main() -> None:
    out_dir = sys.argv[1]
    variant = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--variant="))
    steps = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--steps=")), 8)
    if variant not in VARIANTS:
        sys.exit(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    net = model()
    kept: list[torch.Tensor] = []
    lines: list[dict[str, Any]] = []
    for step in range(steps):
        wsprof.step()
        with wsprof.phase("train"):
            train(net, rank)
        sync = Sync(world)
        ts = tensors(net)
        t0 = time.monotonic_ns()
        with wsprof.phase("weight_sync"):
            if variant == "per_param":
                for t in ts:
                    sync.broadcast(t)
            elif variant == "bucketed":
                sync_bucketed(sync, ts)
            elif variant == "delta":
                sync_delta(sync, ts, step)
            elif variant == "growing":
                kept.append(torch.full((GROW_NUMEL,), float(step)))
                for t in kept:
                    sync.broadcast(t)
            else:
                sync_collectives(sync, rank)
        sync_s = (time.monotonic_ns() - t0) / 1e9
        dist.barrier()
        lines.append(
            {
                "step": step,
                "world": world,
                "sync_bytes": sum(sync.bytes.values()),
                "ops": dict(sync.bytes),
                "op_calls": dict(sync.calls),
                "n_calls": sum(sync.calls.values()),
                "calls_s": sync.calls_s,
                "call_spans_ns": sync.spans,
                "sync_s": sync_s,
            }
        )
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"truth-{rank}.jsonl"), "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


if __name__ == "__main__":
    main()
