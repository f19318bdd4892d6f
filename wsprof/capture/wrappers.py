"""The wrapper audit: who wrapped the collectives, found and recorded at ``patch()`` and at
each flush.

A framework's wrapper around a collective (a free-memory probe, a retry, a timer) is where the
time between the name called and the backend goes. At install, every name whose current value
is a wrapper defined outside torch and wsprof is a ``wrapper`` event (its qualname, module,
file, line and what it wraps); a ``ProcessGroup`` subclass defined outside torch is one the
first time a call goes through it; and at each flush a name that no longer holds wsprof's hook
(re-wrapped after ``patch()``) is one with ``after_patch``. Wrapper code is marked internal in
the caller-site table, so that a call's site is the caller of the wrapper, not the wrapper.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable, Iterable
from types import CodeType
from typing import TYPE_CHECKING, Any

from wsprof.capture import collectives
from wsprof.contracts.events import EventKind, WrapperFound

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

#: The standard library's folder (a wrapper there is Python's, not a framework's).
STDLIB = sysconfig.get_paths()["stdlib"]
#: Most ``__wrapped__`` links followed from a name, and most names listed in ``wraps``.
MAX_DEPTH, MAX_CHAIN = 16, 8


def library_file(filename: str, torch_dir: str) -> bool:
    """torch itself, the standard library, or typing_extensions (torch's ``@deprecated``)."""
    in_stdlib = filename.startswith(STDLIB + os.sep) and not any(
        part in filename for part in ("site-packages", "dist-packages")
    )
    return (
        filename.startswith(torch_dir + os.sep)
        or in_stdlib
        or os.path.basename(filename) == "typing_extensions.py"
    )


def foreign_wrapper(obj: Any, torch_file: str) -> dict[str, Any] | None:
    """Describe the outermost wrapper of ``obj`` defined outside torch and wsprof, else None.

    Walks the ``__wrapped__`` chain from the outside in, skipping torch's own decorators
    (including ``@deprecated``, whose code lives in typing_extensions).

    Args:
        obj: the value a collective's name holds.
        torch_file: ``torch.__file__`` (torch's folder is its parent).

    Returns:
        ``{"qualname", "module", "file", "line", "wraps"}``: who wrapped the collective and where
        (from ``__code__``: ``functools.wraps`` copies the wrapped function's names, the code
        object keeps the wrapper's own), and the chain of what it wraps, outermost first.
    """
    torch_dir = os.path.dirname(torch_file)
    depth = 0
    while obj is not None and not collectives.is_hook(obj) and depth < MAX_DEPTH:
        code = getattr(obj, "__code__", None)
        if code is None:
            return None
        if not library_file(code.co_filename, torch_dir):
            chain: list[str] = []
            inner = getattr(obj, "__wrapped__", None)
            while inner is not None and len(chain) < MAX_CHAIN:
                chain.append(
                    f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', '?')}"
                )
                inner = getattr(inner, "__wrapped__", None)
            return {
                "qualname": getattr(code, "co_qualname", code.co_name),
                "module": obj.__globals__.get("__name__") if hasattr(obj, "__globals__") else None,
                "file": code.co_filename,
                "line": code.co_firstlineno,
                "wraps": chain,
            }
        obj = getattr(obj, "__wrapped__", None)
        depth += 1
    return None


def wrapper_codes(obj: Any) -> set[CodeType]:
    """Code objects along a foreign wrapper's ``__wrapped__`` chain (ours excluded)."""
    codes: set[CodeType] = set()
    depth = 0
    while obj is not None and not collectives.is_hook(obj) and depth < MAX_DEPTH:
        code = getattr(obj, "__code__", None)
        if isinstance(code, CodeType):
            codes.add(code)
        obj = getattr(obj, "__wrapped__", None)
        depth += 1
    return codes


def audit_group_class(rec: Recorder, cls: type) -> None:
    """Record a ``ProcessGroup`` subclass defined outside torch (a framework's reloadable or
    instrumented group) as a ``wrapper`` event of kind ``group_class``.

    Args:
        rec: receives the event.
        cls: the class of a group a call went through (seen for the first time).
    """
    module = getattr(cls, "__module__", "") or ""
    if module.startswith("torch"):
        return
    import inspect

    try:
        file: str | None = inspect.getsourcefile(cls)
        line: int | None = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        file, line = None, None
    rec.event(
        EventKind.WRAPPER,
        WrapperFound(
            api="ProcessGroup",
            wrapper_kind="group_class",
            qualname=cls.__qualname__,
            module=module,
            file=file,
            line=line,
            wraps=tuple(f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__[1:3]),
        ).encode(),
    )


def reaudit(
    rec: Recorder,
    patches: Iterable[tuple[Any, str, Any, Any]],
    seen: set[tuple[str, str, int]],
    mark_internal: Callable[[set[CodeType]], None],
) -> None:
    """A collective name that no longer holds our hook was re-wrapped after ``patch()``:
    record who did it, once per new value (a ``wrapper`` event with ``after_patch``).

    Args:
        rec: receives the events.
        patches: ``(owner, name, original, hook)`` of every installed hook.
        seen: ``(module, name, id(value))`` of the re-wraps already recorded; updated.
        mark_internal: takes the wrapper's code objects (the site table's).
    """
    import torch

    for owner, name, _orig, hook in patches:
        if not isinstance(owner, type(sys)):
            continue
        current = owner.__dict__.get(name)
        if current is hook or current is None:
            continue
        key = (owner.__name__, name, id(current))
        if key in seen:
            continue
        seen.add(key)
        fact = foreign_wrapper(current, torch.__file__) or {"qualname": repr(current)}
        prefix = "dist." if owner.__name__ == "torch.distributed" else "distributed_c10d."
        rec.event(
            EventKind.WRAPPER, WrapperFound.of(prefix + name, fact, after_patch=True).encode()
        )
        mark_internal(wrapper_codes(current))
