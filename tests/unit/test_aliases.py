"""The alias table covers every collective name of the installed torch (issue 3)."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from wsprof.capture import aliases


def test_installed_torch_has_no_unclassified_collective_name() -> None:
    assert aliases.unclassified(dist) == ([], [])


def _fake_collective(name: str) -> Any:
    def fake(tensor: object) -> None:
        return None

    fake.__name__ = fake.__qualname__ = name
    fake.__module__ = "torch.distributed.distributed_c10d"
    return fake


def test_a_new_collective_name_is_reported() -> None:
    names = ("all_frobnicate", "_all_frobnicate")
    try:
        for name in names:
            fn = _fake_collective(name)
            setattr(c10d, name, fn)
            setattr(dist, name, fn)
        dist.ProcessGroup.allfrobnicate = lambda self, tensors, opts: None
        api, backend = aliases.unclassified(dist)
    finally:
        for name in names:
            for module in (c10d, dist):
                if name in vars(module):
                    delattr(module, name)
        if "allfrobnicate" in vars(dist.ProcessGroup):
            delattr(dist.ProcessGroup, "allfrobnicate")
    assert api == sorted(names)
    assert backend == ["allfrobnicate"]
    assert aliases.unclassified(dist) == ([], [])


def test_build_covers_the_names_the_weight_sync_bug_hid_under() -> None:
    table = aliases.build(dist)
    api = dict(table.api)
    backend = dict(table.backend)
    assert api["broadcast"] == "broadcast"
    assert api["all_gather"] == "all_gather"
    assert api["all_gather_into_tensor"] == "all_gather_into_tensor"
    assert backend["broadcast"] == "broadcast"
    assert backend["allgather"] == "all_gather"
    if hasattr(dist.ProcessGroup, "_allgather_base"):
        assert backend["_allgather_base"] == "all_gather_into_tensor"
    if hasattr(dist, "_all_gather_base"):
        assert api["_all_gather_base"] == "all_gather_into_tensor"
    if hasattr(dist, "_reduce_scatter_base"):
        assert api["_reduce_scatter_base"] == "reduce_scatter_tensor"
    if hasattr(dist.ProcessGroup, "_reduce_scatter_base"):
        assert backend["_reduce_scatter_base"] == "reduce_scatter_tensor"
    # Only names the installed torch has, each once.
    assert all(callable(getattr(dist, n, None)) for n in api)
    assert all(n in vars(dist.ProcessGroup) for n in backend)
    assert len(api) == len(table.api) and len(backend) == len(table.backend)


def test_installed_torch_has_no_unclassified_dispatcher_collective() -> None:
    """Every op of the c10d namespaces (``_c10d_functional``, ``c10d``, ...) is hooked or
    excluded with a reason: a new functional collective in a future torch fails here."""
    import torch

    assert aliases.unclassified_ops(torch) == []


def test_a_new_dispatcher_collective_is_reported() -> None:
    import torch

    lib = torch.library.Library("_c10d_functional", "FRAGMENT")
    lib.define("wsprof_frobnicate(Tensor input, str group_name) -> Tensor")
    try:
        assert aliases.unclassified_ops(torch) == ["_c10d_functional::wsprof_frobnicate"]
    finally:
        lib._destroy()


def test_backend_objects_and_cpp_helpers_are_in_the_table() -> None:
    table = aliases.build(dist)
    classes = {cls.__name__: dict(m) for cls, m in table.backend_classes}
    assert classes["Backend"]["allreduce"] == "all_reduce"
    assert classes["Backend"]["broadcast"] == "broadcast"
    assert dict(table.helpers)["_broadcast_coalesced"] == "broadcast"
