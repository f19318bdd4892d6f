"""verl (verl-project/verl, PyPI ``verl``): FSDP/Megatron workers, vLLM/SGLang rollout.

Sources: ``verl/checkpoint_engine/*.py`` (weight sync since the checkpoint engine),
``verl/workers/{fsdp,megatron,engine}_workers.py`` (older: ``sharding_manager/*.py``),
``verl/experimental/agent_loop/agent_loop.py`` (rollout), ``verl/trainer/ppo/ray_trainer.py``
(``timing_s/*``), ``verl/utils/logger/aggregate_logger.py`` (the ``step:N - ...`` line),
``verl/trainer/ppo/metric_utils.py`` (``timing_per_token_ms/*``, the quality namespaces).
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
)

FRAMEWORK = Framework(
    name="verl",
    title="verl",
    modules=("verl",),
    distribution="verl",
    repository="verl-project/verl",
    entry_points=(
        EntryPoint(
            WEIGHT_SYNC,
            ("verl.checkpoint_engine.base:CheckpointEngineManager.update_weights",),
            "verl logs timing_s/update_weights",
        ),
        EntryPoint(
            ROLLOUT,
            ("verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",),
            "verl logs timing_s/gen",
        ),
    ),
    phase_patterns=(
        PhasePattern(
            WEIGHT_SYNC,
            r"CheckpointEngine(?:Manager|Worker)\.\w+",
            note="verl/checkpoint_engine/base.py: CheckpointEngineManager / Worker",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            ANY,
            r"\w+_checkpoint_engine\.py|checkpoint_engine/base\.py",
            "verl/checkpoint_engine/{nccl,nixl,hccl,kimi,...}_checkpoint_engine.py",
        ),
        # ActorRolloutRefWorker.rollout_mode: the hybrid engine's context switch that pushes
        # the weights; update_weights
        PhasePattern(
            WEIGHT_SYNC,
            r"rollout_mode|update_weights",
            r"(?:fsdp|megatron|engine|deepspeed)_workers\.py",
            "verl/workers/{fsdp,megatron,engine}_workers.py",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"update_weights",
            r"\w*_rollout(?:_spmd)?\.py|\w+_async_server\.py",
            "rollout adapters' update_weights (vllm_rollout_spmd.py, ...)",
        ),
        # Older verl: entering the sharding manager syncs weights into the inference engine.
        PhasePattern(
            WEIGHT_SYNC,
            r"\w*ShardingManager\.(?:__enter__|update_params|update_weights|wake_up)",
            note="verl/workers/sharding_manager/*.py",
            legacy=True,
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"__enter__|update_params|update_weights",
            r"sharding_manager/\w+\.py",
            "verl/workers/sharding_manager/*.py",
            legacy=True,
        ),
        PhasePattern(
            ROLLOUT,
            r"generate_sequences",
            note="ActorRolloutRefWorker / vLLMRollout / AgentLoopManager / "
            "AgentLoopWorker.generate_sequences",
        ),
        PhasePattern(
            ROLLOUT, r"AgentLoop\w*\.\w+", note="verl/experimental/agent_loop/agent_loop.py"
        ),
        PhasePattern(
            TRAIN,
            r"update_actor|update_critic|compute_(?:ref_)?log_prob|compute_values",
            r"\w+_workers\.py",
            "fsdp_workers.py: update_actor, update_critic, compute_log_prob, ...",
        ),
        # Older verl (gone by 0.9): the actor and critic classes.
        PhasePattern(
            TRAIN,
            r"update_policy|update_critic|compute_log_prob|compute_values",
            r"(?:dp|megatron)_(?:actor|critic)\.py",
            "verl/workers/actor/dp_actor.py: DataParallelPPOActor.update_policy",
            legacy=True,
        ),
        PhasePattern(
            TRAIN,
            r"(?:DataParallelPPO|MegatronPPO)(?:Actor|Critic)\.\w+",
            note="verl/workers/{actor,critic}/*.py",
            legacy=True,
        ),
        # verl >= 0.9: the training engines behind engine_workers.py
        PhasePattern(
            TRAIN,
            r"train_batch|train_mini_batch|forward_backward_batch",
            r"engine_workers\.py|engine/(?:\w+/transformer_impl|base)\.py",
            "verl/workers/engine_workers.py: TrainingWorker.train_batch, "
            "train_mini_batch; verl/workers/engine/*/transformer_impl.py: "
            "forward_backward_batch",
        ),
        PhasePattern(
            TRAIN,
            r"(?:FSDP|Megatron|Mindspeed|TorchTitan|Automodel|VeOmni)Engine\w*\."
            r"(?:train_batch|forward_backward_batch)",
            note="FSDPEngine / MegatronEngine / ... .forward_backward_batch",
        ),
    ),
    log_format=LogFormat(
        name="verl",
        marker="step:",
        step_line=r"(?<![\w/.-])step:{step}\s+-\s+(?P<body>.*)",
        shape=LineShape.DASH_PAIRS,
        example="step:N - timing_s/update_weights:... - ...",
        source="verl/utils/logger/aggregate_logger.py (concat_dict_to_str)",
    ),
    metric_keys=(
        MetricKey("timing_s/update_weights", WEIGHT_SYNC_S),
        MetricKey("timing_s/sync_rollout_weights", WEIGHT_SYNC_S, "one-step-off / fully async"),
        MetricKey("timing_s/reshard", WEIGHT_SYNC_S, "older versions"),
        MetricKey("timing_s/gen", ROLLOUT_S),
        MetricKey("timing_s/generate_async", ROLLOUT_S, "fully async"),
        MetricKey("timing_s/step", STEP_S),
    ),
    timer_keys=(("timing_s/", ""),),
    # compute_throughout_metrics: perf/time_per_step is timing_raw["step"]
    step_time_keys=("perf/time_per_step",),
    # compute_timing_metrics: timing_per_token_ms/<phase> = timing_s/<phase> * 1000 / tokens
    per_token_prefixes=("timing_per_token_ms/",),
    # verl/trainer/ppo/metric_utils.py compute_data_metrics, dp_actor.py, dp_critic.py
    quality_namespaces=(
        "actor/",
        "critic/",
        "val-core/",
        "val-aux/",
        "val/",
        "reward_extra_info/",
        "response_length/",
        "response_length_non_aborted/",
        "prompt_length/",
        "response/",
        "num_turns/",
        "global_seqlen/",
    ),
)
