"""Steps from the job's rhythm: a training loop issues the same collectives every step.

A job with no ``wsprof.step()`` markers and no preset still repeats itself: every step issues
the same sequence of (op, caller site, process group, bytes). :func:`find_cycle` finds that
period in the sequence of calls, :func:`steps_from_rhythm` cuts one step per repetition.
Idle gaps are one signal among several: they place the cut inside the cycle (before the call
that most often follows the longest pause), but never decide how many steps there are, so a
bug whose overhead sits *between* the collectives (and closes the gaps as it grows) cannot
hide the steps it slows down.

Method:

1. **Tokens.** Each call is a token ``(op, site, group, bytes)``; a run of one repeated token
   is one item (16 equal broadcasts in a row are one item), so that a per-parameter loop
   does not look like 16 steps. The run's length is part of the item (FSDP's six forward
   gathers are not its single backward one); when no period is found so, it is left out (a
   loop whose length changes from step to step).
2. **Period.** The step is the shortest lag ``P`` at which the item sequence matches itself
   (the fraction of items equal to the item ``P`` later) nearly as well as at any lag
   (:data:`MATCH_TOL`), and at least :data:`MIN_MATCH`: the same autocorrelation idea as
   period detection in time series, on symbols. A lag of two steps matches as well but is
   longer; an inner loop (decode tokens, micro-batches, two pushes) matches far worse, as
   the rest of the step breaks it; an inserted evaluation costs one period of matches, not
   the rest of the run. When no lag matches, loops of a few items repeated a varying number
   of times (decoding) are collapsed to one item each and the search is repeated.
   The period may hold several steps (an extra call every third step makes the period three
   steps long). **Anchors** are items, or pairs of an item and the one before it, whose
   occurrences split the period into ``k >= 1`` nearly equal parts (:data:`STEP_EVENNESS`);
   the largest ``k`` wins, and each occurrence of the chosen anchor starts a step.
3. **Phase.** Among the anchors, the cut goes before the one with the longest median idle gap
   in front of it (the compute between one step's collectives and the next's), but never
   inside a loop (between two calls of one op from one site, as a per-parameter push is):
   there the gaps are the very overhead that grows.
4. **Weight sync** of a step: the longest run of consecutive weight-push collectives
   (:data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS`: broadcast, all-gather, scatter, point-to-point;
   never a barrier or a reduction) of at least :data:`MIN_SYNC_CALLS` calls that is a push by
   evidence (:func:`~wsprof.analysis.pushes.is_push`: it moves a
   model's worth of float payload); its span, first start to last completion, time between
   the calls included (that is where a wrapper's overhead lives). A step without one has no
   weight sync (never a gather of rewards called one).
   In a step with reduce-scatters (FSDP/ZeRO training), only runs after the last of them
   count: the all-gathers of forward and backward gather parameters for training, the
   weight push comes after the optimizer step.

Pure numpy over a :class:`~wsprof.trace.model.CallTable`; no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import StepRow
from wsprof.analysis.pushes import is_push
from wsprof.analysis.steps import (
    EDGE_CALLS_SHARE,
    clipped_done,
    covered_ns,
    ending_with_sync,
    run_end_ns,
    step_rows,
)
from wsprof.contracts.ops import WEIGHT_MOVING_OPS
from wsprof.trace.model import CallTable

#: Fewest repetitions that make a rhythm (fewer are not a curve either: see growth).
MIN_RHYTHM_STEPS = 3
#: A period must make at least this fraction of the items match the item one period later:
#: what does not is set-up, tear-down and occasional work (an evaluation, a checkpoint: each
#: insertion costs one period of matches, so 2 of 10 steps with extra work still match 0.8).
MIN_MATCH = 0.6
#: The step is the *shortest* period whose match is within this of the best: its multiples
#: match as well (two steps are a period too), an inner loop (decode tokens, micro-batches)
#: matches much worse, since the rest of the step breaks it.
MATCH_TOL = 0.03
#: Steps cut at an anchor are nearly equal in items: the 90th percentile of the distances
#: between its occurrences at most this multiple of the 10th (plus one item, for a step with
#: one extra call); an item of an inner loop recurs tightly and then after the rest of a step.
STEP_EVENNESS = 1.25
#: Largest coefficient of variation of the calls per step: decoding a varying number of
#: tokens moves a step's count by tens of percent, a step that is noise by more than half.
MAX_CALLS_CV = 0.5
#: Longest step searched, in items (runs of calls).
MAX_PERIOD_ITEMS = 20_000
#: Positions sampled to measure a period's match (enough for a 1% estimate).
MATCH_SAMPLE = 4096
#: Longest unit (in items) of a loop collapsed to one item when no period is found without.
MAX_LOOP_UNIT = 4
#: Ops of sharded training's backward (FSDP, ZeRO): the all-gathers before the last of them in
#: a step gather parameters for forward and backward, not weights for the engines.
TRAINING_GATHER_AFTER = frozenset({"reduce_scatter", "reduce_scatter_tensor"})
#: A weight sync is a run of at least this many sync collectives (a lone broadcast of a flag
#: or of the step number is not one).
MIN_SYNC_CALLS = 3


@dataclass(frozen=True)
class Cycle:
    """The step pattern found in a sequence of calls.

    Attributes:
        n_steps: repetitions found (S).
        starts: index of the call that starts each repetition, shape (S,), increasing.
        coverage: the period's match: fraction of items equal to the item one period later.
        by_rollout: the cut was placed by the process's rollout phases (each repetition starts
            with the first call of a rollout), so the calls before the first are set-up, not
            the first step's first part.
    """

    n_steps: int
    starts: tuple[int, ...]
    coverage: float
    by_rollout: bool = False


def _codes(col: npt.NDArray[np.generic]) -> npt.NDArray[np.int64]:
    """Dense integer codes of a column's values (None included), shape (n,)."""
    if col.dtype == object:
        col = np.array(["\0" if v is None else str(v) for v in col.tolist()], dtype=object)
    inverse: npt.NDArray[np.int64] = np.unique(col, return_inverse=True)[1]
    return inverse.reshape(-1).astype(np.int64)


def _combine(*codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """One dense integer per distinct tuple of the codes, shape (n,)."""
    key = np.zeros(len(codes[0]), dtype=np.int64)
    for c in codes:
        key = np.unique(key * (int(c.max(initial=0)) + 1) + c, return_inverse=True)[1].reshape(-1)
    return key.astype(np.int64)


def tokens(calls: CallTable) -> npt.NDArray[np.int64]:
    """One integer per call for its (op, site, group, bytes), shape (n_calls,)."""
    if len(calls) == 0:
        return np.zeros(0, np.int64)
    return _combine(_codes(calls.op), _codes(calls.site), _codes(calls.grp), _codes(calls.bytes))


def loop_keys(calls: CallTable) -> npt.NDArray[np.int64]:
    """One integer per call for its (op, site): the calls of one loop over parameters."""
    if len(calls) == 0:
        return np.zeros(0, np.int64)
    return _combine(_codes(calls.op), _codes(calls.site))


def _runs(
    tok: npt.NDArray[np.int64], with_length: bool
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Runs of one repeated token: the index of each run's first call and its item, the token
    and the run's length (``with_length``) or the token alone (a loop of 10 or of 12 equal
    calls is then the same item)."""
    if len(tok) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.concatenate(([0], np.nonzero(np.diff(tok))[0] + 1)).astype(np.int64)
    if not with_length:
        return first, tok[first]
    lengths = np.diff(np.concatenate((first, [len(tok)])))
    ids: dict[tuple[int, int], int] = {}
    items = np.fromiter(
        (ids.setdefault(k, len(ids)) for k in zip(tok[first].tolist(), lengths.tolist())),
        dtype=np.int64,
        count=len(first),
    )
    return first, items


def _collapse_loops(
    first: npt.NDArray[np.int64], items: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Tandem repeats of a unit of 2..:data:`MAX_LOOP_UNIT` items become one item (the unit),
    whatever their count: a decode loop of a varying number of tokens, each with the same few
    collectives, is one item in every step."""
    ids: dict[tuple[int, ...], int] = {}
    base = int(items.max()) + 1 if len(items) else 0
    out_first: list[int] = []
    out_items: list[int] = []
    seq = items.tolist()
    i, m = 0, len(seq)
    while i < m:
        best_u, best_reps = 0, 1
        for u in range(2, MAX_LOOP_UNIT + 1):
            reps = 1
            while (
                i + (reps + 1) * u <= m and seq[i + reps * u : i + (reps + 1) * u] == seq[i : i + u]
            ):
                reps += 1
            if reps >= 2 and reps * u > best_reps * max(best_u, 1):
                best_u, best_reps = u, reps
        out_first.append(int(first[i]))
        if best_u:
            out_items.append(base + ids.setdefault(tuple(seq[i : i + best_u]), len(ids)))
            i += best_u * best_reps
        else:
            out_items.append(seq[i])
            i += 1
    f, it = np.array(out_first, dtype=np.int64), np.array(out_items, dtype=np.int64)
    keep = np.concatenate(([True], it[1:] != it[:-1])) if len(it) else np.zeros(0, bool)
    return f[keep], it[keep]


def _match(items: npt.NDArray[np.int64], max_lag: int) -> npt.NDArray[np.float64]:
    """``match[P]``: the fraction of positions ``i`` with ``items[i] == items[i + P]``, for
    ``P`` in 0..max_lag (on at most :data:`MATCH_SAMPLE` evenly spread positions)."""
    m = len(items)
    out = np.zeros(max_lag + 1)
    n_pos = m - max_lag
    if n_pos <= 0:
        return out
    pos = np.unique(np.linspace(0, n_pos - 1, min(n_pos, MATCH_SAMPLE)).astype(np.int64))
    for lo in range(1, max_lag + 1, 2048):
        lags = np.arange(lo, min(lo + 2048, max_lag + 1))
        eq = items[pos[:, None]] == items[pos[:, None] + lags[None, :]]
        out[lags] = eq.mean(axis=0)
    return out


def _period(items: npt.NDArray[np.int64]) -> tuple[int, float] | None:
    """The step's length in items and its match (see :func:`find_cycle`), or None."""
    m = len(items)
    max_lag = min(m // MIN_RHYTHM_STEPS, MAX_PERIOD_ITEMS)
    if max_lag < 1:
        return None
    match = _match(items, max_lag)
    best = float(match[1:].max())
    if best < MIN_MATCH:
        return None
    p = int(np.nonzero(match[1:] >= best - MATCH_TOL)[0][0]) + 1
    return p, float(match[p])


def find_cycle(
    tok: npt.NDArray[np.int64],
    idle_before_ns: npt.NDArray[np.int64],
    loop_key: npt.NDArray[np.int64] | None = None,
    led: npt.NDArray[np.int64] | None = None,
) -> Cycle | None:
    """The repetition of a step's calls in ``tok`` (see the module docstring), or None.

    Args:
        tok: per-call tokens (:func:`tokens`), in call order, shape (n,).
        idle_before_ns: per call, idle time since the previous call's end, ns (0 for the first),
            shape (n,): places the cut inside the cycle.
        loop_key: per call, (op, site) as an integer, shape (n,): a cut between two calls of
            one key would split a per-parameter loop, so such anchors come last.
        led: indices of the calls that each open a rollout phase (the first call at or after
            the phase's start: :func:`rollout_led`): the anchor that starts most of them, when
            it starts at least half of its occurrences' steps so, is the cut, whatever the
            pauses say (a step is rollout, then train, then push).
    """
    for with_length, collapse in ((True, False), (False, False), (False, True)):
        first, items = _runs(tok, with_length)
        if collapse:
            first, items = _collapse_loops(first, items)
        found = _period(items)
        cyc = None if found is None else _cut(first, items, *found, idle_before_ns, loop_key, led)
        if cyc is not None and _steady(cyc):
            return cyc
    return None


def _steady(cyc: Cycle) -> bool:
    """True when the steps' call counts (the last, open-ended one left out) vary by at most
    :data:`MAX_CALLS_CV` (coefficient of variation): a random mix of two calls is periodic
    once runs are collapsed, but its "steps" hold 1, 2, 5, ... calls."""
    counts = np.diff(np.array(cyc.starts, dtype=np.float64))
    if len(counts) < 2:
        return True
    return float(counts.std() / counts.mean()) <= MAX_CALLS_CV


def _cut(
    first: npt.NDArray[np.int64],
    items: npt.NDArray[np.int64],
    period: int,
    match: float,
    idle_before_ns: npt.NDArray[np.int64],
    loop_key: npt.NDArray[np.int64] | None,
    led: npt.NDArray[np.int64] | None = None,
) -> Cycle | None:
    """The steps of a period found in ``items``: each occurrence of the best anchor starts one
    (see :func:`find_cycle`); None without an anchor."""
    # Anchors: items (or pairs of an item and the one before it, for steps made of loops
    # only) whose occurrences split the period into k nearly equal steps, k >= 1: an item of
    # an inner loop recurs unevenly (tight in the loop, then the rest of the step).
    pos: dict[object, list[int]] = {}
    seq = items.tolist()
    for i, it in enumerate(seq):
        pos.setdefault(it, []).append(i)
        if i:
            pos.setdefault((seq[i - 1], it), []).append(i)
    anchors: list[tuple[int, object]] = []
    for key, p in pos.items():
        if len(p) < MIN_RHYTHM_STEPS:
            continue
        d = np.diff(p)
        med = float(np.median(d))
        k = round(period / med) if med > 0 else 0
        # k parts of about a median distance each fill the period, and the anchor occurs k
        # times per period on average too: an inner loop's item recurs at its loop's pace
        # (the median) but less often on average (the rest of the step), so the two differ.
        if (
            k < 1
            or abs(med * k - period) > 0.2 * period + 1
            or round(period / float(np.mean(d))) != k
        ):
            continue
        lo, hi = np.percentile(d, [10, 90])
        if hi <= STEP_EVENNESS * lo + 1 and (k == 1 or _alike_parts(first, p)):
            anchors.append((k, key))
    if not anchors:
        return None
    k_best = max(k for k, _ in anchors)
    cands = [key for k, key in anchors if k == k_best]
    idle = idle_before_ns[first]

    def pause(key: object) -> float:
        p = pos[key]
        return float(np.median(idle[p[1:]])) if len(p) > 1 else 0.0

    def in_loop(key: object) -> bool:
        if loop_key is None:
            return False
        at = first[pos[key]]
        prev = at[at > 0]
        return bool(len(prev)) and bool(np.mean(loop_key[prev - 1] == loop_key[prev]) > 0.5)

    def leads(key: object) -> int:
        # How many of the key's occurrences open a rollout; 0 unless at least half do (a
        # rollout phase per step, not an odd one).
        if led is None or not len(led):
            return 0
        n = int(np.isin(first[pos[key]], led).sum())
        return n if 2 * n >= len(pos[key]) else 0

    cut = max(cands, key=lambda key: (leads(key), not in_loop(key), pause(key), -pos[key][0]))
    at = list(pos[cut])
    if isinstance(cut, tuple):
        # A pair misses the first step, whose item follows set-up instead of a step: take the
        # item's occurrence about a period before the pair's first.
        earlier = [i for i in pos[cut[1]] if 0.5 * period <= at[0] - i <= 1.5 * period]
        if earlier:
            at.insert(0, earlier[-1])
    starts = tuple(int(first[i]) for i in at)
    return Cycle(len(starts), starts, match, by_rollout=leads(cut) > 0)


def _alike_parts(first: npt.NDArray[np.int64], at: list[int]) -> bool:
    """True when the parts an anchor cuts (its occurrences ``at``, item positions; ``first``
    maps items to calls) hold nearly the same number of calls (:data:`STEP_EVENNESS`): a
    period of several steps repeats one step (an extra call every third), while TRL's
    generation and optimisation halves of one step (11 and 7 calls) are one step, not two."""
    calls = np.diff(first[at])
    lo, hi = np.percentile(calls, [10, 90])
    return bool(hi <= STEP_EVENNESS * lo + 1)


def rollout_led(calls: CallTable, rollout_starts_ns: Sequence[int]) -> npt.NDArray[np.int64]:
    """Indices of the calls (sorted by start) that open a rollout: for each rollout phase's
    start (ns; a framework preset marks them, as TRL's ``_generate_single_turn``), the first
    call at or after it, when it comes before the next rollout starts; unique, increasing."""
    if not len(calls) or not len(rollout_starts_ns):
        return np.zeros(0, np.int64)
    starts = np.unique(np.asarray(rollout_starts_ns, dtype=np.int64))
    idx = np.searchsorted(calls.t_start_ns, starts, side="left")
    nxt = np.append(starts[1:], np.iinfo(np.int64).max)
    ok = idx < len(calls)
    ok[ok] &= calls.t_start_ns[idx[ok]] < nxt[ok]
    return np.unique(idx[ok]).astype(np.int64)


def idle_before(calls: CallTable) -> npt.NDArray[np.int64]:
    """Per call (sorted by start): ns since every earlier call had returned, >= 0."""
    n = len(calls)
    if n == 0:
        return np.zeros(0, np.int64)
    running_end = np.maximum.accumulate(calls.t_end_ns)
    gaps = np.concatenate(([0], calls.t_start_ns[1:] - running_end[:-1]))
    return np.clip(gaps, 0, None).astype(np.int64)


#: Ops that join the weight-moving calls of a colocated push into one run: its buckets are
#: sent by handle (CUDA IPC, shared memory), each one's handles gathered to the sending rank
#: with ``gather_object`` (slime's ``_send_to_colocated_engine``) between the TP gathers of
#: the next, and the push meets at barriers (its own timer counts all of it).
COLOCATED_GLUE = frozenset({"gather", "barrier"})


def sync_run(
    calls: CallTable, lo: int, hi: int, glue: frozenset[str] = frozenset()
) -> tuple[int, int] | None:
    """The longest run of consecutive :data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS` calls in
    ``[lo, hi)`` (indices, the second exclusive) with at least :data:`MIN_SYNC_CALLS` calls
    that is a weight push (:func:`~wsprof.analysis.pushes.is_push`), or None; after the last
    reduce-scatter of the range when it has one (:data:`TRAINING_GATHER_AFTER`). ``glue``
    ops (:data:`COLOCATED_GLUE` for a process that shares tensors) are part of a run."""
    ops = calls.op[lo:hi].tolist()
    last_rs = max((i for i, op in enumerate(ops) if op in TRAINING_GATHER_AFTER), default=-1)
    if last_rs >= 0:
        lo, ops = lo + last_rs + 1, ops[last_rs + 1 :]
    is_sync = np.fromiter(
        (op in WEIGHT_MOVING_OPS or op in glue for op in ops), dtype=bool, count=len(ops)
    )
    best: tuple[int, int] | None = None
    i = 0
    while i < len(is_sync):
        if not is_sync[i]:
            i += 1
            continue
        j = i
        while j < len(is_sync) and is_sync[j]:
            j += 1
        if (
            j - i >= MIN_SYNC_CALLS
            and (best is None or j - i > best[1] - best[0])
            and is_push(calls, lo + i, lo + j)
        ):
            best = (lo + i, lo + j)
        i = j
    return best


def with_barriers(
    calls: CallTable, run: tuple[int, int] | None, lo: int, hi: int
) -> tuple[int, int] | None:
    """``run`` (a sync run, :func:`sync_run`) with the barriers right before and right after
    it in ``[lo, hi)``: the frameworks meet at a barrier when their ``update_weights`` starts
    and again when it ends (slime, AReaL), and their own timer counts that time, as the
    weight-update path does (:func:`~wsprof.analysis.updates.steps_from_updates`); the part
    a rank waits there for slower peers is told apart as its ``sync_wait_s``."""
    if run is None:
        return None
    a, b = run
    while a - 1 >= lo and calls.op[a - 1] == "barrier":
        a -= 1
    while b < hi and calls.op[b] == "barrier":
        b += 1
    return a, b


def steps_from_rhythm(
    calls: CallTable,
    t_last_ns: int | None = None,
    t_first_ns: int | None = None,
    glue: frozenset[str] = frozenset(),
    rollout_starts_ns: Sequence[int] = (),
) -> list[StepRow]:
    """One step per repetition of the job's call pattern; empty when none is found.

    ``rollout_starts_ns``: the starts of the process's rollout phases (ns), when a preset
    marked them without step numbers: each repetition then starts with a rollout's first call
    (:func:`find_cycle`'s ``led``), and the calls before the first are set-up, no step.

    Step ``i`` runs from repetition ``i``'s first call to repetition ``i+1``'s (the last to
    ``t_last_ns`` or its last call's end). ``weight_sync_s`` is the span of the step's sync run
    (:func:`sync_run`) and ``sync_gap_s`` the part of it
    in no collective; both None for a step without one. ``sync_start_ns`` is the run's first call.

    When every repetition (all but one at most) has a weight sync, a step ends with it
    (:func:`_ending_with_sync`): the frameworks' step is rollout, train, push, and every
    process of a run then cuts its steps at the same place, whichever call its own rhythm
    started from; the first such step starts at ``t_first_ns`` (the process's first record),
    else at its first call.
    """
    if len(calls) < MIN_RHYTHM_STEPS:
        return []
    cyc = find_cycle(
        tokens(calls), idle_before(calls), loop_keys(calls), rollout_led(calls, rollout_starts_ns)
    )
    if cyc is None:
        return []
    done = np.where(
        calls.t_done_ns >= 0, np.maximum(calls.t_done_ns, calls.t_end_ns), calls.t_end_ns
    )
    bounds = [*cyc.starts, len(calls)]
    runs = [
        with_barriers(
            calls, sync_run(calls, bounds[i], bounds[i + 1], glue), bounds[i], bounds[i + 1]
        )
        for i in range(cyc.n_steps)
    ]
    found = [r for r in runs if r is not None]
    if len(found) >= max(MIN_RHYTHM_STEPS, cyc.n_steps - 1):
        return _ending_with_sync(calls, done, found, t_first_ns)
    specs = []
    # Set-up before the first repetition (DDP's broadcast of the model at construction, a
    # checkpoint load) is no step's weight sync when no repetition pushes weights.
    head = None if cyc.by_rollout else _head_step(calls, cyc, done, t_first_ns, glue, bool(found))
    if head is not None:
        specs.append(head)
    for i, run in enumerate(runs):
        lo, hi = bounds[i], bounds[i + 1]
        t0 = int(calls.t_start_ns[lo])
        if i + 1 < cyc.n_steps:
            t1 = int(calls.t_start_ns[hi])
        else:
            t1 = max(int(done[lo:hi].max()), t_last_ns or 0)
        specs.append((len(specs), t0, t1, *_sync_of(calls, done, run)))
    return step_rows(calls, specs)


def _head_step(
    calls: CallTable,
    cyc: Cycle,
    done: npt.NDArray[np.int64],
    t_first_ns: int | None,
    glue: frozenset[str] = frozenset(),
    with_sync: bool = True,
) -> tuple[int, int, int, float | None, float | None, int | None] | None:
    """The calls before the first repetition as a step of their own, when they hold at least
    :data:`~wsprof.analysis.steps.EDGE_CALLS_SHARE` of a step's calls: the cut goes before the
    longest pause, which in a DDP job (its gradient all-reduces unseen) falls inside the step,
    so the first step's first part comes before it (the last step's rest, after the last
    cut, is then a truncated step, left out). ``with_sync``: whether its weight-push run is
    its weight sync (False when no repetition has one: the run is set-up)."""
    first = cyc.starts[0]
    lengths = np.diff(np.array(cyc.starts, dtype=np.int64))
    per_step = float(np.median(lengths))
    if first == 0 or first < EDGE_CALLS_SHARE * per_step or lengths[0] < 0.75 * per_step:
        return None  # nothing before, too little, or the first repetition is itself partial
    t0 = int(calls.t_start_ns[0])
    t0 = min(t0, t_first_ns) if t_first_ns is not None else t0
    run = with_barriers(calls, sync_run(calls, 0, first, glue), 0, first) if with_sync else None
    return (0, t0, int(calls.t_start_ns[first]), *_sync_of(calls, done, run))


def _sync_of(
    calls: CallTable, done: npt.NDArray[np.int64], run: tuple[int, int] | None
) -> tuple[float | None, float | None, int | None]:
    """``(weight_sync_s, sync_gap_s, sync_start_ns)`` of a sync run (all None without)."""
    if run is None:
        return None, None, None
    a, b = run
    t0 = int(calls.t_start_ns[a])
    own = clipped_done(calls, done, a, b)
    end = int(own.max())
    gap = max(end - t0 - covered_ns(calls.t_start_ns[a:b], own, t0, end), 0) / 1e9
    return (end - t0) / 1e9, gap, t0


def _ending_with_sync(
    calls: CallTable,
    done: npt.NDArray[np.int64],
    runs: list[tuple[int, int]],
    t_first_ns: int | None,
) -> list[StepRow]:
    """Steps that end when their weight sync completes: step ``k`` runs from the end of sync
    ``k-1`` (the first from the first call) to the end of sync ``k``
    (:func:`~wsprof.analysis.steps.ending_with_sync`); what follows the last sync is a
    truncated step, left out."""
    ends = [run_end_ns(calls, done, a, b) for a, b in runs]
    first = int(calls.t_start_ns[0])
    starts = [min(first, t_first_ns) if t_first_ns is not None else first, *ends[:-1]]
    return ending_with_sync(
        calls,
        [
            (i, t0, t1, *_sync_of(calls, done, run))
            for i, (t0, t1, run) in enumerate(zip(starts, ends, runs))
        ],
    )
