"""A framework-style collective wrapper with a free-memory probe: the motivating bug, in small.

In the motivating case an RL framework wrapped every low-level NCCL call (``broadcast``,
``all_gather``, ``_allgather_base``) with a "free memory" probe. With expandable segments the
caching allocator's segment count grew over training, every probe walked all segments, and
weight sync went 143 s, 363 s, 966 s, 1596 s. Tens of GB were free, so the probe's clean-up
never ran: pure overhead.

:class:`SegmentPool` plays the allocator: it gains segments every step. :func:`install` wraps
``torch.distributed`` collectives the way such frameworks do (module attribute replaced by a
wrapper that probes, then calls the original). With ``fault="none"`` the pool does not grow and
the probe reads a cached total instead of walking it: the same workload, healthy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

#: How much the pool's gain per training step grows under ``fault="probe"``: step ``s`` (from 0)
#: adds ``SEGMENT_GAIN_PER_STEP * (s + 1)`` segments, so the count grows quadratically and weight
#: sync accelerates, as in the seed case (143 s, 363 s, 966 s, 1596 s). With ~120 collectives per
#: sync, step 12 walks about 300,000 segments per probe (about 3 s of sync on a laptop core).
#: A linear count (25,000 a step, until 2026-12) made the last half of a 12-step run rise by
#: only ~1.7x: on a CI machine whose speed changed mid-run that half came out flat, and the
#: classifier rightly could not tell the run from a plateau. Quadratic growth rises ~3x there.
SEGMENT_GAIN_PER_STEP = 4_000

#: Free bytes below which the probe would empty the cache (never reached: tens of GB free).
LOW_MEMORY_BYTES = 1 << 20


class SegmentPool:
    """An allocator-like pool: a list of (size_bytes, in_use) segments that only grows."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.probes = "probe" in faults(fault)
        self.segments: list[tuple[int, bool]] = [(2 << 20, False)] * 1_000
        self.total_free_bytes = sum(s for s, used in self.segments if not used)

    def grow(self, n: int) -> None:
        """Add ``n`` free 2 MiB segments (what a leak of mappings looks like to a probe)."""
        self.segments.extend([(2 << 20, False)] * n)
        self.total_free_bytes += n * (2 << 20)

    def grow_at_step(self, step: int) -> None:
        """Gain training step ``step``'s segments (from 0): ``SEGMENT_GAIN_PER_STEP * (step + 1)``
        when the fault probes, none when healthy."""
        if self.probes:
            self.grow(SEGMENT_GAIN_PER_STEP * (step + 1))

    def free_bytes(self) -> int:
        """The probe. ``fault="probe"``: walk every segment (cost grows with the pool)."""
        if not self.probes:
            return self.total_free_bytes
        free = 0
        for size, used in self.segments:
            if not used:
                free += size
        return free

    def empty_cache(self) -> None:
        """The clean-up the probe guards; never runs in the demo because memory is plentiful."""
        self.segments = [s for s in self.segments if s[1]]


POOL: SegmentPool | None = None

#: The demo's faults: ``probe`` (the probe walks a growing pool: time between the collective
#: API and the backend grows), ``calls`` (the weight sync sends one more small buffer per
#: step, one collective each: the call count grows); ``none`` is healthy. ``probe+calls`` runs
#: both, two independent causes in one run.
FAULTS = ("probe", "calls", "probe+calls", "none")


def faults(fault: str) -> frozenset[str]:
    """The faults a ``--fault`` value names (``probe+calls`` -> {probe, calls})."""
    return frozenset(f for f in fault.split("+") if f and f != "none")


#: The names such frameworks wrap: every one the installed torch has (the bug hid under all).
WRAPPED = ("broadcast", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_reduce")


def _probed(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def with_memory_probe(*args: Any, **kwargs: Any) -> Any:
        pool = POOL
        if pool is not None and pool.free_bytes() < LOW_MEMORY_BYTES:
            pool.empty_cache()
        return fn(*args, **kwargs)

    return with_memory_probe


def install(fault: str) -> SegmentPool:
    """Wrap the collectives of ``torch.distributed`` with the probe (as a framework would at
    import time) and return the pool.

    Args:
        fault: one of :data:`FAULTS`; with ``probe`` the probe walks the growing pool, else it
            reads a cached total (healthy).
    """
    global POOL
    import torch.distributed as dist

    POOL = SegmentPool(fault)
    for name in WRAPPED:
        fn = getattr(dist, name, None)
        if fn is not None:
            setattr(dist, name, _probed(fn))
    return POOL
