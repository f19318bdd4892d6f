"""Collective hooks at two layers.

* API layer: whatever ``torch.distributed.X`` (and ``distributed_c10d.X``) is at patch time,
  which may already be a framework's wrapper, for every name in the alias table.
* Backend layer: ``ProcessGroup`` methods on the class, plus ``Work.wait``, so calls made
  through references captured before ``patch()`` are still seen.

A thread-local open-call record lets backend time be attributed to the API call that caused
it; ``between_layers_ns = api time - backend time`` is the time spent in wrappers between the
name called and the backend. Nested API calls (a collective implemented through another) are
counted once, by the outermost name.

A hook never changes arguments, results, exceptions or async work handles: the original is
called with exactly what the caller passed and its result (or exception) is passed back
untouched; recording errors are caught and counted by the recorder.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from typing import Any

from wsprof.capture import aliases
from wsprof.capture.markers import STATE
from wsprof.capture.recorder import Recorder
from wsprof.capture.sites import SiteTable

_now = time.monotonic_ns
_get_ident = threading.get_ident
_TLS = threading.local()

# Open-call record layout (a list, for speed): [backend_ns, n_backend, inside_backend, pg]
_BACKEND_NS, _N_BACKEND, _INSIDE, _PG = 0, 1, 2, 3


class _Installed:
    """What :func:`install` changed, so that :func:`uninstall` can put it back."""

    def __init__(self) -> None:
        self.active = False
        self.recorder: Recorder | None = None
        self.sites: SiteTable | None = None
        # (owner, attribute name, original value as stored on the owner, our wrapper)
        self.patches: list[tuple[Any, str, Any, Any]] = []
        self.dtype_names: dict[Any, str] = {}
        self.group_names: dict[int, str | None] = {}
        self.work_type: Any = None


_STATE = _Installed()


def _payload(
    args: tuple[Any, ...], tensor_type: Any, kwargs: dict[str, Any] | None = None
) -> tuple[int, str | None]:
    """Bytes and dtype of the first tensor (or tensor list) among the first two arguments
    (or, when called with keywords only, among the keyword values)."""
    cands = list(args[:2])
    if kwargs and not cands:
        cands = list(kwargs.values())[:2]
    for a in cands:
        if isinstance(a, tensor_type):
            dt = a.dtype
            name = _STATE.dtype_names.get(dt)
            if name is None:
                name = _STATE.dtype_names[dt] = str(dt).replace("torch.", "")
            return int(a.nbytes), name
        if isinstance(a, (list, tuple)) and a:
            first = a[0]
            if isinstance(first, tensor_type):
                dt = first.dtype
                name = _STATE.dtype_names.get(dt)
                if name is None:
                    name = _STATE.dtype_names[dt] = str(dt).replace("torch.", "")
                return sum(int(t.nbytes) for t in a if isinstance(t, tensor_type)), name
    return -1, None


def _group_name(pg: Any) -> str | None:
    if pg is None:
        return None
    key = id(pg)
    names = _STATE.group_names
    if key in names:
        return names[key]
    try:
        name: str | None = str(pg.group_name)
    except Exception:  # noqa: BLE001 - some groups have no name
        name = None
    names[key] = name
    return name


def _record(
    rec: Recorder,
    t0: int,
    t1: int,
    c: list[Any],
    op: str,
    api: str,
    layer: str,
    args: tuple[Any, ...],
    ret: Any,
    step: int,
    ident: int,
    phase: str | None,
    error: str | None,
    tensor_type: Any,
    kwargs: dict[str, Any] | None = None,
) -> None:
    try:
        if len(rec.calls) >= rec.max_pending:
            rec.dropped_calls += 1
            return
        nbytes, dtype = _payload(args, tensor_type, kwargs)
        sites = _STATE.sites
        site = sites.site_of(sys._getframe(2)) if sites is not None else -1
        rec.calls.append(
            (
                t0,
                t1,
                c[_BACKEND_NS],
                c[_N_BACKEND],
                ident,
                op,
                api,
                layer,
                nbytes,
                dtype,
                _group_name(c[_PG]),
                1 if _is_handle(ret) else 0,
                site,
                step,
                phase,
                error,
            )
        )
    except Exception as e:  # noqa: BLE001 - never raise into training
        rec.internal_error("record", e)


def _is_handle(ret: Any) -> bool:
    """An async work handle (or a list of them, from ``batch_isend_irecv``) was returned.

    ``dist.recv`` returns the sender's rank, so a non-None result alone is not a handle.
    """
    if ret is None:
        return False
    work = _STATE.work_type
    if work is None:
        return False
    if isinstance(ret, list):
        return bool(ret) and isinstance(ret[0], work)
    return isinstance(ret, work)


def _api_wrapper(
    orig: Callable[..., Any], op: str, api: str, tensor_type: Any, layer: str = "api"
) -> Any:
    inst = _STATE
    tls = _TLS

    @functools.wraps(orig)
    def wsprof_api_hook(*args: Any, **kwargs: Any) -> Any:
        rec = inst.recorder
        if rec is None or not inst.active or getattr(tls, "call", None) is not None:
            return orig(*args, **kwargs)
        c = [0, 0, False, None]
        tls.call = c
        step = STATE.step
        ident = _get_ident()
        phase = STATE.phase_of(ident)
        t0 = _now()
        try:
            ret = orig(*args, **kwargs)
        except BaseException as e:
            t1 = _now()
            tls.call = None
            _record(rec, t0, t1, c, op, api, layer, args, None, step, ident, phase,
                    type(e).__name__, tensor_type, kwargs)
            raise
        t1 = _now()
        tls.call = None
        _record(rec, t0, t1, c, op, api, layer, args, ret, step, ident, phase, None, tensor_type,
                kwargs)
        return ret

    return wsprof_api_hook


def extra_hook(orig: Callable[..., Any], op: str, api: str) -> Any:
    """A hook for a communicator outside ``torch.distributed`` (vLLM's ``PyNcclCommunicator``,
    ``ray.util.collective``, a user-named ``module:qualname``): timed and recorded like an API
    call, with layer ``'extra'``. Works for plain functions and for methods placed on a class
    (``self`` passes through ``*args``). Records only while :func:`install` is active.

    Args:
        orig: the function or method to wrap.
        op: canonical op (``broadcast``, ``all_reduce``, ...).
        api: the name recorded, e.g. ``PyNcclCommunicator.broadcast``.
    """
    import torch

    return _api_wrapper(orig, op, api, torch.Tensor, "extra")


def _backend_wrapper(orig: Callable[..., Any], op: str, api: str, tensor_type: Any) -> Any:
    inst = _STATE
    tls = _TLS

    @functools.wraps(orig)
    def wsprof_backend_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        c = getattr(tls, "call", None)
        if c is None:
            rec = inst.recorder
            if rec is None or not inst.active:
                return orig(self, *args, **kwargs)
            # No open API call: something called the backend directly or through a reference
            # taken before patch(). Time it as a backend-layer call of its own.
            c = [0, 1, True, self]
            tls.call = c
            step = STATE.step
            ident = _get_ident()
            phase = STATE.phase_of(ident)
            t0 = _now()
            try:
                ret = orig(self, *args, **kwargs)
            except BaseException as e:
                t1 = _now()
                tls.call = None
                c[_BACKEND_NS] = t1 - t0
                _record(rec, t0, t1, c, op, api, "backend", args, None, step, ident, phase,
                        type(e).__name__, tensor_type)
                raise
            t1 = _now()
            tls.call = None
            c[_BACKEND_NS] = t1 - t0
            _record(rec, t0, t1, c, op, api, "backend", args, ret, step, ident, phase, None,
                    tensor_type)
            return ret
        if c[_INSIDE]:
            return orig(self, *args, **kwargs)
        c[_INSIDE] = True
        c[_PG] = self
        t0 = _now()
        try:
            return orig(self, *args, **kwargs)
        finally:
            c[_BACKEND_NS] += _now() - t0
            c[_N_BACKEND] += 1
            c[_INSIDE] = False

    return wsprof_backend_hook


def _wait_wrapper(orig: Callable[..., Any]) -> Any:
    tls = _TLS

    @functools.wraps(orig)
    def wsprof_wait_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        c = getattr(tls, "call", None)
        if c is None or c[_INSIDE]:
            return orig(self, *args, **kwargs)
        # A synchronous collective waits on its work handle inside the API function: that wait
        # is backend time, not wrapper time.
        c[_INSIDE] = True
        t0 = _now()
        try:
            return orig(self, *args, **kwargs)
        finally:
            c[_BACKEND_NS] += _now() - t0
            c[_INSIDE] = False

    return wsprof_wait_hook


_STDLIB = sysconfig.get_paths()["stdlib"]


def _library_file(filename: str, torch_dir: str) -> bool:
    """torch itself, the standard library, or typing_extensions (torch's ``@deprecated``)."""
    return (
        filename.startswith(torch_dir)
        or filename.startswith(_STDLIB)
        or os.path.basename(filename) == "typing_extensions.py"
    )


_HOOK_CODES = frozenset(
    {
        _api_wrapper(print, "", "", object).__code__,
        _backend_wrapper(print, "", "", object).__code__,
        _wait_wrapper(print).__code__,
    }
)


def foreign_wrapper(obj: Any, torch_file: str) -> dict[str, Any] | None:
    """Describe the outermost wrapper of ``obj`` defined outside torch and wsprof, else None.

    Walks the ``__wrapped__`` chain from the outside in, skipping torch's own decorators
    (including ``@deprecated``, whose code lives in typing_extensions).

    Returns:
        ``{"qualname", "module", "file", "line", "wraps"}``: who wrapped the collective and where
        (from ``__code__``: ``functools.wraps`` copies the wrapped function's names, the code
        object keeps the wrapper's own), and the chain of what it wraps, outermost first.
    """
    torch_dir = os.path.dirname(torch_file)
    depth = 0
    while obj is not None and not is_hook(obj) and depth < 16:
        code = getattr(obj, "__code__", None)
        if code is None:
            return None
        if not _library_file(code.co_filename, torch_dir):
            chain: list[str] = []
            inner = getattr(obj, "__wrapped__", None)
            while inner is not None and len(chain) < 8:
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


def is_hook(obj: Any) -> bool:
    """True if ``obj`` is one of wsprof's wrappers.

    Decided by code object, not by an attribute: ``functools.wraps`` copies attributes onto a
    framework's wrapper of our hook, and that wrapper must not pass for ours.
    """
    return getattr(obj, "__code__", None) in _HOOK_CODES


def install(recorder: Recorder) -> None:
    """Wrap every collective name of the installed torch. Installing twice is a no-op.

    Args:
        recorder: receives call rows and sites.
    """
    if _STATE.active:
        return
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    tensor_type = torch.Tensor
    _STATE.work_type = getattr(dist, "Work", None)
    table = aliases.build(dist)
    _STATE.recorder = recorder
    _STATE.sites = SiteTable(recorder.sites)
    patches: list[tuple[Any, str, Any, Any]] = []
    # One hook per distinct function: where ``dist.X is distributed_c10d.X`` (the usual case) both
    # names get the same hook object, so identity checks inside torch (``P2POp`` compares
    # ``op`` with ``isend``/``irecv``) still hold.
    hooks_by_id: dict[int, Any] = {}
    for module, prefix in ((dist, "dist."), (c10d, "distributed_c10d.")):
        for name, op in table.api:
            current = module.__dict__.get(name)
            if current is None or is_hook(current):
                continue
            fact = foreign_wrapper(current, torch.__file__)
            if fact is not None:
                recorder.event("wrapper", json.dumps({"api": prefix + name, **fact}))
            hook = hooks_by_id.get(id(current))
            if hook is None:
                hook = hooks_by_id[id(current)] = _api_wrapper(current, op, prefix + name,
                                                               tensor_type)
            patches.append((module, name, current, hook))
    pg_cls = dist.ProcessGroup
    for name, op in table.backend:
        descriptor = pg_cls.__dict__[name]
        bound_get = getattr(pg_cls, name)
        hook = _backend_wrapper(bound_get, op, "ProcessGroup." + name, tensor_type)
        patches.append((pg_cls, name, descriptor, hook))
    work_cls = getattr(dist, "Work", None)
    if work_cls is not None and "wait" in work_cls.__dict__:
        patches.append((work_cls, "wait", work_cls.__dict__["wait"], _wait_wrapper(work_cls.wait)))
    for owner, name, _orig, hook in patches:
        setattr(owner, name, hook)
    _STATE.patches = patches
    _STATE.active = True
    recorder.event("patched", f"{len(table.api)} API names, {len(table.backend)} backend methods")


def uninstall() -> None:
    """Put every original back. Where something re-wrapped one of our hooks after us, the
    hook is left in place (removing it would remove the other wrapper too) but goes inert."""
    _STATE.active = False
    for owner, name, orig, hook in reversed(_STATE.patches):
        current = (owner.__dict__ if isinstance(owner, type) else vars(owner)).get(name)
        if current is hook:
            setattr(owner, name, orig)
        elif _STATE.recorder is not None:
            _STATE.recorder.event("rewrapped", f"{getattr(owner, '__name__', owner)}.{name}")
    _STATE.patches = []
    _STATE.recorder = None
    _STATE.sites = None


def installed() -> bool:
    """True while hooks are installed."""
    return _STATE.active
