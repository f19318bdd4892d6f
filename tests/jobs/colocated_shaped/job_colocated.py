"""slime-shaped COLOCATED job (`--colocate`): Megatron trainer (TP=2, ranks 0-1) and one SGLang
engine (TP=1, rank 2) that take turns on the same GPUs; weights pushed by `UpdateWeightFromTensor`
(slime/backends/megatron_utils/update_weight/update_weight_from_tensor.py): per bucket of HF
tensors a FlattenedTensorBucket, `MultiprocessingSerializer.serialize` (ForkingPickler + base64),
`dist.gather_object` on the engine's IPC gloo group, one `update_weights_from_tensor` request per
bucket, `ray.get`, del, `ipc_collect`. On CPU the tensors travel by torch's CPU sharing strategies
(`file_descriptor`: fds passed through multiprocessing's resource_sharer; `file_system`: /dev/shm
files), where the real job passes CUDA IPC handles.

Sources followed: THUDM/slime 624b824a, sgl-project/sglang (weight_sync/tensor_bucket.py,
utils MultiprocessingSerializer, managers/tp_worker.py), torch 2.13 multiprocessing/reductions.py.
See README.md for the details and the choices.

torchrun --nproc-per-node 3 job_colocated.py [--steps 12] [--leak none|trainer_list|
    engine_keeps|double_open] [--sharing file_descriptor|file_system] [--markers] [--truth F]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import multiprocessing
import os
import pickle
import sys
import time
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

_JOBS = os.environ.get("WSPROF_JOBS") or str(
    Path(__file__).resolve().parents[3].parent / "shared" / "jobs"
)
sys.path.insert(0, str(Path(_JOBS) / "slime_shaped"))

import common as C  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing  # noqa: E402

BUFFER_BYTES = 1 << 20  # --update-weight-buffer-size (toy: 1 MB -> 6 buckets of the 5.8 MB model)
BATCH, PROMPT = 32, 16
MICRO = 2  # micro-batches per train step
N_TRAINERS = 2  # actor_num_gpus_per_node
#: colocated engines as slime's connect_rollout_engines sees them: (gpu offset, gpu count). One
#: SGLang engine with TP=1 on GPU 0; GPU 1's slot holds no engine (a placeholder rank).
ENGINES = [(0, 1)]
LEAKS = ("none", "trainer_list", "engine_keeps", "double_open")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="slime colocated (UpdateWeightFromTensor) job")
    ap.add_argument("--steps", type=int, default=12, help="RL steps")
    ap.add_argument(
        "--leak", choices=LEAKS, default="none", help="what keeps the sent buckets alive"
    )
    ap.add_argument(
        "--sharing",
        choices=("file_descriptor", "file_system"),
        default="file_descriptor",
        help="torch.multiprocessing sharing strategy",
    )
    ap.add_argument(
        "--markers",
        action="store_true",
        help="add wsprof.step() / wsprof.phase(...) (imports wsprof)",
    )
    ap.add_argument(
        "--truth",
        default=os.environ.get("REAL_TRUTH", ""),
        help="ground-truth JSONL (default $REAL_TRUTH)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--debug",
        action="store_true",
        help="print per-step RssShmem / shared-mapping evidence to stderr",
    )
    return ap.parse_args()


def rss_shmem_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1])
    return 0


def shared_maps() -> int:
    """Mappings of torch's shared CPU storages in this process (/dev/shm/torch_* files under
    file_system; unlinked shm fds, `/dev/shm/... (deleted)` or memfd, under file_descriptor)."""
    n = 0
    with open("/proc/self/maps") as f:
        for line in f:
            if "/dev/shm/" in line or "memfd:" in line:
                n += 1
    return n


def debug(args, msg: str) -> None:
    if args.debug:
        print(f"[colocated rank {os.environ.get('RANK')}] {msg}", file=sys.stderr, flush=True)


# ====================================================================== slime.utils.accelerator
class accelerator:  # slime.utils.accelerator (a module there)
    @staticmethod
    def ipc_collect() -> None:
        if torch.cuda.is_available():
            torch.cuda.ipc_collect()

    @staticmethod
    def empty_cache() -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# ====================================================================== SGLang pieces
def monkey_patch_torch_reductions() -> None:
    """SGLang `utils/patch_torch.monkey_patch_torch_reductions`: swaps the CUDA device index in
    reduce_tensor / rebuild_cuda_tensor for the device UUID. CPU storages never reach it: a no-op
    here (kept so the call sites match)."""


@dataclass
class FlattenedTensorMetadata:
    name: str
    shape: torch.Size
    dtype: torch.dtype
    start_idx: int
    end_idx: int
    numel: int


class FlattenedTensorBucket:
    """SGLang `weight_sync/tensor_bucket.FlattenedTensorBucket`: one flat tensor + metadata."""

    def __init__(self, named_tensors=None, flattened_tensor=None, metadata=None):
        if named_tensors is not None:
            if not named_tensors:
                raise ValueError("Cannot create empty tensor bucket")
            flat, self.metadata, idx = [], [], 0
            for name, t in named_tensors:
                f = t.reshape(-1)
                flat.append(f)
                self.metadata.append(
                    FlattenedTensorMetadata(name, t.shape, t.dtype, idx, idx + f.numel(), f.numel())
                )
                idx += f.numel()
            self.flattened_tensor = torch.cat(flat, dim=0)
        else:
            if flattened_tensor is None or metadata is None:
                raise ValueError("need named_tensors, or flattened_tensor and metadata")
            self.flattened_tensor, self.metadata = flattened_tensor, metadata

    def get_flattened_tensor(self):
        return self.flattened_tensor

    def get_metadata(self):
        return self.metadata

    def reconstruct_tensors(self):
        return [
            (m.name, self.flattened_tensor[m.start_idx : m.end_idx].view(m.dtype).reshape(m.shape))
            for m in self.metadata
        ]


_ALLOWED_ROOTS = ("torch", "builtins", "collections", "copyreg")
_ALLOWED_MODULES = ("multiprocessing.resource_sharer", "multiprocessing.reduction")


class _WeightUnpickler(pickle.Unpickler):
    """SGLang's allowlist unpickler: the rebuild functions named in the payload
    (torch.multiprocessing.reductions.rebuild_tensor / rebuild_storage_fd /
    rebuild_storage_filename) are looked up by name at load time, from allowed modules only."""

    def find_class(self, module, name):
        if module == "__main__" and name == "FlattenedTensorMetadata":
            return FlattenedTensorMetadata
        if module.split(".")[0] in _ALLOWED_ROOTS or module in _ALLOWED_MODULES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"blocked unpickle of {module}.{name}")


class MultiprocessingSerializer:
    """SGLang `utils.MultiprocessingSerializer`."""

    @staticmethod
    def serialize(obj, output_str: bool = False):
        monkey_patch_torch_reductions()
        buf = io.BytesIO()
        ForkingPickler(buf).dump(obj)
        data = buf.getvalue()
        return base64.b64encode(data).decode("utf-8") if output_str else data

    @staticmethod
    def deserialize(data):
        monkey_patch_torch_reductions()
        if isinstance(data, str):
            data = base64.b64decode(data, validate=True)
        return _WeightUnpickler(io.BytesIO(data)).load()


# ====================================================================== SGLang engine (rank 2)
class ModelRunner:
    """The engine's TP worker + model runner (TP=1). The model is held as SGLang's Qwen2 holds it
    (fused qkv_proj / gate_up_proj): `TPToyLM` with tp=1; `load_hf` is its `load_weights`."""

    def __init__(self, args, tp_rank: int = 0):
        self.args, self.tp_rank = args, tp_rank
        torch.manual_seed(args.seed + 77)
        self.model = C.TPToyLM(dist.group.WORLD, 0, 1)
        self.kept_flattened: list[torch.Tensor] = []  # --leak engine_keeps
        self.ipc_handle_cache: list[dict] = []  # --leak double_open
        self.step_kept = 0
        self.weights_sum = 0.0
        self.load_s = 0.0

    # TpModelWorker.update_weights_from_tensor
    def update_weights_from_tensor(self, serialized_named_tensors, load_format):
        monkey_patch_torch_reductions()
        named_tensors = MultiprocessingSerializer.deserialize(
            serialized_named_tensors[self.tp_rank]
        )
        if self.args.leak == "double_open":
            # a second consumer (SGLang's draft + target runner, PR #17870) deserializes the same
            # payload again; only one of the two opens is ever released
            again = MultiprocessingSerializer.deserialize(serialized_named_tensors[self.tp_rank])
            self.ipc_handle_cache.append(again)
            self.step_kept += again["flattened_tensor"].nbytes
        ok = self._update_weights_from_tensor(named_tensors, load_format)
        del named_tensors
        return ok

    # ModelRunner.update_weights_from_tensor, load_format == "flattened_bucket"
    def _update_weights_from_tensor(self, named_tensors, load_format):
        assert load_format == "flattened_bucket", load_format
        flat = named_tensors["flattened_tensor"]
        if self.args.debug and flat.numel():
            debug(
                self.args,
                f"rebuilt bucket is_shared={flat.is_shared()} "
                f"nbytes={flat.nbytes} shm_maps={shared_maps()}",
            )
        bucket = FlattenedTensorBucket(flattened_tensor=flat, metadata=named_tensors["metadata"])
        reconstructed = bucket.reconstruct_tensors()
        t0 = time.perf_counter()
        with torch.no_grad():
            for name, t in reconstructed:  # model.load_weights
                self.model.load_hf(name, t)
        self.load_s += time.perf_counter() - t0
        self.weights_sum += float(flat.double().sum())
        if self.args.leak == "engine_keeps":
            self.kept_flattened.append(flat)
            self.step_kept += flat.nbytes
        del bucket, reconstructed, flat
        return True


def engine_main(args, store, rpc, mk):
    C.init_role_world(store, "sglang", 0, 1)
    runner = ModelRunner(args)
    model = runner.model
    truth = C.Truth(args.truth, "colocated", "engine", 0)
    gen = torch.Generator().manual_seed(1234)
    seq, step = 0, -1
    clk, t_step0 = C.Clock(), time.monotonic_ns()
    active, caches, t_gen0, paused = None, None, None, False
    while True:
        reqs = []
        while rpc.has(f"sglang/req/{seq}"):
            reqs.append((seq, rpc.get(f"sglang/req/{seq}")))
            seq += 1
        for rseq, req in reqs:
            kind = req["kind"]
            if kind == "generate":
                step = req["step"]
                if step >= 0:
                    mk.step()
                clk, t_step0 = C.Clock(), time.monotonic_ns()
                runner.step_kept, runner.weights_sum, runner.load_s = 0, 0.0, 0.0
                t_gen0 = time.perf_counter()
                g = torch.Generator().manual_seed(req["seed"])
                prompts = torch.randint(0, C.VOCAB, (BATCH, PROMPT), generator=g)
                caches = [[] for _ in range(C.N_LAYERS)]
                with mk.phase("rollout"), torch.no_grad():
                    logits = model(prompts, caches)  # prefill
                active = [prompts, req["n_new"], logits]
            elif kind == "update_weights_from_tensor":
                t0, n0 = time.perf_counter(), time.monotonic_ns()
                with mk.phase("weight_sync"):
                    runner.update_weights_from_tensor(
                        req["serialized_named_tensors"], req["load_format"]
                    )
                clk.t["sync"] = clk.get("sync") + time.perf_counter() - t0
                clk.mark("sync", n0, time.monotonic_ns())
            elif kind == "pause_generation":
                paused = True
            elif kind == "continue_generation":
                paused = False
                if "sync" in clk.ns:
                    a, end = clk.ns["sync"], time.monotonic_ns()
                    total = sum(t.nbytes for t in runner.kept_flattened) + sum(
                        d["flattened_tensor"].nbytes for d in runner.ipc_handle_cache
                    )
                    truth.write(
                        step=step,
                        t_start_ns=t_step0,
                        t_end_ns=end,
                        step_s=(end - t_step0) / 1e9,
                        rollout_s=clk.get("rollout"),
                        train_s=0.0,
                        sync_s=(a[1] - a[0]) / 1e9,
                        sync_busy_s=clk.get("sync"),
                        load_s=runner.load_s,
                        kept_bytes=runner.step_kept,
                        kept_total_bytes=total,
                        rss_shmem_kb=rss_shmem_kb(),
                        weights_sum=runner.weights_sum,
                        tokens=clk.t.get("tokens", 0),
                        **clk.span("sync"),
                    )
                    debug(
                        args,
                        f"engine step {step}: kept {runner.step_kept} B this step, "
                        f"{total} B in all, RssShmem {rss_shmem_kb()} kB",
                    )
            elif kind == "stop":
                rpc.put(f"sglang/ack/{rseq}", True)
                dist.destroy_process_group()
                return
            # flush_cache, release/resume_memory_occupation: nothing to free on CPU
            rpc.put(f"sglang/ack/{rseq}", True)  # the HTTP / Ray reply
        if active is not None and not paused:
            with mk.phase("rollout"), torch.no_grad():
                toks, remaining, logits = active
                nxt = torch.multinomial(torch.softmax(logits[:, -1], -1), 1, generator=gen)
                toks = torch.cat([toks, nxt], 1)
                remaining -= 1
                if remaining > 0:
                    active = [toks, remaining, model(nxt, caches)]
                else:
                    active, caches = None, None
                    clk.t["rollout"] = time.perf_counter() - t_gen0
                    clk.t["tokens"] = toks.shape[1] - PROMPT
                    rpc.put_tensor(f"sglang/result/{step}", toks)
                    rpc.put(f"sglang/result_shape/{step}", list(toks.shape))
        elif not reqs:
            time.sleep(0.01)  # --sleep-on-idle: the engine waits while the trainers train


# ====================================================================== Megatron trainer (0-1)
class UpdateWeightFromTensor:
    """slime `UpdateWeightFromTensor` (colocated engines only)."""

    def __init__(self, args, model, tp_group, gloo_group, rpc_call, rpc):
        self.args, self.model, self.tp_group = args, model, tp_group
        self.gloo_group, self.engine_call, self.rpc = gloo_group, rpc_call, rpc
        self.rank = dist.get_rank()
        self.weight_version = 0
        self.long_lived_tensors: list[dict] = []  # --leak trainer_list
        self.step_kept = 0
        self.weights_sum = 0.0
        self._ipc_gather_group = None
        self._ipc_gather_src = None
        self._ipc_engine = None

    def connect_rollout_engines(self, engines) -> None:
        """One gloo group per colocated engine over the engine's GPUs (every rank calls
        new_group for every engine); ranks with no engine on their GPU get none."""
        for i, (off, cnt) in enumerate(engines):
            ranks = list(range(off, off + cnt))
            g = dist.new_group(ranks=ranks, backend="gloo")
            if self.rank in ranks:
                self._ipc_gather_group, self._ipc_gather_src, self._ipc_engine = g, off, i

    # common.all_gather_param (TP all-gather, GLU rechunk for linear_fc1)
    def all_gather_param(self, name, param):
        if not param.tensor_model_parallel:
            return param.data
        parts = [torch.empty_like(param.data) for _ in range(2)]
        dist.all_gather(parts, param.data, group=self.tp_group)
        return torch.cat(parts, dim=param.partition_dim)

    # HfWeightIteratorDirect.get_hf_weight_chunks: every rank gathers and converts
    def get_hf_weight_chunks(self):
        buf, size = [], 0
        for name, param in self.model.named_parameters():
            hf = C.megatron_to_hf(name, self.all_gather_param(name, param), 2)
            nbytes = sum(t.numel() * t.element_size() for _, t in hf)
            if buf and size + nbytes > BUFFER_BYTES:
                yield buf
                buf, size = [], 0
            buf.extend(hf)
            size += nbytes
        if buf:
            yield buf

    @torch.no_grad()
    def update_weights(self) -> None:
        self.weight_version += 1
        self.step_kept, self.weights_sum = 0, 0.0
        if self.rank == 0:
            self.rpc.get(self.engine_call(kind="pause_generation"))  # ray.get
            self.rpc.get(self.engine_call(kind="flush_cache"))
        dist.barrier(group=self.gloo_group)
        for hf_named_tensors in self.get_hf_weight_chunks():
            refs, long_live_tensors = self._send_hf_params(hf_named_tensors)
            for ref in refs:  # ray.get(refs)
                self.rpc.get(ref)
            if self.args.leak == "trainer_list" and long_live_tensors:
                self.long_lived_tensors.extend(long_live_tensors)
                self.step_kept += sum(d["flattened_tensor"].nbytes for d in long_live_tensors)
            del refs, long_live_tensors, hf_named_tensors
            accelerator.ipc_collect()
            accelerator.empty_cache()
        dist.barrier(group=self.gloo_group)
        accelerator.ipc_collect()
        accelerator.empty_cache()
        if self.rank == 0:
            self.rpc.get(self.engine_call(kind="continue_generation"))
        dist.barrier(group=self.gloo_group)

    def _send_hf_params(self, hf_named_tensors):
        return self._send_to_colocated_engine(hf_named_tensors)

    def _send_to_colocated_engine(self, hf_named_tensors):
        if self._ipc_gather_group is None:  # placeholder rank: no engine on this GPU
            return [], None
        long_live_tensors = []
        by_dtype: dict = {}
        for name, tensor in hf_named_tensors:
            by_dtype.setdefault(tensor.dtype, []).append((name, tensor))
        serialized_tensors = []
        for _dtype, named in by_dtype.items():
            bucket = FlattenedTensorBucket(named_tensors=named)
            data = {
                "flattened_tensor": bucket.get_flattened_tensor(),
                "metadata": bucket.get_metadata(),
            }
            long_live_tensors.append(data)
            self.weights_sum += float(data["flattened_tensor"].double().sum())
            serialized_tensors.append(MultiprocessingSerializer.serialize(data, output_str=True))
        src = self._ipc_gather_src
        gathered = (
            [None] * dist.get_world_size(self._ipc_gather_group) if self.rank == src else None
        )
        dist.gather_object(
            serialized_tensors, object_gather_list=gathered, dst=src, group=self._ipc_gather_group
        )
        refs = []
        if self.rank == src:
            empty = None
            for i in range(max(len(t) for t in gathered)):
                per_rank = []
                for tensors in gathered:
                    if i < len(tensors):
                        per_rank.append(tensors[i])
                        continue
                    if empty is None:
                        empty_data = {
                            "flattened_tensor": torch.empty(0, dtype=torch.uint8),
                            "metadata": [],
                        }
                        long_live_tensors.append(empty_data)
                        empty = MultiprocessingSerializer.serialize(empty_data, output_str=True)
                    per_rank.append(empty)
                refs.append(
                    self.engine_call(
                        kind="update_weights_from_tensor",
                        serialized_named_tensors=per_rank,
                        load_format="flattened_bucket",
                        weight_version=str(self.weight_version),
                    )
                )
        return refs, long_live_tensors


class Trainer:
    def __init__(self, args, store, rpc, rr, mk):
        self.args, self.rpc, self.rr, self.mk = args, rpc, rr, mk
        C.init_role_world(store, "megatron", rr, N_TRAINERS)
        self.tp_group = dist.new_group([0, 1])  # mpu tensor-model-parallel group
        self.gloo_group = dist.new_group(backend="gloo")  # slime get_gloo_group()
        torch.manual_seed(args.seed + rr)
        self.model = C.TPToyLM(self.tp_group, rr, 2)
        self.opt = C.adamw(self.model.parameters())
        self.truth = C.Truth(args.truth, "colocated", "trainer", rr)
        self.req_seq = 0
        self.weight_updater = UpdateWeightFromTensor(
            args, self.model, self.tp_group, self.gloo_group, self.engine_call, rpc
        )
        self.weight_updater.connect_rollout_engines(ENGINES)

    def engine_call(self, **req) -> str:
        """A Ray call to the engine (`.remote()`); returns the ObjectRef (the ack's key)."""
        assert self.rr == 0, "only trainer rank 0 (the gather src / driver) calls the engine"
        seq = self.req_seq
        self.rpc.put(f"sglang/req/{seq}", req)
        self.req_seq += 1
        return f"sglang/ack/{seq}"

    def driver_call(self, **req) -> None:
        """RolloutManager calls from the driver (trainer rank 0 plays it): ray.get(...)."""
        if self.rr == 0:
            self.rpc.get(self.engine_call(**req))

    # -- MegatronTrainRayActor.train (as in the slime-shaped job)
    def train(self, tokens, step):
        model = self.model
        g = torch.Generator().manual_seed(1000 + step)
        rewards = torch.randn(tokens.shape[0], generator=g)
        adv = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).unsqueeze(-1)
        mbs, advs = tokens.chunk(MICRO), adv.chunk(MICRO)
        with torch.no_grad():  # compute_log_prob (old actor)
            old = [model.vocab_parallel_logprobs(model(mb), mb) for mb in mbs]
        for mb, a, o in zip(mbs, advs, old):
            lp = model.vocab_parallel_logprobs(model(mb), mb)
            (C.grpo_loss(lp, o, a) / MICRO).backward()
        sq = torch.stack(
            [
                p.grad.pow(2).sum()
                for p in model.parameters()
                if p.grad is not None and p.tensor_model_parallel
            ]
        ).sum()
        dist.all_reduce(sq, group=self.tp_group)
        norm = sq.sqrt()
        if norm > 1.0:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(1.0 / norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def _row(self) -> dict:
        wu = self.weight_updater
        return {
            "kept_bytes": wu.step_kept,
            "kept_total_bytes": sum(d["flattened_tensor"].nbytes for d in wu.long_lived_tensors),
            "rss_shmem_kb": rss_shmem_kb(),
            "weights_sum": wu.weights_sum,
            "weight_version": wu.weight_version,
        }

    def run(self):
        args, mk, wu = self.args, self.mk, self.weight_updater
        t0 = time.monotonic_ns()
        clk = C.Clock()
        with clk.phase("sync"), mk.phase("weight_sync"):
            wu.update_weights()  # "Always push actor weights to rollout once weights are loaded."
        self.driver_call(kind="resume_memory_occupation", tags=["kv_cache"])  # onload_kv
        end = time.monotonic_ns()
        self.truth.write(
            step=-1,
            kind="initial_sync",
            t_start_ns=t0,
            t_end_ns=end,
            step_s=(end - t0) / 1e9,
            rollout_s=0.0,
            train_s=0.0,
            sync_s=clk.get("sync"),
            **clk.span("sync"),
            **self._row(),
        )
        rng = np.random.default_rng(args.seed + 2)
        for step in range(args.steps):
            mk.step()
            clk = C.Clock()
            n_new = int(rng.integers(12, 33))  # response lengths vary step to step
            with clk.phase("rollout"), mk.phase("rollout"):
                if self.rr == 0:
                    self.engine_call(kind="generate", step=step, n_new=n_new, seed=step)
                shape = self.rpc.get(f"sglang/result_shape/{step}")
                tokens = self.rpc.get_tensor(f"sglang/result/{step}", torch.int64, shape)
                # --colocate implies --offload-rollout: the engine frees its GPU memory
                self.driver_call(kind="release_memory_occupation")
            with clk.phase("train"), mk.phase("train"):
                self.train(tokens, step)
            self.driver_call(kind="resume_memory_occupation", tags=["weights"])  # onload_weights
            with clk.phase("sync"), mk.phase("weight_sync"):
                wu.update_weights()
            self.driver_call(kind="resume_memory_occupation", tags=["kv_cache"])  # onload_kv
            end = time.monotonic_ns()
            row = self._row()
            self.truth.write(
                step=step,
                t_start_ns=clk.start_ns,
                t_end_ns=end,
                step_s=(end - clk.start_ns) / 1e9,
                rollout_s=clk.get("rollout"),
                train_s=clk.get("train"),
                sync_s=clk.get("sync"),
                tokens=n_new,
                **clk.span("sync"),
                **row,
            )
            debug(
                args,
                f"trainer step {step}: kept {row['kept_bytes']} B this step, "
                f"{row['kept_total_bytes']} B in all, RssShmem {row['rss_shmem_kb']} kB",
            )
        if self.rr == 0:
            self.rpc.get(self.engine_call(kind="stop"))
        dist.barrier(group=self.gloo_group)
        dist.destroy_process_group()


def main():
    args = parse_args()
    if args.leak == "double_open" and args.sharing == "file_descriptor":
        if C.global_rank() == 0:
            print(
                "job_colocated: --leak double_open cannot run under --sharing file_descriptor: "
                "the fd travels as a one-shot multiprocessing DupFd, so a payload can be "
                "opened only once (the second open fails in the producer's resource_sharer). "
                "Use --sharing file_system.",
                file=sys.stderr,
                flush=True,
            )
        sys.exit(2)
    torch.set_num_threads(1)
    torch.multiprocessing.set_sharing_strategy(args.sharing)
    # file_descriptor: the fd goes through multiprocessing's resource_sharer, which authenticates
    # with the process authkey; torchrun's workers are unrelated processes, so share one
    run = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'x')}:{os.environ['MASTER_PORT']}"
    multiprocessing.current_process().authkey = hashlib.sha256(run.encode()).digest()
    store = C.agent_store()
    rpc = C.Rpc(store)
    mk = C.Markers(args.markers)
    r = C.global_rank()
    if r < N_TRAINERS:
        Trainer(args, store, rpc, r, mk).run()
    else:
        engine_main(args, store, rpc, mk)


if __name__ == "__main__":
    main()
