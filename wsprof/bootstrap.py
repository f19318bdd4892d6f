"""What ``wsprof run -- CMD`` starts in every Python process CMD launches.

``hooks/sitecustomize.py`` (on ``PYTHONPATH`` under ``wsprof run``) calls :func:`start` at
interpreter start-up. It does nothing unless ``$WSPROF_RUN`` is ``1`` (set by ``wsprof run``):

1. framework presets (:mod:`wsprof.capture.presets`, ``$WSPROF_PRESET``) are installed, so the
   weight-sync and rollout entry points are marked as phases when their modules are imported;
2. ``wsprof.patch($WSPROF_OUT)`` runs as soon as ``torch`` has finished importing (right away
   when it already has): a process that never imports torch (a shell helper, a tokenizer
   worker) pays nothing. Not at ``torch.distributed``'s import: torch imports it half-way
   through its own initialisation, and hooking a half-initialised torch crashes it. A launcher
   (``torchrun``) is not patched: its workers are.

A bad setting never stops the program: a ``$WSPROF_DISABLE`` that is not a yes/no flag leaves
the process unprofiled, a ``$WSPROF_LAYERS`` that is not ``both``/``api`` is replaced by
``both``; either way one line on stderr names the variable, its value and the accepted values.
"""

from __future__ import annotations

import os
import sys
import types

from wsprof.capture import settings as cfg

#: Launchers that start the ranks but make no collective call: script endings and modules.
#: ``accelerate launch`` imports torch and runs ``torch.distributed.run`` in its own process
#: (accelerate's ``multi_gpu_launcher``); its console scripts are ``accelerate`` and
#: ``accelerate-launch``.
LAUNCHER_SCRIPTS = (
    "torch/distributed/run.py",
    "torchrun",
    "torch/distributed/launch.py",
    "/accelerate",
    "/accelerate-launch",
    "accelerate/commands/launch.py",
    "accelerate/commands/accelerate_cli.py",
)
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
)


def _is_launcher() -> bool:
    """Whether this process is a launcher (``torchrun``, ``python -m torch.distributed.run``,
    ``accelerate launch``) (from
    ``sys.orig_argv``: under ``-m``, torch is imported before ``sys.argv[0]`` is set)."""
    orig = list(getattr(sys, "orig_argv", []) or [])
    if "-m" in orig[1:]:
        i = orig.index("-m", 1)
        if i + 1 < len(orig) and orig[i + 1] in LAUNCHER_MODULES:
            return True
    scripts = [a.replace(os.sep, "/") for a in (*orig[1:2], *(sys.argv[:1] or []))]
    return any(a.endswith(LAUNCHER_SCRIPTS) for a in scripts)


def _patch() -> None:
    """Patch this process, with the settings of now (the program may have set ``WSPROF_*``
    variables before importing torch)."""
    if _is_launcher():
        return
    from wsprof.capture import presets, session

    settings = cfg.read()
    session.patch(settings.out, layers=_layers(settings), settings=settings)
    presets.flush_events()


def _disabled(settings: cfg.Settings) -> bool:
    """Whether ``$WSPROF_DISABLE`` says not to profile; a value that is not a yes/no flag is one
    line on stderr and means not profiling (the user asked something about disabling)."""
    error = settings.error(cfg.ENV_DISABLE)
    if error is not None:
        sys.stderr.write(f"wsprof: not profiling: {error}\n")
        return True
    return settings.disable


def _layers(settings: cfg.Settings) -> str:
    """``$WSPROF_LAYERS``, default ``both``; a bad value is one line on stderr and ``both``.
    Read when patching (torch is imported by then, and so may collectives be)."""
    error = settings.error(cfg.ENV_LAYERS)
    if error is not None:
        sys.stderr.write(f"wsprof: {error}; using {settings.layers}\n")
    return settings.layers


def start() -> None:
    """Install presets and patch now or at ``torch.distributed``'s import (see the module
    docstring). Never raises."""
    settings = cfg.read()
    if not settings.run or _disabled(settings):
        return
    from wsprof.capture import presets

    presets.install(settings.preset)
    torch = sys.modules.get("torch")
    if (
        torch is not None
        and getattr(getattr(torch, "__spec__", None), "_initializing", False) is False
    ):
        _patch()
        return
    from wsprof.capture.imports import PostImportFinder

    def loaded(name: str, module: types.ModuleType) -> None:
        try:
            _patch()
        except Exception as e:  # noqa: BLE001 - never raise into the importing code
            sys.stderr.write(f"wsprof: not profiling ({type(e).__name__}: {e})\n")
        finally:
            while finder in sys.meta_path:
                sys.meta_path.remove(finder)

    finder = PostImportFinder(lambda n: n == "torch", loaded)
    sys.meta_path.insert(0, finder)
