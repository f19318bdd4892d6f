"""What py-spy writes, parsed: ``py-spy record --format raw`` collapsed stacks
(:func:`parse_raw`; never py-spy's human text) and its stderr, matched only to classify a
failure (:func:`permission_denied`, :func:`error_line`)."""

from __future__ import annotations

import re

from wsprof.trace.model import SampleWindow

#: Longest py-spy error message kept in a stop reason or an event, characters.
MAX_ERROR_CHARS = 300

_THREAD_FRAME_RE = re.compile(r"^thread \((0x[0-9A-Fa-f]+|\d+)\)(?:: .*)?$")
_PROCESS_FRAME_RE = re.compile(r'^process (\d+):"')
_CAUSE_RE = re.compile(r"^\s*\d+: (.+)$")
_DENIED_MARKERS = ("permission denied", "operation not permitted", "sys_ptrace")


def _split_frames(stack: str) -> list[str]:
    """Split ``a;b;c`` into frames, keeping ``process N:"cmd; with; semicolons"`` whole."""
    parts = stack.split(";")
    frames: list[str] = []
    i = 0
    while i < len(parts):
        part = parts[i]
        if _PROCESS_FRAME_RE.match(part):
            while not part.endswith('"') and i + 1 < len(parts):
                i += 1
                part = f"{part};{parts[i]}"
        frames.append(part)
        i += 1
    return frames


def parse_raw(
    text: str, *, pid: int, t_start_ns: int, t_end_ns: int
) -> tuple[list[SampleWindow], int]:
    """Parse ``py-spy record --format raw`` output.

    Each line is ``frame;frame;... count``, root first. With ``--threads`` one frame is the
    thread (``thread (TID): name``; TID decimal native id, or hex Python id); with
    ``--subprocesses`` the first frames are processes (``process PID:"cmdline"``, outermost
    first). Frames are kept as py-spy wrote them, pseudo-frames included.

    Args:
        text: the raw file's content.
        pid: the target; used when no process frame names another.
        t_start_ns: window start, monotonic ns.
        t_end_ns: window end, monotonic ns.

    Returns:
        One :class:`SampleWindow` per (pid, thread, stack), and the number of lines that could
        not be parsed. ``tid`` is -1 where the output has no thread frame.
    """
    counts: dict[tuple[int, int, tuple[str, ...]], int] = {}
    bad = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        stack, sep, count_s = line.rpartition(" ")
        if not sep or not stack or not count_s.isdigit():
            bad += 1
            continue
        frames = tuple(_split_frames(stack))
        frame_pid, tid = pid, -1
        for frame in frames:
            pm = _PROCESS_FRAME_RE.match(frame)
            if pm:
                frame_pid = int(pm.group(1))
                continue
            tm = _THREAD_FRAME_RE.match(frame)
            if tm:
                tid = int(tm.group(1), 0)
            break
        key = (frame_pid, tid, frames)
        counts[key] = counts.get(key, 0) + int(count_s)
    windows = [
        SampleWindow(t_start_ns, t_end_ns, p, t, frames, n) for (p, t, frames), n in counts.items()
    ]
    return windows, bad


def error_line(stderr: str) -> str:
    """One line from py-spy's stderr: the ``Error:`` line plus its first cause."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    main = next((ln[len("Error:") :].strip() for ln in lines if ln.startswith("Error:")), None)
    if main is None:
        main = lines[0] if lines else "no message"
        if "panicked at" in main and len(lines) > 1:
            main = f"{main} {lines[1]}"
    cause = None
    if "Caused by:" in lines:
        after = lines[lines.index("Caused by:") + 1 :]
        m = _CAUSE_RE.match(after[0]) if after else None
        cause = m.group(1) if m else None
    out = f"{main} ({cause})" if cause and cause not in main else main
    return out[:MAX_ERROR_CHARS]


def permission_denied(stderr: str) -> bool:
    low = stderr.lower()
    return any(k in low for k in _DENIED_MARKERS)
