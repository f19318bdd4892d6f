"""A preset on a Ray actor class marks the phase inside the actor process (real local Ray):
slime's ``RolloutManager`` and OpenRLHF's ``PolicyModelActor`` are ``@ray.remote`` classes, whose
module attribute is Ray's handle, not the class the actor runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import TARGETS

#: Seconds the driver (Ray start, one actor call, shutdown) may take.
DRIVER_TIMEOUT_S = 180


def test_preset_on_a_ray_actor_class_marks_the_phase_in_the_actor() -> None:
    pytest.importorskip("ray")
    res = subprocess.run(
        [sys.executable, str(TARGETS / "ray_preset_actor.py")],
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        check=False,
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONWARNINGS": "ignore"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "phase in actor: rollout" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
