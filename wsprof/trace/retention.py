"""Retention: per-step totals of every call, full detail only for the first and last steps.

A long run makes tens of thousands of collective calls per step for thousands of steps. Every
call is counted in ``call_totals`` (exact per-step sums per op, name and layer), and full
per-call detail is kept for the first ``keep_steps`` and the last ``keep_steps`` step numbers.
A step in between is *thinned* once ``keep_steps`` later steps have been seen: of its calls,
an evenly spaced sample of at most ``calls_per_thinned_step`` stays (enough for a median and
a latency plot). Calls recorded before the first step (step -1) are never thinned.

The trace's ``meta['retention']`` says what was thinned; analysis takes per-step counts and
sums from ``call_totals`` so that thinning changes no per-step number.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.trace.chunks import pack_columns, to_matrix, unpack_columns
from wsprof.trace.model import CALL_COLUMNS

#: Default number of first and of last steps kept in full (``$WSPROF_KEEP_STEPS``; 0 keeps all).
DEFAULT_KEEP_STEPS = 20
#: Default calls kept per thinned step (``$WSPROF_THINNED_STEP_CALLS``).
DEFAULT_THINNED_STEP_CALLS = 2_000

_C = {name: i for i, name in enumerate(CALL_COLUMNS)}
_KEY = [_C["step"], _C["op"], _C["api"], _C["layer"], _C["grp"]]


def totals_rows(m: npt.NDArray[np.int64]) -> list[tuple[int, ...]]:
    """Rows of ``call_totals`` for a call matrix: per (step, op, api, layer, group) id, the
    number of calls, summed duration (ns), summed time between layers (ns), summed payload
    bytes (known sizes only), the longest call (ns), and the collectives they issued (summed
    ``n_backend``, what the coverage audit compares with c10d's count). Row order is the
    table's column order: step, op, api, layer, n, duration, between, bytes, longest, group,
    issued.

    Args:
        m: shape ``(n, 16)`` in :data:`CALL_COLUMNS` order, strings as ids.
    """
    if not len(m):
        return []
    # One 1-D key per row in mixed radix over each key column's distinct values (``np.unique``
    # with ``axis=0`` cost about 1.5 µs per call; this is a few 1-D sorts).
    code = np.zeros(len(m), dtype=np.int64)
    radix = 1
    for c in _KEY:
        u, i = np.unique(m[:, c], return_inverse=True)
        radix *= len(u)
        code = code * len(u) + i.reshape(-1)
    if radix < 2**62:
        first_of, inv = np.unique(code, return_index=True, return_inverse=True)[1:]
        keys = m[first_of][:, _KEY]
    else:  # too many distinct values to combine in an int64: the slow general path
        keys, inv = np.unique(m[:, _KEY], axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    dur = m[:, _C["t_end_ns"]] - m[:, _C["t_start_ns"]]
    between = np.where(m[:, _C["n_backend"]] > 0, np.maximum(dur - m[:, _C["backend_ns"]], 0), 0)
    nbytes = np.maximum(m[:, _C["bytes"]], 0)
    issued = np.maximum(m[:, _C["n_backend"]], 0)
    k = len(keys)
    n = np.bincount(inv, minlength=k)
    sums = [
        np.bincount(inv, weights=w.astype(np.float64), minlength=k)
        for w in (dur, between, nbytes, issued)
    ]
    longest = np.zeros(k, dtype=np.int64)
    np.maximum.at(longest, inv, dur)
    return [
        (
            *(int(x) for x in keys[i][:4]),
            int(n[i]),
            int(sums[0][i]),
            int(sums[1][i]),
            int(sums[2][i]),
            int(longest[i]),
            int(keys[i][4]),
            int(sums[3][i]),
        )
        for i in range(k)
    ]


@dataclass
class Retention:
    """Decides which steps to thin and thins them in a trace's ``call_chunks``.

    Args:
        keep_steps: first and last step numbers kept in full; 0 keeps everything.
        calls_per_thinned_step: calls a thinned step keeps (evenly spaced).
    """

    keep_steps: int = DEFAULT_KEEP_STEPS
    calls_per_thinned_step: int = DEFAULT_THINNED_STEP_CALLS
    #: calls seen per step number (>= 0)
    counts: dict[int, int] = field(default_factory=dict)
    calls_removed: int = 0
    #: per thinned step: calls seen when it was last thinned, and rows it kept then
    thinned_at: dict[int, tuple[int, int]] = field(default_factory=dict)

    def snapshot(self) -> tuple[dict[int, int], int, dict[int, tuple[int, int]]]:
        """State to :meth:`restore` when the transaction that follows is rolled back."""
        return dict(self.counts), self.calls_removed, dict(self.thinned_at)

    def restore(self, state: tuple[dict[int, int], int, dict[int, tuple[int, int]]]) -> None:
        """Undo :meth:`observe` and :meth:`thin` calls since :meth:`snapshot`."""
        self.counts, self.calls_removed, self.thinned_at = (
            dict(state[0]),
            state[1],
            dict(state[2]),
        )

    def _present(self, s: int) -> int:
        """Rows of step ``s`` in the trace now (all its calls until it is thinned)."""
        if s not in self.thinned_at:
            return self.counts[s]
        seen, kept = self.thinned_at[s]
        return kept + self.counts[s] - seen

    def observe(self, m: npt.NDArray[np.int64]) -> None:
        """Count the calls of a matrix just written, per step."""
        steps, n = np.unique(m[:, _C["step"]], return_counts=True)
        for s, c in zip(steps.tolist(), n.tolist()):
            if s >= 0:
                self.counts[s] = self.counts.get(s, 0) + c

    def due(self) -> list[int]:
        """Steps to thin now: not among the first ``keep_steps`` step numbers, with at least
        ``keep_steps`` higher step numbers seen, and holding more than twice their sample
        (not thinned yet, or grown again since: a step number that repeats, as when a loop
        restarts its count each epoch)."""
        if self.keep_steps <= 0 or len(self.counts) <= 2 * self.keep_steps:
            return []
        order = sorted(self.counts)
        middle = order[self.keep_steps : len(order) - self.keep_steps]
        cap = max(self.calls_per_thinned_step, 1)
        return [s for s in middle if s not in self.thinned_at or self._present(s) > 2 * cap]

    def thin(self, db: sqlite3.Connection) -> dict[str, Any] | None:
        """Thin the due steps' calls in ``db`` (inside the caller's transaction).

        Returns:
            The ``meta['retention']`` value when something was thinned, else None.
        """
        due = self.due()
        if not due:
            return None
        due_arr = np.array(due, dtype=np.int64)
        every = {
            s: max(1, math.ceil(self._present(s) / max(self.calls_per_thinned_step, 1)))
            for s in due
        }
        kept_rows = dict.fromkeys(due, 0)
        seen = dict.fromkeys(due, 0)  # calls of each due step met so far, in chunk order
        lo, hi = min(due), max(due)
        rows = db.execute(
            "SELECT id, n_rows, columns, data FROM call_chunks "
            "WHERE step_max >= ? AND step_min <= ? ORDER BY id",
            (lo, hi),
        ).fetchall()
        for cid, n_rows, columns, data in rows:
            m = to_matrix(unpack_columns(n_rows, columns, data))
            step = m[:, _C["step"]]
            in_due = np.isin(step, due_arr)
            if not in_due.any():
                continue
            keep = ~in_due
            for s in np.unique(step[in_due]).tolist():
                pos = np.flatnonzero(step == s)
                rank = np.arange(len(pos)) + seen[s]
                seen[s] += len(pos)
                keep[pos[rank % every[s] == 0]] = True
                kept_rows[s] += int((rank % every[s] == 0).sum())
            kept = m[keep]
            self.calls_removed += int(len(m) - len(kept))
            if len(kept):
                cols, blob = pack_columns(kept)
                st = kept[:, _C["step"]]
                db.execute(
                    "UPDATE call_chunks SET n_rows=?, columns=?, data=?, step_min=?, step_max=? "
                    "WHERE id=?",
                    (len(kept), cols, blob, int(st.min()), int(st.max()), cid),
                )
            else:
                db.execute("DELETE FROM call_chunks WHERE id=?", (cid,))
        for s in due:
            self.thinned_at[s] = (self.counts[s], kept_rows[s])
        return self.meta()

    def meta(self) -> dict[str, Any]:
        """What ``meta['retention']`` holds."""
        return {
            "keep_steps": self.keep_steps,
            "calls_per_thinned_step": self.calls_per_thinned_step,
            "thinned_steps": len(self.thinned_at),
            "first_thinned_step": min(self.thinned_at) if self.thinned_at else None,
            "last_thinned_step": max(self.thinned_at) if self.thinned_at else None,
            "calls_removed": self.calls_removed,
        }
