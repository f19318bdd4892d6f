"""Real Ray (no stand-ins), everything on 127.0.0.1: actors in a torch.distributed gloo group,
and ``ray.util.collective``'s gloo backend profiled by the ``wsprof run`` bootstrap in both
import orders (``ray.util.collective`` before torch once left its hooks uninstalled).

One local Ray cluster serves the whole module. Actor code is ``tests/targets/ray_actors.py``
(workers import it by name). Skipped only when ``import ray`` fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import TARGETS, free_port

from wsprof.analysis.run import analyze_path
from wsprof.capture import extra
from wsprof.cli.run import hooks_dir
from wsprof.trace.model import ProcessTrace
from wsprof.trace.reader import read_trace

#: Actors per group (the test machine has 2 cores).
WORLD = 2
#: Weight syncs per test.
STEPS = 3
#: Seconds any one ``ray.get`` (or a ``wsprof run`` subprocess) may take before the test fails
#: instead of hanging.
GET_TIMEOUT_S = 120
#: The built-in ``ray.util.collective`` targets.
RAY_TARGETS = [t for t in extra.BUILTIN_TARGETS if t.startswith("ray.util.collective:")]
#: Environment of every Ray process: no Windows/macOS cluster mode, gloo on loopback only.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "GLOO_SOCKET_IFNAME": "lo"}
ORDERS = ("torch_first", "ray_first")


def _ray_owned(name: str) -> bool:
    return name == "ray" or name.startswith("ray.") or name == "ray_actors"


@pytest.fixture(scope="module")
def ray_module() -> Iterator[Any]:
    """Real ``ray``, imported here rather than at collection; skips the test where ``import
    ray`` fails. Afterwards the process is left as found: ``ray.init`` leaves variables in
    ``os.environ`` (``PYTHONBREAKPOINT``, ``RAY_AUTH_MODE``, ...) and its SIGTERM handler
    behind, and the ``ray`` modules are dropped from ``sys.modules`` (``test_extra_comms``
    imports a stand-in ``ray`` of the same name).

    Yields:
        The ``ray`` module.
    """
    env = dict(os.environ)
    sigterm = signal.getsignal(signal.SIGTERM)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read once, at ray's import
    try:
        try:
            import ray
        except ImportError as e:
            pytest.skip(f"ray is not importable ({e}); pip install ray")
        yield ray
    finally:
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGTERM, sigterm)
        for name in [m for m in sys.modules if _ray_owned(m)]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def cluster(ray_module: Any) -> Iterator[Any]:
    """A local Ray cluster on 127.0.0.1 for this module, with ``HOME`` and Ray's temp folder in
    a short private folder under /tmp (Unix socket paths must stay under 108 characters).

    Yields:
        The ``ray`` module, initialised.
    """
    ray = ray_module
    from ray._private import ray_constants

    base = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))
    home = base / "home"
    home.mkdir()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in RAY_ENV.items():
                mp.setenv(k, v)
            mp.setenv("HOME", str(home))  # before ray.init: Ray's processes inherit it
            # Where ray was imported earlier with the variable unset, ray.init would replace
            # _node_ip_address="127.0.0.1" with the host's outward address.
            mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
            mp.syspath_prepend(str(TARGETS))  # ray_actors: workers unpickle it by name
            try:
                ray.init(
                    _node_ip_address="127.0.0.1",
                    _temp_dir=str(base / "t"),
                    include_dashboard=False,
                    num_cpus=WORLD,
                )
                assert ray.util.get_node_ip_address().startswith("127.")
                yield ray
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _actors(
    ray: Any, cls: type, env: dict[str, str], args: Callable[[int], tuple[Any, ...]]
) -> list[Any]:
    """``WORLD`` actors of ``cls``, rank ``r``'s built with ``args(r)``, in workers with
    ``env`` added to their environment (Ray's ``runtime_env``)."""
    remote = ray.remote(cls).options(runtime_env={"env_vars": {**RAY_ENV, **env}})
    return [remote.remote(*args(r)) for r in range(WORLD)]


def _get(ray: Any, refs: Any) -> Any:
    return ray.get(refs, timeout=GET_TIMEOUT_S)


def _kill(ray: Any, actors: list[Any]) -> None:
    for a in actors:
        ray.kill(a)


def _rows(tr: ProcessTrace) -> list[tuple[str, str, str, int, int]]:
    c = tr.calls
    return list(
        zip(c.layer.tolist(), c.op.tolist(), c.api.tolist(), c.bytes.tolist(), c.step.tolist())
    )


def _events(tr: ProcessTrace, kind: str) -> list[str]:
    return [e.detail for e in tr.events if e.kind == kind]


def _assert_ray_hooked(tr: ProcessTrace) -> None:
    assert not [d for d in _events(tr, "extra_missing") if "ray" in d], _events(tr, "extra_missing")
    assert set(RAY_TARGETS) <= set(_events(tr, "extra_hooked"))


@pytest.mark.parametrize("order", ORDERS)
def test_wsprof_run_hooks_ray_collective_in_either_import_order(
    ray_module: Any, tmp_path: Path, order: str
) -> None:
    """The import-order bug without a cluster: ``wsprof run`` on a script that imports
    ``ray.util.collective`` before (or after) torch."""
    out = tmp_path / "run"
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, **RAY_ENV, "HOME": str(home), "PYTHONWARNINGS": "ignore"}
    env.pop("WSPROF_OUT", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wsprof",
            "run",
            "--out",
            str(out),
            "--",
            sys.executable,
            str(TARGETS / "ray_import_order.py"),
            order,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=GET_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    assert state["torch_before"] is False
    assert state["trace"] and state["hooked"], state
    _assert_ray_hooked(read_trace(state["trace"]))


def test_actors_broadcast_over_torch_distributed_gloo(cluster: Any, tmp_path: Path) -> None:
    """2 actors, ``wsprof.patch()`` in each: every ``dist.broadcast`` recorded once with its
    bytes and step, and the synced weights bit-identical to an unprofiled run."""
    import ray_actors

    ray = cluster
    out = tmp_path / "run"
    port = free_port()
    actors = _actors(
        ray, ray_actors.BroadcastActor, {"PYTHONPATH": str(TARGETS)}, lambda r: (r, WORLD, port)
    )
    try:
        pids = _get(ray, [a.setup.remote() for a in actors])
        patched = _get(ray, [a.sync.remote(STEPS, str(out)) for a in actors])
        _get(ray, [a.unpatch.remote() for a in actors])
        plain = _get(ray, [a.sync.remote(STEPS, None) for a in actors])  # the same, unprofiled
        _get(ray, [a.leave.remote() for a in actors])
    finally:
        _kill(ray, actors)
    sizes = [
        int(np.prod(shape)) * {"float32": 4, "bfloat16": 2, "int64": 8}[dt]
        for shape, dt in ray_actors.PARAMS
    ]
    assert sizes == [60, 14, 32]
    for r in range(WORLD):
        assert plain[r]["trace"] is None
        assert patched[r]["results"] == plain[r]["results"], f"rank {r}: results differ"
        assert patched[r]["results"] == patched[0]["results"], f"rank {r}: not broadcast"
        assert [len(b) for b in plain[r]["results"]] == sizes * STEPS
        tr = read_trace(patched[r]["trace"])
        assert (tr.meta["rank"], tr.meta["world_size"], tr.meta["pid"]) == (r, WORLD, pids[r])
        assert _rows(tr) == [
            ("api", "broadcast", "dist.broadcast", b, s) for s in range(STEPS) for b in sizes
        ]
        c = tr.calls
        assert (c.n_backend >= 1).all() and all(e is None for e in c.error.tolist())
    analysis = analyze_path(str(out))
    assert sorted(p.rank for p in analysis.processes) == list(range(WORLD))
    for p in analysis.processes:
        assert [(s.step, s.n_calls) for s in p.steps] == [(s, len(sizes)) for s in range(STEPS)]


def _expected_collective_results() -> list[bytes]:
    """What :meth:`ray_actors.CollectiveActor.work` returns on every rank."""
    out: list[bytes] = []
    ranks = range(WORLD)
    for s in range(STEPS):
        a = sum(np.arange(6, dtype=np.float32) * (r + 1) + s for r in ranks)
        b = np.full(4, float(s), dtype=np.float64)
        parts = [np.full(3, r + 10 * s, dtype=np.int32) for r in ranks]
        d = np.ones(5, dtype=np.float16) * sum(r + 1 for r in ranks)
        out.extend(t.tobytes() for t in (a, b, *parts, d))
    return out


@pytest.mark.parametrize("order", ORDERS)
def test_ray_util_collective_gloo_under_bootstrap(cluster: Any, tmp_path: Path, order: str) -> None:
    """``ray.util.collective`` (gloo: torch.distributed underneath) in 2 actors patched by the
    bootstrap: every call recorded once at layer 'extra', in either import order."""
    import ray_actors

    ray = cluster
    out = tmp_path / "run"
    env = {
        "PYTHONPATH": os.pathsep.join((hooks_dir(), str(TARGETS))),
        "WSPROF_RUN": "1",
        "WSPROF_OUT": str(out),
    }
    actors = _actors(ray, ray_actors.CollectiveActor, env, lambda r: (order,))
    try:
        states = _get(ray, [a.state.remote() for a in actors])
        _get(ray, [a.setup.remote(r, WORLD) for r, a in enumerate(actors)])
        results = _get(ray, [a.work.remote(STEPS) for a in actors])
        paths = _get(ray, [a.finish.remote() for a in actors])
    finally:
        _kill(ray, actors)
    for st in states:
        assert st["torch_before"] is False, "the worker imported torch before the actor"
        assert st["bootstrap"] and st["trace"], "the bootstrap did not patch the worker"
        assert st["hooked"], f"{order}: ray.util.collective.allreduce is not hooked"
    expected = _expected_collective_results()
    col = "ray.util.collective."
    for r in range(WORLD):
        assert results[r] == expected, f"rank {r}: wrong results"
        tr = read_trace(paths[r])
        assert tr.meta["pid"] == states[r]["pid"]
        _assert_ray_hooked(tr)
        rows = _rows(tr)
        assert rows == [
            *(
                row
                for s in range(STEPS)
                for row in (
                    ("extra", "all_reduce", col + "allreduce", 24, s),
                    ("extra", "broadcast", col + "broadcast", 32, s),
                    ("extra", "all_gather", col + "allgather", 24, s),  # the output list
                    ("api", "all_reduce", "dist.all_reduce", 10, s),  # called directly
                )
            ),
            ("extra", "barrier", col + "barrier", -1, STEPS - 1),
        ], rows
        # torch.distributed beneath each ray.util.collective call: seen at the backend layer,
        # never as a second API-layer row (the outermost hooked name counts).
        c = tr.calls
        assert (c.n_backend >= 1).all() and (c.backend_ns > 0).all()
