"""OpenRLHF (OpenRLHF/OpenRLHF, PyPI ``openrlhf``): DeepSpeed training, vLLM rollout, Ray.

Sources: ``openrlhf/trainer/ray/ppo_actor.py`` (``broadcast_to_vllm``; ``PolicyModelActor``
is a Ray actor class), ``openrlhf/trainer/ppo_utils/samples_generator.py`` (rollout, since 0.9.9; in
``experience_maker.py`` up to 0.9.8), ``openrlhf/trainer/ray/vllm_worker_wrap.py`` (the engine
side), ``openrlhf/trainer/ppo_trainer.py`` (the ``Global step N: {...}`` line, ``timing/*``).
"""

from __future__ import annotations

from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC
from wsprof.contracts.series import ROLLOUT_S, STEP_S, WEIGHT_SYNC_S
from wsprof.frameworks.model import (
    EntryPoint,
    Framework,
    LineShape,
    LogFormat,
    MetricKey,
    PhasePattern,
)

FRAMEWORK = Framework(
    name="openrlhf",
    title="OpenRLHF",
    modules=("openrlhf",),
    distribution="openrlhf",
    repository="OpenRLHF/OpenRLHF",
    entry_points=(
        EntryPoint(
            WEIGHT_SYNC,
            ("openrlhf.trainer.ray.ppo_actor:PolicyModelActor.broadcast_to_vllm",),
            "OpenRLHF logs timing/broadcast",
        ),
        EntryPoint(
            ROLLOUT,
            (
                "openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator.generate_samples",
                "openrlhf.trainer.ppo_utils.experience_maker:SamplesGenerator.generate_samples",
            ),
            "OpenRLHF logs timing/generation; samples_generator.py since 0.9.9, "
            "experience_maker.py up to 0.9.8",
        ),
    ),
    phase_patterns=(
        PhasePattern(
            WEIGHT_SYNC,
            r"_?broadcast_to_vllm",
            note="ppo_actor.py: ActorPPOTrainer.broadcast_to_vllm (nested "
            "_broadcast_param, _handle_cuda_ipc), PolicyModelActor"
            ".broadcast_to_vllm; older: _broadcast_to_vllm",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"update_weight\w*",
            r"vllm_worker_wrap\.py",
            "openrlhf/trainer/ray/vllm_worker_wrap.py: WorkerWrap.update_weight(_cuda_ipc)",
        ),
        PhasePattern(
            ROLLOUT,
            r"generate_samples|_generate_vllm|_generate_with_hf",
            r"experience_maker\w*\.py|samples_generator\w*\.py",
            "openrlhf/trainer/ppo_utils/samples_generator.py (older: "
            "experience_maker.py): SamplesGenerator.generate_samples, _generate_vllm",
        ),
        PhasePattern(
            ROLLOUT,
            r"\w*(?:SamplesGenerator|ExperienceMaker)\.(?:generate_samples|_generate_\w+)",
            note="SamplesGenerator.generate_samples / _generate_vllm",
        ),
        PhasePattern(
            TRAIN,
            r"ppo_train|training_step",
            r"ppo_(?:actor|critic)\.py",
            "openrlhf/trainer/ray/ppo_actor.py, ppo_critic.py",
        ),
        PhasePattern(
            TRAIN,
            r"(?:ActorPPOTrainer|CriticPPOTrainer)\.(?:ppo_train|training_step)",
            note="ActorPPOTrainer / CriticPPOTrainer.ppo_train, training_step",
        ),
    ),
    log_format=LogFormat(
        name="OpenRLHF",
        marker="Global step ",
        step_line=r"\bGlobal step {step}:\s*(?P<body>\{.*)",
        shape=LineShape.DICT,
        example="Global step N: {'timing/broadcast': ..., ...}",
        source="openrlhf/trainer/ppo_trainer.py, ppo_trainer_async.py",
    ),
    metric_keys=(
        MetricKey("timing/broadcast", WEIGHT_SYNC_S),
        MetricKey("timing/generation", ROLLOUT_S),
        MetricKey("timing/step_total", STEP_S),
    ),
    timer_keys=(("timing/", ""),),
)
