"""Diagnoses: the findings of one cause read as one chain, symptom -> where -> why -> next step.

Findings stay small rules (:mod:`wsprof.analysis.rules`), each true on its own; one bug
trips several of them (the demo's probe wrapper: weight-sync time, step time, time between
layers, per-call latency, a counter, a frame). :func:`diagnose` groups them:

1. **Causes.** Each is one diagnosis: a wrapper whose time between the API and the backend
   grows (``between_layers``); more collective calls every step (``call_count_growth``); each
   call slower while no wrapper time grows (``per_call_growth``: the backend or the
   communication); time in the weight sync outside any collective (``gaps``, when it grows);
   one rank apart from the others (``outlier_rank``).
2. **Symptom.** The per-step slowdown each cause explains: weight-sync time, else step time,
   else rollout time (``accumulating_slowdown`` at warning or above). The other per-step
   slowdowns are the same growth seen in the whole step and are folded into the first cause.
3. **Why.** The deepest frame that gained share of the py-spy samples (``frame_shift``'s gained
   frames, ``hot_frame`` when it is the same function) goes to the cause whose place its stacks
   run through (the wrapper's function, the weight-sync caller); a counter that tracks the
   slowdown (``counter_correlation``, with the ``memory_growth`` of the same counter) goes to
   the cause whose series it tracks.
4. **Nothing explains it.** A slowdown with no cause is an ``unexplained`` diagnosis that says
   which links are missing and how to get them; without steps, a rising weight-sync share of
   samples (``sampled_phase_share``) is the symptom and the frame that gained share the where.
5. **The rest.** Every other finding at warning or above (a memory growth no slowdown follows,
   idle GPUs during sync, wsprof's own losses) is a diagnosis of its own. Info findings join a
   diagnosis only when a chain uses them.

One bug gives one diagnosis; a second, independent cause gives a second.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wsprof.analysis.evidence import evidence_rows
from wsprof.analysis.facts import LABELS, TIME_BUDGETS_S, Facts
from wsprof.analysis.model import (
    SEVERITIES,
    Diagnosis,
    Finding,
    FrameShift,
    Link,
    ProcessAnalysis,
    SeriesResult,
    WrapperFact,
)
from wsprof.analysis.rules.base import FRAME_SHIFT_MIN_CHANGE
from wsprof.analysis.samples import split_frame
from wsprof.contracts.phases import phase_of_series
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    COLLECTIVE_CALLS,
    ROLLOUT_S,
    STEP_S,
    WEIGHT_SYNC_S,
    counter_key,
    op_of,
)
from wsprof.contracts.units import Unit, fmt_duration, fmt_num

#: The per-step times a diagnosis's symptom can be, the first found leading.
SYMPTOM_SERIES = (WEIGHT_SYNC_S, STEP_S, ROLLOUT_S)
#: Finding kinds that are causes (one diagnosis each), in the order a chain reads them.
CAUSE_KINDS = {
    "between_layers": "wrapper",
    "call_count_growth": "call_count",
    "per_call_growth": "per_call",
    "gaps": "gaps",
    "outlier_rank": "outlier_rank",
}
#: What each reason of an outlier_rank finding says in a diagnosis title.
OUTLIER_REASONS = {
    "sync_growth": "its weight sync grows while the other ranks' stays flat",
    "own_growth": "its own time in the collectives grows",
    "gap_growth": "its own work between its collectives grows",
    "level": "its weight sync is far slower than the other ranks'",
}
#: A gained frame is a candidate culprit when it gained at least this share of the samples
#: (the frame_shift finding's own materiality).
CULPRIT_MIN_CHANGE = FRAME_SHIFT_MIN_CHANGE


@dataclass
class _Draft:
    """A diagnosis being built."""

    cause: str
    title: str
    findings: list[Finding]
    symptom: Link | None = None
    where: Link | None = None
    why: list[Link] = field(default_factory=list)
    next_step: str = ""
    missing: list[str] = field(default_factory=list)
    symptom_series: str | None = None
    symptom_confidence: float = 1.0
    culprit_frame: str | None = None
    culprit_counter: str | None = None
    process: str | None = None
    #: Names a why link may be matched against in the stacks (wrapper function, caller).
    places: tuple[str, ...] = ()
    #: What it explains of the symptom's growth, symptom unit per step (ordering).
    explains: float = 0.0
    #: The why counter's fitted cost: ``+8.53 ms per 1,000 demo.allocator_segments``.
    counter_cost: str = ""
    #: Findings it shares with the chain before it (the run's slowdown): left out of its
    #: severity, which is its own cause's.
    shared: set[str] = field(default_factory=set)


def confidence_of(symptom_confidence: float, has_where: bool, has_why: bool) -> float:
    """How sure a diagnosis is, 0..1: the symptom's own confidence (the growth verdict's, 1 for
    a finding that is not a curve), times the share of the chain's three links found (symptom,
    where, why: a third each).

    A heuristic of wsprof's, not a probability: a chain with every link found is as sure as
    its symptom; one with the symptom alone is a third of that.
    """
    links = 1 + int(has_where) + int(has_why)
    return max(0.0, min(1.0, symptom_confidence)) * links / 3.0


# --------------------------------------------------------------------------- small helpers


def _short(qualname: str) -> str:
    """``_probed.<locals>.with_memory_probe`` -> ``with_memory_probe``."""
    return qualname.rsplit(".", 1)[-1]


def _function(frame: str) -> str:
    return split_frame(frame)[0]


def _frame_key(frame: str) -> str:
    """``function (file)`` without the line: how frame_shift names frames."""
    function, file, _ = split_frame(frame)
    return f"{function} ({file})" if file is not None else function


def _fmt_pct(x: Any) -> str:
    return f"{float(x):.0%}" if isinstance(x, (int, float)) else "-"


def _severity_index(f: Finding) -> int:
    return SEVERITIES.index(f.severity) if f.severity in SEVERITIES else 0


def _ids(findings: Iterable[Finding]) -> tuple[str, ...]:
    return tuple(f.id for f in findings)


# --------------------------------------------------------------------------- symptom


#: A per-step time rides along with the lead symptom ("step time grows with it") unless it
#: grows more than this many times as fast, at the low end of its slope's confidence interval
#: (Theil-Sen, :mod:`wsprof.analysis.growth`): faster, the lead cannot explain it, and it is a
#: symptom of its own (a rollout that grows +2 s/step beside a +0.3 s/step sync).
RIDE_SLOPE_RATIO = 1.5
#: Slowdowns of these series are a cause's own (time between layers is the wrapper's where).
CAUSE_SERIES = frozenset({BETWEEN_LAYERS_S})


def _lead(by_series: dict[str, Finding]) -> str | None:
    """The symptom that leads: weight sync, step, rollout by name; else a series whose name
    means weight sync (a log's ``update_weights_time_s``); else the fastest-growing one."""
    named = next((n for n in SYMPTOM_SERIES if n in by_series), None)
    if named is not None:
        return named
    rest = [n for n in by_series if n not in CAUSE_SERIES]
    if not rest:
        return None
    sync = [n for n in rest if phase_of_series(n) == "weight_sync"]
    if sync:
        return sync[0]
    return max(rest, key=lambda n: float(by_series[n].evidence.get("slope_per_step", 0.0)))


def _symptom_link(
    slowdowns: Sequence[Finding],
    series: dict[str, SeriesResult],
    budgets: dict[str, float] = TIME_BUDGETS_S,
) -> tuple[Link, str, float, list[Finding]] | None:
    """The symptom of a chain from the per-step slowdowns: the lead (:func:`_lead`) and those
    that grow no faster than :data:`RIDE_SLOPE_RATIO` times it ("step time grows with it").

    Returns:
        ``(link, lead series, its curve's confidence, the slowdowns left apart)``; None without
        a slowdown.
    """
    by_series = {str(f.evidence.get("series")): f for f in slowdowns}
    lead_name = _lead(by_series)
    if lead_name is None:
        return None
    lead = by_series[lead_name]
    res = series.get(lead_name)
    ev = lead.evidence
    lead_slope = float(ev.get("slope_per_step", 0.0))
    riders, apart = [], []
    for n, f in by_series.items():
        if n == lead_name or n in CAUSE_SERIES:
            continue
        slope = float(f.evidence.get("slope_per_step", 0.0))
        # The data must show it grows faster: the low end of its slope's confidence interval
        # (a step time whose rollout varies with the tokens decoded has a wide one).
        other = series.get(n)
        low = other.verdict.evidence.get("theil_sen_slope_lo") if other is not None else None
        slope = min(slope, float(low)) if low is not None else slope
        if lead_slope > 0 and slope <= RIDE_SLOPE_RATIO * lead_slope:
            riders.append(f)
        else:
            apart.append(f)
    if res is None:
        link = Link("symptom", lead.title, (lead.id,))
        return link, lead_name, float(ev.get("confidence", 1)), apart
    s, v = res.series, res.verdict
    k = v.judged_from
    after = f" after a slow first {s.fmt(s.values[0])}" if k else ""
    label = LABELS.get(lead_name, lead_name)
    text = (
        f"{label} grows ({v.shape}): {s.fmt(s.values[k])} -> "
        f"{s.fmt(s.values[-1])} over {len(s.values) - k} steps{after} "
        f"({s.fmt_slope(v.slope_per_step)})"
    )
    rows: list[tuple[str, str]] = [
        ("series", lead_name),
        ("shape", v.shape),
        (f"first step judged ({s.steps[k]})", s.fmt(s.values[k])),
        (f"last step ({s.steps[-1]})", s.fmt(s.values[-1])),
        ("slope (Theil-Sen)", s.fmt_slope(v.slope_per_step)),
        ("confidence of the curve", f"{v.confidence:.2f}"),
    ]
    for f in riders:
        name = str(f.evidence.get("series"))
        other = series.get(name)
        if other is not None:
            text += (
                f"; {LABELS.get(name, name)} grows with it "
                f"({other.series.fmt_slope(other.verdict.slope_per_step)})"
            )
    p = v.projection
    if p is not None:
        text += f"; projected {s.fmt(p.value)} at step {p.step} by {p.basis()}"
        rows.append(("projection", f"{s.fmt(p.value)} at step {p.step} ({p.basis()})"))
        if v.budget_step is not None and lead_name in budgets:
            budget = s.fmt(budgets.get(lead_name))
            text += f", {budget} at step {v.budget_step}"
            rows.append((f"reaches {budget}", f"step {v.budget_step} (same fit)"))
    return Link("symptom", text, _ids([lead, *riders]), tuple(rows)), lead_name, v.confidence, apart


# --------------------------------------------------------------------------- culprit frame


def _stack_index(pa: ProcessAnalysis) -> list[tuple[list[str], int]]:
    """Hot stacks as ``function (file)`` keys, root first, with their samples."""
    return [([_frame_key(f) for f in stack], n) for stack, n in pa.hot_stacks]


def culprit_chain(pa: ProcessAnalysis) -> list[FrameShift]:
    """The frames that gained share of the samples (at least :data:`CULPRIT_MIN_CHANGE`),
    ordered root to leaf by where they sit in the sampled stacks: the last is the culprit
    (the deepest frame the added time went into), the ones before it its callers.

    Returns:
        The chain, empty without a window shift or without a frame that gained enough.
    """
    sh = pa.shift
    if sh is None:
        return []
    gained = [g for g in sh.gained if g.change >= CULPRIT_MIN_CHANGE]
    if not gained:
        return []
    stacks = _stack_index(pa)

    def depth(g: FrameShift) -> float:
        total, weight = 0.0, 0
        for keys, n in stacks:
            if g.frame in keys:
                total += keys.index(g.frame) * n
                weight += n
        return total / weight if weight else -1.0

    return sorted(gained, key=depth)


def _under(pa: ProcessAnalysis, frame: str, place: str) -> float | None:
    """Share of the samples holding ``frame`` whose stack also runs through a function named
    ``place`` (a short name: ``with_memory_probe``); None without stacks holding the frame."""
    total = hit = 0
    for keys, n in _stack_index(pa):
        if frame in keys:
            total += n
            i = keys.index(frame)
            if any(_short(_function(k)) == place for k in keys[:i]):
                hit += n
    return hit / total if total else None


def _frame_link(
    pa: ProcessAnalysis, shift: Finding | None, hot: Finding | None, places: Sequence[str]
) -> tuple[Link, str, str | None] | None:
    """The why link of a frame: the culprit of :func:`culprit_chain`, with the callers between
    it and ``places`` and the share of its samples under them."""
    chain = culprit_chain(pa)
    if not chain or shift is None:
        return None
    culprit = chain[-1]
    sh = pa.shift
    k = sh.k if sh is not None else 1
    text = (
        f"{culprit.frame}: {culprit.early_share:.0%} of the samples in the first "
        f"{k} window{'s' if k != 1 else ''} -> {culprit.late_share:.0%} in the last {k} "
        f"({pa.label})"
    )
    rows: list[tuple[str, str]] = [
        ("frame", culprit.frame),
        ("share of samples, early", f"{culprit.early_share:.0%} ({culprit.early_samples})"),
        ("share of samples, late", f"{culprit.late_share:.0%} ({culprit.late_samples})"),
    ]
    under_place = None
    for place in places:
        share = _under(pa, culprit.frame, place)
        if share is not None and share > 0:
            under_place = place
            text += f"; called from {place} in {share:.0%} of its samples"
            rows.append((f"under {place}", f"{share:.0%} of its samples"))
            break
    callers = [c.frame for c in chain[:-1]]
    if callers:
        rows.append(("callers that gained with it", ", ".join(_function(c) for c in callers)))
    ids = [shift.id]
    if hot is not None and _frame_key(str(hot.where or "")) == culprit.frame:
        ids.append(hot.id)
        hottest = hot.evidence.get("hottest_line")
        text += (
            f"; {hot.evidence.get('samples')} of {hot.evidence.get('total')} samples of the "
            f"run there, most at line {split_frame(str(hottest))[2]}"
        )
        rows.append(
            (
                "samples of the run",
                f"{hot.evidence.get('samples')} of "
                f"{hot.evidence.get('total')} ({_fmt_pct(hot.evidence.get('share'))})",
            )
        )
    return Link("why", text, tuple(ids), tuple(rows)), culprit.frame, under_place


# --------------------------------------------------------------------------- counters


def _counter_link(
    corr: Finding, growth: Finding | None, series: dict[str, SeriesResult]
) -> tuple[Link, str]:
    """The why link of a counter that tracks the slowdown, and its fitted cost in words
    (``+8.53 ms per 1,000 demo.allocator_segments``)."""
    ev = corr.evidence
    cname = str(ev.get("counter"))
    target = str(ev.get("series"))
    res = series.get(target)
    per = str(ev.get("unit", "1,000"))
    slope = float(ev.get("slope_per_unit", 0.0))
    scale = 2.0**30 if per == "GiB" else 1000.0
    cost = res.series.fmt(slope * scale) if res is not None else fmt_num(slope * scale)
    what = LABELS.get(target, target)
    op = op_of(target)
    if op is not None:
        what = f"{op} per-call latency"
    text = (
        f"{what} tracks {cname} (Spearman rho {float(ev.get('spearman_rho', 0)):.2f}): "
        f"+{cost} per {per} {cname}"
    )
    rows: list[tuple[str, str]] = [
        ("counter", cname),
        ("tracks", what),
        ("Spearman rho", f"{float(ev.get('spearman_rho', 0)):.2f}"),
        (f"cost per {per}", f"+{cost} (least squares)"),
    ]
    ids = [corr.id]
    if growth is not None:
        g = series.get(counter_key(cname))
        if g is not None:
            s = g.series
            text += (
                f"; {cname} grows {s.fmt_slope(g.verdict.slope_per_step)} "
                f"({s.fmt(s.values[0])} -> {s.fmt(s.values[-1])})"
            )
            rows.append(("counter growth", s.fmt_slope(g.verdict.slope_per_step)))
        ids.append(growth.id)
    return Link("why", text, tuple(ids), tuple(rows)), f"+{cost} per {per} {cname}"


# --------------------------------------------------------------------------- causes


def _wrapper_names(w: WrapperFact, wrappers: Sequence[WrapperFact]) -> list[str]:
    return sorted({x.api for x in wrappers if x.qualname == w.qualname and x.file == w.file})


def _wrapper_draft(
    f: Finding, per_call: Finding | None, facts: Facts, wrappers: Sequence[WrapperFact]
) -> _Draft:
    ev = f.evidence
    top = next((w for w in wrappers if w.kind == "name"), None)
    share = ev.get("share_of_sync_growth")
    slope = float(ev.get("slope_s_per_step", 0.0))
    slope_txt = Unit.SECONDS.fmt_slope(slope)
    rows: list[tuple[str, str]] = []
    if top is not None:
        names = _wrapper_names(top, wrappers)
        who = f"{top.qualname} ({top.file}:{top.line})"
        text = f"{who} sits on {', '.join(names)}"
        rows += [("wrapper", who), (f"names it sits on ({len(names)})", ", ".join(names))]
        places: tuple[str, ...] = (_short(top.qualname),)
        short = _short(top.qualname)
    else:
        text = "a wrapper on the collective names (not identified: see the wrapper audit)"
        places, short = (), "the wrapper"
    text += (
        f"; time between the API and the backend grows {fmt_duration(ev.get('first_s'))} -> "
        f"{fmt_duration(ev.get('last_s'))} per step ({slope_txt})"
    )
    rows.append(
        (
            "between layers per step",
            f"{fmt_duration(ev.get('first_s'))} -> {fmt_duration(ev.get('last_s'))}",
        )
    )
    rows.append(("slope", slope_txt))
    if isinstance(share, (int, float)):
        text += f", {min(float(share), 1.0):.0%} of the weight-sync growth"
        rows.append(("share of the weight-sync growth", f"{min(float(share), 1.0):.0%}"))
    found = [f]
    if per_call is not None:
        found.append(per_call)
        parts = [
            f"{op} {_fmt_call(d.get('first_us'))} -> {_fmt_call(d.get('last_us'))}"
            for op, d in per_call.evidence.items()
            if isinstance(d, dict) and "first_us" in d
        ]
        count = facts.series.get(COLLECTIVE_CALLS)
        if parts:
            text += f"; each call slower: {', '.join(parts)}"
            rows.append(("per call (median)", ", ".join(parts)))
        if count is not None and not count.verdict.accumulating and count.series.values:
            flat = sorted(count.series.values)[len(count.series.values) // 2]
            text += f", calls per step flat at {flat:.0f}"
            rows.append(("calls per step", f"{flat:.0f} (flat)"))
    named = f", {short}," if top is not None else ""
    title = (
        f"a wrapper on the collective names{named} makes every call slower: time between "
        f"the API and the backend grows {slope_txt}"
    )
    if isinstance(share, (int, float)):
        title += f", {min(float(share), 1.0):.0%} of the weight-sync growth"
    return _Draft(
        "wrapper",
        title,
        found,
        where=Link("where", text, _ids(found), tuple(rows)),
        places=places,
        explains=slope,
        process=facts.primary.label if facts.primary else None,
    )


def _fmt_call(us: Any) -> str:
    """A per-call latency given in µs, in ms from 1 ms on (``2.58 ms``), else µs."""
    if not isinstance(us, (int, float)):
        return "-"
    return fmt_duration(float(us) / 1e6)


def _call_count_draft(f: Finding, facts: Facts) -> _Draft:
    ev = f.evidence
    count = facts.series.get(COLLECTIVE_CALLS)
    slope = float(ev.get("slope_per_step", 0.0))
    rows: list[tuple[str, str]] = [("calls per step, slope", f"{slope:+.1f}/step")]
    text = f"collective calls per step grow {slope:+.1f}/step"
    if count is not None and count.series.values:
        v = count.series.values
        text += f" ({v[0]:.0f} -> {v[-1]:.0f})"
        rows.append(("calls per step", f"{v[0]:.0f} -> {v[-1]:.0f}"))
    fixed = ev.get("fixed_us_per_call")
    per_call_s = 0.0
    if isinstance(fixed, (int, float)):
        text += f", each paying about {_fmt_call(fixed)} whatever its size"
        rows.append(("fixed cost per call", _fmt_call(fixed)))
        per_call_s = float(fixed) / 1e6
    bucket = ev.get("bucketing")
    if isinstance(bucket, dict):
        rows.append(
            (
                "bucketing would save",
                f"{fmt_duration(bucket.get('saved_s'))}/step "
                f"({bucket.get('calls', 0):.0f} -> {bucket.get('buckets', 0):.0f} calls)",
            )
        )
    pa = facts.primary
    site = pa.sync_site if pa is not None else None
    if site:
        text += f"; issued by {site}"
        rows.append(("caller", site))
    added = slope * per_call_s
    title = f"more collective calls every step ({slope:+.1f} calls/step"
    title += f", about {Unit.SECONDS.fmt_slope(added)} of sync)" if added > 0 else ")"
    return _Draft(
        "call_count",
        title,
        [f],
        where=Link("where", text, (f.id,), tuple(rows)),
        places=(_short(_function(site)),) if site else (),
        explains=added,
        process=pa.label if pa is not None else None,
    )


def _per_call_draft(f: Finding, facts: Facts) -> _Draft:
    parts = [(op, d) for op, d in f.evidence.items() if isinstance(d, dict) and "first_us" in d]
    text = "each collective call gets slower while the time between layers does not grow: " + (
        ", ".join(
            f"{op} {_fmt_call(d.get('first_us'))} -> {_fmt_call(d.get('last_us'))} per call"
            for op, d in parts
        )
    )
    rows = tuple(
        (
            f"{op} per call (median)",
            f"{_fmt_call(d.get('first_us'))} -> {_fmt_call(d.get('last_us'))}",
        )
        for op, d in parts
    )
    ops = ", ".join(op for op, _ in parts) or "the collectives"
    return _Draft(
        "per_call",
        f"each {ops} call gets slower in the backend (no wrapper time grows)",
        [f],
        where=Link("where", text, (f.id,), rows),
        explains=0.0,
        process=facts.primary.label if facts.primary else None,
    )


def _gaps_draft(f: Finding, facts: Facts) -> _Draft:
    ev = f.evidence
    caller = ev.get("caller")
    rows: list[tuple[str, str]] = [
        ("share of the sync outside collectives", _fmt_pct(ev.get("median_gap_share"))),
        ("per step", f"{fmt_duration(ev.get('first_s'))} -> {fmt_duration(ev.get('last_s'))}"),
    ]
    if caller:
        rows.append(("caller of the collectives", str(caller)))
    where = f.title
    places: tuple[str, ...] = (_short(_function(str(caller))),) if caller else ()
    top = next((w for w in facts.wrappers if w.kind == "name"), None)
    if top is not None:
        # Its time on the names wsprof hooks is between layers, measured; on a name it does not
        # hook (a functional collective DTensor and FSDP2 call), it is outside every call.
        names = _wrapper_names(top, facts.wrappers)
        who = f"{top.qualname} ({top.file}:{top.line})"
        where += (
            f"; a wrapper on this process's collective names, {who}, sits on "
            f"{', '.join(names)}: what it wraps beyond the names wsprof hooks runs here"
        )
        rows.append(("wrapper on the collective names", f"{who} on {', '.join(names)}"))
        places = (_short(top.qualname), *places)
    first, last = ev.get("first_s"), ev.get("last_s")
    added = (
        (float(last) - float(first)) if isinstance(first, float) and isinstance(last, float) else 0
    )
    return _Draft(
        "gaps",
        "time in the weight sync outside any collective grows "
        f"({fmt_duration(first)} -> {fmt_duration(last)} per step)",
        [f],
        where=Link("where", where, (f.id,), tuple(rows)),
        places=places,
        explains=added,
        process=facts.primary.label if facts.primary else None,
    )


def _outlier_draft(f: Finding) -> _Draft:
    ev = f.evidence
    rows = (
        ("rank", str(ev.get("label"))),
        ("median weight sync", fmt_duration(ev.get("median_weight_sync_s"))),
        ("other ranks' median", fmt_duration(ev.get("others_median_weight_sync_s"))),
        ("robust z", fmt_num(ev.get("robust_z"))),
    )
    why = [str(r) for r in ev.get("reasons", ())]
    said = [OUTLIER_REASONS[r] for r in why if r in OUTLIER_REASONS] or ["differs from them"]
    return _Draft(
        "outlier_rank",
        f"{ev.get('label')} alone among {ev.get('ranks')} ranks: " + " and ".join(said),
        [f],
        symptom=Link("symptom", f.title, (f.id,), rows),
        where=Link("where", str(f.where), (f.id,), (("process", str(f.where)),)),
        next_step=f.next_step,
        process=str(ev.get("label")),
    )


# --------------------------------------------------------------------------- next steps


def _wrapper_next(d: _Draft, facts: Facts, wrappers: Sequence[WrapperFact]) -> str:
    top = next((w for w in wrappers if w.kind == "name"), None)
    if top is None:
        return next(f.next_step for f in d.findings if f.kind == "between_layers")
    n = len(_wrapper_names(top, wrappers))
    short = _short(top.qualname)
    on = f"on all {n} names it sits on" if n > 1 else f"on {top.api}"
    if d.culprit_frame is not None:
        text = f"`{short}` calls `{_function(d.culprit_frame)}` before every collective ({on})"
    else:
        text = f"`{short}` ({top.file}:{top.line}) runs before every collective ({on})"
    if d.counter_cost:
        text += f"; its cost grows {d.counter_cost}"
    return (
        text + ": run it once per sync instead, or cache its result, on every one of those "
        "names; then measure again: overhead moves to the next slowest place"
    )


def _call_count_next(d: _Draft) -> str:
    f = d.findings[0]
    bucket = f.evidence.get("bucketing")
    text = "more tensors are sent one collective each, every step"
    if d.culprit_frame is not None:
        text += f" (the added time goes into `{_function(d.culprit_frame)}`)"
    caller = f" to what `{d.places[0]}` sends" if d.places else ""
    text += (
        f": find who adds them{caller} (a growing list of parameters or buffers) and bucket the "
    )
    text += "tensors into fewer, larger collectives"
    if isinstance(bucket, dict):
        text += f" (about {fmt_duration(bucket.get('saved_s'))} per step saved)"
    return text + "; then measure again"


def _per_call_next(d: _Draft) -> str:
    counter = f" (it tracks {d.culprit_counter})" if d.culprit_counter else ""
    return (
        f"the backend or the network slows down per call{counter}, not code around the "
        "collectives: compare ranks (an outlier rank?), check NCCL_* settings and the links "
        "(nvidia-smi topo -m, NIC errors), and whether payloads grow; then measure again"
    )


def _gaps_next(d: _Draft) -> str:
    caller = d.findings[0].evidence.get("caller")
    where = f"`{_function(str(caller))}`" if caller else "the weight-sync code"
    culprit = f": the added time is in `{_function(d.culprit_frame)}`" if d.culprit_frame else ""
    return (
        f"{where} does work between its collectives that grows every step{culprit}; "
        "sample it (`wsprof attach PID`), then overlap or remove that work and measure again"
    )


# --------------------------------------------------------------------------- missing links


def _missing_why(facts: Facts, pa: ProcessAnalysis | None) -> list[str]:
    out: list[str] = []
    if pa is None and not facts.processes:  # a CSV or a log
        return [
            "why: a series has no stacks or counters: sample the job while it runs "
            "(`wsprof attach PID`) to see which frame the added time goes into"
        ]
    if pa is None or not pa.n_samples:
        out.append(
            "why: no py-spy samples of this process: run `wsprof attach PID` beside it for a "
            "few steps to see which frame the added time goes into"
        )
    elif pa.shift is None:
        out.append(
            "why: too few sampling windows to compare early and late: sample for longer "
            "(`wsprof attach PID --every S`)"
        )
    if not facts.counters():
        out.append(
            "why: no counters recorded: CUDA allocator and NVML counters need CUDA in the "
            "traced process; record your own with wsprof.counter(name, value)"
        )
    return out


# --------------------------------------------------------------------------- diagnose


def diagnose(findings: Sequence[Finding], facts: Facts) -> tuple[Diagnosis, ...]:
    """Group ``findings`` by cause into diagnoses (see the module docstring).

    Args:
        findings: the analysis's findings with their ids (:func:`run_rules`), most severe
            first.
        facts: what the rules looked at (series, processes with their samples, wrappers).

    Returns:
        The diagnoses, most severe first, then by the growth they explain; ids ``D1``, ...
        Every finding at warning or above is in at least one diagnosis; only a run's shared
        slowdown is in more than one (each cause names it as its symptom).
    """
    by_kind: dict[str, list[Finding]] = {}
    for f in findings:
        by_kind.setdefault(f.kind, []).append(f)
    wrappers = sorted(facts.wrappers, key=lambda w: -(w.between_s or 0.0))
    drafts = _cause_drafts(by_kind, facts, wrappers)
    _add_symptoms(drafts, by_kind, facts)
    frame_owner = _add_frame(drafts, by_kind, facts)
    _add_counters(drafts, by_kind, facts.series)
    drafts += [_outlier_draft(f) for f in by_kind.get("outlier_rank", [])]
    for d in drafts:
        d.next_step = d.next_step or _next_step(d, facts, wrappers)
        d.missing += _missing_links(d, facts, frame_owner)
    used = {f.id for d in drafts for f in d.findings}
    drafts += [_single(f) for f in findings if f.id not in used and f.severity != "info"]
    out = [_finish(d, findings) for d in drafts if d.symptom is not None or d.where is not None]
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda d: -order.get(d.severity, 0))  # stable: causes before the rest
    return tuple(replace(d, id=f"D{i}") for i, d in enumerate(out, 1))


def _cause_drafts(
    by_kind: dict[str, list[Finding]], facts: Facts, wrappers: Sequence[WrapperFact]
) -> list[_Draft]:
    """One draft per cause finding (step 1 of the module docstring), most growth first."""
    per_call = next(iter(by_kind.get("per_call_growth", [])), None)
    per_call = per_call if per_call is not None and per_call.severity != "info" else None
    drafts = [
        _wrapper_draft(f, per_call, facts, wrappers)
        for f in by_kind.get("between_layers", [])
        if f.severity != "info"
    ]
    if drafts:
        per_call = None  # the wrapper makes each call slower: its where link says so
    drafts += [_call_count_draft(f, facts) for f in by_kind.get("call_count_growth", [])]
    if per_call is not None:
        d = _per_call_draft(per_call, facts)
        top = next((w for w in wrappers if w.kind == "name"), None)
        if top is not None:  # a wrapper that no between-layers growth named yet
            d.places = (_short(top.qualname),)
        drafts.append(d)
    for f in by_kind.get("gaps", []):
        if f.severity == "info":
            continue
        g = _gaps_draft(f, facts)
        same = next((d for d in drafts if d.cause == "wrapper"), None)
        link = same.where if same is not None else None
        if (
            same is not None
            and link is not None
            and g.where is not None
            and g.places[:1] == same.places[:1]
        ):
            # One wrapper, one cause: its time on the names wsprof hooks grows between the
            # layers, on those it does not hook (functional collectives) outside every call.
            same.findings.append(f)
            same.explains += g.explains
            same.where = replace(
                link,
                text=link.text + "; its time outside every collective grows too "
                f"({g.title.split('(', 1)[-1].rstrip(')')}): the names it wraps that wsprof "
                "does not hook",
                finding_ids=(*link.finding_ids, f.id),
            )
            continue
        drafts.append(g)
    drafts.sort(key=lambda d: -d.explains)
    return drafts


def _add_symptoms(drafts: list[_Draft], by_kind: dict[str, list[Finding]], facts: Facts) -> None:
    """The run's slowdown as each cause's symptom (the first cause carries the step and
    rollout slowdowns along); an ``unexplained`` draft when no cause explains it; without
    steps, a ``sampled`` draft from a rising weight-sync share of samples (step 2 and 4)."""
    pa = facts.primary
    slowdowns = [f for f in by_kind.get("accumulating_slowdown", []) if f.severity != "info"]
    symptom = _symptom_link(slowdowns, facts.series, facts.budgets)
    if symptom is not None:
        link, name, conf, apart = symptom
        used = [f for f in slowdowns if f not in apart]
        for i, d in enumerate(drafts):
            d.symptom_series, d.symptom_confidence = name, conf
            if i == 0:
                d.symptom = link
                d.findings = [*used, *d.findings]
            else:  # the same slowdown, its lead alone; its severity stays the first's
                lead = next(f for f in used if f.id == link.finding_ids[0])
                d.symptom = Link(
                    "symptom", link.text.split("; ")[0], link.finding_ids[:1], link.rows
                )
                d.findings = [lead, *d.findings]
                d.shared.add(lead.id)
        if not drafts:
            d = _unexplained(link, name, conf, used, pa)
            _with_growing_wrapper(d, facts)
            drafts.append(d)
        for f in apart:  # grows faster than the lead: a symptom no cause here explains
            own = _symptom_link([f], facts.series, facts.budgets)
            if own is not None:
                drafts.append(_unexplained(own[0], own[1], own[2], [f], pa))
    sampled = [f for f in by_kind.get("sampled_phase_share", []) if f.evidence.get("grows")]
    if not sampled:
        return
    f = sampled[0]
    if drafts:
        drafts[0].findings.append(f)
        if drafts[0].symptom is not None:
            s = drafts[0].symptom
            drafts[0].symptom = replace(s, finding_ids=(*s.finding_ids, f.id))
        return
    drafts.append(
        _Draft(
            "sampled",
            f"the weight sync takes a growing share of {f.where}'s time",
            [f],
            symptom=Link("symptom", f.title, (f.id,), _share_rows(f)),
            symptom_confidence=1.0,
            process=str(f.where),
        )
    )


def _as_wrapper(d: _Draft, facts: Facts) -> None:
    """A per-call slowdown whose culprit frame runs under a wrapper on the collective names is
    that wrapper's, even when its time between layers did not read as growing (a curve that
    flattened at its end reads ``warmup_then_flat``): the samples put the time there."""
    wrappers = sorted(facts.wrappers, key=lambda w: -(w.between_s or 0.0))
    top = next((w for w in wrappers if w.kind == "name"), None)
    if top is None or d.where is None:
        return
    names = _wrapper_names(top, wrappers)
    who = f"{top.qualname} ({top.file}:{top.line})"
    d.cause = "wrapper"
    d.title = (
        f"a wrapper on the collective names, {_short(top.qualname)}, makes every call slower: "
        "the frame the added time goes into runs under it"
    )
    text = d.where.text.replace(
        "each collective call gets slower while the time between layers does not grow",
        "each collective call gets slower",
    )
    bl = facts.series.get(BETWEEN_LAYERS_S)
    if bl is not None and bl.series.values:
        vals = bl.series.values
        text += (
            f"; time between the API and the backend {fmt_duration(vals[0])} -> "
            f"{fmt_duration(vals[-1])} per step (its curve reads {bl.verdict.shape})"
        )
    d.where = replace(
        d.where,
        text=f"{who} sits on {', '.join(names)}; {text}",
        rows=(
            ("wrapper", who),
            (f"names it sits on ({len(names)})", ", ".join(names)),
            *d.where.rows,
        ),
    )


def _with_growing_wrapper(d: _Draft, facts: Facts) -> None:
    """An unexplained slowdown on a process whose wrapper on the collective names grows
    between the layers, though too little to explain it (the between-layers finding stayed
    info): that wrapper is the recorded cause, the rest of its time is on names wsprof does
    not hook (the functional collectives DTensor's ``full_tensor()`` calls) or elsewhere."""
    top = next((w for w in facts.wrappers if w.kind == "name"), None)
    bl = facts.series.get(BETWEEN_LAYERS_S)
    if top is None or bl is None or not bl.verdict.accumulating:
        return
    names = _wrapper_names(top, facts.wrappers)
    who = f"{top.qualname} ({top.file}:{top.line})"
    slope = bl.series.fmt_slope(bl.verdict.slope_per_step)
    d.cause = "wrapper"
    d.title = (
        f"a wrapper on the collective names, {_short(top.qualname)}, grows with the slowdown: "
        f"its time between the layers {slope}; the rest is where wsprof does not time it"
    )
    d.where = Link(
        "where",
        f"{who} sits on {', '.join(names)}; its time between the API and the backend grows "
        f"{slope}, less than the slowdown: what it also wraps beyond the names wsprof hooks "
        "(functional collectives) runs outside every timed call",
        tuple(f.id for f in d.findings[:1]),
        (("wrapper", who), (f"names it sits on ({len(names)})", ", ".join(names))),
    )
    d.places = (_short(top.qualname),)


def _unexplained(
    link: Link, name: str, conf: float, found: list[Finding], pa: ProcessAnalysis | None
) -> _Draft:
    return _Draft(
        "unexplained",
        f"{LABELS.get(name, name)} grows and no recorded fact says where",
        list(found),
        symptom=link,
        symptom_series=name,
        symptom_confidence=conf,
        places=(_short(_function(pa.sync_site)),) if pa is not None and pa.sync_site else (),
        process=pa.label if pa is not None else None,
    )


def _add_frame(
    drafts: list[_Draft], by_kind: dict[str, list[Finding]], facts: Facts
) -> _Draft | None:
    """The frame that gained share, to the chain whose place its stacks run through (else the
    first); for a chain without a where (unexplained, sampled) it is the where. Returns the
    draft that got it (None when no frame gained share)."""
    shifts = by_kind.get("frame_shift", [])
    if not drafts or not shifts or facts.primary is None:
        return None
    shift = shifts[0]
    pa = next(
        (p for p in facts.processes if p.label == shift.evidence.get("process")), facts.primary
    )
    hot = next(
        (h for h in by_kind.get("hot_frame", []) if h.evidence.get("process") == pa.label), None
    )
    picked, owner = None, drafts[0]
    for d in drafts:
        got = _frame_link(pa, shift, hot, d.places)
        if got is None:
            return None  # no frame gained enough share
        if got[2] is not None:  # its stacks run through this chain's place
            picked, owner = got, d
            break
    if picked is None:
        picked = _frame_link(pa, shift, hot, owner.places)
    if picked is None:
        return None
    link, frame, place = picked
    owner.culprit_frame = frame
    if owner.cause == "per_call" and place is not None:
        _as_wrapper(owner, facts)
    owner.findings += [f for f in (shift, hot) if f is not None and f.id in link.finding_ids]
    if owner.where is None:
        owner.where = replace(link, role="where")
    else:
        owner.why.append(link)
    return owner


def _add_counters(
    drafts: list[_Draft], by_kind: dict[str, list[Finding]], series: dict[str, SeriesResult]
) -> None:
    """Each counter that tracks the slowdown to the chain whose series it tracks (between
    layers or per-call latency: the wrapper or the per-call cause; else the first), one
    counter per chain, with the ``memory_growth`` of the same counter (step 3)."""
    growths = {str(f.evidence.get("counter")): f for f in by_kind.get("memory_growth", [])}
    for corr in by_kind.get("counter_correlation", []):
        if not drafts:
            return
        target = str(corr.evidence.get("series"))
        owner = drafts[0]
        if target == BETWEEN_LAYERS_S:
            owner = next((d for d in drafts if d.cause == "wrapper"), owner)
        elif op_of(target) is not None:
            owner = next((d for d in drafts if d.cause in ("wrapper", "per_call")), owner)
        if owner.culprit_counter is not None:
            continue  # one counter per chain: the strongest (the rule ranks them so)
        cname = str(corr.evidence.get("counter"))
        growth = growths.pop(cname, None)
        link, owner.counter_cost = _counter_link(corr, growth, series)
        owner.why.append(link)
        owner.culprit_counter = cname
        owner.findings += [corr] + ([growth] if growth is not None else [])


def _missing_links(d: _Draft, facts: Facts, frame_owner: _Draft | None) -> list[str]:
    """One line per link the chain lacks: which, and how to get it."""
    out: list[str] = []
    if d.cause in ("outlier_rank", "finding"):
        return out
    if d.where is None:
        out.append(_missing_where(facts))
    if d.why:
        return out
    if frame_owner is not None and frame_owner is not d:
        out.append(
            "why: the frame that gained share of the samples runs under the other cause; "
            "nothing else gained share or tracks this one: sample longer "
            "(`wsprof attach PID --every S`) once the other cause is fixed"
        )
        return out
    found = _missing_why(facts, facts.primary)
    return out + (
        found
        or [
            "why: no frame gained share of the samples and no counter tracks the "
            "slowdown: sample the slow phase (`py-spy dump --pid PID`) while it runs"
        ]
    )


def _missing_where(facts: Facts) -> str:
    """What the missing where link lacks, for the input there is."""
    pa = facts.primary
    if pa is None:  # a CSV or a log: what grows, never where
        return (
            "where: a log or a series says what grows, not where: run the job under "
            "`wsprof run` (or call wsprof.patch() in it) for per-call times and the time "
            "between the collective API and the backend"
        )
    if pa.calls.n_total or pa.ops:
        return (
            "where: not in the collectives: no wrapper time, per-call cost, call count or "
            "gap in the weight sync grows, so the added time is elsewhere in the step "
            "(rollout, training, data loading); mark those phases with wsprof.phase() or "
            "sample them (`wsprof attach PID`)"
        )
    return (
        "where: no per-call times (py-spy samples only): put the hooks in "
        "(`wsprof attach --inject PID`) or run the job under `wsprof run`"
    )


def _single(f: Finding) -> _Draft:
    """A finding at warning or above that no chain holds: a diagnosis of its own (step 5)."""
    return _Draft(
        "finding",
        f.title,
        [f],
        symptom=Link("symptom", f.title, (f.id,), _plain_rows(f)),
        # A where that only names the counter or series again is no place.
        where=Link("where", f.where, (f.id,))
        if f.where and f.where not in (f.evidence.get("counter"), f.evidence.get("series"))
        else None,
        next_step=f.next_step,
        process=f.where,
        symptom_confidence=1.0,
    )


def _next_step(d: _Draft, facts: Facts, wrappers: Sequence[WrapperFact]) -> str:
    """The next step of a chain, in its own terms."""
    if d.cause == "wrapper":
        return _wrapper_next(d, facts, wrappers)
    if d.cause == "call_count":
        return _call_count_next(d)
    if d.cause == "per_call":
        return _per_call_next(d)
    if d.cause == "gaps":
        return _gaps_next(d)
    return _unexplained_next(d)


def _unexplained_next(d: _Draft) -> str:
    if d.cause == "sampled" and d.where is not None and d.culprit_frame is not None:
        return (
            f"the added time goes into `{_function(d.culprit_frame)}`: find what in it grows "
            "(`py-spy dump --pid PID` while it runs), fix it, then sample again"
        )
    if d.where is not None and d.culprit_frame is not None:
        return (
            f"the added time goes into `{_function(d.culprit_frame)}`: find what in it grows, "
            "fix it, then measure again: overhead moves to the next slowest place"
        )
    if d.process is None:  # a CSV or a log
        return (
            "find where the added time goes: run the job under `wsprof run` (per-call times, "
            "the time between layers, counters) with `wsprof attach PID` beside it (stacks), "
            "fix it, then measure again"
        )
    return (
        "find where the added time goes: sample the slow phase with `wsprof attach PID` or "
        "`py-spy dump --pid PID`, fix it, then measure again"
    )


def _share_rows(f: Finding) -> tuple[tuple[str, str], ...]:
    ev = f.evidence
    return (
        ("windows", str(ev.get("windows"))),
        (
            "weight-sync share, first -> last",
            f"{_fmt_pct(ev.get('first_weight_sync_share'))} "
            f"-> {_fmt_pct(ev.get('last_weight_sync_share'))}",
        ),
        (
            "mean, early -> late",
            f"{_fmt_pct(ev.get('early_weight_sync_share'))} -> "
            f"{_fmt_pct(ev.get('late_weight_sync_share'))}",
        ),
        ("phase patterns", str(ev.get("phase_source"))),
    )


def _plain_rows(f: Finding) -> tuple[tuple[str, str], ...]:
    return tuple(evidence_rows(f.evidence))


def _finish(d: _Draft, findings: Sequence[Finding]) -> Diagnosis:
    ids = {f.id for f in d.findings}
    ordered = [f for f in findings if f.id in ids]
    own = [f for f in ordered if f.id not in d.shared] or ordered
    severity = max(own, key=_severity_index).severity if own else "info"
    symptom = d.symptom
    if symptom is None:  # a chain that starts at its place (diagnose drops those without)
        assert d.where is not None
        symptom = replace(d.where, role="symptom")
    title = d.title
    return Diagnosis(
        id="",
        cause=d.cause,
        severity=severity,
        confidence=confidence_of(d.symptom_confidence, d.where is not None, bool(d.why)),
        title=title,
        symptom=symptom,
        where=d.where,
        why=tuple(d.why),
        next_step=d.next_step,
        missing=tuple(d.missing),
        finding_ids=_ids(ordered),
        symptom_series=d.symptom_series,
        culprit_frame=d.culprit_frame,
        culprit_counter=d.culprit_counter,
        process=d.process,
    )
