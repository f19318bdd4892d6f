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

A call is on the wire from where its backend took it (``end - backend_ns``: the time a wrapper
spends before the backend, a probe, is outside transfers) to its completion. A barrier moves
nothing and is not a transfer; a call of unknown size (an object collective,
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


def _begin_ns(calls: CallTable) -> npt.NDArray[np.int64]:
    """Each call's start on the wire, ns: where the backend took it, ``end - backend_ns``,
    when the call reached a backend the hooks timed (a wrapper's work before it, a free-memory
    probe, is time outside transfers), else the call's start."""
    timed = (calls.n_backend > 0) & (calls.backend_ns > 0)
    return np.where(
        timed, np.maximum(calls.t_start_ns, calls.t_end_ns - calls.backend_ns), calls.t_start_ns
    )


def _done_ns(calls: CallTable) -> npt.NDArray[np.int64]:
    """Each call's completion, ns: its ``wait()`` for an async call, else its return."""
    return np.where(
        calls.t_done_ns >= 0, np.maximum(calls.t_done_ns, calls.t_end_ns), calls.t_end_ns
    )


def _union(starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], lo: int, hi: int) -> int:
    order = np.argsort(starts, kind="stable")
    return covered_ns(starts[order], ends[order], lo, hi)


def _codes(col: npt.NDArray[np.object_]) -> tuple[npt.NDArray[np.int64], list[object]]:
    """A string column as integer codes (first-seen order) and the values they stand for;
    a hash per value, no sort (a trace's columns hold a handful of distinct names)."""
    values = col.tolist()
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    return codes, list(index)


def call_sizes(
    calls: CallTable, sizes: Mapping[str, int]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each call's size ``S`` (:func:`whole_bytes`), bytes, and bus factor
    (:func:`bus_factor`); NaN where unknown. Decided once per (op, name, layer, group)."""
    n = len(calls)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    parts = [_codes(calls.op), _codes(calls.api), _codes(calls.layer), _codes(calls.grp)]
    key = np.zeros(n, dtype=np.int64)
    for codes, values in parts:
        key = key * (len(values) + 1) + codes
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    mult = np.full(len(uniq), np.nan)
    factor = np.full(len(uniq), np.nan)
    for k, i in enumerate(first.tolist()):
        op, api, layer = str(calls.op[i]), str(calls.api[i]), str(calls.layer[i])
        grp = calls.grp[i]
        size = sizes.get(str(grp)) if grp is not None else None
        one = whole_bytes(op, api, layer, 1, size)
        mult[k] = np.nan if one is None else one
        f = bus_factor(op, size)
        factor[k] = np.nan if f is None else f
    recorded = calls.bytes.astype(np.float64)
    whole = np.where(recorded >= 0, recorded * mult[inverse], np.nan)
    return whole, factor[inverse]


def sync_wire(
    calls: CallTable,
    idx: npt.NDArray[np.int64],
    windows: Sequence[tuple[int, int]],
    sized: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    times: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
) -> SyncWire:
    """The transfers of one weight sync.

    Args:
        calls: the process's calls.
        idx: indices of the calls that started inside the sync.
        windows: the sync's spans ``(start, end)`` ns (several weight-sync phases of one step
            count as one sync); each call's time is clipped to them.
        sized: every call's size and bus factor (:func:`call_sizes`).
        times: every call's begin and completion (ns), when the caller has them for all of
            its syncs (computed here otherwise: once per process, not once per step).
    """
    whole, factor = sized
    begin, done = times if times is not None else (_begin_ns(calls), _done_ns(calls))
    op_of = calls.op[idx]
    keep = ~np.isin(op_of.astype(str), list(NOT_TRANSFERS)) if len(idx) else np.zeros(0, bool)
    idx, op_of = idx[keep], op_of[keep]
    ops: list[OpWire] = []
    for op in sorted({str(o) for o in op_of.tolist()}):
        mine = idx[op_of == op]
        sel = mine[np.isfinite(whole[mine])]
        bus = whole[sel] * factor[sel]
        wire_ns = sum(_union(begin[sel], done[sel], lo, hi) for lo, hi in windows)
        ops.append(
            OpWire(
                op,
                len(mine),
                int(whole[sel].sum()),
                float(bus.sum()) if len(sel) and np.isfinite(bus).all() else None,
                wire_ns / 1e9,
                len(mine) - len(sel),
            )
        )
    sel = idx[np.isfinite(whole[idx])]
    wire_ns = sum(_union(begin[sel], done[sel], lo, hi) for lo, hi in windows)
    ops.sort(key=lambda o: (-o.bytes, o.op))
    known = [o for o in ops if o.n_calls > o.n_unknown]
    bus_total = (
        sum(o.bus_bytes for o in known if o.bus_bytes is not None)
        if known and all(o.bus_bytes is not None for o in known)
        else None
    )
    groups = sorted({str(g) for g in calls.grp[sel].tolist() if g is not None})
    return SyncWire(
        len(idx),
        sum(o.bytes for o in ops),
        bus_total,
        wire_ns / 1e9,
        sum(o.n_unknown for o in ops),
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
    sized = call_sizes(calls, group_sizes(meta))
    times = (_begin_ns(calls), _done_ns(calls))
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
        out.append(replace(r, wire=sync_wire(calls, idx, windows, sized, times)))
    return out
