"""Synthetic slime trainer communication timelines with ground truth (test input only).

Written with our own writer (``slime_timeline_writer``), in the operation order of slime's
``slime/observability/weight_sync_trace.py`` (``trace_weight_update`` around
``update_weights``) and ``slime/observability/communication_timeline.py``; layout per slime's
docs ``communication_timeline.md``. Deterministic clock, no sleeping.

Each case has two trainer ranks (0 and 1, world size 2, same host, distinct pids), files
``FOLDER/slime-{role}-{rank}.jsonl`` and a non-timeline ``FOLDER/config.yaml`` readers must
ignore. Per step S (global_step = rollout_id = S, weight_version = S + 1), in slime's order:
a gap outside the trainer (rollout, ~2.0 s), ``train_forward_backward`` (~0.8 s),
``grad_sync`` (~0.05 s), ``optimizer_step`` (~0.1 s), then the weight sync: 4 buckets of
256 MiB, each ``weight_convert`` (0.02 s), ``weight_bucket_ready``, ``weight_bucket_send``
(0.05 s), ``engine_bucket_receive``, ``engine_load_weights`` (0.03 s),
``weight_bucket_reusable``; then the cancelled trailing ``weight_convert`` probe (a hole in
``sequence_id``), 10 ms of barriers / continue_generation, and ``weight_sync_complete``. Every
duration has a seeded +-2 % jitter; rank 1 runs 1.5 ms behind rank 0 with its own jitter.

Truth (``write_case``'s return value; JSON-serialisable)::

    {"case", "run_ids", "steps", "sync_s", "bytes", "send_s", "convert_s", "load_s",
     "buckets", "slow_bucket", "failed", "cut_lines", "growing_part", "schema_version"}

The per-sync lists are rank 0's, one entry per weight sync: ``sync_s`` from the start of the
version's first ``weight_convert`` to its ``weight_sync_complete`` / ``weight_sync_failed``
event, ``bytes`` the sum of its ``weight_bucket_send`` message_bytes, ``send_s`` /
``convert_s`` / ``load_s`` the sums of its span durations (error spans included). Durations are
exact to the nanosecond (they are what the clock was moved by).

- ``killed_writer``: rank 0's last record (the last ``weight_sync_complete``) is cut mid-line;
  the reader sees that sync's buckets but not its end, so its ``sync_s`` is ``None`` and
  ``cut_record`` names the lost record.
- ``two_runs``: the lists are per run, in ``truth["runs"][run_id]`` (with ``files``); the
  top-level ``run_ids`` is [newer run A (``slime-trainer-*``, steps // 2 steps), older run B
  (``older-trainer-*``, ``steps`` steps, earlier timestamps)].

CLI: ``python slime_timeline_cases.py CASE FOLDER`` writes the case and prints the truth.
"""

from __future__ import annotations

import json
import random
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slime_timeline_writer import ManualClock, Timeline

CASES = (
    "healthy",
    "send_grows",
    "bytes_grow",
    "slow_bucket",
    "failed_sync",
    "killed_writer",
    "two_runs",
    "unknown_schema",
    "schema1",
)

MIB = 1 << 20
BUCKETS = 4
BUCKET_BYTES = 256 * MIB
ROLLOUT_S, FWD_BWD_S, GRAD_SYNC_S, OPT_S = 2.0, 0.8, 0.05, 0.1
CONVERT_S, SEND_S, LOAD_S = 0.02, 0.05, 0.03
GAP_S = 0.0002  # between two records of one sync (Python, barriers)
SYNC_TAIL_S = 0.01  # barriers and continue_generation after the last bucket
JITTER = 0.02
FAIL_TIMEOUT_S = 1.0  # how long the failing engine_load_weights waits before TimeoutError
WALL0_NS = 1_760_000_000_000_000_000  # wall clock at the first record of a case
MONO0_NS = 5_000_000_000_000  # CLOCK_MONOTONIC (uptime) at the same moment
RANK_OFFSET_NS = 1_500_000  # rank 1 runs this far behind rank 0
HOST = "node-0"
CONFIG_YAML = """\
# slime launch arguments (not a timeline)
actor_num_nodes: 1
actor_num_gpus_per_node: 2
update_weight_buffer_size: 268435456
communication_timeline: slime-{role}-{rank}.jsonl
"""


@dataclass(frozen=True)
class Spec:
    """What differs between cases."""

    send_growth_s: float = 0.0  # per step, every bucket's send
    bytes_growth: int = 0  # per step, every bucket's message_bytes (send time proportional)
    slow_bucket: int | None = None
    slow_growth_s: float = 0.0  # per step, the slow bucket's send only
    fail_version: int | None = None  # this version's bucket 1 engine_load_weights times out
    schema_version: int = 2


SPECS = {
    "healthy": Spec(),
    "send_grows": Spec(send_growth_s=0.05),
    "bytes_grow": Spec(bytes_growth=32 * MIB),
    "slow_bucket": Spec(slow_bucket=2, slow_growth_s=0.1),
    "failed_sync": Spec(fail_version=6),
    "killed_writer": Spec(send_growth_s=0.05),
    "unknown_schema": Spec(schema_version=3),
    "schema1": Spec(schema_version=1),
}
GROWING = {"send_grows": "send", "bytes_grow": "send", "slow_bucket": "send"}


def _run_id(label: str) -> str:
    return uuid.UUID(int=random.Random(label).getrandbits(128)).hex


class _Rank:
    """Writes one rank's file for one run and measures rank-level truth while doing it."""

    def __init__(self, tl: Timeline, clock: ManualClock, spec: Spec, seed: str) -> None:
        self.tl, self.clock, self.spec = tl, clock, spec
        self.rng = random.Random(seed)

    def wait(self, seconds: float) -> int:
        """Move the clock by ``seconds`` with jitter; return the ns moved."""
        ns = round(seconds * (1 + self.rng.uniform(-JITTER, JITTER)) * 1e9)
        self.clock.advance(ns / 1e9)
        return ns

    def step(self, step: int) -> dict[str, Any]:
        tl = self.tl
        self.wait(ROLLOUT_S)  # generate: outside the trainer
        with tl.context(global_step=step, rollout_id=step):
            with tl.span("train_forward_backward"):
                self.wait(FWD_BWD_S)
            with tl.span("grad_sync"):
                self.wait(GRAD_SYNC_S)
            with tl.span("optimizer_step"):
                self.wait(OPT_S)
            self.wait(GAP_S)
            return self.sync(step, step + 1)

    def sync(self, step: int, version: int) -> dict[str, Any]:
        tl, spec = self.tl, self.spec
        m: dict[str, Any] = {"step": step, "bytes": 0, "send": 0, "convert": 0, "load": 0}
        m["t0"] = self.clock.mono_ns
        with tl.context(weight_version=version, transport="nccl"):
            try:
                for b in range(BUCKETS):
                    nbytes = BUCKET_BYTES + spec.bytes_growth * step
                    send_s = SEND_S * nbytes / BUCKET_BYTES + spec.send_growth_s * step
                    if b == spec.slow_bucket:
                        send_s += spec.slow_growth_s * step
                    with tl.span("weight_convert", bucket_id=b) as span:
                        m["convert"] += self.wait(CONVERT_S)
                        span.update(message_bytes=nbytes)
                    fields = {"bucket_id": b, "message_bytes": nbytes}
                    self.wait(GAP_S)
                    tl.event("weight_bucket_ready", **fields)
                    with tl.span("weight_bucket_send", **fields):
                        m["send"] += self.wait(send_s)
                    m["bytes"] += nbytes
                    self.wait(GAP_S)
                    tl.event(
                        "engine_bucket_receive",
                        **fields,
                        observation="trainer_transport_or_ipc_ack_complete",
                    )
                    with tl.span(
                        "engine_load_weights", **fields, observation="trainer_engine_load_ack_wait"
                    ):
                        if version == spec.fail_version and b == 1:
                            m["load"] += self.wait(FAIL_TIMEOUT_S)
                            raise TimeoutError("engine load acknowledgement timed out")
                        m["load"] += self.wait(LOAD_S)
                    self.wait(GAP_S)
                    tl.event("weight_bucket_reusable", **fields)
                    self.wait(GAP_S)
                with tl.span("weight_convert", bucket_id=BUCKETS) as span:
                    span.cancel()  # the bucket iterator is exhausted
                self.wait(SYNC_TAIL_S)
            except TimeoutError as error:
                self.wait(GAP_S)
                tl.event("weight_sync_failed", error_type=type(error).__name__)
                m["failed"] = {"weight_version": version, "error_type": type(error).__name__}
            else:
                tl.event("weight_sync_complete")
        m["t1"] = self.clock.mono_ns
        return m


def _write_run(
    folder: Path, prefix: str, run_id: str, spec: Spec, steps: int, start_s: float
) -> list[dict[str, Any]]:
    """Both ranks of one run; returns rank 0's per-sync measurements."""
    rank0: list[dict[str, Any]] = []
    for rank in (0, 1):
        offset = round(start_s * 1e9) + rank * RANK_OFFSET_NS
        clock = ManualClock(WALL0_NS + offset, MONO0_NS + offset)
        tl = Timeline(
            str(folder / f"{prefix}-{{role}}-{{rank}}.jsonl"),
            rank=rank,
            world_size=2,
            run_id=run_id,
            local_rank=rank,
            schema_version=spec.schema_version,
            clock=clock,
            pid=41000 + 100 * round(start_s) + rank,
            hostname=HOST,
        )
        writer = _Rank(tl, clock, spec, seed=f"{run_id}-{rank}")
        syncs = [writer.step(s) for s in range(steps)]
        tl.close()
        if rank == 0:
            rank0 = syncs
    return rank0


def _lists(syncs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "steps": [m["step"] for m in syncs],
        "sync_s": [(m["t1"] - m["t0"]) / 1e9 for m in syncs],
        "bytes": [m["bytes"] for m in syncs],
        "send_s": [m["send"] / 1e9 for m in syncs],
        "convert_s": [m["convert"] / 1e9 for m in syncs],
        "load_s": [m["load"] / 1e9 for m in syncs],
    }


def _cut_last_line(path: Path) -> None:
    """Truncate the file in the middle of its last line (a writer killed mid-write)."""
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start + (len(data) - start) // 2])


def write_case(name: str, folder: Path, steps: int = 12) -> dict[str, Any]:
    """Write case ``name`` into ``folder`` (created) and return its truth."""
    if name not in CASES:
        raise ValueError(f"unknown case {name!r}; one of {', '.join(CASES)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(CONFIG_YAML)
    truth: dict[str, Any] = {"case": name}
    if name == "two_runs":
        spec = Spec()
        run_a, run_b = _run_id(f"{name}-A"), _run_id(f"{name}-B")
        step_s = ROLLOUT_S + FWD_BWD_S + GRAD_SYNC_S + OPT_S + 1.0  # a step, rounded up
        older = _write_run(folder, "older", run_b, spec, steps, start_s=0.0)
        newer = _write_run(folder, "slime", run_a, spec, steps // 2, start_s=steps * step_s + 60)
        truth["run_ids"] = [run_a, run_b]
        truth["runs"] = {
            run_a: {**_lists(newer), "files": ["slime-trainer-0.jsonl", "slime-trainer-1.jsonl"]},
            run_b: {**_lists(older), "files": ["older-trainer-0.jsonl", "older-trainer-1.jsonl"]},
        }
        failed: list[dict[str, Any]] = []
    else:
        spec = SPECS[name]
        run_id = _run_id(name)
        syncs = _write_run(folder, "slime", run_id, spec, steps, start_s=0.0)
        truth["run_ids"] = [run_id]
        truth.update(_lists(syncs))
        failed = [m["failed"] for m in syncs if "failed" in m]
    truth.update(
        buckets=BUCKETS,
        slow_bucket=spec.slow_bucket,
        failed=failed,
        cut_lines=0,
        growing_part=GROWING.get(name),
        schema_version=spec.schema_version,
    )
    if name == "killed_writer":
        _cut_last_line(folder / "slime-trainer-0.jsonl")
        truth["cut_lines"] = 1
        truth["sync_s"][-1] = None
        truth["cut_record"] = {
            "rank": 0,
            "operation": "weight_sync_complete",
            "weight_version": steps,
        }
    return truth


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {Path(__file__).name} CASE FOLDER  (CASE: {' '.join(CASES)})")
        return 2
    print(json.dumps(write_case(argv[0], Path(argv[1])), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
