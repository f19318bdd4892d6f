"""The handed slime metric exports (``shared/cases/metrics/``) beyond their ``expected.json``
(which ``test_handed_logs.py`` checks with the logs'): the checkpoint-save spikes are named."""

from __future__ import annotations

import helpers
import pytest
from test_handed_logs import METRICS, _analysis

pytestmark = pytest.mark.pure


def test_checkpoint_spikes_are_named() -> None:
    """The step time's save/eval spikes every 20 steps are named in the verdict and a note."""
    file = "slime_qwen3-4b_colocate_64steps.csv"
    helpers.require_cases(METRICS / file)
    a = _analysis(METRICS / file)
    v = {r.series.name: r for r in a.series}["step_s"].verdict
    assert v.spike_period == 20 and v.spike_steps == (20, 40, 60)
    assert any(n.startswith("step_s: spikes every 20 steps at steps 20, 40, 60") for n in a.notes)
