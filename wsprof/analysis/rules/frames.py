"""Sampled frames: one hot frame, and frames whose share shifts from early to late windows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from wsprof.analysis.chain import Role
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Severity
from wsprof.analysis.model import HotFrame as HotFrameModel
from wsprof.analysis.rules.base import FRAME_SHIFT_MIN_CHANGE, Rule, _first_last
from wsprof.analysis.samples import split_frame

#: Share of py-spy samples in one leaf frame for it to be called hot (the motivating case had
#: 6 of 6 samples in one place).
HOT_FRAME_SHARE = 0.3
#: Fewest active samples on each side (first and last windows) for a shift to be reported:
#: half a second of one busy thread at py-spy's default 100 Hz; fewer make shares too coarse.
FRAME_SHIFT_MIN_SAMPLES = 50
#: Late share at or above which a gaining frame is a warning: it now holds most of the active
#: samples, where it held at least 20 points less: the time added went there.
FRAME_SHIFT_WARN_LATE_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class HotFrameEvidence(Evidence):
    """The function holding most of a process's samples (``hot_frame``).

    Attributes:
        process: label of the sampled process.
        samples: the function's samples.
        total: the process's active samples.
        share: ``samples / total``.
        windows: the process's sampling windows.
        hottest_line: the function's line with the most samples, ``fn (file:line)``.
        common_frame: the frame common to most windows (only when some window has one).
        common_frame_windows: the windows it is common to.
    """

    process: str
    samples: int = field(metadata=unit("count"))
    total: int = field(metadata=unit("count"))
    share: float = field(metadata=unit("share"))
    windows: int = field(metadata=unit("count"))
    hottest_line: str
    common_frame: str | None = optional()
    common_frame_windows: int | None = optional("count")

    def process_named(self) -> str | None:
        return self.process


class HotFrame(Rule):
    """Most py-spy samples in one place."""

    kind = "hot_frame"
    roles = ((kind, Role.HOT_FRAME),)
    description = "a frame holds a large share of stack samples"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for pa in facts.processes:
            if not pa.hot_frames:
                continue
            # Per function: a hot loop spreads its samples over several lines, and the
            # function's share is what a user compares with other functions.
            by_function: dict[str, list[HotFrameModel]] = {}
            for f in pa.hot_frames:
                function, file, _line = split_frame(f.frame)
                key = f"{function} ({file})" if file is not None else function
                by_function.setdefault(key, []).append(f)
            name, lines = max(by_function.items(), key=lambda kv: sum(f.samples for f in kv[1]))
            samples = sum(f.samples for f in lines)
            total = pa.hot_frames[0].total
            if not total or samples / total < HOT_FRAME_SHARE:
                continue
            top = lines[0]  # its hottest line (hot_frames are sorted by samples)
            title = f"{samples} of {total} samples in {name} ({pa.label})"
            if len(lines) > 1:
                title += f", most at {top.frame}"
            common = Counter(w.common_frame for w in pa.windows if w.common_frame)
            common_frame: str | None = None
            common_windows: int | None = None
            if common:
                common_frame, common_windows = min(common.items(), key=lambda kv: (-kv[1], kv[0]))
                title += (
                    f"; common frame {common_frame} in {common_windows} of "
                    f"{len(pa.windows)} windows"
                )
            elif pa.windows:
                title += f"; {len(pa.windows)} windows, none with a frame in half its samples"
            out.append(
                Finding(
                    self.kind,
                    Severity.INFO,
                    title,
                    HotFrameEvidence(
                        process=pa.label,
                        samples=samples,
                        total=total,
                        share=samples / total,
                        windows=len(pa.windows),
                        hottest_line=top.frame,
                        common_frame=common_frame,
                        common_frame_windows=common_windows,
                    ),
                    top.frame,
                    "this is where the process spends its time; after fixing it, sample again",
                )
            )
        return out


@dataclass(frozen=True, kw_only=True)
class FrameShiftEvidence(Evidence):
    """A frame that gained share of the samples, first windows to last (``frame_shift``).

    Attributes:
        process: label of the sampled process.
        frame: the frame that gained most.
        early_share: its share of the active samples in the first ``k_windows`` windows.
        late_share: its share in the last ``k_windows``.
        change: ``late_share - early_share``.
        k_windows: windows on each side.
        windows: the process's sampling windows.
        early_samples: active samples of the first windows.
        late_samples: active samples of the last windows.
        gained: the frames that gained most (at most 5): ``frame``, ``early_share``,
            ``late_share``.
        lost: the frames that lost most (at most 5), the same items.
    """

    process: str
    frame: str
    early_share: float = field(metadata=unit("share"))
    late_share: float = field(metadata=unit("share"))
    change: float = field(metadata=unit("share"))
    k_windows: int = field(metadata=unit("count"))
    windows: int = field(metadata=unit("count"))
    early_samples: int = field(metadata=unit("count"))
    late_samples: int = field(metadata=unit("count"))
    gained: list[dict[str, Any]]
    lost: list[dict[str, Any]]

    def process_named(self) -> str | None:
        return self.process


class EarlyLateShift(Rule):
    """A frame's share of samples grew from the first sampling windows to the last: where the
    time added over the run went (from py-spy samples, no step markers needed)."""

    kind = "frame_shift"
    roles = ((kind, Role.FRAME_SHIFT),)
    description = "a frame gained share of samples from the first windows to the last"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for pa in facts.processes:
            sh = pa.shift
            if sh is None or not sh.gained:
                continue
            if min(sh.early_total, sh.late_total) < FRAME_SHIFT_MIN_SAMPLES:
                continue
            top = sh.gained[0]
            if top.change < FRAME_SHIFT_MIN_CHANGE:
                continue
            first, last = _first_last(sh.k)
            title = (
                f"{top.frame}: {top.early_share:.0%} of samples in {first} -> "
                f"{top.late_share:.0%} in {last} ({pa.label})"
            )
            lost = sh.lost[0] if sh.lost else None
            if lost is not None:
                title += (
                    f"; {lost.frame} lost most ({lost.early_share:.0%} -> {lost.late_share:.0%})"
                )
            severity = (
                Severity.WARNING if top.late_share >= FRAME_SHIFT_WARN_LATE_SHARE else Severity.INFO
            )
            evidence = FrameShiftEvidence(
                process=pa.label,
                frame=top.frame,
                early_share=top.early_share,
                late_share=top.late_share,
                change=top.change,
                k_windows=sh.k,
                windows=sh.n_windows,
                early_samples=sh.early_total,
                late_samples=sh.late_total,
                gained=[
                    {"frame": g.frame, "early_share": g.early_share, "late_share": g.late_share}
                    for g in sh.gained[:5]
                ],
                lost=[
                    {"frame": g.frame, "early_share": g.early_share, "late_share": g.late_share}
                    for g in sh.lost[:5]
                ],
            )
            out.append(
                Finding(
                    self.kind,
                    severity,
                    title,
                    evidence,
                    top.frame,
                    "the time added over the run went into this frame: find what in it grows "
                    "(py-spy dump --pid PID while it runs), or time it per step with "
                    "wsprof.phase(); fix it, then sample again",
                )
            )
        return out
