"""Loading per-step series from CSV: the shared cases, units, ordering and every input error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import helpers
import pytest

from wsprof.errors import EXIT_USAGE, InputError
from wsprof.importers.csv_series import load_series_csv, unit_of

pytestmark = pytest.mark.pure

CASES = helpers.CASES / "series"


@pytest.fixture
def needs_cases() -> None:
    """Skip (fail under CI) when the shared series cases are missing."""
    helpers.require_cases(CASES / "expected.json")


@pytest.mark.usefixtures("needs_cases")
def test_every_case_column_loads() -> None:
    expected = json.loads((CASES / "expected.json").read_text())
    for file, columns in expected.items():
        series = load_series_csv(str(CASES / file))
        names = [s.name for s in series]
        assert set(columns) <= set(names), (file, names)
        for s in series:
            assert len(s.steps) == len(s.values) > 0
            assert list(s.steps) == sorted(s.steps)
            assert all(math.isfinite(v) for v in s.values)


@pytest.mark.usefixtures("needs_cases")
def test_seed_case_values_and_units() -> None:
    series = {s.name: s for s in load_series_csv(str(CASES / "seed_weight_sync.csv"))}
    sync = series["update_weights_time_s"]
    assert sync.unit_label == "s"
    assert sync.steps == (0, 1, 2, 3)
    assert sync.values == (143.0, 363.0, 966.0, 1596.0)
    assert sync.config is None


@pytest.mark.usefixtures("needs_cases")
def test_config_column_applies_to_every_series() -> None:
    (s,) = load_series_csv(str(CASES / "config_step_change.csv"))
    assert s.name == "step_time_s"
    assert s.config is not None and len(s.config) == len(s.values) == 20
    assert s.config[0] == "rollout_n=4" and s.config[-1] == "rollout_n=5"


@pytest.mark.parametrize(
    ("column", "unit"),
    [
        ("update_weights_time_s", "s"),
        ("latency_ms", "ms"),
        ("reserved_gib", "GiB"),
        ("gpu_memory_gb", "GB"),
        ("used_mib", "MiB"),
        ("payload_bytes", "bytes"),
        ("util_pct", "%"),
        ("Reserved_GiB", "GiB"),
        ("loss", ""),
        ("s", ""),
        ("num_calls", ""),
    ],
)
def test_unit_from_suffix(column: str, unit: str) -> None:
    assert unit_of(column) == unit


def _write(tmp_path: Path, text: str, name: str = "series.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_rows_are_sorted_by_step_and_blank_cells_are_missing(tmp_path: Path) -> None:
    path = _write(tmp_path, "step,a_s,b_gib\n2,3,\n0,1,10\n1,2,11\n")
    a, b = load_series_csv(path)
    assert a.steps == (0, 1, 2) and a.values == (1.0, 2.0, 3.0)
    assert b.values[:2] == (10.0, 11.0) and math.isnan(b.values[2])


def test_single_row_is_fine(tmp_path: Path) -> None:
    (s,) = load_series_csv(_write(tmp_path, "step,sync_s\n7,12.5\n"))
    assert s.steps == (7,) and s.values == (12.5,)


def test_bom_blank_lines_and_spaces_are_tolerated(tmp_path: Path) -> None:
    path = _write(tmp_path, "\ufeffstep, sync_s ,config\n\n0, 1.5 , tp=8\n1,2,tp=8\n\n")
    (s,) = load_series_csv(path)
    assert s.name == "sync_s" and s.values == (1.5, 2.0) and s.config == ("tp=8", "tp=8")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("\n\n", "the file is empty"),
        ("step,sync_s\n", "no data rows"),
        ("time,sync_s\n0,1\n", "no 'step' column"),
        ("step,config\n0,a\n", "no numeric column"),
        ("step\n0\n1\n", "no numeric column"),
        ("step,sync_s\n0,1\n1,fast\n", "line 3, column 'sync_s': 'fast' is not a number"),
        ("step,sync_s\n0,1\nfirst,2\n", "line 3, column 'step': 'first' is not a whole number"),
        ("step,sync_s\n0.5,1\n", "is not a whole number"),
        ("step,sync_s\n0,1\n0,2\n", "step 0 appears more than once"),
        ("step,sync_s\n1,1\n0,2\n1,3\n", "step 1 appears more than once"),
        ("step,sync_s\n0,1,2\n", "line 2 has 3 cells but the header has 2"),
        ("step,sync_s,sync_s\n0,1,2\n", "column 'sync_s' appears twice"),
        ("step,sync_s,mem_gib\n0,1,\n1,2,\n", "column 'mem_gib' has no values"),
    ],
)
def test_bad_input_is_one_line_input_error(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_series_csv(path)
    text_of_error = str(info.value)
    assert message in text_of_error
    assert path in text_of_error
    assert "\n" not in text_of_error
    assert ";" in text_of_error  # what is wrong; what to do
    assert info.value.exit_code == EXIT_USAGE


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_series_csv(str(tmp_path / "nope.csv"))


def test_directory_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        load_series_csv(str(tmp_path))


def test_binary_file_is_input_error(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(InputError, match="cannot be read as CSV"):
        load_series_csv(str(path))
