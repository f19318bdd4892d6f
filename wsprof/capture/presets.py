"""Framework presets: mark the weight-sync and rollout phases of slime, verl, OpenRLHF, AReaL
and TRL by wrapping each framework's entry points in ``wsprof.phase(...)``.

``$WSPROF_PRESET`` (or :func:`install`'s ``preset``) names one framework; without it every
framework's entry points are waited for, and only the ones whose module the process imports get
wrapped (the framework is detected from the imported modules). Modules are never imported by
wsprof: an entry point whose module is not imported yet is wrapped right after its import
(:class:`~wsprof.capture.imports.PostImportFinder`). A missing module attribute is a
``preset_missing`` event in the trace, never an error.

The entry points are the registry's (:attr:`wsprof.frameworks.Framework.entry_points`,
``wsprof frameworks`` lists them), checked against the released sources by
``scripts/check_frameworks.py``. An entry point may have several paths, one per place releases
have kept it (OpenRLHF's ``SamplesGenerator.generate_samples`` moved from
``experience_maker.py`` to ``samples_generator.py``): the first one found is wrapped and the
others are then dropped; ``preset_missing`` is recorded once every path's module is imported
and none had the function.

A class that is a Ray actor (``@ray.remote class RolloutManager``, slime; OpenRLHF's
``PolicyModelActor``: the module attribute is Ray's ``ActorClass`` handle) is wrapped on the
class Ray instantiates in the actor, ``__ray_metadata__.modified_class`` (which holds its own
copy of every method); wrapping the handle itself would never run.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from wsprof import frameworks
from wsprof.capture.imports import PostImportFinder
from wsprof.capture.markers import STATE, phase
from wsprof.contracts.events import Event, EventKind, PresetMarked, PresetMissing
from wsprof.frameworks import EntryPoint, split_path

#: ``$WSPROF_PRESET`` values, with each framework's entry points.
PRESETS: dict[str, tuple[EntryPoint, ...]] = {
    fw.name: fw.entry_points for fw in frameworks.FRAMEWORKS
}
#: Attribute set on a wrapper (the phase it marks), so that wrapping twice is wrapping once.
MARK = "__wsprof_phase__"


class _Waiting:
    """One entry point being waited for: its paths not yet looked at, the ones missing."""

    def __init__(self, preset: str, entry: EntryPoint) -> None:
        self.preset = preset
        self.entry = entry
        self.left = set(entry.paths)
        self.missing: list[str] = []
        self.done = False


_lock = threading.RLock()
_pending: dict[str, list[tuple[_Waiting, str]]] = {}  # module -> (entry point, qualname)
_waiting: dict[tuple[str, int], _Waiting] = {}  # (preset, index) -> its state
_finder: PostImportFinder | None = None
#: Events met before ``wsprof.patch()`` started a recorder; recorded by :func:`flush_events`.
_early: list[tuple[EventKind, str]] = []
wrapped: list[str] = []
#: What :func:`_wrap` replaced, in order: ``(owner, attribute, what was there)``, for
#: :func:`uninstall`.
_replaced: list[tuple[Any, str, Any]] = []


def _event(ev: Event) -> None:
    kind, detail = EventKind(ev.kind), ev.encode()
    rec = STATE.recorder
    if rec is not None:
        rec.event(kind, detail)
    else:
        _early.append((kind, detail))


def flush_events() -> None:
    """Record the events met before a recorder existed (call after ``wsprof.patch()``)."""
    rec = STATE.recorder
    if rec is None:
        return
    while _early:
        rec.event(*_early.pop(0))


def phase_wrapper(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` inside ``wsprof.phase(name)``; a coroutine function stays one."""
    if inspect.iscoroutinefunction(fn):

        async def awrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(name):
                return await fn(*args, **kwargs)

        out: Callable[..., Any] = functools.update_wrapper(awrapper, fn)
    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(name):
                return fn(*args, **kwargs)

        out = functools.update_wrapper(wrapper, fn)
    setattr(out, MARK, name)
    return out


def _unwrap_actor(owner: Any) -> Any:
    """The class a Ray ``ActorClass`` handle makes actors of (``__ray_metadata__``'s
    ``modified_class``: the driver pickles it for the workers, a worker that loads code
    locally takes it from the module), else ``owner``."""
    if isinstance(owner, type):  # a plain class, not a handle (an instance of ActorClass)
        return owner
    actor_cls = getattr(getattr(owner, "__ray_metadata__", None), "modified_class", None)
    return actor_cls if isinstance(actor_cls, type) else owner


def _missing(w: _Waiting, path: str, why: str) -> None:
    w.left.discard(path)
    w.missing.append(f"{path} {why}")
    if w.left or w.done:
        return
    _event(
        PresetMissing(
            preset=w.preset,
            what=f"{', '.join(w.missing)}; the {w.entry.phase} phase "
            "is not marked (framework version?)",
        )
    )


def _wrap(w: _Waiting, module: types.ModuleType, qualname: str) -> None:
    path = f"{module.__name__}:{qualname}"
    if w.done:
        return
    owner: Any = module
    *parts, attr = qualname.split(".")
    try:
        for part in parts:
            owner = _unwrap_actor(getattr(owner, part))
        fn = inspect.getattr_static(owner, attr)
    except AttributeError:
        _missing(w, path, "not found")
        return
    name = w.entry.phase
    if isinstance(fn, (staticmethod, classmethod)):
        inner = fn.__func__
        if not getattr(inner, MARK, None):
            _replaced.append((owner, attr, fn))
            setattr(owner, attr, type(fn)(phase_wrapper(inner, name)))
    elif callable(fn):
        if not getattr(fn, MARK, None):
            _replaced.append((owner, attr, fn))
            setattr(owner, attr, phase_wrapper(fn, name))
    else:
        _missing(w, path, "is not callable")
        return
    w.done = True
    w.left.clear()
    if path not in wrapped:
        wrapped.append(path)
        _event(PresetMarked(preset=w.preset, phase=name, path=path))


def _loaded(name: str, module: types.ModuleType) -> None:
    with _lock:
        for w, qualname in _pending.pop(name, []):
            try:
                _wrap(w, module, qualname)
            except Exception as e:  # noqa: BLE001 - never raise into the importing code
                _missing(w, f"{name}:{qualname}", f"({type(e).__name__}: {e})")


def install(preset: str | None = None) -> list[str]:
    """Wrap the entry points of ``preset`` (every preset when None) now or when their module is
    imported. A preset name that is not known is a ``preset_missing`` event and a warning on
    stderr (``$WSPROF_PRESET`` itself is checked by :func:`wsprof.capture.settings.read`,
    which passes None for a bad one). Never raises.

    Returns:
        The entry points wrapped so far (``module:qualname``).
    """
    name = (preset or "").strip().lower()
    if name and name not in PRESETS:
        msg = (
            f"preset {preset!r} is not one of {', '.join(PRESETS)}; no phases are marked by "
            "a preset"
        )
        sys.stderr.write(f"wsprof: {msg}\n")
        _event(PresetMissing(what=msg))
        return list(wrapped)
    global _finder
    with _lock:
        for p in [name] if name else list(PRESETS):
            for i, entry in enumerate(PRESETS[p]):
                if (p, i) in _waiting:
                    continue  # installed before: wrapped, missing or still waited for
                w = _waiting[p, i] = _Waiting(p, entry)
                for path in entry.paths:
                    module, qualname = split_path(path)
                    if module in sys.modules:
                        _wrap(w, sys.modules[module], qualname)
                    elif not w.done:
                        _pending.setdefault(module, []).append((w, qualname))
        if _pending and _finder is None:
            _finder = PostImportFinder(lambda n: n in _pending, _loaded)
            sys.meta_path.insert(0, _finder)
    return list(wrapped)


def uninstall() -> list[str]:
    """Undo :func:`install`: every wrapped entry point gets back what was there (the same
    object), the import hook leaves ``sys.meta_path``, nothing is waited for. For ``wsprof
    attach --inject``, which must leave a process as it found it. Never raises.

    Returns:
        The entry points restored (``module:qualname``).
    """
    global _finder
    with _lock:
        restored = list(wrapped)
        for owner, attr, original in reversed(_replaced):
            with contextlib.suppress(Exception):  # a read-only owner keeps the wrapper
                setattr(owner, attr, original)
        _replaced.clear()
        if _finder is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(_finder)
            _finder = None
        _pending.clear()
        _waiting.clear()
        wrapped.clear()
        return restored
