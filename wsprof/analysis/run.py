"""Whole-run analysis: traces or series in, :class:`~wsprof.analysis.model.Analysis` out."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from wsprof.analysis.align import ProcessClock, RunClock, align, clock_input
from wsprof.analysis.conclude import conclude
from wsprof.analysis.coverage import audit_run
from wsprof.analysis.coverage_model import Coverage
from wsprof.analysis.digest import Digest, digest_trace
from wsprof.analysis.ending import end_notes
from wsprof.analysis.facts import TIME_BUDGETS_S, Facts
from wsprof.analysis.growth import classify, hold_newest
from wsprof.analysis.hang import hangs_of
from wsprof.analysis.headline import headline_of
from wsprof.analysis.link_limit import link_limit
from wsprof.analysis.model import (
    WAIT_BY_SEQ,
    WAIT_BY_TIMING,
    Analysis,
    AnalysisKind,
    GrowthVerdict,
    ProcessAnalysis,
    RankSeries,
    SeriesResult,
    StepRow,
    StepSource,
    World,
)
from wsprof.analysis.per_step import (
    counter_series,
    op_median_series,
    row_series,
)
from wsprof.analysis.phases import pattern_problems
from wsprof.analysis.pool import digest_files, map_ordered, workers_for
from wsprof.analysis.process import (
    counter_per_step,
    join_samples,
)
from wsprof.analysis.ranks import RankInput, judged_series, peer_waits, rank_series, seq_waits
from wsprof.analysis.wire import sync_backends
from wsprof.analysis.workload import ENGINE_CALLS
from wsprof.analysis.worlds import ROLE_ORDER, find_worlds
from wsprof.contracts.counters import is_gpu_counter
from wsprof.contracts.events import (
    Event,
    EventKind,
    PresetMarked,
    ProbeTrouble,
    SamplerWindowFailed,
    SamplerWindowLost,
)
from wsprof.contracts.phases import canonical_phase
from wsprof.contracts.roles import Role
from wsprof.contracts.series import (
    SYNC_BYTES,
    WINDOW_ROLLOUT_SHARE,
    WINDOW_WEIGHT_SYNC_SHARE,
    Series,
    SeriesKind,
    is_sync_part,
)
from wsprof.contracts.units import Unit
from wsprof.frameworks import RUN_TIMELINE_DIR
from wsprof.importers.slime_timeline import TimelineRun, pick_run, read_timeline
from wsprof.inputs import Loaded, LoadedRun, load
from wsprof.trace.model import ProcessTrace, SampleWindow

#: Fewest sampling windows with active samples for the per-window phase-share series of a
#: process without steps (fewer: not a curve, as for steps).
MIN_WINDOWS_FOR_SERIES = 3
#: Per-window series (a sampling window stands in for a step), and the window field each reads.
WINDOW_SERIES = {
    WINDOW_WEIGHT_SYNC_SHARE: "weight_sync_share",
    WINDOW_ROLLOUT_SHARE: "rollout_share",
}


def step_series(pa: ProcessAnalysis, d: Digest) -> list[Series]:
    """The per-step series of one process, named as the findings expect
    (:mod:`wsprof.analysis.per_step`): its rows' series, each op's median latency per step (the
    digest's, when ``pa``'s steps are cut where the digest's are) and each counter's value at
    each step's end."""
    rows = list(pa.steps)
    if not rows:
        return []
    trace = d.trace
    meds = d.op_meds if _bounds(pa.steps) == _bounds(d.pa.steps) else {}
    return [
        *row_series(rows, pa.step_source),
        *op_median_series(meds, rows),
        *counter_series(counter_per_step(trace, rows), rows),
    ]


def _bounds(rows: Sequence[StepRow]) -> list[tuple[int, int, int]]:
    """Each step's number, start and end (ns): what decides which calls are in it (the peer
    waits the merge adds to a row change none of them)."""
    return [(r.step, r.t_start_ns, r.t_end_ns) for r in rows]


def window_series(pa: ProcessAnalysis) -> list[Series]:
    """Per-window phase shares of a process that has no steps (``wsprof attach``).

    ``window_weight_sync_share`` and ``window_rollout_share``: weight-sync (rollout) samples /
    active samples of each sampling window, unit ``ratio``. ``steps`` holds the window's
    index among the process's windows: a window stands in for a step, so growth is judged per
    window. Empty with steps, or with fewer than :data:`MIN_WINDOWS_FOR_SERIES` windows with
    active samples.
    """
    if pa.steps:
        return []
    active = [(i, w) for i, w in enumerate(pa.windows) if w.n_active > 0]
    if len(active) < MIN_WINDOWS_FOR_SERIES:
        return []
    out: list[Series] = []
    for name, attr in WINDOW_SERIES.items():
        pts = [(i, getattr(w, attr)) for i, w in active]
        pts = [(i, float(v)) for i, v in pts if v is not None]
        if len(pts) >= MIN_WINDOWS_FOR_SERIES:
            out.append(
                Series(
                    name,
                    Unit.OTHER,
                    tuple(p[0] for p in pts),
                    tuple(p[1] for p in pts),
                    unit_text="ratio",
                )
            )
    return out


def _stepped(s: Series) -> bool:
    """True when ``s.steps`` can be the x of its fit: one per value, strictly increasing."""
    return len(s.steps) == len(s.values) and all(b > a for a, b in zip(s.steps, s.steps[1:]))


#: Most spike steps a note lists (the rest are counted).
SPIKE_NOTE_STEPS = 6


def spikes_note(name: str, period: int, steps: Sequence[int]) -> str:
    """``step_s: spikes every 20 steps at steps 20, 40, 60: left out of the trend``."""
    shown = ", ".join(str(s) for s in steps[:SPIKE_NOTE_STEPS])
    more = f" and {len(steps) - SPIKE_NOTE_STEPS} more" if len(steps) > SPIKE_NOTE_STEPS else ""
    return (
        f"{name}: spikes every {period} steps at steps {shown}{more} (a checkpoint save or an "
        "eval?): left out of the trend"
    )


#: Fewest rank series for which ``workers`` > 1 judges them in a pool (below, starting it costs
#: more than it saves: a series takes about 9 ms).
POOL_MIN_SERIES = 256


def judge_alone(series: Series) -> tuple[GrowthVerdict | None, list[str]]:
    """One series' verdict (None: it cannot be judged) and the notes :func:`classify_series`
    says of it; a module-level function, so a worker process can run it."""
    said: list[str] = []
    res = classify_series([series], said)
    return (res[0].verdict if res else None), said


def classify_series(series: Sequence[Series], notes: list[str]) -> list[SeriesResult]:
    """Classify each series (with :data:`TIME_BUDGETS_S`); one that cannot be judged (no finite
    value, overflow) is left out and described in ``notes``."""
    out: list[SeriesResult] = []
    for s in series:
        try:
            budget = TIME_BUDGETS_S.get(s.name) if s.unit is Unit.SECONDS else None
            steps = s.steps if _stepped(s) else None
            verdict = classify(s.values, steps=steps, config=s.config, budget=budget)
            verdict = hold_newest(s.values, verdict, steps=steps, config=s.config, budget=budget)
            out.append(SeriesResult(s, verdict))
            if verdict.spike_period is not None:
                notes.append(spikes_note(s.name, verdict.spike_period, verdict.spike_steps))
        except (ValueError, OverflowError, FloatingPointError, ZeroDivisionError) as e:
            notes.append(f"series {s.name!r} not judged: {e}")
    return out


#: Sampler events that mean samples are missing (windows lost, py-spy failures), with the words
#: a note counts them by. A target that exits is not trouble: every job ends (attach says so
#: itself when it was early).
_SAMPLER_TROUBLE: tuple[tuple[type[Event], str], ...] = (
    (SamplerWindowLost, "window lost"),
    (SamplerWindowFailed, "window failed"),
)


def _sampler_trouble(samplers: Iterable[ProcessTrace]) -> list[str]:
    """One note per kind of sampler trouble, with a count: what is missing from the samples."""
    notes: list[str] = []
    for t in samplers:
        counts: dict[str, list[str]] = {}
        for e in t.events:
            for cls, kind in _SAMPLER_TROUBLE:
                if isinstance(e, cls):
                    counts.setdefault(kind, []).append(e.detail)
        for kind, details in counts.items():
            notes.append(f"py-spy sampler: {len(details)} x {kind} ({details[0]})")
    return notes


def _idle_preset_notes(traces: Sequence[ProcessTrace]) -> list[str]:
    """One note per preset that wrapped entry points (``preset`` events) in some process while
    no process has a phase span of any phase it marks: none of its entry points ran (a TRL job
    generating through a path the preset does not know). A phase also marked by hand hides
    this: the note is said only when it is certain."""
    marked: dict[str, set[str]] = {}
    for t in traces:
        for e in t.events:
            if isinstance(e, PresetMarked):
                marked.setdefault(e.preset, set()).add(e.phase)
    seen = {canonical_phase(s.name) or s.name for t in traces for s in t.spans if s.kind == "phase"}
    return [
        f"{preset} preset installed; none of its entry points ran: no phases marked from it"
        for preset, phases in marked.items()
        if not phases & seen
    ]


def _capture_notes(digests: Iterable[Digest]) -> list[str]:
    """What capture could not do, once per kind: extra targets not hooked, device time off."""
    missing: list[str] = []
    device: list[str] = []
    thinned: list[str] = []
    probes: list[str] = []
    seen = list(digests)
    traces_seen = [d.trace for d in seen]
    for t in traces_seen:
        r = t.meta.get("retention")
        if t.thinned and isinstance(r, dict):
            thinned.append(
                f"{t.label}: steps {r.get('first_thinned_step')}-{r.get('last_thinned_step')} "
                f"keep at most {r.get('calls_per_thinned_step')} calls each in detail "
                f"({r.get('calls_removed'):,} removed; per-step counts and times are exact)"
            )
        for e in t.events:
            if e.kind is EventKind.EXTRA_MISSING and e.detail not in missing:
                missing.append(e.detail)
            elif e.kind is EventKind.DEVICE_TIME and e.detail not in device:
                device.append(e.detail)
            elif isinstance(e, ProbeTrouble) and e.detail not in probes:
                probes.append(e.detail)
    notes = [f"device time: {d}" for d in device[:2]]
    for d in seen:
        t = d.trace
        notes += end_notes(t.meta, t.self_overhead, t.label, d.last_step)
    if thinned:
        notes.append(
            f"retention: {thinned[0]}"
            + (f" (and {len(thinned) - 1} more processes)" if len(thinned) > 1 else "")
        )
    notes += [f"counter probe: {d}" for d in probes[:3]]
    notes += _idle_preset_notes(traces_seen)
    if missing:
        notes.append(
            f"{len(missing)} extra communicator target(s) not hooked: "
            f"{'; '.join(missing[:3])}{'; ...' if len(missing) > 3 else ''}"
        )
    return notes


def _samples_by_pid(traces: Sequence[ProcessTrace]) -> dict[int, list[SampleWindow]]:
    by_pid: dict[int, list[SampleWindow]] = {}
    for t in traces:
        for w in t.samples:
            by_pid.setdefault(w.pid, []).append(w)
    return by_pid


def _label_in_world(label: str, world: World, worlds: Sequence[World]) -> str:
    """``trainer rank 0`` / ``inference engine rank 1`` (``world 3 rank 0`` where two worlds
    have one role): how reports name a process when the run has several worlds."""
    same = sum(1 for w in worlds if w.role == world.role)
    prefix = world.role if same == 1 else f"{world.label} ({world.role})"
    return f"{prefix} {label}"


def analyze_run(
    traces: Iterable[ProcessTrace], source: str, problems: Sequence[str] = ()
) -> Analysis:
    """Analyse the traces of one run.

    py-spy sample windows recorded by a sampler trace are joined to the process whose pid they
    sampled. The headline series come from the primary process: rank 0 when ranks are known,
    else the trace with the most collective calls. Every process with steps gets a row in
    ``ranks`` (per-step weight-sync and step times on the run clock, see
    :mod:`wsprof.analysis.ranks`). Each trace is analysed as it comes from ``traces`` (an
    iterator is consumed once) and only the primary's calls are kept.

    Args:
        traces: every trace of the run (see :func:`wsprof.trace.reader.read_run`).
        source: the path analysed (for the report).
        problems: traces of the run that could not be read (become notes).
    """
    return analyze_digests(
        [digest_trace(t, i) for i, t in enumerate(traces)], source, list(problems)
    )


def _run_clock(with_steps: Sequence[tuple[Digest, ProcessAnalysis]]) -> RunClock:
    """The run clock of these processes (:mod:`wsprof.analysis.align`)."""
    return align([clock_input(pa.label, d.trace.meta, d.first_ns) for d, pa in with_steps])


def _by_world_on_clock(
    analyses: Sequence[ProcessAnalysis], clock: RunClock, worlds: Sequence[object | None]
) -> list[list[tuple[int, ProcessClock]]]:
    """The processes with steps on the run clock (``clock``: those with steps, in order),
    grouped by world: ``(index into analyses, its clock)``."""
    idx = [i for i, pa in enumerate(analyses) if pa.steps]
    by_world: dict[int, list[tuple[int, ProcessClock]]] = {}
    for i, c in zip(idx, clock.clocks):
        if c.aligned:
            by_world.setdefault(id(worlds[i]), []).append((i, c))
    return list(by_world.values())


def _with_colocated_push_starts(
    analyses: Sequence[ProcessAnalysis], clock: RunClock, worlds: Sequence[object | None]
) -> list[ProcessAnalysis]:
    """``analyses`` with the weight sync of a colocated push (a world whose ranks send weight
    buckets by handle, :attr:`~wsprof.analysis.model.ProcessAnalysis.sharing`) starting, on
    every rank whose steps were found without markers, when the world's first rank began
    it: the ranks meet at the barrier ``update_weights`` starts with, and a rank that reached
    it later was on its way there in no collective (slime's rank 0 sends the engine's pause
    and flush requests first, which its own timer counts). Never before the step's start;
    the time added is in no collective (``sync_gap_s``). ``clock``: the processes with
    steps, in order."""
    out = list(analyses)
    unmarked = (StepSource.RHYTHM, StepSource.BURSTS)
    for members in _by_world_on_clock(analyses, clock, worlds):
        sends = [i for i, _ in members if (sh := analyses[i].sharing) and sh.exports]
        if len(members) < 2 or not sends:
            continue
        first: dict[int, int] = {}
        for i, c in members:
            for r in analyses[i].steps:
                if r.sync_start_ns is not None and r.weight_sync_s is not None:
                    at = c.run_ns(r.sync_start_ns)
                    first[r.step] = min(first.get(r.step, at), at)
        for i, c in members:
            pa = analyses[i]
            if pa.step_source not in unmarked:
                continue
            rows = []
            for r in pa.steps:
                began = first.get(r.step)
                own = r.sync_start_ns
                if began is not None and own is not None and r.weight_sync_s is not None:
                    start = max(began - c.shift_ns, r.t_start_ns)
                    if start < own:
                        more = (own - start) / 1e9
                        r = replace(
                            r,
                            weight_sync_s=r.weight_sync_s + more,
                            sync_gap_s=None if r.sync_gap_s is None else r.sync_gap_s + more,
                            other_s=max(r.other_s - more, 0.0),
                            sync_start_ns=start,
                        )
                rows.append(r)
            out[i] = replace(pa, steps=tuple(rows))
    return out


def _with_peer_waits(
    analyses: Sequence[ProcessAnalysis], clock: RunClock, worlds: Sequence[object | None]
) -> list[ProcessAnalysis]:
    """``analyses`` with each step's ``sync_wait_s`` (:func:`~wsprof.analysis.ranks.peer_waits`)
    where two or more processes of one world (``worlds``: per analysis, its world, None when
    unknown) on the run clock have a weight-sync start for that step. Ranks wait for each
    other within a world; an engine's sync starts when the trainers' gathers are done, which
    is no wait of theirs. ``clock`` holds the processes with steps, in order."""
    out = list(analyses)
    for members in _by_world_on_clock(analyses, clock, worlds):
        if len(members) < 2:
            continue
        steps = [[r.step for r in analyses[i].steps] for i, _ in members]
        spans = [
            [
                None
                if r.sync_start_ns is None or r.weight_sync_s is None
                else (
                    c.run_ns(r.sync_start_ns),
                    c.run_ns(r.sync_start_ns) + int(r.weight_sync_s * 1e9),
                )
                for r in analyses[i].steps
            ]
            for i, c in members
        ]
        keys = [[r.sync_key for r in analyses[i].steps] for i, _ in members]
        by_seq = seq_waits(keys, spans)
        for (i, _), timed, joined in zip(members, peer_waits(steps, spans), by_seq):
            pa = analyses[i]
            rows = tuple(
                replace(r, sync_wait_s=j, sync_wait_source=WAIT_BY_SEQ)
                if j is not None
                else replace(
                    r, sync_wait_s=w, sync_wait_source=None if w is None else WAIT_BY_TIMING
                )
                for r, w, j in zip(pa.steps, timed, joined)
            )
            out[i] = replace(pa, steps=rows)
    return out


def _rank_rows(
    procs: Sequence[Digest],
    analyses: Sequence[ProcessAnalysis],
    clock: RunClock,
    notes: list[str],
    worlds: Sequence[str | None] | None = None,
    workers: int = 1,
) -> list[RankSeries]:
    """Per-rank rows of every process with steps, on the run clock (``clock``: those
    processes, in order); alignment notes go to ``notes`` (only when ranks are compared: a
    single process needs no common clock); ``workers``: processes that judge the ranks'
    series."""
    labels = list(worlds) if worlds is not None else [None] * len(procs)
    world_of = {id(d): w for d, w in zip(procs, labels)}
    with_steps = [(d, pa) for d, pa in zip(procs, analyses) if pa.steps]
    if not with_steps:
        return []
    if len(with_steps) > 1:
        notes.extend(clock.notes)

    # Each rank's own series are judged up front (in a pool with ``workers`` > 1: at 1,024
    # ranks, 3 series a rank were the driver's largest serial cost), then handed out per name in
    # rank order, with their notes, as rank_series asks for them.
    queue = [s for _, pa in with_steps for s in judged_series(pa).values()]
    results: dict[str, deque[tuple[GrowthVerdict | None, list[str]]]] = {}
    n = workers if len(queue) >= POOL_MIN_SERIES else 1
    for s, res in zip(queue, map_ordered(judge_alone, queue, n)):
        results.setdefault(s.name, deque()).append(res)

    def judge(series: Series) -> GrowthVerdict | None:
        verdict, said = results[series.name].popleft()
        notes.extend(said)
        return verdict

    return rank_series(
        [
            RankInput(
                pa,
                c.host,
                c,
                tuple(r.sync_start_ns for r in pa.steps),
                next((w.label() for w in d.wrappers if w.kind == "name"), None),
                world_of.get(id(d)),
            )
            for (d, pa), c in zip(with_steps, clock.clocks)
        ],
        judge,
    )


def engine_work_series(
    analyses: Sequence[ProcessAnalysis], worlds: Sequence[World | None]
) -> list[Series]:
    """The collectives an inference engine issued per step, when its steps are the primary's
    (cut at the same weight updates): a TP engine's decode issues its all-reduces per token,
    so this is the rollout's work per step, the workload a step time is judged against
    (:mod:`wsprof.analysis.workload`). Empty without such an engine."""
    if not analyses or analyses[0].step_source != "updates":
        return []
    n = len(analyses[0].steps)
    for pa, w in zip(analyses, worlds):
        if w is None or w.role != Role.ENGINE.value or len(pa.steps) != n:
            continue
        if pa.step_source != "updates":
            continue
        return [
            Series(
                ENGINE_CALLS,
                Unit.OTHER,
                tuple(r.step for r in analyses[0].steps),
                tuple(float(r.n_calls) for r in pa.steps),
                unit_text="calls",
            )
        ]
    return []


def analyze_digests(
    digests: Sequence[Digest],
    source: str,
    notes: list[str],
    link_gbps: float | None = None,
    workers: int = 1,
) -> Analysis:
    """The run-level analysis of the digests of a run's traces (:mod:`wsprof.analysis.digest`),
    in the run's file order: worlds and roles, the primary, ranks, the headline, findings and
    diagnoses. Made from the digests alone: the same digests give the same analysis wherever
    they were made.

    Args:
        digests: one per readable trace.
        source: the path analysed (for the report).
        notes: the run's notes so far (traces not read start with ``skipped ``); extended.
        link_gbps: as :func:`analyze`'s.
        workers: processes that judge the ranks' own series (the result is the same for any).
    """
    # The lines of traces that could not be read (the notes a run starts with) are kept for
    # the verdict and the coverage: what was not read was not judged.
    unread = tuple(n for n in notes if n.startswith("skipped "))
    samples = _samples_by_pid([d.trace for d in digests])
    procs = [d for d in digests if not d.sampler_only] or list(digests)
    worlds, world_idx = find_worlds(
        [d.trace.meta for d in procs],
        [d.pa.sharing.role if d.pa.sharing is not None else None for d in procs],
    )
    world_of = {id(d): worlds[w] for d, w in zip(procs, world_idx) if w is not None}
    index_of = {id(d): w for d, w in zip(procs, world_idx)}

    def key(d: Digest) -> tuple[int, ...]:
        # The primary is the trainer world's rank 0: role first, then steps, world, rank, ...
        w = world_of.get(id(d))
        return (
            ROLE_ORDER[w.role] if w else 1,
            *d.key()[:1],
            index_of.get(id(d)) or 0,
            *d.key()[1:],
        )

    procs.sort(key=key)
    several = len(worlds) > 1
    analyses: list[ProcessAnalysis] = []
    for d in procs:
        pid = d.trace.meta.get("pid")
        own = [] if d.trace.samples or not isinstance(pid, int) else samples.get(pid, [])
        pa = join_samples(d.pa, d.trace.meta, own) if own else d.pa
        w = world_of.get(id(d))
        if several and w is not None:
            pa = replace(pa, label=_label_in_world(pa.label, w, worlds))
        analyses.append(pa)
    clock = _run_clock([(d, pa) for d, pa in zip(procs, analyses) if pa.steps])
    in_world = [world_of.get(id(d)) for d in procs]
    analyses = _with_colocated_push_starts(analyses, clock, in_world)
    analyses = _with_peer_waits(analyses, clock, in_world)
    primary = procs[0] if procs else None
    series = step_series(analyses[0], primary) if primary is not None else []
    if primary is not None and analyses[0].step_source == StepSource.TIMELINE:
        series += primary.buckets  # the framework's parts and buckets, and the calls inside
    if analyses:
        series += window_series(analyses[0])
    for d in procs:
        notes += [f"{d.trace.label}: {p}" for p in pattern_problems(d.trace.meta)]
    series += engine_work_series(analyses, [world_of.get(id(d)) for d in procs])
    results = classify_series(series, notes)
    wrappers = procs[0].wrappers if procs else []
    unattributed = primary.unattributed if primary is not None else None
    if unattributed:
        notes.append(unattributed)
    ranks = _rank_rows(
        procs,
        analyses,
        clock,
        notes,
        [world_of[id(d)].label if several and id(d) in world_of else None for d in procs],
        workers,
    )
    errors = [e.detail for d in procs for e in d.trace.events if e.kind is EventKind.INTERNAL_ERROR]
    limit = (
        link_limit(
            analyses[0].meta,
            sync_backends(analyses[0].steps, analyses[0].meta),
            {str(h) for d in procs if (h := d.trace.meta.get("host"))},
            link_gbps,
        )
        if analyses
        else None
    )
    head = headline_of(analyses[0] if analyses else None, results, source, analyses, limit)
    facts = Facts(
        {r.series.name: r for r in results},
        analyses,
        wrappers,
        errors,
        ranks=ranks,
        headline=head,
        hangs=hangs_of([d.trace.meta for d in procs]),
    )
    notes += [
        f"{d.trace.path}: no rank in its file name (torch names a dump <prefix><rank>): left "
        "out of the hang analysis"
        for d in procs
        if "flight_dump" in d.trace.meta and d.trace.rank is None
    ]
    sampled = any(pa.n_samples for pa in analyses)
    if analyses and not sampled and not any(d.n_calls or d.trace.spans for d in procs):
        notes.append(
            "nothing recorded: no collective calls and no steps in these traces (did the "
            "process exit before the first flush, or never call a collective?)"
        )
    first_world = world_of.get(id(procs[0])) if procs else None
    lowest = min(
        (
            d.trace.rank
            for d in procs
            if d.trace.rank is not None and world_of.get(id(d)) is first_world
        ),
        default=None,
    )
    if (
        analyses
        and analyses[0].rank is not None
        and lowest is not None
        and (analyses[0].rank != lowest)
    ):
        notes.append(
            f"no steps found on rank {lowest}: the headline series come from "
            f"{analyses[0].label}, the lowest rank with steps"
        )
    for pa in analyses:
        notes += [f"{pa.label}: {phrase}" for phrase in pa.left_out]
    if analyses and analyses[0].step_source == "updates":
        notes.append(
            f"no step markers: steps were cut at the weight updates ({analyses[0].sync_evidence});"
            " a step ends when its update has arrived; rollout and train times are unknown"
        )
    if analyses and analyses[0].step_source == "rhythm":
        notes.append(
            "no step markers: steps were found from the job's rhythm (the same "
            "collectives repeating each step); rollout and train times are unknown"
        )
    if analyses and analyses[0].step_source == "bursts":
        notes.append(
            "no step markers: steps were found as bursts of collectives separated by "
            "idle time; rollout and train times are unknown"
        )
    if analyses and analyses[0].step_source == "sampled":
        notes.append(
            "no step markers and no collectives recorded: steps were cut from the "
            "phases py-spy sampled (a rollout after the other phases starts a step); "
            "phase times are sample shares of the windows"
        )
    if analyses and analyses[0].step_source == "none":
        if analyses[0].windows:
            notes.append(
                "no steps: py-spy sampling windows stand in for steps (per-window "
                "series); for per-step times add wsprof.step() at the top of each "
                "training step"
            )
        else:
            notes.append("no steps found: add wsprof.step() at the top of each training step")
    if not any(pa.n_samples for pa in analyses):
        notes.append("no py-spy samples in this run")
    notes += _sampler_trouble(d.trace for d in digests if d.sampler_only)
    notes += _capture_notes(procs)
    if not any(is_gpu_counter(c.name) for pa in analyses for c in pa.counters):
        notes.append(
            "no CUDA allocator or NVML counters (CUDA not in use, or NVML unavailable, "
            "in the traced processes)"
        )
    return conclude(
        facts,
        Analysis(
            source=source,
            kind=AnalysisKind.RUN,
            processes=tuple(analyses),
            series=tuple(results),
            findings=(),
            diagnoses=(),
            notes=tuple(notes),
            wrappers=tuple(wrappers),
            ranks=tuple(ranks),
            coverage=with_unread(
                audit_run(
                    [(pa.label, d.trace) for d, pa in zip(procs, analyses) if not d.sampler_only],
                    [d.n_calls for d in procs if not d.sampler_only],
                ),
                unread,
            ),
            unread=unread,
            headline=head,
            worlds=worlds,
        ),
        {pa.label: d.wrappers for d, pa in zip(procs, analyses)},
    )


def with_unread(cov: Coverage, unread: Sequence[str]) -> Coverage:
    """The audit with each trace that could not be read named as not audited."""
    if not unread:
        return cov
    return replace(
        cov,
        not_audited=(
            *cov.not_audited,
            *(f"unreadable trace ({u.removeprefix('skipped ')})" for u in unread),
        ),
    )


def analyze_series(series: Sequence[Series], source: str) -> Analysis:
    """Analyse per-step series from a CSV file or a log (no trace).

    Each series first gets its kind (:func:`wsprof.analysis.kinds.series_kind`, kept in
    ``Series.kind``): durations are judged as times per step (slowdown), bytes and resource
    counts as held memory or resources (growth); every other kind (step counters, quality
    metrics, learning rates, rates, unknown metrics) is fitted and shown but gets no finding.
    At most :data:`~wsprof.importers.limits.MAX_METRICS` series are analysed; a note names the
    rest.
    """
    from wsprof.analysis.kinds import HELD_KINDS, kinds_note, series_kind
    from wsprof.importers.limits import MetricCap

    cap = MetricCap()  # at most MAX_METRICS series, headline ones first (importers hold to it)
    series = [s for s in series if cap.admit(s.name)]
    kinds = {s.name: series_kind(s).kind for s in series}
    notes: list[str] = [n for n in (cap.note("series"),) if n]
    results = classify_series([replace(s, kind=kinds[s.name]) for s in series], notes)
    head = headline_of(None, results, source)
    facts = Facts(
        {r.series.name: r for r in results},
        [],
        headline=head,
        time_series=tuple(
            r.series.name
            for r in results
            if kinds[r.series.name] is SeriesKind.DURATION and not is_sync_part(r.series.name)
        ),
        # The bytes a weight sync sends are its payload, judged with the sync (rules.timeline),
        # never memory held.
        counter_series=tuple(
            r.series.name
            for r in results
            if kinds[r.series.name] in HELD_KINDS and r.series.name != SYNC_BYTES
        ),
    )
    note = kinds_note(kinds)
    return conclude(
        facts,
        Analysis(
            source=source,
            kind=AnalysisKind.SERIES,
            processes=(),
            series=tuple(results),
            findings=(),
            diagnoses=(),
            notes=(*notes, *([note] if note else [])),
            headline=head,
        ),
    )


def analyze(loaded: Loaded, link_gbps: float | None = None, workers: int | None = 1) -> Analysis:
    """Analyse what :func:`wsprof.inputs.load` read: a run's traces (one at a time, each
    released after its analysis but the primary's), or a series file's or log's series.

    Args:
        loaded: the input.
        link_gbps: the link's limit as the user states it, GB/s (``--link-gbps``): the weight
            sync's bandwidth is held against it instead of the link capture detected.

    Returns:
        The analysis (its notes begin with how a series or log was read).

    Raises:
        wsprof.errors.InputError: no trace of a run could be read.
    """
    if isinstance(loaded, LoadedRun):
        return analyze_loaded_run(loaded, link_gbps, workers, keep_primary=False).analysis
    imported = loaded.imported
    analysis = analyze_series(imported.series, loaded.path)
    return replace(analysis, notes=imported.notes + analysis.notes)


@dataclass(frozen=True)
class RunResult:
    """A run's analysis and what a comparison reads beside it (``wsprof diff``).

    Attributes:
        analysis: the analysis of the run.
        primary_trace: the primary process's trace with its calls (None without a process).
        primary_windows: py-spy sample windows of the primary process: its own, else those a
            sampler trace recorded for its pid.
    """

    analysis: Analysis
    primary_trace: ProcessTrace | None
    primary_windows: tuple[SampleWindow, ...]


def analyze_loaded_run(
    run: LoadedRun,
    link_gbps: float | None = None,
    workers: int | None = 1,
    keep_primary: bool = True,
) -> RunResult:
    """Analyse a run read by :func:`wsprof.inputs.load`: digest each trace once
    (:mod:`wsprof.analysis.pool`, ``workers`` processes; None: auto), then merge
    (:func:`analyze_digests`). ``link_gbps``: as :func:`analyze`'s.

    Args:
        run: the run.
        link_gbps: the link's limit as the user states it, GB/s.
        workers: worker processes that digest the traces (1: this process).
        keep_primary: read the primary's trace again, whole (its calls, every span), for
            whoever compares it (``wsprof diff``); False: ``primary_trace`` is its digest's
            trace (no calls, the first span of each kind and name).

    Raises:
        wsprof.errors.InputError: no trace of the run could be read.
    """
    timeline = None
    notes: list[str] = []
    if run.timeline is not None:
        timeline, notes = _timeline_of(run.timeline, run.timeline_run)
    n = workers_for(run.trace_paths, workers)
    made = digest_files(run.trace_paths, run.reader(), n, timeline)
    digests = list(run.admit(zip(run.trace_paths, made), lambda d: d.trace.rank))
    if timeline is not None:
        notes += joined_notes(digests, timeline)
    return _result(
        analyze_digests(digests, run.path, [*run.problems, *notes], link_gbps, n),
        digests,
        run,
        keep_primary,
    )


def _result(
    analysis: Analysis, digests: Sequence[Digest], run: LoadedRun, keep_primary: bool
) -> RunResult:
    procs = sorted((d for d in digests if not d.sampler_only), key=Digest.key) or sorted(
        digests, key=Digest.key
    )
    if not procs:
        return RunResult(analysis, None, ())
    # The analysis's primary (its worlds put a trainer first).
    primary = analysis.primary
    d = next(
        (d for d in procs if primary is not None and d.trace.meta.get("pid") == primary.pid),
        procs[0],
    )
    trace = d.trace
    if keep_primary:  # whole again: its calls, and every span (a digest keeps the first)
        trace = run.reader()(trace.path)
    pid = trace.meta.get("pid")
    windows = trace.samples or [
        w for d in digests for w in d.trace.samples if isinstance(pid, int) and w.pid == pid
    ]
    return RunResult(analysis, trace, tuple(windows))


def _timeline_of(path: str, run_id: str | None) -> tuple[TimelineRun, list[str]]:
    """The timeline run to join (``run_id``, else the newest under ``path``) and the notes on
    it."""
    read = read_timeline(path)
    run, notes = pick_run(read, run_id)
    ours = all(os.sep + RUN_TIMELINE_DIR + os.sep in f for f in read.files)
    notes.insert(
        0,
        f"slime's communication timeline found: {len(read.files)} file(s) under {path}"
        + (
            " (`wsprof run` set SLIME_COMMUNICATION_TIMELINE there; --no-framework-timeline "
            "turns it off)"
            if ours
            else ""
        ),
    )
    if read.cut_lines:
        notes.append(f"timeline: {read.cut_lines} last line(s) cut by a killed writer: dropped")
    if read.bad_lines or read.out_of_range:
        notes.append(
            f"timeline: {read.bad_lines:,} line(s) not a record and {read.out_of_range:,} "
            "record(s) out of range: skipped"
        )
    return run, notes


def joined_notes(digests: Sequence[Digest], timeline: TimelineRun) -> list[str]:
    """How each trace was joined to the framework timeline, in order; or why none was."""
    notes = [d.join_note for d in digests if d.join_note is not None]
    if not notes:
        who = ", ".join(p.label for p in list(timeline.processes.values())[:4])
        notes.append(
            f"timeline not joined: none of its processes ({who}) is a recorded process (by "
            "pid and host); was it written by another run?"
        )
    return notes


def analyze_path(path: str, link_gbps: float | None = None) -> Analysis:
    """``analyze(load(path), link_gbps)``: a run folder, a trace file, a CSV series file or a
    training log (a convenience for scripts and tests).

    Raises:
        wsprof.errors.InputError: the path cannot be read as any of those.
    """
    return analyze(load(path), link_gbps)
