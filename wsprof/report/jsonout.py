"""Machine-readable verdict: ``wsprof analyze --format json``."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from wsprof.analysis.coverage_model import Coverage
from wsprof.analysis.evidence import evidence_rows
from wsprof.analysis.headline import headline
from wsprof.analysis.kinds import ACCUMULATING_KINDS
from wsprof.analysis.model import (
    Analysis,
    Diagnosis,
    GrowthVerdict,
    Headline,
    Link,
    RankSeries,
    StepRow,
)

#: Version of the ``wsprof analyze --format json`` document: bumped when a field is removed or
#: changes meaning (added fields keep it). Read it before anything else. 2: ``diagnoses``;
#: ``verdict.n_problems`` counts causes (diagnoses at warning or above), ``verdict.n_findings``
#: the findings at warning or above (what ``n_problems`` counted in 1); findings have an ``id``.
SCHEMA_VERSION = 2


def json_safe(v: Any) -> Any:
    """JSON-safe: non-finite floats become null, tuples lists, numpy scalars Python ones."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if hasattr(v, "item"):  # numpy scalar
        return json_safe(v.item())
    return v


def _verdict(v: GrowthVerdict | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "shape": v.shape,
        "accumulating": v.accumulating,
        "confidence": v.confidence,
        "slope_per_step": v.slope_per_step,
    }


def _rank(r: RankSeries) -> dict[str, Any]:
    return {
        "label": r.label,
        "rank": r.rank,
        "host": r.host,
        "pid": r.pid,
        "step_source": r.step_source,
        "clock": r.clock,
        "wrapper": r.wrapper,
        "steps": list(r.steps),
        "weight_sync_s": list(r.weight_sync_s),
        "step_s": list(r.step_s),
        "between_layers_s": list(r.between_layers_s),
        "start_s": list(r.start_s),
        "sync_start_s": list(r.sync_start_s),
        "median_weight_sync_s": r.median_weight_sync_s,
        "median_step_s": r.median_step_s,
        "sync_lag_s": r.sync_lag_s,
        "world": r.world,
        "sync": _verdict(r.sync),
        "between": _verdict(r.between),
    }


def _wire(s: StepRow) -> dict[str, Any] | None:
    """A step's transfers (:attr:`StepRow.wire`), units in the keys; None without a sync."""
    w = s.wire
    if w is None:
        return None
    return {
        "bytes": w.bytes,
        "bus_bytes": w.bus_bytes,
        "wire_s": w.wire_s,
        "algbw_bytes_per_s": w.algbw,
        "busbw_bytes_per_s": w.busbw,
        "outside_transfers_s": s.outside_transfers_s,
        "n_calls": w.n_calls,
        "n_unknown": w.n_unknown,
        "groups": list(w.groups),
        "ops": [
            {
                "op": o.op,
                "n_calls": o.n_calls,
                "bytes": o.bytes,
                "bus_bytes": o.bus_bytes,
                "wire_s": o.wire_s,
                "n_unknown": o.n_unknown,
            }
            for o in w.ops
        ],
    }


def _headline(h: Headline) -> dict[str, Any]:
    d = dataclasses.asdict(h)
    d.pop("weight_sync_result", None)  # the series itself is in ``series``
    return d


def to_dict(analysis: Analysis) -> dict[str, Any]:
    """The JSON document: ``schema_version`` (:data:`SCHEMA_VERSION`), ``headline`` (the two
    numbers, computed once by :func:`wsprof.analysis.headline.headline_of`: source, process,
    step_source, n_steps, step_median_s, rollout_share_median/first/last (0..1),
    weight_sync_median_s/first_s/last_s, own_sync_median_s, own_sync_last_s,
    own_sync_last_step_s, sync_wait_median_s (s), weight_sync_share_median (0..1); the third
    number: sync_bytes_median (bytes, NCCL tests' sizes), sync_wire_median_s (s),
    sync_bandwidth_median (bytes/s; bandwidth_kind busbw or algbw), link_limit_bytes_per_s
    (null: unknown), link_limit_name, link_limit_why, link_share (0..1),
    outside_transfers_share_median (0..1)),
    ``verdict`` {status problems | no_problem | inconclusive, n_problems (causes: diagnoses at
    warning or above), n_findings (findings at warning or above), reasons}, ``diagnoses``
    (most severe first: id D1.., cause (wrapper, call_count, per_call, gaps, outlier_rank,
    shared_buckets, sampled, unexplained, finding), severity, confidence 0..1, confidence_word,
    title, symptom,
    where (or null), why [...]: links {role, text, finding_ids, rows [{label, value}]},
    next_step, missing (one line per missing link), finding_ids, symptom_series,
    culprit_frame, culprit_counter, process), ``series`` (name, unit, kind (duration, bytes,
    resource_count, monotonic_counter, quality, lr_schedule, rate, other; null when not
    classified), judged (its kind can
    accumulate), shape, accumulating, confidence, slope_per_step (per logged step),
    growth_factor_per_step, change_point (a position in steps/values), change_point_step,
    outlier_steps, spike_steps and spike_period_steps (periodic spikes left out of the trend;
    null period when none), projection {step, value, model, fit_first_step, fit_last_step}, steps,
    values), ``findings`` (id F1.., kind, severity, title, evidence, rows (the evidence as
    [{label, value}] in units), where, next_step), ``steps`` of the primary process (with
    sync_wait_s: waiting for slower ranks, own_sync_s: weight sync less that wait, and wire:
    the sync's transfers {bytes, bus_bytes, wire_s, algbw_bytes_per_s, busbw_bytes_per_s,
    outside_transfers_s, n_calls, n_unknown, groups, ops [{op, n_calls, bytes, bus_bytes,
    wire_s, n_unknown}]} or null), ``notes``,
    ``wrappers`` (the wrapper audit: api, kind, qualname, module, file, line, wraps,
    after_patch, between_s), ``windows`` of the primary process (its py-spy sampling windows:
    index, t_start_ns, t_end_ns, n_samples, n_active, top_frame {frame, samples, total, share}
    or null, common_frame, phase_shares, phase_samples, rollout_share, weight_sync_share),
    ``phase_source`` (where the phase patterns came from) and ``frame_shift`` (first windows
    against last: k, n_windows, early_total, late_total, gained and lost [{frame, early_share,
    late_share, change}]), ``ranks`` (every process with steps: label, rank, host, pid,
    step_source, clock, wrapper, steps, weight_sync_s, step_s, between_layers_s, start_s and
    sync_start_s on the run clock, median_weight_sync_s, median_step_s, sync_lag_s, and the
    verdicts ``sync`` and ``between`` {shape, accumulating, confidence, slope_per_step} or
    null), ``coverage`` (the audit of c10d's issued collectives against what was recorded:
    status complete | incomplete | unknown | not_audited, lines (what to say first), groups
    [{label, rank, group, backend, issued, recorded, missing, first_step, last_step,
    short_steps}], not_audited; null for a series file). Non-finite numbers become null.
    """
    series = []
    for r in analysis.series:
        v = r.verdict
        series.append(
            {
                "name": r.series.name,
                "unit": r.series.unit_label,
                "kind": r.series.kind,
                "judged": r.series.kind is None or r.series.kind in ACCUMULATING_KINDS,
                "shape": v.shape,
                "accumulating": v.accumulating,
                "confidence": v.confidence,
                "slope_per_step": v.slope_per_step,
                "growth_factor_per_step": v.growth_factor_per_step,
                "change_point": v.change_point,
                "change_point_step": None
                if v.change_point is None
                else r.series.steps[v.change_point],
                "outlier_steps": list(v.outlier_steps),
                "spike_steps": list(v.spike_steps),
                "spike_period_steps": v.spike_period,
                "projection": None
                if v.projection is None
                else {
                    "step": v.projection.step,
                    "value": v.projection.value,
                    "model": v.projection.model,
                    "fit_first_step": v.projection.fit_first_step,
                    "fit_last_step": v.projection.fit_last_step,
                },
                "steps": list(r.series.steps),
                "values": list(r.series.values),
            }
        )
    findings = [
        {
            "id": f.id,
            "kind": f.kind,
            "severity": f.severity,
            "title": f.title,
            "evidence": f.evidence.as_dict(),
            "rows": [
                {"label": k, "value": v}
                for k, v in evidence_rows(
                    f.evidence, {r.series.name: r.series for r in analysis.series}
                )
            ],
            "where": f.where,
            "next_step": f.next_step,
        }
        for f in analysis.findings
    ]
    pa = analysis.primary
    steps = []
    if pa is not None:
        steps = [
            {
                "step": s.step,
                "step_s": s.step_s,
                "rollout_s": s.rollout_s,
                "train_s": s.train_s,
                "weight_sync_s": s.weight_sync_s,
                "other_s": s.other_s,
                "rollout_share": s.rollout_share,
                "n_calls": s.n_calls,
                "between_layers_s": s.between_layers_s,
                "sync_gap_s": s.sync_gap_s,
                "sync_wait_s": s.sync_wait_s,
                "own_sync_s": s.own_sync_s,
                "wire": _wire(s),
            }
            for s in pa.steps
        ]
    windows = []
    shift = None
    if pa is not None:
        for i, w in enumerate(pa.windows):
            top = w.top_frame
            windows.append(
                {
                    "index": i,
                    "t_start_ns": w.t_start_ns,
                    "t_end_ns": w.t_end_ns,
                    "n_samples": w.n_samples,
                    "n_active": w.n_active,
                    "top_frame": None
                    if top is None
                    else {
                        "frame": top.frame,
                        "samples": top.samples,
                        "total": top.total,
                        "share": top.share,
                    },
                    "common_frame": w.common_frame,
                    "phase_shares": dict(w.phase_shares),
                    "phase_samples": dict(w.phase_samples),
                    "rollout_share": w.rollout_share,
                    "weight_sync_share": w.weight_sync_share,
                }
            )
        if pa.shift is not None:
            sh = pa.shift

            def frames(items: Any) -> list[dict[str, Any]]:
                return [
                    {
                        "frame": f.frame,
                        "early_share": f.early_share,
                        "late_share": f.late_share,
                        "change": f.change,
                    }
                    for f in items
                ]

            shift = {
                "k": sh.k,
                "n_windows": sh.n_windows,
                "early_total": sh.early_total,
                "late_total": sh.late_total,
                "gained": frames(sh.gained),
                "lost": frames(sh.lost),
            }
    doc: dict[str, Any] = json_safe(
        {
            "schema_version": SCHEMA_VERSION,
            "source": analysis.source,
            "kind": analysis.kind,
            "headline": _headline(headline(analysis)),
            "verdict": {
                "status": analysis.verdict.status,
                "n_problems": analysis.verdict.n_problems,
                "n_findings": analysis.verdict.n_findings,
                "reasons": list(analysis.verdict.reasons),
            },
            "diagnoses": [_diagnosis(d) for d in analysis.diagnoses],
            "primary": None if pa is None else pa.label,
            "step_source": None if pa is None else pa.step_source,
            "series": series,
            "findings": findings,
            "steps": steps,
            "notes": list(analysis.notes),
            "wrappers": [dataclasses.asdict(w) for w in analysis.wrappers],
            "windows": windows,
            "phase_source": None if pa is None else pa.phase_source,
            "frame_shift": shift,
            "ranks": [_rank(r) for r in analysis.ranks],
            "worlds": [dataclasses.asdict(w) for w in analysis.worlds],
            "coverage": _coverage(analysis.coverage),
        }
    )
    return doc


def _link(link: Link | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {
        "role": link.role,
        "text": link.text,
        "finding_ids": list(link.finding_ids),
        "rows": [{"label": k, "value": v} for k, v in link.rows],
    }


def _diagnosis(d: Diagnosis) -> dict[str, Any]:
    return {
        "id": d.id,
        "cause": d.cause,
        "severity": d.severity,
        "confidence": d.confidence,
        "confidence_word": d.confidence_word,
        "title": d.title,
        "symptom": _link(d.symptom),
        "where": _link(d.where),
        "why": [_link(w) for w in d.why],
        "next_step": d.next_step,
        "missing": list(d.missing),
        "finding_ids": list(d.finding_ids),
        "symptom_series": d.symptom_series,
        "culprit_frame": d.culprit_frame,
        "culprit_counter": d.culprit_counter,
        "process": d.process,
    }


def _coverage(c: Coverage | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "status": c.status,
        "lines": c.lines(),
        "groups": [
            {**dataclasses.asdict(g), "missing": g.missing, "short_steps": list(g.short_steps)}
            for g in c.groups
        ],
        "not_audited": list(c.not_audited),
    }


def render_json(analysis: Analysis) -> str:
    """:func:`to_dict` as indented JSON text."""
    return json.dumps(to_dict(analysis), indent=2)
