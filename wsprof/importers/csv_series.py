"""Per-step series from a CSV file.

Format (``shared/cases/README.md``): a header row; a ``step`` column (first by convention) with
the integer step of each row; numeric columns whose name ends in a unit (``update_weights_time_s``,
``reserved_gib``, ...); optionally a text column ``config`` naming the configuration each step
ran with, which applies to every series. Empty cells are missing values (NaN, dropped by the
analysis). Rows may come in any order; they are sorted by step.

The unit also tells analysis what a column measures (:mod:`wsprof.analysis.kinds`): a time
unit makes a duration, a byte unit memory, ``_count`` a count of resources held; a column whose
name and unit say nothing is shown but gets no finding.

Example::

    step,update_weights_time_s,rollout_time_s
    0,143,68
    1,363,67.1
"""

from __future__ import annotations

import csv
import math
import os

from wsprof.contracts.series import Series, imported_series
from wsprof.contracts.units import UNIT_WORDS, unit_of_word
from wsprof.errors import InputError, quote

#: Name of the step column (compared case-insensitively).
STEP_COLUMN = "step"
#: Name of the optional text column naming each step's configuration.
CONFIG_COLUMN = "config"

#: Column-name suffix -> unit text (``_gib`` -> ``GiB``): ``_`` and each word of
#: :data:`wsprof.contracts.units.UNIT_WORDS` (the unit texts and their families live there).
UNIT_SUFFIXES: dict[str, str] = {"_" + word: text for word, text in UNIT_WORDS.items()}

_FORMAT_HINT = (
    "expected a header row 'step,<name>_<unit>,...' and one row per step (a step column, "
    "then a numeric column per series)"
)


def unit_of(column: str) -> str:
    """The unit named by a column's suffix (``reserved_gib`` -> ``GiB``), or ``""``.

    Args:
        column: the column name.

    Returns:
        The unit, or an empty string when the name has no known unit suffix.
    """
    head, sep, word = column.strip().rpartition("_")
    return unit_of_word(word) if sep and head else ""


def load_series_csv(path: str) -> list[Series]:
    """Read every numeric column of a per-step CSV file as a :class:`Series`.

    Args:
        path: the CSV file.

    Returns:
        One series per numeric column, in column order, rows sorted by step. A single data row
        is fine.

    Raises:
        InputError: the file is missing, unreadable or empty; it has no ``step`` column, no
            numeric column, a column with no values, a ragged row, a non-integer or duplicate
            step, or a cell that is not a number outside the ``config`` column. The message is
            one line: what is wrong and what to do.
    """
    header, rows = _read_rows(path)
    step_col, config_col, value_cols = _columns(path, header)
    records: list[tuple[int, list[float], str | None]] = []
    for line_no, row in rows:
        if len(row) != len(header):
            raise InputError(
                f"{path}: line {line_no} has {len(row)} cells but the header has {len(header)}; "
                "give every row one cell per column"
            )
        step = _parse_step(path, line_no, row[step_col])
        values = [_parse_value(path, line_no, header[c], row[c]) for c in value_cols]
        config = row[config_col].strip() if config_col is not None else None
        records.append((step, values, config))
    records.sort(key=lambda r: r[0])
    _check_unique_steps(path, [r[0] for r in records])
    for j, c in enumerate(value_cols):
        if all(math.isnan(r[1][j]) for r in records):
            raise InputError(
                f"{path}: column {quote(header[c])} has no values; fill it or remove the column"
            )
    steps = tuple(r[0] for r in records)
    configs = tuple(r[2] or "" for r in records) if config_col is not None else None
    return [
        imported_series(
            header[c].strip(),
            unit_of(header[c]),
            steps,
            tuple(r[1][j] for r in records),
            config=configs,
        )
        for j, c in enumerate(value_cols)
    ]


def _read_rows(path: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and non-blank data rows (with their 1-based line numbers)."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file; check the path")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give the path of a .csv file")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            lines = [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot be read as CSV ({e}); {_FORMAT_HINT}") from e
    lines = [(n, row) for n, row in lines if any(cell.strip() for cell in row)]
    if not lines:
        raise InputError(f"{path}: the file is empty; {_FORMAT_HINT}")
    header = [cell.strip() for cell in lines[0][1]]
    if len(lines) == 1:
        raise InputError(f"{path}: a header but no data rows; add one row per step")
    return header, lines[1:]


#: Header cells an error message lists before ``...``.
_MAX_HEADER_CELLS_SHOWN = 6


def _header_excerpt(header: list[str]) -> str:
    """The first header cells, quoted (a cell may hold a newline or be long)."""
    shown = ", ".join(quote(h, 30) for h in header[:_MAX_HEADER_CELLS_SHOWN])
    return shown + (", ..." if len(header) > _MAX_HEADER_CELLS_SHOWN else "")


def _columns(path: str, header: list[str]) -> tuple[int, int | None, list[int]]:
    """Indexes of the step column, the config column (or None) and the value columns."""
    lowered = [h.lower() for h in header]
    dup = sorted({h for h in lowered if lowered.count(h) > 1})
    if dup:
        raise InputError(f"{path}: column {quote(dup[0])} appears twice; give each column one name")
    if STEP_COLUMN not in lowered:
        raise InputError(
            f"{path}: no 'step' column (header: {_header_excerpt(header)}); "
            "make the first column 'step' with the step number of each row"
        )
    step_col = lowered.index(STEP_COLUMN)
    config_col = lowered.index(CONFIG_COLUMN) if CONFIG_COLUMN in lowered else None
    value_cols = [i for i in range(len(header)) if i not in (step_col, config_col)]
    if not value_cols:
        raise InputError(
            f"{path}: no numeric column besides 'step'; add a column such as 'sync_time_s'"
        )
    return step_col, config_col, value_cols


def _parse_step(path: str, line_no: int, cell: str) -> int:
    text = cell.strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        raise InputError(
            f"{path}: line {line_no}, column 'step': {quote(text)} is not a whole number; "
            "give each row its integer step"
        )
    return int(value)


def _parse_value(path: str, line_no: int, column: str, cell: str) -> float:
    text = cell.strip()
    if not text:
        return math.nan  # a missing value: dropped by the analysis
    try:
        return float(text)
    except ValueError:
        raise InputError(
            f"{path}: line {line_no}, column {quote(column)}: {quote(text)} is not a number; "
            f"only the '{CONFIG_COLUMN}' column may hold text (leave a cell empty if missing)"
        ) from None


def _check_unique_steps(path: str, steps: list[int]) -> None:
    """Steps are sorted; raise on the first one that appears twice."""
    for a, b in zip(steps, steps[1:], strict=False):
        if a == b:
            raise InputError(
                f"{path}: step {a} appears more than once; keep one row per step "
                "(e.g. aggregate repeated measurements first)"
            )
