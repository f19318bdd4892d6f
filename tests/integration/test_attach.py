"""``wsprof attach`` end to end: real py-spy against real target processes.

Targets print ``ready`` and spin until released; the tests synchronise on that line, on trace
contents and on process exit, never on fixed sleeps. Assertions are proportions of samples.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, TARGETS, pyspy_skip_reason, running_target

from wsprof.analysis.run import analyze_path
from wsprof.analysis.samples import idle_stack
from wsprof.errors import InputError
from wsprof.trace.reader import read_run, read_trace

_SKIP = pyspy_skip_reason()
pytestmark = [pytest.mark.pyspy, pytest.mark.skipif(_SKIP is not None, reason=str(_SKIP))]

WSPROF = [sys.executable, "-c", "import sys; from wsprof.cli import main; sys.exit(main())"]
#: Least share of a target's active samples inside hot_spin (its only busy Python thread
#: besides the stdin reader, which blocks).
MIN_HOT_SHARE = 0.5


def wsprof(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WSPROF, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )


def _attach_traces(out: Path) -> list[Path]:
    return sorted(out.glob("*-attach.wsprof"))


def test_attach_samples_counts_and_analyses(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target() as target:
        done = wsprof(
            "attach",
            str(target.pid),
            "--duration",
            "3",
            "--window",
            "1",
            "--out",
            str(out),
            "--no-report",
        )
    assert done.returncode == 0, done.stderr
    assert "samples in" in done.stderr and "duration reached" in done.stderr
    [proc_trace] = _attach_traces(out)
    trace = read_trace(str(proc_trace))
    assert trace.meta["pid"] == target.pid and trace.meta["source"] == "attach"
    assert any("busy_target.py" in a for a in trace.meta["argv"])
    rss = trace.counters["proc.rss_bytes"][1]
    assert len(rss) >= 2 and (rss > 10 * 2**20).all()
    assert "proc.threads" in trace.counters and "proc.cpu_pct" in trace.counters
    analysis = analyze_path(str(out))
    [pa] = analysis.processes
    assert pa.pid == target.pid and pa.n_samples > 0
    hot = sum(f.samples for f in pa.hot_frames if f.frame.startswith("hot_spin ("))
    assert hot / pa.hot_frames[0].total >= MIN_HOT_SHARE
    assert "hot_spin" in done.stdout  # the verdict names the hot frame


def test_match_picks_targets_by_command_line(tmp_path: Path) -> None:
    token = f"wsprof-test-{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "run"
    with running_target("--tag", token) as target:
        done = wsprof(
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
    assert done.returncode == 0, done.stderr
    assert [read_trace(str(p)).meta["pid"] for p in _attach_traces(out)] == [target.pid]


def test_target_exiting_mid_run_keeps_samples_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target("--exit-after", "2.5") as target:
        done = wsprof("attach", str(target.pid), "--window", "1", "--out", str(out), "--no-report")
    assert done.returncode == 0, done.stdout + done.stderr  # every job ends: a normal end
    [said] = [line for line in done.stderr.splitlines() if "exited after" in line]
    assert said.startswith(f"wsprof attach: pid {target.pid} exited after"), said
    assert str(out) in said
    samples = [w for t in read_run(str(out)) for w in t.samples]
    assert sum(w.count for w in samples) > 0
    assert "Traceback" not in done.stderr


def test_ctrl_c_stops_and_keeps_everything(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target() as target:
        proc = subprocess.Popen(
            [*WSPROF, "attach", str(target.pid), "--window", "1", "--out", str(out), "--no-report"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the first window is on disk
            sampler = list(out.glob("*-pyspy.wsprof"))
            try:
                if sampler and read_trace(str(sampler[0])).samples:
                    break
            except InputError:
                pass  # being created
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        # 180 s: in two full suites from a fresh clone this attach took over 60 s to end after
        # Ctrl-C (about 4 s when run alone, also first in a fresh clone): under investigation.
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert "interrupted" in stderr
    assert sum(w.count for t in read_run(str(out)) for w in t.samples) > 0
    assert "trace:" in stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["999999999"], "no such process: pid 999999999"),
        ([], "nothing to attach to"),
        (["--match", "no-process-has-this-in-its-command-line-x7q"], "no running process"),
        (["--match", "(["], "bad regular expression"),
        (["1", "--phase", "no-equals-sign"], "expected NAME=REGEX"),
        (["1", "--native"], "--native needs --blocking"),
        (["1", "--window", "10", "--every", "5"], "shorter than --window"),
        (["1", "--pyspy", "/nonexistent/py-spy"], "py-spy not found at /nonexistent/py-spy"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    done = wsprof("attach", *args, "--out", str(tmp_path / "run"))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert lines[0].startswith("wsprof: error:")


def test_live_view_runs_without_a_terminal(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target() as target:
        done = wsprof(
            "attach",
            str(target.pid),
            "--duration",
            "2",
            "--window",
            "1",
            "--live",
            "--phase",
            "busy=hot_spin",
            "--out",
            str(out),
            "--no-report",
        )
    assert done.returncode == 0, done.stderr
    assert "top frames" in done.stdout and "hot_spin" in done.stdout


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to drop CAP_SYS_PTRACE in a child",
)
def test_ptrace_denied_names_the_cause_and_the_fix(tmp_path: Path) -> None:
    drop = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    with running_target() as target:
        done = subprocess.run(
            [
                *drop,
                *WSPROF,
                "attach",
                str(target.pid),
                "--duration",
                "2",
                "--window",
                "1",
                "--out",
                str(tmp_path / "run"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            check=False,
        )
    if done.stderr.startswith("setpriv:"):
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()}")
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"wsprof: error: cannot attach to pid {target.pid}")
    assert "CAP_SYS_PTRACE" in line and ("--cap-add SYS_PTRACE" in line or "root" in line)


def test_a_killed_pyspy_loses_one_window_not_the_run(tmp_path: Path) -> None:
    import psutil

    out = tmp_path / "run"
    with running_target() as target:
        proc = subprocess.Popen(
            [
                *WSPROF,
                "attach",
                str(target.pid),
                "--duration",
                "5",
                "--window",
                "1",
                "--out",
                str(out),
                "--no-report",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        killed = None
        deadline = time.monotonic() + 30
        while killed is None and time.monotonic() < deadline:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    sampling = "py-spy" in child.name() and "record" in child.cmdline()
                except psutil.Error:
                    continue
                if sampling:  # not the `py-spy --version` check
                    child.kill()
                    killed = child.pid
                    break
            else:
                time.sleep(0.05)
        stdout, stderr = proc.communicate(timeout=60)
        assert target.poll() is None, "the target was harmed"
    assert killed is not None, "never saw py-spy running"
    assert proc.returncode == 0, stderr
    [sampler] = [t for t in read_run(str(out)) if t.meta.get("targets")]
    assert any("killed by signal 9" in e.detail for e in sampler.events)
    assert sum(w.count for w in sampler.samples) > 0  # the other windows were sampled
    notes = analyze_path(str(out)).notes
    assert any(n.startswith("py-spy sampler: 1 x window lost") for n in notes), notes


def test_a_target_that_ends_is_not_sampler_trouble(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target("--exit-after", "2.5") as target:
        wsprof("attach", str(target.pid), "--window", "1", "--out", str(out), "--no-report")
    notes = analyze_path(str(out)).notes
    assert not any("target exited" in n for n in notes), notes  # every job ends: no note


def test_broken_nvml_is_noted_and_sampling_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "tests" / "standins" / "broken_nvml"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    with running_target() as target:
        done = subprocess.run(
            [
                *WSPROF,
                "attach",
                str(target.pid),
                "--duration",
                "2",
                "--window",
                "1",
                "--out",
                str(out),
                "--no-report",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env=env,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    [proc_trace] = _attach_traces(out)
    meta = read_trace(str(proc_trace)).meta
    assert "Driver Not Loaded" in meta["nvml"]
    assert "proc.rss_bytes" in read_trace(str(proc_trace)).counters


#: The job of issue 15 (tests/targets/sync_wrapper_target.py): weight sync through the user's
#: wrapper, whose own Python time (a growing registry scan) is most of each step.
SYNC_WRAPPER_TARGET = REPO / "tests" / "targets" / "sync_wrapper_target.py"
#: Least weight-sync share of the active samples, median over the windows. The target spends
#: about 75% of its time in the wrapper once the scan has grown (measured 49% -> 78% over six
#: 1 s windows); counting only the samples inside the broadcast gave 5-12%.
MIN_WRAPPER_SYNC_SHARE = 0.4


def test_attach_counts_a_sync_wrappers_own_time_as_weight_sync(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target(script=SYNC_WRAPPER_TARGET) as target:
        done = wsprof(
            "attach",
            str(target.pid),
            "--duration",
            "4",
            "--window",
            "1",
            "--out",
            str(out),
            "--no-report",
        )
    assert done.returncode == 0, done.stderr
    [pa] = analyze_path(str(out)).processes
    assert pa.pid == target.pid and len(pa.windows) >= 3
    shares = sorted(w.weight_sync_share or 0.0 for w in pa.windows)
    median = shares[len(shares) // 2]
    # Every active sample inside the wrapper (or the broadcast it calls) is weight sync, not
    # only the few inside torch.distributed.
    samples = [w for t in read_run(str(out)) for w in t.samples if w.pid == target.pid]
    in_wrapper = sum(
        w.count
        for w in samples
        if not idle_stack(w.frames)
        and any(f.startswith(("sync_param (", "keep_going (")) for f in w.frames)
    )
    sync = sum(w.phase_samples.get("weight_sync", 0) for w in pa.windows)
    # (a sample or two whose leaf py-spy caught in a blocking call is idle, not a phase)
    assert in_wrapper > 0 and sync >= 0.97 * in_wrapper, (sync, in_wrapper)
    assert median >= MIN_WRAPPER_SYNC_SHARE, f"weight-sync share per window: {shares}"
    assert "weight sync" in " ".join(done.stdout.split()), done.stdout


def test_attach_cuts_long_steps_from_sampled_phases(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with running_target(script=TARGETS / "long_steps_target.py") as target:
        done = wsprof(
            "attach",
            str(target.pid),
            "--duration",
            "24",
            "--window",
            "1",
            "--phase",
            "rollout=generate",
            "--phase",
            "train=train_step",
            "--phase",
            "weight_sync=push_weights",
            "--out",
            str(out),
            "--no-report",
            timeout=180,
        )
    assert done.returncode == 0, done.stderr
    a = analyze_path(str(out))
    [pa] = a.processes
    assert pa.step_source == "sampled", [w.phase_shares for w in pa.windows]
    assert len(pa.steps) >= 3
    sync = [r.weight_sync_s or 0.0 for r in pa.steps[:-1]]  # the last step is cut short
    # The push grows 0.8 s a step: each full step's sampled sync is longer than the one before
    # it, give or take one window (1 s).
    assert all(b > a - 1.0 for a, b in zip(sync, sync[1:])), sync
    assert sync[-1] - sync[0] >= 0.8 * (len(sync) - 1) * 0.5, sync
    rollout = [r.rollout_s or 0.0 for r in pa.steps[:-1]]
    assert all(abs(v - 1.6) < 1.0 for v in rollout), rollout
