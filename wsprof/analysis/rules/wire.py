"""The weight sync against the wire (issue 31): bytes per sync that grow, a sync that grows
while its bytes do not, a sync mostly outside its transfers, and transfers too small to use
the link (:mod:`wsprof.analysis.wire` measures; the headline carries the link limit)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from wsprof.analysis.bucketing import bucketing_estimate, bucketing_text
from wsprof.analysis.chain import Cause, ChainContext, Draft, function_of, short
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Link, ProcessAnalysis, Severity, SyncWire
from wsprof.analysis.rules.base import CRITICAL_GROWTH_RATIO, Rule
from wsprof.contracts.series import SYNC_BYTES, WEIGHT_SYNC_S
from wsprof.contracts.units import fmt_bytes_decimal, fmt_duration, fmt_rate, fmt_share_of

#: Share of each weight sync outside transfers at or above which the wire is said not to be
#: the problem: most of the sync is work between the transfers (serialization, RPCs,
#: barriers, waiting), which a faster link would not shorten.
OUTSIDE_SHARE = 0.5
#: ... and the bandwidth below this share of the link's limit (when the limit is known): a
#: sync near the link's limit is bound by it, however much else it does.
FAR_FROM_LIMIT = 0.5
#: Median bytes per transfer below which calls are too small to use a link: NCCL's own
#: tests reach a link's bandwidth from a few MB per call on, and per-parameter calls of a
#: few KB pay their fixed cost per call instead (nccl-tests' size sweeps).
TINY_CALL_BYTES = 1 << 20
#: Fewest transfers per sync for tiny calls to matter (a handful of small calls is no pattern).
TINY_MIN_CALLS = 16
#: A weight sync that grows while its bytes stay within this relative spread: not a payload.
FLAT_BYTES_SPREAD = 0.05


@dataclass(frozen=True, kw_only=True)
class BytesGrowthEvidence(Evidence):
    """Bytes per weight sync that grow: first and last, the fitted slope, the op whose bytes
    grew most (first step against last), and the time the added bytes cost per step at the
    sync's median bandwidth."""

    first_bytes: float = field(metadata=unit("bytes"))
    last_bytes: float = field(metadata=unit("bytes"))
    slope_bytes_per_step: float = field(metadata=unit("bytes"))
    op: str | None
    op_first_bytes: float | None = optional("bytes")
    op_last_bytes: float | None = optional("bytes")
    added_s_per_step: float | None = optional("s")
    process: str | None = None

    def process_named(self) -> str | None:
        return self.process


@dataclass(frozen=True, kw_only=True)
class FlatBytesEvidence(Evidence):
    """The weight sync grows while its bytes stay flat: the bytes, and the bandwidth first and
    last step."""

    median_bytes: float = field(metadata=unit("bytes"))
    first_bandwidth_bytes_per_s: float | None = optional()
    last_bandwidth_bytes_per_s: float | None = optional()


@dataclass(frozen=True, kw_only=True)
class OutsideEvidence(Evidence):
    """Most of each weight sync outside its transfers: the share, the bandwidth, the link's
    limit and the share of it (None when unknown), and the sync's caller."""

    median_outside_share: float = field(metadata=unit("share"))
    bandwidth_bytes_per_s: float | None = optional()
    limit_bytes_per_s: float | None = optional()
    limit_share: float | None = optional("share")
    limit: str | None = None
    caller: str | None = None


@dataclass(frozen=True, kw_only=True)
class TinyCallsEvidence(Evidence):
    """Transfers too small to use the link: transfers per sync, median bytes per transfer, and
    what bucketing them would save per step (None when bucketing would not reduce them), each
    avoided call costing its median time on the wire."""

    calls_per_sync: float = field(metadata=unit("count"))
    median_call_bytes: float = field(metadata=unit("bytes"))
    saved_s_per_step: float | None = optional("s")
    buckets: float | None = optional("count")


def _wires(pa: ProcessAnalysis | None) -> list[SyncWire]:
    if pa is None:
        return []
    return [r.wire for r in pa.steps if r.wire is not None and r.wire.bytes > 0]


def _grown_op(wires: list[SyncWire]) -> tuple[str, float, float] | None:
    """The op whose bytes grew most, first sync against last: (op, first, last)."""
    first = {o.op: o.bytes for o in wires[0].ops}
    last = {o.op: o.bytes for o in wires[-1].ops}
    best = max(
        ((op, first.get(op, 0), b) for op, b in last.items()),
        key=lambda x: x[2] - x[1],
        default=None,
    )
    return best if best is not None and best[2] > best[1] else None


class PayloadCause(Cause):
    """Bytes per weight sync that grow: the sync moves more every step. A growing call count
    with it is the same cause (a list of tensors that grows): the bytes join that chain."""

    kind = "sync_bytes_growth"
    cause = "payload"
    order = 25

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        ev = f.evidence
        if not isinstance(ev, BytesGrowthEvidence):
            return None
        rows: list[tuple[str, str]] = [
            (
                "bytes per sync",
                f"{fmt_bytes_decimal(ev.first_bytes)} -> {fmt_bytes_decimal(ev.last_bytes)}",
            ),
            ("slope", f"+{fmt_bytes_decimal(ev.slope_bytes_per_step)}/step"),
        ]
        text = (
            f"each weight sync moves more bytes: {fmt_bytes_decimal(ev.first_bytes)} -> "
            f"{fmt_bytes_decimal(ev.last_bytes)} (+{fmt_bytes_decimal(ev.slope_bytes_per_step)}"
            "/step)"
        )
        if ev.op is not None and ev.op_first_bytes is not None and ev.op_last_bytes is not None:
            text += (
                f", in {ev.op} ({fmt_bytes_decimal(ev.op_first_bytes)} -> "
                f"{fmt_bytes_decimal(ev.op_last_bytes)})"
            )
            rows.append(("op", ev.op))
        site = ctx.facts.primary.sync_site if ctx.facts.primary is not None else None
        if site:
            text += f"; sent by {site}"
            rows.append(("caller", site))
        count = next((d for d in drafts if d.cause == "call_count" and d.where), None)
        if count is not None and count.where is not None:
            count.findings.append(f)
            count.where = Link(
                "where",
                f"{count.where.text}; {text}",
                (*count.where.finding_ids, f.id),
                (*count.where.rows, *rows),
            )
            return None
        return Draft(
            self.cause,
            f.title,
            [f],
            where=Link("where", text, (f.id,), tuple(rows)),
            places=(short(function_of(site)),) if site else (),
            explains=ev.added_s_per_step or 0.0,
            process=ev.process or ctx.process,
        )

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        f = self.own(d)
        return f.next_step if f is not None else ""

    def tracks(self, series: str) -> bool:
        return series == SYNC_BYTES


class SyncWireRule(Rule):
    """The weight sync's bytes, bandwidth and time outside transfers, against each other and
    the link's limit."""

    kind = "sync_bytes_growth"
    causes = (PayloadCause(),)
    description = (
        "bytes per weight sync that grow; a sync that grows at flat bytes; a sync mostly "
        "outside its transfers; transfers too small to use the link"
    )

    def match(self, facts: Facts) -> list[Finding]:
        pa = facts.primary
        wires = _wires(pa)
        if pa is None or not wires:
            return []
        out: list[Finding] = []
        nbytes = facts.series.get(SYNC_BYTES)
        sync = facts.series.get(WEIGHT_SYNC_S)
        bws = [w.busbw if w.busbw is not None else w.algbw for w in wires]
        if nbytes is not None and nbytes.verdict.accumulating and len(nbytes.series.values) >= 3:
            out.append(
                _bytes_growth(pa, nbytes.series.values, nbytes.verdict.slope_per_step, wires, bws)
            )
        elif sync is not None and sync.verdict.accumulating and nbytes is not None:
            vals = nbytes.series.values
            med = statistics.median(vals)
            if med > 0 and (max(vals) - min(vals)) <= FLAT_BYTES_SPREAD * med:
                out.append(
                    Finding(
                        kind="sync_bytes_flat",
                        severity=Severity.INFO,
                        title=(
                            f"the weight sync grows while its bytes stay at "
                            f"{fmt_bytes_decimal(med)}: not a bigger payload; bandwidth "
                            f"{fmt_rate(bws[0])} -> {fmt_rate(bws[-1])}"
                        ),
                        evidence=FlatBytesEvidence(
                            median_bytes=med,
                            first_bandwidth_bytes_per_s=bws[0],
                            last_bandwidth_bytes_per_s=bws[-1],
                        ),
                        where=None,
                        next_step=(
                            "the same bytes take longer each step: look at what the sync does "
                            "around its transfers (the diagnoses above) and at the link"
                        ),
                    )
                )
        head = facts.headline
        outside = head.outside_transfers_share_median if head is not None else None
        share = head.link_share if head is not None else None
        if (
            outside is not None
            and outside >= OUTSIDE_SHARE
            and (share is None or share < FAR_FROM_LIMIT)
        ):
            out.append(_outside(facts, outside, share))
        tiny = _tiny(pa, wires)
        if tiny is not None:
            out.append(tiny)
        return out


def _bytes_growth(
    pa: ProcessAnalysis,
    values: tuple[float, ...],
    slope: float,
    wires: list[SyncWire],
    bws: list[float | None],
) -> Finding:
    first, last = values[0], values[-1]
    grown = _grown_op(wires)
    known = [b for b in bws if b]
    added = slope / statistics.median(known) if known else None
    severity = (
        Severity.CRITICAL
        if first > 0 and last / first >= CRITICAL_GROWTH_RATIO
        else Severity.WARNING
    )
    op_text = f", most in {grown[0]}" if grown else ""
    cost = f", about {fmt_duration(added)} more sync per step" if added else ""
    return Finding(
        kind="sync_bytes_growth",
        severity=severity,
        title=(
            f"bytes per weight sync grow: {fmt_bytes_decimal(first)} -> "
            f"{fmt_bytes_decimal(last)} (+{fmt_bytes_decimal(slope)}/step{op_text}{cost})"
        ),
        evidence=BytesGrowthEvidence(
            first_bytes=first,
            last_bytes=last,
            slope_bytes_per_step=slope,
            op=grown[0] if grown else None,
            op_first_bytes=grown[1] if grown else None,
            op_last_bytes=grown[2] if grown else None,
            added_s_per_step=added,
            process=pa.label,
        ),
        where=grown[0] if grown else None,
        next_step=(
            "the sync sends more every step: a list of tensors or buckets that grows (kept "
            "across steps), or a delta sync falling back to full weights; find what adds to "
            "what the sync sends, then measure again"
        ),
    )


def _outside(facts: Facts, outside: float, share: float | None) -> Finding:
    head = facts.headline
    assert head is not None
    caller = facts.primary.sync_site if facts.primary is not None else None
    where = f", in {caller}" if caller else ""
    limit = (
        f"; the transfers reach {fmt_share_of(share)} of the "
        f"{fmt_rate(head.link_limit_bytes_per_s)} "
        f"{head.link_limit_name} limit"
        if share is not None
        else ""
    )
    return Finding(
        kind="wire_not_the_limit",
        severity=Severity.INFO,
        title=(
            f"the wire is not the problem: {outside:.0%} of each weight sync is between "
            f"transfers{where}{limit}"
        ),
        evidence=OutsideEvidence(
            median_outside_share=outside,
            bandwidth_bytes_per_s=head.sync_bandwidth_median,
            limit_bytes_per_s=head.link_limit_bytes_per_s,
            limit_share=share,
            limit=head.link_limit_name,
            caller=caller,
        ),
        where=caller,
        next_step=(
            "a faster link would not shorten this sync: overlap or remove the work between "
            "its transfers (serialization, RPCs, barriers, waits); `wsprof attach PID` shows "
            "where that time goes"
        ),
    )


def _tiny(pa: ProcessAnalysis, wires: list[SyncWire]) -> Finding | None:
    calls = [w.n_calls - w.n_unknown for w in wires]
    per_call = [w.bytes / c for w, c in zip(wires, calls) if c > 0]
    if not per_call:
        return None
    n = statistics.median(calls)
    size = statistics.median(per_call)
    if n < TINY_MIN_CALLS or size >= TINY_CALL_BYTES:
        return None
    # A tiny call's time on the wire is its fixed cost (the bandwidth term is a few kB's):
    # what each call bucketing avoids saves, read from the syncs themselves, so that watch
    # (which keeps no per-call points for a cost model) says what analyze says.
    each_us = statistics.median(w.wire_s / c * 1e6 for w, c in zip(wires, calls) if c > 0)
    est = bucketing_estimate(pa, n, each_us) if each_us > 0 else None
    return Finding(
        kind="tiny_transfers",
        severity=Severity.INFO,
        title=(
            f"each weight sync is {n:.0f} transfers of {fmt_bytes_decimal(size)} (median): "
            f"too small to use the link{bucketing_text(est)}"
        ),
        evidence=TinyCallsEvidence(
            calls_per_sync=n,
            median_call_bytes=size,
            saved_s_per_step=est["saved_s"] if est else None,
            buckets=est["buckets"] if est else None,
        ),
        where=pa.sync_site,
        next_step=(
            "send the weights in buckets of tens of MB (flatten tensors into one buffer per "
            "bucket, as slime's and verl's bucketed updates do), then measure again"
        ),
    )
