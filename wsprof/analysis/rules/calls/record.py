"""The evidence of ``call_count_growth`` and ``per_call_growth`` findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wsprof.analysis.chain import fmt_call
from wsprof.analysis.evidence import Evidence, unit
from wsprof.analysis.model import Finding


@dataclass(frozen=True, kw_only=True)
class CallCountEvidence(Evidence):
    """More collective calls every step: the Theil-Sen slope of the calls per step, the cost
    model's fixed cost of a call (None without a model), and what bucketing would save
    (:func:`bucketing_estimate`: ``buckets``, ``calls``, ``saved_s``; None when nothing)."""

    slope_per_step: float = field(metadata=unit("count"))
    fixed_us_per_call: float | None = field(metadata=unit("us"))
    bucketing: dict[str, float] | None


@dataclass(frozen=True, kw_only=True)
class OpGrowth(Evidence):
    """One collective's median time per call that grows: first and last step, and its slope."""

    first_us: float = field(metadata=unit("us"))
    last_us: float = field(metadata=unit("us"))
    slope_us_per_step: float = field(metadata=unit("us"))


@dataclass(frozen=True, kw_only=True)
class PerCallEvidence(Evidence):
    """Each collective call gets slower: each op's growth (steepest first) and what bucketing
    the calls would save. Its JSON is keyed by op name, ``bucketing`` last."""

    ops: dict[str, OpGrowth] = field(default_factory=dict)
    bucketing: dict[str, float] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            **{op: growth.as_dict() for op, growth in self.ops.items()},
            "bucketing": self.bucketing,
        }


def _per_op(f: Finding) -> list[tuple[str, OpGrowth]]:
    """``(op, its first and last median per call)`` of a per-call finding's evidence."""
    return list(f.evidence.ops.items()) if isinstance(f.evidence, PerCallEvidence) else []


def _first_last(d: OpGrowth) -> str:
    return f"{fmt_call(d.first_us)} -> {fmt_call(d.last_us)}"


def _bucketing(f: Finding) -> dict[str, float] | None:
    """What bucketing would save, by a call-count or per-call finding's evidence."""
    ev = f.evidence
    return ev.bucketing if isinstance(ev, (CallCountEvidence, PerCallEvidence)) else None
