"""A framework's own weight-sync timeline (slime's communication timeline, issue 36): which part
of the sync grows (convert, send, engine load, the rest), whether its bytes grew with it
(payload) or only its time (per-call overhead: the seed case's probe grew the send time at flat
bytes), in every bucket alike or in a few (named), and the syncs that failed, with their error
types. Reads the series :mod:`wsprof.importers.slime_timeline` makes; inside a recorded run,
the collectives each slow bucket holds (:mod:`wsprof.analysis.timeline_join`) are its where."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from wsprof.analysis.chain import Cause, ChainContext, Draft
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Link, SeriesResult, Severity
from wsprof.analysis.rules.base import (
    CRITICAL_GROWTH_RATIO,
    SLOWDOWN_MATERIAL_SHARE,
    Rule,
    median_step_s,
)
from wsprof.contracts.series import (
    BUCKET_BETWEEN_PREFIX,
    BUCKET_CALLS_PREFIX,
    BUCKET_SEND_PREFIX,
    SYNC_BYTES,
    SYNC_FAILED,
    SYNC_PARTS,
    WEIGHT_SYNC_S,
    is_sync_part,
)
from wsprof.contracts.units import fmt_bytes_decimal, fmt_duration

#: Bytes per sync within this relative spread are flat: the sync's growth is not payload.
FLAT_BYTES_SPREAD = 0.05
#: A bucket "grows" when its send time rose at least this share of the most any bucket rose.
BUCKET_GROWN_SHARE = 0.5
#: Share of the grown buckets' send growth that their calls' time between the API and the
#: backend must explain for the wrapper there to be named as the bucket's cost.
BETWEEN_EXPLAINS = 0.5
#: Bucket ids a title names before ``...``.
BUCKETS_NAMED = 8


def _rise(r: SeriesResult) -> float:
    """What a series' fitted curve rose from its first step to its last (its unit)."""
    fit = r.verdict.fitted
    return float(fit[-1] - fit[0]) if fit else 0.0


@dataclass(frozen=True, kw_only=True)
class SyncPartEvidence(Evidence):
    """The part of the framework's weight sync that grows, against the whole sync and its bytes.

    ``share_of_growth``: the part's fitted rise over the sync's; ``bytes_first``/``bytes_last``:
    bytes sent per sync at the first and last step (None without sizes); ``grown_buckets``:
    ids of the buckets whose send time rose (all of them when the growth is alike); ``inside``:
    what the recorded collectives inside the slowest bucket say (a joined run only).
    """

    part: str
    series: str
    part_first_s: float = field(metadata=unit("s"))
    part_last_s: float = field(metadata=unit("s"))
    part_rise_s: float = field(metadata=unit("s"))
    sync_rise_s: float = field(metadata=unit("s"))
    share_of_growth: float | None
    bytes_first: float | None = optional("bytes")
    bytes_last: float | None = optional("bytes")
    bytes_flat: bool | None = None
    buckets: int = 0
    grown_buckets: list[int] = field(default_factory=list)
    inside: str | None = None


@dataclass(frozen=True, kw_only=True)
class FailedSyncEvidence(Evidence):
    """Weight syncs that failed: how many, at which steps, of which error types."""

    failed: int
    steps: list[int]
    error_types: dict[str, int]


class SyncPartCause(Cause):
    """A part of the framework's own weight sync grows: the chain's where is that part (and
    the buckets it grows in, and what the collectives inside them do, when recorded)."""

    kind = "sync_part"
    cause = "sync_part"
    order = 15

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        ev = f.evidence
        if not isinstance(ev, SyncPartEvidence):
            return None
        rows: list[tuple[str, str]] = [
            ("part", ev.part),
            ("per step", f"{fmt_duration(ev.part_first_s)} -> {fmt_duration(ev.part_last_s)}"),
        ]
        if ev.share_of_growth is not None:
            rows.append(("share of the sync's growth", f"{ev.share_of_growth:.0%}"))
        if ev.bytes_first is not None and ev.bytes_last is not None:
            rows.append(
                (
                    "bytes per sync",
                    f"{fmt_bytes_decimal(ev.bytes_first)} -> {fmt_bytes_decimal(ev.bytes_last)}",
                )
            )
        if ev.grown_buckets:
            rows.append(("buckets it grows in", _ids(ev.grown_buckets)))
        if ev.inside:
            rows.append(("inside", ev.inside))
        wrapper = next((d for d in drafts if d.cause == "wrapper" and d.where), None)
        if wrapper is not None and wrapper.where is not None and ev.inside:
            # One cause, one diagnosis: the framework's own timeline says where in the sync
            # the wrapper's time goes.
            wrapper.findings.append(f)
            bytes_text = (
                f" at flat bytes ({fmt_bytes_decimal(ev.bytes_last)})"
                if ev.bytes_flat and ev.bytes_last is not None
                else ""
            )
            spread = f", {_spread(ev.grown_buckets, ev.buckets)}" if ev.grown_buckets else ""
            wrapper.where = Link(
                "where",
                f"{wrapper.where.text}; in slime's timeline the sync's {ev.part} grows "
                f"{fmt_duration(ev.part_first_s)} -> {fmt_duration(ev.part_last_s)} per step"
                f"{bytes_text}{spread}; inside {ev.inside}",
                (*wrapper.where.finding_ids, f.id),
                (*wrapper.where.rows, *rows),
            )
            return None
        return Draft(
            self.cause,
            f.title,
            [f],
            where=Link("where", f.where or f.title, (f.id,), tuple(rows)),
            explains=ev.part_rise_s,
            process=ctx.process,
        )

    def tracks(self, series: str) -> bool:
        return is_sync_part(series)


def _inside(facts: Facts, buckets: list[int]) -> str | None:
    """What the recorded collectives inside the grown buckets' sends do (a run joined with
    the timeline): how many calls a bucket, and what share of the sends' growth is their time
    between the API name and the backend, with the wrapper there; None without them."""
    sends = [facts.series.get(f"{BUCKET_SEND_PREFIX}{b}") for b in buckets]
    between = [facts.series.get(f"{BUCKET_BETWEEN_PREFIX}{b}") for b in buckets]
    calls = [facts.series.get(f"{BUCKET_CALLS_PREFIX}{b}") for b in buckets]
    if not buckets or any(x is None for x in (*sends, *between, *calls)):
        return None
    send_rise = sum(_rise(x) for x in sends if x is not None)
    between_rise = sum(_rise(x) for x in between if x is not None)
    per_bucket = statistics.median(v for x in calls if x is not None for v in x.series.values)
    text = f"{'each of those buckets' if len(buckets) > 1 else f'bucket {buckets[0]}'}, "
    text += f"{per_bucket:,.0f} recorded collective calls"
    if send_rise <= 0:
        return text
    share = min(between_rise / send_rise, 1.0)
    text += f" spend {share:.0%} of its growth between the API and the backend"
    top = next((w for w in facts.wrappers if w.kind == "name"), None)
    if top is not None and between_rise >= BETWEEN_EXPLAINS * send_rise:
        text += f", in the wrapper {top.label()}"
    return text


def _spread(grown: list[int], n_buckets: int) -> str:
    """``in every bucket alike (8)``, ``in bucket 2 of 8``, ``in buckets 0, 1, 3 of 8``."""
    if len(grown) >= n_buckets:
        return f"in every bucket alike ({n_buckets})"
    return f"in bucket{'s' if len(grown) > 1 else ''} {_ids(grown)} of {n_buckets}"


def _ids(ids: list[int]) -> str:
    more = ", ..." if len(ids) > BUCKETS_NAMED else ""
    return ", ".join(str(i) for i in ids[:BUCKETS_NAMED]) + more


class TimelineParts(Rule):
    """The part of the framework's weight sync that grows, and its failed syncs."""

    kind = "sync_part"
    causes = (SyncPartCause(),)
    description = (
        "the part of the framework's own weight sync that grows (convert, send, engine load), "
        "with its bytes and buckets; failed syncs"
    )

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        part = self._part(facts)
        if part is not None:
            out.append(part)
        failed = self._failed(facts)
        if failed is not None:
            out.append(failed)
        return out

    def _part(self, facts: Facts) -> Finding | None:
        sync = facts.series.get(WEIGHT_SYNC_S)
        parts = [(name, label, facts.series.get(name)) for name, label in SYNC_PARTS]
        known = [(n, lbl, r) for n, lbl, r in parts if r is not None and r.series.values]
        nbytes = facts.series.get(SYNC_BYTES)
        b_first = b_last = None
        flat: bool | None = None
        payload = False
        if nbytes is not None and nbytes.series.values:
            bv = nbytes.series.values
            b_first, b_last = bv[0], bv[-1]
            med = statistics.median(bv)
            flat = med > 0 and (max(bv) - min(bv)) <= FLAT_BYTES_SPREAD * med
            payload = not flat and nbytes.verdict.accumulating and b_last > b_first
        sync_rise = _rise(sync) if sync is not None and sync.verdict.accumulating else 0.0
        if not known:
            return None
        name, label, r = max(known, key=lambda x: _rise(x[2]))
        rise = _rise(r)
        # The sync grows, or (a short, noisy run) its part does on its own curve.
        grows = rise > 0 and (sync_rise > 0 or r.verdict.accumulating)
        if not grows and not payload:
            return None
        share = rise / sync_rise if sync_rise > 0 else None
        vals = r.series.values
        k = min(r.verdict.judged_from, len(vals) - 1)
        n_buckets, grown = self._buckets(facts)
        if grows:
            title = (
                f"the weight sync's {label} grows {fmt_duration(vals[k])} -> "
                f"{fmt_duration(vals[-1])} per step"
            )
            if share is not None:
                title += f": {min(share, 1.0):.0%} of the sync's growth"
        else:
            title = "the weight sync sends more every step"
        if flat and nbytes is not None:
            med_bytes = statistics.median(nbytes.series.values)
            title += (
                f", while its bytes stay {fmt_bytes_decimal(med_bytes)}: per-call overhead, "
                "not payload"
            )
        elif payload and b_first is not None and b_last is not None:
            title += (
                f", with its bytes {fmt_bytes_decimal(b_first)} -> {fmt_bytes_decimal(b_last)}: "
                "a bigger payload"
            )
        if grown and n_buckets:
            title += f"; {_spread(grown, n_buckets)}"
        # Critical when the sync (or, for a payload, its bytes) at least doubled.
        first, last = (
            (b_first, b_last)
            if payload and b_first is not None and b_last is not None
            else (sync.series.values[0], sync.series.values[-1])
            if sync is not None
            else (0.0, 0.0)
        )
        severity = (
            Severity.CRITICAL
            if first > 0 and last / first >= CRITICAL_GROWTH_RATIO
            else Severity.WARNING
        )
        step_ref = median_step_s(facts)
        # A payload that grows is said however little time it costs yet (it only grows).
        added = max(sync_rise, rise)
        if not payload and step_ref and added < SLOWDOWN_MATERIAL_SHARE * step_ref:
            severity = Severity.INFO
            title += f"; so far {added / step_ref:.0%} of a step: watch it, not yet material"
        inside = _inside(facts, grown)
        if inside:
            title += f"; inside {inside}"
        if flat:
            next_step = (
                f"the same bytes take longer to {label} every step: look at what runs around each "
                "transfer (a wrapper or probe on the collectives, per-bucket bookkeeping); "
                "record the job under `wsprof run` beside the timeline to see inside the "
                "buckets, fix it, then measure again"
            )
        elif payload:
            next_step = (
                "the sync sends more every step: a list of tensors or buckets that grows, or a "
                "delta sync falling back to full weights; find what adds to what it sends"
            )
        else:
            next_step = f"look at what the sync's {label} does each step, then measure again"
        return Finding(
            kind="sync_part",
            severity=severity,
            title=title,
            evidence=SyncPartEvidence(
                part=label,
                series=name,
                part_first_s=vals[k],
                part_last_s=vals[-1],
                part_rise_s=rise,
                sync_rise_s=sync_rise,
                share_of_growth=share,
                bytes_first=b_first,
                bytes_last=b_last,
                bytes_flat=flat,
                buckets=n_buckets,
                grown_buckets=grown,
                inside=inside,
            ),
            where=(
                f"the sync's {label}"
                + (f" of bucket{'s' if len(grown) > 1 else ''} {_ids(grown)}" if grown else "")
            ),
            next_step=next_step,
        )

    def _buckets(self, facts: Facts) -> tuple[int, list[int]]:
        """How many buckets have a send series, and the ids of those whose send rose."""
        rises: dict[int, float] = {}
        for name, r in facts.series.items():
            if name.startswith(BUCKET_SEND_PREFIX):
                try:
                    bid = int(name[len(BUCKET_SEND_PREFIX) :])
                except ValueError:
                    continue
                rises[bid] = _rise(r)
        top = max(rises.values(), default=0.0)
        if top <= 0:
            return len(rises), []
        return len(rises), sorted(b for b, x in rises.items() if x >= BUCKET_GROWN_SHARE * top)

    def _failed(self, facts: Facts) -> Finding | None:
        steps: set[int] = set()
        types: dict[str, int] = {}
        for name, r in facts.series.items():
            if not name.startswith(SYNC_FAILED):
                continue
            kind = name[len(SYNC_FAILED) + 1 :] or "?"
            for s, v in zip(r.series.steps, r.series.values):
                if v > 0:
                    steps.add(s)
                    types[kind] = types.get(kind, 0) + int(v)
        if not steps:
            return None
        n = sum(types.values())
        named = ", ".join(f"{k} x{v}" for k, v in sorted(types.items(), key=lambda x: -x[1]))
        at = ", ".join(str(s) for s in sorted(steps)[:10])
        return Finding(
            kind="sync_failed",
            severity=Severity.WARNING,
            title=f"{n} weight sync(s) failed ({named}) at step(s) {at}",
            evidence=FailedSyncEvidence(failed=n, steps=sorted(steps), error_types=types),
            where=None,
            next_step=(
                "the engines kept the previous weights at those steps: read the trainer's and "
                "the engines' logs at those times for the error"
            ),
        )
