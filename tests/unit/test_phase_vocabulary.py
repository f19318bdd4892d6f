"""One phase vocabulary (:mod:`wsprof.contracts.phases`) for markers, presets, sampled phases,
steps and diff: ``wsprof.phase("sync")`` is weight sync, as ``--phase sync=REGEX`` is. A trace
keeps the name as the user gave it; analysis canonicalises when it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from wsprof.analysis.diff import diff_paths
from wsprof.analysis.phases import normalize_phase
from wsprof.analysis.run import analyze_run
from wsprof.analysis.steps import steps_from_markers, sync_spans
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
from wsprof.trace.model import CallTable, Span
from wsprof.trace.reader import read_run
from wsprof.trace.writer import TraceWriter

pytestmark = pytest.mark.pure

MS = 1_000_000


def test_canonical_names_and_aliases() -> None:
    assert CANONICAL_PHASES == (WEIGHT_SYNC, ROLLOUT, TRAIN)
    assert set(PHASE_ALIASES.values()) <= set(CANONICAL_PHASES)
    assert not RESERVED_PHASES & set(CANONICAL_PHASES)
    assert all(phase_key(alias) == alias for alias in PHASE_ALIASES)
    assert phase_key("  Weight - Sync ") == "weight_sync"
    assert canonical_phase("sync") == WEIGHT_SYNC
    assert canonical_phase("Generation") == ROLLOUT
    assert canonical_phase("training") == TRAIN
    assert canonical_phase("checkpoint") is None


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("update_weights", WEIGHT_SYNC),
        ("sync_weights", WEIGHT_SYNC),
        ("weights_sync", WEIGHT_SYNC),
        ("broadcast", WEIGHT_SYNC),
        ("gen", ROLLOUT),
        ("update_actor", TRAIN),
        ("actor_update", TRAIN),
    ],
)
def test_every_framework_spelling_is_an_alias(name: str, canonical: str) -> None:
    assert canonical_phase(name) == canonical


@pytest.mark.parametrize("name", [*PHASE_ALIASES, *CANONICAL_PHASES, "Weight-Sync", "REFIT"])
def test_markers_record_as_given_and_read_as_sampled_phases(name: str) -> None:
    assert resolve_phase(name) == normalize_phase(name)
    with phase(name) as p:
        assert p.name == name  # recorded as given
        assert current_phase() == name
        assert resolve_phase(p.name) == normalize_phase(name)  # read as sampled phases are
    assert current_phase() is None


def test_rollout_marker_keeps_the_users_name() -> None:
    with phase("Rollout") as p:
        assert p.name == "Rollout" and current_phase() == "Rollout"
    assert canonical_phase("Rollout") == ROLLOUT


def test_other_names_stay_as_given() -> None:
    assert resolve_phase("MyCheckpoint") == "MyCheckpoint"
    with phase("MyCheckpoint"):
        assert current_phase() == "MyCheckpoint"
    with pytest.raises(ValueError, match="reserved"):
        normalize_phase("idle")


def _spans(sync_name: str, rollout_name: str = "generate") -> list[Span]:
    """Three steps: 100 ms of ``rollout_name`` (with a nested ``rollout``), then 40 ms of
    ``sync_name``."""
    out: list[Span] = []
    for step in range(3):
        t0 = (10 + step * 200) * MS
        out.append(Span("phase", rollout_name, t0, t0 + 100 * MS, step, 7))
        out.append(Span("phase", "rollout", t0 + 10 * MS, t0 + 90 * MS, step, 7))
        out.append(Span("phase", sync_name, t0 + 100 * MS, t0 + 140 * MS, step, 7))
        out.append(Span("step", str(step), t0, t0 + 150 * MS, step, 7))
    return out


@pytest.mark.parametrize("sync_name", ["sync", "update_weights", "Weight-Sync", "weight_sync"])
def test_steps_read_every_spelling(sync_name: str) -> None:
    spans = _spans(sync_name)
    assert [sp.name for sp in sync_spans(spans)] == [sync_name] * 3
    rows = steps_from_markers(CallTable.empty(), spans)
    assert [r.weight_sync_s for r in rows] == [pytest.approx(0.040)] * 3
    # generate with rollout nested inside is one rollout phase, counted once
    assert [r.rollout_s for r in rows] == [pytest.approx(0.100)] * 3


def _write(path: Path, sync_name: str) -> Path:
    w = TraceWriter(str(path))
    w.set_meta({"pid": 100, "rank": 0, "world_size": 1})
    spans = [
        (sp.kind, sp.name, sp.t_start_ns, sp.t_end_ns, sp.step, sp.thread)
        for sp in _spans(sync_name, "gen")
    ]
    w.write({"spans": spans})
    w.close()
    return path


def test_old_and_new_sync_names_read_the_same(tmp_path: Path) -> None:
    """A trace with phase ``sync`` (before the refactor wsprof recorded it as given) and one
    with ``update_weights``: both count as weight sync; each trace keeps its name."""
    old = _write(tmp_path / "old" / "h-100.wsprof", "sync")
    new = _write(tmp_path / "new" / "h-100.wsprof", "update_weights")
    for folder, name in ((old.parent, "sync"), (new.parent, "update_weights")):
        run = read_run(str(folder))
        [trace] = run
        assert {sp.name for sp in trace.spans if sp.kind == "phase"} == {"gen", "rollout", name}
        pa = analyze_run(run, str(folder)).primary
        assert pa is not None and pa.step_source == "markers"
        assert [r.weight_sync_s for r in pa.steps] == [pytest.approx(0.040)] * 3
        assert [r.rollout_s for r in pa.steps] == [pytest.approx(0.100)] * 3
    r = diff_paths(str(old.parent), str(new.parent))
    assert r.weight_sync_s.before == pytest.approx(0.040)
    assert r.weight_sync_s.after == pytest.approx(0.040)
    # diff groups phases by canonical name: one rollout item (gen and its nested rollout
    # counted once), no item for either sync spelling
    phases = {i.name: i for i in r.items if i.kind == "phase"}
    assert set(phases) == {ROLLOUT}
    rollout = phases[ROLLOUT].s_per_step
    assert rollout is not None and rollout.before == pytest.approx(0.100)
