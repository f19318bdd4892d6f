"""The alias table as the installed torch has it: which names of
:mod:`wsprof.contracts.ops` exist (:func:`build`), and which collectives of the installed torch
are neither hooked nor excluded (:func:`unclassified`, :func:`unclassified_ops`).
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Any

from wsprof.contracts.ops import (
    API_EXCLUDED,
    API_OPS,
    BACKEND_CLASS_EXCLUDED,
    BACKEND_EXCLUDED,
    BACKEND_OPS,
    CPP_HELPERS,
    FUNCTIONAL_EXCLUDED,
    FUNCTIONAL_EXCLUDED_NAMESPACES,
    FUNCTIONAL_OPS,
    LIFECYCLE,
)


@dataclass(frozen=True)
class AliasTable:
    """The names hooked in the installed torch: (name, canonical op) pairs per layer, and the
    backend classes (``Backend`` and the C++ backends) with the methods each defines."""

    api: tuple[tuple[str, str], ...]
    backend: tuple[tuple[str, str], ...]
    helpers: tuple[tuple[str, str], ...] = ()
    backend_classes: tuple[tuple[type, tuple[tuple[str, str], ...]], ...] = ()


def backend_classes(dist: Any) -> list[type]:
    """``torch.distributed.Backend`` and the backend classes of the installed torch derived
    from it (``ProcessGroupGloo``, ``ProcessGroupNCCL``, ...), defined in C++."""
    import torch._C._distributed_c10d as cc

    return [
        obj for obj in vars(cc).values() if isinstance(obj, type) and issubclass(obj, cc.Backend)
    ]


def build(dist: Any) -> AliasTable:
    """Keep the names of :data:`API_OPS`, :data:`BACKEND_OPS` and :data:`CPP_HELPERS` that the
    installed torch has.

    Args:
        dist: the ``torch.distributed`` module.
    """
    pg = dist.ProcessGroup
    api = tuple((n, op) for n, op in API_OPS.items() if callable(getattr(dist, n, None)))
    backend = tuple((n, op) for n, op in BACKEND_OPS.items() if n in pg.__dict__)
    helpers = tuple((n, op) for n, op in CPP_HELPERS.items() if callable(getattr(dist, n, None)))
    classes = tuple(
        (cls, tuple((n, op) for n, op in BACKEND_OPS.items() if n in cls.__dict__))
        for cls in backend_classes(dist)
    )
    return AliasTable(api, backend, helpers, tuple((c, m) for c, m in classes if m))


def unclassified(dist: Any) -> tuple[list[str], list[str]]:
    """Names in the installed torch that are neither hooked nor excluded.

    Public (no leading underscore) functions of ``torch.distributed`` defined in its
    ``distributed_c10d`` module, and public methods of ``ProcessGroup``, plus every private
    name that looks like a collective (``_all*``, ``_reduce*``, ``_broadcast*``).

    Returns:
        (api names, backend names), each sorted.
    """

    def looks_collective(name: str) -> bool:
        return name.startswith(("_all", "_reduce", "_broadcast", "_scatter", "_gather"))

    api: list[str] = []
    for name in dir(dist):
        if name.startswith("_") and not looks_collective(name):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated names warn on access (reduce_op)
            obj = getattr(dist, name)
            if not inspect.isfunction(obj) and not callable(obj):
                continue
            module = getattr(obj, "__module__", "")
            if module != "torch.distributed.distributed_c10d" and not (
                module == "torch._C._distributed_c10d" and looks_collective(name)
            ):
                continue
            if inspect.isclass(obj):
                continue
        if (
            name not in API_OPS
            and name not in API_EXCLUDED
            and name not in CPP_HELPERS
            and (name not in LIFECYCLE)
        ):
            api.append(name)
    backend: list[str] = []
    for name, obj in vars(dist.ProcessGroup).items():
        if name.startswith("_") and not looks_collective(name):
            continue
        if not callable(obj) or isinstance(obj, type) or name.isupper():
            continue
        if name not in BACKEND_OPS and name not in BACKEND_EXCLUDED:
            backend.append(name)
    for cls in backend_classes(dist):
        for name, obj in vars(cls).items():
            if name.startswith("__") or not callable(obj) or isinstance(obj, type):
                continue
            if name.isupper() or name in BACKEND_OPS or name in BACKEND_EXCLUDED:
                continue
            if name in BACKEND_CLASS_EXCLUDED or not looks_like_op(name):
                continue
            backend.append(f"{cls.__name__}.{name}")
    return sorted(api), sorted(set(backend))


#: Words in a backend class method's name that make it a possible collective.
_OP_WORDS = (
    "all",
    "reduce",
    "broadcast",
    "scatter",
    "gather",
    "send",
    "recv",
    "barrier",
    "coalesced",
    "alltoall",
)


def looks_like_op(name: str) -> bool:
    """A backend class method whose name suggests communication (``allreduce``, ``send``)."""
    return any(w in name.lower() for w in _OP_WORDS)


def unclassified_ops(torch: Any) -> list[str]:
    """Dispatcher ops (``ns::name``) in a c10d namespace of the installed torch that are
    neither in :data:`FUNCTIONAL_OPS` nor in :data:`FUNCTIONAL_EXCLUDED`: a collective op a
    future torch adds fails a test until it is classified.

    The namespaces are every one whose name contains ``c10d`` plus ``_dtensor``.
    """
    out = []
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, rest = full.partition("::")
        if "c10d" not in ns and ns != "_dtensor":
            continue
        name = rest.split(".")[0]
        if name in FUNCTIONAL_OPS.get(ns, {}) or f"{ns}::{name}" in FUNCTIONAL_EXCLUDED:
            continue
        if ns in FUNCTIONAL_EXCLUDED_NAMESPACES:
            continue
        out.append(f"{ns}::{name}")
    return sorted(set(out))
