"""The shared slime-shaped gloo job, with slime's trainer communication timeline written around
its own weight-sync buckets and training phases (test input only).

Runs ``shared/jobs/slime_shaped/job_slime.py`` unchanged (its ``main()``, engine, truth and
flags ``--steps --leak --truth --markers``) except that the Megatron trainer is a subclass that,
when ``SLIME_COMMUNICATION_TIMELINE`` is set, writes the timeline with our own writer
(``tests/targets/slime_timeline_writer.py``), where slime writes it
(``slime/observability/weight_sync_trace.py`` ``trace_weight_update`` /
``WeightSyncTrace``, ``slime/observability/communication_timeline.py``
``iter_communication_buckets``; docs ``communication_timeline.md``):

- ``update_weights`` under context ``weight_version = version + 1, transport = "nccl"`` (and
  ``global_step = rollout_id = step`` after the initial push, whose ``global_step`` is null);
  ``weight_sync_complete`` at the end, ``weight_sync_failed`` (``error_type``) on an exception;
- each chunk ``iter_non_expert_chunks`` produces is a ``weight_convert`` span (bucket ids from
  0, ``message_bytes`` of the HF tensors); the exhausted iterator's trailing probe is cancelled
  (a hole in ``sequence_id``). Trainer rank 1 gathers but produces no bucket, so its file has
  the training spans and the sync events, no buckets;
- per bucket: ``weight_bucket_ready``, span ``weight_bucket_send`` (engine request, broadcasts,
  their waits), ``engine_bucket_receive``, span ``engine_load_weights`` (the engine's ack),
  ``weight_bucket_reusable``;
- in ``train``: ``train_forward_backward`` (micro-batch forward/backward), ``grad_sync`` (the
  grad-norm all-reduce over the model-parallel group), ``optimizer_step``, under context
  ``global_step = rollout_id = step``.

Role "trainer", rank = trainer rank (0 or 1), world size 2. The run id is
``SLIME_COMMUNICATION_TIMELINE_RUN_ID``, else one uuid4 made by trainer rank 0 and shared with
rank 1 (slime: one run id for the actor group).

SLIME_COMMUNICATION_TIMELINE=/tmp/x/slime-{role}-{rank}.jsonl \\
    python -m torch.distributed.run --nproc-per-node 4 --master-addr 127.0.0.1 \\
    --master-port PORT job_slime_timeline.py [--steps 12] [--leak N] [--markers] [--truth F]
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

_JOBS = Path(
    os.environ.get("WSPROF_JOBS", Path(__file__).resolve().parents[3].parent / "shared" / "jobs")
)
sys.path.insert(0, str(_JOBS / "slime_shaped"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "targets"))
import common as C  # noqa: E402
import job_slime  # noqa: E402
from slime_timeline_writer import RUN_ID_ENV, TIMELINE_ENV, Timeline  # noqa: E402

Chunk = list[tuple[str, torch.Tensor]]


def _nbytes(chunk: Chunk) -> int:
    return sum(t.numel() * t.element_size() for _, t in chunk)


class TimelineTrainer(job_slime.Trainer):
    """``job_slime.Trainer`` that writes slime's communication timeline when enabled."""

    def __init__(self, args: Any, store: dist.Store, rpc: C.Rpc, rr: int, mk: C.Markers) -> None:
        super().__init__(args, store, rpc, rr, mk)
        self.step: int | None = None  # None during the initial push
        self.timeline: Timeline | None = None
        template = os.environ.get(TIMELINE_ENV)
        if template:
            run_id = os.environ.get(RUN_ID_ENV)
            if not run_id:
                if rr == 0:
                    run_id = uuid.uuid4().hex
                    rpc.put("timeline/run_id", run_id)
                else:
                    run_id = rpc.get("timeline/run_id")
            self.timeline = Timeline(
                template,
                rank=rr,
                world_size=2,
                run_id=run_id,
                local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            )

    def iter_non_expert_chunks(self) -> Iterator[Chunk]:
        chunks = super().iter_non_expert_chunks()
        tl = self.timeline
        if tl is None:
            yield from chunks
            return
        bucket = 0
        while True:
            with tl.span("weight_convert", bucket_id=bucket) as span:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    span.cancel()
                    return
                span.update(message_bytes=_nbytes(chunk))
            yield chunk
            bucket += 1

    def update_bucket(self, chunk: Chunk, bucket: int) -> None:
        tl = self.timeline
        if tl is None:
            super().update_bucket(chunk, bucket)
            return
        fields = {"bucket_id": bucket, "message_bytes": _nbytes(chunk)}
        tl.event("weight_bucket_ready", **fields)
        with tl.span("weight_bucket_send", **fields):
            self.engine_call(
                kind="update_weights_from_distributed",
                version=self.version,
                bucket=bucket,
                names=[n for n, _ in chunk],
                shapes=[list(t.shape) for _, t in chunk],
            )
            hs = [
                dist.broadcast(t.contiguous(), 0, group=self.update_group, async_op=True)
                for _, t in chunk
            ]
            for h in hs:
                h.wait()
        tl.event(
            "engine_bucket_receive", **fields, observation="trainer_transport_or_ipc_ack_complete"
        )
        with tl.span("engine_load_weights", **fields, observation="trainer_engine_load_ack_wait"):
            self.rpc.get(f"sglang/ack/{self.version}/{bucket}")  # ray.get(refs)
        tl.event("weight_bucket_reusable", **fields)

    def update_weights(self) -> None:
        tl = self.timeline
        if tl is None:
            super().update_weights()
            return
        step = {} if self.step is None else {"global_step": self.step, "rollout_id": self.step}
        with tl.context(**step, weight_version=self.version + 1, transport="nccl"):
            try:
                super().update_weights()
            except BaseException as error:
                tl.event("weight_sync_failed", error_type=type(error).__name__)
                raise
            tl.event("weight_sync_complete")

    def train(self, tokens: torch.Tensor, step: int) -> None:
        """``job_slime.Trainer.train`` with the three training spans."""
        self.step = step
        tl = self.timeline
        if tl is None:
            super().train(tokens, step)
            return
        model = self.model
        g = torch.Generator().manual_seed(1000 + step)
        rewards = torch.randn(tokens.shape[0], generator=g)
        adv = ((rewards - rewards.mean()) / (rewards.std() + 1e-6)).unsqueeze(-1)
        mbs = tokens.chunk(job_slime.MICRO)
        advs = adv.chunk(job_slime.MICRO)
        with tl.context(global_step=step, rollout_id=step):
            with torch.no_grad():  # compute_log_prob (old actor): not in the timeline
                old = [model.vocab_parallel_logprobs(model(mb), mb) for mb in mbs]
            with tl.span("train_forward_backward"):
                for mb, a, o in zip(mbs, advs, old):
                    lp = model.vocab_parallel_logprobs(model(mb), mb)
                    loss = C.grpo_loss(lp, o, a) / job_slime.MICRO
                    loss.backward()
            with tl.span("grad_sync"):
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
            with tl.span("optimizer_step"):
                self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        C.ALLOC.grow(self.args.leak)  # what this step leaves in the caching allocator

    def run(self) -> None:
        try:
            super().run()
        finally:
            if self.timeline is not None:
                self.timeline.close()


if __name__ == "__main__":
    # job_slime.main() unchanged; it builds `Trainer` from its module globals.
    job_slime.Trainer = TimelineTrainer
    job_slime.main()
