"""Stand-in for TRL 1.16.0's ``trl/generation/vllm_generation.py``: ``VLLMGeneration``, whose
``generate`` and ``sync_weights`` a job without vLLM never calls."""

from __future__ import annotations

from typing import Any


class VLLMGeneration:
    def sync_weights(self) -> None:
        return None

    def generate(
        self, prompts: Any, images: Any, num_generations: Any, profiler: Any = None
    ) -> Any:
        return None
