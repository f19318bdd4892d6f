"""Weight updates on the push group, and steps cut at them.

RL frameworks push new weights from the trainers to the inference engines on a group made for
it (slime's ``slime-pp_0``, AReaL's and verl's weight-update groups, OpenRLHF's ``openrlhf``
group): a non-default process group on which a process issues nothing but weight-push
collectives (:data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS`) and barriers. Its rank 0 sends (a
trainer), the others receive (the engines). Every weight update is one repetition of the same
calls on it.

- :func:`push_group` names that group for one process and finds its updates.
- :func:`steps_from_updates` cuts an engine's (or the sending trainer's) steps at the end of
  each update it took part in: step ``k`` ends when update ``k`` has arrived, so every process
  of the run has the same steps (the trainers' step ends with its push, the engines' with
  loading it), as the frameworks log them.

Pure numpy over a :class:`~wsprof.trace.model.CallTable` and the trace's meta; no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import StepRow
from wsprof.analysis.pushes import MIN_PUSH_BYTES, float_mask, is_float
from wsprof.analysis.rhythm import find_cycle, idle_before, loop_keys, tokens
from wsprof.analysis.steps import clipped_done, covered_ns, detect_bursts, ending_with_sync
from wsprof.contracts.ops import WEIGHT_MOVING_OPS
from wsprof.contracts.units import fmt_bytes
from wsprof.trace.model import CallTable

#: Updates on a push group are split where a gap is this many times the longest gap inside
#: one: a looser bar than for bursts of all calls (:data:`~wsprof.analysis.steps.MIN_GAP_RATIO`),
#: as only the push's own calls are on the group, and the trainer's gathers between buckets
#: (verl's checkpoint engine broadcasts bucket by bucket from a thread) stretch the gaps inside.
UPDATE_GAP_RATIO = 3.0
#: Fewest weight updates on a push group for steps to be cut at them.
MIN_UPDATES = 3


#: Every update pushes the whole model: the bytes of the updates found differ by at most this
#: factor (largest over smallest), else the cut is wrong (a bucket taken for an update, or
#: two updates for one).
UPDATE_BYTES_SPREAD = 1.25


def _updates_on(sub: CallTable, cum: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """The updates among one group's calls ``sub`` (``cum``: cumulative weight bytes of its
    calls, :func:`weight_bytes`, with a leading 0): first and last position of each in
    ``sub``, inclusive. Three cuts are tried: bursts split at idle gaps
    (:data:`UPDATE_GAP_RATIO`), the group's own rhythm, as every update repeats the same
    calls (:func:`~wsprof.analysis.rhythm.find_cycle`; verl's buckets wait for the
    trainer's gathers, so its gaps do not tell updates apart), and the largest gaps
    (:func:`_largest_gaps`: where equal buckets make the rhythm one bucket long). Of those
    with :data:`MIN_UPDATES` updates that each move the same bytes
    (:data:`UPDATE_BYTES_SPREAD`), the one with the fewest updates wins (a bucket is not an
    update); empty when none."""
    done = np.maximum(sub.t_done_ns, sub.t_end_ns)
    cuts = [detect_bursts(sub.t_start_ns, done, UPDATE_GAP_RATIO)]
    cyc = find_cycle(tokens(sub), idle_before(sub), loop_keys(sub))
    if cyc is not None:
        bounds = [*cyc.starts, len(sub)]
        cuts.append([(a, b - 1) for a, b in zip(bounds[:-1], bounds[1:])])
    cuts.append(_largest_gaps(sub, done, cum))
    good = [cut for cut in cuts if len(cut) >= MIN_UPDATES and _even(cum, cut)]
    return min(good, key=len) if good else []


def _even(cum: npt.NDArray[np.int64], cut: list[tuple[int, int]]) -> bool:
    """Whether the pieces of ``cut`` (first and last position, inclusive) each move the same
    bytes (:data:`UPDATE_BYTES_SPREAD`) and some."""
    a = np.array([x for x, _ in cut], dtype=np.int64)
    b = np.array([y for _, y in cut], dtype=np.int64)
    per = cum[b + 1] - cum[a]
    return bool(per.min() > 0 and per.max() <= UPDATE_BYTES_SPREAD * per.min())


#: Cutting at the largest gaps: the shortest gap cut is at least this many times the longest
#: gap left inside an update. On the AReaL-shaped job's engines with a slow trainer rank, the
#: gaps between updates stand 1.7-2.0 times above the longest inside one, while cutting two
#: updates a piece (also even in bytes) stands at 1.46-1.51.
LARGEST_GAPS_RATIO = 1.6


def _largest_gaps(
    sub: CallTable, done: npt.NDArray[np.int64], cum: npt.NDArray[np.int64]
) -> list[tuple[int, int]]:
    """Updates cut at the ``m`` largest gaps between the group's calls, for the smallest ``m``
    whose pieces each move the same bytes (:data:`UPDATE_BYTES_SPREAD`) and whose shortest
    cut gap is at least :data:`LARGEST_GAPS_RATIO` times the longest uncut one (more cuts
    would split the buckets of an update, fewer with a weaker gap two updates a piece): an
    engine's updates when the trainer's gathers stretch the gaps between buckets (AReaL with
    a slow trainer rank) so that neither a fixed ratio nor the group's rhythm tells them
    apart. Only the ``m`` at such a jump in the sorted gaps are tried (a few). Positions in
    ``sub``; empty when no ``m`` fits."""
    n = len(sub)
    if n < 2 * MIN_UPDATES:
        return []
    gaps = sub.t_start_ns[1:] - np.maximum.accumulate(done)[:-1]
    order = np.argsort(-gaps, kind="stable")
    ranked = gaps[order].astype(np.float64)
    jumps = np.nonzero(ranked[:-1] >= LARGEST_GAPS_RATIO * np.maximum(ranked[1:], 1.0))[0] + 1
    for m in jumps[jumps >= MIN_UPDATES - 1].tolist():
        at = np.sort(order[:m]) + 1  # each cut starts a piece
        cut = list(zip(np.concatenate(([0], at)).tolist(), (np.append(at, n) - 1).tolist()))
        if _even(cum, cut):
            return cut
    return []


def weight_bytes(calls: CallTable, on: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per call of ``on`` (indices into ``calls``), the bytes of weights it moves: a float
    tensor's, or a buffer of at least :data:`~wsprof.analysis.pushes.MIN_PUSH_BYTES` whatever
    its dtype (verl packs a bucket as bytes); 0 for a pickled request of a few hundred bytes
    or a barrier."""
    b = calls.bytes[on]
    keep = (b > 0) & (float_mask(calls.dtype[on]) | (b >= MIN_PUSH_BYTES))
    return np.where(keep, b, 0).astype(np.int64)


def push_group(
    calls: CallTable, meta: Mapping[str, Any]
) -> tuple[str, list[tuple[int, int]]] | None:
    """The group this process pushes or receives weights on, with its updates, or None.

    A non-default group (``meta['groups']``, the default one left out by its recorded flag or
    its name ``'0'``) on which every recorded call is a
    :data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS` op or a barrier
    (verl's checkpoint engine meets on its group before each update), whose calls come in
    updates (:func:`_updates_on`) that move at least
    :data:`~wsprof.analysis.pushes.MIN_PUSH_BYTES` of weights each (median,
    :func:`weight_bytes`). Of several, a group larger than the process's world first (it
    reaches beyond it: trainers to engines), then one that carries float tensors (an
    engine's loop of pickled requests broadcast to its TP peers carries bytes), then the
    most bytes per update.

    Returns:
        ``(group name, per update the first and last call index, inclusive)``.
    """
    if not len(calls):
        return None
    default = {"0"}
    groups = meta.get("groups")
    if isinstance(groups, list):
        default |= {
            str(g.get("name"))
            for g in groups
            if isinstance(g, Mapping) and g.get("default") is True
        }
    world = meta.get("world")
    world_size = world.get("size") if isinstance(world, Mapping) else None
    sizes = (
        {str(g.get("name")): g.get("size") for g in groups or [] if isinstance(g, Mapping)}
        if isinstance(groups, list)
        else {}
    )
    grp = calls.grp
    best: tuple[tuple[bool, bool, float], str, list[tuple[int, int]]] | None = None
    for name in set(grp.tolist()) - {None}:
        if str(name) in default:
            continue
        on = np.nonzero(grp == name)[0]
        ops = set(calls.op[on].tolist())
        if not ops & WEIGHT_MOVING_OPS or not ops <= WEIGHT_MOVING_OPS | {"barrier"}:
            continue
        cum = np.concatenate(([0], np.cumsum(weight_bytes(calls, on))))
        pieces = _updates_on(calls.take(on), cum)
        if not pieces:
            continue
        per = float(np.median([cum[b + 1] - cum[a] for a, b in pieces]))
        if per < MIN_PUSH_BYTES:
            continue
        size = sizes.get(str(name))
        beyond = isinstance(size, int) and isinstance(world_size, int) and size > world_size
        floats = bool(float_mask(calls.dtype[on]).any())
        key = (beyond, floats, per)
        if best is None or key > best[0]:
            best = (key, str(name), [(int(on[a]), int(on[b])) for a, b in pieces])
    return None if best is None else (best[1], best[2])


@dataclass(frozen=True)
class Updates:
    """The weight updates of one process on its push group.

    Attributes:
        group: the push group's name.
        bursts: per update, the first and last call index (inclusive) into the process's calls.
        sender: True when the process is the group's rank 0 (it sends the weights).
    """

    group: str
    bursts: tuple[tuple[int, int], ...]
    sender: bool


def updates(calls: CallTable, meta: Mapping[str, Any]) -> Updates | None:
    """The weight updates on the process's push group (:func:`push_group`); None without one
    or with fewer than :data:`MIN_UPDATES` updates."""
    found = push_group(calls, meta)
    if found is None or len(found[1]) < MIN_UPDATES:
        return None
    group, bursts = found
    rank = next(
        (
            g.get("rank")
            for g in (meta.get("groups") or [])
            if isinstance(g, Mapping) and str(g.get("name")) == group
        ),
        None,
    )
    return Updates(group, tuple(bursts), rank == 0)


def _sync_span(
    calls: CallTable, done: npt.NDArray[np.int64], a: int, b: int, lo: int, group: str
) -> tuple[int, int, float]:
    """The weight sync around an update whose calls on the push group are ``a..b``: the
    update, extended back over the float weight-push calls and barriers right before it in
    the step (from ``lo``: a trainer meets its peers, gathers each parameter, then broadcasts
    it; an engine's control broadcasts of pickled requests are not part of it) and forward
    over the barriers right after it (slime and AReaL meet again when it is done). Returns
    its first call's index, its end (ns) and its time in no collective (s)."""
    first = a
    while first - 1 >= lo and (
        calls.op[first - 1] == "barrier"
        or (calls.op[first - 1] in WEIGHT_MOVING_OPS and is_float(calls.dtype[first - 1]))
    ):
        first -= 1
    while b + 1 < len(calls) and calls.op[b + 1] == "barrier":  # the frameworks meet after
        b += 1
    t0 = int(calls.t_start_ns[first])
    # Its end: the last of its own calls (a call of another thread started inside it may end
    # later).
    clipped = clipped_done(calls, done, first, b + 1)
    mine = (calls.grp[a : b + 1] == group) | (calls.op[a : b + 1] == "barrier")
    own = np.concatenate((clipped[: a - first], clipped[a - first :][mine]))
    end = max(int(own.max()), int(calls.t_end_ns[b]))
    cov = covered_ns(calls.t_start_ns[first : b + 1], clipped, t0, end)
    return first, end, max(end - t0 - cov, 0) / 1e9


def steps_from_updates(
    calls: CallTable, up: Updates, t_first_ns: int | None = None
) -> list[StepRow]:
    """One step per weight update: step ``k`` runs from the end of update ``k-1`` to the end
    of update ``k`` (its weight sync is that update, see :func:`_sync_span`), the first
    segment kept only when long enough
    (:func:`~wsprof.analysis.steps.ending_with_sync`: a job with an initial push starts
    with a short one); what follows the last update is a truncated step and left out."""
    done = np.where(
        calls.t_done_ns >= 0, np.maximum(calls.t_done_ns, calls.t_end_ns), calls.t_end_ns
    )
    specs: list[tuple[int, int, int, float | None, float | None, int | None]] = []
    prev_end, prev_idx = int(calls.t_start_ns[0]), 0
    if t_first_ns is not None:  # the first step starts with the process's first record
        prev_end = min(prev_end, t_first_ns)
    for a, b in up.bursts:
        first, end, gap = _sync_span(calls, done, a, b, prev_idx, up.group)
        t0 = int(calls.t_start_ns[first])
        specs.append((len(specs), prev_end, end, (end - t0) / 1e9, gap, t0))
        prev_end, prev_idx = end, b + 1
    return ending_with_sync(calls, specs)


def evidence_line(up: Updates | None, rows: Sequence[StepRow]) -> str | None:
    """How the weight sync of these steps was told (for notes and the headline), or None when
    no step has one."""
    if not any(r.weight_sync_s is not None for r in rows):
        return None
    if up is not None:
        side = "sends" if up.sender else "receives"
        return f"{side} weights on group '{up.group}' ({len(up.bursts)} updates)"
    return f"payloads of {fmt_bytes(MIN_PUSH_BYTES)} or more of float tensors per step"
