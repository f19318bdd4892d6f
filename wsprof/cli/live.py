"""``wsprof attach --live``: a terminal view of the latest window's top frames and phases.

Rendered with rich (a well-kept terminal library); it reads only what the sampler has written
to its trace, like every other view.
"""

from __future__ import annotations

from typing import Any

from wsprof.analysis.samples import frame_shares_by_window
from wsprof.capture.attach import ProcessPoller
from wsprof.capture.pyspy.sampler import PySpySampler
from wsprof.trace.reader import read_trace

#: Frames listed per window.
TOP_FRAMES = 10


def _view(sampler: PySpySampler, patterns: dict[str, str], framework: str | None) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    head = Text(
        f"wsprof attach --live: pid {', '.join(map(str, sampler.pids))}: "
        f"{sampler.samples} samples, {sampler.windows} windows (Ctrl-C stops)"
    )
    if not sampler.windows:
        return Group(head, Text("waiting for the first window..."))
    trace = read_trace(sampler.path)
    windows = frame_shares_by_window(trace.samples, inclusive=False, lines=True)
    table = Table(title=f"window {len(windows)}: top frames (active samples)", expand=True)
    table.add_column("share", justify="right", width=6)
    table.add_column("samples", justify="right", width=8)
    table.add_column("frame", overflow="fold")
    if windows:
        for f in windows[-1].frames[:TOP_FRAMES]:
            table.add_row(f"{f.share:.0%}", str(f.samples), f.frame)
    parts: list[Any] = [head, table]
    try:
        from wsprof.analysis import phases
    except ImportError:  # pragma: no cover - phases are part of wsprof
        return Group(*parts)
    rows = phases.phase_shares_by_window(
        trace.samples, phases.patterns_for(framework, patterns, trace.samples)
    )
    if rows:
        last = rows[-1]
        ph = Table(title="phases of the latest window (all samples)", expand=True)
        ph.add_column("phase")
        ph.add_column("share", justify="right")
        for name, share in sorted(last.shares.items(), key=lambda kv: -kv[1]):
            ph.add_row(name, f"{share:.0%}")
        parts.append(ph)
    return Group(*parts)


def run_live(
    sampler: PySpySampler, poller: ProcessPoller, patterns: dict[str, str], framework: str | None
) -> None:
    """Refresh the view after every window until sampling ends (or Ctrl-C, which propagates).

    Args:
        sampler: a started sampler.
        poller: the started process poller (sampling stops when every target has exited).
        patterns: user phase patterns (``--phase``).
        framework: built-in phase patterns to use, or None to detect.
    """
    from rich.live import Live

    seen = -1
    with Live(_view(sampler, patterns, framework), auto_refresh=False) as live:
        while sampler.wait(timeout_s=0.5) is None:
            if not poller.alive():
                sampler.stop()
            if sampler.windows != seen:
                seen = sampler.windows
                live.update(_view(sampler, patterns, framework), refresh=True)
        live.update(_view(sampler, patterns, framework), refresh=True)
