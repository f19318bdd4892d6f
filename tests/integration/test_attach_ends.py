"""How ``wsprof attach`` ends, through the real CLI against real processes: SIGTERM, a target
that ends on its own, a matched process that is not Python, a failed start, and where the
report goes.

Each run's working folder is the test's own, so a folder or report that lands there by default
(``./wsprof-out``, ``./reports``) is seen. Targets print ``ready`` and spin until released.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import REPO, pyspy_skip_reason, running_target

from wsprof.trace.reader import read_run, read_trace

_SKIP = pyspy_skip_reason()
pytestmark = [pytest.mark.pyspy, pytest.mark.skipif(_SKIP is not None, reason=str(_SKIP))]

WSPROF = [sys.executable, "-c", "import sys; from wsprof.cli import main; sys.exit(main())"]
#: Seconds to wait for py-spy to show up under attach, and for attach to end after SIGTERM.
WAIT_S = 60
#: A window far longer than the test: a py-spy left behind would still be running at the end.
LONG_WINDOW_S = 120


def _env() -> dict[str, str]:
    # The tests run attach from their own folder: the checkout must stay importable.
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def wsprof(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WSPROF, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=_env(),
        check=False,
    )


def _samples(out: Path) -> int:
    return sum(w.count for t in read_run(str(out)) for w in t.samples)


def _pyspy_children(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "py-spy" in child.name() and "record" in child.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found


def _gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_sigterm_stops_pyspy_keeps_the_run_and_exits(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target() as target:
        attach = subprocess.Popen(
            [
                *WSPROF,
                "attach",
                str(target.pid),
                "--window",
                str(LONG_WINDOW_S),
                "--out",
                str(out),
                "--no-report",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=_env(),
        )
        try:
            deadline = time.monotonic() + WAIT_S
            pyspy: list[psutil.Process] = []
            while not pyspy and time.monotonic() < deadline and attach.poll() is None:
                pyspy = _pyspy_children(attach.pid)
                time.sleep(0.05)
            assert pyspy, "py-spy never ran under attach"
            attach.send_signal(signal.SIGTERM)
            stdout, stderr = attach.communicate(timeout=WAIT_S)
        finally:
            if attach.poll() is None:
                attach.kill()
                attach.wait()
        left = [p.pid for p in pyspy if not _gone(p)]
        for p in pyspy:  # never leave one behind, even when the test fails
            if not _gone(p):
                p.kill()
        assert target.poll() is None, "the target was harmed"
    assert not left, f"py-spy {left} outlived wsprof attach"
    assert attach.returncode == 0, stderr
    assert "(terminated)" in stderr and "Traceback" not in stderr
    [sampler] = [t for t in read_run(str(out)) if t.meta.get("targets")]
    assert any(e.detail.startswith("stopped: stopped by caller") for e in sampler.events)


def test_a_target_that_ends_on_its_own_is_a_normal_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target("--exit-after", "2") as target:
        done = wsprof(tmp_path, "attach", str(target.pid), "--window", "1", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"pid {target.pid} exited after" in done.stderr and "Traceback" not in done.stderr
    assert not any(line.startswith("wsprof: error") for line in done.stderr.splitlines())
    assert _samples(out) > 0
    assert "report:" in done.stdout and "trace:" in done.stdout


def test_the_report_of_an_attach_is_written_in_its_out_folder(tmp_path: Path) -> None:
    out = tmp_path / "somewhere" / "run"
    with running_target() as target:
        done = wsprof(
            tmp_path,
            "attach",
            str(target.pid),
            "--duration",
            "2",
            "--window",
            "1",
            "--out",
            str(out),
        )
    assert done.returncode == 0, done.stderr
    [report] = out.glob("wsprof-*-run-*.html")
    assert f"report: {report}" in done.stdout
    assert not (tmp_path / "reports").exists()
    assert "<html" in report.read_text(encoding="utf-8")[:2000].lower()


def test_a_matched_process_that_is_not_python_is_skipped(tmp_path: Path) -> None:
    token = f"wsprof-test-{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "run"
    sleep = shutil.which("sleep")
    assert sleep is not None
    # argv[0] carries the token, so the command line of this non-Python process matches.
    other = subprocess.Popen([f"sleeper-{token}", "60"], executable=sleep)
    try:
        with running_target("--tag", token) as target:
            done = wsprof(
                tmp_path,
                "attach",
                "--match",
                token,
                "--duration",
                "2",
                "--window",
                "1",
                "--out",
                str(out),
                "--no-report",
            )
    finally:
        other.kill()
        other.wait()
    assert done.returncode == 0, done.stderr
    skipped = [line for line in done.stderr.splitlines() if "skipping" in line]
    assert len(skipped) == 1, done.stderr
    assert f"pid {other.pid}" in skipped[0] and "not a Python process" in skipped[0]
    attached = [read_trace(str(p)).meta["pid"] for p in sorted(out.glob("*-attach.wsprof"))]
    assert attached == [target.pid]
    assert _samples(out) > 0


def _zombie() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + WAIT_S
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.02)
    return proc  # exited, not reaped: its pid still exists


@pytest.mark.parametrize("case", ["exited-pid", "not-python-pid"])
@pytest.mark.parametrize("out", [None, "deep/new/run"], ids=["default-out", "given-out"])
def test_a_failed_attach_leaves_no_folder(tmp_path: Path, case: str, out: str | None) -> None:
    if case == "exited-pid":
        proc: subprocess.Popen[bytes] = _zombie()
        words = "no such process"
    else:
        proc = subprocess.Popen(["sleep", "60"])
        words = "py-spy failed"
    try:
        done = wsprof(
            tmp_path, "attach", str(proc.pid), "--window", "1", *(["--out", out] if out else [])
        )
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in done.stderr.strip().splitlines()[-1], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))
