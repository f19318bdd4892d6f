"""One conclusion for every way wsprof reads a run: ``wsprof analyze`` (traces, or a log's or
CSV's series) and ``wsprof watch`` build their :class:`~wsprof.analysis.facts.Facts` and a
draft :class:`~wsprof.analysis.model.Analysis`, and :func:`conclude` runs the rules, the
diagnoses and the verdict on them, in one place (issue 29: the same result was assembled three
times and drifted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from wsprof.analysis.chains import diagnose
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import (
    Analysis,
    Diagnosis,
    Finding,
    GrowthVerdict,
    RankSeries,
    SeriesResult,
    WrapperFact,
)
from wsprof.analysis.ranks import judged_series
from wsprof.analysis.rules import run_rules
from wsprof.analysis.verdict import with_verdict
from wsprof.contracts.series import BETWEEN_LAYERS_S, SYNC_GAP_S, op_of


def conclude(
    facts: Facts,
    draft: Analysis,
    wrappers_of: Mapping[str, Sequence[WrapperFact]] | None = None,
) -> Analysis:
    """``draft`` (everything but findings, diagnoses and verdict) with the findings and
    diagnoses of ``facts`` (:func:`conclude_on_cause_rank`; ``wrappers_of``: process label ->
    its wrapper facts, for a run) and its verdict; notes the conclusion adds are appended."""
    notes = list(draft.notes)
    findings, diagnoses = conclude_on_cause_rank(facts, wrappers_of or {}, notes)
    return with_verdict(
        replace(draft, findings=tuple(findings), diagnoses=diagnoses, notes=tuple(notes))
    )


#: How many times faster another rank's own series must grow than the primary's for the causes
#: of a slowdown whose cause on the primary is time outside collectives to be read on it.
CAUSE_RANK_RATIO = 3.0
#: A rank's own series that locate a cause (a wrapper's time between the layers, time in its
#: weight sync outside any collective), read from another rank of the primary's world when the
#: primary's slowdown has no cause of its own.
OWN_SERIES = (BETWEEN_LAYERS_S, SYNC_GAP_S)


def conclude_on_cause_rank(
    facts: Facts, wrappers_of: Mapping[str, Sequence[WrapperFact]], notes: list[str]
) -> tuple[list[Finding], tuple[Diagnosis, ...]]:
    """Findings and diagnoses of ``facts``; when the first diagnosis is a slowdown with no
    recorded cause on the primary (or only time outside collectives, growing
    :data:`CAUSE_RANK_RATIO` times slower than on another rank, or while another rank's
    wrapper on the collective names grows and the primary has none; or calls that get slower
    in the backend while the primary's own series do not grow and another rank's do, or that
    rank's wrapper grows where the primary has none), the same rules again with the cause
    series (:data:`OWN_SERIES`, as the rank rows judged them: ``facts.ranks``) and wrappers
    (``wrappers_of``: process label -> its wrapper facts) of the rank of the primary's world
    whose own series grow, and without the primary's per-call latencies (they hold its waits
    for that rank inside each collective). A leak on one trainer rank slows every rank that
    meets it in a collective; the primary (trainer rank 0, whose sync the framework logs)
    shows the symptom, that rank the cause (issue 28: found and named on that rank, never on
    the ranks that wait for it). ``wsprof analyze`` and ``wsprof watch`` both conclude
    here."""
    findings = run_rules(facts)
    diagnoses = diagnose(findings, facts)
    primary = facts.primary
    first = diagnoses[0].cause if diagnoses else None
    if first not in ("unexplained", "gaps", "per_call") or primary is None:
        return findings, diagnoses
    processes = {p.label: p for p in facts.processes}
    rows = {r.label: r for r in facts.ranks}
    mine_row = rows.get(primary.label)
    if mine_row is None:
        return findings, diagnoses

    def own(r: RankSeries) -> dict[str, GrowthVerdict]:
        found = {BETWEEN_LAYERS_S: r.between, SYNC_GAP_S: r.gap}
        return {k: v for k, v in found.items() if v is not None}

    def slope(r: RankSeries) -> float:
        return max((v.slope_per_step for v in own(r).values() if v.accumulating), default=0.0)

    def wrapped(label: str) -> bool:
        return any(w.kind == "name" for w in wrappers_of.get(label, ()))

    best: tuple[tuple[bool, float], RankSeries] | None = None
    for r in facts.ranks:
        if r is mine_row or r.world != mine_row.world or r.label not in processes:
            continue
        # A wrapper whose time between the layers grows is a cause of its own; time outside
        # the collectives may be a wait.
        between = own(r).get(BETWEEN_LAYERS_S)
        key = (wrapped(r.label) and between is not None and between.accumulating, slope(r))
        if key[1] > 0 and (best is None or key > best[0]):
            best = (key, r)
    if best is None:
        return findings, diagnoses
    # That rank's wrapper grows where the primary has none: the primary waits for it.
    waits = best[0][0] and not wrapped(primary.label)
    # A gap on the primary is its own cause unless another rank's grows far faster, or it
    # waits (its gaps are then its waits for that rank between collectives).
    if first == "gaps" and best[0][1] < CAUSE_RANK_RATIO * slope(mine_row) and not waits:
        return findings, diagnoses
    # Calls slower in the backend are the backend's unless the primary's own time does not
    # grow while that rank's does, or it waits: a rank that reaches each collective later
    # every step makes its peers' calls longer by their wait in each (AReaL's job with a
    # probe on trainer rank 1: rank 0's all-gathers wait for it).
    if first == "per_call" and slope(mine_row) > 0 and not waits:
        return findings, diagnoses
    row = best[1]
    pa = processes[row.label]
    judged = judged_series(pa)
    series = {k: v for k, v in facts.series.items() if k not in OWN_SERIES and op_of(k) is None}
    series.update({k: SeriesResult(judged[k], v) for k, v in own(row).items() if k in judged})
    others = [p for p in facts.processes if p is not pa]
    focused = replace(
        facts, series=series, processes=[pa, *others], wrappers=list(wrappers_of.get(pa.label, ()))
    )
    notes.append(
        f"{pa.label}: its own time in the weight sync grows while the primary's does not: "
        "the causes are read on it (the primary waits for it)"
    )
    findings = run_rules(focused)
    return findings, diagnose(findings, focused)
