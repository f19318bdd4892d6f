"""AReaL-shaped job: FSDP2 trainer (data parallel 2, ranks 0-1) + one SGLang server (TP=2,
ranks 2-3), ASYNC rollout (the server keeps generating while the trainers train, bounded by
max_head_offpolicyness), weights pushed by `FSDPEngine._update_weights_from_distributed`:
per parameter a DTensor `full_tensor()` all-gather on every trainer rank, then on trainer rank 0
only, per bucket of `weight_chunked_mem_mb`, an HTTP `/update_weights_from_distributed` request
sent from the executor thread and one async `dist.broadcast` per tensor on
"update_weight_group" (trainer rank 0 + both server ranks), single-pending-bucket pipelining.

Sources: inclusionAI/AReaL 4aef98d8 (2026-05-21):
- areal/trainer/rl_trainer.py `PPOTrainer.train` (per-step order: prepare_batch ->
  recompute_logp -> compute_advantages -> ppo_update -> rollout.pause() -> update_weights ->
  set_version -> rollout.resume(); no initial weight push: the server loads the same
  checkpoint).
- areal/engine/fsdp_engine.py `FSDPEngine._update_weights_from_distributed`,
  `_update_bucket_weights_from_distributed_async`, `_wait_pending_weight_update_bucket`,
  `_get_full_tensor`, `_init_weight_update_from_distributed`, `connect_engine`.
- areal/infra/remote_inf_engine.py `RemoteInfEngine.update_weights_from_distributed` /
  `init_weights_update_group` (`get_executor().submit(...)`: the HTTP requests and their waits
  run on a "exec_default" ThreadPoolExecutor thread), `pause_generation` /
  `continue_generation` (HTTP from the calling thread), `agenerate` (an aborted request waits
  while the executor is paused, then resumes with the tokens it has).
- areal/engine/sglang_remote.py (endpoints and payloads), areal/infra/utils/concurrent.py
  (`get_executor`), areal/infra/workflow_executor.py + staleness_manager.py (capacity =
  (max_head_offpolicyness + version + 1) * consumer_batch_size - (accepted + running)),
  areal/infra/dist_rollout.py `DistRolloutCoordinator` (every FSDP rank is a DP head; trajectories
  all-gathered over the DP group, barriers on the CPU group, broadcast to the (here size-1)
  context/model-parallel group), areal/engine/core/distributed.py `init_custom_process_group`.

The leak: AReaL has no collective wrapper of its own; a free-memory probe like slime's
(`common._wrap_low_level_call`) is installed after torch import on ONE trainer rank
(--leak-rank, default 1) on the names that rank's weight push calls: `dist.broadcast`,
`dist.barrier` and `torch.distributed._functional_collectives.all_gather_single` (what DTensor
`full_tensor()` calls in torch 2.13, `placement_types.Shard._to_replicate_tensor`). With
--leak N the probe walks N more fake allocator segments every step on that rank.

torchrun --nproc-per-node 4 job_areal.py [--steps 12] [--leak N] [--leak-rank R] [--markers]
    [--truth F]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import functools
import os
import pickle
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

_JOBS = Path(
    os.environ.get("WSPROF_JOBS", Path(__file__).resolve().parents[3].parent / "shared" / "jobs")
)
sys.path.insert(0, str(_JOBS / "slime_shaped"))
import common as C  # noqa: E402

# Toy sizes (AReaL's gsm8k_grpo.yaml in brackets)
WEIGHT_CHUNK_BYTES = 1 << 20  # WeightUpdateMeta.weight_chunked_mem_mb [1024 MB]; model is 5.8 MB
GROUP = 4  # gconfig.n_samples [4]: rows of one rollout (one prompt group)
PROMPT = 16  # prompt tokens
CONSUMER_BS = 1  # groups per trainer rank per step (train_dataset.batch_size / DP)
MAX_OFFPOLICY = 1  # rollout.max_head_offpolicyness [2]
MAX_CONCURRENT = 2  # rollout.max_concurrent_rollouts per client [256]
MAX_RUNNING = 8  # SGLang max_running_requests in one batch
PAUSED_POLL_S = 0.05  # agenerate: `while is_paused(): await asyncio.sleep(0.5)` (scaled)
GROUP_NAME = "update_weight_group"


def broadcast_pyobj(data, rank, group):
    """SGLang `utils.broadcast_pyobj` (the scheduler hands requests from TP rank 0 to the other
    TP ranks once per event-loop iteration, on the gloo CPU group); as in job_slime.py."""
    if rank == 0:
        if not data:
            dist.broadcast(torch.tensor([0], dtype=torch.long), src=0, group=group)
            return data
        buf = pickle.dumps(data)
        dist.broadcast(torch.tensor([len(buf)], dtype=torch.long), src=0, group=group)
        dist.broadcast(torch.frombuffer(bytearray(buf), dtype=torch.uint8), src=0, group=group)
        return data
    size = torch.tensor([0], dtype=torch.long)
    dist.broadcast(size, src=0, group=group)
    if size.item() == 0:
        return []
    t = torch.empty(size.item(), dtype=torch.uint8)
    dist.broadcast(t, src=0, group=group)
    return pickle.loads(t.numpy().tobytes())


_TLS = threading.local()


def thread_rpc() -> C.Rpc:
    """A store connection per thread: a TCPStore client serialises its operations, and a
    blocking get (a request waiting for its response) must not hold up the other threads."""
    if not hasattr(_TLS, "rpc"):
        _TLS.rpc = C.Rpc(C.agent_store())
    return _TLS.rpc


def http(rpc: C.Rpc | None, endpoint: str, payload: dict) -> dict:
    """One request to the SGLang server and its response (`arequest_with_retry`): a key in the
    agent store read by the server's TP rank 0, the response written back under the request's
    index. Never a torch.distributed collective."""
    rpc = rpc or thread_rpc()
    idx = rpc.add("sglang/nreq", 1) - 1
    rpc.put(f"sglang/req/{idx}", {"endpoint": endpoint, "idx": idx, **payload})
    return rpc.get(f"sglang/resp/{idx}")


def http_send(rpc: C.Rpc | None, endpoint: str, payload: dict) -> int:
    rpc = rpc or thread_rpc()
    idx = rpc.add("sglang/nreq", 1) - 1
    rpc.put(f"sglang/req/{idx}", {"endpoint": endpoint, "idx": idx, **payload})
    return idx


# ====================================================================== SGLang server (ranks 2-3)
def engine_main(args, store, rpc, rr, mk):
    """SGLang `launch_server` TP=2: scheduler event loop (broadcast_pyobj every iteration, also
    idle), continuous batching of /generate requests, /pause_generation (abort mode: running and
    queued requests return what they have, finish reason "abort"), /continue_generation,
    /init_weights_update_group, /update_weights_from_distributed (one async broadcast per
    tensor on the named group, wait all, load_weights)."""
    C.init_role_world(store, "sglang", rr, 2)
    tp_cpu_group = dist.new_group(backend="gloo")  # GroupCoordinator.cpu_group
    torch.manual_seed(args.seed)
    hf = C.HFToyLM()  # the same HF checkpoint the trainer loads (no initial push in AReaL)
    model = C.TPToyLM(dist.group.WORLD, rr, 2)
    for name, t in hf.state_dict().items():
        model.load_hf(name, t)
    del hf
    update_group = None
    truth = C.Truth(args.truth, "areal", "engine", rr)
    seq = 0
    paused = False
    waiting: list[dict] = []
    running = (
        None  # {"reqs": [...], "toks": tensor, "logits": tensor, "caches": [...], "gen": [...]}
    )
    clk = C.Clock()
    t_step0 = time.monotonic_ns()
    busy_rollout = 0.0

    def respond(req, obj):
        if rr == 0:
            rpc.put(f"sglang/resp/{req['idx']}", obj)

    def finish(batch, reason):
        nonlocal running
        toks = batch["toks"]
        for i, req in enumerate(batch["reqs"]):
            rows = toks[i * GROUP : (i + 1) * GROUP, req["n_in"] :]
            respond(req, {"tokens": rows.tolist(), "stop_reason": reason})
        running = None

    while True:
        reqs = []
        if rr == 0:
            while rpc.has(f"sglang/req/{seq}"):
                reqs.append(rpc.get(f"sglang/req/{seq}"))
                seq += 1
        reqs = broadcast_pyobj(reqs, rr, tp_cpu_group)
        for req in reqs:
            ep = req["endpoint"]
            if ep == "/generate":
                waiting.append(req)
            elif ep == "/pause_generation":
                paused = True
                if running is not None:
                    finish(running, "abort")
                for w in waiting:
                    respond(w, {"tokens": [[] for _ in range(GROUP)], "stop_reason": "abort"})
                waiting = []
                respond(req, {"ok": True})
            elif ep == "/init_weights_update_group":
                update_group = C.init_custom_process_group(store, GROUP_NAME, 1 + rr, 3)
                respond(req, {"ok": True})
            elif ep == "/update_weights_from_distributed":
                t0, n0 = time.perf_counter(), time.monotonic_ns()
                with mk.phase("weight_sync"), torch.no_grad():
                    ws, hs = [], []
                    for name, shape in zip(req["names"], req["shapes"]):
                        w = torch.empty(shape)
                        hs.append(dist.broadcast(w, src=0, group=update_group, async_op=True))
                        ws.append((name, w))
                    for h in hs:
                        h.wait()
                    for name, w in ws:
                        model.load_hf(name, w)
                clk.t["sync"] = clk.get("sync") + time.perf_counter() - t0
                clk.mark("sync", n0, time.monotonic_ns())
                respond(req, {"ok": True})
            elif ep == "/continue_generation":
                paused = False
                if "sync" in clk.ns:
                    a, end = clk.ns["sync"], time.monotonic_ns()
                    truth.write(
                        step=req["version"] - 1,
                        t_start_ns=t_step0,
                        t_end_ns=end,
                        step_s=(end - t_step0) / 1e9,
                        rollout_s=busy_rollout,
                        sync_s=(a[1] - a[0]) / 1e9,
                        sync_busy_s=clk.get("sync"),
                        leak_s=0.0,
                        leak_calls=0,
                        **clk.span("sync"),
                    )
                    mk.step()
                    clk = C.Clock()
                    t_step0, busy_rollout = end, 0.0
                respond(req, {"ok": True})
            elif ep == "/stop":
                dist.barrier(group=tp_cpu_group)
                dist.destroy_process_group()
                return
        if running is None and waiting and not paused:
            n_in = waiting[0]["n_in"]  # one batch: requests of the same length, FIFO
            batch = [w for w in waiting if w["n_in"] == n_in][:MAX_RUNNING]
            waiting = [w for w in waiting if w not in batch]
            t0 = time.perf_counter()
            with mk.phase("rollout"), torch.no_grad():
                toks = torch.cat([torch.tensor(r["input_ids"], dtype=torch.long) for r in batch])
                caches = [[] for _ in range(C.N_LAYERS)]
                logits = model(toks, caches)  # prefill
            busy_rollout += time.perf_counter() - t0
            gens = [torch.Generator().manual_seed(r["seed"]) for r in batch]
            running = {
                "reqs": batch,
                "toks": toks,
                "logits": logits,
                "caches": caches,
                "gens": gens,
                "left": [r["max_new_tokens"] for r in batch],
            }
        if running is not None:
            t0 = time.perf_counter()
            with mk.phase("rollout"), torch.no_grad():
                b = running
                last = model.gather_logits(b["logits"][:, -1])
                probs = torch.softmax(last.float(), -1)
                nxt = torch.cat(
                    [
                        torch.multinomial(probs[i * GROUP : (i + 1) * GROUP], 1, generator=g)
                        for i, g in enumerate(b["gens"])
                    ]
                )
                b["toks"] = torch.cat([b["toks"], nxt], 1)
                b["left"] = [n - 1 for n in b["left"]]
                keep = [i for i, n in enumerate(b["left"]) if n > 0]
                if len(keep) < len(b["reqs"]):  # finished requests leave the running batch
                    for i, req in enumerate(b["reqs"]):
                        if b["left"][i] <= 0:
                            rows = b["toks"][i * GROUP : (i + 1) * GROUP, req["n_in"] :]
                            respond(req, {"tokens": rows.tolist(), "stop_reason": "length"})
                    sel = torch.tensor(
                        [i * GROUP + j for i in keep for j in range(GROUP)], dtype=torch.long
                    )
                    b["toks"], nxt = b["toks"][sel], nxt[sel]
                    for c in b["caches"]:
                        c[:] = [c[0][sel], c[1][sel]]
                    for key in ("reqs", "gens", "left"):
                        b[key] = [b[key][i] for i in keep]
                if keep:
                    b["logits"] = model(nxt, b["caches"])
                else:
                    running = None
            busy_rollout += time.perf_counter() - t0
        elif not reqs and rr == 0:
            # --sleep-on-idle: SGLang's IdleSleeper polls the request socket with a timeout and
            # wakes at the next request (TP rank 1 waits in broadcast_pyobj meanwhile)
            with contextlib.suppress(dist.DistStoreError):
                rpc.s.wait([f"sglang/req/{seq}"], datetime.timedelta(seconds=1))


# ====================================================================== AReaL client side
class RolloutClient:
    """One trainer rank's `RemoteSGLangEngine` + `WorkflowExecutor`: a background thread keeps
    up to the staleness capacity of rollouts in flight on the server, resubmits aborted ones
    (with the tokens they have) once the executor is resumed, and queues finished groups;
    `prepare_batch` waits for CONSUMER_BS of them."""

    def __init__(self, rpc: C.Rpc, rr: int, seed: int):
        self.rpc, self.rr = rpc, rr
        self.rng = np.random.default_rng(seed + 100 * rr)
        self.version = 0
        self.accepted = 0
        self.inflight: dict[int, dict] = {}  # request idx -> rollout state
        self.retry: list[dict] = []
        self.done: queue.Queue = queue.Queue()
        self.paused = threading.Event()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.n_sub = 0
        self.thread = threading.Thread(target=self._loop, name="WorkflowExecutor", daemon=True)
        self.thread.start()

    def _capacity(self) -> int:
        """StalenessManager.get_capacity."""
        running = len(self.inflight) + len(self.retry)
        conc = MAX_CONCURRENT - running
        stale = (MAX_OFFPOLICY + self.version + 1) * CONSUMER_BS - (self.accepted + running)
        return min(conc, stale)

    def _send(self, ro: dict) -> None:
        n_in = PROMPT + len(ro["out"][0])
        ids = [p + o for p, o in zip(ro["prompt"], ro["out"])]
        idx = http_send(
            None,
            "/generate",
            {
                "input_ids": ids,
                "n_in": n_in,
                "max_new_tokens": ro["n_new"] - len(ro["out"][0]),
                "seed": ro["seed"] * 1000 + len(ro["out"][0]),
                "version": self.version,
            },
        )
        self.inflight[idx] = ro

    def _loop(self) -> None:
        rpc = thread_rpc()
        while not self.stop.is_set():
            busy = False
            with self.lock:
                if not self.paused.is_set():
                    while self.retry:  # agenerate: resume an interrupted request
                        self._send(self.retry.pop(0))
                    while self._capacity() > 0:
                        g = np.random.default_rng(int(self.rng.integers(1 << 30)))
                        prompt = g.integers(0, C.VOCAB, PROMPT).tolist()
                        self._send(
                            {
                                "prompt": [prompt] * GROUP,
                                "out": [[] for _ in range(GROUP)],
                                "n_new": int(g.integers(12, 33)),
                                "seed": self.n_sub,
                                "version0": self.version,
                            }
                        )
                        self.n_sub += 1
                for idx in list(self.inflight):
                    key = f"sglang/resp/{idx}"
                    if not rpc.has(key):
                        continue
                    busy = True
                    resp = rpc.get(key)
                    ro = self.inflight.pop(idx)
                    ro["out"] = [o + t for o, t in zip(ro["out"], resp["tokens"])]
                    if len(ro["out"][0]) < ro["n_new"]:
                        self.retry.append(ro)
                    else:
                        self.accepted += 1
                        self.done.put(ro)
            if not busy:
                time.sleep(0.005 if not self.paused.is_set() else PAUSED_POLL_S)

    def prepare_batch(self) -> list[torch.Tensor]:
        return [
            torch.tensor([p + o for p, o in zip(ro["prompt"], ro["out"])])
            for ro in (self.done.get() for _ in range(CONSUMER_BS))
        ]

    def pause(self) -> None:  # WorkflowExecutor.pause: no new submissions
        self.paused.set()

    def resume(self) -> None:
        self.paused.clear()

    def set_version(self, v: int) -> None:
        with self.lock:
            self.version = v


# ====================================================================== the leak
LEAK_NAMES = (
    ("torch.distributed", "broadcast"),
    ("torch.distributed", "barrier"),
    ("torch.distributed._functional_collectives", "all_gather_single"),
)


def install_memory_probe() -> None:
    """A free-memory probe before every collective the weight push calls on this rank (slime
    #2268's mechanism, `common._wrap_low_level_call`), assigned to the module attributes after
    torch import: `dist.broadcast`, `dist.barrier`, and `funcol.all_gather_single`, which
    DTensor.full_tensor() looks up at call time."""
    mods = {"torch.distributed": dist, "torch.distributed._functional_collectives": funcol}
    for mod, name in LEAK_NAMES:
        orig = getattr(mods[mod], name)

        def probed(*a, __f=orig, **k):
            with C._wrap_low_level_call(check_memory=True):
                return __f(*a, **k)

        functools.update_wrapper(probed, orig)
        probed.__qualname__ = f"install_memory_probe.<locals>.probed[{name}]"
        setattr(mods[mod], name, probed)


# ====================================================================== FSDP trainer (ranks 0-1)
class Trainer:
    def __init__(self, args, store, rpc, rr, mk):
        self.args, self.rpc, self.rr, self.mk = args, rpc, rr, mk
        C.init_role_world(store, "fsdp", rr, 2)
        if rr == args.leak_rank:
            install_memory_probe()
        self.cpu_group = dist.new_group(backend="gloo")  # FSDPEngine.cpu_group
        self.cp_tp_groups = [
            dist.new_group([r]) for r in range(2)
        ]  # context_and_model_parallel (size 1)
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(args.seed)  # the same checkpoint the server loads
        model = C.HFToyLM()
        for layer in model.model.layers:  # parallelize_model: fully_shard per block, then root
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self.model = model
        self.opt = C.adamw(model.parameters())
        self.rollout = RolloutClient(rpc, rr, args.seed)
        self.truth = C.Truth(args.truth, "areal", "trainer", rr)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="exec_default"
        )  # areal get_executor()
        self.update_group = None
        # connect_engine -> _init_weight_update_from_distributed (rank 0 only), barrier
        if rr == 0:
            fut = self.executor.submit(http, None, "/init_weights_update_group", {})
            self.update_group = C.init_custom_process_group(store, GROUP_NAME, 0, 3)
            fut.result()
        dist.barrier(group=self.cpu_group)

    # -- RemoteInfEngine control requests (HTTP on the calling thread)
    def pause_generation(self):
        http(self.rpc, "/pause_generation", {})

    def continue_generation(self, version):
        http(self.rpc, "/continue_generation", {"version": version})

    # -- FSDPEngine weight push
    def _bucket_async(self, named, bucket, version):
        """_update_bucket_weights_from_distributed_async: the HTTP request from the executor
        thread, then one async broadcast per tensor on the weight-update group."""
        fut = self.executor.submit(
            http,
            None,
            "/update_weights_from_distributed",
            {
                "names": [n for n, _ in named],
                "shapes": [list(t.shape) for _, t in named],
                "dtypes": ["float32"] * len(named),
                "group_name": GROUP_NAME,
                "abort_all_requests": True,
                "version": version,
                "bucket": bucket,
            },
        )
        hs = [dist.broadcast(t, src=0, group=self.update_group, async_op=True) for _, t in named]
        return hs, fut

    @staticmethod
    def _wait(pending):
        hs, fut = pending
        for h in hs:
            h.wait()
        fut.result()

    @torch.no_grad()
    def update_weights(self, version):
        main = self.rr == 0
        if main:
            self.pause_generation()
        dist.barrier(group=self.cpu_group)
        size, named, pending, bucket = 0, [], None, 0
        for name, param in self.model.named_parameters():
            tensor = param.data.full_tensor()  # _get_full_tensor: every rank gathers
            if not main:
                continue
            nbytes = tensor.numel() * tensor.element_size()
            if size > 0 and size + nbytes > WEIGHT_CHUNK_BYTES:
                if pending is not None:
                    self._wait(pending)
                pending = self._bucket_async(named, bucket, version)
                bucket += 1
                named, size = [], 0
            size += nbytes
            named.append((name, tensor))
        if pending is not None:
            self._wait(pending)
        if size > 0:
            self._wait(self._bucket_async(named, bucket, version))
        dist.barrier(group=self.cpu_group)
        if main:
            self.continue_generation(version)
        dist.barrier(group=self.cpu_group)

    # -- DistRolloutCoordinator.prepare_batch
    def prepare_batch(self):
        mine = self.rollout.prepare_batch()  # every FSDP rank is a DP head
        # redistribute_trajectories: all_gather_tensor_container over the DP group
        shapes = [None, None]
        dist.all_gather_object(shapes, [list(t.shape) for t in mine])
        allg = []
        for i, t in enumerate(mine):
            n = max(s[i][0] * s[i][1] for s in shapes)
            flat = torch.zeros(n, dtype=torch.long)
            flat[: t.numel()] = t.flatten()
            ys = [torch.empty_like(flat) for _ in range(2)]
            dist.all_gather(ys, flat)
            allg += [y[: s[i][0] * s[i][1]].view(*s[i]) for y, s in zip(ys, shapes)]
        # balanced allocation by length (ffd; equal counts so both ranks run as many micro-batches)
        order = sorted(range(len(allg)), key=lambda j: -allg[j].numel())
        mine_idx = [j for k, j in enumerate(order) if (k % 4 in (0, 3)) == (self.rr == 0)]
        batch = [allg[j] for j in mine_idx]
        dist.barrier(group=self.cpu_group)
        # broadcast_tensor_container to the context/model-parallel group (size 1 here)
        meta = [("list", len(batch))]
        dist.broadcast_object_list(meta, src=self.rr, group=self.cp_tp_groups[self.rr])
        dist.barrier(group=self.cpu_group)
        return batch

    # -- FSDPPPOActor: compute_logp, compute_advantages, ppo_update
    def train(self, batch, step):
        model = self.model
        with torch.no_grad():  # recompute_logp (prox logp)
            old = [C.token_logprobs(model(mb), mb) for mb in batch]
        g = torch.Generator().manual_seed(1000 + 10 * step + self.rr)
        advs = []
        for mb in batch:  # group-normalised rewards (reward_norm mean/std at group level)
            r = torch.randn(mb.shape[0], generator=g)
            advs.append(((r - r.mean()) / (r.std() + 1e-6)).unsqueeze(-1))
        for mb, a, o in zip(batch, advs, old):  # train_batch: one micro-batch per group
            lp = C.token_logprobs(model(mb), mb)
            loss = C.grpo_loss(lp, o, a) / len(batch)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # gradient_clipping: 1.0
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.rr == self.args.leak_rank:
            C.ALLOC.grow(self.args.leak)  # what this step leaves in the caching allocator

    def run(self):
        args, mk = self.args, self.mk
        C.ALLOC.take()
        for step in range(args.steps):
            mk.step()
            clk = C.Clock()
            with clk.phase("rollout"), mk.phase("rollout"):
                batch = self.prepare_batch()
            with clk.phase("train"), mk.phase("train"):
                self.train(batch, step)
            self.rollout.pause()  # pause inference for updating weights
            with clk.phase("sync"), mk.phase("weight_sync"):  # record_timing("update_weights")
                self.update_weights(step + 1)
                self.rollout.set_version(step + 1)
            self.rollout.resume()
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
                segments=len(C.ALLOC.segs),
                **clk.span("sync"),
            )
        self.rollout.pause()
        self.rollout.stop.set()
        self.rollout.thread.join()
        dist.barrier(group=self.cpu_group)
        if self.rr == 0:
            http_send(self.rpc, "/stop", {})
        self.executor.shutdown()
        dist.destroy_process_group()


def main():
    def extra(ap):
        ap.add_argument(
            "--leak-rank",
            type=int,
            default=1,
            help="the one trainer rank (0 or 1) whose collectives are probed",
        )

    args = C.job_args("AReaL-shaped async RL job (FSDP2 DP=2 + SGLang TP=2)", extra=extra)
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
