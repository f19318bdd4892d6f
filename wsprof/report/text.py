"""Terminal text: verdict first, then the diagnoses, readable in 80 columns, no colour when not
a TTY. Every line is escaped (:func:`wsprof.contracts.safe_text.escape_controls`) before the
severities are coloured: names read from an input never reach the terminal as escapes."""

from __future__ import annotations

import re
import textwrap
from collections import Counter

from wsprof.analysis.headline import headline
from wsprof.analysis.kinds import ACCUMULATING_KINDS
from wsprof.analysis.model import (
    OUTLIER_RANK,
    ROLLOUT_SHARE_KIND,
    Analysis,
    Diagnosis,
    Finding,
    Headline,
    ProcessAnalysis,
    RankSeries,
)
from wsprof.contracts.safe_text import escape_controls
from wsprof.contracts.units import fmt_bytes_decimal, fmt_duration, fmt_rate

WIDTH = 80


def _wrap(
    text: str, width: int, initial_indent: str = "", subsequent_indent: str = ""
) -> list[str]:
    """Wrap at spaces only: paths and names (``/tmp/a-b/x.py:12``) stay whole for copying."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=initial_indent,
        subsequent_indent=subsequent_indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


#: The windows table lists every window up to this many, else the first and last half.
MAX_WINDOW_ROWS = 20


def shorten_frame(frame: str, width: int) -> str:
    """A frame in at most ``width`` characters: the function kept whole where it fits, the
    file path cut from the left (``…/update_weight_from_distributed.py:12``)."""
    if len(frame) <= width:
        return frame
    head, sep, tail = frame.partition(" (")
    if sep and len(head) + 4 < width:
        room = width - len(head) - 3  # ' (' + '…'
        return f"{head} (…{tail[-room:]}"
    return frame[: max(width - 1, 0)] + "…"


def _share(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def _windows_lines(pa: ProcessAnalysis) -> list[str]:
    """The windows table of one process: index, samples, weight-sync and rollout share of
    active samples, top leaf frame with its share; 80 columns."""
    ws = pa.windows
    lines = [""] + _wrap(
        f"windows of {pa.label} (phases: {pa.phase_source or 'generic'} "
        "patterns; shares of active samples):",
        WIDTH,
        subsequent_indent="  ",
    )
    lines.append(f"{'#':>3} {'samples':>7} {'sync':>5} {'roll':>5} {'top':>4}  top frame")
    fixed = 3 + 1 + 7 + 1 + 5 + 1 + 5 + 1 + 4 + 2
    rows = list(enumerate(ws))
    gap = None
    if len(rows) > MAX_WINDOW_ROWS:
        half = MAX_WINDOW_ROWS // 2
        rows, gap = rows[:half] + rows[-half:], half
    for j, (i, w) in enumerate(rows):
        if j == gap:
            lines.append(f"{'...':>3} ({len(ws) - MAX_WINDOW_ROWS} more windows)")
        top = w.top_frame
        frame = shorten_frame(top.frame, WIDTH - fixed) if top else "-"
        lines.append(
            f"{i:>3} {w.n_samples:>7} {_share(w.weight_sync_share):>5} "
            f"{_share(w.rollout_share):>5} {_share(top.share if top else None):>4}  {frame}"
        )
    common = Counter(w.common_frame for w in ws if w.common_frame)
    if common:
        frame, n = min(common.items(), key=lambda kv: (-kv[1], kv[0]))
        lines += _wrap(
            f"common frame (in at least half of a window's active samples): {frame} "
            f"in {n} of {len(ws)} windows",
            WIDTH,
            subsequent_indent="  ",
        )
    return lines


#: The rank table lists every rank up to this many; beyond it the outliers and a summary line.
MAX_RANK_ROWS = 12


def _num(v: float | None, width: int, spec: str = ".4g") -> str:
    return (format(v, spec) if v is not None else "-").rjust(width)


def _rank_row(r: RankSeries) -> str:
    sync = [v for v in r.weight_sync_s if v is not None]
    host = r.host or "-"
    host = host if len(host) <= 16 else host[:15] + "…"
    acc = "-" if r.sync is None else ("yes" if r.sync.accumulating else "no")
    slope = r.sync.slope_per_step if r.sync is not None else None
    lag = r.sync_lag_s * 1e3 if r.sync_lag_s is not None else None
    return (
        f"{r.label[:10]:<10} {host:<16} {_num(sync[0] if sync else None, 8)} "
        f"{_num(sync[-1] if sync else None, 8)} {_num(slope, 11, '+.3g')} {acc:<5} "
        f"{_num(lag, 8, '.1f')}"
    )


def _ranks_lines(analysis: Analysis) -> list[str]:
    """The per-rank table: weight sync of the first and last step, slope, accumulating, and
    the median lag of its sync start behind the first rank's (run clock). Beyond
    :data:`MAX_RANK_ROWS` ranks: the primary, the outliers and the accumulating ones, with a
    summary line."""
    ranks = analysis.ranks
    named = {f.where for f in analysis.findings if f.kind == OUTLIER_RANK and f.severity != "info"}
    hosts = sorted({r.host for r in ranks if r.host})
    meds = sorted(r.median_weight_sync_s for r in ranks if r.median_weight_sync_s is not None)
    growing = [r for r in ranks if r.sync is not None and r.sync.accumulating]
    head = f"ranks: {len(ranks)} on {len(hosts)} host{'s' if len(hosts) != 1 else ''}"
    if meds:
        head += (
            f"; weight sync median {fmt_duration(meds[len(meds) // 2])} (ranks' medians "
            f"{fmt_duration(meds[0])} - {fmt_duration(meds[-1])})"
        )
    head += f"; {len(growing)} accumulating, {len(named)} outlier(s)"
    lines = [""] + _wrap(head, WIDTH, subsequent_indent="  ")
    shown = list(ranks)
    if len(ranks) > MAX_RANK_ROWS:
        keep = [r for r in ranks[1:] if r.where() in named or r in growing]
        shown = [ranks[0], *keep[: MAX_RANK_ROWS - 1]]
    lines.append(
        f"{'rank':<10} {'host':<16} {'first s':>8} {'last s':>8} {'slope/step':>11} "
        f"{'accum':<5} {'lag ms':>8}"
    )
    lines += [_rank_row(r) + (" *" if r.where() in named else "") for r in shown]
    if len(shown) < len(ranks):
        lines.append(f"(+{len(ranks) - len(shown)} more ranks: --format json lists every rank)")
    lines += _wrap(
        "first/last: weight sync of the first and last step; lag: median time its "
        "sync starts after the first rank's (run clock); *: outlier_rank",
        WIDTH,
    )
    return lines


_COLOURS = {"critical": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}
_RESET = "\033[0m"
#: A diagnosis' or finding's tag at the start of its first line (:func:`_tag`).
_TAG = re.compile(r"^((?:[DF]\d+ )?)\[(critical|warning|info)\]")


def _colour_tag(m: re.Match[str]) -> str:
    return f"{m[1]}{_COLOURS[m[2]]}[{m[2]}]{_RESET}"


def terminal_lines(lines: list[str], colour: bool = False) -> list[str]:
    """``lines`` ready for a terminal: control characters escaped in each (a name holding
    ``\\n`` or ESC stays on its line, visible as ``\\x0a``, ``\\x1b``), then, with
    ``colour``, the severity tags coloured (the only escapes printed are wsprof's own)."""
    out = [escape_controls(line) for line in lines]
    if colour:
        out = [_TAG.sub(_colour_tag, line, count=1) for line in out]
    return out


def _verdict_lines(analysis: Analysis) -> list[str]:
    """Coverage (when short), the verdict line and its reasons, and the two numbers."""
    lines: list[str] = [f"wsprof: {analysis.source}"]
    cov = analysis.coverage
    if cov is not None and cov.lines():
        # Said before the verdict: a verdict on part of the collectives must not read whole.
        lines.append(f"COVERAGE: {cov.status}")
        for line in cov.lines():
            lines += _wrap(line, WIDTH, initial_indent="  ", subsequent_indent="    ")
    verdict = analysis.verdict
    if verdict.status == "inconclusive":
        lines += _wrap(
            f"VERDICT: INCONCLUSIVE: {verdict.reasons[0]}", WIDTH, subsequent_indent="    "
        )
        for reason in verdict.reasons[1:]:
            lines += _wrap(f"also: {reason}", WIDTH, initial_indent="  ", subsequent_indent="    ")
    else:
        if verdict.status == "problems":
            n = verdict.n_problems
            head = f"VERDICT: {n} problem{'s' if n != 1 else ''} found"
            if verdict.n_findings > n:
                head += (
                    f" ({verdict.n_findings} warning or critical findings behind "
                    f"{'it' if n == 1 else 'them'})"
                )
        else:
            head = "VERDICT: no accumulating problem"
        lines.append(head)
        for reason in verdict.reasons:
            lines += _wrap(f"limit: {reason}", WIDTH, initial_indent="  ", subsequent_indent="    ")
    summary = headline(analysis).summary()
    if summary:
        lines += _wrap(summary, WIDTH, initial_indent="  ", subsequent_indent="    ")
    return lines


def _wire_lines(pa: ProcessAnalysis, head: Headline) -> list[str]:
    """The transfers of each weight sync (:attr:`StepRow.wire`): bytes (NCCL tests' sizes),
    time on the wire, the share of the sync outside transfers, bus and algorithm bandwidth;
    then each op's part in the median step and the link limit. Nothing without bytes."""
    rows = [s for s in pa.steps if s.wire is not None and s.wire.bytes > 0]
    if not rows:
        return []
    lines = [
        "",
        f"weight-sync transfers of {pa.label} (bytes as NCCL's tests size them):",
        f"{'step':>5} {'sync s':>9} {'bytes':>10} {'wire s':>9} {'outside':>8} "
        f"{'busbw':>11} {'algbw':>11} {'calls':>6}",
    ]
    for s in rows:
        w = s.wire
        assert w is not None
        own = s.own_sync_s
        out = s.outside_transfers_s
        share = f"{out / own:8.0%}" if out is not None and own else f"{'-':>8}"
        lines.append(
            f"{s.step:>5} {own if own is not None else float('nan'):9.3f} "
            f"{fmt_bytes_decimal(w.bytes):>10} {w.wire_s:9.3f} {share} "
            f"{fmt_rate(w.busbw):>11} {fmt_rate(w.algbw):>11} {w.n_calls:>6}"
        )
    mid = sorted(rows, key=lambda r: r.wire.bytes if r.wire else 0)[len(rows) // 2].wire
    if mid is not None:
        ops = ", ".join(
            f"{o.op} {o.n_calls} calls {fmt_bytes_decimal(o.bytes)} in {fmt_duration(o.wire_s)}"
            for o in mid.ops
        )
        lines += _wrap(f"per op (median step): {ops}", WIDTH, subsequent_indent="  ")
    if head.link_limit_why:
        limit = fmt_rate(head.link_limit_bytes_per_s) if head.link_limit_bytes_per_s else ""
        lines += _wrap(
            f"link limit: {head.link_limit_name}{' ' + limit if limit else ''} "
            f"({head.link_limit_why})",
            WIDTH,
            subsequent_indent="  ",
        )
    return lines


#: Label width of a chain's links (``symptom:``, ``where:``, ``why:``, ``next:``).
_LINK_WIDTH = 9


def _tag(ident: str, severity: str) -> str:
    """``D1 [critical]`` (coloured by :func:`terminal_lines`)."""
    return f"{ident} [{severity}]".strip()


def diagnosis_lines(d: Diagnosis, colour: bool = False) -> list[str]:
    """One diagnosis: its title, then the chain, one wrapped paragraph per link; escaped for
    a terminal, the severity coloured with ``colour``."""
    return terminal_lines(_diagnosis_lines(d), colour)


def _diagnosis_lines(d: Diagnosis) -> list[str]:
    lines = _wrap(f"{_tag(d.id, d.severity)} {d.title}", WIDTH, subsequent_indent="    ")
    lines += _wrap(
        f"confidence {d.confidence_word} ({d.confidence:.2f}); findings {' '.join(d.finding_ids)}",
        WIDTH,
        initial_indent="    ",
        subsequent_indent="    ",
    )
    pad = " " * (4 + _LINK_WIDTH)

    def para(label: str, text: str) -> list[str]:
        return _wrap(
            text, WIDTH, initial_indent=f"    {label + ':':<{_LINK_WIDTH}}", subsequent_indent=pad
        )

    for link in d.links:
        if link.role == "symptom" and link.text == d.title:
            continue  # a diagnosis of one finding: its title is its symptom
        lines += para(link.role, link.text)
    for m in d.missing:
        lines += para("missing", m)
    lines += para("next", d.next_step)
    return lines


def _finding_lines(f: Finding, owners: dict[str, list[str]]) -> list[str]:
    held = f" (in {', '.join(owners[f.id])})" if owners.get(f.id) else ""
    lines = _wrap(f"{_tag(f.id, f.severity)}{held} {f.title}", WIDTH, subsequent_indent="    ")
    if f.where:
        lines += _wrap(
            f"where: {f.where}", WIDTH, initial_indent="    ", subsequent_indent="      "
        )
    lines += _wrap(f"next: {f.next_step}", WIDTH, initial_indent="    ", subsequent_indent="      ")
    return lines


def _leftover(analysis: Analysis) -> list[Finding]:
    """Findings in no diagnosis (info ones), the headline's own finding left out."""
    used = {i for d in analysis.diagnoses for i in d.finding_ids}
    return [f for f in analysis.findings if f.id not in used and f.kind != ROLLOUT_SHARE_KIND]


def render_summary(analysis: Analysis, colour: bool = False) -> str:
    """The verdict, the two numbers and the diagnoses: what ``wsprof run`` ends with.

    Args:
        analysis: what to render.
        colour: ANSI colours for severities.
    """
    lines = _verdict_lines(analysis)
    for d in analysis.diagnoses:
        lines.append("")
        lines += _diagnosis_lines(d)
    return "\n".join(terminal_lines(lines, colour)) + "\n"


def render_text(analysis: Analysis, colour: bool = False, max_findings: int | None = None) -> str:
    """The summary a user reads first: the verdict, the two numbers, the diagnoses (each
    cause with its chain), then the tables.

    Args:
        analysis: what to render.
        colour: ANSI colours for severities (only when writing to a TTY).
        max_findings: with a number, also list that many findings (``analyze --all`` lists
            every one, with its id); None lists only the findings in no diagnosis, one line
            each.
    """
    lines = _verdict_lines(analysis)
    lines.append("")
    for d in analysis.diagnoses:
        lines += _diagnosis_lines(d)
        lines.append("")
    if max_findings is not None:
        lines.append(f"findings ({len(analysis.findings)}):")
        owners: dict[str, list[str]] = {}
        for d in analysis.diagnoses:
            for i in d.finding_ids:
                owners.setdefault(i, []).append(d.id)
        for f in analysis.findings[:max_findings]:
            lines += _finding_lines(f, owners)
        if len(analysis.findings) > max_findings:
            lines.append(f"(+{len(analysis.findings) - max_findings} more: --format json)")
    else:
        rest = _leftover(analysis)
        for f in rest:
            lines += _wrap(f"{_tag(f.id, f.severity)} {f.title}", WIDTH, subsequent_indent="    ")
        if analysis.findings:
            n = len(analysis.findings)
            lines += _wrap(
                f"({n} finding{'s' if n != 1 else ''} with where and next step: wsprof "
                f"analyze {analysis.source} --all)",
                WIDTH,
                subsequent_indent="  ",
            )
    lines.append("")
    lines.append(f"{'series':<30} {'shape':<17} {'accum':<5} {'slope/step':>12} {'last':>11}")
    for r in analysis.series:
        v = r.verdict
        last = r.series.values[-1] if r.series.values else float("nan")
        judged = r.series.kind is None or r.series.kind in ACCUMULATING_KINDS
        accum = ("yes" if v.accumulating else "no") if judged else "-"
        lines.append(
            f"{r.series.name[:30]:<30} {v.shape:<17} {accum:<5} "
            f"{v.slope_per_step:>12.4g} {last:>11.4g}"
        )
    pa = analysis.primary
    if pa is not None and pa.steps:
        lines.append("")
        lines.append(f"steps of {pa.label} (from {pa.step_source}):")
        lines.append(
            f"{'step':>5} {'step s':>9} {'rollout':>9} {'share':>6} {'sync s':>9} "
            f"{'wait s':>8} {'calls':>6} {'between s':>10}"
        )
        for s in pa.steps:
            roll = f"{s.rollout_s:9.3f}" if s.rollout_s is not None else f"{'-':>9}"
            share = f"{s.rollout_share:6.0%}" if s.rollout_share is not None else f"{'-':>6}"
            own = s.own_sync_s
            sync = f"{own:9.3f}" if own is not None else f"{'-':>9}"
            wait = f"{s.sync_wait_s:8.3f}" if s.sync_wait_s is not None else f"{'-':>8}"
            lines.append(
                f"{s.step:>5} {s.step_s:9.3f} {roll} {share} {sync} {wait} {s.n_calls:>6} "
                f"{s.between_layers_s:10.3f}"
            )
        if any(s.sync_wait_s for s in pa.steps):
            sources = sorted({s.sync_wait_source for s in pa.steps if s.sync_wait_source})
            lines.append(
                "sync s: the rank's own weight-sync time; wait s: waiting for slower "
                f"ranks to join it (from {' and '.join(sources) or 'timing'})"
            )
        lines += _wire_lines(pa, headline(analysis))
    if len(analysis.ranks) >= 2:
        lines += _ranks_lines(analysis)
    if pa is not None and pa.windows:
        lines += _windows_lines(pa)
    if analysis.wrappers:
        lines.append("")
        lines.append("wrappers on collective names (most time between layers first):")
        for w in analysis.wrappers[:8]:
            spent = f"{w.between_s:.3f} s between layers" if w.between_s is not None else "no calls"
            when = ", after patch()" if w.after_patch else ""
            what = "ProcessGroup subclass" if w.kind == "group_class" else w.api
            lines += _wrap(
                f"{what}: {w.label()} ({spent}{when})",
                WIDTH,
                initial_indent="  ",
                subsequent_indent="    ",
            )
        if len(analysis.wrappers) > 8:
            lines.append(f"  (+{len(analysis.wrappers) - 8} more: --format json)")
    if len(analysis.worlds) > 1:
        lines.append("process worlds (ranks compared within each; the primary is trainer rank 0):")
        for world in analysis.worlds:
            lines += _wrap(world.line(), WIDTH, initial_indent="  ", subsequent_indent="    ")
    for note in analysis.notes:
        lines += _wrap(f"note: {note}", WIDTH, subsequent_indent="      ")
    return "\n".join(terminal_lines(lines, colour)) + "\n"
