"""Terminal escapes read from an input never reach the terminal: names holding ESC ``[31m``,
OSC 52 (clipboard), ``\\r``, C1 CSI ``\\x9b``, bidi overrides are printed escaped by
``analyze``, ``diff``, ``watch --once`` and the error line, and stay recognisable; the HTML
report carries a Content-Security-Policy.

The inputs are real files: a trace written by :class:`~wsprof.trace.writer.TraceWriter` (host,
op, phase and counter names, its file name), a CSV series (column names); ``main`` runs them
as the CLI does."""

from __future__ import annotations

import csv
import hashlib
import re
import unicodedata
from pathlib import Path

import pytest
from helpers import load_script

from tests.report_fixtures import make_run_analysis
from tests.unit.test_report_html import with_diagnoses
from wsprof.cli import main
from wsprof.contracts.safe_text import escape_controls
from wsprof.report.html import render_html
from wsprof.report.text import render_summary, render_text

MANY = load_script("bench_many_ranks")
WATCH_BENCH = load_script("bench_watch")

#: SGR red, OSC 52 (set the clipboard), a carriage return, a C1 CSI, DEL, a bidi override.
HOSTILE = "\x1b[31mRED\x1b]52;c;cHduZWQ=\x07\rback\x9b2J\x7f\u202eevil"
#: What the hostile name looks like once escaped.
SHOWN = "\\x1b[31mRED\\x1b]52;c;cHduZWQ=\\x07\\x0dback\\x9b2J\\x7f\\u202eevil"
#: What may never be printed: C0 but the line break, DEL, C1, bidi controls, separators.
_RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def _raw(text: str) -> list[str]:
    return sorted({repr(c) for c in _RAW.findall(text)})


# --- the function --------------------------------------------------------------------------


def test_every_control_character_is_escaped_and_printable_text_is_kept() -> None:
    assert escape_controls(HOSTILE) == SHOWN
    assert escape_controls("a\nb\tc") == "a\\x0ab\\x09c"
    assert escape_controls("a\nb", newlines=True) == "a\nb"
    kept = "plain ascii, ünïcödé, 日本語, emoji 🙂, a backslash \\ and /paths/x.py:12"
    assert escape_controls(kept) == kept
    for n in range(0x3000):
        ch = chr(n)
        out = escape_controls(ch)
        if unicodedata.category(ch) == "Cc":
            assert out != ch and not _raw(out), hex(n)
    assert not _raw(escape_controls("".join(map(chr, range(0x3000)))))


def test_escaping_twice_changes_nothing() -> None:
    once = escape_controls(HOSTILE)
    assert escape_controls(once) == once


# --- renderers -------------------------------------------------------------------------------


def test_text_report_and_summary_escape_every_name_and_keep_their_colours() -> None:
    a = with_diagnoses(make_run_analysis(payload=HOSTILE), HOSTILE)
    for colour in (False, True):
        for text in (
            render_text(a, colour=colour, max_findings=len(a.findings)),
            render_summary(a, colour=colour),
        ):
            printed = text.replace("\x1b[31m", "").replace("\x1b[33m", "")
            printed = printed.replace("\x1b[36m", "").replace("\x1b[0m", "")
            if colour:
                assert printed != text  # wsprof's own severity colours are still there
            else:
                assert printed == text
            assert _raw(printed) == []
            assert SHOWN in text  # the name is still there to read


def test_html_report_declares_a_policy_that_allows_no_script() -> None:
    html = render_html(make_run_analysis(payload=HOSTILE))
    head = html.split("</head>", 1)[0]
    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', head)
    assert m is not None, head[:600]
    policy = dict(p.strip().split(" ", 1) for p in m.group(1).split(";"))
    assert policy["default-src"] == "'none'" and "script-src" not in policy
    assert policy["img-src"] == "data:" and policy["style-src"] == "'unsafe-inline'"
    assert head.index("Content-Security-Policy") < head.index("<style")


def test_html_pages_print_hostile_names_escaped() -> None:
    """HTML escaping leaves U+202E and the C0/C1 controls alone: every plain string a
    template prints is escaped as on a terminal (the figures' SVG is wsprof's own Markup)."""
    html = render_html(with_diagnoses(make_run_analysis(payload=HOSTILE), HOSTILE))
    text = re.sub(r"<svg.*?</svg>", "", html, flags=re.S)  # matplotlib's figures
    assert _raw(text) == [], _raw(text)
    assert "\\u202eevil" in text and "\\x1b[31mRED" in text


def test_a_usage_error_of_several_lines_is_one_line_without_escaped_layout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """click lays out a missing choice over several indented lines: folded into one line
    (the layout's line breaks and tabs are not written as ``\\x0a\\x09``)."""
    rc, out, err = _run(capsys, "export", "somewhere.wsprof", "-o", "x.csv")
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "\\x0a" not in err and "\\x09" not in err, err
    assert "perfetto, speedscope, csv" in err, err


# --- the CLI on real hostile files ------------------------------------------------------------


def _hostile_trace(folder: Path) -> Path:
    """A finished 6-step trace whose host, op, phase, counter and file names hold
    :data:`HOSTILE`."""
    w = WATCH_BENCH.RankWriter(str(folder), 0, 1, 1, 50_000, 3)
    s = w.w.strings
    w.ids["op"] = s.intern(f"broadcast{HOSTILE}")
    w.ids["api"] = s.intern(f"dist.broadcast{HOSTILE}")
    w.ids["phase"] = s.intern(f"weight_sync{HOSTILE}")
    w.w.set_meta({"host": f"node{HOSTILE}", "argv": ["train.py", HOSTILE]})
    w.write(MANY.step_schedule(6, 10, 50_000), 0, 6, 10)
    w.w.write(
        {"counters": [(w.t0_mono + k * 10**9, f"user.{HOSTILE}", float(k)) for k in range(6)]}
    )
    w.close()
    path = Path(w.path)
    named = folder / f"node{HOSTILE}-1.wsprof"
    path.rename(named)
    return named


def _hostile_csv(path: Path) -> Path:
    """A 12-step series whose column name holds :data:`HOSTILE` (quoted, as csv writes it)."""
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", f"weight_sync_s{HOSTILE}", "rss_bytes"])
        w.writerows([k, 1.0 + 0.5 * k * k, 2**30 + k * 2**24] for k in range(12))
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_analyze_and_diff_of_hostile_inputs_print_no_control_character(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    trace = _hostile_trace(run)
    series = _hostile_csv(tmp_path / f"series{HOSTILE}.csv")
    before = {p: _digest(p) for p in (trace, series)}
    for args in (
        ("analyze", str(trace), "--all"),
        ("analyze", str(run)),
        ("analyze", str(series), "--all"),
        ("analyze", str(series), "--fail-on", "inconclusive"),
        ("diff", str(trace), str(trace)),
        ("diff", str(series), str(series)),
        ("watch", str(run), "--once"),
    ):
        rc, out, err = _run(capsys, *args)
        assert rc in (0, 1), (args, err)
        assert _raw(out) == [] and _raw(err) == [], (args, _raw(out), _raw(err))
    # Names are recognisable where they are shown.
    _, out, _ = _run(capsys, "analyze", str(trace), "--all")
    assert f"node{SHOWN}" in out
    _, out, _ = _run(capsys, "analyze", str(series))
    assert "weight_sync_s\\x1b[31mRED" in out  # the table cuts names at 30 characters
    _, out, _ = _run(capsys, "diff", str(trace), str(trace))
    assert f"broadcast{SHOWN}" in out
    assert {p: _digest(p) for p in (trace, series)} == before


def test_the_error_line_of_a_hostile_path_is_one_escaped_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / f"no{HOSTILE}\nsuch.wsprof"
    bad = tmp_path / f"bad{HOSTILE}.csv"
    bad.write_text(f"step,x\n0,{HOSTILE}\n", encoding="utf-8")
    for args in (
        ("analyze", str(missing)),
        ("analyze", str(bad)),
        ("report", str(missing), "-o", str(tmp_path / "r.html")),
        ("diff", str(missing), str(bad)),
        ("export", str(missing), "--format", "csv", "-o", str(tmp_path / "x.csv")),
        ("watch", str(missing), "--once"),
        ("analyze", "--format", HOSTILE, str(bad)),
    ):
        rc, out, err = _run(capsys, *args)
        assert rc == 2, (args, err)
        assert out == "" and err.startswith("wsprof: error: ") and err.count("\n") == 1, err
        assert _raw(err) == [], (args, _raw(err))
        assert "\\x1b[31mRED" in err, err
