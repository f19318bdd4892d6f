"""Diagnoses group the findings of one cause; two causes give two; missing links are named.

Inputs are real CSV series files read by the real input layer (the growth numbers are exact,
so each case is one cause or two by construction); the demo's traces are in
``tests/integration/test_diagnoses_demo.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wsprof.analysis.chains import confidence_of
from wsprof.analysis.run import analyze_path
from wsprof.cli import main

pytestmark = pytest.mark.pure


def _csv(path: Path, columns: dict[str, list[float]]) -> str:
    names = list(columns)
    n = len(columns[names[0]])
    rows = ["step," + ",".join(names)]
    rows += [f"{i}," + ",".join(repr(columns[c][i]) for c in names) for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _sync(i: int) -> float:
    return 1.0 + 0.2 * i + 0.01 * (i % 2)


def test_a_slowdown_nothing_explains_names_its_missing_links(tmp_path: Path) -> None:
    a = analyze_path(_csv(tmp_path / "s.csv", {"weight_sync_s": [_sync(i) for i in range(10)]}))
    assert [d.cause for d in a.diagnoses] == ["unexplained"]
    d = a.diagnoses[0]
    assert d.where is None and not d.why
    assert any(m.startswith("where:") for m in d.missing)
    assert any("wsprof attach PID" in m for m in d.missing)  # a series has no stacks
    assert d.confidence < 0.4 and d.confidence_word == "low"
    assert d.symptom.text.startswith("weight-sync time grows (linear): 1 s -> 2.81 s")
    # The projection says which fit it comes from.
    assert "by the straight-line fit of steps 0-9" in d.symptom.text
    assert a.verdict.n_problems == 1


def test_wrapper_and_call_count_are_two_diagnoses(tmp_path: Path) -> None:
    cols = {
        "weight_sync_s": [_sync(i) for i in range(10)],
        "between_layers_s": [0.05 * i + 0.001 * (i % 3) for i in range(10)],
        "collective_calls": [100.0 + 20 * i for i in range(10)],
    }
    a = analyze_path(_csv(tmp_path / "two.csv", cols))
    causes = [d.cause for d in a.diagnoses]
    assert causes == ["wrapper", "call_count"], causes
    wrapper, calls = a.diagnoses
    assert wrapper.where is not None and "between the API and the backend" in wrapper.where.text
    assert calls.where is not None and "100 -> 280" in calls.where.text
    # Each finding at warning or above is in exactly one diagnosis, except the shared
    # symptom, which the second cause names without taking its severity.
    kinds = {f.id: f.kind for f in a.findings}
    assert {kinds[i] for i in calls.finding_ids} == {"accumulating_slowdown", "call_count_growth"}
    assert calls.severity == "warning" and wrapper.severity == "critical"
    assert a.verdict.n_problems == 2
    assert a.verdict.n_findings == sum(1 for f in a.findings if f.severity != "info")


def test_every_warning_finding_is_in_a_diagnosis(tmp_path: Path) -> None:
    cols = {
        "weight_sync_s": [_sync(i) for i in range(10)],
        "collective_calls": [100.0 + 20 * i for i in range(10)],
        "reserved_bytes": [2.0**30 + 2.0**26 * i for i in range(10)],
    }
    a = analyze_path(_csv(tmp_path / "m.csv", cols))
    used = {i for d in a.diagnoses for i in d.finding_ids}
    assert {f.id for f in a.findings if f.severity != "info"} <= used
    assert [f.id for f in a.findings] == [f"F{i}" for i in range(1, len(a.findings) + 1)]


def test_healthy_series_has_no_diagnosis(tmp_path: Path) -> None:
    flat = [1.0 + 0.01 * (i % 3) for i in range(10)]
    a = analyze_path(_csv(tmp_path / "h.csv", {"weight_sync_s": flat}))
    assert a.diagnoses == () and a.verdict.status == "no_problem"


def test_confidence_is_a_third_per_link() -> None:
    assert confidence_of(0.9, True, True) == 0.9
    assert abs(confidence_of(0.9, True, False) - 0.6) < 1e-12
    assert abs(confidence_of(0.9, False, False) - 0.3) < 1e-12
    assert confidence_of(2.0, True, True) == 1.0


def _out(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    main(args)
    return capsys.readouterr().out


def test_text_leads_with_diagnoses_and_all_lists_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cols = {
        "weight_sync_s": [_sync(i) for i in range(10)],
        "collective_calls": [100.0 + 20 * i for i in range(10)],
    }
    path = _csv(tmp_path / "c.csv", cols)
    out = _out(capsys, ["analyze", path])
    lines = out.splitlines()
    assert lines[1].startswith("VERDICT: 1 problem found")
    first = next(i for i, line in enumerate(lines) if line.startswith("D1 "))
    assert "more collective calls every step" in " ".join(lines[first : first + 3])
    assert "[warning]" not in out.split("D1 ")[1].split("\n\n")[1]  # no finding list
    full = _out(capsys, ["analyze", path, "--all"])
    assert "findings (" in full and "F1 [" in full and "next:" in full
    assert "] (in D1) " in full  # each finding says which diagnosis holds it


def test_json_carries_diagnoses_linked_to_finding_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cols = {
        "weight_sync_s": [_sync(i) for i in range(10)],
        "collective_calls": [100.0 + 20 * i for i in range(10)],
    }
    doc = json.loads(_out(capsys, ["analyze", _csv(tmp_path / "j.csv", cols), "--format", "json"]))
    assert doc["schema_version"] == 2
    ids = {f["id"] for f in doc["findings"]}
    (d,) = doc["diagnoses"]
    assert d["id"] == "D1" and d["cause"] == "call_count"
    assert set(d["finding_ids"]) <= ids and d["finding_ids"]
    assert d["where"]["rows"] and all({"label", "value"} == set(r) for r in d["where"]["rows"])
    assert doc["verdict"]["n_problems"] == 1
    proj = next(s for s in doc["series"] if s["name"] == "weight_sync_s")["projection"]
    assert proj["model"] == "linear" and (proj["fit_first_step"], proj["fit_last_step"]) == (0, 9)


def test_rollout_share_advice_is_worded_for_the_share() -> None:
    from wsprof.analysis.rules.phases import _share_advice

    assert "wait on" in _share_advice(0.05, 0.6)
    high = _share_advice(0.9, 0.05)
    assert "generation dominates" in high and "wait on" not in high
    assert "mark rollout" in _share_advice(None, 0.3)


def test_a_time_that_grows_faster_than_the_lead_is_its_own_diagnosis(tmp_path: Path) -> None:
    """Rollout +2 s/step beside a +0.2 s/step sync is not 'rollout grows with it'."""
    cols = {
        "weight_sync_s": [_sync(i) for i in range(10)],
        "rollout_s": [50.0 + 2.0 * i + 0.1 * (i % 2) for i in range(10)],
    }
    a = analyze_path(_csv(tmp_path / "r.csv", cols))
    symptoms = [d.symptom_series for d in a.diagnoses]
    assert symptoms == ["weight_sync_s", "rollout_s"], [d.title for d in a.diagnoses]
    assert "grows with it" not in a.diagnoses[0].symptom.text
    # A step time that grows about as fast as the sync rides along with it.
    cols = {
        "weight_sync_s": [_sync(i) for i in range(10)],
        "step_s": [10.0 + _sync(i) for i in range(10)],
    }
    a = analyze_path(_csv(tmp_path / "s.csv", cols))
    assert len(a.diagnoses) == 1 and "step time grows with it" in a.diagnoses[0].symptom.text


def test_a_logs_own_name_for_weight_sync_leads(tmp_path: Path) -> None:
    """The motivating case as a log names it: update_weights_time_s is the weight sync, in
    the diagnosis and in the headline; a series input's missing links say what to run."""
    cols = {"update_weights_time_s": [143.0, 363.0, 966.0, 1596.0, 2400.0, 3300.0]}
    a = analyze_path(_csv(tmp_path / "seed.csv", cols))
    (d,) = a.diagnoses
    assert d.cause == "unexplained" and d.symptom_series == "update_weights_time_s"
    assert any("wsprof run" in m for m in d.missing) and "wsprof run" in d.next_step
    assert a.headline is not None and a.headline.weight_sync_median_s is not None
