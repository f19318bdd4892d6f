"""The demo's ranks: one trainer and inference engines, synced the way RL frameworks do it.

Rank 0 trains a small real language model (real forward, backward and Adam step on the
engines' generated tokens). Ranks 1..N-1 play inference engines: they generate tokens with
their copy of the model and hand them to the trainer over a queue (as Ray's object store would;
rollout data does not travel through ``torch.distributed``). After each training step rank 0
pushes new weights to the engines: one ``dist.broadcast`` per parameter, an ``all_gather`` of
metadata and an ``all_gather_into_tensor`` of a sharded parameter, all through the framework
wrapper of :mod:`wsprof.demo.framework`.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

VOCAB = 128
DIM = 64
SEQ = 48
BATCH = 16


@dataclass(frozen=True)
class DemoConfig:
    """Demo settings (the CLI flags)."""

    steps: int = 8
    world_size: int = 3
    params: int = 128  # parameter tensors of the model (approximate, >= 100 by default)
    out: str = "wsprof-out/demo"
    fault: str = "probe"
    markers: bool = True
    port: int = 29_600
    seed: int = 0


def build_model(n_param_tensors: int) -> Any:
    """A small decoder-only LM with about ``n_param_tensors`` parameter tensors.

    Each block holds LayerNorm (2 tensors) and an MLP of two Linear layers (4 tensors).
    """
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(DIM)
            self.up = nn.Linear(DIM, 2 * DIM)
            self.down = nn.Linear(2 * DIM, DIM)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = x + self.down(torch.relu(self.up(self.norm(x))))
            return out

    class TinyLM(nn.Module):
        def __init__(self, n_blocks: int) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.blocks = nn.ModuleList(Block() for _ in range(n_blocks))
            self.head = nn.Linear(DIM, VOCAB)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x)
            return self.head(x)  # type: ignore[no-any-return]

    return TinyLM(max(1, (n_param_tensors - 3) // 6))


def generate(model: Any, batch: int, length: int, seed: int) -> Any:
    """Greedy-with-noise generation of ``length`` tokens: the engines' rollout."""
    import torch

    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (batch, 1), generator=g)
    with torch.no_grad():
        for _ in range(length - 1):
            logits = model(tokens)[:, -1, :]
            probs = torch.softmax(logits, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=g)
            tokens = torch.cat([tokens, nxt], dim=1)
    return tokens


#: Buffers the ``calls`` fault adds to every weight sync per step (a list of per-step
#: statistics the sync sends and nobody clears): one more broadcast each, every step.
EXTRA_BUFFERS_PER_STEP = 16


def sync_weights(
    model: Any, step: int, rank: int, world_size: int, shard: Any, extra: Any = ()
) -> None:
    """Push rank 0's weights to every rank, one collective per parameter (as RL frameworks do),
    then each tensor of ``extra`` (the ``calls`` fault's growing list), one collective each.

    Looks up collectives on the ``torch.distributed`` module at call time, as framework code
    does, so that wrappers installed on the module (the framework's, then wsprof's) apply.
    """
    import torch
    import torch.distributed as dist

    meta = torch.tensor([step, rank], dtype=torch.int64)
    gathered = [torch.empty_like(meta) for _ in range(world_size)]
    dist.all_gather(gathered, meta)
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
        for t in extra:
            dist.broadcast(t, src=0)
    full = torch.empty(shard.numel() * world_size, dtype=shard.dtype)
    dist.all_gather_into_tensor(full, shard)
    dist.barrier()  # the engines acknowledge the new weights before rollout resumes


def rank_main(rank: int, cfg: DemoConfig, rollouts: Any, ready: Any) -> None:
    """Entry point of one demo process (spawned)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg.port)
    import warnings

    import torch
    import torch.distributed as dist

    import wsprof
    from wsprof.demo import framework

    # The framework calls the name torch 2.13 deprecates, as frameworks written for older torch do.
    warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.*deprecated")
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    pool = framework.install(cfg.fault)  # the framework wraps collectives at import time
    wsprof.patch(cfg.out)  # then the user adds wsprof, as a slime or verl user would
    dist.init_process_group("gloo", rank=rank, world_size=cfg.world_size)
    model = build_model(cfg.params)
    shard = torch.full((256,), float(rank))
    step_marker = wsprof.step if cfg.markers else (lambda: None)
    extra: list[Any] = []  # the calls fault: grows every step on every rank alike

    def grow_extra() -> None:
        if "calls" in framework.faults(cfg.fault):
            extra.extend(torch.zeros(64) for _ in range(EXTRA_BUFFERS_PER_STEP))

    def phase(name: str) -> Any:
        return wsprof.phase(name) if cfg.markers else contextlib.nullcontext()

    if rank == 0:
        ready.put(os.getpid())
    dist.barrier()
    if rank == 0:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(cfg.steps):
            step_marker()
            with phase("rollout"):
                batches = [rollouts.get() for _ in range(cfg.world_size - 1)]
            with phase("train"):
                tokens = torch.cat(batches) if batches else torch.randint(0, VOCAB, (BATCH, SEQ))
                for _ in range(2):
                    logits = model(tokens[:, :-1])
                    loss = torch.nn.functional.cross_entropy(
                        logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)
                    )
                    opt.zero_grad()
                    loss.backward()  # type: ignore[no-untyped-call]
                    opt.step()
                pool.grow_at_step(step)
                wsprof.counter("demo.allocator_segments", len(pool.segments))
                grow_extra()
            with phase("weight_sync"):
                sync_weights(model, step, rank, cfg.world_size, shard, extra)
    else:
        for step in range(cfg.steps):
            step_marker()
            with phase("rollout"):
                rollouts.put(generate(model, BATCH, SEQ, seed=cfg.seed + 1000 * step + rank))
            pool.grow_at_step(step)
            grow_extra()
            with phase("weight_sync"):
                sync_weights(model, step, rank, cfg.world_size, shard, extra)
    dist.barrier()
    wsprof.unpatch()
    dist.destroy_process_group()
