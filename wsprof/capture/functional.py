"""Hooks at the dispatcher's Python door: ``torch.ops._c10d_functional`` and friends.

Functional collectives (``torch.distributed._functional_collectives``), DTensor
redistribution (``full_tensor()``, ``redistribute``), FSDP2's full-weight and state-dict
gathers and ``torch.compile``d graphs all issue collectives as dispatcher ops
(``torch.ops._c10d_functional.all_gather_into_tensor`` ...) that reach the C++
``ProcessGroup`` without touching any ``torch.distributed`` name or ``ProcessGroup`` method.
Every Python caller of such an op goes through ``OpOverloadPacket.__call__`` or
``OpOverload.__call__``, which call the object's ``_op`` attribute; wrapping ``_op`` of each
packet and overload catches eager funcol, DTensor and FSDP2 calls and the ops a compiled graph
(aot_eager, inductor's Python wrapper) runs, in one layer, at one Python call per op.

A functional collective returns at once; its completion is the ``wait_tensor`` of its output
(``AsyncCollectiveTensor.wait()``, first use of the result, or the graph's own wait), joined to
the call as an async completion. Ops called on fake or functional tensors (tracing, the
compiler's shape propagation) issue nothing and are not recorded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from wsprof.capture import collectives as col
from wsprof.capture.markers import STATE as MARKERS
from wsprof.contracts import ops

#: ``OpOverload`` objects (and packets) whose ``_op`` is hooked: (owner, "_op", orig, hook).
Patch = tuple[Any, str, Any, Any]


class _Pending:
    """Outputs of functional collectives awaiting ``wait_tensor``: ``id(tensor)`` ->
    (t_start_ns, thread) of the call that made it, oldest first, bounded like async work
    handles (:data:`~wsprof.capture.collectives.MAX_PENDING_ASYNC`; the oldest is forgotten
    and counted). Keyed by id, not by the tensor (a tensor's ``==`` is elementwise) and
    without a weak reference (it cost more than the rest of the hook): an id reused by a
    later output is overwritten by that output's own entry, and only outputs are waited."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[int, int]] = {}

    def add(self, t: Any, t0: int, ident: int) -> None:
        by_id = self.by_id
        by_id[id(t)] = (t0, ident)
        if len(by_id) > col.MAX_PENDING_ASYNC:
            del by_id[next(iter(by_id))]
            if col._STATE.recorder is not None:
                col._STATE.recorder.forgotten_async += 1


_PENDING = _Pending()


def _register_outputs(ret: Any, t0: int, ident: int) -> int:
    """Remember the output tensor(s) of a functional collective (or the async work handle of a
    ``c10d`` op's ``(tensors, work)`` result); 1 when something awaits completion, else 0."""
    tensor = col._STATE.tensor_type
    if isinstance(ret, tensor):
        _PENDING.add(ret, t0, ident)
        return 1
    if isinstance(ret, list) and ret and isinstance(ret[0], tensor):
        for t in ret:
            _PENDING.add(t, t0, ident)
        return 1
    if isinstance(ret, tuple) and ret:
        return col._async_flag(ret[-1], t0, ident)
    return 0


def intern_group(name: Any) -> int:
    """String id of a process group's name (cached in ``group_name_ids``); -1 when not
    recording."""
    rec = col._STATE.recorder
    if rec is None:
        return -1
    i = col._STATE.group_name_ids[name] = rec.strings.intern(str(name))
    return i


def _tensor_arg(args: tuple[Any, ...]) -> Any:
    """The first argument that is a tensor or a non-empty list of tensors; None if none."""
    tensor = col._STATE.tensor_type
    for a in args:
        if isinstance(a, tensor) or (isinstance(a, list) and a and isinstance(a[0], tensor)):
            return a
    return None


def op_wrapper(orig: Callable[..., Any], op: str, api: str) -> Any:
    """The hook that replaces an op's ``_op``: times the issue, records one row (layer
    ``functional``), remembers the output for its ``wait_tensor``.

    Only calls on real tensors are recorded: the first argument (or the first tensor of a
    list argument) must be exactly ``torch.Tensor`` or ``torch.nn.Parameter``; a fake or
    functional tensor means a compiler is tracing, and nothing is issued.

    Raises:
        RuntimeError: called before :func:`~wsprof.capture.collectives.install`.
    """
    inst = col._STATE
    tls = col._TLS
    sites = inst.sites
    if inst.recorder is None:
        raise RuntimeError("wsprof hooks are created by install()")
    hook = col._hook_word(op, api, "functional")
    plain = (inst.tensor_type, inst.parameter_type)
    markers = MARKERS
    group_ids: dict[str, int] = inst.group_name_ids
    now = col._now
    getframe = col._getframe
    get_ident = col._get_ident
    tensor_type = inst.tensor_type
    dtype_ids = inst.dtype_ids
    fast_sites = sites.fast
    site_of = sites.site_of
    pending = _PENDING.by_id
    max_async = col.MAX_PENDING_ASYNC
    #: batch_p2p_ops issues one point-to-point op per entry of its first argument
    p2p = op == "batch_p2p"

    @functools.wraps(orig)
    def wsprof_op_hook(*args: Any, **kwargs: Any) -> Any:
        if tls.call is not None or not inst.active or not args:
            return orig(*args, **kwargs)
        a = args[0]
        first = a[0] if type(a) is list and a else a
        if type(first) not in plain:
            a = _tensor_arg(args)  # not first (batch_p2p_ops), or a fake/functional tensor
            first = a[0] if type(a) is list and a else a
            if type(first) not in plain:
                return orig(*args, **kwargs)
        c: list[Any] = [0, 1, True, None]
        tls.call = c
        t0 = now()
        try:
            ret = orig(*args, **kwargs)
        except BaseException as e:
            t1 = now()
            tls.call = None
            c[0], c[1] = t1 - t0, 0  # raised: counted as issuing nothing (the audit's side)
            col._record_slow(None, hook, t0, t1, c, args, kwargs, None, e, 2)
            raise
        t1 = now()
        tls.call = None
        try:
            ident = get_ident()
            if type(a) is tensor_type:
                try:
                    nbytes = a.nbytes
                except Exception:  # noqa: BLE001 - sparse: unknown bytes, still a call
                    nbytes = -1
                dt = dtype_ids.get(a.dtype)
                if dt is None:
                    dt = col._intern_dtype(a.dtype)
            else:
                nbytes, dt = col._payload_slow((a,), None)  # a list, or sparse
            g = kwargs.get("group_name") if kwargs else None
            if g is None and type(args[-1]) is str:
                g = args[-1]
            if g is None:
                grp = -1
            else:
                grp = group_ids.get(g, -2)
                if grp == -2:
                    rec = inst.recorder
                    grp = group_ids[g] = rec.strings.intern(str(g)) if rec else -1
            # The caller is OpOverload(Packet).__call__ (torch): start above it, and look
            # the site up by that frame when it is the user's (one dict lookup).
            try:
                f = getframe(2)
            except ValueError:  # called from the bottom of the stack
                f = getframe(1)
            site = fast_sites.get((f.f_code, f.f_lasti))
            if site is None:
                site = site_of(f)
            if type(ret) is tensor_type:
                pending[id(ret)] = (t0, ident)
                if len(pending) > max_async:
                    _PENDING.add(ret, t0, ident)  # trims the oldest, counted
                asy = 1
            else:
                asy = _register_outputs(ret, t0, ident)
            inst.put(
                hook,
                t0,
                t1,
                t1 - t0,
                len(args[0]) if p2p else 1,
                ident,
                nbytes,
                dt,
                grp,
                asy,
                site,
                markers.step,
                col._phase_id(ident),
                -1,
            )
        except Exception as e:  # noqa: BLE001 - never raise into training
            if inst.recorder is not None:
                inst.recorder.internal_error("record", e)
        return ret

    if inst.native:
        return functools.update_wrapper(
            col._NATIVE.OpHook(orig, wsprof_op_hook, hook, p2p, False), orig
        )
    return wsprof_op_hook


def wait_wrapper(orig: Callable[..., Any]) -> Any:
    """The hook on ``wait_tensor``'s ``_op``: the completion of the call that made its input."""
    inst = col._STATE
    pending = _PENDING.by_id
    now = col._now

    @functools.wraps(orig)
    def wsprof_wait_tensor_hook(*args: Any, **kwargs: Any) -> Any:
        ret = orig(*args, **kwargs)
        if pending and args and inst.active:
            try:
                e = pending.pop(id(args[0]), None)
                rec = inst.recorder
                if e is not None and rec is not None:
                    rec.updates.append((e[0], e[1], now(), -1))
            except Exception as err:  # noqa: BLE001 - never raise into training
                if inst.recorder is not None:
                    inst.recorder.internal_error("wait_tensor", err)
        return ret

    if inst.native:
        return functools.update_wrapper(
            col._NATIVE.OpHook(orig, wsprof_wait_tensor_hook, 0, False, True), orig
        )
    return wsprof_wait_tensor_hook


HOOK_CODES = frozenset(
    {
        col._inner_code(op_wrapper, "wsprof_op_hook"),
        col._inner_code(wait_wrapper, "wsprof_wait_tensor_hook"),
    }
)


def _ops_of(torch: Any, namespace: str) -> list[str]:
    """Names of the ops registered in ``namespace`` (``ns::name``, without overloads)."""
    names = set()
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, rest = full.partition("::")
        if ns == namespace:
            names.add(rest.split(".")[0])
    return sorted(names)


def patches(torch: Any) -> list[Patch]:
    """``(owner, '_op', original, hook)`` for every hooked op of
    :data:`~wsprof.contracts.ops.FUNCTIONAL_OPS`: each packet and each of its overloads."""
    _PENDING.by_id.clear()
    out: list[Patch] = []
    for namespace, table in ops.FUNCTIONAL_OPS.items():
        present = set(_ops_of(torch, namespace))
        ns = getattr(torch.ops, namespace)
        for name, op in table.items():
            if name not in present:
                continue
            packet = getattr(ns, name)
            api = f"{namespace}.{name}"
            owners = [packet] + [getattr(packet, o) for o in packet.overloads()]
            for owner in owners:
                orig = owner.__dict__.get("_op")
                if (
                    orig is None
                    or getattr(orig, "__code__", None) in HOOK_CODES
                    or col.is_hook(orig)
                ):
                    continue
                hook = wait_wrapper(orig) if op == ops.COMPLETION else op_wrapper(orig, op, api)
                out.append((owner, "_op", orig, hook))
    return out
