"""Hooks stay outermost: a value assigned to a hooked name after ``patch()`` goes under a hook.

A framework that wraps ``torch.distributed.broadcast`` after ``patch()`` (slime's free-memory
probe, installed in an actor's init, after ``wsprof run`` patched at torch import) would
otherwise sit outside wsprof's API hook, and its time in no recorded call. While hooks are
installed, each module of the alias table (``torch.distributed``, ``distributed_c10d``) has its
class swapped for a subclass (:func:`guard`) whose ``__setattr__`` takes an assignment to a
hooked API name and stores a fresh API hook around the assigned value instead. The wrapper
usually calls the value it read before (wsprof's previous hook): a nested API hook on the same
thread passes straight through (:mod:`wsprof.capture.collectives`), so each call is one record
whose time between layers includes the wrapper, as if the wrapper had been there before
``patch()``. The assignment is a ``wrapper`` event (``after_patch``) at once, not at the next
flush.

:func:`unguard` puts the module classes back; ``uninstall`` then puts on each name what the
user assigned last (their wrapper, not the hook around it). An assignment after ``unpatch()``
is left alone. Out of scope: ``ProcessGroup`` methods replaced on the class (a pybind11 type);
the backend hook is then outside the replacement and its inner call is still recorded by the
hook it calls, as a backend row or inside the open API call.
"""

from __future__ import annotations

import types
from typing import Any

from wsprof.capture import collectives
from wsprof.contracts.events import EventKind, WrapperFound

#: Guard classes made for module classes other than ``ModuleType`` (a module someone already
#: gave a class of its own), by that class.
_SUBCLASSES: dict[type, type] = {}


class _Guard:
    """One guarded module: its previous class, its prefix in recorded names, and its hooked API
    names with their canonical op."""

    def __init__(self, module: types.ModuleType, prefix: str, ops: dict[str, str]) -> None:
        self.module = module
        self.prefix = prefix
        self.ops = ops
        self.prev_class: type = type(module)
        #: name -> (the value the user assigned last, the hook now on the name)
        self.assigned: dict[str, tuple[Any, Any]] = {}


#: id(module) -> its guard, while hooks are installed.
_GUARDS: dict[int, _Guard] = {}
#: id(assigned value) -> (value, its hook): one hook per value, so that a wrapper assigned to
#: both ``dist.X`` and ``distributed_c10d.X`` keeps the two names identical.
_ADOPTED: dict[int, tuple[Any, Any]] = {}


def _guarded_setattr(self: types.ModuleType, name: str, value: Any) -> None:
    g = _GUARDS.get(id(self))
    if g is not None and name in g.ops:
        try:
            value = _adopt(g, name, value)
        except Exception as e:  # noqa: BLE001 - never raise into the assignment
            rec = collectives._STATE.recorder
            if rec is not None:
                rec.internal_error("guard", e)
    types.ModuleType.__setattr__(self, name, value)


class _Guarded(types.ModuleType):
    """A module whose hooked collective names stay under wsprof's API hook."""

    __setattr__ = _guarded_setattr


def _guard_class(cls: type) -> type:
    if cls is types.ModuleType:
        return _Guarded
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        sub = _SUBCLASSES[cls] = type(cls.__name__, (cls,), {"__setattr__": _guarded_setattr})
    return sub


def _adopt(g: _Guard, name: str, value: Any) -> Any:
    """What to store on ``g.module.name`` for an assignment of ``value``: a hook around it."""
    st = collectives._STATE
    if not st.active or st.recorder is None:
        return value
    orig, hook = _installed(g.module, name)
    if hook is not None and (value is orig or value is hook):  # the genuine one put back
        g.assigned.pop(name, None)
        return hook
    for a in list(_ADOPTED.values()):
        if a[1] is value:  # the hook of a wrapper assigned to another name
            g.assigned[name] = a
            return value
    if collectives.is_hook(value):  # another hook of ours: already outermost
        g.assigned[name] = (value, value)
        return value
    adopted = _ADOPTED.get(id(value))
    if adopted is None or adopted[0] is not value:
        adopted = (value, collectives._api_wrapper(value, g.ops[name], g.prefix + name))
        _ADOPTED[id(value)] = adopted
    _audit(g, name, value)
    g.assigned[name] = adopted
    return adopted[1]


def _installed(module: Any, name: str) -> tuple[Any, Any]:
    """(original, hook) that ``install`` put on ``module.name``; (None, None) if none."""
    for owner, n, orig, hook in collectives._STATE.patches:
        if owner is module and n == name:
            return orig, hook
    return None, None


def _audit(g: _Guard, name: str, value: Any) -> None:
    """Name the wrapper now: a ``wrapper`` event with ``after_patch``; its code is internal
    in the site table (a call's site is the wrapper's caller)."""
    import torch

    from wsprof.capture import wrappers

    st = collectives._STATE
    rec = st.recorder
    if rec is None:
        return
    fact = wrappers.foreign_wrapper(value, torch.__file__)
    key = (g.module.__name__, name, id(value))
    if fact is None or key in st.rewraps:
        return
    st.rewraps.add(key)
    rec.event(EventKind.WRAPPER, WrapperFound.of(g.prefix + name, fact, after_patch=True).encode())
    st.sites.mark_internal(wrappers.wrapper_codes(value))


def guard(module: types.ModuleType, prefix: str, ops: dict[str, str]) -> None:
    """Swap ``module``'s class for one whose assignments to ``ops``'s names are adopted."""
    if id(module) in _GUARDS:
        return
    g = _Guard(module, prefix, ops)
    module.__class__ = _guard_class(g.prev_class)
    _GUARDS[id(module)] = g


def hook_now(owner: Any, name: str, hook: Any) -> Any:
    """The hook on ``owner.name`` now: the one around the user's last assignment, else
    ``hook`` (what ``install`` put there)."""
    g = _GUARDS.get(id(owner))
    if g is not None:
        a = g.assigned.get(name)
        if a is not None:
            return a[1]
    return hook


def unguard() -> dict[tuple[int, str], tuple[Any, Any]]:
    """Put every guarded module's class back.

    Returns:
        ``(id(module), name) -> (value the user assigned last, the hook around it)``, for
        ``uninstall`` to put the user's value back where the name still holds that hook.
    """
    out: dict[tuple[int, str], tuple[Any, Any]] = {}
    for key, g in list(_GUARDS.items()):
        if type(g.module) is _guard_class(g.prev_class):
            g.module.__class__ = g.prev_class
        for name, a in g.assigned.items():
            out[(key, name)] = a
        del _GUARDS[key]
    _ADOPTED.clear()
    return out
