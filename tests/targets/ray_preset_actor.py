"""Driver: a preset names ``ray_preset_mod:Gen.generate`` (a Ray actor class, imported after
the preset is installed), then a local Ray cluster runs the method in an actor process and
this prints ``phase in actor: <phase>``."""

from __future__ import annotations

from wsprof.capture import presets
from wsprof.frameworks import EntryPoint

presets.PRESETS = {"fake": (EntryPoint("rollout", ("ray_preset_mod:Gen.generate",)),)}
presets.install("fake")

import ray  # noqa: E402 - after the preset, as under `wsprof run`
import ray_preset_mod  # noqa: E402

ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
try:
    actor = ray_preset_mod.Gen.remote()
    print(f"phase in actor: {ray.get(actor.generate.remote(), timeout=120)}", flush=True)
finally:
    ray.shutdown()
