"""Per-step series from a metric export in CSV: W&B run history, W&B panel export and similar.

A ``.csv`` file is read as a metric export when its step column is named ``_step`` or
``global_step`` (not ``step``), or when a column is a framework key of a headline series
(``perf/update_weights_time``, ``timing_s/update_weights``, ``timing/broadcast``,
``timeperf/update_weights``, ``perf/rollout_time``, ``timing_s/gen``, ... : every key of
:data:`wsprof.importers.logs.SERIES_KEYS`). Every other CSV is read by
:func:`wsprof.importers.csv_series.load_series_csv`, unchanged.

Example (W&B history of a slime run)::

    _step,_runtime,rollout/step,perf/update_weights_time,perf/rollout_time,train/loss
    0,12.5,0,30.2,68.0,
    1,15.1,,,,0.71
    2,900.3,1,143.0,67.1,

- The step column is the first of :data:`STEP_COLUMNS` present (case-insensitive; ``Step``
  is ``step``); rows with an empty step cell are skipped, other steps must be whole numbers.
- Columns whose name starts with ``_`` (W&B's ``_runtime``, ``_timestamp``), ends in
  ``__MIN`` or ``__MAX`` (a panel export's band), or is ``Wall time`` are not metrics. A panel
  export's ``<run name> - <metric>`` is read as ``<metric>``; a metric in several columns
  (several runs) is read from the first.
- A cell that is empty, text, ``nan`` or infinite is a missing value; a column with no number
  at all is left out. A step in several rows keeps, per metric, the last value; rows are
  sorted by step.
- Names, units and slime's one-step alignment of ``perf/update_weights_time`` are those of the
  log importer (:func:`wsprof.importers.logs.build_series`): ``weight_sync_s``, ``rollout_s``,
  ``step_s`` in seconds, every other metric under its own name. Step columns other than the
  one read (``global_step`` beside ``_step``) are not metrics; a step counter logged as a
  metric under another name is recognised by analysis (:mod:`wsprof.analysis.kinds`) and gets
  no finding.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable

from wsprof.errors import InputError, quote
from wsprof.importers.csv_series import numbered_rows, read_series_csv
from wsprof.importers.limits import ALWAYS_KEPT, MetricCap
from wsprof.importers.logs import SERIES_KEYS, Imported, build_series, parse_number

#: Step columns, the first present wins (compared case-insensitively): slime's
#: ``rollout/step``, verl's ``training/global_step`` (``ray_trainer.py``), W&B's ``_step``.
STEP_COLUMNS = (
    "step",
    "rollout/step",
    "global_step",
    "train/global_step",
    "training/global_step",
    "_step",
)
#: Step columns that alone make a CSV a metric export (``step`` is the plain CSV's).
EXPORT_STEP_COLUMNS = frozenset(STEP_COLUMNS) - {"step"}
#: Framework keys that make a CSV a metric export (the headline names themselves do not).
FRAMEWORK_KEYS = frozenset(k for name, keys in SERIES_KEYS.items() for k in keys if k != name)
#: Column-name suffixes of a W&B panel export's min/max band.
BAND_SUFFIXES = ("__MIN", "__MAX")
#: Columns that are never metrics (compared case-insensitively).
NOT_METRICS = frozenset({"wall time"})

_HINT = (
    "expected a header with a step column (step, _step or global_step) and metric columns "
    "such as perf/update_weights_time"
)


def metric_name(column: str) -> str:
    """The metric a column holds: ``run-7 - perf/rollout_time`` -> ``perf/rollout_time``.

    Args:
        column: a header cell.
    """
    return column.strip().rsplit(" - ", 1)[-1].strip()


def is_metrics_export(header: list[str]) -> bool:
    """Whether a CSV header is a metric export's (see the module docstring).

    Args:
        header: the header cells.
    """
    names = [metric_name(h) for h in header]
    lowered = {n.lower() for n in names}
    if "step" not in lowered and lowered & EXPORT_STEP_COLUMNS:
        return True
    return any(n in FRAMEWORK_KEYS for n in names)


def _first_row(path: str) -> list[str] | None:
    """The first non-blank row, or None when the file cannot be read as CSV."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            for row in csv.reader(f):
                if any(cell.strip() for cell in row):
                    return row
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def load_csv(path: str) -> Imported:
    """Read a ``.csv`` file: a metric export, or else a per-step CSV series.

    Args:
        path: the CSV file.

    Returns:
        The series; ``format`` is ``metrics-csv`` or ``csv``.

    Raises:
        InputError: as :func:`load_metrics_csv` or
            :func:`wsprof.importers.csv_series.load_series_csv` says.
    """
    header = _first_row(path)
    if header is None or not is_metrics_export(header):
        series, notes = read_series_csv(path)
        return Imported(tuple(series), tuple(notes), "csv")
    return load_metrics_csv(path)


def _step_of(path: str, line_no: int, column: str, cell: str) -> int | None:
    text = cell.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value) or abs(value) >= 1e18:
        raise InputError(
            f"{path}: line {line_no}, column {quote(column)}: {quote(text)} is not a whole "
            "number; give each row its integer step (or leave the cell empty)"
        )
    return int(value)


def _metric_columns(
    path: str, header: list[str]
) -> tuple[int, dict[str, int], list[str], MetricCap]:
    """The step column, metric name -> column read (at most
    :data:`~wsprof.importers.limits.MAX_METRICS`, headline keys wherever they are), names in
    several columns, and the cap that says what was left out."""
    lowered = [h.lower() for h in header]
    step_name = next((c for c in STEP_COLUMNS if c in lowered), None)
    if step_name is None:
        raise InputError(f"{path}: no step column (tried {', '.join(STEP_COLUMNS)}); {_HINT}")
    step_col = lowered.index(step_name)
    columns: dict[str, int] = {}
    repeated: list[str] = []
    cap = MetricCap(always=ALWAYS_KEPT | FRAMEWORK_KEYS)
    for i, name in enumerate(header):
        if (
            i == step_col
            or not name
            or name.startswith("_")
            or name.endswith(BAND_SUFFIXES)
            or name.lower() in NOT_METRICS
            or name.lower() in STEP_COLUMNS
        ):
            continue
        if name in columns:
            repeated.append(name)
        elif cap.admit(name):
            columns[name] = i
    return step_col, columns, repeated, cap


def _read_records(
    path: str,
    rows: Iterable[tuple[int, list[str]]],
    header: list[str],
    step_col: int,
    columns: dict[str, int],
) -> dict[int, dict[str, float]]:
    """Step -> metric -> last value, streamed row by row (no row kept as text)."""
    records: dict[int, dict[str, float]] = {}
    for line_no, row in rows:
        if step_col >= len(row):
            continue
        step = _step_of(path, line_no, header[step_col], row[step_col])
        if step is None:
            continue
        values = records.setdefault(step, {})
        for name, i in columns.items():
            value = parse_number(row[i].strip()) if i < len(row) else None
            if value is not None:
                values[name] = value
    return records


def load_metrics_csv(path: str) -> Imported:
    """Read a metric export (see the module docstring for the columns read).

    Args:
        path: the CSV file.

    Returns:
        The series and notes (which column each headline series is).

    Raises:
        InputError: the file cannot be read as CSV, has no step column, a step that is not a
            whole number, or no number in any metric column. The message is one line.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = numbered_rows(f)
            first = next(rows, None)
            if first is None:
                raise InputError(f"{path}: the file is empty; {_HINT}")
            header = [metric_name(h) for h in first[1]]
            step_col, columns, repeated, cap = _metric_columns(path, header)
            records = _read_records(path, rows, header, step_col, columns)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot be read as CSV ({e}); {_HINT}") from e
    records = {s: v for s, v in records.items() if v}
    if not records:
        raise InputError(
            f"{path}: no number in any metric column (step column {quote(header[step_col])}); "
            f"{_HINT}"
        )
    series, notes = build_series(records)
    if not series:
        raise InputError(
            f"{path}: the only value is slime's weight sync before training (no training step "
            "to give it to); give an export of at least two steps"
        )
    steps = sorted(records)
    head = (
        f"read as a metric export: step column {header[step_col]!r}, {len(steps)} steps "
        f"({steps[0]}-{steps[-1]}), {len(series)} metrics"
    )
    left_out = cap.note("metric columns")
    if left_out:
        notes.append(left_out)
    if repeated:
        notes.append(
            f"{len(repeated)} metric(s) in several columns (several runs?), the first "
            f"read: {', '.join(repeated[:3])}{', ...' if len(repeated) > 3 else ''}"
        )
    return Imported(tuple(series), (head, *notes), "metrics-csv")
