"""The coverage audit: what c10d issued on each process group against what wsprof recorded.

c10d counts every collective its backend issues on a group (read by
:mod:`wsprof.capture.audit`), including those issued from C++ or through backend objects that
no Python hook sees. Per group and step, the difference between consecutive readings is what
the step issued; the hooks' side is the sum of the recorded calls' ``n_backend`` (collectives
each call issued). A shortfall is said first by every renderer: a run that saw 9 of 21
collectives must never look complete. Where the backend keeps no count, coverage is unknown,
never complete. Pure functions of the trace's records.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence

from wsprof.analysis.coverage_model import Coverage, GroupCoverage, UnseenIssuer
from wsprof.contracts.events import Patched
from wsprof.contracts.ops import FLIGHT_LAYER
from wsprof.trace.model import IssuedReading, ProcessTrace, RecordedIssued

#: Collectives an injected patch may miss at its boundary, per group: the main thread's one
#: call whose backend method was looked up before the hooks went in
#: (``wsprof attach --inject``).
INJECT_BOUNDARY_CALLS = 1
#: Ops NCCL does not count in its group sequence number (``seqCollective_`` counts
#: collectives; point-to-point ops have their own counter).
_P2P_OPS = frozenset({"send", "recv", "batch_p2p"})
#: The C++ helper only ``DistributedDataParallel.__init__`` calls in torch
#: (``torch.distributed.utils._verify_param_shape_across_processes``): recorded on a group, it
#: says a DDP model was built on that group.
DDP_EVIDENCE_API = "_verify_params_across_processes"


def ddp_reducer(group: str) -> UnseenIssuer:
    """DDP's reducer as the likely issuer of the unseen collectives on ``group``: it
    all-reduces the gradient buckets from C++ (autograd hooks) during backward, where no
    Python hook sees them. Gradients averaged across data-parallel ranks cannot carry a
    weight push, so the shortfall is a limit of the audit, not a gap in what is judged."""
    return UnseenIssuer(
        op="all_reduce",
        when="during backward",
        who="DDP's C++ reducer (gradient buckets)",
        evidence=(
            f"DistributedDataParallel in use on group {group}: its construction's "
            f"{DDP_EVIDENCE_API} was recorded there"
        ),
        limit=True,
    )


def _ddp_groups(recorded: Sequence[RecordedIssued], only: str | None) -> set[str]:
    """Groups a DDP model was built on (``only``: the process's one group, for a call whose
    group is unknown)."""
    out: set[str] = set()
    for c in recorded:
        if c.api.rsplit(".", 1)[-1] == DDP_EVIDENCE_API:
            g = c.group if c.group is not None else only
            if g is not None:
                out.add(g)
    return out


def audit_process(trace: ProcessTrace, label: str) -> list[GroupCoverage] | None:
    """The audit of one process's trace; None when the trace has no audit.

    Per group, readings are taken in time order: each adds what the group issued since the
    previous one, to the step it was read in. The first previous value is the reading at
    ``patch()`` (0 for a group created later: its count starts at 0); after a ``destroy``
    reading, or when the count goes down, a group of the same name is a new lifetime counted
    from 0 (c10d reuses names). Calls whose group is unknown count for the group when the
    process has one; calls in steps after the last reading are left out (nothing to
    compare). With ``layers='api'`` no call knows its group: the process's groups are
    audited together, each recorded call counting once.
    """
    if trace.issued is None or trace.recorded_issued is None:
        return None
    layers = _layers(trace)
    by_group: dict[str, list[IssuedReading]] = defaultdict(list)
    for r in trace.issued:
        by_group[r.group].append(r)
    if not by_group:
        return []
    # An injected patch lands between two bytecodes of a running job: a collective whose
    # method was looked up just before the hooks went in is issued after the patch reading
    # without passing them. That one collective at the boundary is not a coverage gap.
    edge = INJECT_BOUNDARY_CALLS if trace.meta.get("source") == "inject" else 0
    if layers == "api":
        return [
            _audit(
                sorted(by_group), trace.issued, trace.recorded_issued, True, label, trace.rank, edge
            )
        ]
    only = next(iter(by_group)) if len(by_group) == 1 else None
    ddp = _ddp_groups(trace.recorded_issued, only)
    lost = _flight_lost(trace)
    return [
        _audit(
            [group],
            readings,
            [
                c
                for c in trace.recorded_issued
                if c.group == group or (c.group is None and only == group)
            ],
            False,
            label,
            trace.rank,
            edge,
            ddp_reducer(group) if group in ddp else None,
            lost,
        )
        for group, readings in by_group.items()
    ]


def _flight_lost(trace: ProcessTrace) -> int:
    """Flight Recorder entries the process's reader found overwritten (``meta['flight']``,
    :mod:`wsprof.capture.flight`); 0 when none or not read."""
    flight = trace.meta.get("flight")
    lost = flight.get("lost") if isinstance(flight, dict) else None
    return lost if isinstance(lost, int) and not isinstance(lost, bool) and lost > 0 else 0


def _layers(trace: ProcessTrace) -> str:
    """The ``layers`` the process was patched with (from its ``patched`` event)."""
    for e in trace.events:
        if isinstance(e, Patched):
            return e.layers
    return "both"


def _issued_by_step(readings: Sequence[IssuedReading]) -> dict[int, int] | None:
    """What each step issued, summed over the groups of ``readings``; None when a group's
    backend keeps no count."""
    out: dict[int, int] = defaultdict(int)
    last: dict[str, int] = {}
    ended: set[str] = set()
    for r in sorted(readings, key=lambda r: r.t_ns):
        if r.seq < 0:
            return None
        if r.group not in last:
            prev = r.seq if r.at == "patch" else 0
        elif r.group in ended or r.seq < last[r.group]:
            prev = 0  # a new group under a destroyed one's name: its count started at 0
        else:
            prev = last[r.group]
        if r.at == "destroy":
            ended.add(r.group)
        elif r.group in ended:
            ended.discard(r.group)
        out[r.step] += r.seq - prev
        last[r.group] = r.seq
    return dict(out)


def _audit(
    groups: list[str],
    readings: Sequence[IssuedReading],
    recorded: Sequence[RecordedIssued],
    api_only: bool,
    label: str,
    rank: int | None,
    edge: int = 0,
    likely: UnseenIssuer | None = None,
    flight_lost: int = 0,
) -> GroupCoverage:
    backend = next((r.backend for r in readings if r.backend), None)
    steps = [r.step for r in readings]
    first, last = min(steps), max(steps)
    name = ", ".join(groups)
    issued_by_step = _issued_by_step(readings)
    if issued_by_step is None:
        return GroupCoverage(label, rank, name, backend, None, 0, first, last)
    read_steps = sorted(issued_by_step)
    nccl = (backend or "").lower() == "nccl"
    rec_by_step: dict[int, int] = defaultdict(int)
    by_op: dict[str, int] = defaultdict(int)
    flight = 0
    for c in recorded:
        if nccl and c.op in _P2P_OPS:
            continue
        # With layers='api' no backend call is seen: each recorded call counts once, unless
        # its hook read c10d's count (the C++ helpers).
        n = c.calls if api_only and c.layer == "api" and not c.issued else c.issued
        rec_by_step[_bucket(c.step, read_steps)] += n
        if c.step <= last:  # compared: not in a step after the last reading
            by_op[c.op] += n
            if c.layer == FLIGHT_LAYER:
                flight += n
    bucketed = {s: rec_by_step.get(s, 0) for s in issued_by_step}
    if edge and read_steps:  # the injection's boundary, in the first step read
        s0 = read_steps[0]
        if 0 < issued_by_step[s0] - bucketed[s0] <= edge:
            bucketed[s0] = issued_by_step[s0]
    short = tuple(s for s in read_steps if issued_by_step[s] > bucketed[s] and s >= 0)
    return GroupCoverage(
        label,
        rank,
        name,
        backend,
        sum(issued_by_step.values()),
        sum(bucketed.values()),
        first,
        last,
        short,
        exact=not api_only,
        recorded_ops=tuple(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
        likely=likely,
        flight=flight,
        flight_lost=flight_lost,
    )


def _bucket(step: int, read_steps: list[int]) -> int:
    """The audited step a call's step belongs to: itself when read, else the next read step
    (a step without a reading is counted with the next one read); past the last, itself
    (a step that is not compared). ``read_steps`` is sorted."""
    i = bisect.bisect_left(read_steps, step)
    return read_steps[i] if i < len(read_steps) else step


def audit_run(
    traces: Sequence[tuple[str, ProcessTrace]], n_calls: Sequence[int] | None = None
) -> Coverage:
    """The audit of every process of a run: ``(label, trace)`` pairs; ``n_calls``: the calls
    each recorded, when the traces' calls were released (digests), else counted."""
    counts = n_calls if n_calls is not None else [len(t.calls) for _, t in traces]
    return coverage_of(
        [
            (label, audit_process(t, label), n > 0 or t.totals is not None)
            for (label, t), n in zip(traces, counts)
        ]
    )


def coverage_of(audits: Sequence[tuple[str, list[GroupCoverage] | None, bool]]) -> Coverage:
    """The run's coverage from each process's audit: ``(label, its audit (None: its trace has
    none), whether it recorded calls)``; a process that recorded calls without an audit is
    named as not audited."""
    groups: list[GroupCoverage] = []
    not_audited: list[str] = []
    for label, res, recorded in audits:
        if res is None:
            if recorded:
                not_audited.append(label)
            continue
        groups.extend(res)
    return Coverage(tuple(groups), tuple(not_audited))
