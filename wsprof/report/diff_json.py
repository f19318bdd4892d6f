"""``wsprof diff --format json``: the diff for machines."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from wsprof.analysis.diff import DiffResult, ItemDiff, SideSummary
from wsprof.report.jsonout import json_safe

#: Bumped when a field of the document changes meaning (written as ``schema_version``, and as
#: ``version`` for readers of version 2).
DIFF_JSON_VERSION = 2
#: The ``schema_version`` of the document (the same number as :data:`DIFF_JSON_VERSION`).
SCHEMA_VERSION = DIFF_JSON_VERSION


def _side(s: SideSummary) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    d["step_range"] = (
        None if s.step_range is None else {"start": s.step_range[0], "stop": s.step_range[1]}
    )
    return d


def _ref(i: ItemDiff) -> dict[str, str]:
    return {"kind": i.kind, "name": i.name}


def diff_to_dict(result: DiffResult) -> dict[str, Any]:
    """The JSON document.

    ``schema_version`` (:data:`SCHEMA_VERSION`) and ``version`` (the same); ``basis``:
    ``step`` (both sides per step) or ``second`` (a run side without steps: both sides as
    whole-run rates, every ``s_per_step``/``calls_per_step`` and the
    headline times per second of the wall time each side covers, latency per call as is);
    ``verdict`` (lines, the headline first); ``before`` and ``after`` (role, source, kind,
    process, step_source, step_range {start, stop} (null ends open) or null, steps, n_calls,
    n_samples, notes, wall_s); ``per_step`` (per ``basis``: ``step_s`` median in s, null with
    the ``second`` basis; ``weight_sync_s``, the one weight-sync figure, total / steps in s
    (no item repeats it); ``rollout_share`` median 0..1; ``collective_s`` mean in s;
    ``sync_bytes`` median bytes per weight sync; ``sync_bandwidth_bytes_per_s`` its median
    bandwidth (bus, else algorithm); each {before, after, change, rel_change}); ``items``
    (kind, name, detail, ``s_per_step`` s,
    ``calls_per_step``, ``median_us`` µs, ``share`` 0..1, ``value`` in ``unit``: each a
    {before, after, change, rel_change} or null), largest absolute change of time per step
    first; ``faster``, ``slower``, ``moved_to`` ([{kind, name}], most first); ``notes``.
    Non-finite numbers become null.
    """
    r = result
    doc = {
        "schema_version": SCHEMA_VERSION,
        "version": DIFF_JSON_VERSION,
        "basis": r.basis,
        "verdict": list(r.verdict),
        "before": _side(r.before),
        "after": _side(r.after),
        "per_step": {
            "step_s": dataclasses.asdict(r.step_s),
            "weight_sync_s": dataclasses.asdict(r.weight_sync_s),
            "rollout_share": dataclasses.asdict(r.rollout_share),
            "collective_s": dataclasses.asdict(r.collective_s),
            "sync_bytes": dataclasses.asdict(r.sync_bytes),
            "sync_bandwidth_bytes_per_s": dataclasses.asdict(r.sync_bandwidth),
        },
        "items": [dataclasses.asdict(i) for i in r.items],
        "faster": [_ref(i) for i in r.faster],
        "slower": [_ref(i) for i in r.slower],
        "moved_to": [_ref(i) for i in r.moved_to],
        "notes": list(r.notes),
    }
    cleaned: dict[str, Any] = json_safe(doc)
    return cleaned


def render_diff_json(result: DiffResult) -> str:
    """The JSON document as text (see :func:`diff_to_dict`)."""
    return json.dumps(diff_to_dict(result), indent=2, ensure_ascii=False)
