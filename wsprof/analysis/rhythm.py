"""Steps from the job's rhythm: a training loop issues the same collectives every step.

A job with no ``wsprof.step()`` markers and no preset still repeats itself: every step issues
the same sequence of (op, caller site, process group, bytes). :func:`find_cycle` finds that
period in the sequence of calls, :func:`steps_from_rhythm` cuts one step per repetition.
Idle gaps are one signal among several: they place the cut inside the cycle (before the call
that most often follows the longest pause), but never decide how many steps there are, so a
bug whose overhead sits *between* the collectives (and closes the gaps as it grows) cannot
hide the steps it slows down.

Method:

1. **Tokens.** Each call is a token ``(op, site, group, bytes)``; runs of one repeated token
   are collapsed into one item ``(token, run length)`` (16 equal broadcasts in a row are one
   item), so that a per-parameter loop does not look like 16 steps.
2. **Period.** Items that occur ``k >= MIN_RHYTHM_STEPS`` times are candidates for a step
   count ``S``: an item of a per-step pattern occurs a multiple of ``S`` times. The largest
   ``S`` whose multiples cover at least :data:`MIN_COVERAGE` of the calls wins (the smallest
   would always be 1), and at least one item must occur exactly ``S`` times in order (the
   anchors). Items seen fewer times (set-up, a checkpoint) are left out of the count.
3. **Phase.** Among the anchors, the cut goes before the one with the longest median idle gap
   in front of it (the compute between one step's collectives and the next's), but never
   inside a loop (between two calls of one op from one site, as a per-parameter push is):
   there the gaps are the very overhead that grows.
4. **Weight sync** of a step: the longest run of consecutive weight-push collectives
   (:data:`SYNC_OPS`: broadcast, all-gather, scatter, point-to-point; never a barrier or a
   reduction) of at least :data:`MIN_SYNC_CALLS` calls; its span, first start to last
   completion, time between the calls included (that is where a wrapper's overhead lives).

Pure numpy over a :class:`~wsprof.trace.model.CallTable`; no torch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import StepRow
from wsprof.analysis.steps import covered_ns, step_rows
from wsprof.trace.model import CallTable

#: Fewest repetitions that make a rhythm (fewer are not a curve either: see growth).
MIN_RHYTHM_STEPS = 3
#: The items of the per-step pattern cover at least this fraction of all calls: what is left
#: is set-up, tear-down and occasional work (evaluation, checkpoints).
MIN_COVERAGE = 0.8
#: Canonical ops that push weights from a trainer to engines (or gather full weights).
SYNC_OPS = frozenset({
    "broadcast", "all_gather", "all_gather_into_tensor", "scatter", "send", "recv", "batch_p2p",
})
#: A weight sync is a run of at least this many sync collectives (a lone broadcast of a flag
#: or of the step number is not one).
MIN_SYNC_CALLS = 3


@dataclass(frozen=True)
class Cycle:
    """The step pattern found in a sequence of calls.

    Attributes:
        n_steps: repetitions found (S).
        starts: index of the call that starts each repetition, shape (S,), increasing.
        coverage: fraction of the calls whose item recurs a multiple of S times.
    """

    n_steps: int
    starts: tuple[int, ...]
    coverage: float


def tokens(calls: CallTable) -> npt.NDArray[np.int64]:
    """One integer per call for its (op, site, group, bytes), shape (n_calls,)."""
    ids: dict[tuple[object, int, object, int], int] = {}
    keys = zip(calls.op.tolist(), calls.site.tolist(), calls.grp.tolist(), calls.bytes.tolist())
    return np.fromiter((ids.setdefault(k, len(ids)) for k in keys), dtype=np.int64,
                       count=len(calls))


def loop_keys(calls: CallTable) -> npt.NDArray[np.int64]:
    """One integer per call for its (op, site): the calls of one loop over parameters."""
    ids: dict[tuple[object, int], int] = {}
    keys = zip(calls.op.tolist(), calls.site.tolist())
    return np.fromiter((ids.setdefault(k, len(ids)) for k in keys), dtype=np.int64,
                       count=len(calls))


def _items(tok: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], list[tuple[int, int]]]:
    """Run-length items: the index of each run's first call, and each run's (token, length)."""
    if len(tok) == 0:
        return np.zeros(0, np.int64), []
    first = np.concatenate(([0], np.nonzero(np.diff(tok))[0] + 1)).astype(np.int64)
    lengths = np.diff(np.concatenate((first, [len(tok)])))
    return first, list(zip(tok[first].tolist(), lengths.tolist()))


def find_cycle(tok: npt.NDArray[np.int64], idle_before_ns: npt.NDArray[np.int64],
               loop_key: npt.NDArray[np.int64] | None = None) -> Cycle | None:
    """The repetition of a step's calls in ``tok`` (see the module docstring), or None.

    Args:
        tok: per-call tokens (:func:`tokens`), in call order, shape (n,).
        idle_before_ns: per call, idle time since the previous call's end, ns (0 for the first),
            shape (n,): places the cut inside the cycle.
        loop_key: per call, (op, site) as an integer, shape (n,): a cut between two calls of
            one key would split a per-parameter loop, so such anchors come last.
    """
    first, items = _items(tok)
    if len(items) < MIN_RHYTHM_STEPS:
        return None
    count = Counter(items)
    calls_of = Counter[tuple[int, int]]()
    for it in items:
        calls_of[it] += it[1]
    total = len(tok)
    best: int | None = None
    for s in sorted({c for c in count.values() if c >= MIN_RHYTHM_STEPS}, reverse=True):
        covered = sum(n for it, n in calls_of.items() if count[it] % s == 0)
        if covered >= MIN_COVERAGE * total:
            best = s
            break
    if best is None:
        return None
    anchors = [it for it, c in count.items() if c == best]
    pos: dict[tuple[int, int], list[int]] = {}
    for i, it in enumerate(items):
        if count[it] == best:
            pos.setdefault(it, []).append(i)
    idle = idle_before_ns[first]

    def pause(it: tuple[int, int]) -> float:
        p = pos[it]
        return float(np.median(idle[p[1:]])) if len(p) > 1 else 0.0

    def in_loop(it: tuple[int, int]) -> bool:
        if loop_key is None:
            return False
        at = first[pos[it]]
        prev = at[at > 0]
        return bool(len(prev)) and bool(np.mean(loop_key[prev - 1] == loop_key[prev]) > 0.5)

    cut = max(anchors, key=lambda it: (not in_loop(it), pause(it), -pos[it][0]))
    starts = tuple(int(first[i]) for i in pos[cut])
    covered = sum(n for it, n in calls_of.items() if count[it] % best == 0)
    return Cycle(best, starts, covered / total)


def idle_before(calls: CallTable) -> npt.NDArray[np.int64]:
    """Per call (sorted by start): ns since every earlier call had returned, >= 0."""
    n = len(calls)
    if n == 0:
        return np.zeros(0, np.int64)
    running_end = np.maximum.accumulate(calls.t_end_ns)
    gaps = np.concatenate(([0], calls.t_start_ns[1:] - running_end[:-1]))
    return np.clip(gaps, 0, None).astype(np.int64)


def sync_run(calls: CallTable, lo: int, hi: int) -> tuple[int, int] | None:
    """The longest run of consecutive :data:`SYNC_OPS` calls in ``[lo, hi)`` (indices, the
    second exclusive) with at least :data:`MIN_SYNC_CALLS` calls, or None."""
    is_sync = np.fromiter((op in SYNC_OPS for op in calls.op[lo:hi].tolist()), dtype=bool,
                          count=hi - lo)
    best: tuple[int, int] | None = None
    i = 0
    while i < len(is_sync):
        if not is_sync[i]:
            i += 1
            continue
        j = i
        while j < len(is_sync) and is_sync[j]:
            j += 1
        if j - i >= MIN_SYNC_CALLS and (best is None or j - i > best[1] - best[0]):
            best = (lo + i, lo + j)
        i = j
    return best


def steps_from_rhythm(calls: CallTable, t_last_ns: int | None = None) -> list[StepRow]:
    """One step per repetition of the job's call pattern; empty when none is found.

    Step ``i`` runs from repetition ``i``'s first call to repetition ``i+1``'s (the last to
    ``t_last_ns`` or its last call's end). ``weight_sync_s`` is the span of the step's sync run
    (:func:`sync_run`) and ``sync_gap_s`` the part of it in no collective; both None for a
    step without one. ``sync_start_ns`` is the run's first call.
    """
    if len(calls) < MIN_RHYTHM_STEPS:
        return []
    cyc = find_cycle(tokens(calls), idle_before(calls), loop_keys(calls))
    if cyc is None:
        return []
    done = np.where(calls.t_done_ns >= 0, np.maximum(calls.t_done_ns, calls.t_end_ns),
                    calls.t_end_ns)
    bounds = [*cyc.starts, len(calls)]
    specs = []
    for i in range(cyc.n_steps):
        lo, hi = bounds[i], bounds[i + 1]
        t0 = int(calls.t_start_ns[lo])
        if i + 1 < cyc.n_steps:
            t1 = int(calls.t_start_ns[hi])
        else:
            t1 = max(int(done[lo:hi].max()), t_last_ns or 0)
        run = sync_run(calls, lo, hi)
        sync_s = gap_s = None
        sync_t0 = None
        if run is not None:
            a, b = run
            sync_t0 = int(calls.t_start_ns[a])
            end = int(done[a:b].max())
            sync_s = (end - sync_t0) / 1e9
            gap_s = max(end - sync_t0 - covered_ns(calls.t_start_ns[a:b], done[a:b], sync_t0,
                                                   end), 0) / 1e9
        specs.append((i, t0, t1, sync_s, gap_s, sync_t0))
    return step_rows(calls, specs)
