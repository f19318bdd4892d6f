"""``wsprof watch``'s OpenMetrics families, with the official ``prometheus_client`` library.

Reads only a :class:`~wsprof.analysis.snapshot.WatchSnapshot`. Names follow the Prometheus
conventions: the ``wsprof_`` prefix, base units in the name (``_seconds``), ``_total`` on
counters (added by the library), ``_ratio`` on shares; per-process families carry ``rank`` and
``host`` labels (``rank`` is ``pid<N>`` for a process whose rank is unknown), per-op families
an ``op`` label. Every family is listed in :data:`FAMILIES` and in the README.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    StateSetMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from wsprof.analysis.model import SEVERITIES, VERDICT_STATUSES
from wsprof.analysis.snapshot import LiveRank, WatchSnapshot
from wsprof.contracts.series import WEIGHT_SYNC_S
from wsprof.contracts.units import Unit

#: Family name (without ``_total``) -> (type, help). The README's table is this one.
FAMILIES: dict[str, tuple[str, str]] = {
    "wsprof_step": ("gauge", "last completed step number of the process"),
    "wsprof_steps_completed": ("counter", "steps the process completed so far"),
    "wsprof_weight_sync_seconds": ("gauge", "weight-sync time of the last completed step"),
    "wsprof_weight_sync_bytes": (
        "gauge",
        "bytes the last completed step's weight sync moved (NCCL tests' sizes)",
    ),
    "wsprof_weight_sync_wire_seconds": (
        "gauge",
        "time the last completed step's weight sync spent in transfers",
    ),
    "wsprof_weight_sync_bandwidth_bytes_per_second": (
        "gauge",
        "bandwidth of the last completed step's weight sync (kind: bus or algorithm)",
    ),
    "wsprof_link_limit_bytes_per_second": (
        "gauge",
        "the link limit the weight sync is held against (absent when unknown)",
    ),
    "wsprof_rollout_seconds": ("gauge", "rollout time of the last completed step"),
    "wsprof_rollout_ratio": ("gauge", "rollout share of the last completed step (0..1)"),
    "wsprof_step_seconds": ("gauge", "duration of the last completed step"),
    "wsprof_collective_calls": ("counter", "collective calls recorded, by canonical op"),
    "wsprof_collective_seconds": ("counter", "host time in collective calls, by canonical op"),
    "wsprof_series_accumulating": (
        "gauge",
        "1 when the per-step series grows step after step (the curve's verdict), else 0",
    ),
    "wsprof_series_shape": ("gauge", "1 for the shape the series' curve has now"),
    "wsprof_series_growth_per_step": (
        "gauge",
        "fitted growth of the series per step, in the unit its unit label names",
    ),
    "wsprof_series_judged_steps": ("gauge", "steps the series' verdict was judged on"),
    "wsprof_weight_sync_projected_step": (
        "gauge",
        "step at which the fitted weight-sync curve reaches threshold_seconds (absent when it "
        "does not grow or never reaches it)",
    ),
    "wsprof_coverage_issued_collectives": (
        "counter",
        "collectives c10d counted as issued on the process's groups (audited steps)",
    ),
    "wsprof_coverage_recorded_collectives": (
        "counter",
        "of the issued collectives, those wsprof recorded (audited steps)",
    ),
    "wsprof_overhead_seconds": (
        "counter",
        "wsprof's own time in the process, by part (hooks, flush, probes)",
    ),
    "wsprof_records_dropped": ("counter", "records a full capture buffer refused, by kind"),
    "wsprof_records_lost": ("counter", "calls lost to failed trace writes"),
    "wsprof_internal_errors": ("counter", "wsprof internal errors caught in the process"),
    "wsprof_trace_readable": ("gauge", "1 when the process's trace was read at the last refresh"),
    "wsprof_verdict": ("stateset", "the run's verdict"),
    "wsprof_problems": ("gauge", "problems (diagnoses at warning or critical) in the run"),
    "wsprof_findings": ("gauge", "findings in the run, by severity"),
    "wsprof_watch_refresh_seconds": (
        "gauge",
        "wall time of watch's last refresh, by part (read: the traces and the new steps' rows; "
        "analyse: judging and the rules)",
    ),
    "wsprof_watch_refreshes": ("counter", "refreshes watch made"),
    "wsprof_watch_rows_read": ("counter", "trace rows watch read"),
}

_RANK_LABELS = ["rank", "host"]


def rank_label(r: LiveRank) -> str:
    """The ``rank`` label of a process: its rank, or ``pid<N>`` when unknown."""
    if r.rank is not None:
        return str(r.rank)
    return f"pid{r.pid}" if r.pid is not None else "unknown"


#: The ``unit`` label of a growth per step, by the series' unit (Prometheus base units).
_UNIT_LABELS = {
    Unit.SECONDS: "seconds",
    Unit.MICROSECONDS: "microseconds",
    Unit.NANOSECONDS: "nanoseconds",
    Unit.BYTES: "bytes",
    Unit.BYTES_PER_SECOND: "bytes_per_second",
    Unit.SHARE: "ratio",
}


def latest_per_label(ranks: Sequence[LiveRank]) -> list[LiveRank]:
    """One process per ``(rank, host)`` label pair, the one started last: a job restarted into
    the same folder leaves its first run's traces, and a label set appears once per family."""
    chosen: dict[tuple[str, str], LiveRank] = {}
    for r in ranks:
        key = (rank_label(r), r.host or "")
        have = chosen.get(key)
        if have is None or (r.started_unix_ns or 0) >= (have.started_unix_ns or 0):
            chosen[key] = r
    keep = {id(r) for r in chosen.values()}
    return [r for r in ranks if id(r) in keep]


def _gauge(name: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, FAMILIES[name][1], labels=labels or [])


def _counter(name: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, FAMILIES[name][1], labels=labels or [])


def families(snapshot: WatchSnapshot, rows_read_total: int) -> list[Metric]:
    """Every metric family of one refresh.

    Args:
        snapshot: the refresh.
        rows_read_total: trace rows read over every refresh so far.
    """
    out: list[Metric] = []
    step = _gauge("wsprof_step", _RANK_LABELS)
    steps = _counter("wsprof_steps_completed", _RANK_LABELS)
    sync = _gauge("wsprof_weight_sync_seconds", _RANK_LABELS)
    sync_bytes = _gauge("wsprof_weight_sync_bytes", _RANK_LABELS)
    wire_s = _gauge("wsprof_weight_sync_wire_seconds", _RANK_LABELS)
    bandwidth = _gauge("wsprof_weight_sync_bandwidth_bytes_per_second", [*_RANK_LABELS, "kind"])
    rollout = _gauge("wsprof_rollout_seconds", _RANK_LABELS)
    ratio = _gauge("wsprof_rollout_ratio", _RANK_LABELS)
    step_s = _gauge("wsprof_step_seconds", _RANK_LABELS)
    calls = _counter("wsprof_collective_calls", [*_RANK_LABELS, "op"])
    call_s = _counter("wsprof_collective_seconds", [*_RANK_LABELS, "op"])
    issued = _counter("wsprof_coverage_issued_collectives", _RANK_LABELS)
    recorded = _counter("wsprof_coverage_recorded_collectives", _RANK_LABELS)
    overhead = _counter("wsprof_overhead_seconds", [*_RANK_LABELS, "part"])
    dropped = _counter("wsprof_records_dropped", [*_RANK_LABELS, "kind"])
    lost = _counter("wsprof_records_lost", _RANK_LABELS)
    errors = _counter("wsprof_internal_errors", _RANK_LABELS)
    readable = _gauge("wsprof_trace_readable", _RANK_LABELS)
    acc = _gauge("wsprof_series_accumulating", [*_RANK_LABELS, "series"])
    shape = _gauge("wsprof_series_shape", [*_RANK_LABELS, "series", "shape"])
    growth = _gauge("wsprof_series_growth_per_step", [*_RANK_LABELS, "series", "unit"])
    judged = _gauge("wsprof_series_judged_steps", [*_RANK_LABELS, "series"])
    budget = snapshot.sync_budget_s
    proj = _gauge("wsprof_weight_sync_projected_step", [*_RANK_LABELS, "threshold_seconds"])
    ranks = latest_per_label(snapshot.ranks)
    for r in ranks:
        lv = [rank_label(r), r.host or ""]
        steps.add_metric(lv, r.steps)
        readable.add_metric(lv, 0 if r.problem else 1)
        row = r.last
        if row is not None:
            step.add_metric(lv, row.step)
            if row.own_sync_s is not None:
                sync.add_metric(lv, row.own_sync_s)
            w = row.wire
            if w is not None and w.bytes > 0:
                sync_bytes.add_metric(lv, w.bytes)
                wire_s.add_metric(lv, w.wire_s)
                for kind, bw in (("bus", w.busbw), ("algorithm", w.algbw)):
                    if bw is not None:
                        bandwidth.add_metric([*lv, kind], bw)
            if row.rollout_s is not None:
                rollout.add_metric(lv, row.rollout_s)
            if row.rollout_share is not None:
                ratio.add_metric(lv, row.rollout_share)
            step_s.add_metric(lv, row.step_s)
        for o in r.ops:
            calls.add_metric([*lv, o.op], o.calls)
            call_s.add_metric([*lv, o.op], o.seconds)
        if r.issued is not None and r.recorded is not None:
            issued.add_metric(lv, r.issued)
            recorded.add_metric(lv, r.recorded)
        if r.hook_s is not None:
            overhead.add_metric([*lv, "hooks"], r.hook_s)
        overhead.add_metric([*lv, "flush"], r.flush_s)
        overhead.add_metric([*lv, "probes"], r.probe_s)
        dropped.add_metric([*lv, "calls"], r.dropped_calls)
        dropped.add_metric([*lv, "records"], r.dropped_records)
        lost.add_metric(lv, r.lost_calls)
        errors.add_metric(lv, r.internal_errors)
        if r.sync is not None:
            acc.add_metric([*lv, WEIGHT_SYNC_S], 1 if r.sync.accumulating else 0)
            shape.add_metric([*lv, WEIGHT_SYNC_S, r.sync.shape], 1)
            growth.add_metric([*lv, WEIGHT_SYNC_S, "seconds"], r.sync.slope_per_step)
            judged.add_metric([*lv, WEIGHT_SYNC_S], r.sync_judged_steps)
            if r.sync.budget_step is not None:
                proj.add_metric([*lv, f"{budget:g}"], r.sync.budget_step)
    # The headline series (the primary process's), other than weight sync (given above).
    a = snapshot.analysis
    primary = snapshot.ranks[0] if snapshot.ranks else None
    if primary is not None and any(r is primary for r in ranks):
        lv = [rank_label(primary), primary.host or ""]
        for res in a.series:
            if res.series.name == WEIGHT_SYNC_S:
                continue
            v = res.verdict
            acc.add_metric([*lv, res.series.name], 1 if v.accumulating else 0)
            shape.add_metric([*lv, res.series.name, v.shape], 1)
            unit = _UNIT_LABELS.get(res.series.unit, "count")
            growth.add_metric([*lv, res.series.name, unit], v.slope_per_step)
            judged.add_metric([*lv, res.series.name], primary.steps)
    out += [step, steps, sync, rollout, ratio, step_s, calls, call_s]
    out += [sync_bytes, wire_s, bandwidth]
    head = a.headline
    if head is not None and head.link_limit_bytes_per_s is not None:
        limit = _gauge("wsprof_link_limit_bytes_per_second", ["link"])
        limit.add_metric([head.link_limit_name or ""], head.link_limit_bytes_per_s)
        out.append(limit)
    out += [acc, shape, growth, judged, proj]
    out += [issued, recorded, overhead, dropped, lost, errors, readable]
    verdict = StateSetMetricFamily(
        "wsprof_verdict",
        FAMILIES["wsprof_verdict"][1],
        {s: s == a.verdict.status for s in VERDICT_STATUSES},
    )
    problems = _gauge("wsprof_problems")
    problems.add_metric([], a.verdict.n_problems)
    findings = _gauge("wsprof_findings", ["severity"])
    for sev in SEVERITIES:
        findings.add_metric([sev], sum(1 for f in a.findings if f.severity == sev))
    refresh = _gauge("wsprof_watch_refresh_seconds", ["part"])
    refresh.add_metric(["read"], snapshot.read_s)
    refresh.add_metric(["analyse"], max(snapshot.refresh_s - snapshot.read_s, 0.0))
    refreshes = _counter("wsprof_watch_refreshes")
    refreshes.add_metric([], snapshot.refreshes)
    rows = _counter("wsprof_watch_rows_read")
    rows.add_metric([], rows_read_total)
    out += [verdict, problems, findings, refresh, refreshes, rows]
    return out


class SnapshotCollector(Collector):
    """A ``prometheus_client`` collector that serves the latest snapshot (set from the watch
    loop, read from the HTTP server's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: WatchSnapshot | None = None
        self._rows_read = 0

    def update(self, snapshot: WatchSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot
            self._rows_read += snapshot.rows_read

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snap, rows = self._snapshot, self._rows_read
        if snap is None:
            return iter(())
        return iter(families(snap, rows))


def registry_for(collector: SnapshotCollector) -> CollectorRegistry:
    """A registry holding only ``collector`` (no process or platform collectors: the page
    describes the run, not the watcher)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def exposition(snapshot: WatchSnapshot, rows_read_total: int | None = None) -> str:
    """The OpenMetrics text of one refresh (what ``/metrics`` serves to an OpenMetrics
    scraper)."""
    from prometheus_client.openmetrics import exposition as om

    c = SnapshotCollector()
    c.update(snapshot)
    if rows_read_total is not None:
        c._rows_read = rows_read_total
    text: Any = om.generate_latest(registry_for(c))  # type: ignore[no-untyped-call]
    return text.decode("utf-8") if isinstance(text, bytes) else str(text)
