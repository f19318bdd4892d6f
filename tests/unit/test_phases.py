"""Sampled phases, window hot frames, the common frame and early/late shift (pure analysis).

Frames are written as py-spy 0.4 writes them: ``function (file:line)``, qualified names on
Python >= 3.11, paths relative to ``site-packages`` for installed packages and bare file names
for source checkouts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from wsprof import frameworks
from wsprof.analysis.phases import (
    BUILTIN_PATTERNS,
    build_patterns,
    classify_stack,
    detect_framework,
    normalize_phase,
    patterns_for,
    phase_shares_by_window,
    window_summaries,
)
from wsprof.analysis.run import analyze_run, window_series
from wsprof.analysis.samples import common_frame, early_late_shift
from wsprof.contracts.phases import IDLE, OTHER, ROLLOUT, TRAIN, WEIGHT_SYNC
from wsprof.report.jsonout import to_dict
from wsprof.report.text import WIDTH, render_text, shorten_frame
from wsprof.trace.model import SampleWindow
from wsprof.trace.reader import read_run
from wsprof.trace.writer import TraceWriter

pytestmark = pytest.mark.pure

S = 1_000_000_000
C10D = "torch/distributed/distributed_c10d.py"


def sample(window: int, frames: Sequence[str], n: int, pid: int = 7, tid: int = 1) -> SampleWindow:
    """``n`` samples of one stack in window ``window`` (1 s windows)."""
    return SampleWindow(window * S, (window + 1) * S, pid, tid, tuple(frames), n)


def one(frames: Sequence[str], n: int = 1) -> list[SampleWindow]:
    return [sample(0, frames, n)]


GENERIC = build_patterns()

# --- classification precedence ------------------------------------------------------------


def test_innermost_frame_decides() -> None:
    trl = build_patterns("trl")
    # TRL syncs weights from inside its rollout function.
    stack = [
        "<module> (train_grpo.py:40)",
        "Trainer.training_step (transformers/trainer.py:3700)",
        "GRPOTrainer._generate_single_turn (trl/trainer/grpo_trainer.py:1210)",
        "VLLMGeneration.sync_weights (trl/generation/vllm_generation.py:470)",
        "Qwen2ForCausalLM.load_weights (vllm/model_executor/models/qwen2.py:480)",
    ]
    assert classify_stack(stack, trl) == WEIGHT_SYNC
    generate = "LLM.generate (vllm/entrypoints/llm.py:380)"
    assert classify_stack([*stack[:3], generate], trl) == ROLLOUT
    # A backward under the HF training step is train, even though training_step is an ancestor
    # of the rollout functions too.
    assert classify_stack(stack[:2] + ["backward (torch/_tensor.py:620)"], trl) == TRAIN


def test_collectives_are_weight_sync_only_under_no_other_phase() -> None:
    bcast = f"broadcast ({C10D}:2720)"
    assert classify_stack(["main (job.py:9)", "push (job.py:30)", bcast], GENERIC) == WEIGHT_SYNC
    gather = f"all_gather_into_tensor ({C10D}:3800)"
    assert classify_stack(["main (job.py:9)", gather], GENERIC) == WEIGHT_SYNC
    under_backward = ["main (job.py:9)", "backward (torch/_tensor.py:620)", gather]
    assert classify_stack(under_backward, GENERIC) == TRAIN
    under_generate = ["main (job.py:9)", "LLM.generate (vllm/entrypoints/llm.py:380)", bcast]
    assert classify_stack(under_generate, GENERIC) == ROLLOUT
    # all_reduce outside backward reduces metrics: not weight sync.
    assert classify_stack(["main (job.py:9)", f"all_reduce ({C10D}:2900)"], GENERIC) == OTHER
    assert classify_stack(["main (job.py:9)", "work (job.py:12)"], GENERIC) == OTHER


# The leaking rank of issue 15: rank 0 pushes 16 parameters through the user's wrapper, whose
# registry scan (its own Python time) grows every step; most samples are in the wrapper, only
# some inside the broadcast.
LOGGER = "_exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)"
WRAPPER = [
    "<module> (job.py:118)",
    "main (job.py:108)",
    "push_weights (job.py:62)",
    "sync_param (job.py:54)",
]
IN_BROADCAST = [*WRAPPER[:3], "sync_param (job.py:56)", LOGGER, f"broadcast ({C10D}:3145)"]
COMPUTE = ["<module> (job.py:118)", "main (job.py:107)", "compute (job.py:47)"]


def test_wrapper_of_a_collective_is_a_sync_entry_point() -> None:
    windows = [sample(0, WRAPPER, 70), sample(0, IN_BROADCAST, 5), sample(0, COMPUTE, 25)]
    # Before: only the samples inside the broadcast were weight sync (5%, not 75%).
    [before] = phase_shares_by_window(windows, GENERIC)
    assert before.weight_sync_share == pytest.approx(0.05)
    patterns = patterns_for(None, None, windows)
    assert patterns.entry_points == ("sync_param (job.py)",)
    [row] = phase_shares_by_window(windows, patterns)
    assert row.weight_sync_share == pytest.approx(0.75)
    assert classify_stack(COMPUTE, patterns) == OTHER
    # The wrapper's callees count too (its scan in a helper), its callers do not.
    assert classify_stack([*WRAPPER, "_lookup (job.py:20)"], patterns) == WEIGHT_SYNC
    assert classify_stack(WRAPPER[:3], patterns) == OTHER
    # Through analysis: the window summaries of a process use the inferred entry points.
    [summary] = window_summaries(windows, patterns)
    assert summary.weight_sync_share == pytest.approx(0.75)


def test_collective_names_come_from_the_alias_table() -> None:
    from wsprof.analysis.phases import C10D_SYNC_FUNCTIONS, is_collective_frame
    from wsprof.contracts.ops import API_OPS

    for name in (
        "broadcast",
        "all_gather_into_tensor",
        "_all_gather_base",
        "send_object_list",
        "batch_isend_irecv",
        "isend",
        "irecv",
        "_coalescing_manager",
    ):
        assert name in C10D_SYNC_FUNCTIONS
        assert is_collective_frame(f"{name} ({C10D}:100)")
    assert {n for n, op in API_OPS.items() if op == "broadcast"} <= set(C10D_SYNC_FUNCTIONS)
    for name in (
        "all_reduce",
        "reduce_scatter_tensor",
        "barrier",
        "monitored_barrier",
        "gather",
        "all_to_all_single",
    ):
        assert not is_collective_frame(f"{name} ({C10D}:100)")
    assert is_collective_frame("ProcessGroupNCCL.allgather (pg.py:3)")
    assert is_collective_frame("broadcast (torch/distributed/_functional_collectives.py:9)")
    assert not is_collective_frame("broadcast (job.py:9)")  # the user's own function
    # Barriers are waiting, not weight sync: a function calling one is no entry point.
    barrier = ["<module> (j.py:1)", "main (j.py:2)", "wait_all (j.py:3)", f"barrier ({C10D}:4000)"]
    assert patterns_for(None, None, one(barrier)).entry_points == ()


def test_loops_and_rollout_callers_are_not_entry_points() -> None:
    bcast = f"broadcast ({C10D}:3145)"
    # A loop that calls the collective itself and a sync function: the sync function only.
    windows = [
        sample(0, ["<module> (j.py:1)", "main (j.py:5)", bcast], 10),
        sample(0, ["<module> (j.py:1)", "main (j.py:6)", "push (j.py:9)", bcast], 10),
        sample(0, ["<module> (j.py:1)", "main (j.py:7)"], 80),
    ]
    patterns = patterns_for(None, None, windows)
    assert patterns.entry_points == ("push (j.py)",)
    assert classify_stack(["<module> (j.py:1)", "main (j.py:7)"], patterns) == OTHER
    # A script calling the collective at top level: no entry point at all.
    assert patterns_for(None, None, one(["<module> (j.py:1)", bcast])).entry_points == ()
    # A function that also drives training (backward under it) is not a sync entry point.
    step = ["<module> (j.py:1)", "main (j.py:2)", "train_step (j.py:30)"]
    windows = [
        sample(0, [*step, bcast], 5),
        sample(0, [*step, "backward (torch/_tensor.py:620)"], 50),
        sample(0, step, 45),
    ]
    patterns = patterns_for(None, None, windows)
    assert patterns.entry_points == ()
    assert classify_stack(step, patterns) == OTHER
    # Collectives under a rollout frame are the engine's tensor parallelism: rollout, and
    # their caller inside the engine is no entry point.
    gen = [
        "<module> (j.py:1)",
        "LLM.generate (vllm/entrypoints/llm.py:380)",
        "GroupCoordinator.all_gather (vllm/distributed/parallel_state.py:400)",
    ]
    windows = [sample(0, [*gen, f"all_gather_into_tensor ({C10D}:3800)"], 10), sample(0, gen, 90)]
    patterns = patterns_for(None, None, windows)
    assert patterns.entry_points == ()
    [row] = phase_shares_by_window(windows, patterns)
    assert row.rollout_share == 1.0
    # A framework's sync entry point inside its rollout function stays weight sync (the
    # innermost frame decides); a user pattern beats the inferred entry points.
    user = patterns_for(None, {"refresh": r"push"}, [sample(0, IN_BROADCAST, 1)])
    assert classify_stack(["<module> (j.py:1)", "main (j.py:6)", "push (j.py:9)"], user) == (
        "refresh"
    )


def test_idle_leaf_is_idle_whatever_the_stack() -> None:
    slime = build_patterns("slime")
    sync = "UpdateWeightFromDistributed.update_weights (update_weight_from_distributed.py:140)"
    assert classify_stack(["<module> (train.py:3)", sync, "wait (threading.py:327)"], slime) == IDLE
    assert classify_stack(["<module> (train.py:3)", sync, "epoll_wait (libc.so.6)"], slime) == IDLE
    assert classify_stack(["<module> (train.py:3)", sync], slime) == WEIGHT_SYNC
    # Pseudo-frames (py-spy --threads / --subprocesses) are not code.
    assert classify_stack(["thread (0x1): MainThread", "wait (threading.py:327)"], slime) == IDLE
    assert classify_stack(["thread (0x1): MainThread"], slime) == OTHER


# One realistic stack per framework and phase, as py-spy shows it; the source each entry point
# was checked against is named in wsprof/analysis/phases.py.
FRAMEWORK_STACKS = [
    (
        "slime",
        WEIGHT_SYNC,
        [
            "MegatronTrainRayActor.update_weights (slime/backends/megatron_utils/actor.py:560)",
            "timer.<locals>.wrapper (slime/utils/timer.py:60)",
            "UpdateWeightFromDistributed.update_weights "
            "(slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py:120)",
            "UpdateWeightFromDistributed._update_bucket_weights_from_distributed "
            "(slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py:390)",
            f"broadcast ({C10D}:2720)",
        ],
    ),
    (
        "slime",
        WEIGHT_SYNC,
        [  # Python 3.10, source checkout: bare names and file names
            "update_weights (actor.py:560)",
            "update_weights (update_weight_from_distributed.py:120)",
        ],
    ),
    (
        "slime",
        ROLLOUT,
        [
            "RolloutManager.generate (slime/ray/rollout.py:250)",
            "generate_rollout (slime/rollout/sglang_rollout.py:520)",
            "generate_and_rm (slime/rollout/sglang_rollout.py:230)",
        ],
    ),
    (
        "slime",
        TRAIN,
        [
            "MegatronTrainRayActor.train_actor (slime/backends/megatron_utils/actor.py:420)",
            "train (slime/backends/megatron_utils/model.py:380)",
            "train_one_step (slime/backends/megatron_utils/model.py:300)",
        ],
    ),
    (
        "verl",
        WEIGHT_SYNC,
        [
            "RayPPOTrainer.fit (verl/trainer/ppo/ray_trainer.py:1100)",
            "CheckpointEngineManager.update_weights (verl/checkpoint_engine/base.py:380)",
        ],
    ),
    (
        "verl",
        WEIGHT_SYNC,
        [  # older verl: the sharding manager syncs inside generate_sequences
            "ActorRolloutRefWorker.generate_sequences (verl/workers/fsdp_workers.py:820)",
            "FSDPVLLMShardingManager.__enter__ (verl/workers/sharding_manager/fsdp_vllm.py:160)",
        ],
    ),
    (
        "verl",
        WEIGHT_SYNC,
        [
            "ActorRolloutRefWorker.rollout_mode (verl/workers/fsdp_workers.py:650)",
        ],
    ),
    (
        "verl",
        ROLLOUT,
        [
            "ActorRolloutRefWorker.generate_sequences (verl/workers/fsdp_workers.py:820)",
            "vLLMRollout.generate_sequences "
            "(verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py:300)",
        ],
    ),
    (
        "verl",
        TRAIN,
        [
            "ActorRolloutRefWorker.update_actor (verl/workers/fsdp_workers.py:760)",
            "DataParallelPPOActor.update_policy (verl/workers/actor/dp_actor.py:420)",
        ],
    ),
    (
        "verl",
        TRAIN,
        [  # verl >= 0.9: the training engines (dp_actor.py is gone)
            "TrainingWorker.train_batch (verl/workers/engine_workers.py:343)",
            "FSDPEngine.forward_backward_batch (verl/workers/engine/fsdp/transformer_impl.py:724)",
        ],
    ),
    (
        "verl",
        TRAIN,
        [  # an editable checkout: bare file names, qualified names
            "TrainingWorker.train_batch (engine_workers.py:343)",
            "MegatronEngine.forward_backward_batch (transformer_impl.py:834)",
        ],
    ),
    (
        "openrlhf",
        WEIGHT_SYNC,
        [
            "PolicyModelActor.broadcast_to_vllm (openrlhf/trainer/ray/ppo_actor.py:520)",
            "ActorPPOTrainer._broadcast_to_vllm (openrlhf/trainer/ray/ppo_actor.py:330)",
            "ActorPPOTrainer._broadcast_to_vllm.<locals>._broadcast_param "
            "(openrlhf/trainer/ray/ppo_actor.py:350)",
        ],
    ),
    (
        "openrlhf",
        ROLLOUT,
        [
            "SamplesGenerator.generate_samples"
            " (openrlhf/trainer/ppo_utils/experience_maker.py:110)",
            "SamplesGenerator._generate_vllm (openrlhf/trainer/ppo_utils/experience_maker.py:160)",
        ],
    ),
    (
        "openrlhf",
        TRAIN,
        [
            "ActorPPOTrainer.ppo_train (openrlhf/trainer/ray/ppo_actor.py:150)",
            "ActorPPOTrainer.training_step (openrlhf/trainer/ray/ppo_actor.py:210)",
        ],
    ),
    (
        "areal",
        WEIGHT_SYNC,
        [
            "FSDPEngine.update_weights (areal/engine/fsdp_engine.py:480)",
            "FSDPEngine._update_weights_from_distributed (areal/engine/fsdp_engine.py:500)",
        ],
    ),
    (
        "areal",
        ROLLOUT,
        [
            "RemoteSGLangEngine.rollout_batch (areal/engine/sglang_remote.py:420)",
        ],
    ),
    (
        "areal",
        TRAIN,
        [
            "FSDPPPOActor.ppo_update (areal/engine/ppo/actor.py:300)",
        ],
    ),
    (
        "trl",
        WEIGHT_SYNC,
        [
            "GRPOTrainer._move_model_to_vllm (trl/trainer/grpo_trainer.py:1000)",
        ],
    ),
    (
        "trl",
        ROLLOUT,
        [
            "GRPOTrainer._generate_and_score_completions (trl/trainer/grpo_trainer.py:1300)",
            "VLLMGeneration.generate (trl/generation/vllm_generation.py:540)",
        ],
    ),
    (
        "trl",
        TRAIN,
        [
            "GRPOTrainer.compute_loss (trl/trainer/grpo_trainer.py:1700)",
        ],
    ),
]


@pytest.mark.parametrize(
    ("framework", "phase", "stack"),
    FRAMEWORK_STACKS,
    ids=[f"{f}-{p}-{i}" for i, (f, p, _) in enumerate(FRAMEWORK_STACKS)],
)
def test_framework_entry_points(framework: str, phase: str, stack: list[str]) -> None:
    frames = ["<module> (main.py:1)", *stack, "_spin (kernels.py:3)"]
    assert classify_stack(frames, build_patterns(framework)) == phase
    assert detect_framework(one(frames)) == framework


def test_every_framework_has_every_phase() -> None:
    assert set(BUILTIN_PATTERNS) == set(frameworks.NAMES)
    for phases in BUILTIN_PATTERNS.values():
        assert {WEIGHT_SYNC, ROLLOUT, TRAIN} <= set(phases)


def test_generic_patterns_engines_and_autograd() -> None:
    sched = "sglang/srt/managers/scheduler.py"
    sglang = [f"Scheduler.event_loop_normal ({sched}:900)"]
    assert classify_stack([*sglang, f"Scheduler.run_batch ({sched}:1700)"], GENERIC) == ROLLOUT
    upd = (
        "ModelRunner.update_weights_from_distributed "
        "(sglang/srt/model_executor/model_runner.py:800)"
    )
    assert classify_stack([*sglang, upd], GENERIC) == WEIGHT_SYNC
    adam = ["main (t.py:1)", "Adam.step (torch/optim/adam.py:210)"]
    assert classify_stack(adam, GENERIC) == TRAIN


def test_user_patterns_win_anywhere_in_the_stack() -> None:
    stack = [
        "main (job.py:1)",
        "my_refresh (job.py:40)",
        "LLM.generate (vllm/entrypoints/llm.py:380)",
    ]
    assert classify_stack(stack, GENERIC) == ROLLOUT
    user = build_patterns(None, {"weight-sync": r"my_refresh"})
    assert classify_stack(stack, user) == WEIGHT_SYNC
    assert user.source == "user" and user.user == ((WEIGHT_SYNC, "my_refresh"),)
    # Built-ins still apply to what the user patterns do not match.
    assert classify_stack(["main (job.py:1)", "backward (torch/_tensor.py:620)"], user) == TRAIN
    # A phase of the user's own, and the order given among user phases.
    both = build_patterns("slime", {"reward": r"score", "rollout": r"score_and_generate"})
    assert both.source == "user+slime"
    assert classify_stack(["main (j.py:1)", "score_and_generate (j.py:2)"], both) == "reward"


def test_user_pattern_errors() -> None:
    assert normalize_phase("Weight Sync") == WEIGHT_SYNC
    assert normalize_phase("generation") == ROLLOUT
    with pytest.raises(ValueError, match="reserved"):
        build_patterns(None, {"idle": "x"})
    with pytest.raises(ValueError, match="bad regular expression"):
        build_patterns(None, {"rollout": "gen("})
    with pytest.raises(ValueError, match="unknown framework"):
        build_patterns("megatron")


# --- framework detection ------------------------------------------------------------------


def test_detect_framework_by_patterns_and_module_path() -> None:
    assert detect_framework(one(["main (m.py:1)", "f (verl/utils/functional.py:9)"])) == "verl"
    assert detect_framework(one(["main (m.py:1)", "f (openrlhf/models/actor.py:9)"])) == "openrlhf"
    assert detect_framework(one(["main (m.py:1)", "f (realhf/base/x.py:9)"])) == "areal"
    assert detect_framework(one(["main (m.py:1)", "f (ctrl/trl_like.py:9)"])) is None
    assert detect_framework([]) is None
    mixed = [
        sample(0, ["a (m.py:1)", "generate_sequences (fsdp_workers.py:820)"], 5),
        sample(0, ["a (m.py:1)", "VLLMGeneration.sync_weights (vllm_generation.py:470)"], 9),
    ]
    assert detect_framework(mixed) == "trl"
    patterns = patterns_for(None, None, mixed)
    assert patterns.framework == "trl" and patterns.source == "trl"
    assert patterns_for("verl", None, mixed).framework == "verl"


# --- windows: phase shares, top frame, common frame ---------------------------------------

STEP = "train_step (job.py:20)"
GEN = "generate (job.py:40)"
SYNC = "update_weights (job.py:60)"
SPIN = "_spin (job.py:80)"
USER = build_patterns(None, {"weight_sync": r"update_weights", "rollout": r"(?:^|\.)generate \("})


def growing_sync(n_windows: int = 8) -> list[SampleWindow]:
    """A job whose weight sync grows every window while generation stays constant, plus an
    idle helper thread."""
    out: list[SampleWindow] = []
    for i in range(n_windows):
        out.append(sample(i, ["<module> (job.py:1)", STEP, GEN, SPIN], 60))
        out.append(sample(i, ["<module> (job.py:1)", STEP, SYNC, SPIN], 10 + 15 * i))
        out.append(
            sample(
                i, ["thread (7): helper", "run (job.py:90)", "wait (threading.py:327)"], 20, tid=2
            )
        )
    return out


def test_phase_shares_by_window_counts_idle_apart() -> None:
    rows = phase_shares_by_window(growing_sync(3), USER)
    assert [r.t_start_ns for r in rows] == [0, S, 2 * S]
    first = rows[0]
    assert first.n_samples == 90 and first.n_active == 70
    assert first.samples == {ROLLOUT: 60, WEIGHT_SYNC: 10, IDLE: 20}
    assert first.shares[IDLE] == pytest.approx(20 / 90)
    assert first.rollout_share == pytest.approx(60 / 70)
    assert first.weight_sync_share == pytest.approx(10 / 70)
    assert rows[2].weight_sync_share == pytest.approx(40 / 100)
    only_idle = phase_shares_by_window(one(["m (a.py:1)", "wait (threading.py:327)"]), USER)
    assert only_idle[0].n_active == 0 and only_idle[0].rollout_share is None


def test_window_summaries_top_and_common_frame() -> None:
    ws = window_summaries(growing_sync(8), USER)
    assert len(ws) == 8
    last = ws[-1]
    assert last.top_frame is not None and last.top_frame.frame == SPIN
    assert last.top_frame.total == last.n_active == 60 + 10 + 15 * 7
    # _spin is in every active sample: deeper than train_step, which is in every one too.
    assert last.common_frame == "_spin (job.py)"
    assert last.weight_sync_share == pytest.approx(115 / 175)
    assert sum(last.phase_samples.values()) == last.n_samples


def test_common_frame_is_deepest_frame_in_half_the_samples() -> None:
    root = "<module> (job.py:1)"
    # update_weights in 60% of the samples, generate in 40%: update_weights is common.
    samples = [
        sample(0, [root, STEP, SYNC, "a (job.py:1)"], 30),
        sample(0, [root, STEP, SYNC, "b (job.py:2)"], 30),
        sample(0, [root, STEP, GEN, "c (job.py:3)"], 40),
    ]
    assert common_frame(samples) == "update_weights (job.py)"
    # Three unrelated threads of a third each: no frame in half of the samples.
    threads = [sample(0, [f"t{i} (job.py:{i})"], 10, tid=i) for i in range(3)]
    assert common_frame(threads) is None
    assert common_frame([]) is None
    # Line numbers do not split a function.
    lines = [sample(0, [root, f"loop (job.py:{line})"], 10) for line in (5, 6, 7)]
    assert common_frame(lines) == "loop (job.py)"


# --- early against late -------------------------------------------------------------------


def test_early_late_shift_names_the_gaining_frame() -> None:
    shift = early_late_shift(growing_sync(9))
    assert shift is not None
    assert shift.k == 3 and shift.n_windows == 9
    top = shift.gained[0]
    # _spin is in every sample (no change); update_weights gains.
    assert top.frame == "update_weights (job.py)"
    assert top.early_share == pytest.approx((10 + 25 + 40) / (60 * 3 + 75))
    assert top.late_share > 0.5 > top.early_share
    assert shift.lost[0].frame == "generate (job.py)"
    assert all(g.change > 0 for g in shift.gained) and all(g.change < 0 for g in shift.lost)
    assert "_spin (job.py)" not in {g.frame for g in shift.gained + shift.lost}


def test_early_late_shift_window_counts() -> None:
    assert early_late_shift(growing_sync(1)) is None
    two = early_late_shift(growing_sync(2))
    assert two is not None and two.k == 1
    assert early_late_shift(growing_sync(6), k=10) is not None
    clamped = early_late_shift(growing_sync(6), k=10)
    assert clamped is not None and clamped.k == 3


def test_callers_tie_goes_to_the_deeper_frame() -> None:
    root = "<module> (job.py:1)"
    outer = "push_all (job.py:10)"
    samples = [
        sample(0, [root, GEN], 90),
        sample(0, [root, outer, SYNC], 10),
        sample(1, [root, GEN], 10),
        sample(1, [root, outer, SYNC], 90),
    ]
    shift = early_late_shift(samples)
    assert shift is not None
    assert [g.frame for g in shift.gained[:2]] == ["update_weights (job.py)", "push_all (job.py)"]


# --- through analyze_run on real trace files ----------------------------------------------


def write_attach_run(
    folder: Path, samples: Sequence[SampleWindow], meta: dict[str, object], target: int = 4242
) -> None:
    """An attach run as written on disk: the target's process trace (meta only) and the
    sampler's trace holding the interned stacks and the samples."""
    proc = TraceWriter(str(folder / f"host-{target}.wsprof"))
    proc.set_meta({"pid": target, "source": "attach", **meta})
    proc.close()
    sampler = TraceWriter(str(folder / "host-99-pyspy.wsprof"))
    sampler.set_meta({"pid": 99, "source": "attach", "targets": [target]})
    stacks: dict[tuple[str, ...], int] = {}
    rows = []
    for w in samples:
        sid = stacks.setdefault(w.frames, len(stacks))
        rows.append((w.t_start_ns, w.t_end_ns, target, w.tid, sid, w.count))
    sampler.write(
        {"stacks": [(i, json.dumps(list(f))) for f, i in stacks.items()], "samples": rows}
    )
    sampler.close()


def test_attach_run_series_findings_text_and_json(tmp_path: Path) -> None:
    write_attach_run(
        tmp_path,
        growing_sync(9),
        {
            "phase_patterns": {"weight_sync": r"update_weights", "rollout": r"(?:^|\.)generate \("},
            "framework": None,
        },
    )
    analysis = analyze_run(read_run(str(tmp_path)), str(tmp_path))
    pa = analysis.primary
    assert pa is not None and pa.pid == 4242 and not pa.steps
    assert len(pa.windows) == 9 and pa.phase_source == "user"
    assert pa.windows[0].weight_sync_share == pytest.approx(10 / 70)

    series = {r.series.name: r for r in analysis.series}
    sync = series["window_weight_sync_share"]
    assert sync.series.unit_label == "ratio" and sync.series.steps == tuple(range(9))
    assert sync.verdict.accumulating
    assert series["window_rollout_share"].verdict.slope_per_step < 0

    found = {f.kind: f for f in analysis.findings}
    shift = found["frame_shift"]
    assert shift.severity == "warning" and shift.where == "update_weights (job.py)"
    assert "in the first 3 windows ->" in shift.title and "in the last 3" in shift.title
    phases = found["sampled_phase_share"]
    assert phases.severity == "warning" and "rises per window" in phases.title
    assert "in the first 3 windows" in phases.title
    assert "per step" not in phases.title and "user patterns" in phases.title
    hot = found["hot_frame"]
    assert "common frame _spin (job.py) in 9 of 9 windows" in hot.title
    assert hot.evidence.as_dict()["windows"] == 9

    text = render_text(analysis)
    assert "windows of pid 4242" in text
    assert all(len(line) <= WIDTH for line in text.splitlines() if not line.startswith("wsprof:"))
    doc = to_dict(analysis)
    assert len(doc["windows"]) == 9 and doc["phase_source"] == "user"
    assert doc["windows"][0]["top_frame"]["frame"] == SPIN
    assert doc["frame_shift"]["gained"][0]["frame"] == "update_weights (job.py)"
    json.dumps(doc)


def test_saturating_weight_sync_share_still_warns(tmp_path: Path) -> None:
    """A share cannot pass 1: sync taking over the process saturates, and still warns."""
    write_attach_run(tmp_path, growing_sync(25), {"phase_patterns": {"weight_sync": "update_w"}})
    analysis = analyze_run(read_run(str(tmp_path)), str(tmp_path))
    found = {f.kind: f for f in analysis.findings}
    phases = found["sampled_phase_share"]
    assert phases.severity == "warning" and phases.evidence.as_dict()["grows"]
    assert (
        phases.evidence.as_dict()["late_weight_sync_share"]
        > phases.evidence.as_dict()["early_weight_sync_share"]
    )
    assert any("sampling windows stand in for steps" in n for n in analysis.notes)
    assert not any(n.startswith("nothing recorded") for n in analysis.notes)


def test_framework_meta_and_detection_through_analyze_run(tmp_path: Path) -> None:
    gen = "ActorRolloutRefWorker.generate_sequences (verl/workers/fsdp_workers.py:820)"
    verl = [sample(i, ["<module> (main_ppo.py:1)", gen, SPIN], 50) for i in range(3)]
    write_attach_run(tmp_path, verl, {})
    pa = analyze_run(read_run(str(tmp_path)), str(tmp_path)).primary
    assert pa is not None and pa.phase_source == "verl"
    assert [w.rollout_share for w in pa.windows] == [1.0, 1.0, 1.0]


def test_bad_user_pattern_is_a_note_not_an_error(tmp_path: Path) -> None:
    write_attach_run(
        tmp_path, growing_sync(3), {"phase_patterns": {"rollout": "gen(", "weight_sync": "update"}}
    )
    analysis = analyze_run(read_run(str(tmp_path)), str(tmp_path))
    assert any("bad regular expression" in n for n in analysis.notes)
    note = next(n for n in analysis.notes if "bad regular expression" in n)
    assert "phase pattern rollout:" in note and "--phase" not in note  # analysis names no flag
    pa = analysis.primary
    assert pa is not None and pa.phase_source == "user"
    assert pa.windows[0].weight_sync_share == pytest.approx(10 / 70)


def test_no_window_series_with_few_windows(tmp_path: Path) -> None:
    write_attach_run(tmp_path, growing_sync(2), {})
    analysis = analyze_run(read_run(str(tmp_path)), str(tmp_path))
    assert analysis.primary is not None and len(analysis.primary.windows) == 2
    assert window_series(analysis.primary) == []
    assert not any(r.series.name.startswith("window_") for r in analysis.series)
    # Generic patterns match nothing here: the finding says how to name the entry points.
    found = {f.kind: f for f in analysis.findings}
    assert "--phase" in found["sampled_phase_share"].next_step


def test_shorten_frame_keeps_the_function() -> None:
    frame = "UpdateWeightFromDistributed.update_weights (" + "a/" * 40 + "update.py:12)"
    short = shorten_frame(frame, 60)
    assert len(short) == 60 and short.startswith("UpdateWeightFromDistributed.update_weights (…")
    assert short.endswith("update.py:12)")
    assert shorten_frame("f (a.py:1)", 60) == "f (a.py:1)"
