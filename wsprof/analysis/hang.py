"""Who never arrived: the ranks of a hung collective, joined by c10d's sequence numbers.

Every rank numbers the collectives of a process group the same way (the Flight Recorder's
``collective_seq_id``): collective 1,234 of group 3 is the same call on each of its ranks. In
dumps taken at a hang (:mod:`wsprof.trace.flight_dumps`, ``meta['flight_dump']``), per
group: the newest collective any rank issued is where the job stands; ranks whose entry for it
is not completed are *waiting* there; ranks whose newest collective is older *never arrived*
(each with what it last issued and completed); ranks the group lists without a dump are
*unknown*. This is the join torch's ``fr_trace`` makes for hang analysis, with no timing
heuristic: sequence numbers, not clocks, say who is behind. Pure functions of the traces'
meta; values of the wrong type (a hostile file) are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Groups a run's hangs are reported for at most (the most ranks waiting first).
MAX_HANGS = 8


@dataclass(frozen=True)
class RankAt:
    """Where one rank stood on the hung group.

    Attributes:
        rank: the rank.
        seq: its newest collective on the group; -1 none in its dump.
        op: that collective's op ('' none).
        done: whether that collective completed.
        done_seq: its newest completed collective; -1 none.
        done_op: that one's op.
    """

    rank: int
    seq: int
    op: str
    done: bool
    done_seq: int = -1
    done_op: str = ""


@dataclass(frozen=True)
class Hang:
    """A collective some ranks wait in while others never issued it.

    Attributes:
        group: the process group's name (``desc`` beside it when the dumps gave one).
        desc: the group's description ('' unknown).
        seq: the collective's number in the group.
        op: its op (``all_reduce``), as the waiting ranks recorded it.
        bytes: its payload on the first waiting rank, bytes; -1 unknown.
        waiting: ranks whose entry for it is not completed.
        missing: ranks whose newest collective on the group is older (never arrived).
        no_dump: ranks the group lists that left no dump.
        behind: where each missing rank stood.
        waited_s: from the first waiting rank's entry to the newest dump's writing, s; None
            unknown.
    """

    group: str
    desc: str
    seq: int
    op: str
    bytes: int
    waiting: tuple[int, ...]
    missing: tuple[int, ...]
    no_dump: tuple[int, ...]
    behind: tuple[RankAt, ...]
    waited_s: float | None

    @property
    def summary(self) -> str:
        """One line: who waits where, who never arrived."""
        g = f"group {self.group}" + (f" ({self.desc})" if self.desc else "")
        where = f"{self.op} #{self.seq} of {g}"
        waited = f" for {self.waited_s:.1f} s" if self.waited_s is not None else ""
        verb = "waits" if len(self.waiting) == 1 else "wait"
        text = f"{_ranks(self.waiting)} {verb}{waited} in {where}"
        if self.missing:
            text = f"{_ranks(self.missing)} never arrived at {where}: " + text
        if self.no_dump:
            text += f"; {_ranks(self.no_dump)} left no dump"
        return text


def _ranks(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(r) for r in ranks[:12])
    return f"ranks {shown}{', ...' if len(ranks) > 12 else ''}"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _entry(v: Any) -> tuple[int, str, bool, int, int] | None:
    """(seq, op, done, bytes, created_wall_ns) of a summary entry; None when malformed."""
    if not isinstance(v, Mapping):
        return None
    seq, nbytes, t = _int(v.get("seq")), _int(v.get("bytes")), _int(v.get("created_wall_ns"))
    op = v.get("op")
    if seq is None or not isinstance(op, str):
        return None
    return seq, op[:100], v.get("done") is True, -1 if nbytes is None else nbytes, t or 0


def hangs_of(metas: Sequence[Mapping[str, Any]]) -> tuple[Hang, ...]:
    """The hangs the processes' Flight Recorder summaries show (none for traces without
    ``meta['flight_dump']``, or where no rank waits in a collective another never issued
    or left no dump for).

    Args:
        metas: each process's trace meta.
    """
    by_group: dict[str, dict[int, Mapping[str, Any]]] = {}
    listed: dict[str, set[int]] = {}
    desc: dict[str, str] = {}
    written: list[int] = []
    for meta in metas:
        fd = meta.get("flight_dump")
        rank = _int(meta.get("rank"))
        if not isinstance(fd, Mapping) or rank is None:
            continue
        w = _int(fd.get("written_wall_ns"))
        if w:
            written.append(w)
        groups = fd.get("groups")
        if not isinstance(groups, Mapping):
            continue
        for name, g in list(groups.items())[:65_536]:
            if not isinstance(name, str) or not isinstance(g, Mapping):
                continue
            by_group.setdefault(name, {})[rank] = g
            ranks = g.get("ranks")
            if isinstance(ranks, list):
                listed.setdefault(name, set()).update(
                    r for r in ranks[:100_000] if _int(r) is not None
                )
            d = g.get("desc")
            if isinstance(d, str) and d and d != "undefined":
                desc[name] = d[:100]
    dumped = {_int(m.get("rank")) for m in metas if isinstance(m.get("flight_dump"), Mapping)}
    out: list[Hang] = []
    for name, per_rank in by_group.items():
        hang = _hang(name, desc.get(name, ""), per_rank, listed.get(name, set()), dumped, written)
        if hang is not None:
            out.append(hang)
    out.sort(key=lambda h: (-len(h.waiting), h.group))
    return tuple(out[:MAX_HANGS])


def _hang(
    name: str,
    desc: str,
    per_rank: Mapping[int, Mapping[str, Any]],
    listed: set[int],
    dumped: set[int | None],
    written: list[int],
) -> Hang | None:
    last = {r: _entry(g.get("last")) for r, g in per_rank.items()}
    known = {r: e for r, e in last.items() if e is not None}
    if not known:
        return None
    seq = max(e[0] for e in known.values())
    at = {r: e for r, e in known.items() if e[0] == seq}
    waiting = sorted(r for r, e in at.items() if not e[2])
    if not waiting:
        return None  # every rank that issued it finished it: not stuck here
    missing = sorted(r for r, e in known.items() if e[0] < seq)
    # A group lists its ranks (global numbers); one with no dump at all is unknown, one whose
    # dump has no entry of the group never issued anything on it.
    no_dump = sorted(r for r in listed if r not in dumped)
    missing = sorted(set(missing) | {r for r in listed if r in dumped and r not in known})
    if not missing and not no_dump:
        return None  # all there and all inside: stuck in the transport, not a missing rank
    behind = []
    for r in missing:
        e = known.get(r)
        done = _entry(per_rank.get(r, {}).get("done"))
        behind.append(
            RankAt(
                r,
                e[0] if e else -1,
                e[1] if e else "",
                e[2] if e else False,
                done[0] if done else -1,
                done[1] if done else "",
            )
        )
    first = min(at[r][4] for r in waiting)
    newest = max(written, default=0)
    waited = (newest - first) / 1e9 if first and newest > first else None
    return Hang(
        name,
        desc,
        seq,
        at[waiting[0]][1],
        at[waiting[0]][3],
        tuple(waiting),
        tuple(missing),
        tuple(no_dump),
        tuple(behind),
        waited,
    )
