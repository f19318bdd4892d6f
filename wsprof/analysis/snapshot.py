"""What ``wsprof watch`` shows of a run being followed: each refresh's snapshot, its processes
and their collective totals so far. Pure data, made by :mod:`wsprof.analysis.live`; read by the
watch lines and the OpenMetrics page.
"""

from __future__ import annotations

from dataclasses import dataclass

from wsprof.analysis.model import Analysis, GrowthVerdict, StepRow
from wsprof.trace.salvage import TraceState


@dataclass(frozen=True)
class OpTotal:
    """One canonical op's collective calls in one process so far (exact ``call_totals`` sums).

    Attributes:
        op: canonical op (``broadcast``, ``all_gather``, ...).
        calls: calls made.
        seconds: their summed host time at the outermost hooked layer, s.
    """

    op: str
    calls: int
    seconds: float


@dataclass(frozen=True)
class LiveRank:
    """One process of a run being watched, as of the latest refresh (``wsprof watch``).

    Attributes:
        label: ``rank N`` (or ``pid N``).
        rank: the rank, None when unknown.
        host: host name from the trace, None when unknown.
        pid: process id, None when unknown.
        path: its trace file.
        state: how its trace stands: ``live`` (being written), ``closed`` (a clean exit),
            ``killed`` (its process is gone without closing it), ``removed`` (the file is
            gone) or ``unknown``.
        started_unix_ns: wall-clock ns of its clock anchor (about when its process started),
            None without one.
        steps: completed steps seen.
        last: the last completed step, None before the first.
        ops: collective calls and time by op, most time first.
        issued: collectives c10d counted as issued on its groups (the coverage audit's ground
            truth); None where the backend keeps no count or before the first reading.
        recorded: of those, the collectives wsprof recorded (same steps as ``issued``).
        hook_s: wsprof's hooks' own time so far (measured cost per call x calls), s; None when
            the cost per call was not measured.
        flush_s: wall time wsprof spent flushing to the trace, s.
        probe_s: time the counter probes spent, s.
        dropped_calls: calls a full capture buffer refused.
        lost_calls: calls lost to failed writes.
        dropped_records: records of any kind a full capture buffer refused.
        internal_errors: wsprof's own errors, caught (never raised into training).
        sync: growth verdict of its weight-sync time (None before it could be judged); may be
            from an earlier refresh (see :attr:`sync_judged_steps`).
        sync_judged_steps: steps the verdict in ``sync`` was judged on.
        problem: why its trace could not be read at the last refresh, None when it could.
    """

    label: str
    rank: int | None
    host: str | None
    pid: int | None
    path: str
    state: TraceState
    steps: int
    last: StepRow | None
    started_unix_ns: int | None = None
    ops: tuple[OpTotal, ...] = ()
    issued: int | None = None
    recorded: int | None = None
    hook_s: float | None = None
    flush_s: float = 0.0
    probe_s: float = 0.0
    dropped_calls: int = 0
    lost_calls: int = 0
    dropped_records: int = 0
    internal_errors: int = 0
    sync: GrowthVerdict | None = None
    sync_judged_steps: int = 0
    problem: str | None = None


@dataclass(frozen=True)
class WatchSnapshot:
    """One refresh of ``wsprof watch``: what its lines and its OpenMetrics page read.

    Attributes:
        source: the run folder.
        analysis: the run's analysis from the steps seen so far (verdict, series, findings,
            diagnoses), built from the per-step rows alone (:mod:`wsprof.analysis.live`).
        ranks: every process followed, in rank order.
        new_steps: ``(rank label, step)`` for each step completed since the previous refresh.
        refresh_s: wall time the refresh took, s.
        read_s: of it, reading the traces and making rows of the new steps, s (the rest is
            judging and the rules).
        rows_read: rows read from the traces in it (calls, spans, counters, events, ...).
        ended: every trace followed is closed (its process exited cleanly) or its process is
            gone: nothing more will come.
        refreshes: refreshes so far, this one included.
        sync_budget_s: the weight-sync time whose crossing step the verdicts project, s.
    """

    source: str
    analysis: Analysis
    ranks: tuple[LiveRank, ...]
    new_steps: tuple[tuple[str, StepRow], ...]
    refresh_s: float
    read_s: float
    rows_read: int
    ended: bool
    refreshes: int
    sync_budget_s: float = 3600.0
