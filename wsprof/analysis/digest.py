"""Per-process digests: what the run-level analysis needs from one trace, made where the trace is.

A :class:`Digest` is one trace after its own analysis (:func:`~wsprof.analysis.process.
analyze_process`) with everything that needs the trace's calls already read from them (the
per-step medians of each op, the wrapper audit, the backend calls no name was open for, the
last step, the framework timeline's buckets) and the calls themselves released. The run-level
analysis (:func:`wsprof.analysis.run.analyze_digests`: worlds and roles, ranks and outliers,
the headline, diagnoses) reads digests alone, so analysing a run is: digest every trace (one
process, a pool of them, or Ray tasks on the nodes that hold the traces:
:mod:`wsprof.analysis.pool`, :mod:`wsprof.analysis.on_ray`), then merge.

A digest is a plain picklable value (dataclasses of numbers, strings and tuples): it crosses
process and node boundaries as it is. Its size grows with the trace's steps, events, counters
and samples, never with its calls: the per-call points plotted for the primary are kept only
for a world's rank 0 (and a process without a rank), the processes that can be primary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from wsprof.analysis.model import (
    ProcessAnalysis,
    StepSource,
    WrapperFact,
    by_step_number,
)
from wsprof.analysis.per_step import MIN_STEPS_FOR_OP_SERIES, op_medians
from wsprof.analysis.process import analyze_process, first_record_ns, primary_key
from wsprof.analysis.steps import assign_calls
from wsprof.analysis.timeline_join import bucket_series, process_of, with_timeline_steps
from wsprof.contracts.events import WrapperFound
from wsprof.contracts.series import Series
from wsprof.importers.slime_timeline import TimelineRun
from wsprof.trace.model import CallTable, ProcessTrace, Span


@dataclass
class Digest:
    """One trace after its own analysis, its calls released.

    Attributes:
        trace: the trace without its calls (meta, spans, events, counters, samples, sites).
        pa: its process analysis (before samples of a separate sampler trace are joined).
        n_calls: collective calls it recorded.
        first_ns: its first record (monotonic ns of its host).
        sampler_only: a py-spy sampler's trace (samples of other pids, no calls of its own).
        index: its place in the run's file order (the tie-break that keeps merges stable).
        wrappers: its wrapper audit (:func:`wrapper_facts`).
        op_meds: per op, its median latency per step (s), over ``pa.steps``: the headline's
            per-op series when this process is the primary.
        buckets: the framework timeline's part and bucket series (a process joined to slime's
            timeline), else empty.
        unattributed: the note on backend calls made with no collective name open, or None.
        last_step: the step it was in at its end (None without any step).
        join_note: how it was joined to the framework timeline (None: not joined).
    """

    trace: ProcessTrace
    pa: ProcessAnalysis
    n_calls: int
    first_ns: int
    sampler_only: bool
    index: int
    wrappers: list[WrapperFact]
    op_meds: dict[str, list[float | None]] = field(default_factory=dict)
    buckets: tuple[Series, ...] = ()
    unattributed: str | None = None
    last_step: int | None = None
    join_note: str | None = None

    def key(self) -> tuple[int, int, int, int, int]:
        """Primary first: a process with steps, then by rank (unknown last), most calls, pid,
        then input order (a rank 0 whose steps cannot be found does not hide the others')."""
        pid = self.trace.meta.get("pid")
        pid = pid if isinstance(pid, int) else None
        own = primary_key(bool(self.pa.steps), self.trace.rank, self.n_calls, pid)
        return (*own, self.index)


def digest_trace(trace: ProcessTrace, index: int, timeline: TimelineRun | None = None) -> Digest:
    """The digest of one trace (``index``: its place in the run's file order). With a framework
    timeline, a trace whose process it holds takes the framework's steps first
    (:func:`~wsprof.analysis.timeline_join.with_timeline_steps`)."""
    join_note = None
    proc = process_of(trace.meta, timeline) if timeline is not None else None
    if proc is not None:
        trace, how = with_timeline_steps(trace, proc)
        join_note = how.note
    # Call points plot the primary's calls only (a world's rank 0, or a process without a
    # rank); made for every rank, their Python tuples grew the driver's memory with the
    # number of ranks (6,000 points a process: about 1.3 GiB at 1,024 ranks).
    pa = analyze_process(trace, points=trace.rank in (0, None))
    calls = trace.calls
    rows = list(pa.steps)
    meds = (
        op_medians(calls, assign_calls(calls, rows, by_step_number(pa.step_source)), len(rows))
        if len(calls) and len(rows) >= MIN_STEPS_FOR_OP_SERIES
        else {}
    )
    buckets = (
        tuple(bucket_series(trace, proc))
        if proc is not None and pa.step_source == StepSource.TIMELINE
        else ()
    )
    return Digest(
        trace=replace(trace, calls=CallTable.empty(), spans=first_spans(trace.spans)),
        pa=pa,
        n_calls=len(calls),
        first_ns=first_record_ns(trace),
        sampler_only=is_sampler_only(trace),
        index=index,
        wrappers=wrapper_facts(trace),
        op_meds=meds,
        buckets=buckets,
        unattributed=unattributed_backend(trace),
        last_step=last_step(trace),
        join_note=join_note,
    )


def first_spans(spans: Sequence[Span]) -> list[Span]:
    """The first span of each (kind, name): what the run-level analysis asks of a process's
    spans once its steps are made (which phases it marked, whether it marked any). Every span
    kept, a digest grew by 4 spans a step (26 KB at 100 steps, most of its size)."""
    seen: dict[tuple[str, str], Span] = {}
    for sp in spans:
        seen.setdefault((sp.kind, sp.name), sp)
    return list(seen.values())


def is_sampler_only(t: ProcessTrace) -> bool:
    """A py-spy sampler's trace: it names the pids it sampled and recorded nothing of its own."""
    return bool(t.meta.get("targets")) and len(t.calls) == 0 and not t.spans


def last_step(t: ProcessTrace) -> int | None:
    """The step the process was in at the end of its trace (None without any step)."""
    steps = [int(t.calls.step.max())] if len(t.calls) else []
    steps += [s.step for s in t.spans]
    return max(steps) if steps and max(steps) >= 0 else None


def wrapper_facts(trace: ProcessTrace) -> list[WrapperFact]:
    """The wrapper audit of one process: every ``wrapper`` event, with the time between layers
    of the calls made through the name it sits on; most of that time first."""
    calls = trace.calls
    between: dict[str, float] = {}
    found = [e for e in trace.events if isinstance(e, WrapperFound)]
    if len(calls) and found:
        bl = calls.between_layers_ns
        for api in set(calls.api.tolist()):
            between[str(api)] = float(bl[calls.api == api].sum()) / 1e9
    return facts_of_wrappers(found, between)


def facts_of_wrappers(
    found: Sequence[WrapperFound], between_s: Mapping[str, float]
) -> list[WrapperFact]:
    """One fact per distinct wrapper of ``found`` (``wrapper`` events), with the time between
    layers of the calls through the name it sits on (``between_s``: API name -> s); most of
    that time first."""
    out: list[WrapperFact] = []
    seen: set[tuple[str, str, str | None, int | None]] = set()
    for e in found:
        fact = WrapperFact(
            api=e.api,
            kind=e.wrapper_kind,
            qualname=e.qualname,
            module=e.module,
            file=e.file,
            line=e.line,
            wraps=e.wraps,
            after_patch=e.after_patch,
            between_s=between_s.get(e.api),
        )
        key = (fact.api, fact.qualname, fact.file, fact.line)
        if key not in seen:
            seen.add(key)
            out.append(fact)
    out.sort(key=lambda w: -(w.between_s or 0.0))
    return out


def unattributed_backend(trace: ProcessTrace) -> str | None:
    """A note when backend-layer calls arrived with no API call open."""
    calls = trace.calls
    if not len(calls):
        return None
    m = calls.layer == "backend"
    n = int(m.sum())
    if not n:
        return None
    names = sorted({str(a) for a in calls.api[m].tolist()})
    return (
        f"{n} of {len(calls)} calls reached the ProcessGroup backend with no collective name "
        f"open ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}): they were made "
        "through a reference taken before wsprof.patch(), a name re-wrapped after it, or the "
        "backend directly; they are timed, but their time between layers is unknown"
    )
