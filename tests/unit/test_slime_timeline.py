"""slime's trainer communication timeline in (``wsprof/importers/slime_timeline.py``, the rule
``wsprof/analysis/rules/timeline.py``), against the written truth of
``tests/targets/slime_timeline_cases.py``.

Each case's per-step numbers (sync seconds within 1 %, bytes exact, the framework's own steps),
its verdict and its finding (the part of the sync that grows, its bytes, its buckets, failed
syncs); a writer killed mid-line, two runs in one folder, an unknown schema; hostile folders
(a FIFO, an overlong line, a symlink loop, a line that is not JSON) and that nothing read is
ever modified; the CLI's ``analyze``, ``diff`` and ``report`` on the cases.

Pure, except the HTML report (it draws with matplotlib).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helpers
import pytest

from wsprof.analysis.model import Analysis, Finding, Severity
from wsprof.analysis.run import analyze_path
from wsprof.cli import main
from wsprof.contracts.series import SYNC_BYTES, SYNC_FAILED, WEIGHT_SYNC_S
from wsprof.errors import InputError
from wsprof.importers import slime_timeline
from wsprof.importers.slime_timeline import (
    TimelineFollower,
    find_timeline_files,
    is_timeline,
    load_timeline,
    read_timeline,
)

sys.path.insert(0, str(helpers.TARGETS))
from slime_timeline_cases import write_case

pure = pytest.mark.pure

#: Relative tolerance of a sync's seconds against the truth.
REL = 0.01
#: Seconds a test that could hang (FIFO, symlink loop) waits for the reader.
HANG_S = 20.0


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, dict[str, Any]]]:
    """``case(name)``: the case's folder (written once per module) and its truth."""
    cache: dict[str, tuple[Path, dict[str, Any]]] = {}

    def get(name: str) -> tuple[Path, dict[str, Any]]:
        if name not in cache:
            folder = tmp_path_factory.mktemp("slime") / name
            cache[name] = (folder, write_case(name, folder))
        return cache[name]

    return get


def _fresh(name: str, folder: Path) -> dict[str, Any]:
    """Write case ``name`` into a folder of the test's own (to damage it)."""
    return write_case(name, folder)


def _series(a: Analysis) -> dict[str, tuple[tuple[int, ...], tuple[float, ...]]]:
    return {r.series.name: (tuple(r.series.steps), tuple(r.series.values)) for r in a.series}


def _findings(a: Analysis, kind: str) -> list[Finding]:
    return [f for f in a.findings if f.kind == kind]


def _one(a: Analysis, kind: str) -> Finding:
    got = _findings(a, kind)
    assert len(got) == 1, (kind, [(f.kind, f.title) for f in a.findings])
    return got[0]


def _check_sync_numbers(
    a: Analysis, steps: list[int], sync_s: list[float | None], nbytes: list[int]
) -> None:
    """weight_sync_s per step within :data:`REL` of the truth, weight_sync_bytes exact; the
    syncs whose truth is None (not ended) are not in the series."""
    series = _series(a)
    want = {s: v for s, v in zip(steps, sync_s) if v is not None}
    got_steps, got_vals = series[WEIGHT_SYNC_S]
    assert list(got_steps) == sorted(want), (got_steps, sorted(want))
    for s, v in zip(got_steps, got_vals):
        assert v == pytest.approx(want[s], rel=REL), (s, v, want[s])
    want_bytes = {s: b for s, b, v in zip(steps, nbytes, sync_s) if v is not None}
    b_steps, b_vals = series[SYNC_BYTES]
    assert list(b_steps) == sorted(want_bytes)
    for s, b in zip(b_steps, b_vals):
        assert b == want_bytes[s], (s, b, want_bytes[s])  # exact


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``folder``: bytes, mtime_ns, mode (links and FIFOs by their lstat)."""
    out: dict[str, tuple[bytes, int, int]] = {}
    for root, dirs, files in os.walk(folder):
        for name in sorted(files + dirs):
            p = os.path.join(root, name)
            st = os.lstat(p)
            data = Path(p).read_bytes() if os.path.isfile(p) and not os.path.islink(p) else b""
            out[p] = (data, st.st_mtime_ns, st.st_mode)
    return out


def _within(seconds: float, fn: Callable[[], Any], unblock: Callable[[], None]) -> Any:
    """``fn()`` in a daemon thread; fail when it has not returned after ``seconds`` (then
    ``unblock()`` is called so the thread can end). Its exception is re-raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised in the test's thread)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        unblock()
        t.join(5)
        pytest.fail(f"the reader did not return within {seconds} s (it hangs)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _unblock_fifo(path: Path) -> Callable[[], None]:
    """Open ``path``'s write end without blocking (frees a reader stuck opening it)."""

    def unblock() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.close(fd)

    return unblock


# ----------------------------------------------------------------------------- healthy


@pure
@pytest.mark.parametrize(("name", "schema"), [("healthy", 2), ("schema1", 1)])
def test_healthy_numbers_and_verdict(case: Any, name: str, schema: int) -> None:
    folder, truth = case(name)
    assert truth["schema_version"] == schema
    a = analyze_path(str(folder))
    series = _series(a)
    assert list(series[WEIGHT_SYNC_S][0]) == truth["steps"] == list(range(12))
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    assert a.verdict.status == "no_problem", [(f.severity, f.title) for f in a.findings]
    loud = [f for f in a.findings if f.severity in (Severity.WARNING, Severity.CRITICAL)]
    assert not loud, [(f.kind, f.title) for f in loud]
    assert not _findings(a, "sync_part") and not _findings(a, "sync_failed")
    assert any(f"(schema {schema})" in n for n in a.notes), a.notes
    assert any("global_step" in n for n in a.notes), a.notes
    # The headline's median sync is the truth's.
    assert a.headline.weight_sync_median_s == pytest.approx(
        statistics.median(truth["sync_s"]), rel=REL
    )
    assert a.headline.sync_bytes_median == statistics.median(truth["bytes"])


@pure
def test_load_timeline_series_and_typed_syncs(case: Any) -> None:
    folder, truth = case("healthy")
    imp = load_timeline(str(folder))
    assert imp.format == "slime-timeline"
    names = {s.name for s in imp.series}
    for want in (
        "weight_sync_s",
        "weight_sync_convert_s",
        "weight_sync_send_s",
        "weight_sync_engine_load_s",
        "weight_sync_rest_s",
        "weight_sync_bytes",
        "weight_sync_algbw",
        "bucket_send_s:0",
        "bucket_send_s:3",
        "train_s",
        "train_forward_backward_s",
        "grad_sync_s",
        "optimizer_step_s",
        "step_s",
        "outside_trainer_s",
    ):
        assert want in names, (want, sorted(names))
    assert not any(n.startswith(SYNC_FAILED) for n in names)
    by = {s.name: s for s in imp.series}
    send = by["weight_sync_send_s"]
    for s, v in zip(send.steps, send.values):
        assert v == pytest.approx(truth["send_s"][s], rel=REL), s
    convert = by["weight_sync_convert_s"]
    for s, v in zip(convert.steps, convert.values):
        assert v == pytest.approx(truth["convert_s"][s], rel=REL), s
    load = by["weight_sync_engine_load_s"]
    for s, v in zip(load.steps, load.values):
        assert v == pytest.approx(truth["load_s"][s], rel=REL), s

    read = read_timeline(str(folder))
    assert list(read.runs) == truth["run_ids"]
    assert sorted(Path(p).name for p in read.files) == [
        "slime-trainer-0.jsonl",
        "slime-trainer-1.jsonl",
    ]
    assert (read.cut_lines, read.bad_lines, read.capped) == (0, 0, False)
    proc = read.runs[truth["run_ids"][0]].primary()
    assert proc is not None and proc.rank == 0
    syncs = proc.syncs()
    assert [s.step for s in syncs] == truth["steps"]
    assert [s.weight_version for s in syncs] == [s + 1 for s in truth["steps"]]
    for sync, want_s, want_b in zip(syncs, truth["sync_s"], truth["bytes"]):
        assert sync.seconds == pytest.approx(want_s, rel=REL)
        assert sync.sent_bytes == want_b
        assert sync.failed is None
        assert [b.bucket_id for b in sync.buckets] == list(range(truth["buckets"]))
        assert all(b.status == "ok" and b.message_bytes == 256 << 20 for b in sync.buckets)


# ----------------------------------------------------------------------------- growth


@pure
def test_send_grows_names_the_send_at_flat_bytes(case: Any) -> None:
    folder, truth = case("send_grows")
    a = analyze_path(str(folder))
    assert list(_series(a)[WEIGHT_SYNC_S][0]) == truth["steps"]
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    assert a.verdict.status == "problems"
    f = _one(a, "sync_part")
    ev = f.evidence.as_dict()
    assert ev["part"] == truth["growing_part"] == "send"
    assert ev["bytes_flat"] is True
    assert ev["grown_buckets"] == list(range(truth["buckets"]))
    assert "in every bucket alike" in f.title and "send" in f.title
    assert f.severity == Severity.CRITICAL
    # The send's rise is the truth's (first to last sync's send seconds), within 5 %.
    assert ev["part_rise_s"] == pytest.approx(truth["send_s"][-1] - truth["send_s"][0], rel=0.05)
    top = a.diagnoses[0]
    assert top.cause == "sync_part", [(d.cause, d.title) for d in a.diagnoses]
    assert top.severity == Severity.CRITICAL
    assert top.where is not None and "send" in top.where.text


@pure
def test_bytes_grow_says_payload(case: Any) -> None:
    folder, truth = case("bytes_grow")
    a = analyze_path(str(folder))
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    assert truth["bytes"][-1] > truth["bytes"][0]
    f = _one(a, "sync_part")
    ev = f.evidence.as_dict()
    assert ev["part"] == truth["growing_part"] == "send"
    assert ev["bytes_flat"] is False
    assert ev["bytes_first"] == truth["bytes"][0] and ev["bytes_last"] == truth["bytes"][-1]
    assert "payload" in f.title and "per-call overhead" not in f.title
    assert a.diagnoses and a.diagnoses[0].cause == "sync_part"


@pure
def test_slow_bucket_is_named_alone(case: Any) -> None:
    folder, truth = case("slow_bucket")
    bid = truth["slow_bucket"]
    a = analyze_path(str(folder))
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    f = _one(a, "sync_part")
    ev = f.evidence.as_dict()
    assert ev["part"] == "send"
    assert ev["grown_buckets"] == [bid]
    assert ev["buckets"] == truth["buckets"]
    assert f"bucket {bid}" in f.title and "every bucket" not in f.title
    assert f"bucket {bid}" in (f.where or "")


# ----------------------------------------------------------------------------- failed sync


@pure
def test_failed_sync_is_a_finding_and_left_out(case: Any) -> None:
    folder, truth = case("failed_sync")
    assert [x["weight_version"] for x in truth["failed"]] == [6]
    read = read_timeline(str(folder))
    proc = read.runs[truth["run_ids"][0]].primary()
    assert proc is not None
    failed = [s for s in proc.syncs() if s.failed]
    assert [(s.weight_version, s.failed) for s in failed] == [(6, "TimeoutError")]
    fail_step = failed[0].step
    assert fail_step == 5  # weight_version = global_step + 1
    assert any(b.status == "error" for b in failed[0].buckets)

    a = analyze_path(str(folder))
    series = _series(a)
    assert fail_step not in series[WEIGHT_SYNC_S][0]
    assert list(series[WEIGHT_SYNC_S][0]) == [s for s in truth["steps"] if s != fail_step]
    sync_s = [None if s == fail_step else v for s, v in zip(truth["steps"], truth["sync_s"])]
    _check_sync_numbers(a, truth["steps"], sync_s, truth["bytes"])
    assert series[f"{SYNC_FAILED}:TimeoutError"] == ((fail_step,), (1.0,))

    f = _one(a, "sync_failed")
    ev = f.evidence.as_dict()
    assert ev["error_types"] == {"TimeoutError": 1}
    assert ev["steps"] == [fail_step] and ev["failed"] == 1
    assert f.severity == Severity.WARNING
    assert "TimeoutError" in f.title
    assert any("failed" in n and "TimeoutError" in n and "6" in n for n in a.notes), a.notes
    assert not _findings(a, "sync_part")  # one slow failed sync is no growth


# ----------------------------------------------------------------------------- killed writer


@pure
def test_killed_writer_cut_line(case: Any) -> None:
    folder, truth = case("killed_writer")
    assert truth["sync_s"][-1] is None
    read = read_timeline(str(folder))
    assert read.cut_lines == truth["cut_lines"] == 1
    assert read.bad_lines == 0
    a = analyze_path(str(folder))
    series = _series(a)
    cut_step = truth["steps"][-1]
    assert truth["cut_record"]["weight_version"] == cut_step + 1
    assert cut_step not in series[WEIGHT_SYNC_S][0], (
        "the sync whose weight_sync_complete was cut is measured anyway",
        [n for n in a.notes if n.startswith("read as")],
    )
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    f = _one(a, "sync_part")
    assert f.evidence.as_dict()["part"] == "send"
    assert any("cut by a killed writer" in n for n in a.notes), a.notes


@pure
def test_killed_writer_still_measures_rank_0(case: Any) -> None:
    """The process measured is the one that sends the buckets, the lowest rank among equals
    (``TimelineRun.primary``'s docstring): rank 0 sends as many buckets as rank 1 (its cut
    line is the complete event, not a send), so a cut line must not move the measure to
    rank 1."""
    folder, truth = case("killed_writer")
    read = read_timeline(str(folder))
    run = read.runs[truth["run_ids"][0]]
    sends = {
        p.rank: sum(1 for s in p.spans if s.operation == "weight_bucket_send")
        for p in run.processes.values()
    }
    assert sends[0] == sends[1]
    proc = run.primary()
    assert proc is not None and proc.rank == 0, proc and proc.label


# ----------------------------------------------------------------------------- two runs


@pure
def test_two_runs_read_the_newer_never_mixed(case: Any) -> None:
    folder, truth = case("two_runs")
    newer, older = truth["run_ids"]
    read = read_timeline(str(folder))
    assert set(read.runs) == {newer, older}
    assert [r.run_id for r in read.ordered()] == [older, newer]
    imp = load_timeline(str(folder))
    a = analyze_path(str(folder))
    want = truth["runs"][newer]
    assert len(want["steps"]) == 6 and len(truth["runs"][older]["steps"]) == 12
    series = _series(a)
    assert list(series[WEIGHT_SYNC_S][0]) == want["steps"]
    for name, (steps, _) in series.items():
        assert set(steps) <= set(want["steps"]), name  # no step of the older run
    _check_sync_numbers(a, want["steps"], want["sync_s"], want["bytes"])
    assert any(newer in n for n in imp.notes if n.startswith("read as"))
    assert any(older in n and "never mixed" in n for n in a.notes), a.notes
    # The older run, on its own, reads as its own numbers.
    sub = folder.parent / "older-only"
    sub.mkdir()
    for name in truth["runs"][older]["files"]:
        (sub / name).write_bytes((folder / name).read_bytes())
    b = analyze_path(str(sub))
    o = truth["runs"][older]
    _check_sync_numbers(b, o["steps"], o["sync_s"], o["bytes"])


# ----------------------------------------------------------------------------- unknown schema


@pure
def test_unknown_schema_is_one_line(case: Any, capsys: pytest.CaptureFixture[str]) -> None:
    folder, truth = case("unknown_schema")
    assert truth["schema_version"] == 3
    with pytest.raises(InputError) as got:
        load_timeline(str(folder))
    msg = str(got.value)
    assert "schema_version" in msg and "3" in msg
    assert "1, 2" in msg, msg  # the versions wsprof reads
    assert "\n" not in msg
    assert is_timeline(str(folder))  # it is a timeline, of a schema this wsprof does not read

    assert main(["analyze", str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("wsprof: error:")
    assert "schema_version" in lines[0] and "'3'" in lines[0] and "1, 2" in lines[0]
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- hostile inputs


@pure
def test_config_and_other_jsonl_are_not_a_timeline(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("actor_num_nodes: 1\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.9}\n')
    (tmp_path / "other.json").write_text('{"framework": "verl", "schema_version": 2}\n')
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert not is_timeline(str(tmp_path))
    assert find_timeline_files(str(tmp_path)) == ([], False)
    with pytest.raises(InputError, match="no slime communication timeline"):
        read_timeline(str(tmp_path))


@pure
def test_a_non_json_line_in_the_middle_is_counted(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    truth = _fresh("healthy", folder)
    f0 = folder / "slime-trainer-0.jsonl"
    lines = f0.read_bytes().splitlines(keepends=True)
    mid = len(lines) // 2
    f0.write_bytes(b"".join([*lines[:mid], b"this is not json {\n", *lines[mid:]]))
    read = read_timeline(str(folder))
    assert (read.bad_lines, read.cut_lines) == (1, 0)
    proc = read.runs[truth["run_ids"][0]].primary()
    assert proc is not None and proc.rank == 0
    assert len(proc.syncs()) == 12
    imp = load_timeline(str(folder))
    assert any("1 line(s) not a timeline record" in n for n in imp.notes), imp.notes
    a = analyze_path(str(folder))
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])


@pure
def test_a_fifo_does_not_hang(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    truth = _fresh("healthy", folder)
    fifo = folder / "x.jsonl"
    os.mkfifo(fifo)
    unblock = _unblock_fifo(fifo)
    files, _ = _within(HANG_S, lambda: find_timeline_files(str(folder)), unblock)
    assert str(fifo) not in files and len(files) == 2
    a = _within(HANG_S, lambda: analyze_path(str(folder)), unblock)
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    # The FIFO given itself: not a timeline, an error, no hang.
    assert not _within(HANG_S, lambda: is_timeline(str(fifo)), unblock)
    with pytest.raises(InputError):
        _within(HANG_S, lambda: read_timeline(str(fifo)), unblock)


@pure
def test_an_overlong_line_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slime_timeline, "MAX_LINE_BYTES", 4096)
    folder = tmp_path / "c"
    truth = _fresh("healthy", folder)
    f0 = folder / "slime-trainer-0.jsonl"
    lines = f0.read_bytes().splitlines(keepends=True)
    assert max(len(x) for x in lines) < 4096
    rec = json.loads(next(x for x in lines if b'"weight_bucket_ready"' in x))
    rec["metadata"] = {"note": "x" * 20_000}
    long = json.dumps(rec).encode() + b"\n"
    mid = len(lines) // 2
    f0.write_bytes(b"".join([*lines[:mid], long, *lines[mid:]]))
    read = read_timeline(str(folder))
    proc = read.runs[truth["run_ids"][0]].primary()
    assert proc is not None and proc.rank == 0
    assert len(proc.spans) == len(lines)  # the overlong record not read, every other one read
    assert read.cut_lines == 0
    a = analyze_path(str(folder))
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])


@pure
def test_an_overlong_line_is_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A skipped overlong line is damage like a line that is not JSON: counted in
    ``bad_lines`` (so the notes say that a line was skipped), not dropped silently."""
    monkeypatch.setattr(slime_timeline, "MAX_LINE_BYTES", 4096)
    folder = tmp_path / "c"
    _fresh("healthy", folder)
    f0 = folder / "slime-trainer-0.jsonl"
    lines = f0.read_bytes().splitlines(keepends=True)
    long = b'{"framework": "slime", "pad": "' + b"x" * 20_000 + b'"}\n'
    mid = len(lines) // 2
    f0.write_bytes(b"".join([*lines[:mid], long, *lines[mid:]]))
    read = read_timeline(str(folder))
    assert read.bad_lines == 1, (read.bad_lines, read.cut_lines)


@pure
def test_a_symlink_loop_does_not_hang(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    truth = _fresh("healthy", folder)
    os.symlink(".", folder / "here")  # a link to the folder itself
    os.symlink("..", folder / "up")  # to its parent (which holds it)
    os.symlink("self.jsonl", folder / "self.jsonl")  # a link to itself (ELOOP)
    os.symlink("b.jsonl", folder / "a.jsonl")  # a cycle of two
    os.symlink("a.jsonl", folder / "b.jsonl")
    sub = folder / "sub"
    sub.mkdir()
    os.symlink(str(folder), sub / "back")  # absolute, back up

    files, capped = _within(HANG_S, lambda: find_timeline_files(str(folder)), lambda: None)
    assert sorted(Path(p).name for p in files) == [
        "slime-trainer-0.jsonl",
        "slime-trainer-1.jsonl",
    ]
    assert not capped
    a = _within(HANG_S, lambda: analyze_path(str(folder)), lambda: None)
    _check_sync_numbers(a, truth["steps"], truth["sync_s"], truth["bytes"])
    # A link that loops, given itself: an error, no hang.
    with pytest.raises(InputError):
        _within(HANG_S, lambda: read_timeline(str(folder / "self.jsonl")), lambda: None)


@pure
@pytest.mark.parametrize("name", ["healthy", "killed_writer", "failed_sync", "two_runs"])
def test_inputs_are_never_modified(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "c"
    _fresh(name, folder)
    os.mkfifo(folder / "x.jsonl")
    os.symlink(".", folder / "here")
    before = _snapshot(folder)
    read_timeline(str(folder))
    load_timeline(str(folder))
    analyze_path(str(folder))
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    capsys.readouterr()
    for f in sorted(folder.glob("*.jsonl")):
        if not f.is_symlink() and f.is_file():
            load_timeline(str(f))  # a single file given
    assert _snapshot(folder) == before


# ----------------------------------------------------------------------------- CLI


@pure
def test_cli_analyze_json(case: Any, capsys: pytest.CaptureFixture[str]) -> None:
    folder, truth = case("send_grows")
    assert main(["analyze", str(folder), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    text = json.dumps(data)
    assert "sync_part" in text and "per-call overhead" in text
    assert main(["analyze", str(folder), "--fail-on", "critical"]) == 1
    capsys.readouterr()
    healthy, _ = case("healthy")
    assert main(["analyze", str(healthy), "--fail-on", "warning"]) == 0
    capsys.readouterr()


@pure
def test_cli_diff_says_the_sync_got_slower(case: Any, capsys: pytest.CaptureFixture[str]) -> None:
    healthy, h_truth = case("healthy")
    grows, g_truth = case("send_grows")
    assert main(["diff", str(healthy), str(grows)]) == 0
    out, _ = capsys.readouterr()
    verdict = " ".join(out.split())
    assert "slower" in verdict and "weight sync" in verdict, out
    assert "weight_sync_send_s" in verdict, out

    assert main(["diff", str(healthy), str(grows), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    sync = data["per_step"]["weight_sync_s"]
    assert sync["before"] == pytest.approx(statistics.median(h_truth["sync_s"]), rel=REL)
    assert sync["after"] == pytest.approx(statistics.median(g_truth["sync_s"]), rel=REL)
    assert sync["change"] > 0 and sync["rel_change"] > 1.0
    assert "weight sync" in data["verdict"][0] and "slower" in data["verdict"][0]
    assert {"kind": "series", "name": "weight_sync_send_s"} in data["slower"]
    assert not data["faster"]


def test_cli_report_names_the_send(
    case: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = case("send_grows")
    html = tmp_path / "r.html"
    assert main(["report", str(folder), "--output", str(html)]) == 0
    capsys.readouterr()
    page = html.read_text()
    assert "send" in page
    assert "per-call overhead" in page
    assert "in every bucket alike" in page


def test_cli_report_marks_the_slow_bucket_in_the_bucket_table(
    case: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, truth = case("slow_bucket")
    html = tmp_path / "r.html"
    assert main(["report", str(folder), "--output", str(html)]) == 0
    capsys.readouterr()
    page = html.read_text()
    assert 'id="buckets"' in page
    slow = truth["slow_bucket"]
    # Every bucket has a column; the slow one alone is marked as growing.
    assert page.count(" ▲</th>") == 1 and f"bucket {slow} ▲</th>" in page
    assert all(f">bucket {b}" in page for b in range(truth["buckets"]) if b != slow)


@pytest.mark.pure
def test_corrupt_values_are_skipped_and_said(tmp_path: Path) -> None:
    """A record with a negative or huge time or step is corrupt: skipped, counted, said; a
    stray earlier end of a version does not make its sync 0 s; a single file reads alone."""
    truth = write_case("healthy", tmp_path)
    f = tmp_path / "slime-trainer-0.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    sends = [r for r in recs if r["operation"] == "weight_bucket_send"]
    sends[5]["api_launch_monotonic_ns"] = -(10**30)
    converts = [r for r in recs if r["operation"] == "weight_convert"]
    converts[9]["global_step"] = 10**30
    stray = dict(next(r for r in recs if r["operation"] == "weight_sync_complete"))
    stray["api_launch_monotonic_ns"] -= 1000 * 10**9
    stray["completion_monotonic_ns"] = stray["api_launch_monotonic_ns"]
    f.write_text("".join(json.dumps(r) + "\n" for r in [stray, *recs]))
    read = read_timeline(str(f))
    assert read.out_of_range == 2
    imported = load_timeline(str(f))
    assert any("2 record(s) with a time, step" in n for n in imported.notes), imported.notes
    sync = next(s for s in imported.series if s.name == "weight_sync_s")
    assert min(sync.values) > 0.3 and max(sync.values) < 0.5, sync.values
    assert list(sync.steps) == truth["steps"]


@pure
def test_the_follower_reads_what_is_appended_and_starts_over_when_replaced(
    tmp_path: Path,
) -> None:
    src = tmp_path / "written"
    write_case("healthy", src)
    data = (src / "slime-trainer-0.jsonl").read_bytes()
    live = tmp_path / "live"
    live.mkdir()
    f = live / "slime-trainer-0.jsonl"
    cut = len(data) // 3 + 17  # mid-line: a record still being written
    f.write_bytes(data[:cut])
    follower = TimelineFollower(str(live))

    def syncs() -> int:
        read = follower.poll()
        run = next(iter(read.runs.values()))
        proc = run.primary()
        assert proc is not None
        return len(proc.syncs())

    first = syncs()
    assert 0 < first < 12 and follower.read.cut_lines == 0  # the partial line waits
    with f.open("ab") as fh:
        fh.write(data[cut:])
    assert syncs() == 12 and not follower.restarted
    half = data[: data.index(b"\n", len(data) // 2) + 1]
    (live / "new").write_bytes(half)
    os.replace(live / "new", f)  # another file under the same name
    assert syncs() < 12 and follower.restarted == [str(f)]
