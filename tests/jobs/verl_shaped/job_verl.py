"""verl-shaped job: FSDP2 trainer (ranks 0-1, its own WORLD) + one vLLM rollout replica (TP=2,
ranks 2-3, its own WORLD), disaggregated, weights pushed by the "nccl" checkpoint engine.

Sources followed: volcengine/verl b178a3cd56f58b2d502255daba591e92833930a7 (2026-01-29).

- `verl/trainer/ppo/ray_trainer.py` `RayPPOTrainer.fit`: one `checkpoint_manager.update_weights()`
  before the loop (step -1), then per step gen -> old_log_prob -> update_actor -> update_weights
  (each under `marked_timer`; "update_weights" is the number verl logs, `timing_s/update_weights`).
- `verl/checkpoint_engine/base.py` `CheckpointEngineManager.update_weights`: abort_all_requests ->
  build_process_group (prepare on every worker, `build_topology`, `init_process_group` on every
  worker) -> `trainer.update_weights()` + `rollout.update_weights()` -> finalize -> resume.
- `verl/checkpoint_engine/nccl_checkpoint_engine.py` `NCCLCheckpointEngine`: group made outside
  both worlds by `ray.util.collective.init_collective_group` (trainer rank 0 is its rank 0, every
  rollout GPU ranks 1..N, other trainer ranks -1 and not members), made once
  (`rebuild_group=False`) and barriered at every update; two buffers of `bucket_size` bytes,
  tensors cast to bf16 and packed; per bucket a `BroadcastOperation` run in the event loop's
  executor thread: the bucket's metadata over ZeroMQ PUB/SUB, then a broadcast of the WHOLE
  buffer; the next bucket fills while the previous one is on the wire.
- `verl/workers/engine_workers.py` `ActorRolloutRefWorker.update_weights` (backend != "naive":
  `engine.get_per_tensor_param()` then `checkpoint_engine.send_weights`; trainer ranks other than
  0 consume the generator, i.e. take part in every gather, and send nothing).
- `verl/workers/engine/fsdp/transformer_impl.py` `FSDPEngine.get_per_tensor_param`
  (`module.state_dict()`, one `DTensor.full_tensor()` per parameter: a gather on the FSDP mesh),
  `optimizer_step` (`fsdp2_clip_grad_norm_`); `verl/utils/fsdp_utils.py` `apply_fsdp2`
  (`fully_shard` on every decoder layer, on the untied embedding, then on the root).
- `verl/checkpoint_engine/base.py` `CheckpointEngineWorker.update_weights` and
  `verl/workers/rollout/vllm_rollout/vllm_rollout.py` `ServerAdapter.update_weights` /
  `vllm_rollout/utils.py` `update_weights_from_ipc` (the rollout side: receive buckets, hand
  them to the vLLM worker, `model.load_weights`).

On CPU the pieces that are not torch.distributed in verl stay out of it: Ray calls, HTTP and
ZeroMQ are keys in torchrun's store (`common.Rpc`); Ray's collective group is `gloo`
(`ray/util/collective/collective_group/torch_gloo_collective_group.py` `TorchGLOOGroup`:
`dist.broadcast` / `dist.barrier` on its own group) made with `common.init_custom_process_group`.
On GPU verl's "nccl" backend broadcasts with cupy NCCL, outside torch.distributed altogether.

torchrun --nproc-per-node 4 job_verl.py [--steps 12] [--leak N] [--markers] [--truth F]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

_JOBS = os.environ.get("WSPROF_JOBS") or str(
    Path(__file__).resolve().parents[3].parent / "shared" / "jobs"
)
sys.path.insert(0, str(Path(_JOBS) / "slime_shaped"))

import common as C  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

# rollout.checkpoint_engine.update_weights_bucket_megabytes (2048 MB in verl for a 15 GB model:
# ~8 buckets; the toy model is 2.9 MB in bf16: 6 buckets of 512 KiB)
BUCKET_BYTES = 512 << 10
ROLLOUT_DTYPE = torch.bfloat16  # NCCLCheckpointEngine(rollout_dtype=torch.bfloat16)
GROUP_NAME = "default"  # NCCLCheckpointEngine(group_name="default")
BATCH, PROMPT = 8, 16  # prompts per step (data.train_batch_size), prompt tokens
MICRO = 2  # ppo_micro_batch_size_per_gpu: micro-batches per trainer rank


# ====================================================================== the leak
def install_probe_wrappers() -> tuple[str, ...]:
    """slime's `get_new_comm_function` (common.monkey_patch_torch_dist) placed where it bites in
    verl: the torch.distributed names (`broadcast`: Ray's gloo group's bucket broadcast;
    `all_gather_single`: FSDP2's unshard in forward/backward) and
    `torch.distributed._functional_collectives.all_gather_single`, the module attribute
    `DTensor.full_tensor()` calls (`torch/distributed/tensor/placement_types.py`
    `_to_replicate_tensor`) once per parameter in `get_per_tensor_param`. Installed in the FSDP
    worker's init, after torch import. Returns the wrapped names."""
    C.monkey_patch_torch_dist()
    if not getattr(funcol, "_realjob_patched", False):
        orig = funcol.all_gather_single

        def new_function(*args, **kwargs):
            with C._wrap_low_level_call(check_memory=True):
                return orig(*args, **kwargs)

        funcol.all_gather_single = new_function
        funcol._realjob_patched = True
    names = tuple(f"torch.distributed.{n}" for n in C.WRAPPED_NAMES if hasattr(dist, n))
    return names + ("torch.distributed._functional_collectives.all_gather_single",)


# ====================================================================== checkpoint engine
class BroadcastOperation:
    """nccl_checkpoint_engine.BroadcastOperation: in the loop's default executor thread, the
    bucket metadata over ZeroMQ PUB/SUB (here: a store key), then the whole bucket broadcast."""

    def __init__(self, eng: CheckpointEngine, bucket: torch.Tensor, metadata, key: str):
        self.eng, self.bucket, self.metadata, self.key = eng, bucket, metadata, key
        self._task = asyncio.get_running_loop().run_in_executor(None, self._run)

    def _run(self):
        if self.eng.rank == 0:
            self.eng.rpc.put(self.key, self.metadata)  # socket.send_pyobj(metadata)
        else:
            self.metadata = self.eng.rpc.get(self.key)  # socket.recv_pyobj()
        dist.broadcast(self.bucket, src=0, group=self.eng.group)  # collective.broadcast

    async def wait_for_complete(self):
        await self._task
        return self.metadata


class CheckpointEngine:
    """NCCLCheckpointEngine with Ray's gloo collective group (see the module docstring)."""

    def __init__(self, store, rpc: C.Rpc, is_master: bool):
        self.store, self.rpc, self.is_master = store, rpc, is_master
        self.group = None
        self.rank: int | None = None
        self.version = 0
        self.bucket_no = 0
        self.wsum = 0.0  # sum of the bf16 values sent / received by the last update (a check)

    def prepare(self) -> None:
        self.send_buf = torch.zeros(BUCKET_BYTES, dtype=torch.uint8)
        self.recv_buf = torch.zeros(BUCKET_BYTES, dtype=torch.uint8)

    def init_process_group(self, rank: int, world_size: int) -> None:
        self.rank = rank
        if rank < 0:  # trainer ranks other than 0
            return
        if self.group is None:  # collective.init_collective_group(world_size, rank, ...)
            self.group = C.init_custom_process_group(self.store, GROUP_NAME, rank, world_size)
        dist.barrier(group=self.group)  # collective.barrier(group_name)

    def finalize(self) -> None:
        self.send_buf = self.recv_buf = None  # rebuild_group=False: the group stays

    def _key(self) -> str:
        self.bucket_no += 1
        return f"ckpt/meta/{self.version}/{self.bucket_no - 1}"

    @torch.no_grad()
    async def send_weights(self, weights) -> None:
        if self.rank is None or self.rank < 0:
            for _name, _w in weights:  # consume: every rank takes part in the gathers
                pass
            return
        self.bucket_no = 0
        self.wsum = 0.0
        send_buf, recv_buf = self.send_buf, self.recv_buf
        op = None
        meta: dict = {}
        offset = 0
        for name, weight in weights:
            weight = weight.to(ROLLOUT_DTYPE)
            if offset + weight.nbytes > BUCKET_BYTES:
                if op is not None:
                    await op.wait_for_complete()
                op = BroadcastOperation(
                    self, send_buf, {"bucket_meta": meta, "is_last": False}, self._key()
                )
                send_buf, recv_buf = recv_buf, send_buf
                meta, offset = {}, 0
            meta[name] = {"shape": list(weight.shape), "offset": offset}
            self.wsum += float(weight.float().sum())
            send_buf[offset : offset + weight.nbytes] = weight.reshape(-1).view(torch.uint8)
            offset += weight.nbytes
        if op is not None:
            await op.wait_for_complete()
        op = BroadcastOperation(self, send_buf, {"bucket_meta": meta, "is_last": True}, self._key())
        await op.wait_for_complete()

    @torch.no_grad()
    async def receive_weights(self):
        self.bucket_no = 0
        send_buf, recv_buf = self.send_buf, self.recv_buf
        op = BroadcastOperation(self, recv_buf, None, self._key())
        metadata = await op.wait_for_complete()
        send_buf, recv_buf = recv_buf, send_buf
        while not metadata["is_last"]:
            op = BroadcastOperation(self, recv_buf, None, self._key())
            for name, m in metadata["bucket_meta"].items():
                yield name, _unpack(send_buf, m)
            metadata = await op.wait_for_complete()
            send_buf, recv_buf = recv_buf, send_buf
        for name, m in metadata["bucket_meta"].items():
            yield name, _unpack(send_buf, m)


def _unpack(buf: torch.Tensor, m: dict) -> torch.Tensor:
    shape = torch.Size(m["shape"])
    n = shape.numel() * ROLLOUT_DTYPE.itemsize
    return buf[m["offset"] : m["offset"] + n].view(ROLLOUT_DTYPE).view(shape)


def topology(n_rollout: int) -> tuple[list[int], list[int], int]:
    """NCCLCheckpointEngine.build_topology for 2 trainer ranks: (trainer ranks, rollout ranks,
    world size)."""
    return [0, -1], list(range(1, n_rollout + 1)), n_rollout + 1


# ====================================================================== vLLM rollout (ranks 2-3)
def engine_main(args, store, rpc: C.Rpc, rr: int, mk: C.Markers) -> None:
    """vLLM replica (TP=2, its own WORLD: the TP workers' `init_distributed_environment`) with the
    rollout's CheckpointEngineWorker folded into each TP worker (in verl a separate Ray actor on
    the same GPU, handing each bucket over by CUDA IPC: here an in-process `load_weights`).
    Requests reach both TP workers in order, as vLLM's shm MessageQueue broadcasts the
    scheduler output (not a torch.distributed collective)."""
    C.init_role_world(store, "vllm", rr, 2)
    model = C.TPToyLM(dist.group.WORLD, rr, 2)
    ce = CheckpointEngine(store, rpc, is_master=False)
    loop = asyncio.new_event_loop()  # the Ray async actor's loop
    truth = C.Truth(args.truth, "verl", "engine", rr)
    seq, step = 0, -1
    clk = C.Clock()
    t_step0 = time.monotonic_ns()
    _, rollout_ranks, ws = topology(2)

    def busy(name, fn):
        t0, n0 = time.perf_counter(), time.monotonic_ns()
        with mk.phase("weight_sync"):
            fn()
        clk.t["sync"] = clk.get("sync") + time.perf_counter() - t0
        clk.mark("sync", n0, time.monotonic_ns())

    async def update_weights():  # CheckpointEngineWorker.update_weights
        ce.wsum = 0.0
        async for name, w in ce.receive_weights():
            ce.wsum += float(w.float().sum())
            model.load_hf(name, w)  # ServerAdapter -> update_weights_from_ipc -> load_weights

    while True:
        # MessageQueue.dequeue: while requests keep coming it spins (sched_yield), so a request
        # is taken within microseconds; a blocking get has that latency without the spin.
        req = rpc.get(f"vllm/req/{seq}")
        seq += 1
        kind = req["kind"]
        if kind == "generate":
            step = req["step"]
            if step >= 0:
                mk.step()
            clk = C.Clock()
            t_step0 = time.monotonic_ns()
            g = torch.Generator().manual_seed(req["seed"])
            prompts = torch.randint(0, C.VOCAB, (BATCH, PROMPT), generator=g)
            gen = torch.Generator().manual_seed(4321 + step)  # same sampling on both TP ranks
            with clk.phase("rollout"), mk.phase("rollout"):
                toks = C.decode(model, prompts, req["n_new"], gen)
            clk.t["tokens"] = toks.shape[1] - PROMPT
            if rr == 0:
                rpc.put_tensor(f"vllm/result/{step}", toks)
                rpc.put(f"vllm/result_shape/{step}", list(toks.shape))
        elif kind == "abort_all_requests":
            if rr == 0:
                rpc.put(f"vllm/ack/{req['version']}/abort", 1)
        elif kind == "prepare":
            busy(kind, ce.prepare)
        elif kind == "init_process_group":
            busy(kind, lambda: ce.init_process_group(rollout_ranks[rr], ws))
        elif kind == "update_weights":
            ce.version = req["version"]
            busy(kind, lambda: loop.run_until_complete(update_weights()))
            rpc.put(f"vllm/ack/{req['version']}/update/{rr}", 1)
        elif kind == "finalize":
            busy(kind, ce.finalize)
            rpc.put(f"vllm/ack/{req['version']}/finalize/{rr}", 1)
        elif kind == "resume_all_requests":
            a, end = clk.ns["sync"], time.monotonic_ns()
            truth.write(
                step=step,
                t_start_ns=t_step0,
                t_end_ns=end,
                step_s=(end - t_step0) / 1e9,
                rollout_s=clk.get("rollout"),
                sync_s=(a[1] - a[0]) / 1e9,
                sync_busy_s=clk.get("sync"),
                leak_s=0.0,
                leak_calls=0,
                tokens=clk.t.get("tokens", 0),
                weights_sum=ce.wsum,
                **clk.span("sync"),
            )
        elif kind == "stop":
            dist.barrier()
            dist.destroy_process_group()
            return


# ====================================================================== FSDP2 trainer (ranks 0-1)
class Trainer:
    """ActorRolloutRefWorker with the FSDP engine; rank 0 also plays the driver (RayPPOTrainer and
    CheckpointEngineManager), whose Ray calls reach the replica as store keys."""

    def __init__(self, args, store, rpc: C.Rpc, rr: int, mk: C.Markers):
        self.args, self.rpc, self.rr, self.mk = args, rpc, rr, mk
        C.init_role_world(store, "fsdp", rr, 2)  # initialize_global_process_group
        self.wrapped = install_probe_wrappers()
        self.mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
        torch.manual_seed(args.seed)  # same init on both ranks (HF from_pretrained)
        model = C.HFToyLM()
        for layer in model.model.layers:  # apply_fsdp2: decoder layers, untied embedding, root
            fully_shard(layer, mesh=self.mesh)
        fully_shard(model.model.embed_tokens, mesh=self.mesh)
        fully_shard(model, mesh=self.mesh)
        self.model = model
        self.opt = C.adamw(model.parameters())
        self.ce = CheckpointEngine(store, rpc, is_master=rr == 0)
        self.loop = asyncio.new_event_loop()  # the Ray async actor's loop
        self.truth = C.Truth(args.truth, "verl", "trainer", rr)
        self.req_seq = 0
        self.version = 0

    # -- Ray calls to the rollout replica (rank 0 plays the driver)
    def engine_call(self, **req) -> None:
        if self.rr == 0:
            self.rpc.put(f"vllm/req/{self.req_seq}", req)
            self.req_seq += 1

    # -- FSDPEngine.get_per_tensor_param
    def get_per_tensor_param(self):
        params = self.model.state_dict()
        return (
            (name, p.full_tensor() if isinstance(p, DTensor) else p) for name, p in params.items()
        )

    # -- CheckpointEngineManager.update_weights (rank 0) / the worker's part (both ranks)
    def update_weights(self) -> None:
        self.version += 1
        v = self.version
        self.engine_call(kind="abort_all_requests", version=v)
        if self.rr == 0:
            self.rpc.get(f"vllm/ack/{v}/abort")
        # build_process_group: prepare on every worker, build_topology, init_process_group
        self.engine_call(kind="prepare", version=v)
        self.ce.prepare()
        trainer_ranks, _, ws = topology(2)
        self.engine_call(kind="init_process_group", version=v)
        self.ce.init_process_group(trainer_ranks[self.rr], ws)
        # ray.get(trainer.update_weights() + rollout.update_weights())
        self.engine_call(kind="update_weights", version=v)
        self.ce.version = v
        self.loop.run_until_complete(self.ce.send_weights(self.get_per_tensor_param()))
        if self.rr == 0:
            for r in range(2):
                self.rpc.get(f"vllm/ack/{v}/update/{r}")
        self.engine_call(kind="finalize", version=v)
        self.ce.finalize()
        if self.rr == 0:
            for r in range(2):
                self.rpc.get(f"vllm/ack/{v}/finalize/{r}")
        self.engine_call(kind="resume_all_requests", version=v)

    # -- compute_log_prob + update_actor (FSDPEngine infer_batch / train_mini_batch)
    def train(self, tokens: torch.Tensor, step: int) -> None:
        model = self.model
        g = torch.Generator().manual_seed(1000 + step)
        rewards = torch.randn(BATCH, generator=g)
        adv = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).unsqueeze(-1)
        adv = adv.chunk(2)[self.rr]  # this DP rank's share of the batch
        mbs, advs = tokens.chunk(MICRO), adv.chunk(MICRO)
        with torch.no_grad():  # old_log_prob
            old = [C.token_logprobs(model(mb), mb) for mb in mbs]
        for mb, a, o in zip(mbs, advs, old):  # one mini-batch, MICRO micro-batches
            loss = C.grpo_loss(C.token_logprobs(model(mb), mb), o, a) / MICRO
            loss.backward()
        # FSDPEngine.optimizer_step -> fsdp2_clip_grad_norm_ (DTensor norm: an all-reduce)
        from torch.nn.utils.clip_grad import _clip_grads_with_norm_, _get_total_norm

        params = [p for p in model.parameters() if p.grad is not None]
        norm = _get_total_norm([p.grad for p in params], 2.0, False, None)
        _clip_grads_with_norm_(params, 1.0, norm, None)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        if torch.isfinite(norm):
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        C.ALLOC.grow(self.args.leak)  # what this step leaves in the caching allocator

    def run(self) -> None:
        args, mk = self.args, self.mk
        clk = C.Clock()
        with clk.phase("sync"):
            self.update_weights()  # fit(): "load checkpoint and update weights before anything"
        leak_s, leak_calls = C.ALLOC.take()
        self.truth.write(
            step=-1,
            kind="initial_sync",
            sync_s=clk.get("sync"),
            leak_s=leak_s,
            leak_calls=leak_calls,
            **clk.span("sync"),
        )
        rng = np.random.default_rng(args.seed + 2)
        for step in range(args.steps):
            mk.step()
            clk = C.Clock()
            n_new = int(rng.integers(12, 33))  # response lengths vary step to step
            with clk.phase("rollout"), mk.phase("rollout"):  # marked_timer("gen")
                self.engine_call(kind="generate", step=step, n_new=n_new, seed=step)
                shape = self.rpc.get(f"vllm/result_shape/{step}")
                batch = self.rpc.get_tensor(f"vllm/result/{step}", torch.int64, shape)
                tokens = batch.chunk(2)[self.rr]  # DataProto dispatch: this DP rank's share
            with clk.phase("train"), mk.phase("train"):  # old_log_prob + update_actor
                self.train(tokens, step)
            with clk.phase("sync"), mk.phase("weight_sync"):  # marked_timer("update_weights")
                self.update_weights()
            leak_s, leak_calls = C.ALLOC.take()
            end = time.monotonic_ns()
            self.truth.write(
                step=step,
                t_start_ns=clk.start_ns,
                t_end_ns=end,
                step_s=(end - clk.start_ns) / 1e9,
                rollout_s=clk.get("rollout"),
                train_s=clk.get("train"),
                sync_s=clk.get("sync"),
                leak_s=leak_s,
                leak_calls=leak_calls,
                tokens=n_new,
                segments=len(C.ALLOC.segs),
                weights_sum=self.ce.wsum,
                **clk.span("sync"),
            )
        self.engine_call(kind="stop")
        dist.barrier()
        dist.destroy_process_group()


def main() -> None:
    args = C.job_args("verl-shaped RL job (FSDP2 trainer x2 + vLLM TP=2, nccl checkpoint engine)")
    torch.set_num_threads(1)
    store = C.agent_store()
    rpc = C.Rpc(store)
    mk = C.Markers(args.markers)
    r = C.global_rank()
    if r < 2:
        Trainer(args, store, rpc, r, mk).run()
    else:
        engine_main(args, store, rpc, r - 2, mk)


if __name__ == "__main__":
    main()
