"""``wsprof watch``'s terminal lines: one per completed step, and one block per verdict change.

Reads only a :class:`~wsprof.analysis.snapshot.WatchSnapshot` (a framework's timeline: its
:class:`~wsprof.importers.slime_timeline.TimelineSync` and the analysis).
"""

from __future__ import annotations

from wsprof.analysis.model import SEVERITIES, Analysis, StepRow
from wsprof.analysis.snapshot import WatchSnapshot
from wsprof.contracts.units import fmt_bytes_decimal, fmt_duration
from wsprof.importers.slime_timeline import TimelineSync
from wsprof.report.text import diagnosis_lines


def verdict_word(analysis: Analysis) -> str:
    """The verdict in a few words: ``no accumulating problem``, ``1 problem (critical)``,
    ``inconclusive: <first reason>``."""
    v = analysis.verdict
    if v.status == "inconclusive":
        return f"inconclusive: {v.reasons[0]}" if v.reasons else "inconclusive"
    if v.status == "problems":
        worst = worst_severity(analysis)
        n = v.n_problems
        return f"{n} problem{'s' if n != 1 else ''} ({worst})" if n else "no accumulating problem"
    return "no accumulating problem"


def worst_severity(analysis: Analysis) -> str | None:
    """The most severe finding's severity (``info`` < ``warning`` < ``critical``), None
    without findings."""
    ranks = [SEVERITIES.index(f.severity) for f in analysis.findings if f.severity in SEVERITIES]
    return SEVERITIES[max(ranks)] if ranks else None


def verdict_key(analysis: Analysis) -> tuple[str, int, tuple[str, ...]]:
    """What a verdict change is judged on: the status, the problems and their causes."""
    causes = tuple(sorted(f"{d.cause}:{d.severity}" for d in analysis.diagnoses))
    return (analysis.verdict.status, analysis.verdict.n_problems, causes)


def _slowest(snapshot: WatchSnapshot, step: int) -> tuple[str, StepRow] | None:
    """The rank whose weight sync of ``step`` took longest, of those that completed it in this
    refresh."""
    best: tuple[str, StepRow] | None = None
    for label, row in snapshot.new_steps:
        if row.step != step or row.weight_sync_s is None:
            continue
        if best is None or row.weight_sync_s > (best[1].weight_sync_s or 0.0):
            best = (label, row)
    return best


def step_lines(snapshot: WatchSnapshot, after: int = -1) -> list[str]:
    """One line per step numbered above ``after`` that the primary process (the lowest rank
    with steps) completed since the previous refresh: its weight sync, rollout share and step
    time, the slowest rank's sync when several ranks are followed, and the verdict as of this
    refresh.

    Args:
        snapshot: the refresh.
        after: the last step number already printed (the primary can change while the ranks'
            first flushes arrive: a step is printed once).
    """
    primary = snapshot.ranks[0].label if snapshot.ranks else None
    lines: list[str] = []
    verdict = verdict_word(snapshot.analysis)
    for label, row in snapshot.new_steps:
        if label != primary or row.step <= after:
            continue
        parts = [f"step {row.step}"]
        sync = row.own_sync_s
        parts.append(f"weight sync {fmt_duration(sync)}" if sync is not None else "weight sync -")
        slow = _slowest(snapshot, row.step) if len(snapshot.ranks) > 1 else None
        if slow is not None and slow[0] != label and slow[1].weight_sync_s is not None:
            parts[-1] += f" (slowest {slow[0]}: {fmt_duration(slow[1].weight_sync_s)})"
        share = row.rollout_share
        parts.append(f"rollout {share:.0%}" if share is not None else "rollout -")
        parts.append(f"step {fmt_duration(row.step_s)}")
        parts.append(f"verdict: {verdict}")
        lines.append("  ".join(parts))
    return lines


def change_lines(before: str | None, snapshot: WatchSnapshot, colour: bool = False) -> list[str]:
    """The verdict change block: old and new verdict, then each diagnosis' chain."""
    a = snapshot.analysis
    now = verdict_word(a)
    if before is None:
        head = f"verdict: {now}"
    elif before == now:
        head = f"diagnoses changed (verdict: {now})"
    else:
        head = f"verdict changed: {before} -> {now}"
    lines = [f"{head} (after {_steps_word(snapshot)})"]
    for d in a.diagnoses:
        lines += diagnosis_lines(d, colour)
    return lines


def _steps_word(snapshot: WatchSnapshot) -> str:
    n = max((r.steps for r in snapshot.ranks), default=0)
    return f"{n} step{'s' if n != 1 else ''}"


def status_line(snapshot: WatchSnapshot) -> str:
    """``--once``: where the run stands in one line (steps, the two numbers, the verdict)."""
    parts = [f"{snapshot.source}: {len(snapshot.ranks)} trace(s), {_steps_word(snapshot)}"]
    summary = snapshot.analysis.headline.summary() if snapshot.analysis.headline else None
    if summary:
        parts.append(summary)
    parts.append(f"verdict: {verdict_word(snapshot.analysis)}")
    return "; ".join(parts)


def timeline_sync_line(sync: TimelineSync, verdict: str) -> str:
    """One line per weight sync a framework's timeline completed (``wsprof watch`` on slime's
    communication timeline): its step, time and parts, bytes and buckets, or its failure."""
    head = f"step {sync.step} (weight version {sync.weight_version})"
    if sync.failed:
        return f"{head}  weight sync FAILED ({sync.failed}) after {fmt_duration(sync.seconds)}"
    parts = [head, f"weight sync {fmt_duration(sync.seconds)}"]
    if sync.buckets:
        parts.append(", ".join(f"{name} {fmt_duration(sync.parts[key])}" for key, name in _PARTS))
        parts.append(f"{fmt_bytes_decimal(sync.sent_bytes)} in {len(sync.buckets)} buckets")
    parts.append(f"verdict: {verdict}")
    return "  ".join(parts)


_PARTS = (("convert", "convert"), ("send", "send"), ("engine_load", "engine load"))


def timeline_change_lines(before: str | None, analysis: Analysis, syncs: int) -> list[str]:
    """The verdict change block of a timeline watch: old and new verdict, each diagnosis."""
    now = verdict_word(analysis)
    head = f"verdict: {now}" if before is None else f"verdict changed: {before} -> {now}"
    lines = [f"{head} (after {syncs} sync{'s' if syncs != 1 else ''})"]
    for d in analysis.diagnoses:
        lines += diagnosis_lines(d)
    return lines
