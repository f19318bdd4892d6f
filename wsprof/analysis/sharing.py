"""Tensor sharing read per weight update: what a process exported (a colocated trainer) or
opened (a colocated engine) in each update, and what of it was still alive when the next one
began.

A colocated weight sync sends its buckets as handles (:mod:`wsprof.capture.sharing`). An
*update* is a burst of shares (one weight version's buckets: the trainers' pushes and the
engines' loads alike, whether or not the process has steps); when the next one begins the
capture records what every earlier update left alive (``share.kept_bytes``,
``share.imported_kept_bytes``) and the shares and bytes of the one that ended: about nothing
is left in a healthy sync, every bucket sent so far when something keeps them.

Pure: counter arrays and typed events in, frozen records out; no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.contracts.counters import proc_counter, share_counter, share_side_counters
from wsprof.contracts.events import Event, ShareHolder, ShareSite

CounterArrays = Mapping[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]


@dataclass(frozen=True)
class SideUpdates:
    """One side (``export`` or ``import``) of a process, per update.

    Attributes:
        side: ``export`` or ``import``.
        count: storages shared (opened) in each update.
        nbytes: their bytes, per update.
        kept_bytes: bytes of this side still alive when the next update began, one per
            update that has a next one.
        t_end_ns: when each update's last share (open) was, monotonic ns of the process.
        calls_s: time inside each update's share (open) calls, s: serializing (on the
            engine: rebuilding) the buckets.
        span_s: each update's first share (open) to its last, s.
        device: the device of the first storage shared, from its site event (``cpu``,
            ``cuda``), or None.
        site: where the first storage was shared or opened (``function (file:line)``).
        caller: the frame that called ``site``.
        holder: the last holder search of this side (its ``path`` None: nothing in Python
            holds it), or None when none ran.
    """

    side: str
    count: tuple[float, ...]
    nbytes: tuple[float, ...]
    kept_bytes: tuple[float, ...]
    t_end_ns: tuple[int, ...] = ()
    calls_s: tuple[float, ...] = ()
    span_s: tuple[float, ...] = ()
    device: str | None = None
    site: str | None = None
    caller: str | None = None
    holder: ShareHolder | None = None


@dataclass(frozen=True)
class Sharing:
    """A process's tensor sharing.

    Attributes:
        exports: what it sent, per update (None: it sent nothing).
        imports: what it opened, per update (None: it opened nothing).
        reopens: handles it opened again while an earlier open of them was alive.
        ipc_collects: ``torch.cuda.ipc_collect()`` calls.
        exports_since_collect: CUDA exports since the last ``ipc_collect()`` at its last sample.
        shm_total_bytes: the host's /dev/shm size, bytes (how far shared memory can grow).
    """

    exports: SideUpdates | None
    imports: SideUpdates | None
    reopens: int = 0
    ipc_collects: int = 0
    exports_since_collect: int = 0
    shm_total_bytes: float | None = None

    @property
    def role(self) -> str:
        """``engine`` for a process that only opens shared tensors, ``trainer`` for one that
        only sends them, else ``both``."""
        if self.imports is not None and self.exports is None:
            return "engine"
        if self.exports is not None and self.imports is None:
            return "trainer"
        return "both"


#: An update that moved less than this share of the median update's bytes is a fragment (a
#: pause inside one update, on a loaded machine, cut it in two): joined with the next.
FRAGMENT_SHARE = 0.8


@dataclass(frozen=True)
class _Update:
    count: float
    nbytes: float
    kept: float | None
    t_end_ns: int
    calls_s: float
    span_s: float


def _whole_updates(rows: list[_Update]) -> list[_Update]:
    """``rows`` with fragments (:data:`FRAGMENT_SHARE`) joined to the updates they are part
    of: every update sends the whole model, as the weight-update path checks
    (:data:`~wsprof.analysis.updates.UPDATE_BYTES_SPREAD`)."""
    if len(rows) < 3:
        return rows
    whole = FRAGMENT_SHARE * float(np.median([u.nbytes for u in rows]))
    out: list[_Update] = []
    acc: _Update | None = None
    for u in rows:
        if acc is not None:
            start = acc.t_end_ns - int(acc.span_s * 1e9)
            u = _Update(
                acc.count + u.count,
                acc.nbytes + u.nbytes,
                u.kept,
                u.t_end_ns,
                acc.calls_s + u.calls_s,
                (u.t_end_ns - start) / 1e9,
            )
        if u.nbytes < whole:
            acc = u
            continue
        acc = None
        out.append(u)
    if acc is not None:
        out.append(acc)
    return out


def _side(counters: CounterArrays, side: str, events: Sequence[Event]) -> SideUpdates | None:
    c = share_side_counters(side)
    total = counters.get(c.total)
    if total is None or not len(total[1]) or float(np.max(_clean(total[1]))) <= 0:
        return None
    empty = (np.zeros(0, np.int64), np.zeros(0))
    t, per_n = counters.get(c.update_count, empty)
    per_n = _clean(per_n)
    per_b, kept, us, span = (
        _clean(counters.get(k, empty)[1])
        for k in (c.update_bytes, c.kept, c.update_us, c.update_span_us)
    )
    n = min(len(per_n), len(per_b))
    if len(us) < n or len(span) < n:  # recorded by an earlier wsprof
        us = span = np.zeros(n)
    site = next((e for e in events if isinstance(e, ShareSite) and e.side == side), None)
    holder = next(
        (e for e in reversed(events) if isinstance(e, ShareHolder) and e.side == side), None
    )
    rows = _whole_updates(
        [
            _Update(
                float(per_n[i]),
                float(per_b[i]),
                float(kept[i]) if i < len(kept) else None,
                int(t[i]),
                float(us[i]) / 1e6,
                float(span[i]) / 1e6,
            )
            for i in range(n)
        ]
    )
    return SideUpdates(
        side=side,
        count=tuple(u.count for u in rows),
        nbytes=tuple(u.nbytes for u in rows),
        kept_bytes=tuple(u.kept for u in rows if u.kept is not None),
        t_end_ns=tuple(u.t_end_ns for u in rows),
        calls_s=tuple(u.calls_s for u in rows),
        span_s=tuple(u.span_s for u in rows),
        device=site.device if site is not None else None,
        site=site.site if site is not None else None,
        caller=site.caller if site is not None else None,
        holder=holder,
    )


#: Largest count, byte or µs value believed from a trace (a hostile or corrupt file may hold
#: NaN, infinities or 1e300): others read as 0.
MAX_VALUE = 2.0**62


def _clean(v: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """``v`` as floats, values that are not finite or beyond :data:`MAX_VALUE` as 0."""
    f = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(f) & (np.abs(f) <= MAX_VALUE), f, 0.0)


def _last(counters: CounterArrays, name: str) -> float | None:
    got = counters.get(name)
    return float(_clean(got[1][-1:])[0]) if got is not None and len(got[1]) else None


def sharing_of(counters: CounterArrays, events: Sequence[Event]) -> Sharing | None:
    """A process's tensor sharing from its counters (name -> (t_ns, values)) and typed events;
    None when it shared and opened nothing."""
    exports = _side(counters, "export", events)
    imports = _side(counters, "import", events)
    if exports is None and imports is None:
        return None
    return Sharing(
        exports=exports,
        imports=imports,
        reopens=int(_last(counters, share_counter("reopens")) or 0),
        ipc_collects=int(_last(counters, share_counter("ipc_collects")) or 0),
        exports_since_collect=int(_last(counters, share_counter("exports_since_collect")) or 0),
        shm_total_bytes=_last(counters, proc_counter("shm_total_bytes")),
    )


#: Fewest updates a colocated engine must have opened for its steps to be cut at them.
MIN_ENGINE_UPDATES = 3


def engine_step_specs(
    sh: Sharing | None,
) -> list[tuple[int, int, int, float | None, float | None, int | None]]:
    """Steps of a process that only opens shared weight buckets (a colocated engine with no
    collectives of its own to cut steps at), as ``(step, t0_ns, t1_ns, weight_sync_s,
    sync_gap_s, sync_start_ns)``: step ``k`` ends when update ``k+1``'s last bucket was
    opened (as an engine's steps end with loading the weights it receives,
    :func:`~wsprof.analysis.updates.steps_from_updates`; update 0 is the initial push before
    training, slime's and verl's, and the segment up to it start-up, not a step); its weight
    sync is that update's first open to its last. Empty for any other process or with fewer
    than :data:`MIN_ENGINE_UPDATES` updates."""
    side = sh.imports if sh is not None and sh.role == "engine" else None
    if (
        side is None
        or len(side.t_end_ns) < MIN_ENGINE_UPDATES
        or len(side.span_s) < len(side.t_end_ns)
    ):
        return []
    out: list[tuple[int, int, int, float | None, float | None, int | None]] = []
    start = side.t_end_ns[0]
    for k, (end, span) in enumerate(zip(side.t_end_ns[1:], side.span_s[1:])):
        sync_start = end - int(span * 1e9)
        out.append((k, min(start, sync_start), end, span, None, sync_start))
        start = end
    return out
