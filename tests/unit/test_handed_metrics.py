"""The handed metric exports of real runs (``shared/cases/metrics/``): every expectation of its
``expected.json`` (the form of ``shared/cases/logs/expected.json``), for every CSV present,
through ``analyze_path`` as ``wsprof analyze`` runs it.

Each expectation is its own test (``<file>::<key>``): the verdicts of ``weight_sync_s`` and
``step_s`` (accumulating and the acceptable shapes: periodic checkpoint/eval spikes are no
sawtooth, one level change is a step change, a trendless creep is flat), no warning-or-worse
finding, and no leak or growth advice on the metrics listed. Skipped when the cases folder is
absent (failing under ``CI=true``).
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

METRICS = helpers.CASES / "metrics"
EXPECTED = METRICS / "expected.json"
#: Severities that make a finding a warning or worse.
WARNING_OR_WORSE = frozenset({"warning", "critical"})
#: Expectation keys that name a series verdict.
SERIES_KEYS = ("weight_sync_s", "step_s")


def _cases() -> list[Any]:
    if not EXPECTED.is_file():  # the test skips (fails under CI) on the missing file
        return [pytest.param(None, None, None, id="cases-missing")]
    expected: dict[str, dict[str, Any]] = json.loads(EXPECTED.read_text())
    return [
        pytest.param(file, key, want, id=f"{file}::{key}")
        for file, checks in expected.items()
        for key, want in checks.items()
    ]


@functools.cache
def _analysis(file: str) -> Analysis:
    return analyze_path(str(METRICS / file))


def _advice_on(findings: tuple[Finding, ...], metric: str) -> list[str]:
    """Titles of the findings about ``metric`` (named as the place or in the evidence)."""
    return [
        f"{f.kind}: {f.title}"
        for f in findings
        if f.where == metric or metric in (f.evidence.get("series"), f.evidence.get("counter"))
    ]


@pytest.mark.parametrize(("file", "key", "want"), _cases())
def test_handed_metrics(file: str, key: str, want: Any) -> None:
    helpers.require_cases(EXPECTED)
    helpers.require_cases(METRICS / file)
    a = _analysis(file)
    series = {r.series.name: r for r in a.series}
    if key in SERIES_KEYS:
        if want is None:
            assert key not in series, f"{file}: the export has no {key}, got {series[key].verdict}"
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
            assert metric in series, (file, metric, "not read from the export")
            assert _advice_on(a.findings, metric) == [], (file, metric)
            kind = series_kind(series[metric].series)
            assert kind.kind not in ACCUMULATING_KINDS, (file, metric, kind)
    else:
        pytest.fail(f"{EXPECTED}: unknown expectation {key!r} for {file}; teach this test it")


def test_handed_metrics_are_all_checked() -> None:
    """Every export in the folder has expectations (a new one without them is not tested)."""
    helpers.require_cases(EXPECTED)
    expected = json.loads(EXPECTED.read_text())
    exports = sorted(p.name for p in Path(METRICS).glob("*.csv"))
    assert [f for f in exports if f not in expected] == []


def test_checkpoint_spikes_are_named() -> None:
    """The step time's save/eval spikes every 20 steps are named in the verdict and a note."""
    file = "slime_qwen3-4b_colocate_64steps.csv"
    helpers.require_cases(METRICS / file)
    a = _analysis(file)
    v = {r.series.name: r for r in a.series}["step_s"].verdict
    assert v.spike_period == 20 and v.spike_steps == (20, 40, 60)
    assert any(n.startswith("step_s: spikes every 20 steps at steps 20, 40, 60") for n in a.notes)
