"""wsprof's recorded collectives inside slime's own timeline (issue 36): the framework's steps
and weight syncs become the process's steps and weight-sync phases, and each recorded call
falls into the bucket whose send span holds it.

**The clock.** slime stamps its spans with ``time.perf_counter_ns`` and wsprof its calls with
``time.monotonic_ns``: on Linux both read CLOCK_MONOTONIC, one clock per host since boot, so a
process's spans and calls are on one clock with no offset to find. A process is joined by its
pid and host. The assumption is checked, never trusted: when none of the bucket sends (a
process that sends none: its syncs) falls within a process's recorded calls, or under half of
those that do hold a call, the clocks disagree (another OS, a container's clock namespace, a
shifted file) and the join is refused with a note, never guessed.

Pure: reads a :class:`~wsprof.trace.model.ProcessTrace` and a
:class:`~wsprof.importers.slime_timeline.TimelineProcess`, returns new ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from wsprof.analysis.model import StepSource
from wsprof.contracts.phases import TRAIN, WEIGHT_SYNC
from wsprof.contracts.series import (
    BUCKET_BETWEEN_PREFIX,
    BUCKET_CALLS_PREFIX,
    OUTSIDE_TRAINER_S,
    SYNC_FAILED,
    Series,
    is_sync_part,
)
from wsprof.contracts.units import Unit
from wsprof.importers.slime_timeline import (
    MAX_BUCKET_SERIES,
    TimelineProcess,
    TimelineRun,
    timeline_series,
)
from wsprof.trace.model import ProcessTrace, Span

#: Share of the bucket sends (syncs, for a process that sends none) within a process's recorded
#: time that must hold a call for the join to stand; when none falls within it, the join is
#: refused too (below it the clocks are not one; see the module docstring).
MIN_SENDS_JOINED = 0.5


@dataclass(frozen=True)
class Joined:
    """What the join did to one process.

    Attributes:
        label: the timeline process (``trainer rank 0 (pid 4242)``).
        syncs: framework syncs made the process's steps.
        sends: bucket sends in the process's recorded time, and how many hold a call.
        note: one line for the analysis's notes.
    """

    label: str
    syncs: int
    sends: int
    sends_with_calls: int
    note: str


def process_of(meta: dict[str, object], run: TimelineRun) -> TimelineProcess | None:
    """The timeline process that is this trace's process: same pid, and same host where both
    say (a pid is unique on one host only)."""
    pid = meta.get("pid")
    host = meta.get("hostname") or meta.get("host")
    for p in run.processes.values():
        if p.pid is None or p.pid != pid:
            continue
        if p.hostname and isinstance(host, str) and host and p.hostname != host:
            continue
        return p
    return None


def _windows_held(trace: ProcessTrace, proc: TimelineProcess) -> tuple[int, int, int]:
    """The timeline's windows that should hold this process's calls (its bucket sends; for a
    process that sends none, its syncs), how many fall within the trace's recorded time, and
    how many of those hold a call's start."""
    windows = [
        (b.send_t0_ns, b.send_t1_ns)
        for s in proc.syncs()
        for b in s.buckets
        if b.send_t0_ns is not None and b.send_t1_ns is not None
    ] or [(s.t0_ns, s.t1_ns) for s in proc.syncs() if not s.failed]
    starts = np.sort(trace.calls.t_start_ns)
    if not len(starts):
        return len(windows), 0, 0
    lo, hi = int(starts[0]), int(starts[-1])
    inside = held = 0
    for t0, t1 in windows:
        if t1 < lo or t0 > hi:
            continue
        inside += 1
        i = int(np.searchsorted(starts, t0, side="left"))
        if i < len(starts) and starts[i] <= t1:
            held += 1
    return len(windows), inside, held


def with_timeline_steps(trace: ProcessTrace, proc: TimelineProcess) -> tuple[ProcessTrace, Joined]:
    """The trace with the framework's steps: a ``step`` span per sync (from the previous
    sync's end, or its step's first training span, to its own end) numbered by the
    framework's ``global_step``, a ``weight_sync`` phase per sync and a ``train`` phase per
    step's training spans; each call stamped with the step whose span holds its start.

    Returns the trace unchanged (and the reason in the note) when it has step markers of its
    own, or when its calls and the timeline are not on one clock.
    """
    syncs = proc.syncs()
    if any(sp.kind == "step" for sp in trace.spans):
        return trace, Joined(
            proc.label,
            0,
            0,
            0,
            f"{trace.label}: has wsprof.step() markers; kept over the timeline's",
        )
    if len(syncs) >= 2 and not syncs[0].train and any(s.train for s in syncs[1:]):
        prev: int | None = syncs[0].t1_ns  # the push before training starts no step
        prev_version: int | None = syncs[0].weight_version
        syncs = syncs[1:]
    else:
        prev = prev_version = None
    windows, sends, held = _windows_held(trace, proc)
    clocks = (
        "the clocks differ: the timeline's perf_counter_ns and wsprof's monotonic_ns are one "
        "clock only on one Linux host"
    )
    if windows and len(trace.calls) and not sends:
        return trace, Joined(
            proc.label,
            0,
            0,
            0,
            f"{trace.label}: not joined with the timeline of {proc.label}: none of its "
            f"{windows} sync or bucket windows falls within the calls' recorded time ({clocks})",
        )
    if sends and held < MIN_SENDS_JOINED * sends:
        return trace, Joined(
            proc.label,
            0,
            sends,
            held,
            f"{trace.label}: not joined with the timeline of {proc.label}: {held} of its "
            f"{sends} sync or bucket windows hold a recorded call ({clocks})",
        )
    spans = [sp for sp in trace.spans if sp.kind != "phase"]
    bounds: list[tuple[int, int, int]] = []
    for s in syncs:
        if prev_version is not None and s.weight_version != prev_version + 1:
            prev = None  # a version with no end between: this step starts at its training
        prev_version = s.weight_version
        if s.failed:  # the engines kept the old weights: no step of its own
            prev = None
            continue
        t0 = prev if prev is not None else (s.train_t0_ns if s.train_t0_ns is not None else s.t0_ns)
        bounds.append((s.step, t0, s.t1_ns))
        spans.append(Span("step", str(s.step), t0, s.t1_ns, s.step, 0))
        spans.append(Span("phase", WEIGHT_SYNC, s.t0_ns, s.t1_ns, s.step, 0))
        if s.train_t0_ns is not None and s.train_t0_ns < s.t0_ns:
            spans.append(Span("phase", TRAIN, s.train_t0_ns, s.t0_ns, s.step, 0))
        prev = s.t1_ns
    calls = trace.calls
    step = np.full(len(calls), -1, dtype=np.int64)
    if bounds and len(calls):
        lo = np.array([b[1] for b in bounds], dtype=np.int64)
        hi = np.array([b[2] for b in bounds], dtype=np.int64)
        num = np.array([b[0] for b in bounds], dtype=np.int64)
        pos = np.clip(np.searchsorted(lo, calls.t_start_ns, side="right") - 1, 0, len(bounds) - 1)
        inside = (calls.t_start_ns >= lo[pos]) & (calls.t_start_ns <= hi[pos])
        step = np.where(inside, num[pos], -1)
    joined = replace(
        trace,
        spans=sorted(spans, key=lambda sp: sp.t_start_ns),
        calls=replace(calls, step=step.astype(np.int64)),
        meta={**trace.meta, "steps_from": StepSource.TIMELINE.value},
    )
    note = (
        f"{trace.label}: steps and weight syncs from slime's timeline of {proc.label} "
        f"({len(bounds)} syncs; {held} of {sends} sync or bucket windows hold recorded calls; "
        "one CLOCK_MONOTONIC, joined by pid and host)"
    )
    return joined, Joined(proc.label, len(syncs), sends, held, note)


def bucket_series(trace: ProcessTrace, proc: TimelineProcess) -> list[Series]:
    """The timeline's series the recorded run lacks (the sync's parts, each bucket's send,
    failed syncs, time outside the trainer), and what the recorded calls inside each bucket's
    send do per step: ``bucket_calls:<id>`` (calls) and ``bucket_between_s:<id>`` (their time
    between the API name and the backend, s: a wrapper's)."""
    series, _ = timeline_series(proc)
    out = [
        s
        for s in series
        if is_sync_part(s.name) or s.name.startswith(SYNC_FAILED) or s.name == OUTSIDE_TRAINER_S
    ]
    calls = trace.calls
    if not len(calls):
        return out
    order = np.argsort(calls.t_start_ns, kind="stable")
    starts = calls.t_start_ns[order]
    between = calls.between_layers_ns[order]
    counts: dict[int, dict[int, float]] = {}
    waits: dict[int, dict[int, float]] = {}
    ids = sorted({b.bucket_id for s in proc.syncs() for b in s.buckets})[:MAX_BUCKET_SERIES]
    for s in proc.syncs():
        if s.failed:
            continue
        for b in s.buckets:
            if b.bucket_id not in ids or b.send_t0_ns is None or b.send_t1_ns is None:
                continue
            i = int(np.searchsorted(starts, b.send_t0_ns, side="left"))
            j = int(np.searchsorted(starts, b.send_t1_ns, side="right"))
            counts.setdefault(b.bucket_id, {})[s.step] = float(j - i)
            waits.setdefault(b.bucket_id, {})[s.step] = float(between[i:j].sum()) / 1e9
    for prefix, table, u in (
        (BUCKET_CALLS_PREFIX, counts, Unit.COUNT),
        (BUCKET_BETWEEN_PREFIX, waits, Unit.SECONDS),
    ):
        for bid, by_step in sorted(table.items()):
            steps = tuple(sorted(by_step))
            out.append(Series(f"{prefix}{bid}", u, steps, tuple(by_step[k] for k in steps)))
    return out
