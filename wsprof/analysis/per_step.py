"""The per-step series of one process, named as the findings expect: one home for
``wsprof analyze`` (:func:`wsprof.analysis.run.step_series`, from a whole trace) and
``wsprof watch`` (:meth:`wsprof.analysis.live_process.LiveProcess.series`, from the rows
and per-step values it keeps as steps complete)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import StepRow
from wsprof.contracts.counters import counter_unit, counter_unit_text
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    COLLECTIVE_CALLS,
    ROLLOUT_S,
    ROLLOUT_SHARE,
    STEP_S,
    SYNC_ALGBW,
    SYNC_BUSBW,
    SYNC_BYTES,
    SYNC_GAP_S,
    SYNC_WAIT_S,
    SYNC_WIRE_S,
    WEIGHT_SYNC_S,
    Series,
    SeriesKind,
    counter_key,
    op_median_key,
)
from wsprof.contracts.units import Unit
from wsprof.trace.model import CallTable

#: Fewest steps for a per-op median latency series (fewer: not a curve).
MIN_STEPS_FOR_OP_SERIES = 3


def _series(
    name: str,
    unit: Unit,
    rows: Sequence[StepRow],
    values: Sequence[float | None],
    unit_text: str = "",
    kind: SeriesKind | None = None,
) -> Series | None:
    pts = [(r.step, v) for r, v in zip(rows, values) if v is not None and np.isfinite(v)]
    if not pts:
        return None
    return Series(
        name,
        unit,
        tuple(p[0] for p in pts),
        tuple(float(p[1]) for p in pts),
        unit_text=unit_text,
        kind=kind,
    )


def row_series(rows: Sequence[StepRow], step_source: str) -> list[Series]:
    """The series that step rows alone give, named as the findings expect.

    ``weight_sync_s`` (the rank's own sync time), ``sync_wait_s``, ``step_s``, ``rollout_s``,
    ``rollout_share``, ``between_layers_s``, ``collective_calls`` and ``sync_gap_s`` (time in
    weight-sync phases outside any collective); a series without a value is left out.

    Args:
        rows: one process's steps, in order.
        step_source: where the steps came from (:attr:`ProcessAnalysis.step_source`): steps cut
            from bursts, rhythm or samples have no end for the last one, so its step time is
            left out.
    """
    rows = list(rows)
    if not rows:
        return []
    # From bursts the last step has no following burst: its step time is cut short.
    full = rows[:-1] if step_source in ("bursts", "rhythm", "sampled") and len(rows) > 1 else rows
    out = [
        _series(WEIGHT_SYNC_S, Unit.SECONDS, rows, [r.own_sync_s for r in rows]),
        _series(SYNC_WAIT_S, Unit.SECONDS, rows, [r.sync_wait_s for r in rows]),
        _series(STEP_S, Unit.SECONDS, full, [r.step_s for r in full]),
        _series(ROLLOUT_S, Unit.SECONDS, rows, [r.rollout_s for r in rows]),
        _series(ROLLOUT_SHARE, Unit.SHARE, rows, [r.rollout_share for r in rows]),
        _series(BETWEEN_LAYERS_S, Unit.SECONDS, rows, [r.between_layers_s for r in rows]),
        _series(COLLECTIVE_CALLS, Unit.OTHER, rows, [float(r.n_calls) for r in rows]),
        _series(SYNC_GAP_S, Unit.SECONDS, rows, [r.sync_gap_s for r in rows]),
        *wire_series(rows),
    ]
    return [x for x in out if x is not None]


def wire_series(rows: Sequence[StepRow]) -> list[Series | None]:
    """What each step's weight sync put on the wire (:attr:`StepRow.wire`): ``weight_sync_bytes``
    (judged: a payload that grows is a finding of its own), ``weight_sync_wire_s``, and the
    bandwidths ``weight_sync_busbw`` and ``weight_sync_algbw`` (rates: shown, never judged as
    growth). None where a step has no sync or moved no bytes of known size."""
    wires = [r.wire if r.wire is not None and r.wire.bytes > 0 else None for r in rows]
    parts = (
        (SYNC_BYTES, Unit.BYTES, SeriesKind.BYTES, lambda w: float(w.bytes)),
        (SYNC_WIRE_S, Unit.SECONDS, SeriesKind.DURATION, lambda w: w.wire_s),
        (SYNC_BUSBW, Unit.BYTES_PER_SECOND, SeriesKind.RATE, lambda w: w.busbw),
        (SYNC_ALGBW, Unit.BYTES_PER_SECOND, SeriesKind.RATE, lambda w: w.algbw),
    )
    return [
        _series(name, unit, rows, [None if w is None else of(w) for w in wires], kind=kind)
        for name, unit, kind, of in parts
    ]


def op_medians(
    calls: CallTable, step_idx: npt.NDArray[np.int64], n_rows: int
) -> dict[str, list[float | None]]:
    """Each op's median host latency in each of ``n_rows`` steps, µs (None where the step had
    no call of it).

    Args:
        calls: the calls.
        step_idx: per call, the index of its step among the rows, -1 for none
            (:func:`wsprof.analysis.steps.assign_calls`).
        n_rows: the number of rows.
    """
    out: dict[str, list[float | None]] = {}
    dur = calls.duration_ns
    for op in sorted(set(calls.op.tolist())):
        sel = (calls.op == op) & (step_idx >= 0)
        idx, d = step_idx[sel], dur[sel]
        order = np.argsort(idx, kind="stable")
        idx, d = idx[order], d[order]
        bounds = np.searchsorted(idx, np.arange(n_rows + 1))
        out[str(op)] = [
            float(np.median(d[bounds[i] : bounds[i + 1]])) / 1e3
            if bounds[i + 1] > bounds[i]
            else None
            for i in range(n_rows)
        ]
    return out


def op_median_series(
    medians: Mapping[str, Sequence[float | None]], rows: Sequence[StepRow]
) -> list[Series]:
    """``median_us:<op>``: the median host latency of each op present in every step, µs
    (``medians[op][i]`` for ``rows[i]``, :func:`op_medians`; fewer than
    :data:`MIN_STEPS_FOR_OP_SERIES` steps: none)."""
    if len(rows) < MIN_STEPS_FOR_OP_SERIES:
        return []
    out = [
        _series(op_median_key(op), Unit.MICROSECONDS, rows, meds)
        for op, meds in sorted(medians.items())
        if all(v is not None for v in meds)
    ]
    return [s for s in out if s is not None]


def counter_series(
    values: Mapping[str, Sequence[float | None]], rows: Sequence[StepRow]
) -> list[Series]:
    """``counter:<name>`` series, by name: each counter's value at each step's end
    (``values[name][i]`` for ``rows[i]``, None before its first sample)."""
    out = [
        _series(counter_key(name), counter_unit(name), rows, vals, counter_unit_text(name))
        for name, vals in sorted(values.items())
    ]
    return [s for s in out if s is not None]
