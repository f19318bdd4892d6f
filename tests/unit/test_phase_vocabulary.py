"""One phase vocabulary (:mod:`wsprof.contracts.phases`) for markers, presets and sampled
phases: ``wsprof.phase("sync")`` is weight sync, as ``--phase sync=REGEX`` is."""

from __future__ import annotations

import pytest

from wsprof.analysis.phases import normalize_phase
from wsprof.capture.markers import current_phase, phase
from wsprof.contracts.phases import (
    CANONICAL_PHASES,
    PHASE_ALIASES,
    RESERVED_PHASES,
    ROLLOUT,
    TRAIN,
    WEIGHT_SYNC,
    canonical_phase,
    phase_key,
    resolve_phase,
)


def test_canonical_names_and_aliases() -> None:
    assert CANONICAL_PHASES == (WEIGHT_SYNC, ROLLOUT, TRAIN)
    assert set(PHASE_ALIASES.values()) <= set(CANONICAL_PHASES)
    assert not RESERVED_PHASES & set(CANONICAL_PHASES)
    assert phase_key("  Weight - Sync ") == "weight_sync"
    assert canonical_phase("sync") == WEIGHT_SYNC
    assert canonical_phase("Generation") == ROLLOUT
    assert canonical_phase("training") == TRAIN
    assert canonical_phase("checkpoint") is None


@pytest.mark.parametrize("name", [*PHASE_ALIASES, *CANONICAL_PHASES, "Weight-Sync", "REFIT"])
def test_markers_and_sampled_phases_agree(name: str) -> None:
    assert resolve_phase(name) == normalize_phase(name)
    with phase(name) as p:
        assert p.name == normalize_phase(name)
        assert current_phase() == normalize_phase(name)
    assert current_phase() is None


def test_sync_marker_is_weight_sync() -> None:
    with phase("sync"):
        assert current_phase() == WEIGHT_SYNC


def test_other_names_stay_as_given() -> None:
    assert resolve_phase("MyCheckpoint") == "MyCheckpoint"
    with phase("MyCheckpoint"):
        assert current_phase() == "MyCheckpoint"
    with pytest.raises(ValueError, match="reserved"):
        normalize_phase("idle")
