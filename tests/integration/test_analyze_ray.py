"""``wsprof analyze --ray`` on a real multi-node Ray cluster on one machine (issue 33).

``ray.cluster_utils.Cluster``: a head and :data:`NODES` nodes on 127.0.0.1, each node's workers
told the folder it holds (``WSPROF_NODE_RUN_DIR`` in its environment), as local disks of a
cluster would hold each node's traces. Traces come from the many-ranks benchmark's generator
and are spread over the nodes' folders; a union folder hard-links them all (the run copied to
one machine). Checked: ``digest_on_ray`` then ``analyze_digests`` (and the CLI's ``--ray``)
give the JSON of the union analysed on one machine; a node killed while it digests is named,
its ranks counted as not read, and nothing raises.

Ray stays on loopback: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, ``HOME`` and Ray's temp folder
inside a private folder of the test, every node's address asserted to start with ``127.``, and
the cluster always shut down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import load_script

from wsprof.analysis.on_ray import NODE_RUN_DIR_ENV, digest_on_ray
from wsprof.analysis.run import analyze_digests, analyze_loaded_run
from wsprof.inputs import LoadedRun, load
from wsprof.report.jsonout import render_json

BENCH = load_script("bench_many_ranks")
#: Worker nodes besides the head (which holds no traces).
NODES = 2
#: Traces of the run: 12 ranks x 4,000 calls over 20 steps on 2 hosts, rank 7 slowing down.
RANKS, CALLS, OUTLIER = 12, 4_000, 7
#: The lost node's extra traces: 8 x 300,000 calls.
BIG_RANKS, BIG_CALLS = 8, 300_000
#: Seconds any wait on the cluster may take before the test fails instead of hanging.
WAIT_S = 120
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "GLOO_SOCKET_IFNAME": "lo"}


@dataclass
class Local:
    """The cluster and where its nodes' traces are."""

    ray: Any
    cluster: Any
    nodes: list[Any]
    folders: list[Path]
    union: Path
    base: Path
    env: dict[str, str]


def _ray_owned(name: str) -> bool:
    return name == "ray" or name.startswith("ray.")


@pytest.fixture(scope="module")
def local() -> Iterator[Local]:
    """A head and :data:`NODES` nodes on 127.0.0.1, node k holding ``node<k>/``; the run's
    traces spread over them round-robin, hard-linked together in ``union/``."""
    env0 = dict(os.environ)
    sigterm = signal.getsignal(signal.SIGTERM)
    os.environ.update(RAY_ENV)  # read once, at ray's import
    base = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # Unix sockets: < 108 characters
    home = base / "home"
    home.mkdir()
    os.environ["HOME"] = str(home)  # before the nodes start: Ray's processes inherit it
    # Ray's default temp folder: the cluster writes its address there (ray_current_cluster),
    # /tmp/ray otherwise, where another ray.init() on this machine would find it.
    os.environ["RAY_TMPDIR"] = str(base)
    (base / "ray").mkdir()
    cluster: Any = None
    try:
        try:
            import ray
            from ray._private import ray_constants
            from ray.cluster_utils import Cluster
        except ImportError as e:
            pytest.skip(f"ray is not importable ({e}); pip install 'wsprof[ray]'")
        ray_constants.ENABLE_RAY_CLUSTER = False  # no outward address for a local cluster
        gen = base / "gen"
        run = BENCH.generate_run(str(gen), RANKS, CALLS, 20, 2, (OUTLIER,), 20.0, 3.0)
        folders = [base / f"node{k}" for k in range(NODES)]
        union = base / "union"
        for f in [*folders, union]:
            f.mkdir()
        for spec in run.ranks:
            name = os.path.basename(spec.path)
            mine = folders[spec.rank % NODES] / name
            os.rename(spec.path, mine)
            os.link(mine, union / name)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "node_ip_address": "127.0.0.1",
                "num_cpus": 1,
                "temp_dir": str(base / "t"),
                "include_dashboard": False,
                "env_vars": {**RAY_ENV, NODE_RUN_DIR_ENV: str(base / "empty")},
            },
        )
        (base / "empty").mkdir()
        nodes = [
            cluster.add_node(
                node_ip_address="127.0.0.1",
                num_cpus=1,
                env_vars={**RAY_ENV, NODE_RUN_DIR_ENV: str(f)},
            )
            for f in folders
        ]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        ray_any: Any = ray  # ray's API is untyped
        alive = [n for n in ray_any.nodes() if n["Alive"]]
        assert len(alive) == NODES + 1
        assert all(n["NodeManagerAddress"].startswith("127.") for n in alive), alive
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        yield Local(ray, cluster, nodes, folders, union, base, env)
    finally:
        if "ray" in sys.modules:
            ray_mod: Any = sys.modules["ray"]
            ray_mod.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(base, ignore_errors=True)
        os.environ.clear()
        os.environ.update(env0)
        signal.signal(signal.SIGTERM, sigterm)
        for name in [m for m in sys.modules if _ray_owned(m)]:
            del sys.modules[name]


def test_digests_on_ray_merge_to_the_json_of_the_union(local: Local) -> None:
    """In this process: the nodes' digests, merged, are the union's analysis on one machine,
    byte for byte once the source is the same string."""
    digests, problems = digest_on_ray("RUN", local.cluster.address)
    assert problems == []
    assert sorted(-1 if d.trace.rank is None else d.trace.rank for d in digests) == list(
        range(RANKS)
    )
    assert [d.index for d in digests] == list(range(RANKS))
    on_ray = render_json(analyze_digests(digests, "RUN", problems))
    loaded = load(str(local.union))
    assert isinstance(loaded, LoadedRun)
    here = render_json(analyze_loaded_run(loaded).analysis)
    assert on_ray == here.replace(str(local.union), "RUN")
    doc = json.loads(on_ray)
    assert any(
        f["kind"] == "outlier_rank" and f"rank {OUTLIER} " in f["title"] for f in doc["findings"]
    )


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wsprof", *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
        env=env,
    )


def test_ray_gives_the_json_of_the_union_on_one_machine(local: Local) -> None:
    """The CLI, as a user runs it against the cluster's address: only digests travel, and the
    JSON is the union's (the source path aside)."""
    on_ray = _cli(
        local.env, "analyze", "--ray", local.cluster.address, "RUN_DIR", "--format", "json"
    )
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    here = _cli(local.env, "analyze", str(local.union), "--format", "json")
    assert here.returncode == 0, here.stderr[-3000:]
    doc = json.loads(on_ray.stdout)
    assert {r["rank"] for r in doc["ranks"]} == set(range(RANKS))
    assert any(
        f["kind"] == "outlier_rank" and f"rank {OUTLIER} " in f["title"] for f in doc["findings"]
    )
    assert on_ray.stdout == here.stdout.replace(str(local.union), "RUN_DIR")


def _digesting(local: Local, node: Any) -> bool:
    """Whether ``node``'s raylet has a worker running the digest task (its process title is
    ``ray::digest_node``)."""
    from ray._private import ray_constants

    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    try:
        kids = psutil.Process(raylet).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for p in kids:
        try:
            if "digest_node" in " ".join(p.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


def test_a_node_lost_mid_analysis_is_named_and_its_ranks_unread(local: Local) -> None:
    """The last node dies while it digests: the run is analysed from the other node's traces,
    the lost node's traces are named as not read, and nothing raises."""
    victim, folder = local.nodes[-1], local.folders[-1]
    # Traces large enough that the victim is still digesting when it is killed (about 3 s).
    big = local.base / "big"
    BENCH.generate_run(str(big), BIG_RANKS, BIG_CALLS, 20, 1, (), 0.0)
    for p in big.iterdir():
        os.rename(p, folder / f"big-{p.name}")
    lost = sorted(p.name for p in folder.iterdir())
    result: dict[str, Any] = {}

    def analyse() -> None:
        try:
            # One worker: the victim digests its traces one by one, long enough to be killed.
            result["out"] = digest_on_ray("RUN_DIR", None, 1)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            result["error"] = e

    th = threading.Thread(target=analyse, daemon=True)
    th.start()
    deadline = time.monotonic() + WAIT_S
    while not _digesting(local, victim):
        assert th.is_alive(), result
        assert time.monotonic() < deadline, "the victim never started digesting"
        time.sleep(0.02)
    local.cluster.remove_node(victim, allow_graceful=False)
    th.join(WAIT_S)
    assert not th.is_alive(), "digest_on_ray hung after the node was lost"
    assert "error" not in result, result.get("error")
    digests, problems = result["out"]
    assert len(problems) == len(lost)
    assert all("was lost while its traces were digested" in p for p in problems), problems
    assert all(f"({victim.node_id[:8]})" in p for p in problems), problems
    assert all(p.endswith("Error): not read") for p in problems), problems
    named = [os.path.basename(p.removeprefix("skipped ").split(":")[0]) for p in problems]
    assert sorted(named) == lost
    a = analyze_digests(digests, "RUN_DIR", list(problems))
    assert len(a.unread) == len(lost)
    assert {pa.rank for pa in a.processes} == {r for r in range(RANKS) if r % NODES != NODES - 1}
    said = " ".join(a.verdict.reasons)
    assert f"{len(lost)} traces of the run could not be read" in said, a.verdict.reasons
    assert "was lost while its traces were digested" in said
