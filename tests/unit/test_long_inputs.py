"""Long and hostile series inputs, pure tier: log regexes on 64,000-digit tokens, a
100,000-column CSV, a log of many metric keys, growth of a 40,000-point series (issue 37,
items 3, 7, 8). Each test builds its input and bounds time or memory."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from wsprof.analysis import growth
from wsprof.analysis.growth import classify
from wsprof.importers.csv_series import read_series_csv
from wsprof.importers.limits import MAX_METRICS, MetricCap
from wsprof.importers.logs import MAX_NUMBER_CHARS, parse_log_lines, parse_number

#: Digits of the hostile number token (the issue's: over 150 s before).
DIGITS = 64_000
#: Seconds one hostile line may take (it took 11 s at 16,000 digits; now about 1 ms).
LINE_BUDGET_S = 1.0

_LONG = "1" * DIGITS
_LINES = {
    "slime": f"perf 3: {{'perf/update_weights_time': {_LONG}x, 'perf/rollout_time': 7.5}}",
    "openrlhf": (
        f"Global step 3: {{'timing/broadcast': {_LONG}.{_LONG}e5x, 'timing/generation': 7.5}}"
    ),
    "verl": f"step:3 - timing_s/update_weights:{_LONG}x - timing_s/gen:7.5",
    "areal": (
        f"Train step 3/9 done.\n│ timeperf/update_weights │ {_LONG}x │ timeperf/rollout │ 7.5 │"
    ),
    "ray prefix": "(" + " pid=1," * (DIGITS // 7) + "\nperf 3: {'perf/rollout_time': 7.5}",
    "repeat blanks": "perf 3: {'perf/rollout_time': 7.5}" + " " * DIGITS + "[repeated x",
}


@pytest.mark.parametrize("name", sorted(_LINES))
def test_64000_digit_token_is_no_value_and_fast(name: str) -> None:
    t0 = time.perf_counter()
    got = parse_log_lines(_LINES[name].split("\n"), "hostile.log")
    elapsed = time.perf_counter() - t0
    assert elapsed < LINE_BUDGET_S, f"{name}: {elapsed:.2f} s"
    values = {s.name: s.values for s in got.series}
    assert values == {"rollout_s": (7.5,)}  # the long token is no value; its neighbour is read


def test_number_tokens_capped_in_length() -> None:
    assert parse_number("1" * 20) == 1.0 * 11111111111111111111
    assert parse_number("1" * MAX_NUMBER_CHARS) is not None
    assert parse_number("1" * (MAX_NUMBER_CHARS + 1)) is None
    assert parse_number("1." + "5" * (MAX_NUMBER_CHARS - 2)) == pytest.approx(1.5555555)
    assert parse_number("-2.5e3") == -2500.0
    t0 = time.perf_counter()
    assert parse_number(_LONG + "x") is None
    assert time.perf_counter() - t0 < LINE_BUDGET_S


def _wide_csv(path: Path, columns: int, rows: int = 3) -> Path:
    names = [f"m{i}_s" for i in range(columns)]
    names[-1] = "weight_sync_s"  # a headline column at the far end is still read
    with path.open("w", encoding="utf-8") as f:
        f.write("step," + ",".join(names) + "\n")
        for step in range(rows):
            f.write(f"{step}," + ",".join([f"{1.0 + step}"] * columns) + "\n")
    return path


def test_100000_column_csv_reads_the_first_metrics_and_names_the_rest(tmp_path: Path) -> None:
    path = _wide_csv(tmp_path / "wide.csv", 100_000)
    before = path.read_bytes()
    t0 = time.perf_counter()
    series, notes = read_series_csv(str(path))
    elapsed = time.perf_counter() - t0
    assert elapsed < 20.0, f"{elapsed:.1f} s"  # hung in an O(n^2) duplicate check before
    names = [s.name for s in series]
    assert len(names) == MAX_METRICS + 1
    assert names[:2] == ["m0_s", "m1_s"] and names[-1] == "weight_sync_s"
    assert series[0].values == (1.0, 2.0, 3.0)
    (note,) = notes
    assert f"{100_000 - 1 - MAX_METRICS:,} columns not analysed" in note
    assert f"'m{MAX_METRICS}_s'" in note
    assert path.read_bytes() == before


def test_duplicate_column_still_refused_among_many(tmp_path: Path) -> None:
    path = tmp_path / "dup.csv"
    cols = [f"m{i}_s" for i in range(50_000)] + ["M7_S"]
    path.write_text("step," + ",".join(cols) + "\n0," + ",".join(["1"] * len(cols)) + "\n")
    with pytest.raises(Exception, match="'m7_s' appears twice"):
        read_series_csv(str(path))


def test_log_of_many_keys_keeps_the_cap_and_the_headline() -> None:
    keys = 3 * MAX_METRICS
    lines = []
    for step in (1, 2):
        lines.append(f"Train step {step}/2 done.")
        lines += [f"| timeperf/k{i} | {step}.0 |" for i in range(keys)]
        lines.append(f"| timeperf/update_weights | {10.0 * step} |")
    got = parse_log_lines(lines, "areal.log")
    names = [s.name for s in got.series]
    assert names[0] == "weight_sync_s"
    assert len(names) == MAX_METRICS + 1
    note = next(n for n in got.notes if "not analysed" in n)
    assert f"{keys - MAX_METRICS:,} metrics not analysed" in note
    assert f"'timeperf/k{MAX_METRICS}'" in note


def test_metric_cap_admits_headline_beyond_the_limit() -> None:
    cap = MetricCap(limit=2)
    assert [cap.admit(n) for n in ("a", "b", "c", "weight_sync_s", "a", "d")] == [
        True,
        True,
        False,
        True,
        True,
        False,
    ]
    assert cap.left_out == ["c", "d"]
    note = cap.note()
    assert note is not None and note.startswith("2 metrics not analysed") and "'c', 'd'" in note
    assert MetricCap().note() is None


def _peak_mib(fn: object) -> tuple[object, float, float]:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = fn()  # type: ignore[operator]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, time.perf_counter() - t0, peak / 2**20


#: Points of the long series (a long run's steps; the n x 2n/3 plateau matrix needed 8 GB).
LONG_N = 40_000
#: Peak memory classify() may take for it, MiB (O(n): about 30 MiB measured).
LONG_PEAK_MIB = 200.0


@pytest.mark.parametrize(
    ("shape", "accumulating"),
    [("linear", True), ("warmup_then_flat", False), ("flat", False), ("sawtooth", False)],
)
def test_growth_of_40000_points_is_bounded(shape: str, accumulating: bool) -> None:
    rng = np.random.default_rng(37)
    u = np.arange(LONG_N) / LONG_N
    f = {
        "linear": 10 + 90 * u,
        "warmup_then_flat": 10 + 90 * np.minimum(u, 0.3),
        "flat": np.full(LONG_N, 50.0),
        "sawtooth": 10 + 5 * (np.arange(LONG_N) % 20),
    }[shape]
    y = f * (1 + 0.02 * rng.standard_normal(LONG_N))
    v, elapsed, peak = _peak_mib(lambda: classify(y))
    assert elapsed < 30.0, f"{elapsed:.1f} s"
    assert peak < LONG_PEAK_MIB, f"{peak:.0f} MiB"
    assert v.shape == shape and v.accumulating is accumulating  # type: ignore[attr-defined]


def test_config_switching_every_step_is_bounded() -> None:
    n = 20_000
    y = np.full(n, 5.0) * (1 + 0.02 * np.random.default_rng(1).standard_normal(n))
    config = ["a" if i % 2 else "b" for i in range(n)]
    v, elapsed, peak = _peak_mib(lambda: classify(y, config=config))
    assert peak < LONG_PEAK_MIB, f"{peak:.0f} MiB"  # an n x n one-hot design was 3.2 GB
    assert not v.accumulating  # type: ignore[attr-defined]


def test_plateau_scan_matches_the_direct_regression() -> None:
    """The cumulative-sum scan gives each knot's least-squares line as the design matrix did."""
    rng = np.random.default_rng(5)
    x = np.cumsum(rng.integers(1, 4, 300)).astype(np.float64)
    y = (3 + np.minimum(x, 200) * 0.1) * (1 + 0.05 * rng.standard_normal(x.size))
    d = growth._prepare(x, y)
    last = 200
    slope, icpt, rss = growth._plateau_scan(d, last)
    ww = d.w**2
    for j in (1, 50, 123, last):
        z = np.minimum(0.0, x - x[j])
        design = np.column_stack([np.ones_like(z), z]) * d.w[:, None]
        (a, b), *_ = np.linalg.lstsq(design, y * d.w, rcond=None)
        r = float(np.sum(ww * (y - a - b * z) ** 2))
        assert slope[j - 1] == pytest.approx(b, rel=1e-7)
        assert icpt[j - 1] == pytest.approx(a, rel=1e-7)
        assert rss[j - 1] == pytest.approx(r, rel=1e-6)
