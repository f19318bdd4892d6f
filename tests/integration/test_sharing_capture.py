"""Break-it tests of the tensor-sharing hooks (:mod:`wsprof.capture.sharing`) with real torch,
the real ``ForkingPickler``, real spawned child processes and real threads: a hook never
changes what is pickled, returned or raised; an internal error is counted, never raised;
``unpatch()`` puts every original back; the holder walk never runs user code."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing.reduction
import os
import pickle
import pickletools
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as tmp
from torch.multiprocessing import reductions

import wsprof
from wsprof.capture import sharing
from wsprof.capture.sharing import holder_path

ForkingPickler = multiprocessing.reduction.ForkingPickler
STRATEGIES = ("file_descriptor", "file_system")
#: Seconds a spawned child may take (it imports torch on 2 busy cores).
CHILD_TIMEOUT_S = 90


# ----------------------------------------------------------------------------- helpers


#: Pickles name these by reference: wsprof must never replace them.
REBUILD_FUNCTIONS = (
    "rebuild_tensor",
    "rebuild_cuda_tensor",
    "rebuild_storage_fd",
    "rebuild_storage_filename",
)


def _sharing_attrs() -> dict[str, Any]:
    """Every attribute the sharing hooks touch, as it is now (what is in each owner's own
    ``__dict__``: an inherited method is absent)."""
    out: dict[str, Any] = {}
    names = (
        *sharing.EXPORT_METHODS,
        *sharing.IMPORT_METHODS,
        sharing.REOPEN_METHOD,
        "share_memory_",
    )
    for name in names:
        out[f"UntypedStorage.{name}"] = torch.UntypedStorage.__dict__.get(name, "<absent>")
    for name in ("reduce_tensor", "reduce_storage", *REBUILD_FUNCTIONS):
        out[f"reductions.{name}"] = reductions.__dict__.get(name, "<absent>")
    for cls, fn in ForkingPickler._extra_reducers.items():  # type: ignore[attr-defined]
        out[f"reducer.{cls!r}"] = fn
    out["torch.cuda.ipc_collect"] = torch.cuda.__dict__.get("ipc_collect")
    return out


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k, "<none>") is not after.get(k, "<none>"))


@pytest.fixture(autouse=True)
def sharing_untouched() -> Iterator[None]:
    """Every hooked attribute is the original after each test, and the strategy is back."""
    strategy = tmp.get_sharing_strategy()
    before = _sharing_attrs()
    yield
    wsprof.unpatch()
    tmp.set_sharing_strategy(strategy)
    assert not _changed(before, _sharing_attrs()), _changed(before, _sharing_attrs())


@contextlib.contextmanager
def patched(out: Path, **kw: Any) -> Iterator[sharing.Ledger]:
    path = wsprof.patch(str(out), counters=kw.pop("counters", False), **kw)
    assert path is not None
    try:
        led = sharing._STATE.ledger
        assert led is not None, "patch() did not install the sharing hooks"
        yield led
    finally:
        wsprof.unpatch()


@contextlib.contextmanager
def strategy(name: str) -> Iterator[None]:
    was = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy(name)
    try:
        yield
    finally:
        tmp.set_sharing_strategy(was)


def _internal_errors() -> int:
    rec = sharing._STATE.recorder
    assert rec is not None
    return int(rec.internal_errors)


def _roundtrip(obj: Any) -> tuple[bytes, Any]:
    data = ForkingPickler.dumps(obj)
    return bytes(data), ForkingPickler.loads(data)


def _same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert type(b) is type(a)
        assert b.shape == a.shape and b.stride() == a.stride() and b.dtype == a.dtype
        assert b.storage_offset() == a.storage_offset()
        assert b.requires_grad == a.requires_grad
        assert torch.equal(a.detach(), b.detach())
    elif isinstance(a, torch.TypedStorage):
        assert type(b) is type(a) and b.dtype == a.dtype and b.size() == a.size()
        assert a.tolist() == b.tolist()
    elif isinstance(a, torch.UntypedStorage):
        assert type(b) is type(a) and b.nbytes() == a.nbytes()
        assert bytes(a) == bytes(b)
    else:
        raise AssertionError(type(a))


def _cases() -> dict[str, Callable[[], Any]]:
    def shared_dict() -> dict[str, torch.Tensor]:
        flat = torch.arange(64, dtype=torch.float32)
        return {f"w{i}": flat[i * 8 : (i + 1) * 8].view(2, 4) for i in range(8)}

    return {
        "plain": lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "non_contiguous": lambda: torch.arange(24.0).reshape(4, 6).t()[1:, ::2],
        "offset": lambda: torch.arange(20, dtype=torch.int64)[7:13],
        "empty": lambda: torch.empty(0, 3),
        "parameter": lambda: torch.nn.Parameter(torch.randn(3, 2)),
        "frozen_parameter": lambda: torch.nn.Parameter(torch.ones(2), requires_grad=False),
        "dict_one_storage": shared_dict,
        "typed_storage": lambda: torch.arange(5, dtype=torch.float64).storage(),
        "untyped_storage": lambda: torch.arange(7, dtype=torch.uint8).untyped_storage(),
        "bool": lambda: torch.tensor([True, False, True]),
    }


def _shape(data: bytes) -> tuple[list[str], list[str]]:
    """The pickle's opcodes, and the text arguments (module and function names: the handles
    are bytes or ints)."""
    ops, texts = [], []
    for op, arg, _ in pickletools.genops(data):
        ops.append(op.name)
        if isinstance(arg, str) and not arg.startswith("/"):
            texts.append(arg)
    return ops, texts


# ----------------------------------------------------------------------------- 1. round trips


@pytest.mark.parametrize("strat", STRATEGIES)
def test_roundtrip_equal_and_pickle_unchanged(tmp_path: Path, strat: str) -> None:
    cases = _cases()
    with strategy(strat):
        plain = {name: _shape(_roundtrip(make())[0]) for name, make in cases.items()}
        with patched(tmp_path) as led:
            for name, make in cases.items():
                obj = make()
                data, back = _roundtrip(obj)
                _same(obj, back)
                assert b"wsprof" not in data, name
                assert _shape(data) == plain[name], name
                if name not in ("empty", "plain_empty"):
                    assert b"rebuild_storage_" in data, name
                if strat == "file_system" and name != "empty":
                    assert b"rebuild_storage_filename" in data, name
                if strat == "file_descriptor" and name != "empty":
                    assert b"rebuild_storage_fd" in data, name
            assert led.exports.n >= len(cases) - 1
            assert _internal_errors() == 0


def test_pickled_by_plain_pickle_of_reduce_output(tmp_path: Path) -> None:
    """What verl and OpenRLHF send: ``reduce_tensor``'s (function, args), pickled as is; the
    function is found by name on the other side."""
    with patched(tmp_path):
        fn, args = reductions.reduce_tensor(torch.ones(4))
        data = ForkingPickler.dumps((fn, args))
        fn2, args2 = ForkingPickler.loads(data)
        assert torch.equal(fn2(*args2), torch.ones(4))
        assert b"wsprof" not in bytes(data)


def test_a_rebuild_function_captured_before_patch_still_pickles(tmp_path: Path) -> None:
    captured = reductions.rebuild_tensor  # e.g. ``from ...reductions import rebuild_tensor``
    plain = pickle.dumps(captured)
    with patched(tmp_path):
        assert pickle.dumps(captured) == plain


def test_a_reduce_output_made_while_patched_pickles_after_unpatch(tmp_path: Path) -> None:
    with patched(tmp_path):
        handle = reductions.reduce_tensor(torch.ones(2))
    pickle.dumps(handle[0])


def test_share_memory_is_not_an_export_and_changes_nothing(tmp_path: Path) -> None:
    with patched(tmp_path) as led:
        t = torch.arange(6.0)
        ptr = t.untyped_storage().data_ptr()
        assert t.share_memory_() is t
        assert t.is_shared() and t.untyped_storage().data_ptr() != ptr
        assert led.exports.n == 0
        _, back = _roundtrip(t)
        assert torch.equal(back, t) and led.exports.n == 1


def test_storage_subclass_open_returns_the_same_type(tmp_path: Path) -> None:
    class MyStorage(torch.UntypedStorage):
        pass

    def opened() -> type:
        s = torch.UntypedStorage(32)
        fd, size = s._share_fd_cpu_()
        return type(MyStorage._new_shared_fd_cpu(fd, size))

    plain = opened()
    with patched(tmp_path):
        assert opened() is plain


# ----------------------------------------------------------------------------- 2. exceptions


def _raised(fn: Callable[[], Any]) -> tuple[type, str]:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the exception is the result
        return type(e), str(e)
    raise AssertionError("did not raise")


def test_exceptions_pass_through_unchanged(tmp_path: Path) -> None:
    x = torch.ones(3, requires_grad=True)
    nonleaf = x * 2
    s = torch.arange(4.0).untyped_storage()
    with strategy("file_system"):
        manager, _, _ = s._share_filename_cpu_()
    devnull = os.open(os.devnull, os.O_RDONLY)
    calls: dict[str, Callable[[], Any]] = {
        "reduce_nonleaf": lambda: ForkingPickler.dumps(nonleaf),
        "reduce_tensor_direct": lambda: reductions.reduce_tensor(nonleaf),
        "bogus_filename": lambda: reductions.rebuild_storage_filename(
            torch.UntypedStorage, manager, b"/wsprof-no-such-handle", 16
        ),
        "open_bad_fd": lambda: torch.UntypedStorage._new_shared_fd_cpu(devnull, 16),
        "open_bad_file": lambda: torch.UntypedStorage._new_shared_filename_cpu(
            manager, b"/wsprof-nothing", 16
        ),
        "ipc_collect_cpu_only": lambda: torch.cuda.ipc_collect(),
        "rebuild_tensor_bad": lambda: reductions.rebuild_tensor(torch.Tensor, None, (0,)),
        "share_cuda_on_cpu": lambda: torch.UntypedStorage(4)._share_cuda_(),
    }
    try:
        plain = {k: _raised(f) for k, f in calls.items()}
        with patched(tmp_path):
            for k, f in calls.items():
                assert _raised(f) == plain[k], k
            assert _internal_errors() == 0
    finally:
        os.close(devnull)


# ----------------------------------------------------------------------------- 3. unpatch


def test_unpatch_restores_every_original(tmp_path: Path) -> None:
    before = _sharing_attrs()
    wsprof.patch(str(tmp_path), counters=False)
    try:
        now = _sharing_attrs()
        assert {
            "UntypedStorage._share_fd_cpu_",
            "UntypedStorage._new_shared_fd_cpu",
            "reductions.reduce_tensor",
            "UntypedStorage._new_with_weak_ptr",
            "torch.cuda.ipc_collect",
        } <= set(_changed(before, now))
        # what pickles name by reference stays torch's own
        assert not [k for k in _changed(before, now) if "rebuild" in k]
        assert ForkingPickler._extra_reducers[torch.Tensor] is reductions.reduce_tensor  # type: ignore[attr-defined]
        wsprof.patch(str(tmp_path), counters=False)  # twice is once
        assert not _changed(now, _sharing_attrs()), "patch() twice wrapped again"
    finally:
        wsprof.unpatch()
    assert not _changed(before, _sharing_attrs())
    wsprof.unpatch()  # nothing left to restore
    assert not _changed(before, _sharing_attrs())


def test_unpatch_after_init_reductions_restores(tmp_path: Path) -> None:
    """A library that calls ``init_reductions()`` while patched registers the hook again."""
    before = _sharing_attrs()
    with patched(tmp_path):
        reductions.init_reductions()
    assert not _changed(before, _sharing_attrs())


def test_patch_unpatch_repeated_keeps_identity_and_counts(tmp_path: Path) -> None:
    before = _sharing_attrs()
    for i in range(3):
        with patched(tmp_path / str(i)) as led:
            _roundtrip(torch.ones(2))
            assert led.exports.n == 1
        assert not _changed(before, _sharing_attrs())


# ----------------------------------------------------------------------------- 4. SGLang


class _SGLangPatch:
    """SGLang's ``monkey_patch_torch_reductions`` (python/sglang/srt/utils/patch_torch.py),
    its device-to-UUID rewrite made a recorded no-op on CPU."""

    def __init__(self) -> None:
        self.reduced = 0
        self.rebuilt = 0

    def reduce(self, *args: Any, **kwargs: Any) -> Any:
        self.reduced += 1
        fn, out = reductions._reduce_tensor_original(*args, **kwargs)  # type: ignore[attr-defined]
        return fn, out

    def rebuild_cuda(self, *args: Any) -> Any:
        self.rebuilt += 1
        return reductions._rebuild_cuda_tensor_original(*args)  # type: ignore[attr-defined]

    def install(self) -> None:
        if hasattr(reductions, "_reduce_tensor_original"):
            return
        reductions._reduce_tensor_original = reductions.reduce_tensor  # type: ignore[attr-defined]
        reductions._rebuild_cuda_tensor_original = reductions.rebuild_cuda_tensor  # type: ignore[attr-defined]
        reductions.reduce_tensor = self.reduce
        reductions.rebuild_cuda_tensor = self.rebuild_cuda
        reductions.init_reductions()


@pytest.fixture
def torch_reductions_restored() -> Iterator[None]:
    """Put torch's own reducers back after a test that patched them like SGLang."""
    rt, rc = reductions.reduce_tensor, reductions.rebuild_cuda_tensor
    reducers = dict(ForkingPickler._extra_reducers)  # type: ignore[attr-defined]
    yield
    reductions.reduce_tensor, reductions.rebuild_cuda_tensor = rt, rc
    ForkingPickler._extra_reducers.clear()  # type: ignore[attr-defined]
    ForkingPickler._extra_reducers.update(reducers)  # type: ignore[attr-defined]
    for name in ("_reduce_tensor_original", "_rebuild_cuda_tensor_original"):
        if hasattr(reductions, name):
            delattr(reductions, name)


@pytest.mark.usefixtures("torch_reductions_restored")
def test_sglang_patching_after_wsprof_is_still_counted(tmp_path: Path) -> None:
    sgl = _SGLangPatch()
    with patched(tmp_path) as led:
        sgl.install()
        assert ForkingPickler._extra_reducers[torch.Tensor] == sgl.reduce  # type: ignore[attr-defined]
        t = torch.arange(8.0)
        _, back = _roundtrip(t)
        assert torch.equal(back, t)
        assert sgl.reduced == 1
        assert led.exports.n == 1
        e = next(iter(led.exports.live.values()))
        assert e.tensor is not None and e.tensor() is t, "the tensor is no longer known"


@pytest.mark.usefixtures("torch_reductions_restored")
def test_sglang_patching_before_wsprof_is_kept(tmp_path: Path) -> None:
    sgl = _SGLangPatch()
    sgl.install()
    before = _sharing_attrs()
    with patched(tmp_path) as led:
        _roundtrip(torch.arange(3.0))
        assert sgl.reduced == 1 and led.exports.n == 1
    assert not _changed(before, _sharing_attrs())
    _roundtrip(torch.arange(3.0))
    assert sgl.reduced == 2


@pytest.mark.usefixtures("torch_reductions_restored")
def test_unpatch_keeps_a_framework_patch_made_after_wsprof(tmp_path: Path) -> None:
    sgl = _SGLangPatch()
    with patched(tmp_path):
        sgl.install()
    assert reductions.reduce_tensor == sgl.reduce
    assert reductions.rebuild_cuda_tensor == sgl.rebuild_cuda
    assert ForkingPickler._extra_reducers[torch.Tensor] == sgl.reduce  # type: ignore[attr-defined]
    _, back = _roundtrip(torch.ones(3))
    assert torch.equal(back, torch.ones(3)) and sgl.reduced == 1


# ----------------------------------------------------------------------------- 5. processes


def _consumer(q_in: Any, q_out: Any, patch_out: str | None) -> None:
    """A spawned engine: opens the tensors sent, answers their sums (and its trace)."""
    if patch_out:
        import wsprof as w

        w.patch(patch_out)
    try:
        got = q_in.get(timeout=CHILD_TIMEOUT_S)
        sums = {k: float(v.sum()) for k, v in got.items()}
        shapes = {k: list(v.shape) for k, v in got.items()}
        del got
        path = None
        if patch_out:
            import wsprof as w

            path = w.trace_path()
            w.unpatch()
        q_out.put({"sums": sums, "shapes": shapes, "trace": path})
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q_out.put({"error": f"{type(e).__name__}: {e}"})


def _send(tmp_path: Path, parent_patched: bool, child_patched: bool) -> dict[str, Any]:
    ctx = tmp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    child_out = str(tmp_path / "child") if child_patched else None
    p = ctx.Process(target=_consumer, args=(q_in, q_out, child_out))
    p.start()
    flat = torch.arange(40, dtype=torch.float32)
    bucket = {"a": flat[:10], "b": flat[10:].view(5, 6), "c": torch.ones(3, 3)}
    try:
        with contextlib.ExitStack() as stack:
            led = stack.enter_context(patched(tmp_path / "parent")) if parent_patched else None
            q_in.put(bucket)
            res = q_out.get(timeout=CHILD_TIMEOUT_S)
            if led is not None:
                res["parent_exports"] = led.exports.n
    finally:
        p.join(CHILD_TIMEOUT_S)
        if p.is_alive():
            p.kill()
    assert "error" not in res, res
    assert res["sums"] == {k: float(v.sum()) for k, v in bucket.items()}
    assert res["shapes"] == {k: list(v.shape) for k, v in bucket.items()}
    assert p.exitcode == 0
    return res


def _counter(trace: str, name: str) -> float | None:
    db = sqlite3.connect(trace)
    try:
        row = db.execute("SELECT max(value) FROM counters WHERE name = ?", (name,)).fetchone()
    finally:
        db.close()
    return None if row is None else row[0]


@pytest.mark.parametrize(
    ("parent_patched", "child_patched"), [(True, True), (True, False), (False, True)]
)
def test_real_consumer_process(tmp_path: Path, parent_patched: bool, child_patched: bool) -> None:
    res = _send(tmp_path, parent_patched, child_patched)
    if parent_patched:
        assert res["parent_exports"] == 2  # two storages: flat and ones
    if child_patched:
        trace = res["trace"]
        assert trace and Path(trace).exists()
        imports = _counter(trace, "share.imports")
        assert imports is not None and imports >= 2, imports


# ----------------------------------------------------------------------------- 6. threads


def test_threads_share_while_the_sampler_reads(tmp_path: Path) -> None:
    n_threads, per_thread = 4, 40
    errors: list[BaseException] = []
    readings: list[int] = []
    stop = threading.Event()

    def share(i: int) -> None:
        try:
            for j in range(per_thread):
                t = torch.full((16 + i,), float(j))
                data = ForkingPickler.dumps({"t": t, "v": t[1:]})
                back = ForkingPickler.loads(data)
                assert torch.equal(back["t"], t) and torch.equal(back["v"], t[1:])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def sample() -> None:
        try:
            while not stop.is_set():
                readings.append(len(sharing.reading()))
                sharing.search_holders()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with strategy("file_system"), patched(tmp_path) as led:
        sampler = threading.Thread(target=sample)
        sampler.start()
        workers = [threading.Thread(target=share, args=(i,)) for i in range(n_threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stop.set()
        sampler.join()
        assert not errors, errors
        assert readings
        assert led.exports.n == n_threads * per_thread
        assert led.exports.bytes == sum(4 * (16 + i) * per_thread for i in range(n_threads))
        assert led.imports.n <= led.exports.n
        final = dict(sharing.reading())
        assert final["share.exports"] == n_threads * per_thread
        assert _internal_errors() == 0


# ----------------------------------------------------------------------------- 7. internal errors


class FlakyTensor(torch.Tensor):
    """A tensor subclass whose ``untyped_storage()`` fails once ``budget`` calls are spent."""

    budget = -1
    calls = 0

    def untyped_storage(self) -> torch.UntypedStorage:  # type: ignore[override]
        FlakyTensor.calls += 1
        if FlakyTensor.budget >= 0 and FlakyTensor.calls > FlakyTensor.budget:
            raise RuntimeError("storage gone")
        return super().untyped_storage()


@pytest.fixture
def flaky_registered() -> Iterator[None]:
    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    yield
    reducers.pop(FlakyTensor, None)
    FlakyTensor.budget, FlakyTensor.calls = -1, 0


@pytest.mark.usefixtures("flaky_registered")
def test_bookkeeping_failure_is_counted_not_raised(tmp_path: Path) -> None:
    """The hook asks the tensor for its storage after torch did: that call fails."""
    ForkingPickler.register(FlakyTensor, reductions.reduce_tensor)
    t = torch.arange(5.0).as_subclass(FlakyTensor)
    FlakyTensor.calls = 0
    plain = ForkingPickler.loads(ForkingPickler.dumps(t))
    torch_calls = FlakyTensor.calls
    ForkingPickler._extra_reducers.pop(FlakyTensor)  # type: ignore[attr-defined]
    with patched(tmp_path) as led:
        ForkingPickler.register(FlakyTensor, reductions.reduce_tensor)
        t2 = torch.arange(5.0).as_subclass(FlakyTensor)
        FlakyTensor.calls, FlakyTensor.budget = 0, torch_calls
        back = ForkingPickler.loads(ForkingPickler.dumps(t2))
        FlakyTensor.budget = -1
        assert torch.equal(back, plain) and type(back) is type(plain)
        assert FlakyTensor.calls > torch_calls, "the hook did not ask the tensor"
        assert _internal_errors() == 1
        assert led.exports.n == 0  # not booked, not raised


def test_export_bookkeeping_error_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails inside the ledger (here its weak reference) is one internal error."""
    with patched(tmp_path) as led:

        def broken(storage: Any) -> Any:
            raise OSError("weakref table full")

        monkeypatch.setattr(sharing, "_storage_weak", broken)
        t = torch.arange(4.0)
        _, back = _roundtrip(t)
        assert torch.equal(back, t)
        assert _internal_errors() >= 1  # the export (the open is torch's cache here)
        assert led.exports.n == 0
        monkeypatch.undo()
        _roundtrip(torch.ones(1))
        assert led.exports.n == 1


# ----------------------------------------------------------------------------- 8. holder walk


class _Bucket:
    pass


class _Owner:
    def __init__(self) -> None:
        self.kept: Any = None


def test_holder_path_cycles_and_self_references() -> None:
    a, b = _Owner(), _Owner()
    a.kept, b.kept = b, a
    tgt = _Bucket()
    loop: list[Any] = []
    loop.append(loop)
    loop.append(tgt)
    d: dict[str, Any] = {}
    d["self"] = d
    d["loop"] = loop
    a.kept = [b, d]
    assert holder_path(tgt) == "_Owner.kept[1]['loop'][1]"


def test_holder_path_huge_list_is_bounded() -> None:
    owner = _Owner()
    owner.kept = [_Bucket() for _ in range(100_000)]
    t0 = time.perf_counter()
    assert holder_path(owner.kept[-1]) == "_Owner.kept[99999]"
    assert time.perf_counter() - t0 < 2.0
    tgt = _Bucket()
    many = [[tgt] for _ in range(5_000)]  # 5000 anonymous holders: walk bounded
    t0 = time.perf_counter()
    assert holder_path(tgt) is None
    assert time.perf_counter() - t0 < 2.0
    del many


class _Slots:
    __slots__ = ("first", "second")


class _OneSlot:
    __slots__ = "data"  # a str: one slot named "data"


def test_holder_path_slots() -> None:
    s = _Slots()
    s.second = _Bucket()
    assert holder_path(s.second) == "_Slots.second"


def test_holder_path_str_slots() -> None:
    s = _OneSlot()
    s.data = _Bucket()
    assert holder_path(s.data) == "_OneSlot.data"


class _Noisy:
    """Counts every dunder the walk might call on it."""

    calls: list[str] = []

    def __eq__(self, other: object) -> bool:
        _Noisy.calls.append("__eq__")
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        _Noisy.calls.append("__repr__")
        raise RuntimeError("repr")

    def __str__(self) -> str:
        _Noisy.calls.append("__str__")
        raise RuntimeError("str")


def test_holder_path_never_calls_eq() -> None:
    _Noisy.calls = []
    owner = _Owner()
    owner.kept = [_Noisy() for _ in range(5)]
    tgt = _Noisy()
    owner.kept.append(tgt)
    owner.kept.append(_Noisy())
    assert holder_path(tgt) == "_Owner.kept[5]"
    assert _Noisy.calls == []


def test_holder_path_dict_key_with_raising_repr() -> None:
    _Noisy.calls = []
    owner = _Owner()
    owner.kept = {_Noisy(): _Bucket()}
    tgt = next(iter(owner.kept.values()))
    holder_path(tgt)  # must not raise
    assert _Noisy.calls == []


class _LazyDict(dict):  # type: ignore[type-arg]
    """A dict subclass whose iteration is user code (a lazy loader, a proxy)."""

    calls: list[str] = []

    def __iter__(self) -> Iterator[Any]:
        _LazyDict.calls.append("__iter__")
        raise RuntimeError("iter")

    def items(self) -> Any:
        _LazyDict.calls.append("items")
        raise RuntimeError("items")

    def keys(self) -> Any:
        _LazyDict.calls.append("keys")
        raise RuntimeError("keys")


def test_holder_path_dict_subclass_custom_iteration() -> None:
    _LazyDict.calls = []
    owner = _Owner()
    owner.kept = _LazyDict(w=_Bucket())
    tgt = dict.__getitem__(owner.kept, "w")
    assert holder_path(tgt) == "_Owner.kept['w']"
    assert _LazyDict.calls == []


class _Proxy:
    """An object with ``__slots__`` and a ``__getattr__`` with side effects (an RPC proxy)."""

    __slots__ = ("unset", "target")
    calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        _Proxy.calls.append(name)
        raise AttributeError(name)


def test_holder_path_never_calls_getattr() -> None:
    _Proxy.calls = []
    p = _Proxy()
    p.target = _Bucket()
    assert holder_path(p.target) == "_Proxy.target"
    assert _Proxy.calls == []


class _Hostile:
    """``__getattribute__`` raises for every name (a torn-down proxy)."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"no {name}")


def test_holder_path_survives_raising_getattribute() -> None:
    h = _Hostile()
    tgt = _Bucket()
    object.__getattribute__(h, "__dict__")["x"] = tgt
    holder_path(tgt)  # must not raise


def test_holder_path_of_a_shared_tensor_kept_in_a_list(tmp_path: Path) -> None:
    """End to end: the ledger's tensor for an exported storage names its holder."""
    owner = _Owner()
    owner.kept = []
    with patched(tmp_path) as led:
        for i in range(3):
            t = torch.full((4,), float(i))
            owner.kept.append({"flattened_tensor": t})
            ForkingPickler.dumps(t)
        del t
        gc.collect()
        entries = sorted(led.exports.live.values(), key=lambda e: e.seq)
        assert len(entries) == 3
        tensor = entries[0].tensor()
        assert tensor is not None
        path = holder_path(tensor)
        del tensor
        assert path == "_Owner.kept[0]['flattened_tensor']"


# ----------------------------------------------------------------------------- more


class _Squares(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((3,), float(i * i))


def test_forked_dataloader_workers_under_patch(tmp_path: Path) -> None:
    """Forked workers send their batches by shared memory: the patched parent opens them (a
    DataLoader's batch, not recorded as weight sharing); the forked workers carry the
    parent's hooks without its recorder, and nothing breaks."""
    loader = torch.utils.data.DataLoader(
        _Squares(), batch_size=2, num_workers=2, multiprocessing_context="fork"
    )
    with patched(tmp_path) as led:
        got = [b.clone() for b in loader]
        assert led.imports.n == 0
        assert _internal_errors() == 0
    want = [torch.stack([torch.full((3,), float(i * i)) for i in (j, j + 1)]) for j in (0, 2, 4, 6)]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_hook_cost_stays_small(tmp_path: Path) -> None:
    """The ledger's bookkeeping per export, with 2 000 storages alive (a kept bucket list)."""
    kept = [torch.ones(4) for _ in range(2_000)]
    with strategy("file_system"), patched(tmp_path) as led:
        for t in kept:
            ForkingPickler.loads(ForkingPickler.dumps(t))
        per_export_us = led.hook_ns / 1e3 / led.exports.n
        assert led.exports.n == len(kept)
        assert per_export_us < 200, per_export_us  # a few µs measured; loose on busy cores


def test_a_dataloaders_batches_are_no_weight_buckets(tmp_path: Path) -> None:
    """Batches from DataLoader workers travel by shared memory like weight buckets; they are
    neither exports (in the worker) nor imports (in the training process)."""
    from torch.utils.data import DataLoader, TensorDataset

    ds = TensorDataset(torch.arange(64 * 100, dtype=torch.float32).reshape(64, 100))
    with patched(tmp_path):
        got = [b for (b,) in DataLoader(ds, batch_size=8, num_workers=2)]
        led = sharing._STATE.ledger
        assert led is not None
        assert (led.exports.n, led.imports.n) == (0, 0)
        # a weight bucket pickled by the training process itself still is
        t = torch.ones(16)
        ForkingPickler.loads(ForkingPickler.dumps(t))
        assert led.exports.n == 1
    assert torch.equal(torch.cat(got), ds.tensors[0])


def test_a_handle_mapped_twice_is_a_reopen(tmp_path: Path) -> None:
    """A consumer that opens a handle twice: from torch's cache (the same storage) or, the
    cache bypassed, as a second mapping of the same shared-memory file: both are reopens."""
    child = tmp_path / "child.py"
    child.write_text(
        "import sys, tempfile, torch, wsprof\n"
        "from multiprocessing.reduction import ForkingPickler\n"
        "from torch.multiprocessing import reductions\n"
        "from wsprof.capture import sharing\n"
        "torch.multiprocessing.set_sharing_strategy('file_system')\n"
        "data = sys.stdin.buffer.read()\n"
        "wsprof.patch(tempfile.mkdtemp(), counters=False)\n"
        "kept = [ForkingPickler.loads(data)]\n"
        "kept.append(ForkingPickler.loads(data))  # from torch's cache\n"
        "reductions.shared_cache.clear()\n"
        "kept.append(ForkingPickler.loads(data))  # a second mapping\n"
        "led = sharing._STATE.ledger\n"
        "print(led.imports.n, led.reopens, float(sum(float(t.sum()) for t in kept)))\n"
        "wsprof.unpatch()\n"
    )
    with strategy("file_system"):
        t = torch.ones(1000)
        data = bytes(ForkingPickler.dumps(t))
        out = subprocess.run(
            [sys.executable, str(child)], input=data, capture_output=True, timeout=120
        )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    imports, reopens, total = out.stdout.decode().split()[:3]
    assert (int(imports), int(reopens), float(total)) == (2, 2, 3000.0)
    del t
