"""The chain builder: the findings of one cause read as one diagnosis, symptom -> where ->
why -> next step.

Findings stay small rules (:mod:`wsprof.analysis.rules`), each true on its own; one bug
trips several of them (the demo's probe wrapper: weight-sync time, step time, time between
layers, per-call latency, a counter, a frame). :func:`diagnose` groups them, naming no rule
kind: each rule says what its findings are to a chain (:mod:`wsprof.analysis.chain`).

1. **Causes.** A rule that names a cause lists it in ``Rule.causes``
   (:class:`~wsprof.analysis.chain.Cause`): its draft (title, where link, places) and its next
   step live in the rule's module. Causes are drafted in their ``order``; a cause may join a
   draft made before it (a wrapper's per-call slowdown, its time outside the collectives).
   Today: a wrapper whose time between the API and the backend grows; more collective calls
   every step; each call slower while no wrapper time grows (the backend or the
   communication); time in the weight sync outside any collective; one rank apart from the
   others (a cause with its own symptom).
2. **Symptom.** The per-step slowdown each cause explains (role
   :attr:`~wsprof.analysis.chain.Role.SLOWDOWN`, at warning or above): weight-sync time, else
   step time, else rollout time. The other per-step slowdowns are the same growth seen in the
   whole step and are folded into the first cause.
3. **Why.** The deepest frame that gained share of the py-spy samples (role ``FRAME_SHIFT``,
   with the ``HOT_FRAME`` when it is the same function) goes to the cause whose place its
   stacks run through (the wrapper's function, the weight-sync caller); a counter that tracks
   the slowdown (role ``COUNTER``, with the ``COUNTER_GROWTH`` of the same counter) goes to the
   first cause that tracks its series (:meth:`~wsprof.analysis.chain.Cause.tracks`).
4. **Nothing explains it.** A slowdown with no cause is an ``unexplained`` diagnosis that says
   which links are missing and how to get them; without steps, a rising weight-sync share of
   samples (role ``SAMPLED_SHARE``) is the symptom and the frame that gained share the where.
5. **The rest.** Every other finding at warning or above (a memory growth no slowdown follows,
   idle GPUs during sync, wsprof's own losses) is a diagnosis of its own. Info findings join a
   diagnosis only when a chain uses them.

One bug gives one diagnosis; a second, independent cause gives a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from wsprof.analysis.chain import (
    ROLE_EVIDENCE,
    Cause,
    ChainContext,
    Draft,
    Role,
    as_counter,
    as_counter_growth,
    as_frame,
    as_hot_frame,
    as_sampled_share,
    as_slowdown,
    fmt_pct,
    function_of,
    ids,
    short,
    wrapper_names,
)
from wsprof.analysis.culprit import culprit_chain, frame_key, share_under
from wsprof.analysis.evidence import evidence_rows
from wsprof.analysis.facts import LABELS, TIME_BUDGETS_S, Facts
from wsprof.analysis.model import (
    SEVERITIES,
    Diagnosis,
    Finding,
    Link,
    ProcessAnalysis,
    SeriesResult,
    Severity,
)
from wsprof.analysis.rules import RULES
from wsprof.analysis.rules.base import Rule
from wsprof.analysis.samples import split_frame
from wsprof.contracts.phases import phase_of_series
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    ROLLOUT_S,
    STEP_S,
    WEIGHT_SYNC_S,
    counter_key,
    op_of,
)
from wsprof.contracts.units import fmt_num

#: The per-step times a diagnosis's symptom can be, the first found leading.
SYMPTOM_SERIES = (WEIGHT_SYNC_S, STEP_S, ROLLOUT_S)


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


def _severity_index(f: Finding) -> int:
    return SEVERITIES.index(f.severity) if f.severity in SEVERITIES else 0


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
    return max(rest, key=lambda n: as_slowdown(by_series[n]).slope_per_step)


@dataclass(frozen=True)
class _Symptom:
    """A chain's symptom: its link, the same link for the lead alone (a second cause names
    the lead, not its riders), the lead's series key and curve confidence, and the slowdowns
    that grow too fast to ride along."""

    link: Link
    lead_link: Link
    series: str
    confidence: float
    apart: list[Finding]


def _symptom_link(
    slowdowns: Sequence[Finding],
    series: dict[str, SeriesResult],
    budgets: dict[str, float] = TIME_BUDGETS_S,
) -> _Symptom | None:
    """The symptom of a chain from the per-step slowdowns: the lead (:func:`_lead`) and those
    that grow no faster than :data:`RIDE_SLOPE_RATIO` times it ("step time grows with it");
    None without a slowdown."""
    by_series = {as_slowdown(f).series: f for f in slowdowns}
    lead_name = _lead(by_series)
    if lead_name is None:
        return None
    lead = by_series[lead_name]
    res = series.get(lead_name)
    ev = as_slowdown(lead)
    lead_slope = float(ev.slope_per_step)
    riders, apart = [], []
    for n, f in by_series.items():
        if n == lead_name or n in CAUSE_SERIES:
            continue
        slope = float(as_slowdown(f).slope_per_step)
        # The data must show it grows faster: the low end of its slope's confidence interval
        # (a step time whose rollout varies with the tokens decoded has a wide one).
        other = series.get(n)
        low = other.verdict.slope_lo if other is not None else None
        slope = min(slope, float(low)) if low is not None else slope
        if lead_slope > 0 and slope <= RIDE_SLOPE_RATIO * lead_slope:
            riders.append(f)
        else:
            apart.append(f)
    if res is None:
        link = Link("symptom", lead.title, (lead.id,))
        return _Symptom(link, link, lead_name, float(ev.confidence), apart)
    s, v = res.series, res.verdict
    k = v.judged_from
    after = f" after a slow first {s.fmt(s.values[0])}" if k else ""
    label = LABELS.get(lead_name, lead_name)
    text = (
        f"{label} grows ({v.shape}): {s.fmt(s.values[k])} -> "
        f"{s.fmt(s.values[-1])} over {len(s.values) - k} steps{after} "
        f"({s.fmt_slope(v.slope_per_step)})"
    )
    lead_text = text
    rows: list[tuple[str, str]] = [
        ("series", lead_name),
        ("shape", v.shape),
        (f"first step judged ({s.steps[k]})", s.fmt(s.values[k])),
        (f"last step ({s.steps[-1]})", s.fmt(s.values[-1])),
        ("slope (Theil-Sen)", s.fmt_slope(v.slope_per_step)),
        ("confidence of the curve", f"{v.confidence:.2f}"),
    ]
    for f in riders:
        name = as_slowdown(f).series
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
    return _Symptom(
        Link("symptom", text, ids([lead, *riders]), tuple(rows)),
        Link("symptom", lead_text, (lead.id,), tuple(rows)),
        lead_name,
        v.confidence,
        apart,
    )


# --------------------------------------------------------------------------- culprit frame


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
        share = share_under(pa, culprit.frame, place)
        if share is not None and share > 0:
            under_place = place
            text += f"; called from {place} in {share:.0%} of its samples"
            rows.append((f"under {place}", f"{share:.0%} of its samples"))
            break
    callers = [c.frame for c in chain[:-1]]
    if callers:
        rows.append(("callers that gained with it", ", ".join(function_of(c) for c in callers)))
    link_ids = [shift.id]
    if hot is not None and frame_key(str(hot.where or "")) == culprit.frame:
        link_ids.append(hot.id)
        he = as_hot_frame(hot)
        text += (
            f"; {he.samples} of {he.total} samples of the run there, most at line "
            f"{split_frame(str(he.hottest_line))[2]}"
        )
        rows.append(("samples of the run", f"{he.samples} of {he.total} ({fmt_pct(he.share)})"))
    return Link("why", text, tuple(link_ids), tuple(rows)), culprit.frame, under_place


# --------------------------------------------------------------------------- counters


def _counter_link(
    corr: Finding, growth: Finding | None, series: dict[str, SeriesResult]
) -> tuple[Link, str]:
    """The why link of a counter that tracks the slowdown, and its fitted cost in words
    (``+8.53 ms per 1,000 demo.allocator_segments``)."""
    ev = as_counter(corr)
    cname, target = ev.counter, ev.series
    res = series.get(target)
    per = ev.unit or "1,000"
    slope = float(ev.slope_per_unit)
    scale = 2.0**30 if per == "GiB" else 1000.0
    cost = res.series.fmt(slope * scale) if res is not None else fmt_num(slope * scale)
    what = LABELS.get(target, target)
    op = op_of(target)
    if op is not None:
        what = f"{op} per-call latency"
    text = (
        f"{what} tracks {cname} (Spearman rho {float(ev.spearman_rho):.2f}): "
        f"+{cost} per {per} {cname}"
    )
    rows: list[tuple[str, str]] = [
        ("counter", cname),
        ("tracks", what),
        ("Spearman rho", f"{float(ev.spearman_rho):.2f}"),
        (f"cost per {per}", f"+{cost} (least squares)"),
    ]
    link_ids = [corr.id]
    if growth is not None:
        g = series.get(counter_key(cname))
        if g is not None:
            s = g.series
            text += (
                f"; {cname} grows {s.fmt_slope(g.verdict.slope_per_step)} "
                f"({s.fmt(s.values[0])} -> {s.fmt(s.values[-1])})"
            )
            rows.append(("counter growth", s.fmt_slope(g.verdict.slope_per_step)))
        link_ids.append(growth.id)
    return Link("why", text, tuple(link_ids), tuple(rows)), f"+{cost} per {per} {cname}"


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


def causes_of(rules: Sequence[Rule] = RULES) -> dict[str, Cause]:
    """Every cause of the registry by the finding kind it reads."""
    return {c.kind: c for r in rules for c in r.causes}


def roles_of(rules: Sequence[Rule] = RULES) -> dict[str, Role]:
    """The chain role of every finding kind that has one."""
    return {kind: role for r in rules for kind, role in r.roles}


def diagnose(
    findings: Sequence[Finding], facts: Facts, rules: Sequence[Rule] = RULES
) -> tuple[Diagnosis, ...]:
    """Group ``findings`` by cause into diagnoses (see the module docstring).

    Args:
        findings: the analysis's findings with their ids (:func:`run_rules`), most severe
            first.
        facts: what the rules looked at (series, processes with their samples, wrappers).
        rules: the registry whose causes and roles are read (default: every rule).

    Returns:
        The diagnoses, most severe first, then by the growth they explain; ids ``D1``, ...
        Every finding at warning or above is in at least one diagnosis; only a run's shared
        slowdown is in more than one (each cause names it as its symptom).
    """
    causes = causes_of(rules)
    by_name = {c.cause: c for c in causes.values()}
    roles = roles_of(rules)
    by_role: dict[Role, list[Finding]] = {}
    for f in findings:
        role = roles.get(f.kind)
        if role is not None and isinstance(f.evidence, ROLE_EVIDENCE[role]):
            by_role.setdefault(role, []).append(f)
    wrappers = tuple(sorted(facts.wrappers, key=lambda w: -(w.between_s or 0.0)))
    ctx = ChainContext(facts, tuple(findings), wrappers)
    ordered = sorted(causes.values(), key=lambda c: c.order)
    drafts: list[Draft] = []
    for cause in (c for c in ordered if not c.own_symptom):
        for f in ctx.findings_of(cause.kind):
            d = cause.draft(f, ctx, drafts)
            if d is not None:
                drafts.append(d)
    drafts.sort(key=lambda d: -d.explains)
    rule_of = {kind: r for r in rules for kind, _ in r.roles}
    _add_symptoms(drafts, by_role, facts, lambda f: rule_of[f.kind].symptom_rows(f))
    frame_owner = _add_frame(drafts, by_role, ctx, by_name)
    _add_counters(drafts, by_role, facts.series, by_name)
    for cause in (c for c in ordered if c.own_symptom):
        for f in ctx.findings_of(cause.kind):
            d = cause.draft(f, ctx, drafts)
            if d is not None:
                drafts.append(d)
    _add_held_counters(drafts, by_role, ctx, by_name)
    for d in drafts:
        owner = by_name.get(d.cause)
        d.next_step = d.next_step or (
            owner.next_step(d, ctx) if owner is not None else _unexplained_next(d)
        )
        if owner is None or not owner.own_symptom:
            d.missing += _missing_links(d, facts, frame_owner)
    used = {f.id for d in drafts for f in d.findings}
    drafts += [_single(f) for f in findings if f.id not in used and f.severity != "info"]
    out = [_finish(d, findings) for d in drafts if d.symptom is not None or d.where is not None]
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out.sort(key=lambda d: -order.get(d.severity, 0))  # stable: causes before the rest
    return tuple(replace(d, id=f"D{i}") for i, d in enumerate(out, 1))


def _add_symptoms(
    drafts: list[Draft],
    by_role: dict[Role, list[Finding]],
    facts: Facts,
    symptom_rows: Callable[[Finding], tuple[tuple[str, str], ...]],
) -> None:
    """The run's slowdown as each cause's symptom (the first cause carries the step and
    rollout slowdowns along); an ``unexplained`` draft when no cause explains it; without
    steps, a ``sampled`` draft from a rising weight-sync share of samples (step 2 and 4)."""
    pa = facts.primary
    slowdowns = [f for f in by_role.get(Role.SLOWDOWN, []) if f.severity != "info"]
    symptom = _symptom_link(slowdowns, facts.series, facts.budgets)
    if symptom is not None:
        used = [f for f in slowdowns if f not in symptom.apart]
        for i, d in enumerate(drafts):
            d.symptom_series, d.symptom_confidence = symptom.series, symptom.confidence
            if i == 0:
                d.symptom = symptom.link
                d.findings = [*used, *d.findings]
            else:  # the same slowdown, its lead alone; its severity stays the first's
                lead = next(f for f in used if f.id == symptom.link.finding_ids[0])
                d.symptom = symptom.lead_link
                d.findings = [lead, *d.findings]
                d.shared.add(lead.id)
        if not drafts:
            d = _unexplained(symptom.link, symptom.series, symptom.confidence, used, pa)
            _with_growing_wrapper(d, facts)
            drafts.append(d)
        for f in symptom.apart:  # grows faster than the lead: a symptom no cause here explains
            own = _symptom_link([f], facts.series, facts.budgets)
            if own is not None:
                drafts.append(_unexplained(own.link, own.series, own.confidence, [f], pa))
    sampled = [f for f in by_role.get(Role.SAMPLED_SHARE, []) if as_sampled_share(f).grows]
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
        Draft(
            "sampled",
            f"the weight sync takes a growing share of {f.where}'s time",
            [f],
            symptom=Link("symptom", f.title, (f.id,), symptom_rows(f)),
            symptom_confidence=1.0,
            process=str(f.where),
        )
    )


def _with_growing_wrapper(d: Draft, facts: Facts) -> None:
    """An unexplained slowdown on a process whose wrapper on the collective names grows
    between the layers, though too little to explain it (the between-layers finding stayed
    info): that wrapper is the recorded cause, the rest of its time is on names wsprof does
    not hook (the functional collectives DTensor's ``full_tensor()`` calls) or elsewhere."""
    top = next((w for w in facts.wrappers if w.kind == "name"), None)
    bl = facts.series.get(BETWEEN_LAYERS_S)
    if top is None or bl is None or not bl.verdict.accumulating:
        return
    names = wrapper_names(top, facts.wrappers)
    who = f"{top.qualname} ({top.file}:{top.line})"
    slope = bl.series.fmt_slope(bl.verdict.slope_per_step)
    d.cause = "wrapper"
    d.title = (
        f"a wrapper on the collective names, {short(top.qualname)}, grows with the slowdown: "
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
    d.places = (short(top.qualname),)


def _unexplained(
    link: Link, name: str, conf: float, found: list[Finding], pa: ProcessAnalysis | None
) -> Draft:
    return Draft(
        "unexplained",
        f"{LABELS.get(name, name)} grows and no recorded fact says where",
        list(found),
        symptom=link,
        symptom_series=name,
        symptom_confidence=conf,
        places=(short(function_of(pa.sync_site)),) if pa is not None and pa.sync_site else (),
        process=pa.label if pa is not None else None,
    )


def _add_frame(
    drafts: list[Draft],
    by_role: dict[Role, list[Finding]],
    ctx: ChainContext,
    causes: dict[str, Cause],
) -> Draft | None:
    """The frame that gained share, to the chain whose place its stacks run through (else the
    first); for a chain without a where (unexplained, sampled) it is the where. Returns the
    draft that got it (None when no frame gained share)."""
    facts = ctx.facts
    shifts = by_role.get(Role.FRAME_SHIFT, [])
    if not drafts or not shifts or facts.primary is None:
        return None
    shift = shifts[0]
    pa = next(
        (p for p in facts.processes if p.label == as_frame(shift).process),
        facts.primary,
    )
    hot = next(
        (h for h in by_role.get(Role.HOT_FRAME, []) if as_frame(h).process == pa.label),
        None,
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
    cause = causes.get(owner.cause)
    if cause is not None and place is not None:
        cause.on_culprit_under(owner, place, ctx)
    owner.findings += [f for f in (shift, hot) if f is not None and f.id in link.finding_ids]
    if owner.where is None:
        owner.where = replace(link, role="where")
    else:
        owner.why.append(link)
    return owner


def _add_counters(
    drafts: list[Draft],
    by_role: dict[Role, list[Finding]],
    series: dict[str, SeriesResult],
    causes: dict[str, Cause],
) -> None:
    """Each counter that tracks the slowdown to the first chain whose cause tracks its series
    (:meth:`Cause.tracks`: time between layers, per-call latency; else the first chain), one
    counter per chain, with the counter growth of the same counter (step 3)."""
    growths = {as_counter_growth(f).counter: f for f in by_role.get(Role.COUNTER_GROWTH, [])}
    for corr in by_role.get(Role.COUNTER, []):
        if not drafts:
            return
        target = as_counter(corr).series
        owner = next(
            (d for d in drafts if d.cause in causes and causes[d.cause].tracks(target)),
            drafts[0],
        )
        if owner.culprit_counter is not None:
            continue  # one counter per chain: the strongest (the rule ranks them so)
        cname = as_counter(corr).counter
        growth = growths.pop(cname, None)
        link, owner.counter_cost = _counter_link(corr, growth, series)
        owner.why.append(link)
        owner.culprit_counter = cname
        owner.findings += [corr] + ([growth] if growth is not None else [])


def _add_held_counters(
    drafts: list[Draft],
    by_role: dict[Role, list[Finding]],
    ctx: ChainContext,
    causes: dict[str, Cause],
) -> None:
    """Each counter growth no chain took (a counter of the primary process) to the first
    chain whose cause keeps what it counts (:meth:`Cause.holds`), as a why link."""
    taken = {f.id for d in drafts for f in d.findings}
    for g in by_role.get(Role.COUNTER_GROWTH, []):
        if g.id in taken:
            continue
        counter = as_counter_growth(g).counter
        owner = next(
            (
                d
                for d in drafts
                if d.cause in causes and causes[d.cause].holds(d, counter, ctx.process)
            ),
            None,
        )
        if owner is None:
            continue
        owner.findings.append(g)
        owner.why.append(Link("why", g.title, (g.id,), tuple(evidence_rows(g.evidence))))
        taken.add(g.id)


def _missing_links(d: Draft, facts: Facts, frame_owner: Draft | None) -> list[str]:
    """One line per link the chain lacks: which, and how to get it."""
    out: list[str] = []
    if d.cause == "finding":
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


def _single(f: Finding) -> Draft:
    """A finding at warning or above that no chain holds: a diagnosis of its own (step 5)."""
    return Draft(
        "finding",
        f.title,
        [f],
        symptom=Link("symptom", f.title, (f.id,), tuple(evidence_rows(f.evidence))),
        # A where that only names the counter or series again is no place.
        where=Link("where", f.where, (f.id,))
        if f.where and f.where not in (f.evidence.counter_named(), f.evidence.series_named())
        else None,
        next_step=f.next_step,
        process=f.where,
        symptom_confidence=1.0,
    )


def _unexplained_next(d: Draft) -> str:
    if d.cause == "sampled" and d.where is not None and d.culprit_frame is not None:
        return (
            f"the added time goes into `{function_of(d.culprit_frame)}`: find what in it grows "
            "(`py-spy dump --pid PID` while it runs), fix it, then sample again"
        )
    if d.where is not None and d.culprit_frame is not None:
        return (
            f"the added time goes into `{function_of(d.culprit_frame)}`: find what in it grows, "
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


def _finish(d: Draft, findings: Sequence[Finding]) -> Diagnosis:
    held = {f.id for f in d.findings}
    ordered = [f for f in findings if f.id in held]
    own = [f for f in ordered if f.id not in d.shared] or ordered
    severity = max(own, key=_severity_index).severity if own else Severity.INFO
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
        finding_ids=ids(ordered),
        symptom_series=d.symptom_series,
        culprit_frame=d.culprit_frame,
        culprit_counter=d.culprit_counter,
        process=d.process,
    )
