"""Which frame the added time went into: the frames that gained share of the py-spy samples,
early windows against late, ordered root to leaf by where they sit in the sampled stacks (the
last is the culprit), and how much of a frame's samples run under a given function."""

from __future__ import annotations

from wsprof.analysis.chain import function_of, short
from wsprof.analysis.model import FrameShift, ProcessAnalysis
from wsprof.analysis.rules.base import FRAME_SHIFT_MIN_CHANGE
from wsprof.analysis.samples import split_frame

#: A gained frame is a candidate culprit when it gained at least this share of the samples
#: (the frame_shift finding's own materiality).
CULPRIT_MIN_CHANGE = FRAME_SHIFT_MIN_CHANGE


def frame_key(frame: str) -> str:
    """``function (file)`` without the line: how frame_shift names frames."""
    function, file, _ = split_frame(frame)
    return f"{function} ({file})" if file is not None else function


def _stack_index(pa: ProcessAnalysis) -> list[tuple[list[str], int]]:
    """Hot stacks as ``function (file)`` keys, root first, with their samples."""
    return [([frame_key(f) for f in stack], n) for stack, n in pa.hot_stacks]


def culprit_chain(pa: ProcessAnalysis) -> list[FrameShift]:
    """The frames that gained share of the samples (at least :data:`CULPRIT_MIN_CHANGE`),
    ordered root to leaf by where they sit in the sampled stacks: the last is the culprit
    (the deepest frame the added time went into), the ones before it its callers.

    Returns:
        The chain, empty without a window shift or without a frame that gained enough.
    """
    sh = pa.shift
    if sh is None:
        return []
    gained = [g for g in sh.gained if g.change >= CULPRIT_MIN_CHANGE]
    if not gained:
        return []
    stacks = _stack_index(pa)

    def depth(g: FrameShift) -> float:
        total, weight = 0.0, 0
        for keys, n in stacks:
            if g.frame in keys:
                total += keys.index(g.frame) * n
                weight += n
        return total / weight if weight else -1.0

    return sorted(gained, key=depth)


def share_under(pa: ProcessAnalysis, frame: str, place: str) -> float | None:
    """Share of the samples holding ``frame`` whose stack also runs through a function named
    ``place`` (a short name: ``with_memory_probe``); None without stacks holding the frame."""
    total = hit = 0
    for keys, n in _stack_index(pa):
        if frame in keys:
            total += n
            i = keys.index(frame)
            if any(short(function_of(k)) == place for k in keys[:i]):
                hit += n
    return hit / total if total else None
