"""Framework presets: mark the weight-sync and rollout phases of slime, verl, OpenRLHF, AReaL
and TRL by wrapping each framework's entry points in ``wsprof.phase(...)``.

``$WSPROF_PRESET`` (or :func:`install`'s ``preset``) names one framework; without it every
framework's entry points are waited for, and only the ones whose module the process imports get
wrapped (the framework is detected from the imported modules). Modules are never imported by
wsprof: an entry point whose module is not imported yet is wrapped right after its import
(:class:`~wsprof.capture.imports.PostImportFinder`). A missing module attribute is a
``preset_missing`` event in the trace, never an error.

Entry points, checked against the frameworks' sources (the same files as the sampled-phase
patterns of :mod:`wsprof.analysis.phases`):

- slime: ``UpdateWeightFromDistributed.update_weights``
  (``slime/backends/megatron_utils/update_weight/update_weight_from_distributed.py``; slime logs
  ``perf/update_weights_time``), rollout ``RolloutManager.generate`` (``slime/ray/rollout.py``;
  ``perf/rollout_time``);
- verl: ``CheckpointEngineManager.update_weights`` (``verl/checkpoint_engine/base.py``;
  ``timing_s/update_weights``), rollout ``AgentLoopManager.generate_sequences``
  (``verl/experimental/agent_loop/agent_loop.py``; ``timing_s/gen``);
- OpenRLHF: ``PolicyModelActor.broadcast_to_vllm`` (``openrlhf/trainer/ray/ppo_actor.py``;
  ``timing/broadcast``), rollout ``SamplesGenerator.generate_samples``
  (``openrlhf/trainer/ppo_utils/experience_maker.py``; ``timing/generation``);
- AReaL: ``FSDPEngine.update_weights`` (``areal/engine/fsdp_engine.py``;
  ``timeperf/update_weights``), rollout ``RemoteSGLangEngine.rollout_batch``
  (``areal/engine/sglang_remote.py``; ``timeperf/rollout``);
- TRL: ``VLLMGeneration.sync_weights`` and rollout ``VLLMGeneration.generate``
  (``trl/generation/vllm_generation.py``).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from wsprof.capture.imports import PostImportFinder
from wsprof.capture.markers import STATE, phase

#: ``$WSPROF_PRESET`` values, with each framework's entry points: phase -> ``module:qualname``.
PRESETS: dict[str, dict[str, tuple[str, ...]]] = {
    "slime": {
        "weight_sync": ("slime.backends.megatron_utils.update_weight."
                        "update_weight_from_distributed:UpdateWeightFromDistributed."
                        "update_weights",),
        "rollout": ("slime.ray.rollout:RolloutManager.generate",),
    },
    "verl": {
        "weight_sync": ("verl.checkpoint_engine.base:CheckpointEngineManager.update_weights",),
        "rollout": ("verl.experimental.agent_loop.agent_loop:AgentLoopManager."
                    "generate_sequences",),
    },
    "openrlhf": {
        "weight_sync": ("openrlhf.trainer.ray.ppo_actor:PolicyModelActor.broadcast_to_vllm",),
        "rollout": ("openrlhf.trainer.ppo_utils.experience_maker:SamplesGenerator."
                    "generate_samples",),
    },
    "areal": {
        "weight_sync": ("areal.engine.fsdp_engine:FSDPEngine.update_weights",),
        "rollout": ("areal.engine.sglang_remote:RemoteSGLangEngine.rollout_batch",),
    },
    "trl": {
        "weight_sync": ("trl.generation.vllm_generation:VLLMGeneration.sync_weights",),
        "rollout": ("trl.generation.vllm_generation:VLLMGeneration.generate",),
    },
}
#: Attribute set on a wrapper (the phase it marks), so that wrapping twice is wrapping once.
MARK = "__wsprof_phase__"

_lock = threading.RLock()
_pending: dict[str, list[tuple[str, str, str]]] = {}  # module -> (preset, phase, qualname)
_finder: PostImportFinder | None = None
#: Events met before ``wsprof.patch()`` started a recorder; recorded by :func:`flush_events`.
_early: list[tuple[str, str]] = []
wrapped: list[str] = []


def _event(kind: str, detail: str) -> None:
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


def _wrap(preset: str, phase_name: str, module: types.ModuleType, qualname: str) -> None:
    owner: Any = module
    *path, attr = qualname.split(".")
    try:
        for part in path:
            owner = getattr(owner, part)
        fn = inspect.getattr_static(owner, attr)
    except AttributeError:
        _event("preset_missing", f"{preset}: {module.__name__}:{qualname} not found; the "
               f"{phase_name} phase is not marked (framework version?)")
        return
    if isinstance(fn, (staticmethod, classmethod)):
        inner = fn.__func__
        if getattr(inner, MARK, None):
            return
        setattr(owner, attr, type(fn)(phase_wrapper(inner, phase_name)))
    elif callable(fn):
        if getattr(fn, MARK, None):
            return
        setattr(owner, attr, phase_wrapper(fn, phase_name))
    else:
        _event("preset_missing", f"{preset}: {module.__name__}:{qualname} is not callable")
        return
    wrapped.append(f"{module.__name__}:{qualname}")
    _event("preset", f"{preset}: {phase_name} marked on {module.__name__}:{qualname}")


def _loaded(name: str, module: types.ModuleType) -> None:
    with _lock:
        for preset, phase_name, qualname in _pending.pop(name, []):
            try:
                _wrap(preset, phase_name, module, qualname)
            except Exception as e:  # noqa: BLE001 - never raise into the importing code
                _event("preset_missing", f"{preset}: {name}:{qualname}: {type(e).__name__}: {e}")


def install(preset: str | None = None) -> list[str]:
    """Wrap the entry points of ``preset`` (every preset when None) now or when their module is
    imported. A preset name that is not known is a ``preset_missing`` event and a warning on
    stderr. Never raises.

    Returns:
        The entry points wrapped so far (``module:qualname``).
    """
    name = (preset or "").strip().lower()
    if name and name not in PRESETS:
        msg = (f"WSPROF_PRESET={preset!r} is not one of {', '.join(PRESETS)}; no phases are "
               "marked by a preset")
        sys.stderr.write(f"wsprof: {msg}\n")
        _event("preset_missing", msg)
        return list(wrapped)
    global _finder
    with _lock:
        for p in [name] if name else list(PRESETS):
            for phase_name, targets in PRESETS[p].items():
                for target in targets:
                    module, qualname = target.split(":", 1)
                    if module in sys.modules:
                        _wrap(p, phase_name, sys.modules[module], qualname)
                    else:
                        _pending.setdefault(module, []).append((p, phase_name, qualname))
        if _pending and _finder is None:
            _finder = PostImportFinder(lambda n: n in _pending, _loaded)
            sys.meta_path.insert(0, _finder)
    return list(wrapped)
