"""The gaps finding (weight-sync time in no collective) warns on growth a user would act on,
not on half a millisecond drifting in a step of half a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from wsprof.analysis.run import analyze_path

pytestmark = pytest.mark.pure


def _csv(path: Path, gaps: list[float], sync_s: float = 0.007, step_s: float = 0.5) -> str:
    rows = ["step,step_s,weight_sync_s,sync_gap_s"]
    rows += [
        f"{i},{step_s + 0.002 * (i % 2) + g},{sync_s + 0.0001 * (i % 3) + g},{g}"
        for i, g in enumerate(gaps)
    ]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _gaps(path: str) -> list[str]:
    return [f.severity for f in analyze_path(path).findings if f.kind == "gaps"]


def test_a_gap_growing_half_a_millisecond_in_a_half_second_step_is_information(
    tmp_path: Path,
) -> None:
    # The healthy twin of tests/targets/unmarked_sync_job.py on a loaded machine: 284 µs ->
    # 702 µs between the calls of a 7 ms sync, steps of 0.5 s.
    drift = [0.000284 + 0.0000465 * i for i in range(10)]
    assert _gaps(_csv(tmp_path / "a.csv", drift)) == ["info"]


def test_a_gap_growing_by_a_tenth_of_a_step_is_a_warning(tmp_path: Path) -> None:
    leak = [0.001 + 0.01 * i for i in range(10)]  # +90 ms over 10 steps of 0.5 s
    assert _gaps(_csv(tmp_path / "b.csv", leak)) == ["warning"]
