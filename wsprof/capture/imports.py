"""Run code right after a module is first imported, without importing it: a meta-path finder
that wraps the real loader of the modules it is asked about.

Used by the extra communicator hooks (hook ``vllm...pynccl`` when it is imported) and by the
``wsprof run`` bootstrap (patch when ``torch.distributed`` is imported: a process that never
imports torch never pays for it).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module ``wants(name)`` accepts it asks the finders after it
    for the spec and wraps the spec's loader so that ``loaded(name, module)`` runs right after
    the module's code has run.

    Args:
        wants: whether a module name is of interest (called on every import: keep it cheap).
        loaded: called once the module has executed; it must not raise.
    """

    def __init__(
        self, wants: Callable[[str], bool], loaded: Callable[[str, types.ModuleType], None]
    ) -> None:
        self._busy = threading.local()
        self._wants = wants
        self._loaded = loaded

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not self._wants(fullname):
            return None
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is None:
                    continue
                loader = spec.loader
                if loader is not None and hasattr(loader, "exec_module"):
                    spec.loader = _HookingLoader(loader, self._loaded)
                return spec
            return None
        finally:
            busy.discard(fullname)


class _HookingLoader(importlib.abc.Loader):
    """Delegates to the real loader; after ``exec_module`` hooks the module's targets.

    The module's ``__loader__`` and ``__spec__.loader`` are set back to the real loader before
    its code runs, so nothing after the import can tell this wrapper was there.
    """

    def __init__(self, loader: Any, loaded: Callable[[str, types.ModuleType], None]) -> None:
        self.loader = loader
        self._loaded = loaded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        # A module may replace itself in sys.modules while it runs; hook what importers get.
        name = module.__name__
        loaded = sys.modules.get(name, module)
        self._loaded(name, loaded if isinstance(loaded, types.ModuleType) else module)
