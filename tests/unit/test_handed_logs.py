"""The handed real training logs (``shared/cases/logs/``): every expectation of its
``expected.json``, for every log present, through ``analyze_path`` as ``wsprof analyze`` runs it.

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

LOGS = helpers.CASES / "logs"
EXPECTED = LOGS / "expected.json"
#: Severities that make a finding a warning or worse.
WARNING_OR_WORSE = frozenset({"warning", "critical"})
#: Expectation keys that name a series verdict.
SERIES_KEYS = ("weight_sync_s", "step_s")


def _cases() -> list[Any]:
    if not EXPECTED.is_file():  # the test skips (fails under CI) on the missing file
        return [pytest.param(None, None, None, id="cases-missing")]
    expected: dict[str, dict[str, Any]] = json.loads(EXPECTED.read_text())
    out: list[Any] = []
    for file, checks in expected.items():
        for key, want in checks.items():
            out.append(pytest.param(file, key, want, id=f"{file}::{key}"))
    return out


@functools.cache
def _analysis(file: str) -> Analysis:
    return analyze_path(str(LOGS / file))


def _advice_on(findings: tuple[Finding, ...], metric: str) -> list[str]:
    """Titles of the findings about ``metric`` (named as the place or in the evidence)."""
    return [
        f"{f.kind}: {f.title}"
        for f in findings
        if f.where == metric or metric in (f.evidence.get("series"), f.evidence.get("counter"))
    ]


@pytest.mark.parametrize(("file", "key", "want"), _cases())
def test_handed_log(file: str, key: str, want: Any) -> None:
    helpers.require_cases(EXPECTED)
    helpers.require_cases(LOGS / file)
    a = _analysis(file)
    series = {r.series.name: r for r in a.series}
    if key in SERIES_KEYS:
        if want is None:
            assert key not in series, f"{file}: the log has no {key}, got {series[key].verdict}"
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
            assert metric in series, (file, metric, "not read from the log")
            assert _advice_on(a.findings, metric) == [], (file, metric)
            kind = series_kind(series[metric].series)
            assert kind.kind not in ACCUMULATING_KINDS, (file, metric, kind)
    else:
        pytest.fail(f"{EXPECTED}: unknown expectation {key!r} for {file}; teach this test it")


def test_handed_logs_are_all_checked() -> None:
    """Every log in the folder has expectations (a new log without them is not tested)."""
    helpers.require_cases(EXPECTED)
    expected = json.loads(EXPECTED.read_text())
    logs = sorted(p.name for p in Path(LOGS).glob("*.log"))
    assert [f for f in logs if f not in expected] == []
