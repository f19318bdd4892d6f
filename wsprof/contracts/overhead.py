"""wsprof's own cost and losses in one process: the ``meta['self']`` record, typed.

The recorder writes ``meta['self']`` at every flush (:mod:`wsprof.capture.recorder`); the trace
reader turns it into one :class:`SelfOverhead` (:func:`self_overhead_from_meta`) that analysis
and reports read as attributes. A trace from an older wsprof (or an edited one) lacks fields or
holds values of the wrong type: those read as zero / unknown, never as an error. The on-disk
record keeps its field names. Pure; stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProbeBudget:
    """What the counter probes cost (``meta['self']['probes']``).

    Attributes:
        spent_ns: CPU time the probes spent, ns.
        share: the budget, a share of wall time (0..1); 0 when not recorded.
        by_probe: per probe, its statistics as recorded (``runs``, ``off``, ...).
        budget_fraction: the share of wall time the probes were allowed (0..1).
    """

    spent_ns: float = 0.0
    share: float = 0.0
    by_probe: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    budget_fraction: float = 0.0

    @property
    def spent_s(self) -> float:
        """CPU time the probes spent, s."""
        return self.spent_ns / 1e9

    @property
    def wall_s(self) -> float:
        """Wall time the budget was measured against, s (0 without a share)."""
        return self.spent_s / self.share if self.share > 0 else 0.0


@dataclass(frozen=True)
class SelfOverhead:
    """wsprof's own cost and what it dropped or lost in one process.

    Attributes:
        dropped_calls: calls a full capture buffer refused.
        dropped_records: records (of any kind) the capture buffer refused.
        dropped_by_step: step -> calls refused in it (steps with none left out).
        lost_calls: calls lost to failed writes.
        forgotten_async: async calls whose completion was never observed.
        internal_errors: wsprof's internal errors, caught.
        write_errors: trace writes that failed.
        journal_write_errors: journal writes that failed.
        flush_ns_total: wall time spent flushing to the trace, ns.
        flush_cpu_ns_total: CPU time spent flushing, ns.
        hook_ns_per_call: a hook's own cost per call measured at patch time, ns; None when not
            measured.
        ring_records: the capture buffer's capacity, records; None when not recorded.
        native_hooks: the compiled hooks ran.
        probes: the counter probes' cost; None without a sampler.
        recorded: the trace holds a ``meta['self']`` record at all.
    """

    dropped_calls: int = 0
    dropped_records: int = 0
    dropped_by_step: dict[int, int] = field(default_factory=dict, hash=False)
    lost_calls: int = 0
    forgotten_async: int = 0
    internal_errors: int = 0
    write_errors: int = 0
    journal_write_errors: int = 0
    flush_ns_total: float = 0.0
    flush_cpu_ns_total: float = 0.0
    hook_ns_per_call: int | None = None
    ring_records: int | None = None
    native_hooks: bool = False
    probes: ProbeBudget | None = None
    recorded: bool = False

    @property
    def flush_s(self) -> float:
        """Wall time spent flushing to the trace, s."""
        return self.flush_ns_total / 1e9

    def to_meta(self) -> dict[str, Any]:
        """The on-disk ``meta['self']`` record the recorder writes at every flush (what
        :func:`self_overhead_from_meta` reads back; ``recorded`` is not written)."""
        out: dict[str, Any] = {
            "dropped_calls": self.dropped_calls,
            "dropped_records": self.dropped_records,
            "dropped_by_step": {str(k): v for k, v in sorted(self.dropped_by_step.items())},
            "lost_calls": self.lost_calls,
            "forgotten_async": self.forgotten_async,
            "internal_errors": self.internal_errors,
            "write_errors": self.write_errors,
            "journal_write_errors": self.journal_write_errors,
            "flush_ns_total": self.flush_ns_total,
            "flush_cpu_ns_total": self.flush_cpu_ns_total,
            "hook_ns_per_call": self.hook_ns_per_call,
            "ring_records": self.ring_records,
            "native_hooks": self.native_hooks,
        }
        if self.probes is not None:
            p = self.probes
            out["probes"] = {
                "budget_fraction": p.budget_fraction,
                "share": p.share,
                "spent_ns": p.spent_ns,
                "by_probe": p.by_probe,
            }
        return out


def _num(v: Any, default: float = 0.0) -> float:
    """A finite number from an untrusted record (bools and text are not numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return default
    f = float(v)
    return f if math.isfinite(f) else default


def _int(v: Any, default: int = 0) -> int:
    return int(_num(v, default))


def _dropped_by_step(raw: Any) -> dict[int, int]:
    out: dict[int, int] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            try:
                n = int(v)
                if n > 0:
                    out[int(k)] = n
            except (TypeError, ValueError, OverflowError):
                continue
    return out


def _probes(raw: Any) -> ProbeBudget | None:
    if not isinstance(raw, dict):
        return None
    by = raw.get("by_probe")
    by_probe = (
        {str(k): v for k, v in by.items() if isinstance(v, dict)} if isinstance(by, dict) else {}
    )
    return ProbeBudget(
        spent_ns=_num(raw.get("spent_ns")),
        share=_num(raw.get("share")),
        by_probe=by_probe,
        budget_fraction=_num(raw.get("budget_fraction")),
    )


def self_overhead_from_meta(meta: dict[str, Any]) -> SelfOverhead:
    """The typed ``meta['self']`` of a trace's metadata.

    Args:
        meta: the trace's metadata (``ProcessTrace.meta``).

    Returns:
        Its :class:`SelfOverhead`; every field missing or of the wrong type reads as zero
        (None where "unknown" differs from zero); an empty record without ``meta['self']``.
    """
    own = meta.get("self")
    if not isinstance(own, dict):
        return SelfOverhead()
    per_call = _num(own.get("hook_ns_per_call"), -1)
    ring = own.get("ring_records")
    return SelfOverhead(
        dropped_calls=_int(own.get("dropped_calls")),
        dropped_records=_int(own.get("dropped_records")),
        dropped_by_step=_dropped_by_step(own.get("dropped_by_step")),
        lost_calls=_int(own.get("lost_calls")),
        forgotten_async=_int(own.get("forgotten_async")),
        internal_errors=_int(own.get("internal_errors")),
        write_errors=_int(own.get("write_errors")),
        journal_write_errors=_int(own.get("journal_write_errors")),
        flush_ns_total=_num(own.get("flush_ns_total")),
        flush_cpu_ns_total=_num(own.get("flush_cpu_ns_total")),
        hook_ns_per_call=int(per_call) if per_call >= 0 else None,
        ring_records=ring if isinstance(ring, int) and not isinstance(ring, bool) else None,
        native_hooks=own.get("native_hooks") is True,
        probes=_probes(own.get("probes")),
        recorded=True,
    )
