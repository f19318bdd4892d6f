"""``ray.shutdown()`` right after the last weight sync loses no recorded call.

The real topology, real Ray, everything on 127.0.0.1: 3 actors in a torch.distributed gloo
group, ``wsprof.patch()`` inside each, 24 ``dist.broadcast`` calls of parameter-sized tensors
each, and the driver calls ``ray.shutdown()`` as soon as the actors' last collective returned
(``tests/targets/ray_teardown_job.py``, run as its own process, the way a training job runs).
Ray force-kills the workers then ("Worker force exited because its job has finished ... Quick
exit - terminating process immediately"): neither ``atexit`` nor the SIGTERM handler runs, so
what a background writer had not flushed would be gone. Each actor's trace must hold all 24.

``RAY_TEARDOWN_RUNS=N`` runs the scenario N times (default 1); ``scripts/ray_teardown_runs.py``
runs it 10 times and prints the calls kept per actor per run. Skipped only when ``import ray``
fails.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import TARGETS

from wsprof.trace.model import ProcessTrace
from wsprof.trace.reader import read_run

JOB = TARGETS / "ray_teardown_job.py"
#: Actors, weight syncs and broadcasts per sync in the job (see its docstring).
WORLD, SYNCS, PARAMS_PER_SYNC = 3, 3, 8
CALLS = SYNCS * PARAMS_PER_SYNC
#: Seconds the job (Ray start, 3 actors, rendezvous, syncs, shutdown) may take.
JOB_TIMEOUT_S = 240
#: Seconds Ray's processes may take to end once the job has ended.
LEFTOVER_TIMEOUT_S = 15
#: Times each test run repeats the scenario.
RUNS = int(os.environ.get("RAY_TEARDOWN_RUNS", "1"))


@dataclass
class Teardown:
    """One run of the job: what the driver printed, and the run folder's traces by pid."""

    node_ip: str
    nodes: list[str]
    #: Per rank (in rank order): rank, pid, trace path, calls made, the wsprof it imported.
    actors: list[dict[str, Any]]
    traces: dict[int, ProcessTrace] = field(default_factory=dict)
    output: str = ""
    #: The run folder's files afterwards: name -> size in bytes.
    files: dict[str, int] = field(default_factory=dict)

    def kept(self) -> list[int | None]:
        """Per rank, the broadcasts its trace holds (None: no trace of that actor)."""
        out: list[int | None] = []
        for a in self.actors:
            tr = self.traces.get(a["pid"])
            out.append(None if tr is None else sum(op == "broadcast" for op in tr.calls.op))
        return out


def _session_pids(sid: int) -> list[int]:
    """Processes in session ``sid`` (the job and everything Ray started for it)."""
    import psutil

    pids = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                pids.append(pid)
    return pids


def _end_session(sid: int) -> None:
    """Wait a while for the job's processes to end, then SIGKILL whatever is left of them."""
    deadline = time.monotonic() + LEFTOVER_TIMEOUT_S
    while _session_pids(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in _session_pids(sid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def run_job(base: Path) -> Teardown:
    """Run the job once with ``HOME``, Ray's temp folder and the run folder under ``base``.

    Ray's temp folder is ``base/ray``, given to ``ray.init`` through a short link in /tmp (a
    Unix socket path must stay under 108 bytes; the link is removed afterwards). The job runs
    in its own session; whatever of it is left afterwards is killed.

    Raises:
        AssertionError: the job failed, or its output is not what it prints.
        InputError: a trace of the run folder cannot be read.
    """
    home, ray_dir, out = base / "home", base / "ray", base / "run"
    home.mkdir(parents=True)
    ray_dir.mkdir()
    link = Path(tempfile.mkdtemp(prefix="wsr", dir="/tmp")) / "r"
    link.symlink_to(ray_dir)
    env = {
        **os.environ,
        "HOME": str(home),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONWARNINGS": "ignore",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    for k in ("RAY_ADDRESS", "WSPROF_OUT", "WSPROF_RUN", "WSPROF_DISABLE"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [sys.executable, str(JOB), str(out), str(link)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        try:
            output, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            raise AssertionError(
                f"job did not end in {JOB_TIMEOUT_S} s:\n{output[-3000:]}"
            ) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _end_session(proc.pid)
        shutil.rmtree(link.parent, ignore_errors=True)
    assert proc.returncode == 0, f"job exited {proc.returncode}:\n{output[-3000:]}"
    lines = [ln for ln in output.splitlines() if ln.startswith("{")]
    assert lines, f"job printed no result:\n{output[-3000:]}"
    res = json.loads(lines[-1])
    run = Teardown(res["node_ip"], res["nodes"], res["actors"], output=output)
    if out.exists():
        run.files = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
        run.traces = {int(tr.meta["pid"]): tr for tr in read_run(str(out))}
    return run


@pytest.fixture(scope="module")
def ray_available() -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not importable; pip install ray")


@pytest.mark.parametrize("run", range(RUNS))
def test_shutdown_right_after_the_last_sync_loses_no_call(
    ray_available: None, tmp_path: Path, run: int
) -> None:
    job = run_job(tmp_path)
    assert job.node_ip.startswith("127."), job.node_ip
    assert job.nodes and all(ip.startswith("127.") for ip in job.nodes), job.nodes
    assert [a["rank"] for a in job.actors] == list(range(WORLD))
    assert all(a["calls"] == CALLS for a in job.actors), job.actors
    assert len({a["pid"] for a in job.actors}) == WORLD
    kept = job.kept()
    lost = {a["rank"]: CALLS - (k or 0) for a, k in zip(job.actors, kept) if k != CALLS}
    assert not lost, (
        f"run {run}: calls kept per rank {kept} of {CALLS} each; lost per rank {lost} "
        f"({sum(lost.values())} of {WORLD * CALLS}); traces of pids {sorted(job.traces)}, "
        f"actors {[a['pid'] for a in job.actors]}; run folder {job.files}"
    )
    for a in job.actors:
        c = job.traces[a["pid"]].calls
        assert c.op.tolist() == ["broadcast"] * CALLS
        assert c.step.tolist() == [s for s in range(SYNCS) for _ in range(PARAMS_PER_SYNC)]
