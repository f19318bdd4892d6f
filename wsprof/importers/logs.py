"""Per-step series from the text log of a training run: slime, verl, OpenRLHF, AReaL.

The format is detected from the lines themselves (the one with the most step lines wins).
Every line is cleaned first: ANSI colour codes, Ray's prefixes (``(pid=1234)``,
``(RayTrainWorker pid=1234, ip=10.0.0.1)``, ``(TaskRunner pid=99)``) and Ray's
``[repeated 3x across cluster]`` suffix are removed; a timestamp or logger prefix before the
step line is fine. Every other line is ignored. Accepted step lines:

- **slime** (``slime/observability/train_metric_utils.py``, ``rollout_metrics.py``)::

      perf 3: {'perf/update_weights_time': 966.1, 'perf/rollout_time': 68.0, ...}

  a Python dict repr or JSON. The rollout manager and the actor each log a ``perf N`` line for
  rollout ``N``: they are merged.
- **verl** (``verl/utils/logger/aggregate_logger.py``, ``concat_dict_to_str``)::

      step:3 - timing_s/gen:68.0 - timing_s/update_weights:966.1 - timing_s/step:1100.2

  values as ``pprint`` writes them, ``np.float64(966.1)`` included.
- **OpenRLHF** (``openrlhf/trainer/ppo_trainer.py``)::

      Global step 3: {'timing/generation': 68.0, 'timing/broadcast': 966.1, ...}

- **AReaL** (``areal/utils/stats_logger.py``): a line ``Train step 3/100 done.`` then table
  rows, up to the next such line, of key/value pairs, either between pipes (``|`` or the
  ``│`` of tabulate's ``fancy_grid``, several pairs per row)::

      │ timeperf/update_weights │ 9.6610e+02 │ timeperf/rollout │ 6.8000e+01 │

  or separated by whitespace, each key holding a ``/``: ``timeperf/update_weights  966.1``.

Values are numbers (``1``, ``-2.5``, ``1e-3``) optionally wrapped as ``np.float64(...)`` or
``tensor(...)``; ``nan`` and ``inf`` (and text, booleans, None) are missing values. Steps are as
the framework prints them (slime counts from 0, the others from 1); a step logged twice keeps,
per metric, the last value; steps are sorted.

Series names (:data:`SERIES_KEYS`): the weight-sync time becomes ``weight_sync_s``, the rollout
(generation) time ``rollout_s`` and the step time ``step_s``, in seconds, the names the growth
findings judge; every other numeric metric keeps its own name, with unit ``s`` for the
frameworks' timers (``timing_s/*``, ``timing/*``, ``timeperf/*``, ``perf/*_time``) and else the
unit its suffix names (:func:`wsprof.importers.csv_series.unit_of`).

What each metric measures (a duration, bytes, a resource count, a step counter, a quality
metric, a learning rate, a rate) is decided by analysis from these names and units
(:func:`wsprof.analysis.kinds.series_kind`): only durations, bytes and resource counts can get
findings, so ``training/global_step``, ``critic/advantages/*`` or ``timing_per_token_ms/*`` of a
healthy run are shown but never called a leak.

slime's alignment: the actor logs its ``perf N`` line at the end of training step ``N``, with
every timer since the previous line, so ``perf/update_weights_time`` on line ``N`` is the weight
sync that ran after training step ``N-1`` (before rollout ``N``). It is moved to step ``N-1``:
``weight_sync_s`` of step ``k`` is the sync that pushed the weights of training step ``k``. The
value on the first line (the sync before any training) is dropped, and the last step's sync,
logged on no line, is missing. verl, OpenRLHF and AReaL log the sync of step ``N`` on line ``N``.

Pure functions over lines (:func:`parse_log_lines`); :func:`load_log` reads a file. No torch.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from wsprof import frameworks
from wsprof.contracts.series import ROLLOUT_S, STEP_S, WEIGHT_SYNC_S, Series, imported_series
from wsprof.errors import InputError, quote
from wsprof.frameworks import LineShape, LogFormat
from wsprof.importers.csv_series import unit_of
from wsprof.importers.limits import ALWAYS_KEPT, MetricCap

#: The headline series, in the order they are listed.
HEADLINE_SERIES = (WEIGHT_SYNC_S, ROLLOUT_S, STEP_S)
#: Headline series name -> the framework keys it is read from, first present wins (the others
#: keep their own names). The name itself comes first: an export may already use it. From the
#: registry (:attr:`wsprof.frameworks.Framework.metric_keys`).
SERIES_KEYS: dict[str, tuple[str, ...]] = frameworks.series_keys(HEADLINE_SERIES)

#: Keys always read, whatever the number of metrics (:class:`MetricCap`): every key of a
#: headline series.
_ALWAYS_KEYS = ALWAYS_KEPT | {k for keys in SERIES_KEYS.values() for k in keys}

_METRIC_KEYS = [m for fw in frameworks.FRAMEWORKS for m in fw.metric_keys]
#: Keys logged late, and by how many steps their values move back (slime: line N holds the
#: sync that ran before rollout N, i.e. after training step N-1).
SHIFTED_KEYS: dict[str, int] = {m.key: m.shift_steps for m in _METRIC_KEYS if m.shift_steps}
_SHIFT_NOTES = {m.key: m.note for m in _METRIC_KEYS if m.shift_steps}

#: Words of a metric's last name part that make it a rate or a ratio, never a time.
_RATE_WORDS = ("ratio", "frac", "_per_", "tflops", "throughput", "mfu")
#: Framework keys that are step times in seconds though their name has no unit (verl's
#: ``compute_throughout_metrics``: ``perf/time_per_step`` is ``timing_raw["step"]``).
STEP_TIME_KEYS = frameworks.step_time_keys()
#: Unit suffixes a framework key never means: ``global_seqlen/balanced_min`` is a minimum, not
#: minutes (verl), ``*_h`` a height; CSV columns keep them (:func:`unit_of`).
_NOT_KEY_UNITS = frozenset({"min", "h"})

#: Longest line read whole; the rest of a longer one is skipped (a log is never loaded whole).
MAX_LINE_CHARS = 1 << 20
#: Bytes at the start of a file searched for a NUL byte (a binary file).
BINARY_PROBE_BYTES = 8192
#: Longest step number, in digits.
MAX_STEP_DIGITS = 18

#: Longest number token taken as a value, in characters: longer digit runs are ids, hashes or
#: damage, not a metric (a float holds 17 significant digits; 64 leaves room for a sign, a
#: fraction and an exponent). Every quantifier of :data:`_NUM` is bounded by it, so matching a
#: token costs O(64) whatever follows it (``\d+\.?\d*`` took 11 s on 16,000 digits).
MAX_NUMBER_CHARS = 64

_D = rf"\d{{1,{MAX_NUMBER_CHARS}}}"  # a digit run of a number
_EXP = r"(?:[eE][-+]?\d{1,4})?"
_NUM = (
    rf"[-+]?(?:{_D}(?:\.\d{{0,{MAX_NUMBER_CHARS}}})?{_EXP}|\.{_D}{_EXP}"
    r"|[nN]a[nN]|[iI]nf(?:inity)?)"
)
#: A value: a number, optionally inside a wrapper call (``np.float64(1.5)``, ``tensor(1.5, ...)``).
_VALUE = rf"(?:[A-Za-z_][\w.]{{0,40}}\(\s*)?(?P<val>{_NUM})"
_NUM_RE = re.compile(_NUM)
_STEP = rf"(?P<step>\d{{1,{MAX_STEP_DIGITS}}})"

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]?")
#: Ray's prefix; its parts bounded (a prefix is short), so a long line of ``pid=1,`` is no
#: quadratic search.
_RAY_PREFIX_RE = re.compile(r"^\s*\((?:[^()]{0,200}?\s)?pid=\d{1,10}(?:,[^()]{0,500})?\)\s*")
#: Searched from each ``[`` only (no leading ``\s*``: tried at every blank of a long run of
#: blanks, that was quadratic); the blanks before it are stripped after.
_RAY_REPEATED_RE = re.compile(r"\[repeated \d{1,12}x across cluster\]\s*$")


#: ``'key': value`` (or ``"key": value``) inside a dict repr or JSON object.
_DICT_PAIR_RE = re.compile(
    rf"""(?P<q>['"])(?P<key>[^'"\\\n]{{1,200}})(?P=q)\s*:\s*{_VALUE}(?=\s*(?:\)\s*)?(?:[,}}\])]|$))"""
)
#: ``key:value`` between verl's `` - `` separators (the key may hold ``:``; the last one splits).
_VERL_PAIR_RE = re.compile(rf"(?P<key>\S(?:.{{0,200}}\S)?):{_VALUE}\)?")
#: A metric name in a table row.
_KEY_RE = re.compile(r"[A-Za-z_][\w./@+:-]{0,200}")


def clean_line(line: str) -> str:
    """A log line without ANSI codes, Ray's prefixes and repeat suffix, or line end.

    Args:
        line: one raw line.

    Returns:
        The cleaned line (its content; leading text other than Ray's prefix is kept).
    """
    text = _ANSI_RE.sub("", line) if "\x1b" in line else line
    for _ in range(3 if "pid=" in text else 0):  # a driver may prefix a worker's prefixed line
        stripped = _RAY_PREFIX_RE.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    if "[repeated " in text:
        m = _RAY_REPEATED_RE.search(text)
        if m:
            text = text[: m.start()]
    return text.strip()


def parse_number(text: str) -> float | None:
    """The value of a number as logged, or None when it is not one or not finite.

    Args:
        text: ``1``, ``-2.5e3``, ``nan``, ...

    Returns:
        The float, or None for text that is no number, ``nan`` or an infinity.
    """
    if len(text) > MAX_NUMBER_CHARS or not _NUM_RE.fullmatch(text):
        return None
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _dict_pairs(body: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for m in _DICT_PAIR_RE.finditer(body):
        value = parse_number(m.group("val"))
        if value is not None:
            out[m.group("key")] = value
    return out


def _dash_pairs(body: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for piece in body.split(" - "):
        pm = _VERL_PAIR_RE.fullmatch(piece.strip())
        if pm:
            value = parse_number(pm.group("val"))
            if value is not None:
                out[pm.group("key")] = value
    return out


#: Every format tried, in the order a tie is broken (:func:`wsprof.frameworks.log_formats`).
FORMATS: tuple[LogFormat, ...] = frameworks.log_formats()
#: Format name -> its compiled step line (``{step}`` filled in).
_STEP_RES: dict[str, re.Pattern[str]] = {
    f.name: re.compile(f.step_line.replace("{step}", _STEP)) for f in FORMATS
}


def parse_step_line(line: str, fmt: LogFormat) -> tuple[int, dict[str, float]] | None:
    """A step line of ``fmt`` -> (step, numeric values), else None.

    A :attr:`~wsprof.frameworks.LineShape.TABLE` step line holds no values (they follow in
    table rows): its values are ``{}``.

    Args:
        line: a cleaned line (:func:`clean_line`).
        fmt: the format (:data:`FORMATS`).
    """
    m = _STEP_RES[fmt.name].search(line)
    if not m:
        return None
    step = int(m.group("step"))
    if fmt.shape is LineShape.TABLE:
        return step, {}
    body = m.group("body")
    return step, _dict_pairs(body) if fmt.shape is LineShape.DICT else _dash_pairs(body)


def parse_table_row(line: str) -> dict[str, float] | None:
    """Key/value pairs of one table row, or None when the line is not such a row.

    A row is ``| key | value | key | value |`` (``|`` or ``│``; empty trailing cells are fine)
    or ``key value [key value ...]`` separated by whitespace, where every key holds a ``/``.

    Args:
        line: a cleaned line (:func:`clean_line`).
    """
    if line[:1] in ("|", "│"):
        cells = [c.strip() for c in re.split(r"[|│]", line)[1:]]
        if cells and not cells[-1]:
            cells.pop()
        out: dict[str, float] = {}
        for key, text in zip(cells[::2], cells[1::2]):
            value = parse_number(text)
            if key and value is not None and _KEY_RE.fullmatch(key):
                out[key] = value
        return out or None
    tokens = line.split()
    if not tokens or len(tokens) % 2:
        return None
    pairs: dict[str, float] = {}
    for key, text in zip(tokens[::2], tokens[1::2]):
        value = parse_number(text)
        if value is None or "/" not in key or not _KEY_RE.fullmatch(key):
            return None
        pairs[key] = value
    return pairs


@dataclass(frozen=True)
class Imported:
    """Per-step series read from a file, and what a reader of the verdict should know.

    Attributes:
        series: one per metric, steps sorted (see the module docstring for names and units).
        notes: how the file was read (format, steps, which key each headline series is).
        format: ``slime`` | ``verl`` | ``OpenRLHF`` | ``AReaL`` | ``csv`` | ``metrics-csv``.
    """

    series: tuple[Series, ...]
    notes: tuple[str, ...]
    format: str


@dataclass
class _Collected:
    """What one format found in a log: step -> metric -> last value, and its step lines."""

    records: dict[int, dict[str, float]]
    lines: int = 0
    cap: MetricCap = field(default_factory=lambda: MetricCap(always=_ALWAYS_KEYS))

    def add(self, step: int, values: dict[str, float]) -> None:
        """Keep ``values`` of ``step`` (last value wins), for the metrics the cap admits."""
        kept = {k: v for k, v in values.items() if self.cap.admit(k)}
        self.records.setdefault(step, {}).update(kept)


def _collect(lines: Iterable[str]) -> dict[str, _Collected]:
    found = {f.name: _Collected({}) for f in FORMATS}
    table_step: dict[str, int] = {}  # table format -> its current step
    for raw in lines:
        line = clean_line(raw)
        if not line:
            continue
        stepped = False
        for fmt in FORMATS:
            hit = parse_step_line(line, fmt) if fmt.marker in line else None
            if hit is None:
                continue
            got = found[fmt.name]
            got.lines += 1
            got.add(hit[0], hit[1])
            if fmt.shape is LineShape.TABLE:
                table_step[fmt.name] = hit[0]
                stepped = True
        if table_step and not stepped:
            row = parse_table_row(line)
            if row:
                for name, step in table_step.items():
                    found[name].add(step, row)
    return found


def metric_unit(key: str) -> str:
    """The unit of a metric: ``s`` for the headline series and the frameworks' timers.

    Args:
        key: a series name or framework key (``timing_s/gen``, ``perf/actor_train_time``).

    Returns:
        ``s`` (also ``perf/time_per_step``), ``ms`` (``timing_per_token_ms/*``), else the unit
        its suffix names (never minutes or hours: ``_min`` is a statistic there), or ``""``.
    """
    low = key.strip().lower()
    last = low.rsplit("/", 1)[-1]
    if key in SERIES_KEYS or low in STEP_TIME_KEYS:
        return "s"
    if any(w in last for w in _RATE_WORDS):
        return ""  # a rate or ratio (tokens_per_s, wait_time_ratio, tflops), not a time
    if frameworks.per_token_prefix(low) is not None:
        return "ms"
    if frameworks.is_timer_key(low):  # timing_s/*, perf/*_time: seconds
        return "s"
    unit = unit_of(low)
    return "" if unit in _NOT_KEY_UNITS else unit


def build_series(records: dict[int, dict[str, float]]) -> tuple[list[Series], list[str]]:
    """Series from per-step metrics: headline names given, slime's sync moved back a step.

    Args:
        records: step -> metric key -> value (finite floats).

    Returns:
        The series (headline ones first, in :data:`SERIES_KEYS` order, then the others in the
        order first seen) and notes saying which key each headline series was read from.
    """
    seen: dict[str, None] = {}
    for values in records.values():
        for key in values:
            seen.setdefault(key, None)
    rename: dict[str, str] = {}
    for name, aliases in SERIES_KEYS.items():
        chosen = next((k for k in aliases if k in seen), None)
        if chosen is not None:
            rename[chosen] = name
    renamed = [f"{name} = {key}" for key, name in rename.items() if key != name]
    notes = [f"series from keys: {', '.join(renamed)}"] if renamed else []
    first_step = min(records, default=0)
    points: dict[str, list[tuple[int, float]]] = {}
    for step in sorted(records):
        for key, value in records[step].items():
            shift = SHIFTED_KEYS.get(key, 0) if key in rename else 0
            if step - shift < first_step:
                continue  # slime's first line: the sync before any training
            points.setdefault(rename.get(key, key), []).append((step - shift, value))
    for key, shift in SHIFTED_KEYS.items():
        if key in rename and shift:
            notes.append(
                f"{rename[key]} of step k is {key} logged at step k+{shift} "
                f"({_SHIFT_NOTES[key]}); the one logged at step "
                f"{first_step}, the sync before training, is dropped"
            )
    order = [n for n in SERIES_KEYS if n in points] + [
        k for k in seen if k not in rename and k in points
    ]
    series = []
    for name in order:
        pts = sorted(points[name])
        series.append(
            imported_series(
                name, metric_unit(name), tuple(p[0] for p in pts), tuple(p[1] for p in pts)
            )
        )
    return series, notes


def _formats_hint() -> str:
    return "; ".join(f"{f.name} '{f.example}'" for f in FORMATS)


#: What to do with a file that is no known input.
NOT_A_LOG_HINT = (
    "give a run folder, a .wsprof trace, a .csv series or the log of a "
    + ", ".join(f.name for f in FORMATS[:-1])
    + f" or {FORMATS[-1].name} run"
)


def parse_log_lines(lines: Iterable[str], source: str) -> Imported:
    """Detect the format of a training log and read its per-step series.

    Args:
        lines: the log's lines (with or without line ends).
        source: the path, for messages.

    Returns:
        The series of the format with the most step lines (ties: :data:`FORMATS` order).

    Raises:
        InputError: no line of any format, or step lines without a numeric value. One line:
            the formats tried and what a step line looks like.
    """
    found = _collect(lines)
    best = max(
        FORMATS,
        key=lambda f: (
            found[f.name].lines > 0 and any(found[f.name].records.values()),
            found[f.name].lines,
            -FORMATS.index(f),
        ),
    )
    got = found[best.name]
    if not got.lines:
        raise InputError(
            f"{source}: neither a wsprof trace nor a CSV series nor a training log with step "
            f"lines (tried {_formats_hint()}); {NOT_A_LOG_HINT}"
        )
    if not any(got.records.values()):
        raise InputError(
            f"{source}: {got.lines} {best.name} step line(s) but no numeric value in them "
            f"(expected {quote(best.example, 80)}); check the log is not cut or filtered"
        )
    records = {k: v for k, v in got.records.items() if v}
    series, notes = build_series(records)
    if not series:
        raise InputError(
            f"{source}: {got.lines} {best.name} step line(s) whose only value is slime's "
            "weight sync before training (no training step to give it to); give a log of at "
            "least two steps"
        )
    steps = sorted(records)
    head = (
        f"read as a {best.name} log: {got.lines} step lines, {len(steps)} steps "
        f"({steps[0]}-{steps[-1]}), {len(series)} metrics"
    )
    left_out = got.cap.note()
    if left_out:
        notes.append(left_out)
    if not any(s.name == WEIGHT_SYNC_S for s in series):
        notes.append(
            "no weight-sync time in this log (keys tried: "
            + ", ".join(SERIES_KEYS[WEIGHT_SYNC_S][1:])
            + ")"
        )
    return Imported(tuple(series), (head, *notes), best.name)


def _read_lines(fh: IO[str]) -> Iterator[str]:
    """Lines of at most :data:`MAX_LINE_CHARS`; a longer line is skipped whole."""
    while True:
        line = fh.readline(MAX_LINE_CHARS)
        if not line:
            return
        if len(line) >= MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
            while True:
                rest = fh.readline(MAX_LINE_CHARS)
                if not rest or rest.endswith(("\n", "\r")):
                    break
            continue
        yield line


def load_log(path: str) -> Imported:
    """Read a training log file (see the module docstring for the formats).

    The file is read line by line (text, UTF-8; undecodable bytes are replaced), never whole.

    Args:
        path: the log file.

    Returns:
        The per-step series and notes (:func:`parse_log_lines`).

    Raises:
        InputError: the file is missing, unreadable, empty or binary (a NUL byte in its first
            8 KiB), or holds no step line of a known format. The message is one line.
    """
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file; check the path")
    try:
        with open(path, "rb") as fb:
            head = fb.read(BINARY_PROBE_BYTES)
        if not head:
            raise InputError(
                f"{path}: empty file (0 bytes), neither a wsprof trace nor a CSV series nor a "
                f"training log; {NOT_A_LOG_HINT}"
            )
        if b"\x00" in head:
            kind = (
                "a gzip-compressed file (gunzip it first)"
                if head[:2] == b"\x1f\x8b"
                else ("a binary file")
            )
            raise InputError(
                f"{path}: {kind}, neither a wsprof trace nor a CSV series nor a text log; "
                f"{NOT_A_LOG_HINT}"
            )
        with open(path, encoding="utf-8", errors="replace", newline=None) as fh:
            return parse_log_lines(_read_lines(fh), path)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}); check permissions") from e
