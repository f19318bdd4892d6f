"""Stand-in for TRL 1.16.0's ``trl/trainer/grpo_trainer.py``: ``GRPOTrainer._generate_single_turn``
with TRL's signature; without vLLM it calls the model's ``generate`` (a stand-in model, or a
short sleep without one) and returns ``(completion_ids, logprobs)``."""

from __future__ import annotations

import time
from typing import Any


class GRPOTrainer:
    def __init__(self, model: Any = None) -> None:
        self.model = model

    def _generate_single_turn(
        self,
        prompt_ids: Any,
        images: Any,
        multimodal_fields: Any,
        num_generations: Any,
        has_tool_images: bool = False,
    ) -> tuple[Any, None]:
        if self.model is None:
            time.sleep(0.02)
            return prompt_ids, None
        return self.model.generate(prompt_ids), None
