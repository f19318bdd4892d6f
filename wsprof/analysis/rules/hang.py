"""A collective some ranks wait in and another never issued (Flight Recorder dumps)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.hang import Hang
from wsprof.analysis.model import Finding, Severity
from wsprof.analysis.rules.base import Rule


@dataclass(frozen=True, kw_only=True)
class HangEvidence(Evidence):
    """The hung collective (group, number in the group, op, payload), the ranks waiting in it,
    those that never arrived and where each of them stood, those without a dump, and how long
    the first waiting rank had waited when the newest dump was written; ``source`` says the
    ranks were joined by c10d's sequence numbers (not by timing)."""

    group: str
    collective_seq: int = field(metadata=unit("count"))
    op: str
    payload_bytes: int = field(metadata=unit("bytes"))
    waiting_ranks: list[int]
    missing_ranks: list[int]
    no_dump_ranks: list[int]
    behind: list[str]
    waited_s: float | None = optional("s")
    source: str = "c10d sequence numbers (Flight Recorder collective_seq_id)"

    def rank_named(self) -> int | None:
        return self.missing_ranks[0] if self.missing_ranks else None


def _behind(h: Hang) -> list[str]:
    out = []
    for b in h.behind:
        if b.seq < 0:
            out.append(f"rank {b.rank}: no collective of group {h.group} in its dump")
            continue
        state = "completed" if b.done else "not completed"
        line = f"rank {b.rank}: last issued {b.op} #{b.seq} ({state})"
        if not b.done and b.done_seq >= 0:
            line += f", last completed {b.done_op} #{b.done_seq}"
        out.append(line)
    return out


class CollectiveHang(Rule):
    """Ranks wait in a collective that another rank never issued."""

    kind = "collective_hang"
    description = (
        "a collective some ranks wait in while another never issued it (Flight Recorder dumps)"
    )

    def match(self, facts: Facts) -> list[Finding]:
        out = []
        for h in facts.hangs:
            who = h.missing or h.no_dump
            where = (
                f"rank {who[0]}" + (f" ({_behind(h)[0].split(': ', 1)[1]})" if h.missing else "")
                if who
                else None
            )
            if h.missing:
                next_step = (
                    f"see where rank {h.missing[0]} is (py-spy dump --pid on its host, or "
                    f"`wsprof attach`): it never issued {h.op} #{h.seq} of group {h.group}; "
                    "a rank that skips, reorders or fails before a collective hangs the others"
                )
            else:
                next_step = (
                    f"collect the dumps of {', '.join(str(r) for r in h.no_dump[:8])} "
                    "(TORCH_FR_DUMP_TEMP_FILE on every rank): without them who never arrived "
                    "is unknown"
                )
            out.append(
                Finding(
                    self.kind,
                    Severity.CRITICAL,
                    h.summary,
                    HangEvidence(
                        group=h.group,
                        collective_seq=h.seq,
                        op=h.op,
                        payload_bytes=h.bytes,
                        waiting_ranks=list(h.waiting),
                        missing_ranks=list(h.missing),
                        no_dump_ranks=list(h.no_dump),
                        behind=_behind(h),
                        waited_s=h.waited_s,
                    ),
                    where,
                    next_step,
                )
            )
        return out
