"""Figures of the HTML report: matplotlib figures rendered to inline SVG strings.

Every function takes analysis results (never a trace) and returns an ``<svg>`` element as a
string, ready to be inlined into HTML, or None when there is nothing to plot. Figures are built
as :class:`matplotlib.figure.Figure` objects with an explicit Agg canvas: pyplot is never
imported, no global backend is selected, and each figure is cleared as soon as it is rendered.

Text is written as SVG ``<text>`` (escaped by matplotlib), dense scatters are rasterized into an
embedded ``data:`` PNG so that a report stays small, and every user-supplied label (op names,
frame names, series names) is escaped for mathtext so that a ``$`` in a name cannot break a
figure.
"""

from __future__ import annotations

import io
import re
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import BoundaryNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from wsprof.analysis.model import (
    CallPoints,
    CounterTrack,
    FrameShift,
    HotFrame,
    SeriesResult,
    StepRow,
)
from wsprof.contracts.series import Series
from wsprof.contracts.units import Unit, fmt_bytes, fmt_bytes_decimal, fmt_pct, fmt_rate

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.9; only for the type checker

#: Most points one figure draws; more are thinned (keeping the slowest calls).
MAX_POINTS = 20_000
#: Scatters with more points than this are rasterized (a PNG inside the SVG) to keep it small.
RASTERIZE_ABOVE = 2_000
#: Resolution of rasterized parts, dots per inch.
RASTER_DPI = 150
#: Longest label drawn in a figure; longer ones are shortened with an ellipsis.
MAX_LABEL_CHARS = 60
#: Bars in the hot-frames chart.
MAX_HOT_FRAMES = 15
#: Above this many steps the per-bar rollout-share labels are left out (they would overlap).
MAX_ANNOTATED_BARS = 40

#: Figure width in inches (the page scales SVGs to its column width).
WIDTH_IN = 9.0
#: Width of figures shown two per row.
HALF_WIDTH_IN = 6.0
#: Width of a diagnosis's symptom figure (beside its chain on the first screen).
SYMPTOM_WIDTH_IN = 7.2
#: Width of a diagnosis's culprit figure (two fit under the symptom figure).
CULPRIT_WIDTH_IN = 4.2
#: Up to this many steps the step colour scale has one colour per step; above, a continuous
#: scale (still over the real step numbers only).
MAX_DISCRETE_STEPS = 40

# Colours shared with the HTML template (report.html.j2).
_C_ROLLOUT = "#4e79a7"
_C_TRAIN = "#59a14f"
_C_SYNC = "#e15759"
_C_OTHER = "#bab0ac"
_C_POINTS = "#4e79a7"
_C_FIT = "#e15759"
_C_PROJ = "#f28e2b"
_C_OUTSIDE = "#9a9a9a"  # calls outside any step (step -1)
_C_COUNTER = "#76b7b2"

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")

_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text as <text>, escaped by matplotlib; small and selectable
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#e5e5e5",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
    "legend.fontsize": 8.0,
}

# SVG metadata entries set to None are left out (no RDF block, no date: stable output).
_SVG_METADATA: dict[str, str | None] = {
    "Creator": None,
    "Date": None,
    "Format": None,
    "Type": None,
}

# rc_context changes matplotlib's rcParams for the duration of a render; the lock keeps two
# threads of this module from interleaving, and the context restores the values afterwards.
_LOCK = threading.Lock()

_PROLOG = re.compile(r"\A\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.DOTALL)
_SVG_OPEN = re.compile(r"<svg\b[^>]*>")
_ROOT_DROP = re.compile(r'\s(?:xmlns(?::xlink)?|width|height|version)="[^"]*"')


@contextmanager
def _figure(height_in: float, width_in: float = WIDTH_IN) -> Iterator[Figure]:
    """A fresh figure with its own Agg canvas, under the report's style."""
    with _LOCK, matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasAgg(fig)
        try:
            yield fig
        finally:
            fig.clear()


def _to_svg(fig: Figure, label: str) -> str:
    """Render ``fig`` as an inline ``<svg>`` element.

    The XML prolog and DOCTYPE are dropped (they reference an external DTD), and so are the
    namespace declarations (the HTML parser knows ``svg`` and ``xlink:href``) and the fixed
    size (the page's CSS sizes the figure). ``label`` becomes the element's aria-label.
    """
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=_SVG_METADATA, dpi=RASTER_DPI)
    svg = _PROLOG.sub("", buf.getvalue(), count=1)
    m = _SVG_OPEN.search(svg)
    if m is None:  # pragma: no cover - matplotlib always writes one
        return svg
    root = _ROOT_DROP.sub("", m.group(0))
    safe_label = (
        label.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    )
    root = root[:-1] + f' role="img" aria-label="{safe_label}" class="figure-svg">'
    return svg[: m.start()] + root + svg[m.end() :]


def plain(text: str, max_chars: int = MAX_LABEL_CHARS) -> str:
    """A label drawn literally: ``$`` escaped for mathtext, shortened to ``max_chars``.

    Args:
        text: any user-supplied text (op, frame, series or counter name).
        max_chars: longest result, in characters, before escaping.

    Returns:
        Text that matplotlib draws as-is.
    """
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text.replace("\\", "\\\\").replace("$", r"\$")


def cap_indices(values: npt.NDArray[np.float64], cap: int = MAX_POINTS) -> npt.NDArray[np.intp]:
    """Indices of at most ``cap`` points: an even stride plus the largest values.

    Analysis already downsamples; this is a defensive bound on what one figure draws.

    Args:
        values: the y values (the largest ones are always kept).
        cap: most indices returned.

    Returns:
        Sorted indices into ``values``.
    """
    n = len(values)
    if n <= cap:
        return np.arange(n, dtype=np.intp)
    n_top = max(1, cap // 20)
    finite = np.where(np.isfinite(values), values, -np.inf)
    top = np.argpartition(finite, n - n_top)[n - n_top :]
    stride = np.linspace(0, n - 1, cap - n_top).astype(np.intp)
    return np.unique(np.concatenate([stride, top.astype(np.intp)]))[:cap]


def _human_bytes(x: float, _pos: object = None) -> str:
    return fmt_bytes(x)


def _bytes_axis(ax: Axes, axis: str = "y") -> None:
    fmt = FuncFormatter(_human_bytes)
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


def _legend_below(
    fig: Figure,
    ax: Axes,
    handles: Sequence[Any] | None = None,
    ncols: int = 4,
) -> None:
    """A legend under the axes, outside them: it never covers the title or the data.

    A figure-level legend with ``loc="outside lower center"`` gets its own row in the
    constrained layout, below the x label.
    """
    if handles is None:
        handles, _labels = ax.get_legend_handles_labels()
    if not handles:
        return
    fig.legend(
        handles=list(handles),
        loc="outside lower center",
        ncols=max(1, min(ncols, len(handles))),
        borderaxespad=0.2,
        handletextpad=0.4,
        columnspacing=1.2,
    )


def _integer_axis(ax: Axes, axis: str = "x") -> None:
    """Ticks on whole numbers only (steps, windows): no step 2.5."""
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def step_norm(steps: npt.NDArray[np.int64]) -> tuple[Normalize, list[int]]:
    """The colour scale of step numbers: over the real steps present (never down to step -1,
    which marks calls outside any step), one colour per step up to
    :data:`MAX_DISCRETE_STEPS` steps.

    Args:
        steps: step numbers, all >= 0 (callers leave calls outside any step out).

    Returns:
        The norm and the colour-bar ticks (whole step numbers between the first and the last).
    """
    lo, hi = int(steps.min()), int(steps.max())
    if hi - lo <= MAX_DISCRETE_STEPS:
        norm: Normalize = BoundaryNorm(np.arange(lo - 0.5, hi + 1.0), ncolors=256)
    else:
        norm = Normalize(vmin=lo - 0.5, vmax=hi + 0.5)
    ticks = [int(t) for t in MaxNLocator(nbins=8, integer=True).tick_values(lo, hi)]
    return norm, [t for t in ticks if lo <= t <= hi] or [lo]


def _step_colorbar(fig: Figure, mappable: Any, ax: Axes, ticks: Sequence[int]) -> None:
    cbar = fig.colorbar(mappable, ax=ax, pad=0.01, aspect=30, ticks=list(ticks))
    cbar.set_label("step")
    cbar.minorticks_off()


def growth_figure(
    result: SeriesResult,
    *,
    title: str | None = None,
    width_in: float = WIDTH_IN,
    height_in: float = 3.2,
) -> str | None:
    """One per-step series: measured points, the fitted model with its band, and the projection.

    The band is the fit ± 2 robust standard deviations of the residuals (1.4826 × their median
    absolute deviation, the normal-consistent MAD): where about 95 % of the points would fall
    if the fitted model is right and the noise is normal; points outside it are what the model
    does not explain.

    Args:
        result: the series and its verdict (``verdict.fitted`` has one value per point).
        title: figure title; default the series name with its shape.
        width_in: figure width in inches (:data:`HALF_WIDTH_IN` for two per row).
        height_in: figure height in inches (the legend takes a row under the axes).

    Returns:
        An inline SVG, or None when the series is empty.
    """
    s, v = result.series, result.verdict
    n = min(len(s.steps), len(s.values))
    if n == 0:
        return None
    idx = cap_indices(np.asarray(s.values[:n], dtype=np.float64))
    x = np.asarray(s.steps[:n], dtype=np.float64)[idx]
    y = np.asarray(s.values[:n], dtype=np.float64)[idx]
    name = plain(s.name)
    # Series of a process without steps are per sampling window (wsprof.analysis.run).
    point = "window" if s.name.startswith("window_") else "step"
    with _figure(height_in, width_in) as fig:
        ax = fig.add_subplot()
        ax.plot(
            x,
            y,
            linestyle="none",
            marker="o",
            markersize=4 if n < 200 else 2,
            color=_C_POINTS,
            label="measured",
            rasterized=len(idx) > RASTERIZE_ABOVE,
        )
        if len(v.fitted) == n:
            fitted = np.asarray(v.fitted, dtype=np.float64)[idx]
            ax.plot(x, fitted, color=_C_FIT, linewidth=1.6, label=f"fit: {v.shape}")
            resid = y - fitted
            resid = resid[np.isfinite(resid)]
            if len(resid) >= 3:
                sigma = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
                if sigma > 0:
                    ax.fill_between(
                        x,
                        fitted - 2 * sigma,
                        fitted + 2 * sigma,
                        color=_C_FIT,
                        alpha=0.12,
                        linewidth=0,
                        label="band: fit ± 2σ",
                    )
            if v.projection is not None and len(x):
                ax.plot(
                    [x[-1], v.projection.step],
                    [fitted[-1], v.projection.value],
                    color=_C_PROJ,
                    linestyle="--",
                    linewidth=1.2,
                )
        if v.projection is not None:
            ax.plot(
                [v.projection.step],
                [v.projection.value],
                linestyle="none",
                marker="D",
                markersize=6,
                color=_C_PROJ,
                label=f"projection at {point} {v.projection.step}",
            )
            ax.annotate(
                plain(s.fmt(v.projection.value), 40),
                (v.projection.step, v.projection.value),
                textcoords="offset points",
                xytext=(-6, 6),
                ha="right",
                fontsize=8,
                color=_C_PROJ,
            )
        if s.config is not None and len(s.config) == n:
            for i in range(1, n):
                if s.config[i] != s.config[i - 1]:
                    ax.axvline(s.steps[i] - 0.5, color="#999999", linestyle=":", linewidth=1)
        if v.change_point is not None and 0 < v.change_point < n:
            ax.axvline(
                s.steps[v.change_point] - 0.5,
                color="#76b7b2",
                linestyle="-.",
                linewidth=1,
                label="change point",
            )
        ax.set_xlabel(point)
        label = s.unit_label
        ax.set_ylabel(f"{name} ({plain(label, 20)})" if label else name)
        if s.unit is Unit.BYTES:
            _bytes_axis(ax)
        ax.set_title(plain(title) if title is not None else f"{name}: {v.shape}", loc="left")
        _integer_axis(ax)
        _legend_below(fig, ax)
        return _to_svg(fig, f"{s.name} per {point} with fitted {v.shape} curve")


def step_breakdown_figure(steps: Sequence[StepRow]) -> str | None:
    """Stacked bars per step: rollout, train, weight sync and other, rollout share on top.

    Args:
        steps: the step table of one process (phase times of None count as 0).

    Returns:
        An inline SVG, or None without steps.
    """
    if not steps:
        return None
    rows = list(steps)
    if len(rows) > MAX_POINTS:
        rows = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, MAX_POINTS).astype(int)]
    x = np.asarray([r.step for r in rows], dtype=np.float64)
    parts = (
        ("rollout", _C_ROLLOUT, [r.rollout_s or 0.0 for r in rows]),
        ("train", _C_TRAIN, [r.train_s or 0.0 for r in rows]),
        ("weight sync", _C_SYNC, [r.weight_sync_s or 0.0 for r in rows]),
        ("other", _C_OTHER, [max(r.other_s, 0.0) for r in rows]),
    )
    with _figure(3.2) as fig:
        ax = fig.add_subplot()
        bottom = np.zeros(len(rows))
        for label, colour, values in parts:
            arr = np.asarray(values, dtype=np.float64)
            ax.bar(x, arr, bottom=bottom, color=colour, label=label, width=0.8, linewidth=0)
            bottom += arr
        if len(rows) <= MAX_ANNOTATED_BARS:
            for r, top in zip(rows, bottom, strict=True):
                share = r.rollout_share
                if share is not None:
                    ax.annotate(
                        f"{share:.0%}",
                        (r.step, top),
                        textcoords="offset points",
                        xytext=(0, 2),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color="#333333",
                    )
        ax.set_ylim(0, float(bottom.max()) * 1.12 if bottom.max() > 0 else 1.0)
        ax.set_xlabel("step")
        ax.set_ylabel("time (s)")
        ax.set_title("Time per step by phase (label: rollout share)", loc="left")
        _integer_axis(ax)
        _legend_below(fig, ax)
        ax.grid(axis="x", visible=False)
        return _to_svg(fig, "stacked time per step: rollout, train, weight sync, other")


def wire_figure(
    steps: Sequence[StepRow],
    limit_bytes_per_s: float | None = None,
    limit_name: str | None = None,
) -> str | None:
    """Each weight sync on the wire, per step: bytes moved (bars, left) and bandwidth (right:
    bus bandwidth, else algorithm bandwidth) with the link limit as a dashed line when it is
    known (:attr:`StepRow.wire`; the headline's limit).

    Args:
        steps: the step table of one process.
        limit_bytes_per_s: the link limit, bytes/s; None when unknown (said in the title).
        limit_name: what the limit is (``NVLink 4 x18``).

    Returns:
        An inline SVG, or None when no step moved bytes of known size.
    """
    rows = [r for r in steps if r.wire is not None and r.wire.bytes > 0]
    if not rows:
        return None
    if len(rows) > MAX_POINTS:
        rows = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, MAX_POINTS).astype(int)]
    x = np.asarray([r.step for r in rows], dtype=np.float64)
    nbytes = np.asarray([r.wire.bytes if r.wire else 0 for r in rows], dtype=np.float64)
    bus = [r.wire.busbw if r.wire else None for r in rows]
    kind = "bus" if all(b is not None for b in bus) else "algorithm"
    bw = np.asarray(
        [
            (b if kind == "bus" else (r.wire.algbw if r.wire else None)) or np.nan
            for r, b in zip(rows, bus)
        ],
        dtype=np.float64,
    )
    with _figure(2.8) as fig:
        left, right = fig.subplots(1, 2)
        left.bar(x, nbytes, color=_C_SYNC, width=0.8, linewidth=0)
        left.set_title("Bytes per weight sync", loc="left")
        left.set_xlabel("step")
        left.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt_bytes_decimal(v)))
        _integer_axis(left)
        left.grid(axis="x", visible=False)
        right.plot(x, bw, marker="o", markersize=4, color=_C_POINTS, label=f"{kind} bandwidth")
        right.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt_rate(v)))
        right.set_xlabel("step")
        _integer_axis(right)
        if limit_bytes_per_s is not None:
            right.axhline(
                limit_bytes_per_s,
                color=_C_PROJ,
                linestyle="--",
                linewidth=1.2,
                label=f"limit: {plain(limit_name or 'link')} {fmt_rate(limit_bytes_per_s)}",
            )
            right.set_ylim(0, max(limit_bytes_per_s, float(np.nanmax(bw))) * 1.1)
            right.set_title("Bandwidth against the link limit", loc="left")
        else:
            right.set_ylim(0, float(np.nanmax(bw)) * 1.15 if np.isfinite(bw).any() else 1.0)
            right.set_title(f"Bandwidth ({plain(limit_name or 'link limit unknown')})", loc="left")
        _legend_below(fig, right)
        return _to_svg(fig, "bytes per weight sync and its bandwidth per step, link limit")


def _call_arrays(
    calls: CallPoints, values: Sequence[float], groups: Sequence[str] | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64], list[str]]:
    groups = calls.op if groups is None else groups
    n = min(len(calls.index), len(values), len(calls.step), len(groups))
    y = np.asarray(values[:n], dtype=np.float64)
    keep = cap_indices(y)
    x = np.asarray(calls.index[:n], dtype=np.float64)[keep]
    step = np.asarray(calls.step[:n], dtype=np.int64)[keep]
    ops = [groups[int(i)] for i in keep]
    return x, y[keep], step, ops


def legend_columns(labels: Sequence[str], width_in: float = WIDTH_IN) -> int:
    """How many legend columns of these labels fit across a figure ``width_in`` wide (at the
    legend's 8 pt, about 4.6 pt per character plus the marker)."""
    longest = max((len(x) for x in labels), default=1)
    return max(1, min(len(labels), int((width_in * 72 - 30) // (longest * 4.6 + 26))))


def _scatter_by_op(
    fig: Figure,
    calls: CallPoints,
    values: Sequence[float],
    *,
    ylabel: str,
    title: str,
    groups: Sequence[str] | None = None,
) -> bool:
    """Scatter ``values`` over call index: colour by step, one marker per op (or per entry of
    ``groups``, one per point). Calls outside any step (step -1) are grey and stay out of the
    colour scale, which runs over the real steps only. False if empty."""
    x, y, step, ops = _call_arrays(calls, values, groups)
    if len(x) == 0:
        return False
    ax = fig.add_subplot()
    in_step = step >= 0
    norm, ticks = step_norm(step[in_step]) if in_step.any() else (None, [])
    names = sorted(set(ops))
    op_arr = np.asarray(ops, dtype=object)
    rasterize = len(x) > RASTERIZE_ABOVE
    size = 14.0 if len(x) < 500 else 5.0
    mappable = None
    handles: list[Any] = []
    for i, name in enumerate(names):
        sel = op_arr == name
        marker = _MARKERS[i % len(_MARKERS)]
        inside, outside = sel & in_step, sel & ~in_step
        if inside.any():
            mappable = ax.scatter(
                x[inside],
                y[inside],
                c=step[inside],
                cmap="viridis",
                norm=norm,
                marker=marker,
                s=size,
                linewidths=0,
                alpha=0.85,
                rasterized=rasterize,
            )
        if outside.any():
            ax.scatter(
                x[outside],
                y[outside],
                color=_C_OUTSIDE,
                marker=marker,
                s=size,
                linewidths=0,
                alpha=0.85,
                rasterized=rasterize,
            )
        handles.append(
            Line2D([], [], linestyle="none", marker=marker, color="#555555", label=plain(name, 40))
        )
    if (~in_step).any():
        handles.append(
            Line2D([], [], linestyle="none", marker="o", color=_C_OUTSIDE, label="outside any step")
        )
    positive = y[y > 0]
    if len(positive) == len(y):
        ax.set_yscale("log")
    elif len(positive):
        ax.set_yscale("symlog", linthresh=max(float(positive.min()), 1e-3))
    ax.set_xlabel("call index")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    if mappable is not None:
        _step_colorbar(fig, mappable, ax, ticks)
    _legend_below(fig, ax, handles, ncols=legend_columns([h.get_label() for h in handles]))
    return True


def site_latency_figure(calls: CallPoints) -> str | None:
    """Per-call latency over call index, log scale; colour is the step, marker the caller site.

    Returns:
        An inline SVG, or None without calls or without site labels.
    """
    if not calls.site:
        return None
    with _figure(3.6) as fig:
        if not _scatter_by_op(
            fig,
            calls,
            calls.latency_us,
            ylabel="latency (µs)",
            title="Per-call latency by caller site",
            groups=calls.site,
        ):
            return None
        return _to_svg(fig, "per-call collective latency by caller site over call index")


def op_latency_figure(calls: CallPoints) -> str | None:
    """Per-call latency over call index, log scale; colour is the step, marker the op.

    Args:
        calls: the (downsampled) per-call points of one process.

    Returns:
        An inline SVG, or None without calls.
    """
    with _figure(3.4) as fig:
        shown = f" (of {calls.n_total:,})" if calls.n_total > len(calls.index) else ""
        if not _scatter_by_op(
            fig,
            calls,
            calls.latency_us,
            ylabel="latency (µs)",
            title=f"Latency per call{shown}",
        ):
            return None
        return _to_svg(fig, "per-call collective latency over call index")


def between_layers_figure(calls: CallPoints) -> str | None:
    """Time between the API and backend layers per call, over call index.

    Args:
        calls: the (downsampled) per-call points of one process.

    Returns:
        An inline SVG, or None without calls.
    """
    with _figure(3.0) as fig:
        if not _scatter_by_op(
            fig,
            calls,
            calls.between_layers_us,
            ylabel="between layers (µs)",
            title="Between layers, per call",
        ):
            return None
        return _to_svg(fig, "time between layers per call over call index")


def per_step_latency_us(steps: Sequence[StepRow]) -> dict[int, float]:
    """Mean latency per collective call of each step, from the step table (exact, not sampled).

    Args:
        steps: the process's steps.

    Returns:
        ``{step: collective_s / n_calls in µs}`` for steps with calls.
    """
    return {r.step: r.collective_s / r.n_calls * 1e6 for r in steps if r.n_calls > 0}


def counter_latency_pairs(
    steps: Sequence[StepRow], per_step: Mapping[int, float] | None
) -> list[tuple[int, float, float]]:
    """Per step: the counter's value and the mean call latency.

    Args:
        steps: the process's steps.
        per_step: the counter's value at each step's end (``counter:<name>`` series), if known.

    Returns:
        ``(step, counter value, latency µs)`` for every step that has both; empty without
        ``per_step``.
    """
    if not per_step:
        return []
    latency = per_step_latency_us(steps)
    return [(s, float(per_step[s]), latency[s]) for s in sorted(per_step) if s in latency]


def counter_figure(
    track: CounterTrack,
    steps: Sequence[StepRow] = (),
    per_step: Mapping[int, float] | None = None,
    *,
    width_in: float | None = None,
) -> str | None:
    """A counter over time and, when its per-step values are known, against call latency.

    Args:
        track: the counter (``t_s`` since the process's first record).
        steps: the process's steps (for the mean latency per call of each step).
        per_step: the counter's value at each step's end, if known; without it only the
            counter over time is drawn.
        width_in: figure width; default full width with both panels, half width without.

    Returns:
        An inline SVG, or None when the counter has no samples.
    """
    n = min(len(track.t_s), len(track.value))
    if n == 0:
        return None
    pairs = counter_latency_pairs(steps, per_step)
    v_all = np.asarray(track.value[:n], dtype=np.float64)
    keep = cap_indices(v_all)
    t = np.asarray(track.t_s[:n], dtype=np.float64)[keep]
    v = v_all[keep]
    name = plain(track.name)
    is_bytes = track.unit is Unit.BYTES
    if width_in is None:
        width_in = WIDTH_IN if pairs else HALF_WIDTH_IN
    with _figure(3.0, width_in) as fig:
        if pairs:
            ax_t, ax_s = fig.subplots(1, 2, width_ratios=[1.3, 1.0])
        else:
            ax_t, ax_s = fig.add_subplot(), None
        ax_t.plot(t, v, color=_C_POINTS, linewidth=1.2, marker="." if n < 200 else None)
        ax_t.set_xlabel("time since first record (s)")
        ax_t.set_ylabel(name)
        ax_t.set_title(f"{name} over time", loc="left")
        if is_bytes:
            _bytes_axis(ax_t)
        if ax_s is not None:
            pair_steps = np.asarray([p[0] for p in pairs], dtype=np.int64)
            norm, ticks = step_norm(pair_steps)
            sc = ax_s.scatter(
                [p[1] for p in pairs],
                [p[2] for p in pairs],
                c=pair_steps,
                cmap="viridis",
                norm=norm,
                s=22,
                linewidths=0,
                rasterized=len(pairs) > RASTERIZE_ABOVE,
            )
            ax_s.set_xlabel(f"{name} at step end")
            ax_s.set_ylabel("mean call latency (µs)")
            ax_s.set_title("per step: counter vs latency", loc="left")
            if is_bytes:
                _bytes_axis(ax_s, "x")
            _step_colorbar(fig, sc, ax_s, ticks)
        return _to_svg(fig, f"counter {track.name}")


def hot_frames_figure(frames: Sequence[HotFrame], top: int = MAX_HOT_FRAMES) -> str | None:
    """Horizontal bars: share of py-spy samples of the hottest leaf frames.

    Args:
        frames: leaf frames, most samples first.
        top: how many bars.

    Returns:
        An inline SVG, or None without frames.
    """
    rows = [f for f in frames if f.samples > 0][:top]
    if not rows:
        return None
    shares = [f.share * 100.0 for f in rows]
    labels = [plain(f.frame, 70) for f in rows]
    with _figure(0.6 + 0.28 * len(rows)) as fig:
        ax = fig.add_subplot()
        y = np.arange(len(rows))
        ax.barh(y, shares, color=_C_ROLLOUT, height=0.7)
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        for yi, share in zip(y, shares, strict=True):
            ax.annotate(
                f"{share:.1f}%",
                (share, yi),
                textcoords="offset points",
                xytext=(3, 0),
                va="center",
                fontsize=7,
            )
        ax.set_xlim(0, max(shares) * 1.15 if max(shares) > 0 else 1.0)
        ax.set_xlabel("share of samples (%)")
        ax.grid(axis="y", visible=False)
        return _to_svg(fig, "hottest leaf frames by share of samples")


#: Deepest flame-chart row drawn (deeper frames are folded into their row-limit ancestor).
MAX_FLAME_DEPTH = 28
#: Narrowest flame-chart box drawn, as a share of all samples (narrower is below a pixel).
MIN_FLAME_SHARE = 0.002
_C_FLAME = ("#f6c85f", "#f4a259", "#e9c46a", "#f28e2b", "#edc948", "#ffbe7d")
_C_GAINED = "#e15759"


def _flame_tree(stacks: Sequence[tuple[tuple[str, ...], int]]) -> dict[str, Any]:
    root: dict[str, Any] = {"n": 0, "kids": {}}
    for frames, n in stacks:
        root["n"] += n
        node = root
        for f in frames[:MAX_FLAME_DEPTH]:
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += n
    return root


def flame_figure(
    stacks: Sequence[tuple[tuple[str, ...], int]], title: str, highlight: Sequence[str] = ()
) -> str | None:
    """An icicle (flame chart, root at the top): each box a frame, its width the share of
    samples whose stack holds it under its callers; frames in ``highlight`` (those that gained
    share) drawn red.

    Args:
        stacks: ``(stack root first, samples)`` pairs.
        title: figure title.
        highlight: frame names (``function (file)``) to draw red.

    Returns:
        An inline SVG, or None without samples.
    """
    root = _flame_tree(stacks)
    total = root["n"]
    if total <= 0:
        return None
    boxes: list[tuple[int, float, float, str]] = []  # depth, x, width, frame

    def walk(node: dict[str, Any], depth: int, x: float) -> None:
        for frame, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["n"]):
            w = kid["n"] / total
            if w >= MIN_FLAME_SHARE:
                boxes.append((depth, x, w, frame))
                walk(kid, depth + 1, x)
            x += w

    walk(root, 0, 0.0)
    depth = 1 + max(b[0] for b in boxes) if boxes else 1
    marked = set(highlight)
    with _figure(0.7 + 0.24 * depth) as fig:
        ax = fig.add_subplot()
        for d, x, w, frame in boxes:
            name = frame.split(" (", 1)[0]
            colour = (
                _C_GAINED
                if frame in marked
                else _C_FLAME[zlib.crc32(name.encode()) % len(_C_FLAME)]
            )
            ax.add_patch(
                Rectangle((x, d), w, 0.92, facecolor=colour, edgecolor="white", linewidth=0.4)
            )
            chars = int(w * 150)
            if chars >= 4:
                ax.text(
                    x + 0.003, d + 0.46, plain(name, chars), va="center", fontsize=6.5, clip_on=True
                )
        ax.set_xlim(0, 1)
        ax.set_ylim(depth, 0)
        ax.set_yticks([])
        ax.set_xlabel("share of samples")
        ax.grid(visible=False)
        ax.set_title(plain(title, 90), loc="left")
        return _to_svg(fig, title)


def ranks_figure(
    labels: Sequence[str],
    steps: Sequence[int],
    values: Sequence[Sequence[float | None]],
    outliers: Sequence[str] = (),
) -> str | None:
    """Heatmap of per-rank weight-sync time per step; outlier ranks' labels drawn red.

    Args:
        labels: one per rank (``rank 3``).
        steps: step numbers (columns).
        values: per rank, per step, weight-sync time, s (None where unknown).
        outliers: labels of ranks an ``outlier_rank`` finding names.

    Returns:
        An inline SVG, or None without ranks or steps.
    """
    if not labels or not steps:
        return None
    m = np.array(
        [[np.nan if v is None else float(v) for v in row] for row in values], dtype=np.float64
    )
    if not np.isfinite(m).any():
        return None
    with _figure(1.2 + 0.22 * min(len(labels), 64)) as fig:
        ax = fig.add_subplot()
        # One column per step present, labelled by its real step number: steps need not be
        # contiguous (a log every few steps, a rank that missed one).
        im = ax.imshow(
            m,
            aspect="auto",
            interpolation="nearest",
            cmap="magma_r",
            extent=(-0.5, len(steps) - 0.5, len(labels) - 0.5, -0.5),
        )
        cols = [int(c) for c in MaxNLocator(nbins=12, integer=True).tick_values(0, len(steps) - 1)]
        cols = [c for c in cols if 0 <= c < len(steps)]
        ax.set_xticks(cols, [str(steps[c]) for c in cols])
        fig.colorbar(im, ax=ax, label="weight sync (s)", shrink=0.9)
        every = max(1, len(labels) // 32)
        ticks = list(range(0, len(labels), every))
        ax.set_yticks(ticks, [plain(labels[i], 24) for i in ticks], fontsize=7)
        bad = set(outliers)
        for tick, i in zip(ax.get_yticklabels(), ticks, strict=True):
            if labels[i] in bad:
                tick.set_color(_C_GAINED)
                tick.set_fontweight("bold")
        ax.set_xlabel("step")
        ax.grid(visible=False)
        ax.set_title("Weight-sync time per rank and step", loc="left")
        return _to_svg(fig, "weight-sync time per rank and step")


def _unit_axis(ax: Axes, series: Series, axis: str = "y") -> None:
    """Tick labels of ``axis`` in the series' unit (``384 ms``, ``1.5 GiB``, ``25,000``)."""

    def fmt(x: float, _pos: object = None) -> str:
        return plain(series.fmt(x), 20)

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(FuncFormatter(fmt))


def frame_share_figure(
    frame: str,
    shift: FrameShift,
    k: int,
    n_windows: int,
    *,
    per_window: Sequence[float | None] = (),
    sync_share: Sequence[float | None] = (),
    width_in: float = CULPRIT_WIDTH_IN,
) -> str | None:
    """The share of py-spy samples whose stack holds ``frame``, over the sampling windows.

    The first ``k`` and the last ``k`` windows are drawn as the pooled shares analysis compared
    (:class:`~wsprof.analysis.model.FrameShift`); with ``per_window`` (one share per window
    with active samples) each window is a point as well. ``sync_share`` (the weight-sync share
    of each window's samples) is drawn grey behind, for the time the frame's growth goes with.

    Args:
        frame: ``function (file)``.
        shift: the frame's early and late shares.
        k: windows on each side of the comparison.
        n_windows: windows with active samples.
        per_window: the frame's share of each window's active samples, 0..1 (None: unknown).
        sync_share: the weight-sync share of each window's active samples, 0..1.
        width_in: figure width in inches.

    Returns:
        An inline SVG, or None without windows.
    """
    if n_windows <= 0 or k <= 0:
        return None
    function = frame.split(" (", 1)[0]
    with _figure(3.0, width_in) as fig:
        ax = fig.add_subplot()
        windows = np.arange(n_windows, dtype=np.float64)
        if len(sync_share) == n_windows:
            ys = np.asarray([np.nan if v is None else v for v in sync_share], dtype=np.float64)
            ax.plot(
                windows,
                ys * 100.0,
                color=_C_OUTSIDE,
                linestyle="--",
                linewidth=1.0,
                marker=".",
                label="weight-sync share of samples",
            )
        if len(per_window) == n_windows:
            yf = np.asarray([np.nan if v is None else v for v in per_window], dtype=np.float64)
            ax.plot(
                windows,
                yf * 100.0,
                color=_C_POINTS,
                linewidth=1.2,
                marker="o",
                markersize=4,
                label="share per window",
            )
        late_from = max(n_windows - k, 0)
        for lo, hi, share, side in (
            (0, k - 1, shift.early_share, f"first {k}"),
            (late_from, n_windows - 1, shift.late_share, f"last {k}"),
        ):
            ax.plot(
                [lo - 0.3, hi + 0.3],
                [share * 100.0] * 2,
                color=_C_FIT,
                linewidth=3.0,
                solid_capstyle="butt",
            )
            ax.annotate(
                f"{fmt_pct(share)} ({side})",
                ((lo + hi) / 2, share * 100.0),
                textcoords="offset points",
                xytext=(0, 5),
                ha="center",
                fontsize=8,
                color=_C_FIT,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.0},
            )
        ax.plot([], [], color=_C_FIT, linewidth=3.0, label="pooled share, first and last windows")
        ax.set_ylim(0, 108)
        ax.set_xlim(-0.6, n_windows - 0.4)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0f}%"))
        ax.set_xlabel("sampling window")
        ax.set_ylabel("share of samples")
        _integer_axis(ax)
        ax.set_title(plain(f"Samples in {function}", 50), loc="left")
        _legend_below(fig, ax, ncols=1)
        return _to_svg(fig, f"share of samples in {frame} per sampling window")


def counter_against_figure(
    counter: Series, symptom: Series, *, width_in: float = CULPRIT_WIDTH_IN
) -> str | None:
    """A counter's per-step values against the symptom's, over the same steps (two y axes).

    Args:
        counter: the counter's per-step series (``counter:<name>``).
        symptom: the symptom's per-step series (``weight_sync_s``).
        width_in: figure width in inches.

    Returns:
        An inline SVG, or None when either is empty.
    """
    nc = min(len(counter.steps), len(counter.values))
    ns = min(len(symptom.steps), len(symptom.values))
    if nc == 0 or ns == 0:
        return None
    cname = counter.name.split(":", 1)[-1]
    with _figure(3.0, width_in) as fig:
        ax = fig.add_subplot()
        ax.plot(
            symptom.steps[:ns],
            symptom.values[:ns],
            color=_C_POINTS,
            marker="o",
            markersize=4,
            linewidth=1.2,
            label=plain(symptom.name, 40),
        )
        _unit_axis(ax, symptom)
        ax.set_ylabel(plain(symptom.name, 30), color=_C_POINTS)
        ax2 = ax.twinx()
        ax2.spines["right"].set_visible(True)
        ax2.grid(visible=False)
        ax2.plot(
            counter.steps[:nc],
            counter.values[:nc],
            color=_C_COUNTER,
            marker="s",
            markersize=4,
            linewidth=1.2,
            label=plain(cname, 40),
        )
        _unit_axis(ax2, counter)
        ax2.set_ylabel(plain(cname, 30), color=_C_COUNTER)
        ax.set_xlabel("step")
        _integer_axis(ax)
        title = f"{plain(cname, 40)} against {plain(symptom.name, 30)}"
        if len(cname) + len(symptom.name) > 34:  # two lines: one fits over a culprit figure
            title = f"{plain(cname, 40)}\nagainst {plain(symptom.name, 30)}"
        ax.set_title(title, loc="left")
        handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        _legend_below(fig, ax, handles, ncols=2)
        return _to_svg(fig, f"counter {cname} against {symptom.name} per step")


def rank_lines_figure(
    labels: Sequence[str],
    steps: Sequence[Sequence[int]],
    values: Sequence[Sequence[float | None]],
    highlight: str,
    *,
    width_in: float = SYMPTOM_WIDTH_IN,
) -> str | None:
    """Weight-sync time per step of every rank, one line each: ``highlight`` red, the others
    grey (an outlier rank against the rest).

    Args:
        labels: one per rank.
        steps: per rank, its step numbers.
        values: per rank, weight-sync time per step, s (None where unknown).
        highlight: the label drawn red.
        width_in: figure width in inches.

    Returns:
        An inline SVG, or None without a step of ``highlight``.
    """
    if highlight not in labels:
        return None
    with _figure(3.0, width_in) as fig:
        ax = fig.add_subplot()
        drawn = False
        for label, xs, ys in zip(labels, steps, values, strict=False):
            pts = [(x, y) for x, y in zip(xs, ys, strict=False) if y is not None]
            if not pts:
                continue
            mine = label == highlight
            drawn |= mine
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                color=_C_FIT if mine else "#b0b0b0",
                linewidth=2.0 if mine else 0.9,
                marker="o" if mine else None,
                markersize=4,
                zorder=3 if mine else 2,
                label=plain(label, 30) if mine else None,
            )
        if not drawn:
            return None
        ax.plot([], [], color="#b0b0b0", linewidth=0.9, label="the other ranks")
        ax.set_xlabel("step")
        ax.set_ylabel("weight sync (s)")
        _integer_axis(ax)
        ax.set_title(plain(f"Weight-sync time per step: {highlight}", 60), loc="left")
        _legend_below(fig, ax, ncols=2)
        return _to_svg(fig, f"weight-sync time per step of {highlight} against the other ranks")
