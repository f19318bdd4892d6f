"""Exports for other tools: Perfetto (Chrome trace JSON), speedscope, and a per-step CSV.

* :func:`write_perfetto`: the Chrome trace event format ("Trace Event Format", Google, the JSON
  that ui.perfetto.dev and chrome://tracing load): one process track per traced process (pid),
  one thread track per thread; every collective a complete event (``ph: "X"``) with its op,
  name called, bytes, caller site, step and phase as ``args``; steps and phases as slices on
  their own tracks; counters as counter tracks (``ph: "C"``). Times are µs on the run clock
  (:mod:`wsprof.analysis.align`), so the processes of a run line up.
* :func:`speedscope`: py-spy samples as speedscope's file format
  (https://www.speedscope.app/file-format-schema.json): one ``sampled`` profile per sampled
  thread, frames shared.
* :func:`step_csv`: the per-step table of the primary process (step, phase times, sync time,
  calls, counters at each step's end), readable back by ``wsprof analyze FILE.csv``.

Events are written one at a time (a trace of millions of calls is never held as JSON text).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from typing import IO, Any

import numpy as np

from wsprof.analysis.align import ClockInput, RunClock, align, anchor_of
from wsprof.analysis.coverage_model import Coverage
from wsprof.analysis.model import Analysis
from wsprof.analysis.process import first_record_ns
from wsprof.analysis.samples import split_frame
from wsprof.contracts.series import counter_of
from wsprof.trace.model import ProcessTrace

#: Thread id of the steps-and-phases track of a process (thread ids from Python are large
#: positive integers, so small ones cannot collide).
MARKER_TID = 0
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def _clock(traces: Sequence[ProcessTrace]) -> RunClock:
    inputs = []
    for t in traces:
        anchor = anchor_of(t.meta)
        host = t.meta.get("host")
        inputs.append(
            ClockInput(
                t.label,
                host if isinstance(host, str) else None,
                anchor[0] if anchor else None,
                anchor[1] if anchor else None,
                first_record_ns(t),
            )
        )
    return align(inputs)


def _pid(t: ProcessTrace, i: int) -> int:
    pid = t.meta.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 1_000_000 + i


def perfetto_events(traces: Sequence[ProcessTrace]) -> Iterator[dict[str, Any]]:
    """Trace events (dicts) for every process's calls, steps, phases and counters."""
    clock = _clock(traces)
    for i, (t, c) in enumerate(zip(traces, clock.clocks)):
        pid = _pid(t, i)
        host = t.meta.get("host")
        name = f"{t.label}" + (f" ({host}, pid {t.meta.get('pid')})" if host else "")
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
        if t.rank is not None:
            yield {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": t.rank},
            }
        yield {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": MARKER_TID,
            "args": {"name": "steps and phases"},
        }
        shift = c.shift_ns
        for sp in t.spans:
            yield {
                "ph": "X",
                "cat": sp.kind,
                "name": sp.name if sp.kind == "phase" else f"step {sp.step}",
                "pid": pid,
                "tid": MARKER_TID,
                "ts": (sp.t_start_ns + shift) / 1e3,
                "dur": max(sp.t_end_ns - sp.t_start_ns, 0) / 1e3,
                "args": {"step": sp.step, "thread": sp.thread},
            }
        calls = t.calls
        for tid in np.unique(calls.thread).tolist():
            yield {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": int(tid),
                "args": {"name": f"thread {tid}"},
            }
        sites = {k: s.label() for k, s in t.sites.items()}
        ts = (calls.t_start_ns + shift) / 1e3
        dur = np.maximum(calls.duration_ns, 0) / 1e3
        for j in range(len(calls)):
            yield {
                "ph": "X",
                "cat": "collective",
                "name": str(calls.op[j]),
                "pid": pid,
                "tid": int(calls.thread[j]),
                "ts": float(ts[j]),
                "dur": float(dur[j]),
                "args": {
                    "api": str(calls.api[j]),
                    "layer": str(calls.layer[j]),
                    "bytes": int(calls.bytes[j]),
                    "step": int(calls.step[j]),
                    "phase": calls.phase[j],
                    "site": sites.get(int(calls.site[j])),
                    "group": calls.grp[j],
                    "async": bool(calls.is_async[j]),
                    "error": calls.error[j],
                },
            }
        for cname, (tt, vv) in sorted(t.counters.items()):
            ok = np.isfinite(vv)
            for x, v in zip(((tt[ok] + shift) / 1e3).tolist(), vv[ok].tolist()):
                yield {
                    "ph": "C",
                    "name": cname,
                    "pid": pid,
                    "tid": 0,
                    "ts": x,
                    "args": {"value": v},
                }


def write_perfetto(
    traces: Sequence[ProcessTrace], out: IO[str], coverage: Coverage | None = None
) -> int:
    """Write ``{"traceEvents": [...], "displayTimeUnit": "ms"}`` to ``out``, one event at a
    time; ``otherData.coverage`` holds the coverage audit's status and what it says (a trace
    that holds part of the collectives must not look whole). Returns the number of events
    written."""
    other: dict[str, Any] = {"exporter": "wsprof"}
    if coverage is not None:
        other["coverage"] = {"status": coverage.status, "lines": coverage.lines()}
    out.write(
        '{"displayTimeUnit": "ms", "otherData": ' + json.dumps(other) + ', "traceEvents": [\n'
    )
    n = 0
    for ev in perfetto_events(traces):
        out.write((",\n" if n else "") + json.dumps(ev, allow_nan=False))
        n += 1
    out.write("\n]}\n")
    return n


def speedscope(traces: Sequence[ProcessTrace], name: str = "wsprof") -> dict[str, Any]:
    """py-spy samples as a speedscope file: one ``sampled`` profile per (pid, thread), frames
    shared, weights in samples. Raises nothing; without samples there are no profiles."""
    frames: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    profiles: dict[tuple[int, int], dict[str, Any]] = {}
    for t in traces:
        for w in t.samples:
            stack = []
            for f in w.frames:
                k = index.get(f)
                if k is None:
                    func, file, line = split_frame(f)
                    k = index[f] = len(frames)
                    frame: dict[str, Any] = {"name": func}
                    if file:
                        frame["file"] = file
                    if line is not None:
                        frame["line"] = line
                    frames.append(frame)
                stack.append(k)
            p = profiles.setdefault(
                (w.pid, w.tid),
                {
                    "type": "sampled",
                    "name": f"pid {w.pid} thread {w.tid}",
                    "unit": "none",
                    "startValue": 0,
                    "endValue": 0,
                    "samples": [],
                    "weights": [],
                },
            )
            p["samples"].append(stack)
            p["weights"].append(w.count)
            p["endValue"] += w.count
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": name,
        "exporter": "wsprof",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": [profiles[k] for k in sorted(profiles)],
    }


#: Per-step columns of :func:`step_csv` (StepRow attributes), units in the names.
STEP_COLUMNS = (
    "step_s",
    "rollout_s",
    "train_s",
    "weight_sync_s",
    "other_s",
    "rollout_share",
    "n_calls",
    "collective_s",
    "between_layers_s",
    "sync_gap_s",
)


def step_csv(analysis: Analysis) -> str:
    """The primary process's per-step table as CSV: ``step``, :data:`STEP_COLUMNS` that have a
    value in some step (a column with none, such as ``rollout_s`` without rollout markers, is
    left out), then each counter's value at the step's end (``counter:<name>``); empty cells
    where unknown.

    Raises:
        ValueError: the analysis has no steps.
    """
    pa = analysis.primary
    if pa is None or not pa.steps:
        raise ValueError("no steps to export (add wsprof.step() at the top of each step)")
    counters = {
        r.series.name: dict(zip(r.series.steps, r.series.values))
        for r in analysis.series
        if counter_of(r.series.name) is not None
    }
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    columns = [c for c in STEP_COLUMNS if any(getattr(r, c) is not None for r in pa.steps)]
    w.writerow(["step", *columns, *counters])
    for row in pa.steps:
        vals = [getattr(row, c) for c in columns]
        w.writerow(
            [
                row.step,
                *("" if v is None else v for v in vals),
                *(
                    "" if (v := by_step.get(row.step)) is None else v
                    for by_step in counters.values()
                ),
            ]
        )
    return buf.getvalue()
