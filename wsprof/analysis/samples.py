"""Views of py-spy samples: hot frames, hot stacks and frame shares per window.

Pure functions of :class:`~wsprof.trace.model.SampleWindow` lists (as the reader returns them);
nothing here touches a live process or imports torch.

Frames are py-spy's ``function (file:line)``, root first. Two kinds of frames are not code and
are dropped before counting: pseudo-frames (``thread (TID): name`` from ``--threads`` and
``process PID:"cmdline"`` from ``--subprocesses``). Samples whose leaf is a known blocking
call (a wait, a sleep, a select; see :data:`IDLE_NATIVE_FUNCTIONS` and
:data:`IDLE_PYTHON_FUNCTIONS`) are idle and are left out of every count and total, so shares
are shares of *active* samples.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from wsprof.analysis.model import FrameShift, HotFrame, WindowShift
from wsprof.trace.model import SampleWindow

#: Prefix of the thread pseudo-frame py-spy adds with ``--threads``.
THREAD_FRAME_PREFIX = "thread ("
#: Prefix of the process pseudo-frames py-spy adds with ``--subprocesses``.
PROCESS_FRAME_RE = re.compile(r'^process \d+:"')
#: ``function (file:line)``, ``function (file)`` (native frames, no line) or bare ``function``.
FRAME_RE = re.compile(r"^(?P<function>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

#: Native leaf functions (``--native``) that block: the thread is waiting, not working.
IDLE_NATIVE_FUNCTIONS = frozenset(
    {
        "epoll_wait",
        "epoll_pwait",
        "poll",
        "__poll",
        "ppoll",
        "select",
        "__select",
        "pselect6",
        "nanosleep",
        "__nanosleep",
        "clock_nanosleep",
        "__clock_nanosleep",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_cond_clockwait",
        "___pthread_cond_wait",
        "___pthread_cond_timedwait",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "do_futex_wait",
        "__futex_abstimed_wait_common",
        "__futex_abstimed_wait_common64",
        "accept",
        "accept4",
        "recv",
        "recvfrom",
        "recvmsg",
        "wait4",
        "waitpid",
        "pause",
        "sigtimedwait",
        "sigwaitinfo",
    }
)

# Matched without leading underscores: glibc versions differ in how many they add.
_IDLE_NATIVE_BARE = frozenset(f.lstrip("_") for f in IDLE_NATIVE_FUNCTIONS)

#: (file name, function) of Python leaf frames that sit in a blocking call.
IDLE_PYTHON_FUNCTIONS = frozenset(
    {
        ("threading.py", "wait"),  # Condition.wait, Event.wait, Semaphore.acquire -> wait
        ("threading.py", "_wait_for_tstate_lock"),  # Thread.join
        ("selectors.py", "select"),  # asyncio's idle event loop
        ("socket.py", "accept"),
        ("connection.py", "_recv"),  # multiprocessing pipes
        ("connection.py", "_poll"),
        ("subprocess.py", "_try_wait"),
        ("popen_fork.py", "poll"),
    }
)


@dataclass(frozen=True)
class WindowShares:
    """Frame shares of active samples in one sampling window (all pids sampled in it)."""

    t_start_ns: int
    t_end_ns: int
    frames: tuple[HotFrame, ...]  # most samples first

    @property
    def total(self) -> int:
        """Active samples in the window."""
        return self.frames[0].total if self.frames else 0


def is_pseudo_frame(frame: str) -> bool:
    """True for py-spy's thread and process frames, which are not code."""
    return frame.startswith(THREAD_FRAME_PREFIX) or PROCESS_FRAME_RE.match(frame) is not None


def split_frame(frame: str) -> tuple[str, str | None, int | None]:
    """``(function, file, line)`` of a frame; file and line None where py-spy gave none."""
    m = FRAME_RE.match(frame)
    if m is None:
        return frame, None, None
    line = m.group("line")
    return m.group("function"), m.group("file"), int(line) if line is not None else None


def is_idle_frame(frame: str) -> bool:
    """True when the frame is a known blocking call (see the module docstring)."""
    function, file, line = split_frame(frame)
    name = function.rsplit(".", 1)[-1]
    if line is None and name.lstrip("_") in _IDLE_NATIVE_BARE:
        return True
    if file is None:
        return False
    base = file.replace("\\", "/").rsplit("/", 1)[-1]
    return (base, name) in IDLE_PYTHON_FUNCTIONS


#: wsprof's own hook functions (``_api_wrapper.<locals>.wsprof_api_hook`` ...): transparent in
#: samples, so that a patched and sampled process never blames the profiler's wrappers for the
#: time of the collective they time.
WSPROF_HOOK_FRAME_RE = re.compile(r"(?:^|\.)wsprof_[a-z_]+_hook \(")


def code_frames(frames: Sequence[str]) -> tuple[str, ...]:
    """The frames of a stack without pseudo-frames and wsprof's own hooks, root first."""
    return tuple(
        f for f in frames if not is_pseudo_frame(f) and WSPROF_HOOK_FRAME_RE.search(f) is None
    )


def idle_stack(frames: Sequence[str]) -> bool:
    """True when a stack's leaf is a blocking call: the thread was waiting, not working.

    Args:
        frames: a stack, root first (pseudo-frames are dropped first).
    """
    return _idle_leaf(code_frames(frames))


def _idle_leaf(frames: Sequence[str]) -> bool:
    # Native unwinding may end in unnamed addresses ('0x7f... (libc.so.6)') below the wait.
    for frame in reversed(frames):
        if not frame.startswith("0x"):
            return is_idle_frame(frame)
    return False


def _strip_line(frame: str) -> str:
    function, file, _ = split_frame(frame)
    return f"{function} ({file})" if file is not None else function


def _active(windows: Iterable[SampleWindow], lines: bool) -> Iterable[tuple[tuple[str, ...], int]]:
    """(code frames, count) of every active sample group."""
    for w in windows:
        frames = code_frames(w.frames)
        if not frames or w.count <= 0 or _idle_leaf(frames):
            continue
        if not lines:
            frames = tuple(_strip_line(f) for f in frames)
        yield frames, w.count


def _ranked(counts: Counter[str], total: int) -> list[HotFrame]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [HotFrame(frame, n, total) for frame, n in ranked]


def hot_frames(
    windows: Iterable[SampleWindow], *, inclusive: bool = False, lines: bool = True
) -> list[HotFrame]:
    """Frames by active samples, most first.

    Args:
        windows: sample groups (any pids, threads, windows).
        inclusive: count a frame in every sample whose stack holds it (once per sample), not
            only where it is the leaf.
        lines: keep line numbers; False merges ``f (a.py:3)`` and ``f (a.py:7)`` into
            ``f (a.py)``.

    Returns:
        One :class:`HotFrame` per frame; ``total`` is the number of active samples.
    """
    counts: Counter[str] = Counter()
    total = 0
    for frames, n in _active(windows, lines):
        total += n
        if inclusive:
            for frame in set(frames):
                counts[frame] += n
        else:
            counts[frames[-1]] += n
    return _ranked(counts, total)


def hot_stacks(
    windows: Iterable[SampleWindow], top: int = 20, *, lines: bool = True
) -> list[tuple[tuple[str, ...], int]]:
    """Whole stacks (root first, pseudo-frames dropped) by active samples, most first.

    Args:
        windows: sample groups.
        top: most stacks returned.
        lines: keep line numbers (see :func:`hot_frames`).

    Returns:
        ``(stack, samples)`` pairs, at most ``top``.
    """
    counts: Counter[tuple[str, ...]] = Counter()
    for frames, n in _active(windows, lines):
        counts[frames] += n
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[: max(top, 0)]


def frame_shares_by_window(
    windows: Iterable[SampleWindow], *, inclusive: bool = True, lines: bool = False
) -> list[WindowShares]:
    """Frame shares per sampling window, in time order, to compare early and late windows.

    Sample groups with the same ``(t_start_ns, t_end_ns)`` form one window (the sampler
    stamps every pid of a window alike).

    Args:
        windows: sample groups.
        inclusive: see :func:`hot_frames` (default True: "share of samples inside f").
        lines: see :func:`hot_frames` (default False: per function and file).

    Returns:
        One :class:`WindowShares` per window with at least one active sample.
    """
    groups: dict[tuple[int, int], list[SampleWindow]] = {}
    for w in windows:
        groups.setdefault((w.t_start_ns, w.t_end_ns), []).append(w)
    out: list[WindowShares] = []
    for (t0, t1), group in sorted(groups.items()):
        frames = hot_frames(group, inclusive=inclusive, lines=lines)
        if frames:
            out.append(WindowShares(t0, t1, tuple(frames)))
    return out


#: Least share of a window's active samples a frame must be in to be the window's *common
#: frame*. Half: the frame then names where the majority of the window's time went, and two
#: qualifying frames always share samples (they cannot be unrelated halves of the window).
COMMON_FRAME_SHARE = 0.5
#: Most frames kept on each side (gained, lost) by :func:`early_late_shift`.
MAX_SHIFT_FRAMES = 20


def group_windows(windows: Iterable[SampleWindow]) -> list[tuple[int, int, list[SampleWindow]]]:
    """Sample groups by sampling window, in time order.

    Sample groups with the same ``(t_start_ns, t_end_ns)`` form one window (the sampler stamps
    every pid and thread of a window alike).

    Returns:
        ``(t_start_ns, t_end_ns, groups)`` per window, earliest first.
    """
    groups: dict[tuple[int, int], list[SampleWindow]] = {}
    for w in windows:
        groups.setdefault((w.t_start_ns, w.t_end_ns), []).append(w)
    return [(t0, t1, group) for (t0, t1), group in sorted(groups.items())]


def _inclusive(windows: Iterable[SampleWindow]) -> tuple[Counter[str], dict[str, float], int]:
    """Per function and file: active samples holding the frame, the sum over those samples of
    its depth (index from the root of its deepest occurrence), and the active total."""
    counts: Counter[str] = Counter()
    depth_sum: dict[str, float] = {}
    total = 0
    for frames, n in _active(windows, lines=False):
        total += n
        deepest = {frame: i for i, frame in enumerate(frames)}
        for frame, depth in deepest.items():
            counts[frame] += n
            depth_sum[frame] = depth_sum.get(frame, 0.0) + depth * n
    return counts, depth_sum, total


def common_frame(windows: Iterable[SampleWindow]) -> str | None:
    """The frame common to most samples: the deepest frame (closest to the leaf) present in at
    least :data:`COMMON_FRAME_SHARE` of the active samples.

    Frames are taken per function and file (``f (a.py)``: the lines of a loop differ from
    sample to sample). Depth is a frame's index from the root, averaged over the samples that
    hold it; ties go to the frame in more samples, then to the name. With one busy thread this
    is the innermost function the thread stays in for most of the window (``update_weights``
    rather than ``main``); samples of several threads can leave no frame qualifying.

    Args:
        windows: sample groups (usually one sampling window of one process).

    Returns:
        ``function (file)``, or None without active samples or without a qualifying frame.
    """
    counts, depth_sum, total = _inclusive(windows)
    if total <= 0:
        return None
    cands = [f for f, n in counts.items() if n >= COMMON_FRAME_SHARE * total]
    if not cands:
        return None
    return min(cands, key=lambda f: (-depth_sum[f] / counts[f], -counts[f], f))


def _early_late(
    windows: Iterable[SampleWindow], k: int | None
) -> tuple[int, int, list[SampleWindow], list[SampleWindow]] | None:
    """(k, windows with active samples, sample groups of the first k, of the last k); k
    defaults to a third, clamped to [1, half]; None with fewer than 2 such windows."""
    groups = [g for _, _, g in group_windows(windows) if any(True for _ in _active(g, False))]
    n = len(groups)
    if n < 2:
        return None
    k = max(1, n // 3) if k is None else k
    k = max(1, min(k, n // 2))
    return (k, n, [w for g in groups[:k] for w in g], [w for g in groups[-k:] for w in g])


def early_late_shift(windows: Iterable[SampleWindow], k: int | None = None) -> WindowShift | None:
    """Frames whose share of samples changed between the first and the last windows.

    Shares are inclusive (a frame counts in every sample whose stack holds it) and per function
    and file, of the active samples pooled over the first ``k`` windows and over the last ``k``.
    A frame that gained share is where added time went (the slowdown); one that lost share is
    what it displaced. Callers of a gaining frame gain as much when it is their only growing
    child: ties go to the deeper frame.

    Args:
        windows: sample groups; only windows with active samples count.
        k: windows on each side; default a third of the windows. Clamped to at least 1 and at
            most half of the windows (the two sides never overlap).

    Returns:
        The shift, or None with fewer than 2 windows with active samples. ``gained`` is sorted
        most gained first, ``lost`` most lost first, at most :data:`MAX_SHIFT_FRAMES` each.
    """
    split = _early_late(windows, k)
    if split is None:
        return None
    k, n, first, last = split
    early, e_depth, e_total = _inclusive(first)
    late, l_depth, l_total = _inclusive(last)
    shifts: list[tuple[FrameShift, float]] = []
    for frame in set(early) | set(late):
        e_n, l_n = early.get(frame, 0), late.get(frame, 0)
        depth = (e_depth.get(frame, 0.0) + l_depth.get(frame, 0.0)) / max(e_n + l_n, 1)
        shift = FrameShift(frame, e_n / e_total, l_n / l_total, e_n, l_n)
        shifts.append((shift, depth))
    gained = sorted(
        (p for p in shifts if p[0].change > 0),
        key=lambda p: (-round(p[0].change, 9), -p[1], p[0].frame),
    )
    lost = sorted(
        (p for p in shifts if p[0].change < 0),
        key=lambda p: (round(p[0].change, 9), -p[1], p[0].frame),
    )
    kept = tuple(p[0] for p in gained[:MAX_SHIFT_FRAMES])
    return WindowShift(
        k=k,
        n_windows=n,
        early_total=e_total,
        late_total=l_total,
        gained=kept,
        lost=tuple(p[0] for p in lost[:MAX_SHIFT_FRAMES]),
        per_window=_per_window(windows, [g.frame for g in kept]),
    )


def _per_window(windows: Iterable[SampleWindow], frames: list[str]) -> dict[str, tuple[float, ...]]:
    """Each frame's inclusive share of every window's active samples, in window order (the
    windows with active samples, as :func:`early_late_shift` counts them)."""
    groups = [g for _, _, g in group_windows(windows) if any(True for _ in _active(g, False))]
    shares: dict[str, list[float]] = {f: [] for f in frames}
    for g in groups:
        counts, _, total = _inclusive(g)
        for f in frames:
            shares[f].append(counts.get(f, 0) / total if total else 0.0)
    return {f: tuple(v) for f, v in shares.items()}


#: Most stacks kept per side by :func:`early_late_stacks` (enough for a flame chart: smaller
#: stacks would be narrower than a pixel).
MAX_FLAME_STACKS = 300


def early_late_stacks(
    windows: Iterable[SampleWindow], k: int | None = None
) -> tuple[list[tuple[tuple[str, ...], int]], list[tuple[tuple[str, ...], int]]] | None:
    """Whole stacks (root first, per function and file) of the first and of the last ``k``
    windows with active samples: the same split as :func:`early_late_shift`, for flame charts.

    Returns:
        (early, late) lists of ``(stack, samples)``, most samples first, at most
        :data:`MAX_FLAME_STACKS` each; None with fewer than 2 windows with active samples.
    """
    split = _early_late(windows, k)
    if split is None:
        return None
    _, _, first, last = split
    return (
        hot_stacks(first, MAX_FLAME_STACKS, lines=False),
        hot_stacks(last, MAX_FLAME_STACKS, lines=False),
    )
