"""``wsprof diff --format html``: a small self-contained page of the diff.

Jinja2 with autoescape renders ``templates/diff.html.j2``: every name from a trace (ops, sites,
phases, frames, paths) is escaped; CSS is inline; there is no script and nothing is loaded
from the network. Bars are plain ``div`` widths (percent of the table's largest value).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jinja2 import Environment

from wsprof.analysis.diff import BASIS_STEP, Delta, DiffResult, ItemDiff, fmt_change_s, fmt_rel
from wsprof.contracts.units import (
    fmt_bytes_decimal,
    fmt_duration,
    fmt_in_unit,
    fmt_pct,
    fmt_rate,
    fmt_us,
)
from wsprof.report.diff_text import fmt_count, headline_rows, range_option
from wsprof.report.files import write_text
from wsprof.report.templating import environment

#: Rows per table; the rest are counted.
MAX_ROWS = 40

_TEMPLATE = "diff.html.j2"


@dataclass(frozen=True)
class TableView:
    """One table of the page: items of one kind and the largest value its bars scale to."""

    id: str
    title: str
    how: str
    name: str
    items: tuple[ItemDiff, ...]
    top: float
    hidden: int


#: (kind, section id, title, how to read it, name column)
_TABLES = (
    (
        "op",
        "ops",
        "Per op",
        "Calls per step, median host latency per call and time per step of "
        "each canonical op; largest change of time per step first.",
        "op",
    ),
    (
        "site",
        "sites",
        "Per caller site",
        "Calls per step and time per step of each caller "
        "site (function and file; the lines seen below the name).",
        "site",
    ),
    ("phase", "phases", "Per phase", "Time per step in each phase.", "phase"),
    (
        "series",
        "series",
        "Per series",
        "Median per step of each column of the series file.",
        "series",
    ),
    (
        "frame",
        "frames",
        "py-spy leaf frames",
        "Share of the active py-spy samples whose leaf is the frame.",
        "frame",
    ),
)


def _direction(d: Delta | None) -> str:
    if d is None or d.change is None or d.change == 0:
        return ""
    return "down" if d.change < 0 else "up"


def _pts(d: Delta | None) -> str:
    if d is None or d.change is None:
        return "—"
    return f"{d.change * 100:+.0f} pts"


def _line_class(line: str) -> str:
    for prefix, cls in (
        ("got faster", "faster"),
        ("got slower", "slower"),
        ("overhead moved", "moved"),
    ):
        if line.startswith(prefix):
            return cls
    return ""


def _top(items: tuple[ItemDiff, ...]) -> float:
    vals = [
        v
        for i in items
        if (m := i.main) is not None
        for v in (m.before, m.after)
        if v is not None and v > 0
    ]
    return max(vals, default=0.0)


def _environment() -> Environment:
    return environment(
        dict(
            dur=fmt_duration,
            us=fmt_us,
            pct=fmt_pct,
            count=fmt_count,
            chg=fmt_change_s,
            rel=lambda d: fmt_rel(d) if d is not None else "—",
            pts=_pts,
            direction=_direction,
            in_unit=fmt_in_unit,
            size=fmt_bytes_decimal,
            rate=fmt_rate,
        )
    )


def render_diff_html(result: DiffResult, max_rows: int = MAX_ROWS) -> str:
    """The diff as one self-contained HTML page.

    Args:
        result: what :func:`wsprof.analysis.diff.diff_loaded` produced.
        max_rows: most rows per table.

    Returns:
        The HTML text: no script, no external resource.
    """
    from wsprof._version import __version__

    tables = []
    for kind, sid, title, how, name in _TABLES:
        if result.basis != BASIS_STEP:
            how = how.replace("per step", "per second of wall time")
        items = result.of_kind(kind)
        if items:
            shown = items[:max_rows]
            tables.append(
                TableView(sid, title, how, name, shown, _top(shown), len(items) - len(shown))
            )
    r = result
    per = r.per_words
    headline = [
        (n if k in ("share", "bytes", "rate") else _per(n, per), d, k)
        for n, d, k in headline_rows(r)
    ]
    template = _environment().get_template(_TEMPLATE)
    return template.render(
        r=r,
        version=__version__,
        tables=tables,
        headline=headline,
        line_class=_line_class,
        before_desc=r.before.describe(range_option(r.before.role)),
        after_desc=r.after.describe(range_option(r.after.role)),
    )


def write_diff_html(result: DiffResult, path: str | os.PathLike[str]) -> str:
    """Render the page and write it to ``path`` (parent folders are created).

    Returns:
        The path written, as a string.

    Raises:
        InputError: the file or its folder cannot be written (one line: which and why).
    """
    return write_text(path, render_diff_html(result), "the diff")


def _per(name: str, per: str) -> str:
    """``step time (median)`` with its basis: ``step time (median per step)``; ``weight sync
    (mean)`` -> ``weight sync (mean per step)``; a bare name gets ``(per step)``."""
    return f"{name[:-1]} {per})" if name.endswith(")") else f"{name} ({per})"
