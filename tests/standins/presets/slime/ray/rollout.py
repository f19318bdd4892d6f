"""Stand-in for slime's ``slime/ray/rollout.py``: ``RolloutManager.generate`` takes a while."""

from __future__ import annotations

import time


class RolloutManager:
    def generate(self, rollout_id: int) -> int:
        time.sleep(0.02)
        return rollout_id
