"""The between_layers finding fires on growth a user would act on, not on a drifting few ms."""

from __future__ import annotations

from pathlib import Path

import pytest

from wsprof.analysis.run import analyze_path

pytestmark = pytest.mark.pure


def _csv(path: Path, between: list[float]) -> str:
    rows = ["step,weight_sync_s,between_layers_s"]
    rows += [f"{i},{1.0 + 0.01 * (i % 2) + b},{b}" for i, b in enumerate(between)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_tiny_growth_between_layers_is_not_a_finding(tmp_path: Path) -> None:
    tiny = [0.001 * (i + 1) for i in range(10)]  # +9 ms over 10 steps of a 1 s sync
    kinds = [f.kind for f in analyze_path(_csv(tmp_path / "a.csv", tiny)).findings]
    assert "between_layers" not in kinds


def test_material_growth_between_layers_is_a_finding(tmp_path: Path) -> None:
    big = [0.05 * (i + 1) for i in range(10)]  # +450 ms over 10 steps
    kinds = [f.kind for f in analyze_path(_csv(tmp_path / "b.csv", big)).findings]
    assert "between_layers" in kinds
