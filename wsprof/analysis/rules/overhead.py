"""wsprof's own cost, dropped records and internal errors."""

from __future__ import annotations

from dataclasses import dataclass, field

from wsprof.analysis.evidence import Evidence, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Severity
from wsprof.analysis.rules.base import Rule
from wsprof.contracts.overhead import SelfOverhead as OwnOverhead
from wsprof.contracts.units import fmt_duration


@dataclass(frozen=True, kw_only=True)
class SelfOverheadEvidence(Evidence):
    """wsprof's own cost summed over the processes: the writer's background time, the hooks'
    time (hook cost per call, measured at patch, times the calls), each process's hook cost per
    call, the counter probes' time and share of wall time (None without a budgeted probe),
    what was dropped, lost, failed or forgotten, and the first internal errors."""

    flush_s: float = field(metadata=unit("s"))
    hooks_s: float = field(metadata=unit("s"))
    hook_ns_per_call: list[int] = field(metadata=unit("ns"))
    probe_s: float = field(metadata=unit("s"))
    probe_share: float | None = field(metadata=unit("share"))
    dropped_calls: int = field(metadata=unit("count"))
    internal_errors: int = field(metadata=unit("count"))
    write_errors: int = field(metadata=unit("count"))
    forgotten_async: int = field(metadata=unit("count"))
    lost_calls: int = field(metadata=unit("count"))
    first_errors: list[str]


class SelfOverhead(Rule):
    """wsprof's own cost and anything it dropped or failed to do."""

    kind = "self_overhead"
    description = "wsprof's own cost, dropped records and internal errors"

    def match(self, facts: Facts) -> list[Finding]:
        flush_s = hooks_s = steps_s = probe_s = wall_s = 0.0
        dropped = internal = write = forgotten = lost = 0
        hook_ns: list[int] = []
        for pa in facts.processes:
            own = pa.self_overhead
            flush_s += own.flush_s
            dropped += own.dropped_calls
            internal += own.internal_errors
            write += own.write_errors
            forgotten += own.forgotten_async
            lost += own.lost_calls
            if own.hook_ns_per_call is not None:
                hook_ns.append(own.hook_ns_per_call)
                # every recorded call went through a hook (watch keeps the count, not ops)
                hooks_s += own.hook_ns_per_call * pa.calls.n_total / 1e9
            steps_s += sum(r.step_s for r in pa.steps)
            if own.probes is not None and own.probes.share > 0:
                probe_s += own.probes.spent_s
                wall_s += own.probes.wall_s
        if all(pa.self_overhead == OwnOverhead() for pa in facts.processes):
            return []  # nothing of wsprof's own (Flight Recorder dumps)
        bad = dropped or internal or write or lost
        title = f"wsprof wrote its traces in {flush_s:.2f} s of background time"
        if hook_ns:
            title = (
                f"wsprof's hooks cost about {fmt_duration(hooks_s)} in all "
                f"({max(hook_ns) / 1e3:.1f} µs per call, measured at patch)"
            )
            if steps_s > 0:
                title += f", {hooks_s / steps_s:.2%} of step time"
            title += f"; its writer {flush_s:.2f} s in the background"
        if wall_s > 0:
            title += (
                f"; counter probes {fmt_duration(probe_s)} ({probe_s / wall_s:.2%} of wall time)"
            )
        if bad:
            title += (
                f"; dropped {dropped} calls (queue full), lost {lost} (failed writes), "
                f"{internal} internal errors, {write} write errors"
            )
        return [
            Finding(
                self.kind,
                Severity.WARNING if bad else Severity.INFO,
                title,
                SelfOverheadEvidence(
                    flush_s=flush_s,
                    hooks_s=hooks_s,
                    hook_ns_per_call=hook_ns,
                    probe_s=probe_s,
                    probe_share=probe_s / wall_s if wall_s else None,
                    dropped_calls=dropped,
                    internal_errors=internal,
                    write_errors=write,
                    forgotten_async=forgotten,
                    lost_calls=lost,
                    first_errors=facts.internal_errors[:5],
                ),
                None,
                "report internal errors to wsprof; training was not affected"
                if bad
                else "nothing to do",
            )
        ]
