"""Defects found by a break-it pass, each a test: a SIGTERM inside the user's own flush, text
SQLite cannot store, user counters that are not numbers, values near the largest double, an
edited trace's meta, and step numbers that repeat every epoch."""

from __future__ import annotations

import enum
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from helpers import TARGETS

import wsprof
from wsprof.analysis.run import analyze_path
from wsprof.report.html import render_html
from wsprof.trace.reader import read_trace
from wsprof.trace.retention import Retention
from wsprof.trace.writer import TraceWriter


def test_sigterm_inside_the_users_flush_exits(tmp_path: Path) -> None:
    """The handler used to wait for the lock the interrupted flush held: the process hung."""
    for k in range(3):
        proc = subprocess.Popen(
            [sys.executable, str(TARGETS / "flush_loop.py"), str(tmp_path / f"run{k}")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.3 + 0.2 * k)
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("still running 15 s after SIGTERM") from None
        assert rc in (-signal.SIGTERM, 128 + signal.SIGTERM)
        [trace] = list((tmp_path / f"run{k}").glob("*.wsprof"))
        assert "i" in read_trace(str(trace)).counters  # readable, with what was flushed


def test_text_sqlite_cannot_store_is_escaped_not_fatal(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    w = TraceWriter(str(p))
    bad = "sync\udcff"
    for i in range(3):
        w.write(
            {
                "calls": [
                    (
                        i * 10,
                        i * 10 + 5,
                        0,
                        0,
                        7,
                        "broadcast",
                        "dist.broadcast",
                        "api",
                        8,
                        None,
                        None,
                        0,
                        -1,
                        i,
                        bad,
                        None,
                    )
                ],
                "spans": [("phase", bad, i * 10, i * 10 + 9, i, 7)],
                "counters": [(i * 10, bad, float(i))],
            }
        )
    w.close()
    t = read_trace(str(p))
    assert len(t.calls) == 3 and len(t.spans) == 3  # every write landed
    assert set(t.calls.phase.tolist()) == {"sync\\udcff"} and "sync\\udcff" in t.counters


class _E(enum.Enum):
    A = 1


def test_counter_never_raises_and_names_are_text(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path / "run"), counters=False)
    try:
        for value in ("abc", None, 10**400, object()):
            wsprof.counter("x", value)  # type: ignore[arg-type]
        wsprof.counter(_E.A, 1.0)  # type: ignore[arg-type]
        wsprof.counter(("a", 1), 2.0)  # type: ignore[arg-type]
        wsprof.step(2**63 + 5)  # beyond int64: clamped, never a failed flush
        wsprof.step(7)
    finally:
        wsprof.unpatch()
    t = read_trace(str(path))
    assert "_E.A" in t.counters and "('a', 1)" in t.counters and "x" not in t.counters
    assert t.meta["self"]["internal_errors"] == 4 and t.meta["self"]["lost_calls"] == 0
    assert [s.step for s in t.spans if s.kind == "step"] == [2**62, 7]


def test_values_near_the_largest_double_do_not_break_analysis(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    w = TraceWriter(str(p))
    w.set_meta({"pid": 1, "self": "edited"})
    spans = [("step", str(i), i * 10**9, (i + 1) * 10**9, i, 7) for i in range(6)]
    counters = [(i * 10**9 + 5, "huge", 1.7e308 - i) for i in range(6)]
    counters += [(i * 10**9 + 5, "grow_huge", 1e307 * (i + 1)) for i in range(6)]
    w.write({"spans": spans, "counters": counters})
    w.close()
    out = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(p), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    json.loads(out.stdout)  # nothing but JSON on stdout
    assert "<section" in render_html(analyze_path(str(p)))


def test_meta_self_of_the_wrong_shape(tmp_path: Path) -> None:
    p = tmp_path / "h-1.wsprof"
    w = TraceWriter(str(p))
    w.set_meta({"pid": 1})
    w.write({"spans": [("step", "0", 0, 10**9, 0, 7)]})
    w.close()
    for value in (
        '"x"',
        '{"dropped_calls": "many", "hook_ns_per_call": "x"}',
        '{"probes": {"by_probe": 5, "share": "x"}}',
    ):
        db = sqlite3.connect(p)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('self', ?)", (value,))
        db.commit()
        db.close()
        assert analyze_path(str(p)).findings is not None


def test_step_numbers_that_restart_each_epoch_stay_bounded(tmp_path: Path) -> None:
    """Steps 0-19 in each of 6 epochs, 200 calls each, keep 2, 10 per thinned step."""
    p = tmp_path / "h-1.wsprof"
    w = TraceWriter(str(p), retention=Retention(keep_steps=2, calls_per_thinned_step=10))
    t0 = 0
    for _epoch in range(6):
        for step in range(20):
            calls = []
            for _ in range(200):
                calls.append(
                    (
                        t0,
                        t0 + 5,
                        0,
                        0,
                        7,
                        "broadcast",
                        "dist.broadcast",
                        "api",
                        8,
                        None,
                        None,
                        0,
                        -1,
                        step,
                        None,
                        None,
                    )
                )
                t0 += 10
            w.write({"calls": calls})
    w.close()
    t = read_trace(str(p))
    assert t.totals is not None and int(t.totals.n.sum()) == 6 * 20 * 200
    # the first and last 2 step numbers in full (every epoch's), the 16 others near 10-20 each
    assert len(t.calls) <= 4 * 6 * 200 + 16 * 2 * 10 + 16 * 200, len(t.calls)
