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

A value assigned to a hooked API name after ``install`` goes under a fresh API hook at once
(:mod:`wsprof.capture.outermost`), so a framework's late wrapper is timed between layers too.

This module holds the hooks and their install/uninstall; who wrapped the collectives is found by
:mod:`wsprof.capture.wrappers` (the wrapper audit), what a hooked call costs is measured by
:mod:`wsprof.capture.calibration`.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any

from wsprof.capture import aliases, buffer
from wsprof.capture import settings as cfg
from wsprof.capture.audit import seq_of
from wsprof.capture.markers import STATE
from wsprof.capture.recorder import Recorder
from wsprof.capture.settings import LAYERS
from wsprof.capture.sites import SiteTable
from wsprof.contracts import ops
from wsprof.contracts.events import EventKind, Patched, WrapperFound
from wsprof.trace import ring as fmt

_now = time.monotonic_ns
_get_ident = threading.get_ident
_getframe = sys._getframe

#: Hook ids of this process -> (op, api, layer), and back. Ids are stable across sessions, so
#: that a hook a name captured in one ``patch()`` session (``from torch.distributed import
#: broadcast``) records correctly in the next one; each session's recorder is told them all.
_HOOK_NAMES: list[tuple[str, str, str]] = []
_HOOK_IDS: dict[tuple[str, str, str], int] = {}


def _hook_word(op: str, api: str, layer: str) -> int:
    """Word 1 of a call record for the hook (op, api, layer): kind and hook id."""
    key = (op, api, layer)
    i = _HOOK_IDS.get(key)
    if i is None:
        i = _HOOK_IDS[key] = len(_HOOK_NAMES)
        _HOOK_NAMES.append(key)
    rec = _STATE.recorder
    if rec is not None:
        rec.register_hook(i, op, api, layer)
    return fmt.CALL | (i << 8)


def _put_nothing(*words: int) -> bool:
    return False


class _Local(threading.local):
    call: list[Any] | None = None  # the open API call of this thread


#: The compiled recording path where built and the environment allows it at import
#: (``WSPROF_NATIVE``, :func:`wsprof.capture.buffer.native_module`), or None: pure Python, with
#: its own open-call slot (so ``WSPROF_NATIVE=0`` tests the fallback of a machine without the
#: extension). A session's hooks are compiled only on a compiled ring (``install``).
_NATIVE: Any = buffer.native_module(cfg.read())
#: The open-call slot of each thread: the compiled hooks' own where they exist, so that the
#: Python hooks (rare paths) and the compiled ones see the same open call.
_TLS: Any = _NATIVE.Tls() if _NATIVE is not None else _Local()

# Open-call record layout (a list, for speed): [backend_ns, n_backend, inside_backend, pg]
_BACKEND_NS, _N_BACKEND, _INSIDE, _PG = 0, 1, 2, 3

#: Most async work handles awaited at once; beyond it the oldest is forgotten (counted).
MAX_PENDING_ASYNC = 65_536


class _Installed:
    """What :func:`install` changed, so that :func:`uninstall` can put it back, and the caches
    the hooks share (all keyed so that a hook does one dict lookup per field)."""

    def __init__(self) -> None:
        self.active = False
        #: The hooks of this session are compiled ones (:data:`_NATIVE`; not with device time).
        self.native = False
        self.recorder: Recorder | None = None
        #: ``put`` of the recorder's ring (:mod:`wsprof.capture.buffer`): where hooks write
        self.put: Any = _put_nothing
        #: One per process, reset by each install (hooks of every session share it).
        self.sites: SiteTable = SiteTable()
        # (owner, attribute name, original value as stored on the owner, our wrapper)
        self.patches: list[tuple[Any, str, Any, Any]] = []
        self.tensor_type: Any = None
        self.work_type: Any = None
        self.dtype_ids: dict[Any, int] = {}  # torch.dtype -> string id
        self.group_ids: dict[int, tuple[Any, int]] = {}  # id(pg) -> (weakref to pg, string id)
        self.phase_ids: dict[str, int] = {}
        # async work handle -> (t_start_ns, thread) of the call that returned it
        self.pending: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()
        self.pending_order: deque[Any] = deque()
        self.device: Any = None  # DeviceTimer when CUDA device time is on
        self.rewraps: set[tuple[str, str, int]] = set()  # re-wraps already recorded
        self.group_classes: set[type] = set()  # ProcessGroup classes seen
        self.parameter_type: Any = None
        self.group_name_ids: dict[str, int] = {}  # group name -> string id (functional ops)
        #: c10d's per-group list of ops deferred inside a ``_coalescing_manager`` block: an
        #: API call made while it is non-empty issued nothing (the block's backend call
        #: will); None with ``layers='api'``, where that backend call is not seen.
        self.coalescing: dict[Any, Any] | None = None


_STATE = _Installed()


def _intern_dtype(dt: Any) -> int:
    rec = _STATE.recorder
    i = rec.strings.intern(str(dt).replace("torch.", "")) if rec is not None else -1
    _STATE.dtype_ids[dt] = i
    return i


def _payload_slow(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> tuple[int, int]:
    """Bytes and dtype id of the first tensor (or tensor list) among the first two arguments
    after ``self`` (a method of a communicator) and then the keyword values; (-1, -1) if none.
    """
    tensor_type = _STATE.tensor_type
    cands = list(args[:3])
    if kwargs:
        cands += list(kwargs.values())[:2]
    for a in cands:
        if isinstance(a, tensor_type):
            dt = _STATE.dtype_ids.get(a.dtype)
            return _nbytes(a), _intern_dtype(a.dtype) if dt is None else dt
        if isinstance(a, (list, tuple)) and a:
            first = a[0]
            if isinstance(first, tensor_type):
                dt = _STATE.dtype_ids.get(first.dtype)
                sizes = [_nbytes(t) for t in a if isinstance(t, tensor_type)]
                nbytes = -1 if -1 in sizes else sum(sizes)
                return nbytes, _intern_dtype(first.dtype) if dt is None else dt
    return -1, -1


def _nbytes(t: Any) -> int:
    """Payload bytes of a tensor; -1 when it has no plain storage size (sparse, nested)."""
    try:
        return int(t.nbytes)
    except Exception:  # noqa: BLE001 - unknown bytes is a value, not an error
        return -1


def _group_id(pg: Any) -> int:
    """String id of the process group's name; -1 for none or a group without a name."""
    if pg is None:
        return -1
    e = _STATE.group_ids.get(id(pg))
    if e is not None and e[0]() is pg:
        return int(e[1])
    try:
        name: str | None = str(pg.group_name)
    except Exception:  # noqa: BLE001 - a backend object, or a group without a name
        name = _owner_group_name(pg)
    rec = _STATE.recorder
    i = rec.strings.intern(name) if rec is not None else -1
    if rec is not None:
        cls = type(pg)
        if cls not in _STATE.group_classes:
            from wsprof.capture import wrappers

            _STATE.group_classes.add(cls)
            wrappers.audit_group_class(rec, cls)
        if _STATE.device is not None:
            _STATE.device.watch_group(pg)
    with contextlib.suppress(TypeError):  # no weak references: looked up every time
        _STATE.group_ids[id(pg)] = (weakref.ref(pg), i)
    return i


def _owner_group_name(backend: Any) -> str | None:
    """The name of the process group a backend object (``pg._get_backend(device)``) belongs
    to, found among the live groups; None if none owns it. Looked up once per object."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    torch = sys.modules.get("torch")
    if c10d is None or torch is None:
        return None
    try:
        for pg in list(c10d._world.pg_map):
            for dev in ("cpu", "cuda"):
                with contextlib.suppress(Exception):
                    if pg._get_backend(torch.device(dev)) is backend:
                        return str(pg.group_name)
    except Exception:  # noqa: BLE001 - no world
        return None
    return None


def _phase_id(ident: int) -> int:
    """String id of the innermost phase of the calling context, else of the main thread's
    (:func:`wsprof.capture.markers.current_phase`, inlined: per call); -1 if none. Runs on the
    calling thread: ``ident`` is that thread's id (the phase is the context's, not the thread's).
    """
    stack = STATE.phase_var.get(()) or STATE.main_stack
    if not stack:
        return -1
    name = stack[-1]
    i = _STATE.phase_ids.get(name)
    if i is None:
        rec = _STATE.recorder
        i = _STATE.phase_ids[name] = rec.strings.intern(name) if rec is not None else -1
    return i


def _async_flag(ret: Any, t0: int, ident: int) -> int:
    """1 if ``ret`` is an async work handle (or a list of them, from ``batch_isend_irecv``),
    remembered so that its completion can be joined to the call; else 0.

    ``dist.recv`` returns the sender's rank, so a non-None result alone is not a handle.
    """
    work = _STATE.work_type
    if work is None:
        return 0
    handles = ret if isinstance(ret, list) else [ret]
    if not handles or not all(isinstance(h, work) for h in handles):
        return 0
    pending, order = _STATE.pending, _STATE.pending_order
    for h in handles:
        try:
            pending[h] = (t0, ident)
            order.append(weakref.ref(h))
        except TypeError:
            continue
    while len(order) > MAX_PENDING_ASYNC:
        old = order.popleft()()
        if old is not None and pending.pop(old, None) is not None and _STATE.recorder:
            _STATE.recorder.forgotten_async += 1
    return 1


def _completed(work: Any) -> None:
    """``work`` finished (wait returned, or is_completed() said so): record when."""
    try:
        key = _STATE.pending.pop(work, None)
    except TypeError:  # not weak-referenceable: never registered
        return
    rec = _STATE.recorder
    if key is not None and rec is not None:
        rec.updates.append((key[0], key[1], _now(), -1))


def _device_start(device: Any) -> Any:
    try:
        return device.start()
    except Exception as e:  # noqa: BLE001 - never raise into training
        if _STATE.recorder is not None:
            _STATE.recorder.internal_error("device_time", e)
        return None


def _device_end(device: Any, ev: Any, t0: int) -> None:
    try:
        device.end(ev, t0, _get_ident())
    except Exception as e:  # noqa: BLE001 - never raise into training
        if _STATE.recorder is not None:
            _STATE.recorder.internal_error("device_time", e)


def _record_slow(
    rec: Recorder | None,
    hook: int,
    t0: int,
    t1: int,
    c: list[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    ret: Any,
    error: BaseException | None,
    depth: int,
) -> None:
    """The general recording path: errors, and rows of the backend layer.

    ``rec`` is unused (the current session's recorder is); ``hook`` is the hook's record word
    (:func:`_hook_word`)."""
    rec = _STATE.recorder
    if rec is None:
        return
    try:
        ident = _get_ident()
        nbytes, dt = _payload_slow(args, kwargs)
        site = _STATE.sites.site_of(_getframe(depth))
        err = rec.strings.intern(type(error).__name__) if error is not None else -1
        asy = _async_flag(ret, t0, ident) if ret is not None else 0
        _STATE.put(
            hook,
            t0,
            t1,
            c[_BACKEND_NS],
            c[_N_BACKEND],
            ident,
            nbytes,
            dt,
            _group_id(c[_PG]),
            asy,
            site,
            STATE.step,
            _phase_id(ident),
            err,
        )
    except Exception as e:  # noqa: BLE001 - never raise into training
        rec.internal_error("record", e)


def _api_wrapper(orig: Callable[..., Any], op: str, api: str, layer: str = "api") -> Any:
    """The API-layer hook for ``orig``: times the call, records one row when it returns."""
    inst = _STATE
    tls = _TLS
    if inst.recorder is None:
        raise RuntimeError("wsprof hooks are created by install()")
    hook = _hook_word(op, api, layer)
    if inst.native:
        return _native_api_wrapper(orig, hook)
    sites = inst.sites
    fast_sites = sites.fast
    site_of = sites.site_of
    tensor_type = inst.tensor_type
    dtype_ids = inst.dtype_ids
    group_ids = inst.group_ids
    markers = STATE
    # [code, f_lasti, site id] of this hook's last caller; cleared by each install (site ids
    # are per trace)
    last_site: list[Any] = sites.new_last()

    @functools.wraps(orig)
    def wsprof_api_hook(*args: Any, **kwargs: Any) -> Any:
        if tls.call is not None or not inst.active:
            return orig(*args, **kwargs)
        c: list[Any] = [0, 0, False, None]
        tls.call = c
        device = inst.device
        ev = _device_start(device) if device is not None else None
        t0 = _now()
        try:
            ret = orig(*args, **kwargs)
        except BaseException as e:
            t1 = _now()
            tls.call = None
            _record_slow(None, hook, t0, t1, c, args, kwargs, None, e, 2)
            raise
        t1 = _now()
        tls.call = None
        if ev is not None:
            _device_end(device, ev, t0)
        # The fast recording path: plain-tensor first argument, known caller site and group.
        try:
            if inst.coalescing and c[1] == 0:
                return ret  # deferred into a coalescing block: its backend call is recorded
            ident = _get_ident()
            a: Any = args[0] if args else None
            if type(a) is tensor_type:
                try:
                    nbytes = a.nbytes
                except Exception:  # noqa: BLE001 - sparse: unknown bytes, still a call
                    nbytes = -1
                dt = dtype_ids.get(a.dtype)
                if dt is None:
                    dt = _intern_dtype(a.dtype)
            else:
                nbytes, dt = _payload_slow(args, kwargs)
            f = _getframe(1)
            code = f.f_code
            lasti = f.f_lasti
            # Most calls come from the call site of the previous one: compare identities
            # first (hashing a code object costs more than the rest of this lookup).
            if code is last_site[0] and lasti == last_site[1]:
                site = last_site[2]
            else:
                cached = fast_sites.get((code, lasti))
                site = site_of(f) if cached is None else cached
                last_site[0], last_site[1], last_site[2] = code, lasti, site
            pg = c[3]
            if pg is None:
                grp = -1
            else:
                g = group_ids.get(id(pg))
                grp = g[1] if g is not None and g[0]() is pg else _group_id(pg)
            inst.put(
                hook,
                t0,
                t1,
                c[0],
                c[1],
                ident,
                nbytes,
                dt,
                grp,
                0 if ret is None else _async_flag(ret, t0, ident),
                site,
                markers.step,
                _phase_id(ident),
                -1,
            )
        except Exception as e:  # noqa: BLE001 - never raise into training
            if inst.recorder is not None:
                inst.recorder.internal_error("record", e)
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

    Raises:
        RuntimeError: called before :func:`install`.
    """
    return _api_wrapper(orig, op, api, "extra")


#: Hook code objects renamed after the method they replace (:func:`_named_like`).
_RENAMED_CODES: set[CodeType] = set()


def _named_like(fn: Any, method: str) -> Any:
    """Give a class-level hook's code the name of the method it replaces.

    pybind11's trampolines (the C++ side of a Python subclass of ``ProcessGroup``, ``Backend``
    or ``Work``) look the method up on the instance's type and treat any Python function
    found there as an override, which a hook on the base class would be: the hook calls the
    pybind method, the trampoline calls the hook again, and a ``RuntimeError`` becomes a
    ``RecursionError``. pybind11 recognises a base call from within an override by the calling
    frame's code name (the method's name, with ``self`` as its first argument) and then runs
    the C++ base method, which is exactly what runs without wsprof.
    """
    code = fn.__code__.replace(co_name=method)
    _RENAMED_CODES.add(code)
    fn.__code__ = code
    return fn


def _backend_wrapper(
    orig: Callable[..., Any],
    op: str,
    api: str,
    method: str | None = None,
    counted: bool = False,
    classify: Callable[[type], bool] | None = None,
) -> Any:
    """The backend-layer hook for a ``ProcessGroup`` (or ``Backend``) method: adds its time to
    the open API call, or records a row of its own (layer 'backend') when no API call is open.

    Args:
        orig: the method as looked up on the class.
        op: canonical op; api: the name recorded (``ProcessGroup.allreduce``).
        method: the attribute name it replaces (see :func:`_named_like`).
        counted: the method issues a number of collectives known only to c10d
            (``monitored_barrier``): read the group's count before and after.
        classify: which classes' instances the compiled hook takes (default
            :func:`_native_class`).
    """
    inst = _STATE
    tls = _TLS
    if inst.recorder is None:
        raise RuntimeError("wsprof hooks are created by install()")
    hook = _hook_word(op, api, "backend")

    @functools.wraps(orig)
    def wsprof_backend_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        c = tls.call
        if c is None:
            if not inst.active:
                return orig(self, *args, **kwargs)
            # No open API call: something called the backend directly, through a reference
            # taken before patch(), or re-wrapped the API name after patch(). Time it as a
            # backend-layer call of its own.
            c = [0, 1, True, self]
            tls.call = c
            s0 = seq_of(self) if counted else -1
            t0 = _now()
            try:
                ret = orig(self, *args, **kwargs)
            except BaseException as e:
                t1 = _now()
                tls.call = None
                c[_BACKEND_NS] = t1 - t0
                c[_N_BACKEND] = 0  # raised: counted as issuing nothing (the audit's side)
                _record_slow(None, hook, t0, t1, c, args, kwargs, None, e, 2)
                raise
            t1 = _now()
            tls.call = None
            c[_BACKEND_NS] = t1 - t0
            if s0 >= 0:
                c[_N_BACKEND] = max(seq_of(self) - s0, 1)
            _record_slow(None, hook, t0, t1, c, args, kwargs, ret, None, 2)
            return ret
        if c[2]:
            return orig(self, *args, **kwargs)
        c[2] = True
        c[3] = self
        s0 = seq_of(self) if counted else -1
        t0 = _now()
        try:
            return orig(self, *args, **kwargs)
        finally:
            c[0] += _now() - t0
            c[1] += max(seq_of(self) - s0, 1) if s0 >= 0 else 1
            c[2] = False

    py_hook = _named_like(wsprof_backend_hook, method) if method else wsprof_backend_hook
    if inst.native and not counted:
        # The compiled hook takes the common case (an open API call, a C++ group); the
        # Python one above every other.
        return functools.update_wrapper(
            _NATIVE.MethodHook(orig, py_hook, classify or _native_class, False), orig
        )
    return py_hook


def _native_class(cls: type) -> bool:
    """Instances of ``cls`` go through the compiled method hooks: a class pybind11 registered
    (torch's own C++ classes, whatever ``__module__`` torch gives them), known by the pybind11
    ``__init__`` in its own dict. A Python subclass (its ``__init__`` is a Python function, or
    inherited) goes through the Python hook, whose code name pybind11's trampoline recognises
    (:func:`_named_like`): a compiled hook there would be taken for an override and recurse."""
    init = cls.__dict__.get("__init__")
    return init is not None and type(init).__name__ == "instancemethod"


def _native_api_wrapper(orig: Callable[..., Any], hook: int) -> Any:
    """The API-layer hook with its work in C (:data:`_NATIVE`): a Python function still, so
    that ``torch.compile`` finds it in its remap table (:func:`_compiler_remaps`) and callers
    see a function."""
    core = _NATIVE.ApiCore(orig, hook)

    @functools.wraps(orig)
    def wsprof_api_hook(*args: Any, **kwargs: Any) -> Any:
        return core(args, kwargs)

    return wsprof_api_hook


def _helper_wrapper(orig: Callable[..., Any], op: str, api: str) -> Any:
    """The hook for a C++ helper that issues collectives from C++ on the group it is passed
    first (``dist._broadcast_coalesced``): one API-layer row whose ``n_backend`` is the number
    of collectives c10d counted during the call, all of its time backend time."""
    inst = _STATE
    tls = _TLS
    if inst.recorder is None:
        raise RuntimeError("wsprof hooks are created by install()")
    hook = _hook_word(op, api, "api")

    @functools.wraps(orig)
    def wsprof_helper_hook(*args: Any, **kwargs: Any) -> Any:
        if tls.call is not None or not inst.active:
            return orig(*args, **kwargs)
        pg = args[0] if args else kwargs.get("process_group")
        c: list[Any] = [0, 0, True, pg]
        tls.call = c
        s0 = seq_of(pg)
        t0 = _now()
        error: BaseException | None = None
        ret: Any = None
        try:
            ret = orig(*args, **kwargs)
        except BaseException as e:
            error = e
            raise
        finally:
            t1 = _now()
            tls.call = None
            c[_BACKEND_NS] = t1 - t0
            c[_N_BACKEND] = max(seq_of(pg) - s0, 0) if s0 >= 0 else 1
            _record_slow(None, hook, t0, t1, c, args[1:], kwargs, ret, error, 2)
        return ret

    return wsprof_helper_hook


def _lifecycle_wrapper(orig: Callable[..., Any]) -> Any:
    """``destroy_process_group``: read c10d's counts of the groups before they go away."""
    inst = _STATE

    @functools.wraps(orig)
    def wsprof_lifecycle_hook(*args: Any, **kwargs: Any) -> Any:
        if inst.active and inst.recorder is not None:
            from wsprof.capture import audit

            inst.recorder.remember_identity()  # rank and world size, while the group is up
            group = args[0] if args else kwargs.get("group")
            audit.read(inst.recorder, "flush")
            audit.mark_destroyed(inst.recorder, group)
        return orig(*args, **kwargs)

    return wsprof_lifecycle_hook


def _wait_wrapper(orig: Callable[..., Any], classify: Callable[[type], bool] | None = None) -> Any:
    """``Work.wait``: backend time of the open call; else the completion of an async call."""
    tls = _TLS
    inst = _STATE

    @functools.wraps(orig)
    def wsprof_wait_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        c = tls.call
        if c is None:
            ret = orig(self, *args, **kwargs)
            if inst.active:
                try:
                    _completed(self)
                except Exception as e:  # noqa: BLE001 - never raise into training
                    if inst.recorder is not None:
                        inst.recorder.internal_error("wait", e)
            return ret
        if c[2]:
            return orig(self, *args, **kwargs)
        # A synchronous collective waits on its work handle inside the API function: that wait
        # is backend time, not wrapper time.
        c[2] = True
        t0 = _now()
        try:
            return orig(self, *args, **kwargs)
        finally:
            c[0] += _now() - t0
            c[2] = False

    py_hook = _named_like(wsprof_wait_hook, "wait")
    if inst.native:
        return functools.update_wrapper(
            _NATIVE.MethodHook(orig, py_hook, classify or _native_class, True), orig
        )
    return py_hook


def _is_completed_wrapper(orig: Callable[..., Any]) -> Any:
    """``Work.is_completed``: the first True observed completes an async call."""
    inst = _STATE

    @functools.wraps(orig)
    def wsprof_is_completed_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        ret = orig(self, *args, **kwargs)
        if ret is True and inst.active and inst.pending:
            try:
                _completed(self)
            except Exception as e:  # noqa: BLE001 - never raise into training
                if inst.recorder is not None:
                    inst.recorder.internal_error("is_completed", e)
        return ret

    return _named_like(wsprof_is_completed_hook, "is_completed")


class _CoalescingCall:
    """Wraps the context manager ``_coalescing_manager`` returns: the block is one logical call
    (op ``coalesced``), the collectives issued inside it are attributed to it."""

    def __init__(self, inner: Any, hook: int) -> None:
        self._inner = inner
        self._hook = hook
        self._c: list[Any] = [0, 0, False, None]
        self._t0 = 0
        self._cm: Any = None

    def __enter__(self) -> Any:
        _TLS.call = self._c
        self._t0 = _now()
        try:
            self._cm = self._inner.__enter__()
        except BaseException:
            _TLS.call = None
            raise
        return self._cm

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        error: BaseException | None = exc
        try:
            return bool(self._inner.__exit__(exc_type, exc, tb))
        except BaseException as e:
            error = e
            raise
        finally:
            t1 = _now()
            _TLS.call = None
            works = getattr(self._cm, "works", None) or None
            _record_slow(None, self._hook, self._t0, t1, self._c, (), None, works, error, 2)


def _coalescing_wrapper(orig: Callable[..., Any], api: str) -> Any:
    inst = _STATE
    if inst.recorder is None:
        raise RuntimeError("wsprof hooks are created by install()")
    hook = _hook_word("coalesced", api, "api")

    @functools.wraps(orig)
    def wsprof_coalescing_hook(*args: Any, **kwargs: Any) -> Any:
        cm = orig(*args, **kwargs)
        if _TLS.call is not None or not inst.active:
            return cm
        return _CoalescingCall(cm, hook)

    return wsprof_coalescing_hook


def _inner_code(factory: Callable[..., Any], name: str) -> CodeType:
    """The code object of the hook function a factory defines (without calling it)."""
    for const in factory.__code__.co_consts:
        if isinstance(const, CodeType) and const.co_name == name:
            return const
    raise LookupError(name)


_HOOK_CODES = frozenset(
    {
        _inner_code(_api_wrapper, "wsprof_api_hook"),
        _inner_code(_native_api_wrapper, "wsprof_api_hook"),
        _inner_code(_backend_wrapper, "wsprof_backend_hook"),
        _inner_code(_wait_wrapper, "wsprof_wait_hook"),
        _inner_code(_is_completed_wrapper, "wsprof_is_completed_hook"),
        _inner_code(_coalescing_wrapper, "wsprof_coalescing_hook"),
        _inner_code(_helper_wrapper, "wsprof_helper_hook"),
        _inner_code(_lifecycle_wrapper, "wsprof_lifecycle_hook"),
    }
)


def is_hook(obj: Any) -> bool:
    """True if ``obj`` is one of wsprof's wrappers.

    Decided by code object, not by an attribute: ``functools.wraps`` copies attributes onto a
    framework's wrapper of our hook, and that wrapper must not pass for ours.
    """
    if _NATIVE is not None and isinstance(obj, (_NATIVE.MethodHook, _NATIVE.OpHook)):
        return True
    code = getattr(obj, "__code__", None)
    return code in _HOOK_CODES or code in _RENAMED_CODES


def install(recorder: Recorder, layers: str = "both", device_time: bool = False) -> None:
    """Wrap every collective name of the installed torch. Installing twice is a no-op.

    Args:
        recorder: receives call rows and sites.
        layers: ``both`` (default; time between layers known; calls through references
            taken before ``patch()`` still seen) or ``api`` (names only: cheapest, no backend
            time).
        device_time: also time each API-layer call on the device with CUDA events, and
            register the NCCL completion hook on each process group
            (:mod:`wsprof.capture.device`); ignored, with an event, without CUDA.

    Raises:
        ValueError: an unknown ``layers``.
    """
    if layers not in LAYERS:
        raise ValueError(f"layers must be one of {', '.join(LAYERS)}, not {layers!r}")
    if _STATE.active:
        return
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from wsprof.capture import wrappers

    _STATE.tensor_type = torch.Tensor
    _STATE.parameter_type = torch.nn.Parameter
    # String ids are per trace: every cache of them is emptied in place (hooks of earlier
    # sessions hold these very objects).
    _STATE.group_name_ids.clear()
    _STATE.work_type = getattr(dist, "Work", None)
    try:
        _STATE.coalescing = c10d._world.pg_coalesce_state if layers == "both" else None
    except AttributeError:  # a torch without coalescing state
        _STATE.coalescing = None
    _STATE.dtype_ids.clear()
    _STATE.group_ids.clear()
    _STATE.phase_ids.clear()
    _STATE.pending = weakref.WeakKeyDictionary()
    _STATE.pending_order = deque()
    table = aliases.build(dist)
    _STATE.recorder = recorder
    _STATE.put = recorder.ring.put
    _STATE.native = (
        _NATIVE is not None and not device_time and getattr(recorder.ring, "native", False)
    )
    for i, (op_name, api_name, layer_name) in enumerate(_HOOK_NAMES):
        recorder.register_hook(i, op_name, api_name, layer_name)  # hooks of earlier sessions
    sites = _STATE.sites
    sites.reset(recorder.sites)
    if _STATE.native:
        _configure_native(recorder)
    _STATE.device = None
    if device_time:
        from wsprof.capture.device import DeviceTimer

        try:
            _STATE.device = DeviceTimer(recorder)
            recorder.on_flush.append(_STATE.device.resolve)
        except Exception as e:  # noqa: BLE001 - no CUDA: record it, go on without
            recorder.event(EventKind.DEVICE_TIME, f"off: {e}")
    patches: list[tuple[Any, str, Any, Any]] = []
    wrapper_codes: set[CodeType] = set()
    if layers in ("both", "api"):
        # One hook per distinct function: where ``dist.X is distributed_c10d.X`` (the usual
        # case) both names get the same hook object, so identity checks inside torch (``P2POp``
        # compares ``op`` with ``isend``/``irecv``; the coalescing manager compares ops with
        # ``all_reduce``) still hold.
        hooks_by_id: dict[int, Any] = {}
        for module, prefix in ((dist, "dist."), (c10d, "distributed_c10d.")):
            for name, op in table.api:
                current = module.__dict__.get(name)
                if current is None or is_hook(current):
                    continue
                fact = wrappers.foreign_wrapper(current, torch.__file__)
                if fact is not None:
                    recorder.event(EventKind.WRAPPER, WrapperFound.of(prefix + name, fact).encode())
                    wrapper_codes |= wrappers.wrapper_codes(current)
                hook = hooks_by_id.get(id(current))
                if hook is None:
                    hook = hooks_by_id[id(current)] = _api_wrapper(current, op, prefix + name)
                patches.append((module, name, current, hook))
            current = module.__dict__.get(ops.COALESCING)
            if current is not None:
                hook = hooks_by_id.get(id(current))
                if hook is None:
                    hook = hooks_by_id[id(current)] = _coalescing_wrapper(
                        current, "distributed_c10d." + ops.COALESCING
                    )
                patches.append((module, ops.COALESCING, current, hook))
            extra_names: list[tuple[str, Callable[[Callable[..., Any]], Any]]] = [
                (n, functools.partial(_helper_wrapper, op=op, api="dist." + n))
                for n, op in table.helpers
            ]
            extra_names += [(n, _lifecycle_wrapper) for n in ops.LIFECYCLE]
            for name, factory in extra_names:
                current = module.__dict__.get(name)
                if current is None or is_hook(current):
                    continue
                hook = hooks_by_id.get(id(current))
                if hook is None:
                    hook = hooks_by_id[id(current)] = factory(current)
                patches.append((module, name, current, hook))
        try:
            from wsprof.capture import functional

            patches.extend(functional.patches(torch))
        except Exception as e:  # noqa: BLE001 - the other layers still record
            recorder.internal_error("functional", e)
    if layers == "both":
        pg_cls = dist.ProcessGroup
        for name, op in table.backend:
            descriptor = pg_cls.__dict__[name]
            bound_get = getattr(pg_cls, name)
            patches.append(
                (
                    pg_cls,
                    name,
                    descriptor,
                    _backend_wrapper(
                        bound_get, op, "ProcessGroup." + name, name, name in ops.COUNTED
                    ),
                )
            )
        for cls, methods in table.backend_classes:
            for name, op in methods:
                patches.append(
                    (
                        cls,
                        name,
                        cls.__dict__[name],
                        _backend_wrapper(
                            getattr(cls, name),
                            op,
                            f"{cls.__name__}.{name}",
                            name,
                            name in ops.COUNTED,
                        ),
                    )
                )
        work_cls = _STATE.work_type
        if work_cls is not None:
            for name, factory in (("wait", _wait_wrapper), ("is_completed", _is_completed_wrapper)):
                if name in work_cls.__dict__:
                    patches.append(
                        (work_cls, name, work_cls.__dict__[name], factory(getattr(work_cls, name)))
                    )
    if wrapper_codes:
        sites.mark_internal(wrapper_codes)
    try:
        from wsprof.capture.calibration import calibrate

        recorder.hook_ns_per_call = calibrate(recorder, layers)
    except Exception as e:  # noqa: BLE001 - an estimate only
        recorder.internal_error("calibrate", e)
    from wsprof.capture import audit

    audit.read(recorder, "patch")  # the baseline: what each existing group issued before patch()
    for owner, name, _orig, hook in patches:
        setattr(owner, name, hook)
    _STATE.patches = patches
    _compiler_remaps(patches)
    _STATE.active = True
    if layers in ("both", "api"):
        from wsprof.capture import outermost

        # From now on a value assigned to a hooked API name goes under a hook of its own.
        for module, prefix in ((dist, "dist."), (c10d, "distributed_c10d.")):
            outermost.guard(module, prefix, dict(table.api))
    recorder.on_flush.append(_reaudit)
    recorder.event(
        EventKind.PATCHED,
        Patched(
            layers=layers,
            api_names=len(table.api),
            backend_methods=len(table.backend),
            backend_class_methods=sum(len(m) for _, m in table.backend_classes),
            functional_ops=sum(1 for p in patches if p[1] == "_op"),
        ).encode(),
    )


def _configure_native(recorder: Recorder) -> None:
    """Hand the compiled hooks the caches, fallbacks and ring of this session."""
    from wsprof.capture import functional

    def internal_error(where: str, exc: BaseException) -> None:
        rec = _STATE.recorder
        if rec is not None:
            rec.internal_error(where, exc)

    _NATIVE.configure(
        tensor_type=_STATE.tensor_type,
        parameter_type=_STATE.parameter_type,
        dtype_ids=_STATE.dtype_ids,
        group_ids=_STATE.group_ids,
        group_name_ids=_STATE.group_name_ids,
        fast_sites=_STATE.sites.fast,
        phase_ids=_STATE.phase_ids,
        markers=STATE,
        phase_var=STATE.phase_var,
        coalescing=_STATE.coalescing,
        pending_by_id=functional._PENDING.by_id,
        record_slow=_record_slow,
        intern_dtype=_intern_dtype,
        site_of=_STATE.sites.site_of,
        group_id=_group_id,
        async_flag=_async_flag,
        payload_slow=_payload_slow,
        phase_id=_phase_id,
        internal_error=internal_error,
        completed=_completed,
        register_outputs=functional._register_outputs,
        intern_group=functional.intern_group,
        max_async=MAX_PENDING_ASYNC,
    )
    _NATIVE.set_ring(recorder.ring)


def _compiler_remaps(patches: list[tuple[Any, str, Any, Any]]) -> None:
    """Let ``torch.compile`` trace a hooked name as the collective it replaces.

    Dynamo rewrites ``dist.all_reduce`` and the other names in
    ``_functional_collectives.traceable_collective_remaps`` into functional collectives in the
    graph (recorded at run time by :mod:`wsprof.capture.functional`); a hook it does not find
    there is inlined instead, breaks the graph and runs the collective eagerly. Each hook gets
    the entry of its original, removed again by :func:`uninstall`.
    """
    # Never imported here: importing it registers Python autograd kernels that make every
    # later functional collective slower. Imported after patch(), it takes our hooks as its
    # "legacy" names itself (see uninstall).
    funcol = sys.modules.get("torch.distributed._functional_collectives")
    remaps = getattr(funcol, "traceable_collective_remaps", None)
    if not isinstance(remaps, dict):
        return
    for _owner, _name, orig, hook in patches:
        try:
            target = remaps.get(orig)
        except TypeError:  # unhashable
            continue
        if target is not None and hook not in remaps:
            remaps[hook] = target


def _restore_remaps() -> None:
    """Take our hooks out of torch.compile's remap table; where the table was built after
    ``patch()`` (holding a hook as the name it rewrites), map the original instead."""
    funcol = sys.modules.get("torch.distributed._functional_collectives")
    remaps = getattr(funcol, "traceable_collective_remaps", None)
    if isinstance(remaps, dict):
        for _owner, _name, orig, hook in _STATE.patches:
            try:
                target = remaps.pop(hook, None)
                if target is not None and orig not in remaps:
                    remaps[orig] = target
            except TypeError:  # unhashable
                continue


def _reaudit() -> None:
    """Called by the writer thread at each flush: name who re-wrapped a collective after
    ``patch()`` (:func:`wsprof.capture.wrappers.reaudit`)."""
    rec = _STATE.recorder
    if rec is None or not _STATE.active:
        return
    from wsprof.capture import wrappers
    from wsprof.capture.outermost import hook_now

    patches = [(o, n, orig, hook_now(o, n, hook)) for o, n, orig, hook in _STATE.patches]
    wrappers.reaudit(rec, patches, _STATE.rewraps, _STATE.sites.mark_internal)


def uninstall() -> None:
    """Put every original back; a name assigned after ``install`` gets what was assigned to
    it last (not the hook around it). Where something replaced one of our hooks without going
    through the module's ``__setattr__`` (a class attribute, ``module.__dict__``), the hook is
    left in place (removing it would remove the other wrapper too) but goes inert."""
    try:
        _reaudit()  # a re-wrap since the last flush is named too
    except Exception as e:  # noqa: BLE001 - never raise into training
        if _STATE.recorder is not None:
            _STATE.recorder.internal_error("reaudit", e)
    _STATE.active = False
    from wsprof.capture import outermost

    assigned = outermost.unguard()
    for owner, name, orig, hook in reversed(_STATE.patches):
        current = (owner.__dict__ if isinstance(owner, type) else vars(owner)).get(name)
        user = assigned.get((id(owner), name))
        if user is not None and current is user[1]:
            # Assigned after patch(): the user's value goes back, not the hook around it.
            setattr(owner, name, user[0])
            if _STATE.recorder is not None:
                _STATE.recorder.event(
                    EventKind.REWRAPPED, f"{getattr(owner, '__name__', owner)}.{name}"
                )
        elif current is hook:
            setattr(owner, name, orig)
        elif _STATE.recorder is not None:
            _STATE.recorder.event(
                EventKind.REWRAPPED, f"{getattr(owner, '__name__', owner)}.{name}"
            )
    rec = _STATE.recorder
    if rec is not None:
        device = _STATE.device
        rec.on_flush[:] = [
            f
            for f in rec.on_flush
            if f is not _reaudit and getattr(f, "__self__", None) is not device
        ]
        if _STATE.device is not None:
            _STATE.device.resolve()
    _restore_remaps()
    _STATE.patches = []
    _STATE.recorder = None
    _STATE.put = _put_nothing
    if _NATIVE is not None:
        _NATIVE.set_ring(None)
    _STATE.native = False
    _STATE.sites.reset(None)
    _STATE.rewraps = set()
    _STATE.group_classes = set()
    _STATE.device = None


def installed() -> bool:
    """True while hooks are installed."""
    return _STATE.active
