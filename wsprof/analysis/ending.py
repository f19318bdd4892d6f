"""How each process's trace ended, and what that leaves out: notes and verdict limits.

The reader sets ``meta['end']`` (:mod:`wsprof.trace.salvage`): ``closed`` (a clean close),
``killed`` (the process died without one: what its capture buffer held was recovered),
``live`` (the process still runs) or ``unknown`` (a trace from before the capture buffer).
A trace that did not close has an open last step, which steps from markers leave out: its
calls are in the trace but it is never judged as a (short, healthy-looking) step. Calls a full
capture buffer refused are in ``meta['self']['dropped_by_step']`` (read as
:attr:`wsprof.contracts.overhead.SelfOverhead.dropped_by_step`): those steps are undercounted.
"""

from __future__ import annotations

from typing import Any

from wsprof.contracts.overhead import SelfOverhead


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _steps_text(steps: list[int]) -> str:
    shown = ", ".join(str(s) for s in steps[:6])
    return shown + (f" and {len(steps) - 6} more" if len(steps) > 6 else "")


def end_notes(
    meta: dict[str, Any], own: SelfOverhead, label: str, last_step: int | None
) -> list[str]:
    """One line per thing the way a trace ended leaves out (none for a clean close).

    Args:
        meta: the trace's metadata (``meta['end']``, set by the reader).
        own: its self-overhead record (calls dropped per step).
        label: how reports name the process.
        last_step: the step the process was in at the end, or None.

    Returns:
        The notes, one line each.
    """
    end = _dict(meta.get("end"))
    state = end.get("state")
    rec = _dict(end.get("recovered"))
    at = f" at step {last_step}" if last_step is not None else ""
    out: list[str] = []
    if state == "killed":
        out.append(
            f"trace of {label} ended without a clean close{at} (process killed?): "
            f"{rec.get('calls', 0):,} calls recovered from its capture buffer; its open "
            "step is not judged"
        )
    elif state == "live":
        out.append(
            f"trace of {label} is still being written (its process runs){at}: its "
            "open step is not judged"
        )
    out += [f"{label}: {p}" for p in rec.get("problems", [])[:3] if isinstance(p, str)]
    dropped = own.dropped_by_step
    if dropped:
        out.append(
            f"{label}: the capture buffer was full: {sum(dropped.values()):,} calls "
            f"dropped in step(s) {_steps_text(sorted(dropped))}; those steps are "
            "undercounted (raise WSPROF_RING_RECORDS, or flush more often)"
        )
    return out


def end_limits(meta: dict[str, Any], own: SelfOverhead, label: str) -> list[str]:
    """Verdict limits (reasons) from how the trace ended: records lost or dropped.

    Args:
        meta: the trace's metadata (``meta['end']``).
        own: its self-overhead record (calls dropped per step).
        label: how reports name the process.

    Returns:
        The reasons, one line each.
    """
    out: list[str] = []
    rec = _dict(_dict(meta.get("end")).get("recovered"))
    missing = rec.get("missing")
    if isinstance(missing, int) and missing > 0:
        out.append(
            f"{missing:,} record(s) of {label} were lost at its end (a damaged capture "
            "buffer): the last steps may be incomplete"
        )
    dropped = own.dropped_by_step
    if dropped:
        out.append(
            f"{sum(dropped.values()):,} call(s) of {label} were dropped by a full capture "
            f"buffer in step(s) {_steps_text(sorted(dropped))}: raise WSPROF_RING_RECORDS"
        )
    return out
