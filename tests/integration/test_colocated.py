"""The slime-colocated-shaped job (``tests/jobs/colocated_shaped``: 2 TP trainer ranks and an
engine process; weight buckets sent by handle through torch's ForkingPickler, shared memory on
CPU where a GPU job uses CUDA IPC) under ``wsprof run`` with no markers, against its own ground
truth (issue 35): the trainers' weight sync is the whole push (serialize, ``gather_object``, the
engine's ack), the kept buckets are named with bytes an update and their holder, on the trainer
or on the engine, the double open is named on the engine, and the healthy job is silent.

The runs and the comparison are ``scripts/shaped_jobs.py``'s."""

from __future__ import annotations

from typing import Any

import helpers
import pytest

shaped = helpers.load_script("shaped_jobs")

#: (variant name in shaped_jobs, steps)
CASES = [
    ("healthy", 12),
    ("trainer_list", 12),
    ("engine_keeps_fs", 12),
    ("double_open", 12),
]
#: Largest median error of every trainer rank's weight sync against the job's own
#: ``update_weights`` timer, % (issue 35 asks 10%: rank 1 measured -0.1%, rank 0 +3 to +7%:
#: it sends the engine's pause and flush requests before the push's first barrier, and its
#: push is taken to start when rank 1 reached that barrier).
MAX_SYNC_ERR_PCT = 10.0
#: The same for the engine: its update is its first open to its last (-1 to -2% measured).
MAX_ENGINE_SYNC_ERR_PCT = 15.0
#: Bytes one update sends (8 buckets of the toy model's HF tensors, the job's truth).
UPDATE_BYTES = 5_779_968


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    helpers.require_cases(shaped.JOBS["slime"])
    out: dict[str, Any] = {}
    base = tmp_path_factory.mktemp("colocated")
    for variant, steps in CASES:
        run = base / variant
        truth = shaped.run_job("colocated", variant, run, steps=steps)
        out[variant] = shaped.compare("colocated", variant, run, truth)
        out[f"{variant} truth"] = shaped._truth(truth)
    return out


def _kept(a: Any) -> list[Any]:
    return [f for f in a.findings if f.kind == "shared_buckets_kept"]


@pytest.mark.parametrize("variant", [c[0] for c in CASES])
def test_the_sync_is_the_whole_push(runs: dict[str, Any], variant: str) -> None:
    row, a = runs[variant]
    assert row.primary_ok, row.line()
    # every process, the engine too: its steps from the updates it opened
    assert len(row.steps) == 3, row.steps
    for label, (found, true) in row.steps.items():
        assert found == true, (label, row.steps)
    engine = [p for p in a.processes if p.label.startswith("inference engine")]
    assert len(engine) == 1 and engine[0].step_source == "shared", [p.label for p in a.processes]
    for label, err in row.sync_err_by.items():
        bound = MAX_ENGINE_SYNC_ERR_PCT if label.startswith("inference") else MAX_SYNC_ERR_PCT
        assert abs(err) <= bound, row.line()
    assert len(row.sync_err_by) == 3, row.line()


def test_healthy_is_silent(runs: dict[str, Any]) -> None:
    row, a = runs["healthy"]
    # Nothing blames the weight sync, a wrapper or a collective. "Step time grows" only where
    # the job's own clock grew too: its step times spread 0.49-0.80 s on 2 shared cores, and a
    # CI run read a rise of a tenth of a step over 12 steps as "step time grows and no
    # recorded fact says where" (a chance trend: scripts/growth_false_alarms.py).
    assert a.primary is not None
    assert not helpers.only_step_time_warned(a, runs["healthy truth"]), row.line()
    assert not _kept(a)
    # the sharing was seen: both sides, nothing kept after any update
    sh = {p.label: p.sharing for p in a.processes if p.sharing is not None}
    assert {s.role for s in sh.values()} == {"trainer", "engine"}, sh
    for s in sh.values():
        side = s.exports or s.imports
        assert side is not None and len(side.kept_bytes) >= 10
        assert max(side.kept_bytes) < UPDATE_BYTES


def test_buckets_kept_by_the_trainer_are_named_with_their_holder(runs: dict[str, Any]) -> None:
    row, a = runs["trainer_list"]
    kept = _kept(a)
    assert len(kept) == 1, [f.title for f in a.findings]
    ev = kept[0].evidence
    assert ev.side == "export" and ev.role == "trainer"
    assert ev.process == a.primary.label
    # bytes an update: the whole update's buckets, within 10% (allocation granularity)
    assert abs(ev.kept_per_update_bytes - UPDATE_BYTES) <= 0.1 * UPDATE_BYTES, ev
    assert ev.holder is not None and ev.holder.startswith(
        "UpdateWeightFromTensor.long_lived_tensors["
    ), ev.holder
    assert "['flattened_tensor']" in ev.holder
    assert kept[0].where is not None and "_send_to_colocated_engine" in kept[0].where
    assert a.diagnoses[0].title == kept[0].title, [d.title for d in a.diagnoses]


def test_buckets_kept_by_the_engine_are_named_on_the_engine(runs: dict[str, Any]) -> None:
    row, a = runs["engine_keeps_fs"]
    kept = _kept(a)
    assert len(kept) == 1, [f.title for f in a.findings]
    ev = kept[0].evidence
    assert ev.side == "import" and ev.role == "engine"
    assert ev.process != a.primary.label
    assert abs(ev.kept_per_update_bytes - UPDATE_BYTES) <= 0.1 * UPDATE_BYTES, ev
    assert ev.holder is not None and ev.holder.startswith("ModelRunner."), ev.holder


def test_double_open_is_named_on_the_engine(runs: dict[str, Any]) -> None:
    row, a = runs["double_open"]
    reopened = [f for f in a.findings if f.kind == "shared_handle_reopened"]
    assert len(reopened) == 1, [f.title for f in a.findings]
    assert "opened twice, closed once" in reopened[0].title
    assert reopened[0].evidence.reopens >= 8
    assert "(engine)" in reopened[0].title
