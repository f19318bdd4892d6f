"""What each weight sync put on the wire: bytes, time in transfers, bandwidth (issue 31).

Per step, from the calls that started inside the step's weight sync (every thread): the bytes
each op moved, sized as NCCL's tests size a collective, the time on the wire (each call from
its start to its completion, overlapping async calls once), and from those the two bandwidths
of NCCL's tests:

* ``algbw = S / t``: the buffer size ``S`` over the time;
* ``busbw = algbw x factor``: comparable to a link's peak whatever the op, with the factors
  of NCCL's tests (``doc/PERFORMANCE.md`` of github.com/NVIDIA/nccl-tests, and the ``getBw``
  of each ``src/*.cu``): all-reduce ``2(n-1)/n``; all-gather, reduce-scatter and all-to-all
  ``(n-1)/n`` with ``S`` the whole gathered (scattered) buffer, ``n`` times one rank's share;
  broadcast, reduce, send and receive ``1``. ``n`` is the group's size. Gather and scatter to
  one rank have no factor here (None).

A barrier moves nothing and is not a transfer; a call of unknown size (an object collective,
a sparse tensor) is counted (``n_unknown``) but neither its bytes nor its time are: the
sync's time in no transfer of known size is :attr:`~wsprof.analysis.model.StepRow.
outside_transfers_s`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import OpWire, StepRow, SyncWire
from wsprof.analysis.steps import covered_ns, sync_spans
from wsprof.contracts.ops import GATHER_OPS, REDUCE_SCATTER_OPS, payload_is_one_rank
from wsprof.trace.model import CallTable, Span

#: Ops that move no data between ranks: never transfers.
NOT_TRANSFERS = frozenset({"barrier", "completion", "coalesced"})
#: Ops whose bus factor is 1 whatever the group size (NCCL tests: broadcast, reduce; a
#: point-to-point send or receive moves its buffer once).
UNIT_FACTOR_OPS = frozenset({"broadcast", "reduce", "send", "recv", "batch_p2p"})
#: All-to-all ops: ``(n-1)/n`` of the whole buffer crosses the links (NCCL tests' alltoall).
ALL_TO_ALL_OPS = frozenset({"all_to_all", "all_to_all_single"})


def bus_factor(op: str, n: int | None) -> float | None:
    """NCCL tests' bus-bandwidth factor of ``op`` on a group of ``n`` ranks (see the module
    docstring for the source): ``busbw = algbw x factor``.

    Returns:
        ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and
        all-to-all, 1 for broadcast, reduce and point-to-point; None for other ops, or when
        ``n`` is unknown (or < 1) and the factor depends on it.
    """
    if op in UNIT_FACTOR_OPS:
        return 1.0
    if n is None or n < 1:
        return None
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in GATHER_OPS or op in REDUCE_SCATTER_OPS or op in ALL_TO_ALL_OPS:
        return (n - 1) / n
    return None


def whole_bytes(op: str, api: str, layer: str, recorded: int, n: int | None) -> int | None:
    """The size ``S`` NCCL's tests give a collective, bytes, from a recorded call's payload
    (:func:`wsprof.contracts.ops.payload_is_one_rank`: one rank's share is times ``n``).

    Returns:
        ``S``; None when the payload is unknown (``recorded`` < 0) or is one rank's share of a
        group whose size is unknown.
    """
    if recorded < 0:
        return None
    if payload_is_one_rank(op, api, layer):
        return None if n is None or n < 1 else recorded * n
    return recorded


def group_sizes(meta: Mapping[str, Any]) -> dict[str, int]:
    """Process group name -> size from a trace's ``meta['groups']`` (what capture described
    of each group; :mod:`wsprof.capture.world`)."""
    out: dict[str, int] = {}
    groups = meta.get("groups")
    if not isinstance(groups, list):
        return out
    for g in groups:
        if not isinstance(g, dict):
            continue
        name, size = g.get("name"), g.get("size")
        if isinstance(name, str) and isinstance(size, int) and not isinstance(size, bool):
            out[name] = size
    return out


def group_backends(meta: Mapping[str, Any]) -> dict[str, str]:
    """Process group name -> backend (``gloo``, ``nccl``) from a trace's ``meta['groups']``."""
    out: dict[str, str] = {}
    groups = meta.get("groups")
    for g in groups if isinstance(groups, list) else ():
        if isinstance(g, dict) and isinstance(g.get("name"), str) and g.get("backend"):
            out[g["name"]] = str(g["backend"])
    return out


def sync_backends(rows: Sequence[StepRow], meta: Mapping[str, Any]) -> set[str]:
    """The backends of every group the steps' weight syncs moved bytes on."""
    known = group_backends(meta)
    names = {g for r in rows if r.wire is not None for g in r.wire.groups}
    return {known[g] for g in names if g in known}


def _done_ns(calls: CallTable) -> npt.NDArray[np.int64]:
    """Each call's completion, ns: its ``wait()`` for an async call, else its return."""
    return np.where(
        calls.t_done_ns >= 0, np.maximum(calls.t_done_ns, calls.t_end_ns), calls.t_end_ns
    )


def _union(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], lo: int, hi: int) -> int:
    order = np.argsort(starts, kind="stable")
    return covered_ns(starts[order], ends[order], lo, hi)


def sync_wire(
    calls: CallTable,
    idx: npt.NDArray[np.int64],
    windows: Sequence[tuple[int, int]],
    sizes: Mapping[str, int],
) -> SyncWire:
    """The transfers of one weight sync.

    Args:
        calls: the process's calls.
        idx: indices of the calls that started inside the sync.
        windows: the sync's spans ``(start, end)`` ns (several weight-sync phases of one step
            count as one sync); each call's time is clipped to them.
        sizes: group name -> size (:func:`group_sizes`).
    """
    ops: list[OpWire] = []
    done = _done_ns(calls)
    all_known: list[int] = []
    n_calls = n_unknown = total = 0
    bus_total: float | None = 0.0
    for op in sorted({str(o) for o in calls.op[idx].tolist()} - NOT_TRANSFERS):
        mine = idx[calls.op[idx] == op]
        known: list[int] = []
        nbytes = 0
        bus: float | None = 0.0
        for i in mine.tolist():
            grp = calls.grp[i]
            n = sizes.get(str(grp)) if grp is not None else None
            s = whole_bytes(op, str(calls.api[i]), str(calls.layer[i]), int(calls.bytes[i]), n)
            if s is None:
                continue
            known.append(i)
            nbytes += s
            f = bus_factor(op, n)
            bus = None if bus is None or f is None else bus + s * f
        sel = np.asarray(known, dtype=np.int64)
        wire_ns = sum(_union(calls.t_start_ns[sel], done[sel], lo, hi) for lo, hi in windows)
        ops.append(
            OpWire(
                op, len(mine), nbytes, bus if known else None, wire_ns / 1e9, len(mine) - len(known)
            )
        )
        all_known += known
        n_calls += len(mine)
        n_unknown += len(mine) - len(known)
        total += nbytes
        if known:
            bus_total = None if bus_total is None or bus is None else bus_total + bus
    sel = np.asarray(all_known, dtype=np.int64)
    wire_ns = sum(_union(calls.t_start_ns[sel], done[sel], lo, hi) for lo, hi in windows)
    ops.sort(key=lambda o: (-o.bytes, o.op))
    groups = sorted({str(g) for g in calls.grp[sel].tolist() if g is not None})
    return SyncWire(
        n_calls,
        total,
        bus_total if all_known else None,
        wire_ns / 1e9,
        n_unknown,
        tuple(ops),
        tuple(groups),
    )


def _thinned(meta: Mapping[str, Any]) -> tuple[int, int] | None:
    r = meta.get("retention")
    if not isinstance(r, dict):
        return None
    lo, hi = r.get("first_thinned_step"), r.get("last_thinned_step")
    return (lo, hi) if isinstance(lo, int) and isinstance(hi, int) else None


def with_wire(
    rows: Sequence[StepRow], calls: CallTable, spans: Sequence[Span], meta: Mapping[str, Any]
) -> list[StepRow]:
    """``rows`` with :attr:`~wsprof.analysis.model.StepRow.wire`: each step's weight sync as
    its weight-sync phases mark it (markers), else ``[sync_start_ns, + weight_sync_s]``;
    calls (sorted by start) that start inside it count. Steps without a sync, and steps whose
    calls retention thinned (``meta['retention']``: a sample of them was kept), get None."""
    if not rows:
        return list(rows)
    sizes = group_sizes(meta)
    thinned = _thinned(meta)
    phases: dict[int, list[tuple[int, int]]] = {}
    for sp in sync_spans(spans):
        phases.setdefault(sp.step, []).append((sp.t_start_ns, sp.t_end_ns))
    starts = calls.t_start_ns
    out: list[StepRow] = []
    for r in rows:
        windows = phases.get(r.step)
        if not windows and r.sync_start_ns is not None and r.weight_sync_s is not None:
            windows = [(r.sync_start_ns, r.sync_start_ns + int(r.weight_sync_s * 1e9))]
        if not windows or (thinned is not None and thinned[0] <= r.step <= thinned[1]):
            out.append(r)
            continue
        parts = [
            np.arange(
                int(np.searchsorted(starts, lo, side="left")),
                int(np.searchsorted(starts, hi, side="right")),
                dtype=np.int64,
            )
            for lo, hi in windows
        ]
        idx = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        out.append(replace(r, wire=sync_wire(calls, idx, windows, sizes)))
    return out
