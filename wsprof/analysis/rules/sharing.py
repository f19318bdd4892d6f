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

from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.growth import classify
from wsprof.analysis.model import Finding, ProcessAnalysis, Severity
from wsprof.analysis.rules.base import Rule
from wsprof.analysis.sharing import Sharing, SideUpdates
from wsprof.contracts.units import fmt_bytes

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


def _holder_words(sh: Sharing, side: SideUpdates) -> tuple[str, str | None]:
    """(who holds them, in words; the holder's path or None)."""
    h = side.holder
    if h is not None and h.path:
        return f"held by {h.path}", h.path
    if side.side == "export" and side.device == "cuda" and sh.exports_since_collect > 0:
        return (
            "held by torch's CUDA IPC cache: no torch.cuda.ipc_collect() since "
            f"{sh.exports_since_collect} exports",
            None,
        )
    if side.side == "import" and sh.reopens > 0:
        return f"opened twice, closed once ({sh.reopens} handles opened again while open)", None
    if h is not None:
        return "nothing in Python holds them (C++, a frame's local variable or a cache)", None
    return "their holder not searched yet", None


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
    words, path = _holder_words(sh, side)
    what = "sent" if side.side == "export" else "opened"
    total = sh.shm_total_bytes if side.device != "cuda" else None
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
    where = side.caller if side.site and "serializ" in side.site.lower() else side.site
    fix = (
        f"release the reference at {path}"
        if path
        else (
            "call torch.cuda.ipc_collect() after each update's buckets are acknowledged "
            "(slime PR #1731)"
            if "ipc_collect" in words
            else "close every handle you open once (SGLang PR #4446)"
            if "opened twice" in words
            else "find what keeps them: wsprof.memory_snapshot(), gc.get_referrers"
        )
    )
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


class SharedBucketsKept(Rule):
    """Weight buckets shared with another process (CUDA IPC, shared memory) that stay alive
    update after update, on the sender or on the engine, with their holder; and handles an
    engine opened twice."""

    kind = "shared_buckets_kept"
    description = (
        "weight buckets shared by CUDA IPC or shared memory stay alive update after update"
    )

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
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
