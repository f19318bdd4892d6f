"""How more calls every step, and each call slower in the backend, read as diagnoses."""

from __future__ import annotations

from dataclasses import replace

from wsprof.analysis.chain import (
    Cause,
    ChainContext,
    Draft,
    fmt_call,
    function_of,
    short,
    wrapper_names,
    wrapper_who,
)
from wsprof.analysis.model import Finding, Link, Severity
from wsprof.analysis.rules.calls.record import (
    CallCountEvidence,
    OpGrowth,
    _bucketing,
    _first_last,
    _per_op,
)
from wsprof.contracts.series import BETWEEN_LAYERS_S, COLLECTIVE_CALLS, op_of
from wsprof.contracts.units import Unit, fmt_duration


class CallCountCause(Cause):
    """More collective calls every step: where is the caller of the weight sync, the cost is
    the fixed cost per call times the calls added."""

    kind = "call_count_growth"
    cause = "call_count"
    order = 20

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        ev = f.evidence if isinstance(f.evidence, CallCountEvidence) else None
        count = ctx.facts.series.get(COLLECTIVE_CALLS)
        slope = float(ev.slope_per_step) if ev is not None else 0.0
        rows: list[tuple[str, str]] = [("calls per step, slope", f"{slope:+.1f}/step")]
        text = f"collective calls per step grow {slope:+.1f}/step"
        if count is not None and count.series.values:
            v = count.series.values
            text += f" ({v[0]:.0f} -> {v[-1]:.0f})"
            rows.append(("calls per step", f"{v[0]:.0f} -> {v[-1]:.0f}"))
        fixed = ev.fixed_us_per_call if ev is not None else None
        per_call_s = 0.0
        if isinstance(fixed, (int, float)):
            text += f", each paying about {fmt_call(fixed)} whatever its size"
            rows.append(("fixed cost per call", fmt_call(fixed)))
            per_call_s = float(fixed) / 1e6
        bucket = ev.bucketing if ev is not None else None
        if isinstance(bucket, dict):
            rows.append(
                (
                    "bucketing would save",
                    f"{fmt_duration(bucket.get('saved_s'))}/step "
                    f"({bucket.get('calls', 0):.0f} -> {bucket.get('buckets', 0):.0f} calls)",
                )
            )
        pa = ctx.facts.primary
        site = pa.sync_site if pa is not None else None
        if site:
            text += f"; issued by {site}"
            rows.append(("caller", site))
        added = slope * per_call_s
        title = f"more collective calls every step ({slope:+.1f} calls/step"
        title += f", about {Unit.SECONDS.fmt_slope(added)} of sync)" if added > 0 else ")"
        return Draft(
            self.cause,
            title,
            [f],
            where=Link("where", text, (f.id,), tuple(rows)),
            places=(short(function_of(site)),) if site else (),
            explains=added,
            process=ctx.process,
        )

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        own = self.own(d)
        bucket = _bucketing(own) if own is not None else None
        text = "more tensors are sent one collective each, every step"
        if d.culprit_frame is not None:
            text += f" (the added time goes into `{function_of(d.culprit_frame)}`)"
        caller = f" to what `{d.places[0]}` sends" if d.places else ""
        text += (
            f": find who adds them{caller} (a growing list of parameters or buffers) and "
            "bucket the tensors into fewer, larger collectives"
        )
        if isinstance(bucket, dict):
            text += f" (about {fmt_duration(bucket.get('saved_s'))} per step saved)"
        return text + "; then measure again"


def _with_per_call(
    where: Link, f: Finding, parts: list[tuple[str, OpGrowth]], ctx: ChainContext
) -> Link:
    """A wrapper's where link with each call's latency and the flat call count."""
    text, rows = where.text, list(where.rows)
    count = ctx.facts.series.get(COLLECTIVE_CALLS)
    if parts:
        each = ", ".join(f"{op} {_first_last(d)}" for op, d in parts)
        text += f"; each call slower: {each}"
        rows.append(("per call (median)", each))
    if count is not None and not count.verdict.accumulating and count.series.values:
        flat = sorted(count.series.values)[len(count.series.values) // 2]
        text += f", calls per step flat at {flat:.0f}"
        rows.append(("calls per step", f"{flat:.0f} (flat)"))
    return Link("where", text, (*where.finding_ids, f.id), tuple(rows))


class PerCallCause(Cause):
    """Each collective call gets slower. Beside a wrapper's chain it joins that chain (the
    wrapper makes each call slower); alone, the backend or the communication slows down,
    unless the frame the added time goes into runs under a wrapper on the collective names
    (:meth:`on_culprit_under`)."""

    kind = "per_call_growth"
    cause = "per_call"
    order = 30

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        if f.severity == Severity.INFO:
            return None
        parts = _per_op(f)
        wrapper = next((d for d in drafts if d.cause == "wrapper" and d.where), None)
        if wrapper is not None and wrapper.where is not None:
            wrapper.findings.append(f)
            wrapper.where = _with_per_call(wrapper.where, f, parts, ctx)
            return None
        # Bigger payloads make each call slower: one cause, the bytes.
        payload = next(
            (d for d in drafts if d.cause in ("payload", "call_count") and d.where), None
        )
        if (
            payload is not None
            and payload.where is not None
            and any(x.kind == "sync_bytes_growth" for x in payload.findings)
        ):
            payload.findings.append(f)
            payload.where = _with_per_call(payload.where, f, parts, ctx)
            return None
        detail = ", ".join(f"{op} {_first_last(d)} per call" for op, d in parts)
        rows = tuple((f"{op} per call (median)", _first_last(d)) for op, d in parts)
        ops = ", ".join(op for op, _ in parts) or "the collectives"
        top = ctx.top_wrapper
        return Draft(
            self.cause,
            f"each {ops} call gets slower in the backend (no wrapper time grows)",
            [f],
            where=Link(
                "where",
                "each collective call gets slower while the time between layers does not "
                f"grow: {detail}",
                (f.id,),
                rows,
            ),
            # a wrapper that no between-layers growth named yet
            places=(short(top.qualname),) if top is not None else (),
            process=ctx.process,
            detail=detail,
        )

    def on_culprit_under(self, d: Draft, place: str, ctx: ChainContext) -> None:
        """A per-call slowdown whose culprit frame runs under a wrapper on the collective names
        is that wrapper's, even when its time between layers did not read as growing (a curve
        that flattened at its end reads ``warmup_then_flat``): the samples put the time there."""
        top = ctx.top_wrapper
        if top is None or d.where is None:
            return
        names = wrapper_names(top, ctx.wrappers)
        who = wrapper_who(top)
        d.cause = "wrapper"
        d.title = (
            f"a wrapper on the collective names, {short(top.qualname)}, makes every call "
            "slower: the frame the added time goes into runs under it"
        )
        text = f"each collective call gets slower: {d.detail}"
        bl = ctx.facts.series.get(BETWEEN_LAYERS_S)
        if bl is not None and bl.series.values:
            vals = bl.series.values
            text += (
                f"; time between the API and the backend {fmt_duration(vals[0])} -> "
                f"{fmt_duration(vals[-1])} per step (its curve reads {bl.verdict.shape})"
            )
        d.where = replace(
            d.where,
            text=f"{who} sits on {', '.join(names)}; {text}",
            rows=(
                ("wrapper", who),
                (f"names it sits on ({len(names)})", ", ".join(names)),
                *d.where.rows,
            ),
        )

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        counter = f" (it tracks {d.culprit_counter})" if d.culprit_counter else ""
        return (
            f"the backend or the network slows down per call{counter}, not code around the "
            "collectives: compare ranks (an outlier rank?), check NCCL_* settings and the "
            "links (nvidia-smi topo -m, NIC errors), and whether payloads grow; then measure "
            "again"
        )

    def tracks(self, series: str) -> bool:
        return op_of(series) is not None
