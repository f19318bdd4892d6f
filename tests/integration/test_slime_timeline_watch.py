"""``wsprof watch`` on slime's communication timeline while a live process writes it
(issue 36): a line per completed weight sync, a verdict block that names the growing part, and
the end when the writer exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import TARGETS

sys.path.insert(0, str(TARGETS))
from slime_timeline_cases import write_case

REPLAY = str(TARGETS / "slime_timeline_replay.py")


def _wsprof(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wsprof", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_watch_follows_a_growing_timeline_until_its_writer_exits(tmp_path: Path) -> None:
    src = tmp_path / "written"
    truth = write_case("send_grows", src)
    live = tmp_path / "live"
    live.mkdir()
    writer = subprocess.Popen(
        [sys.executable, REPLAY, str(src / "slime-trainer-0.jsonl"),
         str(live / "slime-trainer-0.jsonl"), "0.25"]
    )  # fmt: skip
    try:
        res = _wsprof("watch", str(live), "--every", "0.1")
    finally:
        writer.kill()
        writer.wait()
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    synced = [ln for ln in lines if ln.startswith("step ") and "weight sync" in ln]
    # One line per sync, each once, in the framework's step order.
    assert [int(ln.split()[1]) for ln in synced] == truth["steps"], synced
    for ln, want in zip(synced, truth["sync_s"]):
        assert "send " in ln and "1.07 GB in 4 buckets" in ln, ln
        got = ln.split("weight sync ")[1].split("  ")[0]
        value = float(got.split()[0]) * (1e-3 if got.endswith(" ms") else 1.0)
        assert abs(value - want) / want < 0.01, (got, want)
    # The verdict changed while it ran, and the block names the part that grows.
    assert any(ln.startswith("verdict") for ln in lines), lines
    assert any("the weight sync's send grows" in ln for ln in lines), lines
    assert "every process that wrote the timeline has exited" in res.stderr


def test_watch_once_says_where_a_timeline_stands(tmp_path: Path) -> None:
    write_case("healthy", tmp_path)
    res = _wsprof("watch", str(tmp_path), "--once")
    assert res.returncode == 0, res.stderr
    assert "12 weight syncs" in res.stdout and "no accumulating problem" in res.stdout, res.stdout
    bad = _wsprof("watch", str(tmp_path), "--once", "--serve", "0")
    assert bad.returncode == 2 and "--serve and --tensorboard follow" in bad.stderr, bad.stderr
