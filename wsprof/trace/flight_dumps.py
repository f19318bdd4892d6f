"""A folder of Flight Recorder dumps, one per rank, read as a run.

Production jobs set ``TORCH_FR_DUMP_TEMP_FILE=<prefix>`` so that a hang or timeout makes each
rank write ``<prefix><rank>`` (a pickle; torch can also give JSON). ``wsprof analyze DIR``
(and report, export, diff) reads such a folder as it reads a run folder: each dump becomes one
process's trace (:func:`read_dump_trace`), its entries calls of layer ``c10d``, so that steps
are found from the job's rhythm and growth is judged where the ring held enough history; each
trace also carries a summary of where its rank stood on every group (``meta['flight_dump']``,
:func:`stand_of`), from which :mod:`wsprof.analysis.hang` tells, for a dump taken at a hang,
which collective each rank was in and which rank never arrived.

The dump's own clock is the wall clock: the traces' ``meta['anchor']`` pairs 0 with 0, so
their times align across ranks as they are. Files are read by :func:`wsprof.trace.flight.
read_dump` (a restricted unpickler: a file that names any class or function is refused and
nothing in it runs).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from wsprof.contracts.ops import FLIGHT_LAYER
from wsprof.trace.flight import (
    FlightDump,
    FlightEntry,
    looks_like_dump,
    rank_from_name,
    read_dump,
)
from wsprof.trace.model import (
    TRACE_SUFFIX,
    CallTable,
    IssuedReading,
    ProcessTrace,
    RecordedIssued,
)

#: ``meta['source']`` of a trace made from a dump.
SOURCE = "flight_recorder"
#: Most files of a folder looked at when telling a folder of dumps.
MAX_FILES = 100_000


def find_dumps(path: str) -> list[str] | None:
    """The dump files at ``path`` (the file itself, or every file of a folder that starts
    like a dump), in name order; None when ``path`` holds a wsprof trace or no dump (then it
    is not a folder of dumps)."""
    if os.path.islink(path) or os.path.isfile(path):
        # a link is listed when it leads to a dump, so that reading it refuses it in one line
        return [path] if looks_like_dump(os.path.realpath(path)) else None
    if not os.path.isdir(path):
        return None
    try:
        names = sorted(os.listdir(path))[:MAX_FILES]
    except OSError:
        return None
    if any(n.endswith(TRACE_SUFFIX) for n in names):
        return None
    found = [
        os.path.join(path, n)
        for n in names
        if not n.startswith(".") and looks_like_dump(os.path.join(path, n))
    ]
    if not found:
        return None
    # Files named as torch names dumps that are links or not regular files are listed too:
    # reading them refuses each in one line (a rank left out is then said, never silent).
    named = [
        os.path.join(path, n)
        for n in names
        if rank_from_name(n) is not None
        and os.path.join(path, n) not in found
        and not os.path.isdir(os.path.join(path, n))
        and (os.path.islink(os.path.join(path, n)) or not os.path.isfile(os.path.join(path, n)))
    ]
    return sorted(found + named)


def _is_done(e: FlightEntry) -> bool:
    return e.retired or e.state == "completed"


def _brief(e: FlightEntry) -> dict[str, Any]:
    return {
        "seq": e.collective_seq,
        "op": e.op,
        "name": e.profiling_name,
        "bytes": e.bytes,
        "created_wall_ns": e.created_wall_ns,
        "done": _is_done(e),
        "state": e.state,
    }


def stand_of(dump: FlightDump) -> dict[str, Any]:
    """Where the dump's rank stood on each group it has entries for (``meta['flight_dump']``):
    the group's ranks, its newest collective (``last``), the oldest one not completed
    (``open``: what it waits in), its newest completed (``done``), and when the dump was
    written. Point-to-point entries are left out (their numbers are per pair)."""
    groups: dict[str, dict[str, Any]] = {}
    for e in dump.entries:
        if e.is_p2p or e.collective_seq <= 0:
            continue
        g = groups.setdefault(
            e.group,
            {
                "ranks": list(dump.ranks.get(e.group, ())),
                "desc": e.group_desc,
                "last": None,
                "open": None,
                "done": None,
                "entries": 0,
            },
        )
        g["entries"] += 1
        if g["last"] is None or e.collective_seq > g["last"]["seq"]:
            g["last"] = _brief(e)
        if _is_done(e):
            if g["done"] is None or e.collective_seq > g["done"]["seq"]:
                g["done"] = _brief(e)
        elif g["open"] is None or e.collective_seq < g["open"]["seq"]:
            g["open"] = _brief(e)
    return {
        "rank": dump.rank,
        "version": dump.version,
        "written_wall_ns": dump.written_wall_ns,
        "entries": len(dump.entries),
        "skipped": dump.skipped,
        "first_record_id": dump.entries[0].record_id if dump.entries else None,
        "groups": groups,
    }


def dump_trace(dump: FlightDump) -> ProcessTrace:
    """One rank's dump as a process trace: its entries as calls (layer ``c10d``; start at
    creation, end at completion where NCCL saw it, else start + its timed duration, else the
    start: duration unknown), steps to be found from the job's rhythm."""
    entries = sorted(dump.entries, key=lambda e: (e.created_wall_ns, e.record_id))
    rows = []
    for e in entries:
        t0 = e.created_wall_ns
        t1 = t0
        if e.completed_wall_ns is not None and e.completed_wall_ns >= t0:
            t1 = e.completed_wall_ns
        elif e.duration_ms is not None:
            t1 = t0 + int(e.duration_ms * 1e6)
        rows.append(
            (
                t0,
                t1,
                t1 - t0,
                1,
                e.thread,
                e.op,
                e.profiling_name,
                FLIGHT_LAYER,
                e.bytes,
                e.dtype,
                e.group,
                0,
                -1,
                -1,
                None,
                None,
            )
        )
    calls = CallTable.from_rows(rows)
    calls.seq = np.array(
        [-1 if e.is_p2p or e.collective_seq <= 0 else e.collective_seq for e in entries],
        dtype=np.int64,
    )
    if any(e.duration_ms is not None for e in entries):  # NCCL's timing: device time
        calls.device_ns = np.array(
            [-1 if e.duration_ms is None else int(e.duration_ms * 1e6) for e in entries],
            dtype=np.int64,
        )
    backend = next((e.backend for e in entries if e.backend), None)
    issued, recorded = _audit(dump, entries, backend)
    world = dump.ranks.get("0") or ()
    meta: dict[str, Any] = {
        "source": SOURCE,
        "anchor": {"monotonic_ns": 0, "unix_ns": 0},
        "flight_dump": stand_of(dump),
        "flight_version": dump.version,
    }
    if dump.rank is not None:
        meta["rank"] = dump.rank
    if world:
        meta["world_size"] = len(world)
    if backend:
        meta["backend"] = backend
    return ProcessTrace(
        dump.path, meta, calls, {}, [], {}, [], issued=issued, recorded_issued=recorded
    )


def _audit(
    dump: FlightDump, entries: list[FlightEntry], backend: str | None
) -> tuple[list[IssuedReading], list[RecordedIssued]]:
    """The coverage audit's two sides for a dump: per group, c10d's count before the first
    collective the ring kept and its last enqueued (``pg_status``, else the newest kept), and
    the collectives kept, per op. A collective missing inside that span (never expected: the
    ring drops the oldest) would show as not recorded."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    by_op: dict[tuple[str, str], int] = {}
    pg_of: dict[str, int] = {}
    for e in entries:
        if e.is_p2p or e.collective_seq <= 0:
            continue
        first[e.group] = min(first.get(e.group, e.collective_seq), e.collective_seq)
        last[e.group] = max(last.get(e.group, e.collective_seq), e.collective_seq)
        by_op[(e.group, e.op)] = by_op.get((e.group, e.op), 0) + 1
        pg_of[e.group] = e.pg_id
    issued = []
    for g, lo in first.items():
        status = dump.status.get(pg_of[g])
        hi = max(last[g], status.last_enqueued if status is not None else -1)
        issued += [
            IssuedReading(0, -1, g, backend, lo - 1, "patch"),
            IssuedReading(1, -1, g, backend, hi, "close"),
        ]
    recorded = [RecordedIssued(-1, g, op, FLIGHT_LAYER, n, n) for (g, op), n in by_op.items()]
    return issued, recorded


def read_dump_trace(path: str) -> ProcessTrace:
    """:func:`dump_trace` of the dump file at ``path``.

    A dump with no entries is read (a rank that issued nothing: the evidence that it never
    arrived).

    Raises:
        InputError: the file cannot be read as a plain Flight Recorder dump (one line).
    """
    return dump_trace(read_dump(path))
