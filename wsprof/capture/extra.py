"""Hooks on communicators that bypass ``torch.distributed``.

Several RL frameworks push weights through vLLM's or SGLang's ``PyNcclCommunicator`` (ctypes
or nccl4py calls straight into NCCL) or through ``ray.util.collective``; a patch of
``torch.distributed`` never sees those calls. Each is named by a target string::

    "module:qualname"        # op from the last name: PyNcclCommunicator.broadcast -> broadcast
    "module:qualname=op"     # op given: mymod:push_weights=broadcast

A target whose module is already imported is hooked at once; otherwise a ``sys.meta_path``
finder hooks it right after the module is first imported. A module that is in ``sys.modules``
but still initialising (``wsprof.patch()`` ran inside its import: ``ray.util.collective``
imports torch half-way through its own import, and the ``wsprof run`` bootstrap patches at the
end of torch's) is hooked the moment its import completes, when importlib clears its
``__spec__._initializing``; its names are not all defined yet, so hooking it earlier would
report them missing. Nothing here ever imports a target module (importing vLLM to patch it
would be a heavy side effect). Every hook is
:func:`wsprof.capture.collectives.extra_hook`, so calls are recorded with layer ``'extra'``.

A target that cannot be hooked (malformed string, missing attribute, not a function) is an
``extra_missing`` event in the trace, never an exception; each hooked target is an
``extra_hooked`` event. :func:`uninstall` puts every original back.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import threading
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wsprof.capture import collectives
from wsprof.capture.imports import PostImportFinder
from wsprof.contracts.events import EventKind

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_VLLM = "vllm.distributed.device_communicators.pynccl:PyNcclCommunicator."
_SGLANG = "sglang.srt.distributed.device_communicators.pynccl:PyNcclCommunicator."
_RAY = "ray.util.collective:"

#: Targets always hooked by ``wsprof.patch()`` (when their module gets imported).
#: Checked against vllm/distributed/device_communicators/pynccl.py (vllm-project/vllm),
#: python/sglang/srt/distributed/device_communicators/pynccl.py (sgl-project/sglang) and
#: python/ray/util/collective/{__init__,collective}.py (ray-project/ray). ``all_gatherv`` /
#: ``reduce_scatterv`` exist only in newer vLLM; SGLang passes ``sizes=`` to ``all_gather`` /
#: ``reduce_scatter`` instead. A method missing from the installed version is an
#: ``extra_missing`` event.
BUILTIN_TARGETS: tuple[str, ...] = (
    *(
        _VLLM + m
        for m in (
            "all_reduce",
            "all_gather",
            "all_gatherv",
            "reduce_scatter",
            "reduce_scatterv",
            "broadcast",
            "send",
            "recv",
        )
    ),
    *(
        _SGLANG + m
        for m in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv")
    ),
    *(
        _RAY + f
        for f in (
            "allreduce",
            "allreduce_multigpu",
            "barrier",
            "reduce",
            "reduce_multigpu",
            "broadcast",
            "broadcast_multigpu",
            "allgather",
            "allgather_multigpu",
            "reducescatter",
            "reducescatter_multigpu",
            "send",
            "send_multigpu",
            "recv",
            "recv_multigpu",
        )
    ),
)

#: Last name of a target (``_multigpu`` stripped) -> canonical op.
OP_NAMES: dict[str, str] = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "all_gatherv": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatterv": "reduce_scatter",
    "broadcast": "broadcast",
    "send": "send",
    "recv": "recv",
    "barrier": "barrier",
    "reduce": "reduce",
}

_MULTIGPU = "_multigpu"
_ABSENT = object()  # the attribute was inherited, not in the class's own __dict__


@dataclass(frozen=True)
class Target:
    """One parsed target string.

    Attributes:
        text: the target as given.
        module: dotted module name.
        qualname: dotted path inside the module (``Class.method`` or ``function``).
        op: canonical op recorded for each call.
    """

    text: str
    module: str
    qualname: str
    op: str


class TargetError(ValueError):
    """A target string that is not ``module:qualname`` or ``module:qualname=op``."""


def canonical_op(name: str) -> str:
    """Canonical op for the last name of a target.

    Args:
        name: e.g. ``allreduce_multigpu``, ``all_gatherv``, ``push``.

    Returns:
        The op from :data:`OP_NAMES` (after dropping a ``_multigpu`` suffix), else ``name``.
    """
    base = name[: -len(_MULTIGPU)] if name.endswith(_MULTIGPU) else name
    return OP_NAMES.get(base, name)


def _dotted(s: str) -> bool:
    return bool(s) and all(part.isidentifier() for part in s.split("."))


def parse_target(text: str) -> Target:
    """Parse ``module:qualname`` or ``module:qualname=op``.

    Args:
        text: the target string; surrounding blanks are ignored.

    Returns:
        The parsed target.

    Raises:
        TargetError: the string is malformed.
    """
    s = text.strip()
    spec, eq, op = s.partition("=")
    module, colon, qualname = spec.strip().partition(":")
    module, qualname, op = module.strip(), qualname.strip(), op.strip()
    if not colon or not _dotted(module) or not _dotted(qualname):
        raise TargetError(f"{text!r}: expected 'module:qualname' or 'module:qualname=op'")
    if eq and not op.isidentifier():
        raise TargetError(f"{text!r}: the op after '=' must be a name like 'broadcast'")
    return Target(s, module, qualname, op if eq else canonical_op(qualname.rsplit(".", 1)[-1]))


def targets_from(extra: Sequence[str] | None = None, env: Sequence[str] = ()) -> list[str]:
    """Every target ``wsprof.patch()`` hooks: built-ins, then ``$WSPROF_EXTRA``, then ``extra``.

    Args:
        extra: targets passed to ``wsprof.patch(extra=...)``.
        env: the targets of ``$WSPROF_EXTRA``, as the session read them
            (:attr:`wsprof.capture.settings.Settings.extra`); never read here.

    Returns:
        The targets, duplicates removed, in that order.
    """
    out: dict[str, None] = {}
    for t in (*BUILTIN_TARGETS, *env, *(extra or ())):
        out.setdefault(t.strip(), None)
    return list(out)


class _State:
    """What :func:`install` changed, so that :func:`uninstall` can put it back."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.recorder: Recorder | None = None
        self.finder: PostImportFinder | None = None
        #: module name -> targets waiting for that module's first import
        self.pending: dict[str, list[Target]] = {}
        #: module name -> spec of a module still initialising, watched for the end of its import
        self.watched: dict[str, importlib.machinery.ModuleSpec] = {}
        self.hooked: list[str] = []
        self.seen: set[str] = set()
        #: (owner, attribute name, original value in owner.__dict__ or _ABSENT, value we set)
        self.patches: list[tuple[Any, str, Any, Any]] = []


_STATE = _State()


def install(targets: Iterable[str], recorder: Recorder | None = None) -> list[str]:
    """Hook every target now (module imported) or right after its module is imported.

    A target of a module still initialising (this runs inside its import) is hooked when that
    import completes. Installing a target twice is the same as once; never raises for a bad
    target (it becomes an ``extra_missing`` event) and never imports a target's module.

    Args:
        targets: ``module:qualname`` or ``module:qualname=op`` strings.
        recorder: receives the events; default: the recorder of ``wsprof.patch()``.

    Returns:
        The targets hooked so far (targets still waiting for their module are not listed).
    """
    if recorder is None:
        from wsprof.capture.session import current_recorder

        recorder = current_recorder()
    with _STATE.lock:
        if recorder is not None:
            _STATE.recorder = recorder
        for text in (t.strip() for t in targets):
            if text in _STATE.seen:
                continue
            _STATE.seen.add(text)
            try:
                target = parse_target(text)
            except TargetError as e:
                _event(EventKind.EXTRA_MISSING, str(e))
                continue
            module = sys.modules.get(target.module)
            if module is not None and not (_initialising(module) and _watch(module)):
                _hook(target, module)
            else:  # not imported yet (the finder sees its import) or still initialising
                _STATE.pending.setdefault(target.module, []).append(target)
        if _STATE.pending and _STATE.finder is None:
            _STATE.finder = PostImportFinder(lambda name: name in _STATE.pending, _module_loaded)
            sys.meta_path.insert(0, _STATE.finder)
        return list(_STATE.hooked)


def uninstall() -> None:
    """Put every original back and remove the import finder.

    Where something replaced one of our hooks after us, that value is left alone (our hook
    stays inert underneath, as ``collectives.uninstall()`` has turned recording off).
    """
    with _STATE.lock:
        finder = _STATE.finder
        if finder is not None:
            while finder in sys.meta_path:
                sys.meta_path.remove(finder)
        for spec in _STATE.watched.values():
            _unwatch(spec)
        for owner, name, orig, ours in reversed(_STATE.patches):
            current = owner.__dict__.get(name, _ABSENT)
            if current is not ours:
                continue
            if orig is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)
        _STATE.finder = None
        _STATE.pending = {}
        _STATE.watched = {}
        _STATE.hooked = []
        _STATE.seen = set()
        _STATE.patches = []
        _STATE.recorder = None


def finder_installed() -> bool:
    """True while the post-import finder is on ``sys.meta_path``."""
    f = _STATE.finder
    return f is not None and f in sys.meta_path


def _event(kind: EventKind, detail: str) -> None:
    rec = _STATE.recorder
    if rec is not None:
        rec.event(kind, detail)


def _hook(target: Target, module: types.ModuleType) -> None:
    """Hook one target of an imported module; failures become ``extra_missing`` events."""
    parts = target.qualname.split(".")
    owner: Any = module
    for part in parts[:-1]:
        # A module's own __dict__, never its __getattr__ (lazy-import hooks would import things).
        if isinstance(owner, types.ModuleType):
            owner = owner.__dict__.get(part, _ABSENT)
        else:
            owner = getattr(owner, part, _ABSENT)
        if owner is _ABSENT:
            _event(
                EventKind.EXTRA_MISSING, f"{target.text}: {target.module} has no {target.qualname}"
            )
            return
    name = parts[-1]
    try:
        if isinstance(owner, type):
            done = _hook_method(target, owner, name)
        elif isinstance(owner, types.ModuleType):
            done = _hook_function(target, owner, name)
        else:
            kind = type(owner).__name__
            _event(EventKind.EXTRA_MISSING, f"{target.text}: {kind} is not a class or module")
            return
    except Exception as e:  # noqa: BLE001 - e.g. an immutable extension type
        _event(EventKind.EXTRA_MISSING, f"{target.text}: cannot patch ({type(e).__name__}: {e})")
        return
    if done:
        _STATE.hooked.append(target.text)
        _event(EventKind.EXTRA_HOOKED, target.text)


def _hook_method(target: Target, cls: type, name: str) -> bool:
    raw = _ABSENT
    for klass in cls.__mro__:
        if name in klass.__dict__:
            raw = klass.__dict__[name]
            break
    if raw is _ABSENT:
        _event(EventKind.EXTRA_MISSING, f"{target.text}: {cls.__qualname__} has no {name}")
        return False
    wrapper: type[staticmethod[Any, Any]] | type[classmethod[Any, Any, Any]] | None = None
    func = raw
    if isinstance(raw, (staticmethod, classmethod)):
        wrapper, func = type(raw), raw.__func__
    if collectives.is_hook(func):
        return True  # hooked already (another target string naming the same method)
    if not isinstance(func, types.FunctionType):
        _event(
            EventKind.EXTRA_MISSING, f"{target.text}: {cls.__qualname__}.{name} is not a function"
        )
        return False
    # The package prefix tells vLLM's PyNcclCommunicator from SGLang's copy of it.
    hook = collectives.extra_hook(
        func, target.op, f"{target.module.split('.')[0]}:{target.qualname}"
    )
    value = hook if wrapper is None else wrapper(hook)
    orig = cls.__dict__.get(name, _ABSENT)
    setattr(cls, name, value)
    _STATE.patches.append((cls, name, orig, value))
    return True


def _hook_function(target: Target, module: types.ModuleType, name: str) -> bool:
    current = module.__dict__.get(name, _ABSENT)
    if current is _ABSENT:
        _event(EventKind.EXTRA_MISSING, f"{target.text}: {target.module} has no {name}")
        return False
    if collectives.is_hook(current):
        return True
    if isinstance(current, type) or not callable(current):
        _event(EventKind.EXTRA_MISSING, f"{target.text}: {target.module}.{name} is not a function")
        return False
    hook = collectives.extra_hook(current, target.op, f"{target.module}.{target.qualname}")
    # Aliases: ``ray.util.collective.allreduce`` is ``ray.util.collective.collective.allreduce``;
    # every imported module holding the same object under the same name gets the same hook.
    owners = [module]
    for mod in list(sys.modules.values()):
        if mod is module or not isinstance(mod, types.ModuleType):
            continue
        try:
            if mod.__dict__.get(name) is current:
                owners.append(mod)
        except Exception:  # noqa: BLE001 - an odd object in sys.modules
            continue
    for owner in owners:
        setattr(owner, name, hook)
        _STATE.patches.append((owner, name, current, hook))
    return True


def _module_loaded(name: str, module: types.ModuleType) -> None:
    """Called right after module ``name`` finished executing: hook what waited for it."""
    with _STATE.lock:
        waiting = _STATE.pending.pop(name, None)
        if not waiting:
            return
        for target in waiting:
            try:
                _hook(target, module)
            except Exception as e:  # noqa: BLE001 - never raise into the importing code
                rec = _STATE.recorder
                if rec is not None:
                    rec.internal_error("extra", e)


def _initialising(module: types.ModuleType) -> bool:
    """Whether ``module``'s import is still running (importlib sets ``__spec__._initializing``
    around the module's code; a module executed by hand never has it set)."""
    spec = getattr(module, "__spec__", None)
    return getattr(spec, "_initializing", False) is True


class _ImportEndWatch:
    """Mixed into the class of a spec being watched: importlib's ``spec._initializing = False``
    (in ``_load_unlocked``, once the module's code has run or failed) hooks what waited."""

    #: The spec's own class, put back once the import has ended.
    _wsprof_base: type[importlib.machinery.ModuleSpec]

    @property
    def _initializing(self) -> bool:
        return bool(self.__dict__.get("_initializing", False))

    @_initializing.setter
    def _initializing(self, value: bool) -> None:
        self.__dict__["_initializing"] = value
        if not value:
            _import_ended(self)  # type: ignore[arg-type]


#: spec class -> its watched subclass
_WATCH_CLASSES: dict[type, type] = {}


def _watch(module: types.ModuleType) -> bool:
    """Hook the pending targets of ``module`` (still initialising) when its import ends.

    Returns:
        False where its spec cannot be watched (then it is hooked now, names missing or not).
    """
    spec = module.__spec__
    if spec is None or not isinstance(spec, importlib.machinery.ModuleSpec):
        return False
    if _STATE.watched.get(spec.name) is spec:
        return True
    base = type(spec)
    if isinstance(spec, _ImportEndWatch):
        base = spec._wsprof_base  # left watched by an earlier install: take it over
    cls = _WATCH_CLASSES.get(base)
    try:
        if cls is None:
            cls = type(
                f"_Watched{base.__name__}",
                (_ImportEndWatch, base),
                {"_wsprof_base": base, "__slots__": ()},
            )
            _WATCH_CLASSES[base] = cls
        spec.__class__ = cls
    except TypeError:  # a spec class with an incompatible layout
        return False
    _STATE.watched[spec.name] = spec
    return True


def _unwatch(spec: importlib.machinery.ModuleSpec) -> None:
    """Give a watched spec its own class back (its ``_initializing`` value is kept)."""
    if isinstance(spec, _ImportEndWatch):
        base: type = spec._wsprof_base
        with contextlib.suppress(TypeError):  # cannot happen: the base had this layout
            spec.__class__ = base


def _import_ended(spec: importlib.machinery.ModuleSpec) -> None:
    """The import of a watched module ended: hook what waited for it, if it succeeded.

    A failed import removed the module from ``sys.modules``: its targets stay pending, and the
    finder hooks them if the module is imported again. Never raises into importlib.
    """
    try:
        with _STATE.lock:
            _unwatch(spec)
            if _STATE.watched.get(spec.name) is spec:
                del _STATE.watched[spec.name]
            module = sys.modules.get(spec.name)
            if isinstance(module, types.ModuleType):
                _module_loaded(spec.name, module)
    except Exception as e:  # noqa: BLE001 - never raise into the importing code
        rec = _STATE.recorder
        if rec is not None:
            rec.internal_error("extra", e)
