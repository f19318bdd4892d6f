"""The sampled-frame rules on hand-built facts: one function holding a large share of the py-spy
samples (hot_frame), and a frame that gained share from the first windows to the last
(frame_shift)."""

from __future__ import annotations

import pytest
import rule_kit

from wsprof.analysis.model import Finding, FrameShift, HotFrame, WindowShift, WindowSummary
from wsprof.analysis.rules import frames
from wsprof.analysis.rules.base import FRAME_SHIFT_MIN_CHANGE
from wsprof.analysis.rules.frames import (
    FRAME_SHIFT_MIN_SAMPLES,
    FRAME_SHIFT_WARN_LATE_SHARE,
    HOT_FRAME_SHARE,
    EarlyLateShift,
    FrameShiftEvidence,
    HotFrameEvidence,
)

pytestmark = pytest.mark.pure

TOTAL = 1000  # active samples of the process


def _hot(*frames_samples: tuple[str, int], total: int = TOTAL) -> tuple[HotFrame, ...]:
    return tuple(HotFrame(frame, n, total) for frame, n in frames_samples)


def _window(common: str | None) -> WindowSummary:
    return WindowSummary(0, rule_kit.S, 100, 100, None, common, {}, None, None)


def _hot_ev(f: Finding) -> HotFrameEvidence:
    """A hot_frame finding's evidence, typed."""
    assert isinstance(f.evidence, HotFrameEvidence)
    return f.evidence


# ----------------------------------------------------------------------------- hot frame


def test_a_function_with_the_hot_share_is_named_at_its_hottest_line() -> None:
    at = int(HOT_FRAME_SHARE * TOTAL)
    pa = rule_kit.process(
        hot_frames=_hot(("probe (sync.py:10)", at), ("other (train.py:5)", at - 1))
    )
    found = frames.HotFrame().match(rule_kit.facts(processes=[pa]))
    assert [(f.kind, f.severity, f.where) for f in found] == [
        ("hot_frame", "info", "probe (sync.py:10)")
    ]
    ev = _hot_ev(found[0])
    assert (ev.samples, ev.total, ev.process) == (at, TOTAL, "rank 0")
    assert ev.share == pytest.approx(HOT_FRAME_SHARE)
    assert ev.hottest_line == "probe (sync.py:10)"
    assert ev.process_named() == "rank 0"
    # No window has a common frame: its keys are left out.
    assert list(ev.as_dict()) == [
        "process",
        "samples",
        "total",
        "share",
        "windows",
        "hottest_line",
    ]


def test_no_hot_frame_just_below_the_share() -> None:
    below = int(HOT_FRAME_SHARE * TOTAL) - 1
    pa = rule_kit.process(hot_frames=_hot(("probe (sync.py:10)", below), ("x (a.py:1)", below)))
    assert frames.HotFrame().match(rule_kit.facts(processes=[pa])) == []


def test_the_lines_of_one_function_add_up() -> None:
    # Two lines of one function, each below the share, together above it.
    line = int(HOT_FRAME_SHARE * TOTAL * 0.6)
    pa = rule_kit.process(
        hot_frames=_hot(
            ("probe (sync.py:10)", line),
            ("probe (sync.py:12)", line - 1),
            ("other (train.py:5)", line - 2),
        )
    )
    (f,) = frames.HotFrame().match(rule_kit.facts(processes=[pa]))
    assert _hot_ev(f).samples == 2 * line - 1
    assert f.where == "probe (sync.py:10)"
    assert "probe (sync.py)" in f.title and "most at probe (sync.py:10)" in f.title


def test_the_common_frame_of_most_windows_is_given() -> None:
    windows = (
        _window("loop (train.py)"),
        _window("sync (ws.py)"),
        _window("sync (ws.py)"),
        _window(None),
    )
    pa = rule_kit.process(hot_frames=_hot(("probe (sync.py:10)", TOTAL)), windows=windows)
    (f,) = frames.HotFrame().match(rule_kit.facts(processes=[pa]))
    ev = _hot_ev(f)
    assert ev.common_frame == "sync (ws.py)"
    assert (ev.common_frame_windows, ev.windows) == (2, 4)
    assert list(ev.as_dict())[-2:] == ["common_frame", "common_frame_windows"]
    # A tie goes to the first name in order.
    tie = rule_kit.process(
        hot_frames=_hot(("probe (sync.py:10)", TOTAL)),
        windows=(_window("zz (b.py)"), _window("aa (a.py)")),
    )
    (g,) = frames.HotFrame().match(rule_kit.facts(processes=[tie]))
    assert _hot_ev(g).common_frame == "aa (a.py)"


def test_no_hot_frame_without_samples() -> None:
    rule = frames.HotFrame()
    assert rule.match(rule_kit.facts(processes=[rule_kit.process()])) == []
    empty = rule_kit.process(hot_frames=_hot(("probe (sync.py:10)", 0), total=0))
    assert rule.match(rule_kit.facts(processes=[empty])) == []


# ----------------------------------------------------------------------------- frame shift


def _shift(
    early: float,
    late: float,
    samples: int = 2 * FRAME_SHIFT_MIN_SAMPLES,
    lost: tuple[FrameShift, ...] = (),
) -> WindowShift:
    gained = FrameShift("probe (sync.py)", early, late, int(early * samples), int(late * samples))
    return WindowShift(3, 9, samples, samples, (gained,), lost)


def _shifted(sh: WindowShift | None) -> list[str]:
    pa = rule_kit.process(shift=sh)
    return [f.severity for f in EarlyLateShift().match(rule_kit.facts(processes=[pa]))]


def test_a_frame_that_takes_most_samples_is_a_warning() -> None:
    lost = (FrameShift("train (t.py)", 0.75, 0.25, 75, 25),)
    sh = _shift(0.25, FRAME_SHIFT_WARN_LATE_SHARE, lost=lost)
    (f,) = EarlyLateShift().match(rule_kit.facts(processes=[rule_kit.process(shift=sh)]))
    assert (f.kind, f.severity, f.where) == ("frame_shift", "warning", "probe (sync.py)")
    ev = f.evidence
    assert isinstance(ev, FrameShiftEvidence)
    assert ev.change == pytest.approx(FRAME_SHIFT_WARN_LATE_SHARE - 0.25)
    assert (ev.k_windows, ev.windows) == (3, 9)
    assert ev.lost == [{"frame": "train (t.py)", "early_share": 0.75, "late_share": 0.25}]
    assert ev.as_dict()["lost"] == ev.lost and ev.process_named() == "rank 0"
    assert "the first 3 windows" in f.title and "train (t.py) lost most" in f.title
    # Gaining as much but still under half of the samples: information.
    late = FRAME_SHIFT_WARN_LATE_SHARE - 0.01
    assert _shifted(_shift(late - 0.25, late)) == ["info"]


def test_a_shift_below_the_minimum_change_is_not_reported() -> None:
    early = 0.25
    assert _shifted(_shift(early, early + FRAME_SHIFT_MIN_CHANGE)) == ["info"]
    assert _shifted(_shift(early, early + FRAME_SHIFT_MIN_CHANGE - 0.01)) == []


def test_a_shift_needs_enough_samples_on_each_side() -> None:
    assert _shifted(_shift(0.25, 0.75, samples=FRAME_SHIFT_MIN_SAMPLES)) == ["warning"]
    assert _shifted(_shift(0.25, 0.75, samples=FRAME_SHIFT_MIN_SAMPLES - 1)) == []
    assert _shifted(None) == []
    assert _shifted(WindowShift(3, 9, 500, 500, (), ())) == []  # nothing gained
