"""The HTML report: one self-contained file rendered from an :class:`Analysis`.

Jinja2 with autoescape renders ``templates/report.html.j2``; figures are matplotlib SVGs
inlined by :mod:`wsprof.report.figures`; CSS is inline; there is no script and nothing is
loaded from the network. Every name that comes from a trace (ops, frames, paths, metadata,
finding and diagnosis titles) is escaped by the template.

The first screen (1400x900) reads in 30 seconds: the verdict, the two headline numbers in one
line, then each diagnosis (most severe first) as a chain, symptom -> where -> why -> next step,
beside the growth figure of its symptom and the figure of its culprit (the frame's share of
samples, the counter against the symptom). Everything else is below, folded in ``<details>``.

Sections in page order (their ``id`` in brackets): verdict and diagnoses [diagnoses]; the
findings, each with its id and its diagnosis [verdict]; rollout share and weight-sync time per
step [two-numbers]; growth curves [growth]; per-op latency [ops]; counters against latency
[counters]; py-spy hot stacks [stacks]; the wrapper audit [wrappers]; ranks [ranks]; run
metadata [meta].
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from wsprof.analysis.evidence import evidence_rows
from wsprof.analysis.facts import LABELS
from wsprof.analysis.headline import headline, headline_of
from wsprof.analysis.kinds import ACCUMULATING_KINDS
from wsprof.analysis.model import (
    OUTLIER_RANK,
    SEVERITIES,
    Analysis,
    CounterTrack,
    Diagnosis,
    Finding,
    HotFrame,
    OpStats,
    ProcessAnalysis,
    SeriesResult,
    StepRow,
    Verdict,
)
from wsprof.analysis.verdict import judge
from wsprof.contracts.counters import is_gauge
from wsprof.contracts.series import (
    BUCKET_BETWEEN_PREFIX,
    BUCKET_CALLS_PREFIX,
    BUCKET_SEND_PREFIX,
    COUNTER_PREFIX,
    ROLLOUT_SHARE,
    WEIGHT_SYNC_S,
    Series,
    counter_key,
    counter_of,
)
from wsprof.contracts.units import (
    fmt_bytes,
    fmt_bytes_decimal,
    fmt_duration,
    fmt_in_unit,
    fmt_num,
    fmt_pct,
    fmt_rate,
    fmt_share_of,
    fmt_us,
)
from wsprof.report import figures
from wsprof.report.files import write_text
from wsprof.report.templating import environment

#: Section ids, in page order (tests and links rely on them). ``diagnoses`` is the first
#: screen; ``verdict`` (the id the findings list had when it was the verdict) lists findings.
SECTIONS = (
    "diagnoses",
    "verdict",
    "two-numbers",
    "growth",
    "ops",
    "counters",
    "stacks",
    "wrappers",
    "ranks",
    "meta",
)

#: Findings listed one line each in the findings section; the rest are folded below them.
#: Every finding's evidence is folded under its line.
TOP_FINDINGS = 12
#: Diagnoses shown open on the first screen; the rest are folded below them.
OPEN_DIAGNOSES = 3
#: The steps table shows all steps up to this many, else the first and last half of it.
MAX_STEP_ROWS = 20
#: Hot stacks listed per process.
MAX_HOT_STACKS = 10
#: Frames of one stack shown (leaf first); the rest are counted.
MAX_STACK_FRAMES = 6
#: Longest metadata or evidence value shown, in characters.
MAX_VALUE_CHARS = 400

#: Name of the headline weight-sync series.
WEIGHT_SYNC_SERIES = WEIGHT_SYNC_S
#: Name of a rollout-share series (series reports built from logs).
ROLLOUT_SHARE_SERIES = ROLLOUT_SHARE
#: Prefix of the per-step counter series (value at each step's end) of the primary process.
COUNTER_SERIES_PREFIX = COUNTER_PREFIX
#: Most counter figures per process (findings' counters first): a process records dozens of
#: counters (allocator, NVML, psutil, gc), and a report of every one is slow to read and open.
MAX_COUNTER_FIGURES = 8
#: Processes whose per-call and sample figures are drawn: the first ones in rank order, plus
#: every process a finding names. A 64-rank run with every figure measured 24 MB and 48 s; the
#: ranks heatmap compares all ranks at a glance.
MAX_FIGURE_PROCESSES = 4

_TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class StepTable:
    """Rows of the steps table; ``gap_after`` is the index after which rows were left out."""

    rows: tuple[StepRow, ...]
    n_total: int
    gap_after: int | None


@dataclass(frozen=True)
class ProcessSummary:
    """One row of the per-process comparison table."""

    label: str
    rank: int | None
    n_steps: int
    rollout_share: float | None
    weight_sync_median_s: float | None
    weight_sync_last_s: float | None
    n_calls: int


@dataclass(frozen=True)
class CounterView:
    """One counter figure of one process; ``aligned``: paired with per-step latency."""

    name: str
    n_samples: int
    aligned: bool
    figure: Markup | None


@dataclass(frozen=True)
class StackRow:
    """One hot stack: frames leaf first (shortened), samples and share."""

    leaf: str
    callers: tuple[str, ...]
    n_hidden: int
    samples: int
    share: float


@dataclass(frozen=True)
class ProcessView:
    """Everything the template shows for one process."""

    p: ProcessAnalysis
    op_figure: Markup | None
    between_figure: Markup | None
    site_figure: Markup | None
    #: figures left out for this process (a large run: see :data:`MAX_FIGURE_PROCESSES`)
    figures_skipped: bool
    ops: tuple[OpStats, ...]
    counters: tuple[CounterView, ...]
    #: counters recorded but not drawn (see :func:`shown_counters`)
    counters_hidden: int
    counters_aligned: bool
    hot_figure: Markup | None
    hot_frames: tuple[HotFrame, ...]
    hot_stacks: tuple[StackRow, ...]
    meta: tuple[tuple[str, str], ...]
    #: flame charts of the first and last third of the sampling windows (None without)
    flame_early: Markup | None = None
    flame_late: Markup | None = None


@dataclass(frozen=True)
class DiagnosisView:
    """One diagnosis as the first screen shows it: its chain and its figures.

    Attributes:
        d: the diagnosis.
        anchor: its element id (``diag-D1``), for links from its findings.
        symptom_figure: the growth curve of its symptom (or the rank against the others).
        culprit_figures: the frame's share of samples per window, the counter against the
            symptom; empty without a culprit.
        finding_refs: ``(finding id, anchor)`` of every finding grouped into it.
    """

    d: Diagnosis
    anchor: str
    symptom_figure: Markup | None
    culprit_figures: tuple[Markup, ...]
    finding_refs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FindingView:
    """One finding of the findings list: its evidence as rows with units, and its diagnoses.

    Attributes:
        f: the finding.
        anchor: its element id (``finding-F3``).
        rows: its evidence as ``(label, value)``, each value in its unit.
        diagnoses: ``(diagnosis id, anchor)`` of the diagnoses it belongs to.
    """

    f: Finding
    anchor: str
    rows: tuple[tuple[str, str], ...]
    diagnoses: tuple[tuple[str, str], ...]


# --------------------------------------------------------------------------- formatting


def series_unit(series: Series) -> str:
    """The unit a series' values are shown in, as text (attached where the series was made)."""
    return series.unit_label


def fmt_series_value(x: float | None, series: Series) -> str:
    """A value of ``series`` (slope, projection) in its unit."""
    return series.fmt(x)


def fmt_value(x: Any) -> str:
    """Any evidence or metadata value as one line of text (escaped later by the template).

    Integers are written as they are (pids, ns timestamps); floats in 4 significant digits;
    containers as JSON; long text is shortened.
    """
    if isinstance(x, int) and not isinstance(x, bool):
        text = str(x)
    elif isinstance(x, (bool, float)) or x is None:
        text = fmt_num(x)
    elif isinstance(x, str):
        text = x
    else:
        try:
            text = json.dumps(x, default=str, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            text = repr(x)
    if len(text) > MAX_VALUE_CHARS:
        text = text[: MAX_VALUE_CHARS - 1] + "…"
    return text


# --------------------------------------------------------------------------- view building


def step_table(steps: Sequence[StepRow], max_rows: int = MAX_STEP_ROWS) -> StepTable:
    """The steps to list: all of them, or the first and last ``max_rows // 2``.

    Args:
        steps: the step table of one process.
        max_rows: most rows listed.

    Returns:
        The rows and where rows were left out.
    """
    if len(steps) <= max_rows:
        return StepTable(tuple(steps), len(steps), None)
    half = max_rows // 2
    return StepTable(tuple(steps[:half]) + tuple(steps[-half:]), len(steps), half)


def _process_summary(p: ProcessAnalysis) -> ProcessSummary:
    h = headline_of(p, (), p.label)  # the same numbers as the headline, of this process
    return ProcessSummary(
        label=p.label,
        rank=p.rank,
        n_steps=len(p.steps),
        rollout_share=h.rollout_share_median,
        weight_sync_median_s=h.weight_sync_median_s,
        weight_sync_last_s=h.weight_sync_last_s,
        n_calls=p.calls.n_total,
    )


def _svg(svg: str | None) -> Markup | None:
    # Trusted: produced by matplotlib, which escapes all text and attribute values.
    return Markup(svg) if svg is not None else None


def _counter_view(
    track: CounterTrack, p: ProcessAnalysis, per_step: dict[int, float] | None
) -> CounterView:
    return CounterView(
        name=track.name,
        n_samples=min(len(track.t_s), len(track.value)),
        aligned=bool(figures.counter_latency_pairs(p.steps, per_step)),
        figure=_svg(figures.counter_figure(track, p.steps, per_step)),
    )


def counter_steps(analysis: Analysis) -> dict[str, dict[int, float]]:
    """Per-step counter values of the primary process, from its ``counter:<name>`` series.

    Args:
        analysis: the analysis.

    Returns:
        ``{counter name: {step: value at the step's end}}``.
    """
    out: dict[str, dict[int, float]] = {}
    for r in analysis.series:
        counter = counter_of(r.series.name)
        if counter is not None:
            out[counter] = dict(zip(r.series.steps, r.series.values, strict=False))
    return out


def _stack_rows(p: ProcessAnalysis) -> tuple[StackRow, ...]:
    total = p.n_samples or sum(n for _, n in p.hot_stacks)
    ranked = sorted(p.hot_stacks, key=lambda s: -s[1])[:MAX_HOT_STACKS]
    rows = []
    for stack, samples in ranked:
        leaf_first = tuple(reversed(stack))
        shown = leaf_first[:MAX_STACK_FRAMES]
        rows.append(
            StackRow(
                leaf=shown[0] if shown else "",
                callers=shown[1:],
                n_hidden=max(0, len(leaf_first) - len(shown)),
                samples=samples,
                share=samples / total if total else 0.0,
            )
        )
    return tuple(rows)


def _meta_rows(meta: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), fmt_value(v)) for k, v in sorted(meta.items(), key=lambda kv: str(kv[0])))


def _flames(p: ProcessAnalysis) -> dict[str, Markup | None]:
    """Early and late flame charts of a process; frames that gained share are red in the late
    one."""
    if not p.early_stacks or not p.late_stacks:
        return {}
    gained = [f.frame for f in p.shift.gained] if p.shift is not None else []
    k = p.shift.k if p.shift is not None else None
    side = f"the first {k} windows" if k else "the first windows"
    late = f"the last {k} windows" if k else "the last windows"
    return {
        "flame_early": _svg(figures.flame_figure(p.early_stacks, f"Early: {side}")),
        "flame_late": _svg(
            figures.flame_figure(
                p.late_stacks, f"Late: {late} (red: frames that gained share)", gained
            )
        ),
    }


def ranks_view(analysis: Analysis) -> Markup | None:
    """Heatmap of per-rank weight-sync time per step (outlier ranks red); None with fewer than
    two ranks with steps."""
    ranks = [r for r in analysis.ranks if r.steps]
    if len(ranks) < 2:
        return None
    steps = sorted({s for r in ranks for s in r.steps})
    values = [[dict(zip(r.steps, r.weight_sync_s)).get(s) for s in steps] for r in ranks]
    named = {
        f.evidence.process_named()
        for f in analysis.findings
        if f.kind == OUTLIER_RANK and f.severity != "info"
    }
    labels = [r.label for r in ranks]
    return _svg(figures.ranks_figure(labels, steps, values, [x for x in labels if x in named]))


def shown_counters(
    p: ProcessAnalysis, named: Sequence[str] = (), only_named: bool = False
) -> list[CounterTrack]:
    """The counters a report draws for a process: those a finding names first, then (unless
    ``only_named``) gauges (:func:`wsprof.contracts.counters.is_gauge`: not wsprof's own probe
    costs, cumulative counts or garbage-collector churn); at most :data:`MAX_COUNTER_FIGURES`."""
    tracks = [c for c in p.counters if min(len(c.t_s), len(c.value)) > 0]
    first = [c for c in tracks if c.name in named]
    rest = [] if only_named else [c for c in tracks if c.name not in named and is_gauge(c.name)]
    return (first + rest)[:MAX_COUNTER_FIGURES]


def process_view(
    p: ProcessAnalysis,
    per_step_counters: dict[str, dict[int, float]] | None = None,
    named: Sequence[str] = (),
    only_named: bool = False,
    draw: bool = True,
) -> ProcessView:
    """Figures and tables of one process.

    Args:
        p: the process's analysis.
        per_step_counters: each counter's value per step (known for the primary process,
            from its ``counter:<name>`` series); counters without are drawn over time only.
        named: counters named by findings (drawn first; see :func:`shown_counters`).
        only_named: draw only those (the processes after the primary one: a figure per counter
            per rank would make a large run's report slow to build and to read).
        draw: draw the per-call and sample figures (False: tables only; see
            :data:`MAX_FIGURE_PROCESSES`).

    Returns:
        The view the template renders.
    """
    known = per_step_counters or {}
    counters = tuple(
        _counter_view(c, p, known.get(c.name)) for c in shown_counters(p, named, only_named)
    )
    return ProcessView(
        p=p,
        op_figure=_svg(figures.op_latency_figure(p.calls)) if draw else None,
        between_figure=_svg(figures.between_layers_figure(p.calls)) if draw else None,
        site_figure=_svg(figures.site_latency_figure(p.calls)) if draw else None,
        figures_skipped=not draw,
        ops=tuple(sorted(p.ops, key=lambda o: -o.total_s)),
        counters=counters,
        counters_hidden=len(p.counters) - len(counters),
        counters_aligned=any(c.aligned for c in counters),
        hot_figure=_svg(figures.hot_frames_figure(p.hot_frames)) if draw else None,
        **(_flames(p) if draw else {}),
        hot_frames=tuple(p.hot_frames[: figures.MAX_HOT_FRAMES]),
        hot_stacks=_stack_rows(p),
        meta=_meta_rows(p.meta),
    )


# --------------------------------------------------------------------------- findings, diagnoses


def _anchor(prefix: str, ident: str, i: int) -> str:
    return f"{prefix}-{ident or i + 1}"


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def finding_rows(f: Finding, series: Mapping[str, Series]) -> tuple[tuple[str, str], ...]:
    """A finding's evidence as ``(label, value)`` rows with units, never raw floats or JSON
    (:func:`wsprof.analysis.evidence.evidence_rows`), values at most
    :data:`MAX_VALUE_CHARS` characters."""
    return tuple((label, _clip(text)) for label, text in evidence_rows(f.evidence, series))


def _diagnoses_of(analysis: Analysis) -> list[Diagnosis]:
    """The diagnoses, most severe first (stable: the analysis's order within a severity)."""
    return sorted(analysis.diagnoses, key=lambda d: -_severity_rank(d.severity))


def finding_views(
    findings: Sequence[Finding], diagnoses: Sequence[Diagnosis], series: Mapping[str, Series]
) -> list[FindingView]:
    """The findings list: each finding's anchor, evidence rows and the diagnoses it is in.

    Args:
        findings: most severe first.
        diagnoses: the diagnoses (their ``finding_ids`` name the findings).
        series: the judged per-step series by key (units of the evidence).

    Returns:
        One view per finding, in the same order.
    """
    owners: dict[str, list[tuple[str, str]]] = {}
    for i, d in enumerate(diagnoses):
        for fid in d.finding_ids:
            owners.setdefault(fid, []).append((d.id or str(i + 1), _anchor("diag", d.id, i)))
    return [
        FindingView(
            f=f,
            anchor=_anchor("finding", f.id, i),
            rows=finding_rows(f, series),
            diagnoses=tuple(owners.get(f.id, ())) if f.id else (),
        )
        for i, f in enumerate(findings)
    ]


def _process_named(analysis: Analysis, label: str | None) -> ProcessAnalysis | None:
    return next((p for p in analysis.processes if p.label == label), None)


def _frame_figure(analysis: Analysis, d: Diagnosis) -> Markup | None:
    """The culprit frame's share of samples over the sampling windows of the process whose
    shift names it (the diagnosis's process first)."""
    frame = d.culprit_frame
    if frame is None:
        return None
    first = _process_named(analysis, d.process)
    procs = ([first] if first is not None else []) + [
        p for p in analysis.processes if p is not first
    ]
    for p in procs:
        shift = p.shift
        gained = next((g for g in shift.gained if g.frame == frame), None) if shift else None
        if shift is None or gained is None:
            continue
        active = [w for w in p.windows if w.n_active > 0]
        sync = [w.weight_sync_share for w in active]
        return _svg(
            figures.frame_share_figure(
                frame,
                gained,
                shift.k,
                shift.n_windows,
                per_window=shift.per_window.get(frame, ()),
                sync_share=sync if len(sync) == shift.n_windows else (),
            )
        )
    return None


def _counter_figure(
    analysis: Analysis, d: Diagnosis, by_name: Mapping[str, SeriesResult]
) -> Markup | None:
    """The culprit counter's per-step curve against the symptom's; over time when its
    per-step values are not known."""
    if d.culprit_counter is None:
        return None
    counter = by_name.get(counter_key(d.culprit_counter))
    symptom = by_name.get(d.symptom_series) if d.symptom_series else None
    if counter is not None and symptom is not None:
        return _svg(figures.counter_against_figure(counter.series, symptom.series))
    p = _process_named(analysis, d.process) or analysis.primary
    track = next((c for c in p.counters if c.name == d.culprit_counter), None) if p else None
    if track is None:
        return None
    return _svg(figures.counter_figure(track, width_in=figures.CULPRIT_WIDTH_IN))


def _symptom_figure(
    analysis: Analysis, d: Diagnosis, by_name: Mapping[str, SeriesResult]
) -> Markup | None:
    """The growth curve of the symptom's series; for a rank apart from the others, its
    weight-sync time per step against theirs."""
    r = by_name.get(d.symptom_series) if d.symptom_series else None
    if r is not None:
        label = LABELS.get(r.series.name, r.series.name)
        return _svg(
            figures.growth_figure(
                r,
                title=f"{label} per step: {r.verdict.shape}",
                width_in=figures.SYMPTOM_WIDTH_IN,
                height_in=3.0,
            )
        )
    ranks = [x for x in analysis.ranks if x.steps]
    if d.process is not None and any(x.label == d.process for x in ranks) and len(ranks) >= 2:
        return _svg(
            figures.rank_lines_figure(
                [x.label for x in ranks],
                [x.steps for x in ranks],
                [x.weight_sync_s for x in ranks],
                d.process,
            )
        )
    return None


def diagnosis_views(
    analysis: Analysis, diagnoses: Sequence[Diagnosis], findings: Sequence[FindingView]
) -> list[DiagnosisView]:
    """The first screen's diagnoses with their figures and links to their findings.

    Args:
        analysis: the analysis (series, processes and ranks the figures are drawn from).
        diagnoses: most severe first.
        findings: the findings list (anchors by finding id).

    Returns:
        One view per diagnosis, in the same order.
    """
    by_name = {r.series.name: r for r in analysis.series}
    anchors = {v.f.id: v.anchor for v in findings if v.f.id}
    out = []
    for i, d in enumerate(diagnoses):
        culprits = (_frame_figure(analysis, d), _counter_figure(analysis, d, by_name))
        out.append(
            DiagnosisView(
                d=d,
                anchor=_anchor("diag", d.id, i),
                symptom_figure=_symptom_figure(analysis, d, by_name),
                culprit_figures=tuple(c for c in culprits if c is not None),
                finding_refs=tuple((fid, anchors[fid]) for fid in d.finding_ids if fid in anchors),
            )
        )
    return out


def verdict_of(analysis: Analysis) -> Verdict:
    """The analysis's verdict; judged here when an analysis made by hand kept the default
    ``no_problem`` beside findings at warning or above."""
    v = analysis.verdict
    if v.status == "no_problem" and any(f.severity != "info" for f in analysis.findings):
        return judge(analysis)
    return v


def _severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


def _severity_counts(findings: Sequence[Finding]) -> list[tuple[str, int]]:
    return [(s, sum(1 for f in findings if f.severity == s)) for s in reversed(SEVERITIES)]


#: Plurals that are not the word with an ``s``.
_PLURALS = {"diagnosis": "diagnoses", "process": "processes", "series": "series"}


def plural(n: int, words: str) -> str:
    """``1 problem``, ``2 problems``, ``3 more diagnoses``: a count with its noun (the last
    word of ``words`` takes the plural)."""
    if n == 1:
        return f"{n} {words}"
    head, _, word = words.rpartition(" ")
    many = _PLURALS.get(word, word + "s")
    return f"{n} {head + ' ' if head else ''}{many}"


def _environment() -> Environment:
    return environment(
        dict(
            dur=fmt_duration,
            us=fmt_us,
            pct=fmt_pct,
            bytes=fmt_bytes,
            num=fmt_num,
            value=fmt_value,
            in_unit=fmt_in_unit,
            sval=fmt_series_value,
            plural=plural,
            size=fmt_bytes_decimal,
            rate=fmt_rate,
            share_of=fmt_share_of,
        )
    )


#: The buckets table shows at most this many steps (the last ones) and buckets.
MAX_BUCKET_ROWS = 30
MAX_BUCKET_COLUMNS = 64


@dataclass(frozen=True)
class BucketCell:
    """One bucket at one step: its send time, s, and the recorded calls inside it (a joined
    run; None otherwise) with their time between the API and the backend, s."""

    send_s: float | None
    calls: float | None
    between_s: float | None


@dataclass(frozen=True)
class BucketRow:
    step: int
    cells: tuple[BucketCell, ...]


@dataclass(frozen=True)
class BucketTable:
    """Each step's buckets (slime's timeline): bucket ids, the rows (the last
    :data:`MAX_BUCKET_ROWS` steps), how many steps there are, the buckets whose send grows
    (the ``sync_part`` finding's), and whether the recorded calls inside them are known."""

    ids: tuple[int, ...]
    rows: tuple[BucketRow, ...]
    n_total: int
    grown: tuple[int, ...]
    inside: bool


def bucket_table(analysis: Analysis) -> BucketTable | None:
    """The buckets table of an analysis with a framework's timeline, None without one."""
    by_name = {r.series.name: r.series for r in analysis.series}

    def of(prefix: str) -> dict[int, dict[int, float]]:
        out: dict[int, dict[int, float]] = {}
        for name, s in by_name.items():
            if name.startswith(prefix) and name[len(prefix) :].isdigit():
                out[int(name[len(prefix) :])] = dict(zip(s.steps, s.values))
        return out

    sends = of(BUCKET_SEND_PREFIX)
    if not sends:
        return None
    calls, between = of(BUCKET_CALLS_PREFIX), of(BUCKET_BETWEEN_PREFIX)
    ids = tuple(sorted(sends))[:MAX_BUCKET_COLUMNS]
    steps = sorted({k for v in sends.values() for k in v})
    rows = tuple(
        BucketRow(
            step,
            tuple(
                BucketCell(
                    sends[b].get(step),
                    calls.get(b, {}).get(step),
                    between.get(b, {}).get(step),
                )
                for b in ids
            ),
        )
        for step in steps[-MAX_BUCKET_ROWS:]
    )
    grown: tuple[int, ...] = ()
    for f in analysis.findings:
        if f.kind == "sync_part":
            ids_grown = f.evidence.as_dict().get("grown_buckets")
            if isinstance(ids_grown, list):
                grown = tuple(int(i) for i in ids_grown)
    return BucketTable(ids, rows, len(steps), grown, bool(calls))


def render_html(analysis: Analysis) -> str:
    """Render the report of one analysis as a self-contained HTML page.

    Args:
        analysis: what ``wsprof analyze`` produced (a run or a series).

    Returns:
        The HTML text: no script, no external resource, figures inline.
    """
    from wsprof._version import __version__

    findings = sorted(analysis.findings, key=lambda f: -_severity_rank(f.severity))
    diagnoses = _diagnoses_of(analysis)
    series_by_name = {r.series.name: r.series for r in analysis.series}
    finding_list = finding_views(findings, diagnoses, series_by_name)
    diagnosis_list = diagnosis_views(analysis, diagnoses, finding_list)
    head = headline(analysis)
    primary = analysis.primary
    per_step = counter_steps(analysis)
    named = [f.where for f in analysis.findings if f.where]
    # A finding names a process in its evidence (outlier_rank, gpu_idle_during_sync).
    labels = {f.evidence.process_named() for f in analysis.findings} - {None}
    ranks = {f.evidence.rank_named() for f in analysis.findings} - {None}

    def drawn(i: int, p: ProcessAnalysis) -> bool:
        return (
            i < MAX_FIGURE_PROCESSES
            or p is primary
            or p.label in labels
            or (p.rank is not None and p.rank in ranks)
        )

    procs = [
        process_view(
            p,
            per_step if p is primary else None,
            named,
            only_named=p is not primary,
            draw=drawn(i, p),
        )
        for i, p in enumerate(analysis.processes)
    ]
    ws_figure = None
    if head.weight_sync_result is not None:
        ws_figure = figures.growth_figure(
            head.weight_sync_result, title="Weight-sync time per step"
        )
    # Weight sync first: it is the headline of this tool; then by name.
    accumulating = sorted(
        # Only kinds that can accumulate: a step counter or a quality metric that rises is
        # shown in the table, never counted as an accumulating series.
        (
            r
            for r in analysis.series
            if r.verdict.accumulating
            and (r.series.kind is None or r.series.kind in ACCUMULATING_KINDS)
        ),
        key=lambda r: (r.series.name != WEIGHT_SYNC_SERIES, r.series.name),
    )
    series_rows = sorted(analysis.series, key=lambda r: (not r.verdict.accumulating, r.series.name))
    growth_figures = [
        (
            r,
            _svg(
                figures.growth_figure(
                    r,
                    title=f"{r.series.name}: {r.verdict.shape}",
                    width_in=figures.HALF_WIDTH_IN,
                )
            ),
        )
        for r in accumulating
    ]
    template = _environment().get_template(_TEMPLATE)
    return template.render(
        a=analysis,
        version=__version__,
        sections=SECTIONS,
        verdict=verdict_of(analysis),
        findings=findings,
        top_findings=finding_list[:TOP_FINDINGS],
        more_findings=finding_list[TOP_FINDINGS:],
        severity_counts=_severity_counts(findings),
        finding_anchors={v.f.id: v.anchor for v in finding_list if v.f.id},
        open_diagnoses=diagnosis_list[:OPEN_DIAGNOSES],
        more_diagnoses=diagnosis_list[OPEN_DIAGNOSES:],
        n_diagnoses=len(diagnosis_list),
        head=head,
        ws_figure=_svg(ws_figure),
        breakdown_figure=_svg(
            figures.step_breakdown_figure(primary.steps) if primary is not None else None
        ),
        wire_figure=_svg(
            figures.wire_figure(primary.steps, head.link_limit_bytes_per_s, head.link_limit_name)
            if primary is not None
            else None
        ),
        steps=step_table(primary.steps) if primary is not None else None,
        buckets=bucket_table(analysis),
        primary=primary,
        summaries=[_process_summary(p) for p in analysis.processes],
        accumulating=accumulating,
        series_rows=series_rows,
        growth_figures=growth_figures,
        procs=procs,
        any_counters=any(v.counters for v in procs),
        ranks_figure=ranks_view(analysis),
        any_stacks=any(v.hot_frames or v.hot_stacks for v in procs),
    )


def write_html(analysis: Analysis, path: str | os.PathLike[str]) -> str:
    """Render the report and write it to ``path`` (parent folders are created).

    Args:
        analysis: the analysis to render.
        path: the output file.

    Returns:
        The path written, as a string.

    Raises:
        InputError: the file or its folder cannot be written (one line: which and why).
    """
    return write_text(path, render_html(analysis), "the report")
