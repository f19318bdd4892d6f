"""Shared weight buckets kept alive: the colocated weight sync's leak class.

A colocated sync sends each bucket as a handle (CUDA IPC, a shared-memory fd or file) and the
engine opens it (:mod:`wsprof.capture.sharing`). When the sender keeps what it sent (a list,
torch's CUDA IPC cache until ``torch.cuda.ipc_collect()``: slime #1731, miles #3147) or the
engine keeps what it opened (a handle opened twice and closed once: SGLang #4446, #17870;
vLLM #51258), every update leaves its buckets alive and device (or /dev/shm) memory runs out
after a number of steps no single sample shows. Judged per update
(:mod:`wsprof.analysis.sharing`): the bytes still alive when the next update begins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wsprof.analysis.chain import Cause, ChainContext, Draft
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.growth import classify
from wsprof.analysis.model import Finding, Link, ProcessAnalysis, Severity
from wsprof.analysis.rules.base import Rule
from wsprof.analysis.sharing import Sharing, SideUpdates
from wsprof.contracts.counters import (
    CUDA_TOTAL_BYTES,
    CounterSource,
    parse_counter,
    proc_counter,
)
from wsprof.contracts.units import fmt_bytes, fmt_duration

#: Fewest kept-bytes points (updates less one) to judge growth on.
MIN_UPDATES = 4
#: Kept bytes must end above this many updates' worth of buckets: one or two updates in
#: flight (the engine still loading the last one) are no leak.
MIN_KEPT_UPDATES = 2.0
#: Growth per update of at least this share of an update's bytes: a leak keeps a bucket's
#: worth (or all of them) every update; allocator noise does not.
MIN_KEPT_SHARE = 0.25


@dataclass(frozen=True, kw_only=True)
class KeptBucketsEvidence(Evidence):
    """Shared buckets that outlive their update, on one process and side."""

    process: str
    side: str
    role: str
    kept_per_update_bytes: float = field(metadata=unit("bytes"))
    update_bytes: float = field(metadata=unit("bytes"))
    buckets_per_update: float = field(metadata=unit("count"))
    kept_first_bytes: float = field(metadata=unit("bytes"))
    kept_last_bytes: float = field(metadata=unit("bytes"))
    updates: int = field(metadata=unit("count"))
    device: str | None = optional()
    site: str | None = optional()
    caller: str | None = optional()
    holder: str | None = optional()
    holder_searched: bool = False
    reopens: int = field(default=0, metadata=unit("count"))
    ipc_collects: int = field(default=0, metadata=unit("count"))
    exports_since_collect: int = field(default=0, metadata=unit("count"))
    total_bytes: float | None = optional("bytes")
    updates_to_full: float | None = optional("count")

    def process_named(self) -> str | None:
        return self.process


@dataclass(frozen=True, kw_only=True)
class ReopenedEvidence(Evidence):
    """Handles an engine opened again while an earlier open of them was still alive."""

    process: str
    reopens: int = field(metadata=unit("count"))
    imports: int = field(metadata=unit("count"))
    site: str | None = optional()

    def process_named(self) -> str | None:
        return self.process


def _holder(sh: Sharing, side: SideUpdates) -> tuple[str, str | None, str]:
    """Who holds the kept buckets: (in words, the holder's path or None, what to do)."""
    h = side.holder
    if h is not None and h.path:
        return f"held by {h.path}", h.path, f"release the reference at {h.path}"
    if side.side == "export" and side.device == "cuda" and sh.exports_since_collect > 0:
        return (
            "held by torch's CUDA IPC cache: no torch.cuda.ipc_collect() since "
            f"{sh.exports_since_collect} exports",
            None,
            "call torch.cuda.ipc_collect() after each update's buckets are acknowledged "
            "(slime PR #1731)",
        )
    if side.side == "import" and sh.reopens > 0:
        return (
            f"opened twice, closed once ({sh.reopens} handles opened again while open)",
            None,
            "close every handle you open once (SGLang PR #4446)",
        )
    look = "find what keeps them: wsprof.memory_snapshot(), gc.get_referrers"
    if h is not None:
        return "nothing in Python holds them (C++, a frame's local variable or a cache)", None, look
    return "their holder not searched yet", None, look


def _room_of(pa: ProcessAnalysis, sh: Sharing, side: SideUpdates) -> tuple[float | None, str]:
    """How far kept buckets can grow, bytes, and where: the device's memory for CUDA buckets
    (``cuda<d>.total_bytes``, recorded with the allocator's counters), /dev/shm for
    shared-memory ones."""
    if side.device == "cuda":
        totals = [
            max(t.value)
            for t in pa.counters
            if t.value
            and (c := parse_counter(t.name)) is not None
            and c.source is CounterSource.CUDA
            and c.key == CUDA_TOTAL_BYTES
        ]
        return (max(totals) if totals else None), "the GPU's memory"
    return sh.shm_total_bytes, "/dev/shm"


def _kept(pa: ProcessAnalysis, sh: Sharing, side: SideUpdates) -> Finding | None:
    kept = np.asarray(side.kept_bytes, dtype=float)
    if len(kept) < MIN_UPDATES:
        return None
    per_update = float(np.median(side.nbytes)) if side.nbytes else 0.0
    if per_update <= 0 or kept[-1] < MIN_KEPT_UPDATES * per_update:
        return None
    v = classify(list(kept))
    slope = v.slope_per_step
    if not v.accumulating or slope < MIN_KEPT_SHARE * per_update:
        return None
    role = "engine" if side.side == "import" else "trainer"
    words, path, fix = _holder(sh, side)
    what = "sent" if side.side == "export" else "opened"
    total, where_full = _room_of(pa, sh, side)
    room = (total - kept[-1]) if total else None
    to_full = max(room / slope, 0.0) if room is not None and slope > 0 else None
    severity = Severity.WARNING
    if to_full is not None and to_full <= len(kept):
        severity = Severity.CRITICAL
    title = (
        f"{pa.label} ({role}): shared weight buckets kept alive: "
        f"+{fmt_bytes(slope)} an update ({fmt_bytes(kept[0])} -> {fmt_bytes(kept[-1])} over "
        f"{len(kept)} updates; an update {what} {fmt_bytes(per_update)} in "
        f"{np.median(side.count):.0f} buckets), {words}"
    )
    if to_full is not None:
        title += (
            f"; at this rate /dev/shm ({fmt_bytes(total or 0)}) is full in {to_full:,.0f} updates"
        )
    # a serializer (SGLang's MultiprocessingSerializer.serialize) is not where the buckets are
    # sent: the code that calls it is
    where = side.caller if side.site and "serializ" in side.site.lower() else side.site
    return Finding(
        kind="shared_buckets_kept",
        severity=severity,
        title=title,
        evidence=KeptBucketsEvidence(
            process=pa.label,
            side=side.side,
            role=role,
            kept_per_update_bytes=float(slope),
            update_bytes=per_update,
            buckets_per_update=float(np.median(side.count)),
            kept_first_bytes=float(kept[0]),
            kept_last_bytes=float(kept[-1]),
            updates=len(kept) + 1,
            device=side.device,
            site=side.site,
            caller=side.caller,
            holder=path,
            holder_searched=side.holder is not None,
            reopens=sh.reopens,
            ipc_collects=sh.ipc_collects,
            exports_since_collect=sh.exports_since_collect,
            total_bytes=total,
            updates_to_full=to_full,
        ),
        where=where,
        next_step=(
            f"{fix}; each update's buckets must die once the engine acknowledged them "
            "(re-run and check that share.alive_bytes stays flat)"
        ),
    )


@dataclass(frozen=True, kw_only=True)
class PushPartsEvidence(Evidence):
    """Where a colocated weight sync's time goes, medians per step of one trainer process."""

    process: str
    sync_s: float = field(metadata=unit("s"))
    collectives_s: float = field(metadata=unit("s"))
    serialize_s: float = field(metadata=unit("s"))
    elsewhere_s: float = field(metadata=unit("s"))
    buckets: float = field(metadata=unit("count"))
    update_bytes: float = field(metadata=unit("bytes"))
    engine: str | None = optional()
    engine_open_s: float | None = optional("s")
    engine_update_s: float | None = optional("s")

    def process_named(self) -> str | None:
        return self.process


def push_parts(facts: Facts) -> Finding | None:
    """The parts of the primary's colocated weight sync (an info finding): its collectives
    (TP gathers, ``gather_object``, barriers), serializing the buckets (the share calls), and
    the rest (the engine's call and its ack, requests); with the engine's open (rebuild) time
    and update span when an engine opened them."""
    pa = facts.primary
    sh = pa.sharing if pa is not None else None
    if pa is None or sh is None or sh.exports is None or not sh.exports.calls_s:
        return None
    rows = [r for r in pa.steps if r.weight_sync_s is not None and r.sync_gap_s is not None]
    if len(rows) < MIN_UPDATES:
        return None
    sync = float(np.median([r.weight_sync_s for r in rows]))
    gap = float(np.median([r.sync_gap_s for r in rows]))
    ser = float(np.median(sh.exports.calls_s))
    elsewhere = max(gap - ser, 0.0)
    coll = max(sync - gap, 0.0)
    eng = next(
        (p for p in facts.processes if p.sharing is not None and p.sharing.role == "engine"),
        None,
    )
    imp = eng.sharing.imports if eng is not None and eng.sharing is not None else None
    open_s = float(np.median(imp.calls_s)) if imp is not None and imp.calls_s else None
    upd_s = float(np.median(imp.span_s)) if imp is not None and imp.span_s else None
    n = float(np.median(sh.exports.count))
    nbytes = float(np.median(sh.exports.nbytes))
    title = (
        f"{pa.label}: colocated weight sync {fmt_duration(sync)} a step: "
        f"{fmt_duration(coll)} in collectives, {fmt_duration(ser)} sharing "
        f"{n:.0f} buckets ({fmt_bytes(nbytes)}) by handle, {fmt_duration(elsewhere)} "
        "elsewhere (the engine's call and ack, requests, conversion)"
    )
    if eng is not None and open_s is not None and upd_s is not None:
        title += (
            f"; {eng.label} opens them in {fmt_duration(open_s)} within "
            f"{fmt_duration(upd_s)} from its first open to its last"
        )
    return Finding(
        kind="colocated_push",
        severity=Severity.INFO,
        title=title,
        evidence=PushPartsEvidence(
            process=pa.label,
            sync_s=sync,
            collectives_s=coll,
            serialize_s=ser,
            elsewhere_s=elsewhere,
            buckets=n,
            update_bytes=nbytes,
            engine=eng.label if eng is not None else None,
            engine_open_s=open_s,
            engine_update_s=upd_s,
        ),
        where=sh.exports.caller or sh.exports.site,
        next_step=(
            "the part elsewhere is where a slower push goes first: re-run after every change "
            "and compare this line (wsprof diff BEFORE AFTER)"
        ),
    )


#: What kept shared buckets raise on the process that keeps them: its shared memory, the
#: /dev/shm files and fds it holds, its RSS (counters whose growth joins the diagnosis).
HELD_BY_KEPT_BUCKETS = (
    proc_counter("rss_shmem_bytes"),
    proc_counter("shm_files"),
    proc_counter("open_fds"),
    proc_counter("rss_bytes"),
)


class SharedBucketsCause(Cause):
    """Kept shared buckets as a diagnosis: its own symptom (the bytes an update keeps), where
    (the code that shares them and their holder), and the process's counters they raise."""

    kind = "shared_buckets_kept"
    cause = "shared_buckets"
    order = 95
    own_symptom = True

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        ev = f.evidence
        if not isinstance(ev, KeptBucketsEvidence):
            return None
        rows = (
            ("kept an update", fmt_bytes(ev.kept_per_update_bytes)),
            ("an update sends", f"{fmt_bytes(ev.update_bytes)} in {ev.buckets_per_update:.0f}"),
            ("kept at the last update", fmt_bytes(ev.kept_last_bytes)),
            ("updates", str(ev.updates)),
        )
        where_rows: list[tuple[str, str]] = [("process", ev.process)]
        if ev.caller or ev.site:
            where_rows.append(("shared at", str(ev.caller or ev.site)))
        where_rows.append(("held by", ev.holder or "(no Python object)"))
        return Draft(
            self.cause,
            f.title,
            [f],
            symptom=Link("symptom", f.title, (f.id,), rows),
            where=Link("where", str(ev.holder or f.where), (f.id,), tuple(where_rows)),
            next_step=f.next_step,
            process=ev.process,
        )

    def holds(self, d: Draft, counter: str, process: str | None) -> bool:
        return d.process == process and counter in HELD_BY_KEPT_BUCKETS


class SharedBucketsKept(Rule):
    """Weight buckets shared with another process (CUDA IPC, shared memory) that stay alive
    update after update, on the sender or on the engine, with their holder; and handles an
    engine opened twice."""

    kind = "shared_buckets_kept"
    causes = (SharedBucketsCause(),)
    description = (
        "weight buckets shared by CUDA IPC or shared memory stay alive update after update"
    )

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        parts = push_parts(facts)
        if parts is not None:
            out.append(parts)
        for pa in facts.processes:
            sh = pa.sharing
            if sh is None:
                continue
            for side in (sh.exports, sh.imports):
                if side is not None:
                    f = _kept(pa, sh, side)
                    if f is not None:
                        out.append(f)
            if sh.reopens > 0 and sh.imports is not None:
                n = int(sum(sh.imports.count))
                out.append(
                    Finding(
                        kind="shared_handle_reopened",
                        severity=Severity.WARNING,
                        title=(
                            f"{pa.label} (engine): {sh.reopens} of {n} shared handles opened "
                            "again while still open (opened twice, closed once)"
                        ),
                        evidence=ReopenedEvidence(
                            process=pa.label,
                            reopens=sh.reopens,
                            imports=n,
                            site=sh.imports.site,
                        ),
                        where=sh.imports.site,
                        next_step=(
                            "open each received handle once and close it once (SGLang PR "
                            "#4446, #17870): a second open keeps the bucket alive"
                        ),
                    )
                )
        return out
