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
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter

from wsprof.analysis.model import (
    CallPoints,
    CounterTrack,
    HotFrame,
    SeriesResult,
    StepRow,
)
from wsprof.contracts.units import Unit, fmt_bytes

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

# Colours shared with the HTML template (report.html.j2).
_C_ROLLOUT = "#4e79a7"
_C_TRAIN = "#59a14f"
_C_SYNC = "#e15759"
_C_OTHER = "#bab0ac"
_C_POINTS = "#4e79a7"
_C_FIT = "#e15759"
_C_PROJ = "#f28e2b"

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


def _legend_above(ax: Axes, handles: Sequence[object] | None = None, ncols: int = 4) -> None:
    """A legend above the axes, right-aligned (the title sits on the left)."""
    kwargs: dict[str, object] = {
        "loc": "lower right",
        "bbox_to_anchor": (1.0, 1.0),
        "ncols": ncols,
        "borderaxespad": 0.2,
        "handletextpad": 0.4,
        "columnspacing": 1.2,
    }
    if handles is not None:
        kwargs["handles"] = handles
    ax.legend(**kwargs)


def growth_figure(
    result: SeriesResult, *, title: str | None = None, width_in: float = WIDTH_IN
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
    with _figure(3.2, width_in) as fig:
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
        ax.legend(loc="upper left")
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
        _legend_above(ax)
        ax.grid(axis="x", visible=False)
        return _to_svg(fig, "stacked time per step: rollout, train, weight sync, other")


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
    ``groups``, one per point). False if empty."""
    x, y, step, ops = _call_arrays(calls, values, groups)
    if len(x) == 0:
        return False
    ax = fig.add_subplot()
    norm = Normalize(vmin=float(step.min()), vmax=float(max(step.max(), step.min() + 1)))
    names = sorted(set(ops))
    op_arr = np.asarray(ops, dtype=object)
    rasterize = len(x) > RASTERIZE_ABOVE
    size = 14.0 if len(x) < 500 else 5.0
    mappable = None
    handles = []
    for i, name in enumerate(names):
        sel = op_arr == name
        marker = _MARKERS[i % len(_MARKERS)]
        mappable = ax.scatter(
            x[sel],
            y[sel],
            c=step[sel],
            cmap="viridis",
            norm=norm,
            marker=marker,
            s=size,
            linewidths=0,
            alpha=0.85,
            rasterized=rasterize,
        )
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker=marker,
                color="#555555",
                label=plain(name, 40),
            )
        )
    positive = y[y > 0]
    if len(positive) == len(y):
        ax.set_yscale("log")
    elif len(positive):
        ax.set_yscale("symlog", linthresh=max(float(positive.min()), 1e-3))
    ax.set_xlabel("call index")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    _legend_above(ax, handles, ncols=min(len(handles), 4))
    if mappable is not None:
        cbar = fig.colorbar(mappable, ax=ax, pad=0.01, aspect=30)
        cbar.set_label("step")
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
            sc = ax_s.scatter(
                [p[1] for p in pairs],
                [p[2] for p in pairs],
                c=np.asarray([p[0] for p in pairs], dtype=np.float64),
                cmap="viridis",
                s=22,
                linewidths=0,
                rasterized=len(pairs) > RASTERIZE_ABOVE,
            )
            ax_s.set_xlabel(f"{name} at step end")
            ax_s.set_ylabel("mean call latency (µs)")
            ax_s.set_title("per step: counter vs latency", loc="left")
            if is_bytes:
                _bytes_axis(ax_s, "x")
            cbar = fig.colorbar(sc, ax=ax_s, pad=0.01, aspect=30)
            cbar.set_label("step")
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
        im = ax.imshow(
            m,
            aspect="auto",
            interpolation="nearest",
            cmap="magma_r",
            extent=(steps[0] - 0.5, steps[-1] + 0.5, len(labels) - 0.5, -0.5),
        )
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
