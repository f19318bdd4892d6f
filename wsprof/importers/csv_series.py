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
import itertools
import math
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from wsprof.contracts.series import Series, imported_series
from wsprof.contracts.units import UNIT_WORDS, unit_of_word
from wsprof.errors import InputError, quote
from wsprof.importers.limits import MetricCap

#: Name of the step column (compared case-insensitively).
STEP_COLUMN = "step"
#: Name of the optional text column naming each step's configuration.
CONFIG_COLUMN = "config"
#: Steps are below this in magnitude (they are held as 64-bit integers; 10^18 as in
#: :mod:`wsprof.importers.metrics_csv`).
MAX_STEP = 10**18

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
        is fine. At most :data:`~wsprof.importers.limits.MAX_METRICS` columns
        (:func:`read_series_csv` says which were left out).

    Raises:
        InputError: as :func:`read_series_csv`.
    """
    return read_series_csv(path)[0]


def numbered_rows(f: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """The rows of an open CSV file that hold anything but blanks, each with the number of its
    (last) line, read one at a time (:mod:`csv` quoting, as Excel and pandas write it)."""
    reader = csv.reader(f)
    return ((reader.line_num, row) for row in reader if any(c.strip() for c in row))


def read_series_csv(path: str) -> tuple[list[Series], list[str]]:
    """Read a per-step CSV file, streamed row by row into one float array per column.

    No row is kept as text: memory is one 8-byte value per kept cell (and the config label of
    each row). At most :data:`~wsprof.importers.limits.MAX_METRICS` value columns are read
    (the headline series first, then in column order); the cells of the others are not
    parsed, and a note names them.

    Args:
        path: the CSV file.

    Returns:
        One series per numeric column read (column order, rows sorted by step), and notes.

    Raises:
        InputError: the file is missing, unreadable or empty; it has no ``step`` column, no
            numeric column, a column with no values, a ragged row, a non-integer or duplicate
            step, or a cell that is not a number outside the ``config`` column (in a column
            read). The message is one line: what is wrong and what to do.
    """
    _check_file(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = numbered_rows(f)
            first = next(rows, None)
            if first is None:
                raise InputError(f"{path}: the file is empty; {_FORMAT_HINT}")
            header = [cell.strip() for cell in first[1]]
            second = next(rows, None)
            if second is None:
                raise InputError(f"{path}: a header but no data rows; add one row per step")
            rest = itertools.chain([second], rows)
            step_col, config_col, value_cols = _columns(path, header)
            cap = MetricCap()  # headline columns kept wherever they are, then column order
            kept = [c for c in value_cols if cap.admit(header[c])]
            table = _read_table(path, rest, header, step_col, config_col, kept)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot be read as CSV ({e}); {_FORMAT_HINT}") from e
    note = cap.note("columns")
    steps_arr, values, configs = table
    order = np.argsort(steps_arr, kind="stable")
    steps_sorted = steps_arr[order]
    dup = np.flatnonzero(steps_sorted[1:] == steps_sorted[:-1])
    if dup.size:
        raise InputError(
            f"{path}: step {int(steps_sorted[dup[0]])} appears more than once; keep one row per "
            "step (e.g. aggregate repeated measurements first)"
        )
    for c, col in zip(kept, values, strict=True):
        if np.isnan(col).all():
            raise InputError(
                f"{path}: column {quote(header[c])} has no values; fill it or remove the column"
            )
    steps = tuple(steps_sorted.tolist())
    config = None if configs is None else tuple(configs[i] for i in order.tolist())
    series = [
        imported_series(
            header[c].strip(), unit_of(header[c]), steps, tuple(col[order].tolist()), config=config
        )
        for c, col in zip(kept, values, strict=True)
    ]
    return series, [note] if note else []


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file; check the path")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give the path of a .csv file")


_Table = tuple[npt.NDArray[np.int64], list[npt.NDArray[np.float64]], list[str] | None]


def _read_table(
    path: str,
    rows: Iterable[tuple[int, list[str]]],
    header: list[str],
    step_col: int,
    config_col: int | None,
    kept: list[int],
) -> _Table:
    """Steps, one float array per kept column and the config labels, in file order."""
    steps = array("q")
    cols = [array("d") for _ in kept]
    configs: list[str] | None = [] if config_col is not None else None
    labels: dict[str, str] = {}  # one string object per distinct config label
    width = len(header)
    for line_no, row in rows:
        if len(row) != width:
            raise InputError(
                f"{path}: line {line_no} has {len(row)} cells but the header has {width}; "
                "give every row one cell per column"
            )
        steps.append(_parse_step(path, line_no, row[step_col]))
        for col, c in zip(cols, kept, strict=True):
            cell = row[c]
            try:
                col.append(float(cell))
            except ValueError:
                col.append(_parse_value(path, line_no, header[c], cell))
        if configs is not None and config_col is not None:
            label = row[config_col].strip()
            configs.append(labels.setdefault(label, label))
    return (
        np.frombuffer(steps, dtype=np.int64),
        [np.frombuffer(col, dtype=np.float64) for col in cols],
        configs,
    )


#: Header cells an error message lists before ``...``.
_MAX_HEADER_CELLS_SHOWN = 6


def _header_excerpt(header: list[str]) -> str:
    """The first header cells, quoted (a cell may hold a newline or be long)."""
    shown = ", ".join(quote(h, 30) for h in header[:_MAX_HEADER_CELLS_SHOWN])
    return shown + (", ..." if len(header) > _MAX_HEADER_CELLS_SHOWN else "")


def _columns(path: str, header: list[str]) -> tuple[int, int | None, list[int]]:
    """Indexes of the step column, the config column (or None) and the value columns."""
    lowered = [h.lower() for h in header]
    dup = sorted(h for h, k in Counter(lowered).items() if k > 1)  # O(n): 100,000 columns
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
    if not math.isfinite(value) or value != int(value) or abs(value) >= MAX_STEP:
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
