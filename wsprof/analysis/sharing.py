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

import numpy as np
import numpy.typing as npt

from wsprof.contracts.counters import proc_counter, share_counter
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
        t_s: when each next update began, s since the process's first record.
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
    t_s: tuple[float, ...]
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


#: The per-update counters of each side: (count so far, per-update shares, per-update bytes,
#: kept bytes); recorded by the capture when the next update begins.
_SIDE_KEYS = {
    "export": ("exports", "update_exports", "update_exported_bytes", "kept_bytes"),
    "import": ("imports", "update_imports", "update_imported_bytes", "imported_kept_bytes"),
}


def _side(
    counters: CounterArrays, side: str, events: Sequence[Event], t0_ns: int
) -> SideUpdates | None:
    total_key, n_key, b_key, kept_key = (share_counter(k) for k in _SIDE_KEYS[side])
    total = counters.get(total_key)
    if total is None or not len(total[1]) or float(np.max(total[1])) <= 0:
        return None
    empty = (np.zeros(0, np.int64), np.zeros(0))
    t, per_n = counters.get(n_key, empty)
    _, per_b = counters.get(b_key, empty)
    _, kept = counters.get(kept_key, empty)
    n = min(len(per_n), len(per_b), len(kept))
    site = next((e for e in events if isinstance(e, ShareSite) and e.side == side), None)
    holder = next(
        (e for e in reversed(events) if isinstance(e, ShareHolder) and e.side == side), None
    )
    return SideUpdates(
        side=side,
        count=tuple(float(x) for x in per_n[:n]),
        nbytes=tuple(float(x) for x in per_b[:n]),
        kept_bytes=tuple(float(x) for x in kept[:n]),
        t_s=tuple((float(x) - t0_ns) / 1e9 for x in t[:n]),
        device=site.device if site is not None else None,
        site=site.site if site is not None else None,
        caller=site.caller if site is not None else None,
        holder=holder,
    )


def _last(counters: CounterArrays, name: str) -> float | None:
    got = counters.get(name)
    return float(got[1][-1]) if got is not None and len(got[1]) else None


def sharing_of(counters: CounterArrays, events: Sequence[Event], t0_ns: int = 0) -> Sharing | None:
    """A process's tensor sharing from its counters (name -> (t_ns, values)) and typed events;
    None when it shared and opened nothing."""
    exports = _side(counters, "export", events, t0_ns)
    imports = _side(counters, "import", events, t0_ns)
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
