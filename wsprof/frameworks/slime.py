"""slime (THUDM/slime): Megatron training, SGLang rollout, Ray actors. Not on PyPI.

Sources: ``slime/backends/megatron_utils/update_weight/update_weight_from_*.py`` (weight
sync), ``slime/ray/rollout.py`` (``RolloutManager``, a Ray actor), ``slime/rollout/*.py``
(rollout functions), ``slime/backends/megatron_utils/{actor,model}.py`` (training),
``slime/observability/{train_metric_utils,rollout_metrics}.py`` (the ``perf N: {...}`` lines).
"""

from __future__ import annotations

from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC
from wsprof.contracts.series import ROLLOUT_S, STEP_S, WEIGHT_SYNC_S
from wsprof.frameworks.model import (
    ANY,
    EntryPoint,
    Framework,
    LineShape,
    LogFormat,
    MetricKey,
    PhasePattern,
    TensorBoardLayout,
)

FRAMEWORK = Framework(
    name="slime",
    title="slime",
    modules=("slime",),
    distribution=None,
    repository="THUDM/slime",
    entry_points=(
        EntryPoint(
            WEIGHT_SYNC,
            (
                "slime.backends.megatron_utils.update_weight.update_weight_from_distributed:"
                "UpdateWeightFromDistributed.update_weights",
            ),
            "slime logs perf/update_weights_time",
        ),
        # --colocate: the buckets go to the engine by handle (CUDA IPC), not by broadcast
        EntryPoint(
            WEIGHT_SYNC,
            (
                "slime.backends.megatron_utils.update_weight.update_weight_from_tensor:"
                "UpdateWeightFromTensor.update_weights",
            ),
            "slime logs perf/update_weights_time (colocated)",
        ),
        # RolloutManager is a Ray actor class: presets wrap the class under ray.remote.
        EntryPoint(
            ROLLOUT, ("slime.ray.rollout:RolloutManager.generate",), "slime logs perf/rollout_time"
        ),
    ),
    phase_patterns=(
        # update_weight_from_{distributed,tensor,disk,...}.py: UpdateWeightFromDistributed
        # .update_weights and helpers
        PhasePattern(
            WEIGHT_SYNC,
            ANY,
            r"update_weight_from_\w+\.py",
            "slime/backends/megatron_utils/update_weight/update_weight_from_*.py",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"UpdateWeightFrom\w+\.\w+",
            note="UpdateWeightFromDistributed / FromTensor / FromDisk methods",
        ),
        # megatron_utils/actor.py: MegatronTrainRayActor.update_weights (fsdp_utils: older)
        PhasePattern(
            WEIGHT_SYNC,
            r"(?:MegatronTrainRayActor|FSDPTrainRayActor)\.update_weights",
            note="slime/backends/megatron_utils/actor.py",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"update_weights",
            r"megatron_utils/actor\.py|fsdp_utils/actor\.py",
            "slime/backends/megatron_utils/actor.py: update_weights",
        ),
        PhasePattern(
            ROLLOUT,
            r"generate_rollout(?:_async)?|generate_and_rm(?:_group)?|generate",
            r"sglang_rollout\.py",
            "slime/rollout/sglang_rollout.py: generate_rollout(_async), "
            "generate_and_rm(_group), generate",
        ),
        PhasePattern(
            ROLLOUT,
            ANY,
            r"(?:fully_async|sglang_streaming)_rollout\.py",
            "slime/rollout/fully_async_rollout.py, sglang_streaming_rollout.py",
        ),
        PhasePattern(
            ROLLOUT,
            r"RolloutManager\.(?:generate|eval|_get_rollout_data)",
            note="slime/ray/rollout.py: RolloutManager.generate / eval",
        ),
        PhasePattern(
            ROLLOUT, r"generate|_get_rollout_data", r"slime/ray/rollout\.py", "slime/ray/rollout.py"
        ),
        PhasePattern(
            TRAIN,
            r"(?:MegatronTrainRayActor|FSDPTrainRayActor)\.train(?:_actor|_critic)?",
            note="slime/backends/megatron_utils/actor.py: train, train_actor, train_critic",
        ),
        PhasePattern(
            TRAIN,
            r"train_actor|train_critic",
            r"actor\.py",
            "slime/backends/megatron_utils/actor.py",
        ),
        PhasePattern(
            TRAIN,
            r"train_one_step",
            r"model\.py",
            "slime/backends/megatron_utils/model.py: train_one_step",
        ),
    ),
    log_format=LogFormat(
        name="slime",
        marker="perf ",
        step_line=r"\bperf {step}:\s*(?P<body>\{.*)",
        shape=LineShape.DICT,
        example="perf N: {'perf/update_weights_time': ..., ...}",
        source="slime/observability/train_metric_utils.py, rollout_metrics.py",
    ),
    metric_keys=(
        # The actor logs line N at the end of training step N with every timer since the
        # previous line: its update_weights_time is the sync after training step N-1.
        MetricKey(
            "perf/update_weights_time",
            WEIGHT_SYNC_S,
            "slime logs the sync that ran before rollout N on line N",
            shift_steps=1,
        ),
        MetricKey("perf/rollout_time", ROLLOUT_S),
        MetricKey("perf/step_time", STEP_S),
    ),
    timer_keys=(("perf/", "_time"),),
    # slime/observability/logging_utils.py ``log(args, metrics, step_key)``: every scalar but
    # the step key goes to ``_TensorboardAdapter.log`` (tensorboard_utils.py, one
    # SummaryWriter per process) at ``step=metrics[step_key]``. perf/* (train_metric_utils.py
    # ``log_perf_data``), rollout/* and perf/rollout_time (rollout_metrics.py
    # ``log_rollout_data``) use ``rollout/step`` (``compute_rollout_step``: the rollout id);
    # eval/* ``eval/step`` (the same rollout id); train/* (megatron_utils/model.py, per
    # optimizer step) ``train/step = rollout_id * num_steps_per_rollout + step_id``.
    tensorboard=TensorBoardLayout(
        step_axis="rollout/step",
        axis_tags=("rollout/step", "eval/step", "train/step"),
        apart=(("train/", "train/step"),),
        source="slime/observability/logging_utils.py, tensorboard_utils.py",
    ),
    # slime/observability/communication_timeline.py: one JSONL file per process, its path a
    # template of {rank}, {trainer_rank}, {local_rank}, {pid}, {hostname}, {role},
    # {world_size} (read by wsprof.importers.slime_timeline).
    timeline_env="SLIME_COMMUNICATION_TIMELINE",
    timeline_template="slime-{role}-{rank}.jsonl",
)
