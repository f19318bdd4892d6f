"""Per-step phase seconds: a weight sync inside a rollout phase is weight sync only."""

from __future__ import annotations

import pytest

from wsprof.analysis.steps import _phase_totals
from wsprof.trace.model import Span

pytestmark = pytest.mark.pure

S = 1_000_000_000


def _phase(name: str, a: float, b: float, step: int = 0) -> Span:
    return Span("phase", name, int(a * S), int(b * S), step, 1)


def test_a_sync_inside_rollout_is_not_rollout() -> None:
    # TRL: _generate_single_turn (rollout, 0-10 s) calls sync_weights (2-5 s) first.
    t = _phase_totals([_phase("rollout", 0, 10), _phase("weight_sync", 2, 5)])
    assert t[(0, "weight_sync")] == pytest.approx(3.0)
    assert t[(0, "rollout")] == pytest.approx(7.0)


def test_phases_apart_and_other_steps_keep_their_own_time() -> None:
    t = _phase_totals(
        [
            _phase("rollout", 0, 4),
            _phase("generate", 1, 3),  # nested rollout counts once
            _phase("sync", 4, 6),  # after the rollout: no overlap
            _phase("rollout", 10, 12, step=1),
            _phase("weight_sync", 0, 5, step=2),  # another step's sync takes nothing
        ]
    )
    assert t[(0, "rollout")] == pytest.approx(4.0)
    assert t[(0, "weight_sync")] == pytest.approx(2.0)
    assert t[(1, "rollout")] == pytest.approx(2.0)
    assert t[(2, "weight_sync")] == pytest.approx(5.0)
