"""``wsprof diff`` as terminal text: verdict first, readable in 80 columns, control characters
escaped (:func:`wsprof.contracts.safe_text.escape_controls`)."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable, Sequence

from wsprof.analysis.diff import BASIS_STEP, Delta, DiffResult, ItemDiff, fmt_change_s, fmt_rel
from wsprof.contracts.safe_text import escape_controls
from wsprof.contracts.units import (
    fmt_bytes_decimal,
    fmt_duration,
    fmt_in_unit,
    fmt_pct,
    fmt_rate,
    fmt_us,
)
from wsprof.report.text import shorten_frame

WIDTH = 80
#: Rows listed per table; the rest are counted (``--format json`` lists every item).
MAX_ROWS = 12


#: A number and its unit (``140 ms``, ``+20 pts``): kept on one line when wrapping, as is
#: ``before -> after``.
_QUANTITY = re.compile(r"(\d) (?=(?:ns|µs|ms|s|min|pts)\b)")
#: Stands for the space inside a quantity while wrapping (not whitespace to textwrap).
_HOLD = "\x00"


def _wrap(text: str, indent: str = "", subsequent: str = "    ") -> list[str]:
    """Wrap at spaces only: paths, names and quantities stay whole for copying."""
    held = _QUANTITY.sub(lambda m: m.group(1) + _HOLD, text).replace(" -> ", f"{_HOLD}->{_HOLD}")
    return [
        line.replace(_HOLD, " ")
        for line in textwrap.wrap(
            held,
            WIDTH,
            initial_indent=indent,
            subsequent_indent=subsequent,
            break_on_hyphens=False,
            break_long_words=False,
        )
    ]


def range_option(role: str) -> str:
    """How the diff's output names a side's step range: the option of ``wsprof diff`` that
    gives it (``--before-steps``)."""
    return f"--{role}-steps"


def fmt_count(x: float | None) -> str:
    """Calls per step in at most 6 characters: ``20``, ``2.5``, ``12.3k``, ``1.2M``."""
    if x is None:
        return "-"
    if abs(x) >= 1e6:
        return f"{x / 1e6:.3g}M"
    if abs(x) >= 1e4:
        return f"{x / 1e3:.3g}k"
    if abs(x - round(x)) < 1e-9:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _share_change(d: Delta) -> str:
    return "-" if d.change is None else f"{d.change * 100:+.0f} pts"


def headline_rows(r: DiffResult) -> list[tuple[str, Delta, str]]:
    """The headline numbers a renderer shows: ``(name, delta, kind)`` with kind ``s`` (a
    time per step, or per second of wall time with the ``second`` basis), ``share``,
    ``bytes`` (per weight sync) or ``rate`` (bytes/s); only those known on a side. Weight
    sync appears once, here (no item repeats it)."""
    rows = [
        ("step time (median)", r.step_s, "s"),
        ("weight sync (mean)", r.weight_sync_s, "s"),
        ("rollout share (median)", r.rollout_share, "share"),
        ("in collectives", r.collective_s, "s"),
        ("bytes per sync (median)", r.sync_bytes, "bytes"),
        ("sync bandwidth (median)", r.sync_bandwidth, "rate"),
    ]
    return [row for row in rows if row[1].before is not None or row[1].after is not None]


def _headline_lines(r: DiffResult) -> list[str]:
    shown = headline_rows(r)
    if not shown:
        return []
    lines = ["", f"{r.per_words:<24} {'before':>10} {'after':>10} {'change':>10} {'rel':>6}"]
    for name, d, kind in shown:
        if kind == "share":
            fmt: Callable[[float | None], str] = fmt_pct
            change, rel = _share_change(d), ""
        elif kind in ("bytes", "rate"):
            fmt = fmt_bytes_decimal if kind == "bytes" else fmt_rate
            change, rel = "", fmt_rel(d)
        else:
            fmt, change, rel = fmt_duration, fmt_change_s(d.change), fmt_rel(d)
        lines.append(f"{name:<24} {fmt(d.before):>10} {fmt(d.after):>10} {change:>10} {rel:>6}")
    return lines


def _table(
    title: str,
    header: Sequence[str],
    items: Sequence[ItemDiff],
    name_width: int,
    cells: Callable[[ItemDiff], str],
    max_rows: int,
) -> list[str]:
    """A table of items: the name in ``name_width`` columns (a longer name gets a line of its
    own) and the numbers ``cells`` gives."""
    if not items:
        return []
    lines = ["", title, *header]
    for item in items[:max_rows]:
        name = item.name + (f" {item.detail}" if item.kind == "site" and item.detail else "")
        numbers = cells(item)
        if len(name) <= name_width:
            lines.append(f"{name:<{name_width}}{numbers}")
        else:
            lines.append(shorten_frame(name, WIDTH))
            lines.append(f"{'':<{name_width}}{numbers}")
    if len(items) > max_rows:
        lines.append(f"(+{len(items) - max_rows} more: --format json lists every item)")
    return lines


def _time_cells(d: Delta | None) -> str:
    if d is None:
        return f" {'-':>8} {'-':>8} {'-':>8} {'-':>5}"
    return (
        f" {fmt_duration(d.before):>8} {fmt_duration(d.after):>8} "
        f"{fmt_change_s(d.change):>8} {fmt_rel(d):>5}"
    )


def _calls_cells(d: Delta | None) -> str:
    if d is None:
        return f" {'-':>6} {'-':>6}"
    return f" {fmt_count(d.before):>6} {fmt_count(d.after):>6}"


def _op_cells(i: ItemDiff) -> str:
    med = i.median_us
    meds = f" {fmt_us(med.before if med else None):>8} {fmt_us(med.after if med else None):>8}"
    return _calls_cells(i.calls_per_step) + meds + _time_cells(i.s_per_step)


def _site_cells(i: ItemDiff) -> str:
    return _calls_cells(i.calls_per_step) + _time_cells(i.s_per_step)


def _frame_cells(i: ItemDiff) -> str:
    d = i.share
    if d is None:
        return ""
    return f" {fmt_pct(d.before):>6} {fmt_pct(d.after):>6} {_share_change(d):>8}"


def _series_cells(i: ItemDiff) -> str:
    if i.s_per_step is not None:
        return _time_cells(i.s_per_step)
    d = i.value
    if d is None:
        return ""
    return (
        f" {fmt_in_unit(d.before, i.unit):>8} {fmt_in_unit(d.after, i.unit):>8} "
        f"{'':>8} {fmt_rel(d):>5}"
    )


def _title(before: str, after: str) -> str:
    """``wsprof diff: BEFORE -> AFTER`` in one line: the paths, else their last parts (the
    side lines below give the paths whole)."""
    for b, a in ((before, after), (_last(before), _last(after))):
        title = f"wsprof diff: {b} -> {a}"
        if len(title) <= WIDTH:
            return title
    return "wsprof diff"


def _last(path: str) -> str:
    return os.path.basename(os.path.normpath(path)) or path


def render_diff_text(result: DiffResult, max_rows: int = MAX_ROWS) -> str:
    """The diff a user reads first: the verdict, both sides, then the tables.

    Args:
        result: what :func:`wsprof.analysis.diff.diff_loaded` produced.
        max_rows: most rows per table.

    Returns:
        Lines of at most 80 columns (a name longer than a line is cut, its file path from
        the left), ending in a newline; control characters escaped (names come from the
        inputs).
    """
    r = result
    lines = [_title(r.before.source, r.after.source)]
    lines += _wrap(f"VERDICT: {r.verdict[0]}")
    for v in r.verdict[1:]:
        lines += _wrap(v, indent="  ", subsequent="    ")
    lines.append("")
    lines += _wrap(
        f"before: {r.before.describe(range_option(r.before.role))}", subsequent="        "
    )
    lines += _wrap(f"after:  {r.after.describe(range_option(r.after.role))}", subsequent="        ")
    lines += _headline_lines(r)
    times = f" {'before':>8} {'after':>8} {'change':>8} {'rel':>5}"
    per = "per step" if r.basis == BASIS_STEP else "per second"
    if r.basis != BASIS_STEP:
        lines += [
            "",
            *_wrap(
                "as whole-run rates: times and calls per second of wall time "
                "(a time per second is the share of the wall time)"
            ),
        ]
    lines += _table(
        f"ops (calls {per}, median latency per call, time {per}):",
        [
            f"{'':<14} {'calls':>6} {'':>6} {'median':>8} {'':>8} {'time':>8}",
            f"{'op':<14} {'before':>6} {'after':>6} {'before':>8} {'after':>8}{times}",
        ],
        r.of_kind("op"),
        14,
        _op_cells,
        max_rows,
    )
    lines += _table(
        f"caller sites (calls {per}, time {per}):",
        [
            f"{'':<32} {'calls':>6} {'':>6} {'time':>8}",
            f"{'site':<32} {'before':>6} {'after':>6}{times}",
        ],
        r.of_kind("site"),
        32,
        _site_cells,
        max_rows,
    )
    lines += _table(
        f"phases (time {per}):",
        [f"{'phase':<46}{times}"],
        r.of_kind("phase"),
        46,
        lambda i: _time_cells(i.s_per_step),
        max_rows,
    )
    lines += _table(
        "series (median per step):",
        [f"{'series':<46}{times}"],
        r.of_kind("series"),
        46,
        _series_cells,
        max_rows,
    )
    lines += _table(
        "py-spy leaf frames (share of active samples):",
        [f"{'frame':<56} {'before':>6} {'after':>6} {'change':>8}"],
        r.of_kind("frame"),
        56,
        _frame_cells,
        max_rows,
    )
    if r.notes:
        lines.append("")
    for note in r.notes:
        lines += _wrap(f"note: {note}", subsequent="      ")
    return "\n".join(escape_controls(line.rstrip()) for line in lines) + "\n"
