"""The handed real training logs (``shared/cases/logs/``) and metric exports of real runs
(``shared/cases/metrics/``, the same ``expected.json`` form): every expectation, for every file
present, through ``analyze_path`` as ``wsprof analyze`` runs it.

Each expectation is its own test (``<file>::<key>``): the verdicts of ``weight_sync_s`` and
``step_s`` (null: the log has none), no warning-or-worse finding, and no leak or growth advice
on the metrics listed (step counters, training-quality metrics). Skipped when the cases folder
is absent.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import helpers
import pytest

from wsprof.analysis.kinds import ACCUMULATING_KINDS, series_kind
from wsprof.analysis.model import Analysis, Finding
from wsprof.analysis.run import analyze_path

pytestmark = pytest.mark.pure

LOGS = helpers.CASES / "logs"
METRICS = helpers.CASES / "metrics"
#: Each handed folder and the files in it that must have expectations.
FOLDERS = ((LOGS, "*.log"), (METRICS, "*.csv"))
#: Severities that make a finding a warning or worse.
WARNING_OR_WORSE = frozenset({"warning", "critical"})
#: Expectation keys that name a series verdict.
SERIES_KEYS = ("weight_sync_s", "step_s")


def _cases() -> list[Any]:
    out: list[Any] = []
    for folder, _ in FOLDERS:
        expected_file = folder / "expected.json"
        if not expected_file.is_file():  # the test skips (fails under CI) on the missing file
            out.append(pytest.param(folder, None, None, None, id=f"{folder.name}-missing"))
            continue
        expected: dict[str, dict[str, Any]] = json.loads(expected_file.read_text())
        for file, checks in expected.items():
            for key, want in checks.items():
                out.append(pytest.param(folder, file, key, want, id=f"{file}::{key}"))
    return out


@functools.cache
def _analysis(path: Path) -> Analysis:
    return analyze_path(str(path))


def _advice_on(findings: tuple[Finding, ...], metric: str) -> list[str]:
    """Titles of the findings about ``metric`` (named as the place or in the evidence)."""
    return [
        f"{f.kind}: {f.title}"
        for f in findings
        if f.where == metric
        or metric in (f.evidence.as_dict().get("series"), f.evidence.as_dict().get("counter"))
    ]


@pytest.mark.parametrize(("folder", "file", "key", "want"), _cases())
def test_handed_case(folder: Path, file: str, key: str, want: Any) -> None:
    helpers.require_cases(folder / "expected.json")
    helpers.require_cases(folder / file)
    a = _analysis(folder / file)
    series = {r.series.name: r for r in a.series}
    if key in SERIES_KEYS:
        if want is None:
            assert key not in series, f"{file}: the input has no {key}, got {series[key].verdict}"
            return
        assert key in series, (file, sorted(series))
        v = series[key].verdict
        assert v.accumulating is want["accumulating"], (file, key, v)
        assert v.shape in want["shape"], (file, key, v.shape, v.evidence)
    elif key == "no_warning_findings":
        bad = [
            f"[{f.severity}] {f.kind}: {f.title}"
            for f in a.findings
            if f.severity in WARNING_OR_WORSE
        ]
        assert not (want and bad), bad
    elif key == "never_leak_advice_on":
        for metric in want:
            assert metric in series, (file, metric, "not read from the input")
            assert _advice_on(a.findings, metric) == [], (file, metric)
            kind = series_kind(series[metric].series)
            assert kind.kind not in ACCUMULATING_KINDS, (file, metric, kind)
    else:
        pytest.fail(f"{folder}/expected.json: unknown expectation {key!r} for {file}; teach it")


@pytest.mark.parametrize(("folder", "pattern"), FOLDERS, ids=lambda v: getattr(v, "name", v))
def test_handed_cases_are_all_checked(folder: Path, pattern: str) -> None:
    """Every file in each folder has expectations (a new one without them is not tested)."""
    expected_file = folder / "expected.json"
    helpers.require_cases(expected_file)
    expected = json.loads(expected_file.read_text())
    files = sorted(p.name for p in Path(folder).glob(pattern))
    assert [f for f in files if f not in expected] == []


def test_a_log_without_a_sync_series_says_so_in_its_headline() -> None:
    # verl's GRPO log times the step and the rollout batch, and logs no weight-sync time: the
    # headline says where its steps come from and that no weight sync was logged (it once
    # printed a blank line there, and "no steps" beside 10 steps in JSON).
    from wsprof.analysis.headline import NO_SYNC_SERIES

    path = LOGS / "verl_grpo_uitars_10steps.log"
    helpers.require_cases(path)
    head = analyze_path(str(path)).headline
    assert head is not None and head.n_steps == 10
    assert head.source == f"the per-step series of {path}"
    assert head.weight_sync_median_s is None and head.no_sync_found == NO_SYNC_SERIES
    assert head.summary() is not None and "no weight sync found" in (head.summary() or "")
