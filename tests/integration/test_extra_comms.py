"""Communicators outside ``torch.distributed`` (vLLM/SGLang ``PyNcclCommunicator``,
``ray.util.collective``, user targets), hooked by ``wsprof.capture.extra``.

The real packages cannot be installed here: ``tests/standins`` holds modules of the same dotted
names and signatures that move CPU tensors through a real world-size-1 gloo group. Traces are
real files read back with ``read_trace``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from helpers import REPO, gloo_world_of_one

import wsprof
from wsprof.capture import collectives, extra
from wsprof.capture.imports import PostImportFinder
from wsprof.trace.model import ProcessTrace
from wsprof.trace.reader import read_trace

STANDINS = REPO / "tests" / "standins"
VLLM = "vllm.distributed.device_communicators.pynccl"
SGLANG = "sglang.srt.distributed.device_communicators.pynccl"
_TOP = ("vllm", "sglang", "ray", "_loopback", "wsprof_user_")


@pytest.fixture(scope="module", autouse=True)
def gloo() -> Iterator[None]:
    with gloo_world_of_one():
        yield


def _ours(name: str) -> bool:
    return name.split(".")[0] in _TOP[:4] or name.startswith(_TOP[4])


@pytest.fixture(autouse=True)
def standins(tmp_path: Path) -> Iterator[Path]:
    """Stand-ins (and a folder for user modules) on sys.path for one test, then gone."""
    assert not [m for m in sys.modules if _ours(m)], "stand-ins imported outside the fixture"
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    sys.path[:0] = [str(STANDINS), str(user_dir)]
    importlib.invalidate_caches()
    try:
        yield user_dir
    finally:
        wsprof.unpatch()
        for p in (str(STANDINS), str(user_dir)):
            sys.path.remove(p)
        for name in [m for m in sys.modules if _ours(m)]:
            del sys.modules[name]


def _user_module(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    importlib.invalidate_caches()


def _trace(path: str | None) -> ProcessTrace:
    assert path is not None
    return read_trace(path)


def _rows(tr: ProcessTrace) -> list[tuple[str, str, str, int]]:
    c = tr.calls
    return list(zip(c.layer.tolist(), c.op.tolist(), c.api.tolist(), c.bytes.tolist()))


def _events(tr: ProcessTrace, kind: str) -> list[str]:
    return [e.detail for e in tr.events if e.kind == kind]


def test_module_imported_before_patch(tmp_path: Path) -> None:
    import ray.util.collective as col
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator

    comm = PyNcclCommunicator()
    x = torch.arange(4, dtype=torch.float32)
    expected_sum = comm.all_reduce(x)  # unpatched reference results

    path = wsprof.patch(str(tmp_path / "run"))
    try:
        out = comm.all_reduce(x)
        assert torch.equal(out, expected_sum)
        gathered = torch.empty(4)
        assert comm.all_gatherv(gathered, x, [4]) is None
        assert torch.equal(gathered, x)
        b = torch.full((3,), 7, dtype=torch.int64)
        comm.broadcast(b, 0)
        comm.send(torch.ones(2, dtype=torch.float16), 0)
        got = torch.zeros(2, dtype=torch.float16)
        comm.recv(got, 0)
        assert got.tolist() == [1.0, 1.0]
        rs_out = torch.empty(2)
        comm.reduce_scatterv(rs_out, torch.tensor([1.0, 2.0]), [2])
        assert rs_out.tolist() == [1.0, 2.0]
        r = torch.ones(5, dtype=torch.float64)
        col.allreduce(r)
        col.broadcast_multigpu([r], 0)
        assert r.tolist() == [1.0] * 5
        col.barrier()
    finally:
        wsprof.unpatch()
    rows = _rows(_trace(path))
    api = "vllm:PyNcclCommunicator."
    assert rows == [
        ("extra", "all_reduce", api + "all_reduce", 16),
        ("extra", "all_gather", api + "all_gatherv", 16),  # first tensor: the output
        ("extra", "broadcast", api + "broadcast", 24),
        ("extra", "send", api + "send", 4),
        ("extra", "recv", api + "recv", 4),
        ("extra", "reduce_scatter", api + "reduce_scatterv", 8),
        ("extra", "all_reduce", "ray.util.collective.allreduce", 40),
        ("extra", "broadcast", "ray.util.collective.broadcast_multigpu", 40),
        ("extra", "barrier", "ray.util.collective.barrier", -1),
    ]  # the dist.* calls made inside each one are counted once, by the outer name


def test_module_imported_after_patch_is_hooked_on_import(tmp_path: Path) -> None:
    path = wsprof.patch(str(tmp_path / "run"))
    try:
        assert extra.finder_installed()
        # patch() never imports a target module itself
        assert SGLANG not in sys.modules and "ray.util.collective" not in sys.modules
        import ray.util.collective.collective as impl  # runs ray/util/collective/__init__ first
        from sglang.srt.distributed.device_communicators import pynccl

        col = sys.modules["ray.util.collective"]
        # the real loader is back on the imported modules
        for mod in (pynccl, impl, col):
            assert isinstance(mod.__loader__, importlib.machinery.SourceFileLoader)
            assert isinstance(mod.__spec__.loader, importlib.machinery.SourceFileLoader)
        # the re-export and the defining module hold the same hook object
        assert col.allgather is impl.allgather and collectives.is_hook(impl.allgather)

        comm = pynccl.PyNcclCommunicator()
        t = torch.tensor([1.0, 2.0])
        comm.all_reduce(t)
        assert t.tolist() == [1.0, 2.0]
        out = torch.empty(2)
        comm.all_gather(out, t, sizes=[2])  # SGLang's variable-size form
        assert out.tolist() == [1.0, 2.0]
        parts = [torch.empty(2)]
        impl.allgather(parts, t)  # through the defining module's name
        assert parts[0].tolist() == [1.0, 2.0]
        rs = torch.empty(2)
        col.reducescatter(rs, [torch.tensor([3.0, 4.0])])
        assert rs.tolist() == [3.0, 4.0]
        col.send_multigpu(torch.ones(3), 0, 0)
        col.recv_multigpu(torch.empty(3), 0, 0)
    finally:
        wsprof.unpatch()
    assert not extra.finder_installed()
    tr = _trace(path)
    assert _rows(tr) == [
        ("extra", "all_reduce", "sglang:PyNcclCommunicator.all_reduce", 8),
        ("extra", "all_gather", "sglang:PyNcclCommunicator.all_gather", 8),
        ("extra", "all_gather", "ray.util.collective.allgather", 8),
        ("extra", "reduce_scatter", "ray.util.collective.reducescatter", 8),
        ("extra", "send", "ray.util.collective.send_multigpu", 12),
        ("extra", "recv", "ray.util.collective.recv_multigpu", 12),
    ]
    hooked = _events(tr, "extra_hooked")
    assert f"{SGLANG}:PyNcclCommunicator.broadcast" in hooked
    assert "ray.util.collective:recv_multigpu" in hooked
    assert not [d for d in _events(tr, "extra_missing") if "ray" in d or "sglang" in d]


def test_user_targets_from_patch_and_env(
    tmp_path: Path, standins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _user_module(
        standins,
        "wsprof_user_sync",
        """
        import torch.distributed as dist

        def push(tensor, src=0):
            dist.broadcast(tensor, src)
            return tensor.sum().item()

        class Engine:
            @staticmethod
            def spush(tensor):
                return tensor * 2

            @classmethod
            def cpush(cls, out, tensor):
                out.copy_(tensor)
                return cls.__name__
        """,
    )
    _user_module(standins, "wsprof_user_late", "def sync_weights(t):\n    return t + 1\n")
    import wsprof_user_sync as m

    monkeypatch.setenv(
        "WSPROF_EXTRA", " wsprof_user_sync:Engine.cpush=all_gather , wsprof_user_late:sync_weights"
    )
    path = wsprof.patch(
        str(tmp_path / "run"),
        extra=["wsprof_user_sync:push=broadcast", "wsprof_user_sync:Engine.spush"],
    )
    try:
        assert isinstance(m.Engine.__dict__["spush"], staticmethod)
        assert isinstance(m.Engine.__dict__["cpush"], classmethod)
        t = torch.tensor([1, 2, 3], dtype=torch.int32)
        assert m.push(t) == 6
        assert m.push(tensor=t, src=0) == 6  # keywords only: payload taken from the keywords
        assert m.Engine.spush(t).tolist() == [2, 4, 6]
        assert m.Engine().spush(t).tolist() == [2, 4, 6]
        out = torch.empty(3, dtype=torch.int32)
        assert m.Engine.cpush(out, t) == "Engine"
        assert out.tolist() == [1, 2, 3]
        import wsprof_user_late as late

        assert late.sync_weights(1) == 2
    finally:
        wsprof.unpatch()
    assert _rows(_trace(path)) == [
        ("extra", "broadcast", "wsprof_user_sync.push", 12),
        ("extra", "broadcast", "wsprof_user_sync.push", 12),
        ("extra", "spush", "wsprof_user_sync:Engine.spush", 12),  # unknown name: the op is the name
        ("extra", "spush", "wsprof_user_sync:Engine.spush", 12),
        ("extra", "all_gather", "wsprof_user_sync:Engine.cpush", 12),  # cls is args[0], then out
        ("extra", "sync_weights", "wsprof_user_late.sync_weights", -1),
    ]


def test_bad_targets_are_events_and_patch_still_works(tmp_path: Path, standins: Path) -> None:
    _user_module(standins, "wsprof_user_ok", "def bcast(t):\n    return t\n\nX = 3\n")
    _user_module(standins, "wsprof_user_later", "def there(t):\n    return t\n")
    import wsprof_user_ok  # noqa: F401

    bad = [
        "no_colon_here",
        "wsprof_user_ok:",
        "wsprof_user_ok:bcast=",
        "wsprof user:bcast",
        "wsprof_user_ok:missing",
        "wsprof_user_ok:Nope.method",
        "wsprof_user_ok:X",
        "wsprof_user_later:not_there",
    ]
    path = wsprof.patch(str(tmp_path / "run"), extra=[*bad, "wsprof_user_ok:bcast=broadcast"])
    assert path is not None
    try:
        import wsprof_user_later
        import wsprof_user_ok as ok
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator

        assert wsprof_user_later.there(5) == 5
        PyNcclCommunicator().broadcast(torch.ones(2), 0)
        ok.bcast(torch.ones(1))
        dist.broadcast(torch.ones(1), 0)  # torch.distributed is still hooked
    finally:
        wsprof.unpatch()
    tr = _trace(path)
    assert [(layer, api) for layer, _, api, _ in _rows(tr)] == [
        ("extra", "vllm:PyNcclCommunicator.broadcast"),
        ("extra", "wsprof_user_ok.bcast"),
        ("api", "dist.broadcast"),
    ]
    missing = _events(tr, "extra_missing")
    for target in bad:
        assert [d for d in missing if d.startswith(repr(target)) or d.startswith(target + ":")], (
            target,
            missing,
        )
    assert "wsprof_user_ok:bcast=broadcast" in _events(tr, "extra_hooked")


def test_unpatch_restores_originals_and_exceptions_pass_through(
    tmp_path: Path, standins: Path
) -> None:
    _user_module(
        standins,
        "wsprof_user_err",
        """
        ERR = KeyError("boom")

        def fail(t):
            raise ERR

        class C:
            @staticmethod
            def s(t):
                return t
        """,
    )
    import ray.util.collective as col
    import ray.util.collective.collective as impl
    import wsprof_user_err as m
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator

    before: dict[str, Any] = {
        "bcast": PyNcclCommunicator.__dict__["broadcast"],
        "col": col.allreduce,
        "impl": impl.allreduce,
        "fail": m.fail,
        "s": m.C.__dict__["s"],
    }
    targets = ["wsprof_user_err:fail", "wsprof_user_err:C.s"]
    path = wsprof.patch(str(tmp_path / "run"), extra=targets)
    try:
        first = extra.install(extra.targets_from(targets))  # twice is once
        assert first == extra.install(extra.targets_from(targets))
        assert PyNcclCommunicator.broadcast.__wrapped__ is before["bcast"]
        assert col.allreduce.__wrapped__ is before["col"]
        with pytest.raises(KeyError) as info:
            m.fail(torch.ones(1))
        assert info.value is m.ERR
        with pytest.raises(ValueError, match="must be less than world size"):
            col.broadcast(torch.ones(1), src_rank=5)
    finally:
        wsprof.unpatch()
    after = {
        "bcast": PyNcclCommunicator.__dict__["broadcast"],
        "col": col.allreduce,
        "impl": impl.allreduce,
        "fail": m.fail,
        "s": m.C.__dict__["s"],
    }
    assert all(after[k] is before[k] for k in before), after
    assert not extra.finder_installed()
    assert not [f for f in sys.meta_path if isinstance(f, PostImportFinder)]
    c = _trace(path).calls
    assert c.api.tolist() == ["wsprof_user_err.fail", "ray.util.collective.broadcast"]
    assert c.error.tolist() == ["KeyError", "ValueError"]


def test_a_wrapper_installed_over_our_hook_is_left_alone(tmp_path: Path, standins: Path) -> None:
    _user_module(standins, "wsprof_user_wrap", "def f(t):\n    return t\n")
    import wsprof_user_wrap as m

    orig = m.f
    wsprof.patch(str(tmp_path / "run"), extra=["wsprof_user_wrap:f"])

    def framework_wrapper(t: Any) -> Any:
        return hooked(t)

    hooked = m.f
    m.f = framework_wrapper
    wsprof.unpatch()
    assert m.f is framework_wrapper and hooked is not orig
    assert m.f(4) == 4  # our hook underneath is inert, the call still works


def test_op_table() -> None:
    assert extra.canonical_op("allreduce_multigpu") == "all_reduce"
    assert extra.canonical_op("all_gatherv") == "all_gather"
    assert extra.canonical_op("reducescatter_multigpu") == "reduce_scatter"
    assert extra.canonical_op("reduce_scatterv") == "reduce_scatter"
    assert extra.canonical_op("push") == "push"
    t = extra.parse_target(" a.b:C.d=broadcast ")
    assert (t.module, t.qualname, t.op) == ("a.b", "C.d", "broadcast")
    assert len(set(extra.BUILTIN_TARGETS)) == len(extra.BUILTIN_TARGETS) == 29
