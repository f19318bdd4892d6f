"""A training job for ``wsprof run`` tests; it knows nothing about wsprof.

Usage:
    ``python run_job.py plain`` under torchrun (RANK/WORLD_SIZE/MASTER_* from the launcher);
    ``python run_job.py spawn PORT``: spawns 2 ranks with multiprocessing (spawn);
    ``python run_job.py slime PORT``: world size 1, steps through the slime stand-ins
    (``tests/standins/presets`` on the path), and imports the verl stand-in;
    ``python run_job.py trl PORT [generate]``: world size 1, imports the TRL stand-ins (GRPO
    trainer, vLLM generation) and generates each step without vLLM only with ``generate``.
Each rank does 3 steps of 20 broadcasts. ``$EXIT`` is the exit code.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

import torch
import torch.distributed as dist


def steps() -> None:
    t = torch.ones(8)
    for _ in range(3):
        for _ in range(20):
            dist.broadcast(t, 0)


def rank_main(rank: int, world: int, port: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    steps()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    mode = sys.argv[1]
    if mode == "plain":
        dist.init_process_group("gloo")
        steps()
        dist.destroy_process_group()
    elif mode == "spawn":
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=rank_main, args=(r, 2, sys.argv[2])) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode != 0:
                sys.exit(f"a rank exited {p.exitcode}")
    elif mode == "slime":
        import verl.checkpoint_engine.base  # noqa: F401 - the preset looks for its manager
        from slime.backends.megatron_utils.update_weight.update_weight_from_distributed import (
            UpdateWeightFromDistributed,
        )
        from slime.ray.rollout import RolloutManager

        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1
        )
        sync, rollout = UpdateWeightFromDistributed(), RolloutManager()
        for i in range(3):
            rollout.generate(i)
            sync.update_weights()
        dist.destroy_process_group()
    elif mode == "trl":
        import trl.generation.vllm_generation  # noqa: F401 - imported by TRL's trainers
        from trl.trainer.grpo_trainer import GRPOTrainer

        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0, world_size=1
        )
        trainer = GRPOTrainer()
        for _ in range(3):
            if "generate" in sys.argv[3:]:
                trainer._generate_single_turn([[1, 2]], None, {}, 2)
            steps()
        dist.destroy_process_group()
    sys.exit(int(os.environ.get("EXIT", "0")))


if __name__ == "__main__":
    main()
