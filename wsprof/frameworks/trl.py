"""TRL (huggingface/trl, PyPI ``trl``): GRPO and the other online trainers, vLLM generation.

Sources: ``trl/generation/vllm_generation.py`` (``VLLMGeneration``: sync and generate),
``trl/trainer/grpo_trainer.py`` (``GRPOTrainer._generate_single_turn``: generation with or
without vLLM),
``trl/generation/vllm_client.py`` and ``trl/scripts/vllm_serve.py`` (server mode),
``trl/trainer/<name>_trainer.py`` (the online trainers). TRL logs through ``transformers``'
trainer (no step line of its own): its W&B history is read as a metrics CSV.
"""

from __future__ import annotations

from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC
from wsprof.frameworks.model import EntryPoint, Framework, PhasePattern

#: TRL's online trainers (trl/trainer/<name>_trainer.py) that generate with vLLM.
TRAINER_FILES = r"(?:grpo|rloo|online_dpo|gkd|xpo|nash_md|gold)_trainer\.py"

FRAMEWORK = Framework(
    name="trl",
    title="TRL",
    modules=("trl",),
    distribution="trl",
    repository="huggingface/trl",
    entry_points=(
        EntryPoint(WEIGHT_SYNC, ("trl.generation.vllm_generation:VLLMGeneration.sync_weights",)),
        EntryPoint(ROLLOUT, ("trl.generation.vllm_generation:VLLMGeneration.generate",)),
        EntryPoint(
            ROLLOUT,
            ("trl.trainer.grpo_trainer:GRPOTrainer._generate_single_turn",),
            "trl/trainer/grpo_trainer.py: generation with or without vLLM (use_vllm=False: "
            "transformers' generate, which TRL times as transformers.generate); with vLLM it "
            "also holds the weight sync it triggers",
        ),
    ),
    phase_patterns=(
        PhasePattern(
            WEIGHT_SYNC,
            r"sync_weights|_sync_fsdp\d_params_to_vllm",
            r"vllm_generation\.py",
            "trl/generation/vllm_generation.py: VLLMGeneration.sync_weights, "
            "_sync_fsdp1_params_to_vllm, _sync_fsdp2_params_to_vllm",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"VLLMGeneration\.(?:sync_weights|_sync_fsdp\d_params_to_vllm)",
            note="VLLMGeneration.sync_weights",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"_move_model_to_vllm",
            note="GRPOTrainer._move_model_to_vllm (older trl/trainer/grpo_trainer.py); "
            "OnlineDPOTrainer._move_model_to_vllm (trl/experimental/online_dpo)",
        ),
        PhasePattern(
            WEIGHT_SYNC,
            r"\w*update_(?:named_param|model_params)\w*",
            r"vllm_client\.py|vllm_serve\.py",
            "trl/generation/vllm_client.py: VLLMClient.update_named_param, "
            "update_model_params; trl/scripts/vllm_serve.py (server side)",
        ),
        PhasePattern(
            ROLLOUT,
            r"generate",
            r"vllm_generation\.py",
            "trl/generation/vllm_generation.py: VLLMGeneration.generate",
        ),
        PhasePattern(ROLLOUT, r"VLLMGeneration\.generate", note="VLLMGeneration.generate"),
        PhasePattern(
            ROLLOUT,
            r"_generate\w*",
            TRAINER_FILES,
            "trl/trainer/grpo_trainer.py (and siblings): "
            "_generate_and_score_completions, _generate_single_turn, _generate",
        ),
        PhasePattern(
            ROLLOUT,
            r"(?:GRPO|RLOO|OnlineDPO|GKD)Trainer\._generate\w*",
            note="the online trainers' _generate*",
        ),
        PhasePattern(
            TRAIN,
            r"_?compute_loss",
            TRAINER_FILES,
            "trl/trainer/*_trainer.py: compute_loss, _compute_loss",
        ),
    ),
)
