"""Machine-readable verdict: ``wsprof analyze --format json``."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from wsprof.analysis.model import Analysis


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item"):  # numpy scalar
        return _clean(v.item())
    return v


def to_dict(analysis: Analysis) -> dict[str, Any]:
    """The JSON document: ``series`` (name, unit, shape, accumulating, confidence,
    slope_per_step, growth_factor_per_step, change_point, projection {step, value}, steps,
    values), ``findings`` (kind, severity, title, evidence, where, next_step), ``steps`` of the
    primary process, ``notes``, ``wrappers`` (the wrapper audit: api, kind, qualname, module,
    file, line, wraps, after_patch, between_s). Non-finite numbers become null."""
    series = []
    for r in analysis.series:
        v = r.verdict
        series.append(
            {
                "name": r.series.name,
                "unit": r.series.unit,
                "shape": v.shape,
                "accumulating": v.accumulating,
                "confidence": v.confidence,
                "slope_per_step": v.slope_per_step,
                "growth_factor_per_step": v.growth_factor_per_step,
                "change_point": v.change_point,
                "projection": None
                if v.projection is None
                else {"step": v.projection.step, "value": v.projection.value},
                "steps": list(r.series.steps),
                "values": list(r.series.values),
            }
        )
    findings = [
        {
            "kind": f.kind,
            "severity": f.severity,
            "title": f.title,
            "evidence": f.evidence,
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
            }
            for s in pa.steps
        ]
    doc: dict[str, Any] = _clean(
        {
            "source": analysis.source,
            "kind": analysis.kind,
            "primary": None if pa is None else pa.label,
            "step_source": None if pa is None else pa.step_source,
            "series": series,
            "findings": findings,
            "steps": steps,
            "notes": list(analysis.notes),
            "wrappers": [dataclasses.asdict(w) for w in analysis.wrappers],
        }
    )
    return doc


def render_json(analysis: Analysis) -> str:
    """:func:`to_dict` as indented JSON text."""
    return json.dumps(to_dict(analysis), indent=2)
