"""A Ray actor class as frameworks write them (slime's ``RolloutManager``, OpenRLHF's
``PolicyModelActor``): ``@ray.remote`` on the class; the method reports the phase it runs in."""

from __future__ import annotations

import ray

from wsprof.capture.markers import current_phase


@ray.remote
class Gen:
    def generate(self) -> str | None:
        return current_phase()
