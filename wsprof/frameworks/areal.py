"""AReaL (areal-project/AReaL, formerly inclusionAI/AReaL; PyPI ``areal``): asynchronous RL.

Sources: ``areal/engine/{fsdp,megatron}_engine.py`` (``update_weights``),
``areal/engine/{sglang,vllm}_remote.py`` (the inference side, ``rollout_batch``),
``areal/workflow/*.py`` (``arun_episode``), ``areal/utils/stats_logger.py`` (the
``Train step N/M done.`` line and its table), ``areal/utils/stats_tracker.py``
(``timeperf/*``). ``realhf`` is the package of older releases.
"""

from __future__ import annotations

from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC
from wsprof.contracts.series import ROLLOUT_S, WEIGHT_SYNC_S
from wsprof.frameworks.model import (
    ANY,
    EntryPoint,
    Framework,
    LineShape,
    LogFormat,
    MetricKey,
    PhasePattern,
)

_ENGINE_FILES = r"(?:fsdp|megatron|archon|base_hf)_engine\.py"

FRAMEWORK = Framework(
    name="areal",
    title="AReaL",
    modules=("areal", "realhf"),
    distribution="areal",
    repository="areal-project/AReaL",
    entry_points=(
        EntryPoint(
            WEIGHT_SYNC,
            ("areal.engine.fsdp_engine:FSDPEngine.update_weights",),
            "AReaL logs timeperf/update_weights",
        ),
        EntryPoint(
            ROLLOUT,
            ("areal.engine.sglang_remote:RemoteSGLangEngine.rollout_batch",),
            "AReaL logs timeperf/rollout",
        ),
    ),
    phase_patterns=(
        PhasePattern(
            WEIGHT_SYNC,
            r"_?update_weights(?:_from_\w+)?|upload_weights",
            rf"{_ENGINE_FILES}|(?:sglang|vllm)_remote\.py",
            "areal/engine/fsdp_engine.py, megatron_engine.py: update_weights, "
            "_update_weights_from_distributed (older: upload_weights); "
            "sglang_remote.py, vllm_remote.py: update_weights_from_*",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"(?:FSDPEngine|MegatronEngine|ArchonEngine|RemoteSGLangEngine|"
            r"RemotevLLMEngine)\.(?:_?update_weights\w*|upload_weights)",
            note="the engines' update_weights methods",
        ),
        PhasePattern(
            ROLLOUT,
            r"rollout_batch|prepare_batch|agenerate|arun_episode",
            note="RemoteSGLangEngine.rollout_batch, prepare_batch, agenerate; "
            "areal/workflow/*.py arun_episode",
        ),
        PhasePattern(ROLLOUT, r"WorkflowExecutor\.\w+", note="WorkflowExecutor"),
        PhasePattern(ROLLOUT, ANY, r"workflow_executor\.py", "workflow_executor.py"),
        PhasePattern(
            TRAIN,
            r"_?ppo_update|compute_logp|compute_advantages",
            r"\w*actor\.py",
            "areal/engine/ppo/actor.py: PPOActor.ppo_update, compute_logp",
        ),
        PhasePattern(TRAIN, r"\w*PPOActor\.(?:_?ppo_update|compute_logp)", note="PPOActor"),
        PhasePattern(TRAIN, r"train_batch", _ENGINE_FILES, "the engines' train_batch"),
        PhasePattern(
            TRAIN,
            r"(?:FSDPEngine|MegatronEngine|ArchonEngine)\.train_batch",
            note="the engines' train_batch",
        ),
    ),
    log_format=LogFormat(
        name="AReaL",
        marker="Train step ",
        step_line=r"\bTrain step {step}/\d{1,18} done\b",
        shape=LineShape.TABLE,
        example="Train step N/M done. + rows '| timeperf/update_weights | ... |'",
        source="areal/utils/stats_logger.py",
    ),
    metric_keys=(
        MetricKey("timeperf/update_weights", WEIGHT_SYNC_S),
        MetricKey("timeperf/rollout", ROLLOUT_S),
    ),
    timer_keys=(("timeperf/", ""),),
)
