"""``wsprof diff``: two runs (or two step windows of one run) written as real trace files, the
diff's numbers and verdict, the three output formats, escaping and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from wsprof.analysis.diff import (
    DiffResult,
    ItemDiff,
    diff_paths,
    parse_step_range,
)
from wsprof.cli import main
from wsprof.errors import InputError
from wsprof.report.diff_html import render_diff_html
from wsprof.report.diff_json import diff_to_dict
from wsprof.report.diff_text import render_diff_text
from wsprof.trace.retention import Retention
from wsprof.trace.writer import TraceWriter

MS = 1_000_000
#: Calls per step of each op (site A broadcasts the weights, site B gathers metadata).
N_BCAST, N_GATHER = 20, 5
ROLLOUT_MS = 500.0
SITE_A = (0, "sync.py", 10, "push_a")
SITE_B = (1, "meta.py", 20, "gather_b")
HOSTILE = "<script>alert(1)</script>"

PerStep = float | Callable[[int], float]


def _at(value: PerStep, step: int) -> float:
    return value(step) if callable(value) else value


def _call(t0: int, dur: int, op: str, site: int, step: int) -> tuple[object, ...]:
    return (
        t0,
        t0 + dur,
        dur - 1000,
        1,
        7,
        op,
        f"dist.{op}",
        "api",
        64,
        "float32",
        "0",
        0,
        site,
        step,
        "weight_sync",
        None,
    )


def write_run(
    path: Path,
    steps: Sequence[int],
    bcast_ms: PerStep,
    gather_ms: PerStep,
    *,
    markers: bool = True,
    sites: Sequence[tuple[int, str, int, str]] = (SITE_A, SITE_B),
    samples: Sequence[tuple[Sequence[str], int]] = (),
    retention: Retention | None = None,
    rank: int = 0,
    pid: int = 100,
) -> Path:
    """One trace (rank 0 unless told): per step a rollout phase, then a weight_sync phase of
    ``N_BCAST`` broadcasts from site A and ``N_GATHER`` all_gathers from site B of the given
    lengths.
    Without ``markers`` no step or phase span is written (steps are found as bursts)."""
    w = TraceWriter(str(path), retention=retention)
    w.set_meta({"pid": pid, "rank": rank, "world_size": 2})
    calls: list[tuple[object, ...]] = []
    spans: list[tuple[object, ...]] = []
    t = 10 * MS
    for step in steps:
        b, g = int(_at(bcast_ms, step) * MS), int(_at(gather_ms, step) * MS)
        t0 = t
        if markers:
            spans.append(("phase", "rollout", t, t + int(ROLLOUT_MS * MS), step, 7))
        t += int(ROLLOUT_MS * MS)
        sync0 = t
        stamp = step if markers else -1
        for _ in range(N_BCAST):
            calls.append(_call(t, b, "broadcast", 0, stamp))
            t += b + 1000
        for _ in range(N_GATHER):
            calls.append(_call(t, g, "all_gather", 1, stamp))
            t += g + 1000
        t += 1000
        if markers:
            spans.append(("phase", "weight_sync", sync0, t - 1000, step, 7))
            spans.append(("step", str(step), t0, t, step, 7))
    batch: dict[str, list[tuple[object, ...]]] = {"sites": list(sites), "spans": spans}
    if samples:
        stacks = {tuple(frames): i for i, (frames, _) in enumerate(samples)}
        batch["stacks"] = [(i, json.dumps(list(f))) for f, i in stacks.items()]
        batch["samples"] = [(10 * MS, t, pid, 7, stacks[tuple(f)], n) for f, n in samples]
    if retention is None:
        w.write({**batch, "calls": calls})
    else:  # one write per step, as the recorder flushes, so that retention thins as it goes
        w.write(batch)
        per = N_BCAST + N_GATHER
        for i in range(0, len(calls), per):
            w.write({"calls": calls[i : i + per]})
    w.close()
    return path


@pytest.fixture()
def fixed(tmp_path: Path) -> tuple[Path, Path]:
    """Before: slow broadcasts from site A (20 ms), fast all_gathers from site B (2 ms).
    After the fix: broadcasts 1 ms, but all_gathers now 30 ms."""
    before = tmp_path / "before"
    after = tmp_path / "after"
    write_run(before / "h-100.wsprof", range(5), 20.0, 2.0)
    write_run(after / "h-100.wsprof", range(5), 1.0, 30.0)
    return before, after


def _item(r: DiffResult, kind: str, name: str) -> ItemDiff:
    return next(i for i in r.items if i.kind == kind and i.name == name)


def _names(items: Sequence[ItemDiff]) -> list[tuple[str, str]]:
    return [(i.kind, i.name) for i in items]


# --------------------------------------------------------------------------- analysis


def test_fix_shows_what_got_faster_slower_and_where_overhead_moved(
    fixed: tuple[Path, Path],
) -> None:
    r = diff_paths(str(fixed[0]), str(fixed[1]))
    bcast, gather = _item(r, "op", "broadcast"), _item(r, "op", "all_gather")
    assert bcast.s_per_step is not None and gather.s_per_step is not None
    assert bcast.s_per_step.before == pytest.approx(N_BCAST * 0.020)
    assert bcast.s_per_step.after == pytest.approx(N_BCAST * 0.001)
    assert bcast.s_per_step.rel_change == pytest.approx(-0.95)
    assert gather.s_per_step.change == pytest.approx(N_GATHER * 0.028)
    assert bcast.calls_per_step is not None and bcast.calls_per_step.before == N_BCAST
    assert bcast.median_us is not None
    assert (bcast.median_us.before, bcast.median_us.after) == pytest.approx((20_000, 1_000))
    site_a = _item(r, "site", "push_a (sync.py)")
    assert site_a.s_per_step is not None and site_a.s_per_step.change == pytest.approx(-0.38)
    assert site_a.detail == "line 10"
    assert ("op", "broadcast") in _names(r.faster) and ("site", "push_a (sync.py)") in _names(
        r.faster
    )
    assert _names(r.slower) == [("op", "all_gather"), ("site", "gather_b (meta.py)")]
    assert _names(r.moved_to) == [("op", "all_gather"), ("site", "gather_b (meta.py)")]
    assert any(
        v.startswith("overhead moved to all_gather") and "gather_b (meta.py)" in v
        for v in r.verdict
    )
    assert r.verdict[0].startswith("faster per step")
    # headline numbers: step time and weight sync per step, rollout unchanged
    assert r.step_s.change == pytest.approx(-(N_BCAST * 0.019 - N_GATHER * 0.028), abs=1e-4)
    assert r.weight_sync_s.after == pytest.approx(N_BCAST * 0.001 + N_GATHER * 0.030, abs=1e-4)
    rollout = _item(r, "phase", "rollout").s_per_step
    assert rollout is not None and rollout.change == pytest.approx(0.0)
    # sorted by the absolute change of time per step
    changes = [abs(i.s_per_step.change or 0.0) for i in r.items if i.s_per_step is not None]
    assert changes == sorted(changes, reverse=True) and changes[0] == pytest.approx(0.38)


def test_only_slower_is_not_a_move(tmp_path: Path) -> None:
    """Everything slower, nothing faster, the total up: no overhead *moved*."""
    write_run(tmp_path / "b" / "h.wsprof", range(5), 2.0, 2.0)
    write_run(tmp_path / "a" / "h.wsprof", range(5), 20.0, 30.0)
    r = diff_paths(str(tmp_path / "b"), str(tmp_path / "a"))
    assert not r.faster and not r.moved_to
    assert ("op", "broadcast") in _names(r.slower) and ("op", "all_gather") in _names(r.slower)
    assert r.verdict[0].startswith("slower per step")


def test_same_run_is_about_the_same(fixed: tuple[Path, Path]) -> None:
    r = diff_paths(str(fixed[0]), str(fixed[0]))
    assert not r.faster and not r.slower and not r.moved_to
    assert r.verdict[0].startswith("about the same")
    assert any("share 5 step(s)" in n for n in r.notes)  # the same steps on both sides
    shared = next(n for n in r.notes if "share 5 step(s)" in n)
    assert "disjoint before and after step ranges" in shared and "--" not in shared


def test_two_step_windows_of_one_run(tmp_path: Path) -> None:
    """Steps 0-4 slow broadcasts; the fix lands at step 5, where all_gathers get slower."""
    run = tmp_path / "run"
    write_run(
        run / "h.wsprof",
        range(10),
        lambda s: 20.0 if s < 5 else 1.0,
        lambda s: 2.0 if s < 5 else 30.0,
    )
    r = diff_paths(str(run), str(run), parse_step_range("0:5"), parse_step_range("5:10"))
    assert r.before.steps == (0, 1, 2, 3, 4) and r.after.steps == (5, 6, 7, 8, 9)
    bcast = _item(r, "op", "broadcast")
    # only the calls stamped with each window's steps: 20 per step, not 40
    assert bcast.calls_per_step is not None
    assert (bcast.calls_per_step.before, bcast.calls_per_step.after) == (N_BCAST, N_BCAST)
    assert bcast.median_us is not None
    assert (bcast.median_us.before, bcast.median_us.after) == pytest.approx((20_000, 1_000))
    assert _names(r.moved_to)[:2] == [("op", "all_gather"), ("site", "gather_b (meta.py)")]
    assert not any("share" in n and "step(s)" in n for n in r.notes)
    # open ends select the same windows
    r2 = diff_paths(str(run), str(run), parse_step_range(":5"), parse_step_range("5:"))
    assert (r2.before.steps, r2.after.steps) == (r.before.steps, r.after.steps)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("0:5", (0, 5)),
        (":5", (None, 5)),
        ("5:", (5, None)),
        (" 3 : 7 ", (3, 7)),
    ],
)
def test_parse_step_range(text: str, expect: tuple[int | None, int | None]) -> None:
    assert parse_step_range(text) == expect


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5:5", "empty step range"),
        ("7:3", "empty step range"),
        ("x:y", "expected A:B"),
        ("5", "expected A:B"),
    ],
)
def test_parse_step_range_rejects(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as e:
        parse_step_range(text, "--before-steps")
    assert "\n" not in str(e.value) and "--before-steps" in str(e.value)


def test_thinned_trace_per_op_numbers_stay_exact(tmp_path: Path) -> None:
    """Retention keeps 3 calls in detail of the middle steps: calls and time per step of each
    op still come out exact (from the trace's per-step totals)."""
    run = tmp_path / "run"
    write_run(
        run / "h.wsprof",
        range(10),
        lambda s: 20.0 if s < 5 else 1.0,
        2.0,
        retention=Retention(keep_steps=2, calls_per_thinned_step=3),
    )
    r = diff_paths(str(run), str(run), (0, 5), (5, 10))
    bcast = _item(r, "op", "broadcast")
    assert bcast.calls_per_step is not None and bcast.s_per_step is not None
    assert bcast.calls_per_step.before == pytest.approx(N_BCAST)
    assert bcast.calls_per_step.after == pytest.approx(N_BCAST)
    assert bcast.s_per_step.before == pytest.approx(N_BCAST * 0.020)
    assert r.before.n_calls == 5 * (N_BCAST + N_GATHER)
    assert any("retention thinned" in n for n in r.notes)
    assert ("op", "broadcast") in _names(r.faster)


def test_bursts_and_sampled_frames(tmp_path: Path) -> None:
    """No markers: steps from sync bursts. py-spy samples move from push_a to gather_b, and
    the frames match across runs although their lines changed."""
    main_frame = "main (train.py:1)"
    write_run(
        tmp_path / "b" / "h.wsprof",
        range(6),
        20.0,
        2.0,
        markers=False,
        samples=[
            ([main_frame, "push_a (sync.py:10)"], 80),
            ([main_frame, "gather_b (meta.py:20)"], 20),
        ],
    )
    write_run(
        tmp_path / "a" / "h.wsprof",
        range(6),
        1.0,
        30.0,
        markers=False,
        samples=[
            ([main_frame, "push_a (sync.py:12)"], 10),
            ([main_frame, "gather_b (meta.py:24)"], 90),
        ],
    )
    r = diff_paths(str(tmp_path / "b"), str(tmp_path / "a"))
    # Found from the job itself (sync bursts, or the rhythm of its calls).
    assert r.before.step_source in ("bursts", "rhythm") and len(r.before.steps) == 6
    frames = {i.name: i.share for i in r.of_kind("frame")}
    assert set(frames) == {"push_a (sync.py)", "gather_b (meta.py)"}
    share = frames["gather_b (meta.py)"]
    assert share is not None and (share.before, share.after) == pytest.approx((0.2, 0.9))
    assert ("frame", "gather_b (meta.py)") in _names(r.moved_to)
    assert ("op", "all_gather") in _names(r.moved_to)
    assert r.before.n_samples == 100


def _write_sampler(path: Path, pid: int, samples: Sequence[tuple[Sequence[str], int]]) -> None:
    """A py-spy sampler's trace (as ``wsprof attach`` writes it): samples of ``pid`` only."""
    w = TraceWriter(str(path))
    w.set_meta({"pid": 999, "targets": [pid]})
    w.write(
        {
            "stacks": [(i, json.dumps(list(f))) for i, (f, _) in enumerate(samples)],
            "samples": [(0, 10**12, pid, 7, i, n) for i, (_, n) in enumerate(samples)],
        }
    )
    w.close()


def test_run_of_several_traces_compares_the_primary(tmp_path: Path) -> None:
    """Rank 1 (read first: its file sorts first) has the opposite pattern; rank 0 is compared,
    and the py-spy samples of its pid come from a separate sampler trace."""
    for side, (b, g, hot) in {
        "b": (20.0, 2.0, "push_a (sync.py:10)"),
        "a": (1.0, 30.0, "gather_b (meta.py:20)"),
    }.items():
        write_run(tmp_path / side / "a-101.wsprof", range(5), g, b, rank=1, pid=101)
        write_run(tmp_path / side / "b-100.wsprof", range(5), b, g)
        _write_sampler(tmp_path / side / "c-pyspy.wsprof", 100, [(["main (t.py:1)", hot], 50)])
    r = diff_paths(str(tmp_path / "b"), str(tmp_path / "a"))
    assert r.before.process == "rank 0" and r.after.process == "rank 0"
    assert ("op", "broadcast") in _names(r.faster) and ("op", "all_gather") in _names(r.slower)
    hot = _item(r, "frame", "gather_b (meta.py)").share
    assert hot is not None and (hot.before, hot.after) == (0.0, 1.0)
    assert r.before.n_samples == 50


def test_series_files(tmp_path: Path) -> None:
    b, a = tmp_path / "b.csv", tmp_path / "a.csv"
    b.write_text("step,update_weights_time_s,rollout_time_s\n0,143,68\n1,363,67\n2,966,68\n")
    a.write_text("step,update_weights_time_s,rollout_time_s\n0,100,90\n1,101,91\n2,99,92\n")
    r = diff_paths(str(b), str(a))
    assert _names(r.faster) == [("series", "update_weights_time_s")]
    assert _names(r.moved_to) == [("series", "rollout_time_s")]
    uw = _item(r, "series", "update_weights_time_s").s_per_step
    assert uw is not None and (uw.before, uw.after) == (363, 100)


def write_unstepped(
    path: Path, n_bcast: int, n_gather: int, call_ms: float, wall_ms: float
) -> Path:
    """One trace of a job whose steps cannot be found: its calls (``n_bcast`` broadcasts from
    site A, ``n_gather`` all_gathers from site B, ``call_ms`` each, in a shuffled order) are
    evenly spread over ``wall_ms`` with no idle gap and no rhythm; a process counter is read
    at the start and at the end (as the recorder does)."""
    import random

    ops = ["broadcast"] * n_bcast + ["all_gather"] * n_gather
    random.Random(0).shuffle(ops)
    w = TraceWriter(str(path))
    w.set_meta({"pid": 100, "rank": 0, "world_size": 2})
    t0 = t = 10 * MS
    dur = int(call_ms * MS)
    gap = int(wall_ms * MS / len(ops)) - dur
    calls = []
    for op in ops:
        calls.append(_call(t, dur, op, 0 if op == "broadcast" else 1, -1))
        t += dur + gap
    w.write(
        {
            "sites": [SITE_A, SITE_B],
            "calls": calls,
            "counters": [(t0, "proc.rss_bytes", 1e9), (t - gap, "proc.rss_bytes", 1e9)],
        }
    )
    w.close()
    return path


def test_a_side_without_steps_is_compared_as_rates(tmp_path: Path) -> None:
    """The same job before (10 marked steps of 550 ms) and after (no steps found): compared
    per second of wall time on both sides, about the same; not the whole unstepped run as one
    step against one step of the other (which read "x10")."""
    write_run(tmp_path / "b" / "h.wsprof", range(10), 2.0, 2.0)
    wall_ms = 10 * (ROLLOUT_MS + (N_BCAST + N_GATHER) * 2.0)
    write_unstepped(tmp_path / "a" / "h.wsprof", 10 * N_BCAST, 10 * N_GATHER, 2.0, wall_ms)
    r = diff_paths(str(tmp_path / "b"), str(tmp_path / "a"))
    assert r.after.steps == () and len(r.before.steps) == 10
    assert r.basis == "second"
    bcast = _item(r, "op", "broadcast")
    assert bcast.s_per_step is not None and bcast.calls_per_step is not None
    rate_s = N_BCAST * 0.002 / (wall_ms / 10 / 1e3)  # broadcast s per s of wall time
    assert bcast.s_per_step.before == pytest.approx(rate_s, rel=0.01)
    assert bcast.s_per_step.after == pytest.approx(rate_s, rel=0.01)
    assert bcast.calls_per_step.after == pytest.approx(bcast.calls_per_step.before, rel=0.01)
    assert bcast.median_us is not None and bcast.median_us.after == pytest.approx(2000)
    assert r.step_s.before is None and r.step_s.after is None  # not comparable
    assert not r.faster and not r.slower
    assert r.verdict[0].startswith("about the same per second of wall time")
    assert any("whole-run rates" in n for n in r.notes)
    text = render_diff_text(r)
    assert " x" not in text and "per second of wall time" in text
    assert "x10" not in " ".join(r.verdict)
    doc = diff_to_dict(r)
    assert doc["basis"] == "second" and doc["per_step"]["step_s"]["before"] is None
    assert doc["after"]["wall_s"] == pytest.approx(wall_ms / 1e3, rel=0.01)
    assert "per second of wall time" in render_diff_html(r)


def test_both_sides_with_steps_stay_per_step(fixed: tuple[Path, Path]) -> None:
    r = diff_paths(str(fixed[0]), str(fixed[1]))
    assert r.basis == "step" and diff_to_dict(r)["basis"] == "step"


def test_one_figure_for_the_time_in_sync(tmp_path: Path) -> None:
    """Weight sync 100 ms per step before; after, 60 ms in three steps and 300 ms in two: its
    median fell (-40%) and its time per step rose (+56%). One figure, the time per step (total
    over the steps / steps, like every item), in every output; no phase item repeats it."""
    write_run(tmp_path / "b" / "h.wsprof", range(5), 4.0, 4.0)
    write_run(
        tmp_path / "a" / "h.wsprof",
        range(5),
        lambda s: 2.4 if s < 3 else 12.0,
        lambda s: 2.4 if s < 3 else 12.0,
    )
    r = diff_paths(str(tmp_path / "b"), str(tmp_path / "a"))
    assert r.weight_sync_s.before == pytest.approx(0.100, abs=1e-3)
    assert r.weight_sync_s.after == pytest.approx((3 * 0.060 + 2 * 0.300) / 5, abs=1e-3)
    assert r.weight_sync_s.rel_change == pytest.approx(0.56, abs=0.01)
    assert not any("weight_sync" in i.name for i in r.items)
    lines = render_diff_text(r).splitlines()
    sync = [line for line in lines if "weight sync" in line or "weight_sync" in line]
    assert [line.split()[:2] for line in sync if not line.startswith("VERDICT")] == [
        ["weight", "sync"]
    ]
    assert all("-40%" not in line for line in sync)
    assert "+56%" in sync[-1]
    doc = diff_to_dict(r)
    assert doc["per_step"]["weight_sync_s"]["rel_change"] == pytest.approx(0.56, abs=0.01)
    assert not any("weight_sync" in i["name"] for i in doc["items"])
    html = render_diff_html(r)
    assert "weight_sync" not in html and html.count("weight sync (mean per step)") == 1


def test_series_sync_column_is_the_one_figure(tmp_path: Path) -> None:
    b, a = tmp_path / "b.csv", tmp_path / "a.csv"
    b.write_text("step,weight_sync_s,rollout_time_s\n0,10,68\n1,11,67\n2,12,68\n")
    a.write_text("step,weight_sync_s,rollout_time_s\n0,5,68\n1,5,67\n2,6,68\n")
    r = diff_paths(str(b), str(a))
    # The mean per step, as for a run ("weight sync (mean)"), never the median.
    assert r.weight_sync_s.before == pytest.approx(11)
    assert r.weight_sync_s.after == pytest.approx(16 / 3)
    assert _names(r.items) == [("series", "rollout_time_s")]


# --------------------------------------------------------------------------- renderers, CLI


def test_cli_text(fixed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(fixed[0]), str(fixed[1])]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("wsprof diff: ") and lines[1].startswith("VERDICT: faster")
    assert max(len(line) for line in lines) <= 80
    assert "overhead moved to all_gather" in " ".join(line.strip() for line in lines)
    row = next(line for line in lines if line.startswith("broadcast "))
    assert row.split()[-2:] == ["ms", "-95%"] and "-380 ms" in row


def test_cli_text_step_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_run(
        tmp_path / "run" / "h.wsprof", range(10), lambda s: 20.0 if s < 5 else 1.0, 2.0
    ).parent
    assert main(["diff", str(run), str(run), "--before-steps", "0:5", "--after-steps", "5:10"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "steps 0-4 (5 from markers) of --before-steps 0:5" in out
    assert "steps 5-9 (5 from markers) of --after-steps 5:10" in out


def test_cli_json(fixed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(fixed[0]), str(fixed[1]), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"kind": "op", "name": "all_gather"} in doc["moved_to"]
    assert doc["verdict"][0].startswith("faster per step")
    item = next(i for i in doc["items"] if i["kind"] == "op" and i["name"] == "broadcast")
    assert item["s_per_step"]["before"] == pytest.approx(0.4)
    assert item["s_per_step"]["rel_change"] == pytest.approx(-0.95)
    assert doc["per_step"]["step_s"]["change"] < 0
    assert doc["before"]["steps"] == [0, 1, 2, 3, 4] and doc["before"]["step_range"] is None


def test_cli_html(
    fixed: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "d" / "diff.html"
    assert main(["diff", str(fixed[0]), str(fixed[1]), "--format", "html", "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    html = out.read_text()
    assert 'id="verdict"' in html and "overhead moved to all_gather" in html
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_cli_html_default_path(
    fixed: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["diff", str(fixed[0]), str(fixed[1]), "--format", "html"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("reports/wsprof-diff-") and "-before-vs-after-" in printed
    assert (tmp_path / printed).read_text().startswith("<!DOCTYPE html>")


def test_hostile_names_are_escaped(tmp_path: Path) -> None:
    hostile_site = (1, f"{HOSTILE}.py", 20, HOSTILE)
    write_run(tmp_path / "b" / "h.wsprof", range(5), 20.0, 2.0, sites=(SITE_A, hostile_site))
    write_run(tmp_path / "a" / "h.wsprof", range(5), 1.0, 30.0, sites=(SITE_A, hostile_site))
    r = diff_paths(str(tmp_path / "b"), str(tmp_path / "a"))
    assert ("site", f"{HOSTILE} ({HOSTILE}.py)") in _names(r.moved_to)
    html = render_diff_html(r)
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert HOSTILE in render_diff_text(r)  # text shows names as they are


def _one_error_line(err: str, expect: str) -> None:
    assert err.startswith("wsprof: error: ") and err.count("\n") == 1, err
    assert expect in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["{b}", "{missing}"], "no such file or folder"),
        (["{missing}", "{a}"], "no such file or folder"),
        (["{b}", "{a}", "--before-steps", "3:3"], "empty step range"),
        (["{b}", "{a}", "--after-steps", "9:2"], "empty step range"),
        (["{b}", "{a}", "--before-steps", "zero:five"], "expected A:B"),
        (["{b}", "{a}", "--after-steps", "50:60"], "selects none of rank 0's steps (0-4)"),
        (["{b}", "{csv}"], "cannot compare a run with a series"),
        (["{b}", "{a}", "--format", "pdf"], "Invalid value"),
    ],
    ids=[
        "missing-after",
        "missing-before",
        "empty-range",
        "reversed-range",
        "not-numbers",
        "range-outside",
        "run-vs-series",
        "bad-format",
    ],
)
def test_bad_input_is_one_line_exit_2(
    fixed: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    expect: str,
) -> None:
    csv = tmp_path / "x.csv"
    csv.write_text("step,x_s\n0,1\n1,2\n")
    paths = {"b": fixed[0], "a": fixed[1], "missing": tmp_path / "nope", "csv": csv}
    assert main(["diff", *(a.format(**paths) for a in args)]) == 2
    captured = capsys.readouterr()
    _one_error_line(captured.err, expect)
    assert captured.out == ""


def test_real_process_exit_codes(fixed: tuple[Path, Path]) -> None:
    """``python -m wsprof diff`` end to end: text on stdout and exit 0; an empty step range is
    one line on stderr and exit 2."""
    ok = subprocess.run(
        [sys.executable, "-m", "wsprof", "diff", str(fixed[0]), str(fixed[1])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[1].startswith("VERDICT: ")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "wsprof",
            "diff",
            str(fixed[0]),
            str(fixed[0]),
            "--before-steps",
            "2:2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    _one_error_line(bad.stderr, "--before-steps '2:2': empty step range")
