"""The coverage audit's ground truth: c10d's own count of collectives issued per process group.

Hooks see what goes through Python names; collectives issued from C++ (DDP's reducer, a C++
helper, a backend a framework drives directly) reach the backend without touching them. The
backend itself counts every collective it issues on a group:
``ProcessGroup._get_sequence_number_for_group()`` (gloo: every collective and point-to-point
op; NCCL: collectives only). Reading it is one call per group, whatever the size of the
allocator or the run, so it is read at patch time (the baseline), at every step boundary, at
each flush, before ``destroy_process_group`` (a ``destroy`` reading marks the end of a
group's lifetime) and at close. Analysis compares the per-step
differences with what the hooks recorded (:mod:`wsprof.analysis.coverage`).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from wsprof.capture.markers import STATE

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_now = time.monotonic_ns

#: Most process groups read per reading (a job with more subgroups is read in part, and the
#: trace says so through the missing groups' absence, never as complete).
MAX_GROUPS = 4_096


def _groups() -> list[Any]:
    """Live process groups of this process (``distributed_c10d._world.pg_map``), [] if none."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return []
    try:
        return list(c10d._world.pg_map)[:MAX_GROUPS]
    except Exception:  # noqa: BLE001 - no world yet, or a torch without it
        return []


def group_name(pg: Any) -> str:
    """The group's name (``pg.group_name``); a Python ``ProcessGroup`` without one is named
    by its class, so that it is audited (as unknown), not skipped."""
    try:
        return str(pg.group_name)
    except Exception:  # noqa: BLE001
        return f"<{type(pg).__name__}>"


def seq_of(pg: Any) -> int:
    """c10d's issued-collective count of ``pg``; -1 when its backend keeps none."""
    try:
        return int(pg._get_sequence_number_for_group())
    except Exception:  # noqa: BLE001 - a backend without sequence numbers
        return -1


def read(rec: Recorder | None, at: str = "flush") -> None:
    """Queue one reading per live process group: ``(t_ns, step, group name, backend, seq,
    at)``; ``at`` says when (``patch``, ``step``, ``flush``, ``destroy``, ``close``).

    The count is read before the step, so a reading that races a step boundary is labelled
    with the later step and can only under-state that step's count. Never raises.
    """
    if rec is None:
        return
    try:
        for pg in _groups():
            seq = seq_of(pg)
            name = group_name(pg)
            try:
                backend: str | None = str(pg._get_backend_name())
            except Exception:  # noqa: BLE001
                backend = None
            rec.issued.append((_now(), STATE.step, name, backend, seq, at))
    except Exception as e:  # noqa: BLE001 - never raise into training
        rec.internal_error("audit", e)


def mark_destroyed(rec: Recorder | None, group: Any = None) -> None:
    """Before ``destroy_process_group(group)``: a ``destroy`` reading of that group (every
    group when None), so that a group later created under the same name (c10d reuses names
    and starts the count at 0) is audited as a new lifetime. Never raises."""
    if rec is None:
        return
    try:
        groups = _groups() if group is None else [group]
        for pg in groups:
            rec.issued.append((_now(), STATE.step, group_name(pg), None, seq_of(pg), "destroy"))
    except Exception as e:  # noqa: BLE001 - never raise into training
        rec.internal_error("audit", e)
