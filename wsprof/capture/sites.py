"""Caller sites: the first frame outside torch and wsprof's own capture code, interned.

Whether a code object is internal is cached per code object, and a site id per
(code object, line). Hooks first look up :attr:`SiteTable.fast`, keyed by the calling frame's
(code object, ``f_lasti``): one dict lookup, no line-number computation, when the caller is
user code; :meth:`SiteTable.site_of` walks the frames otherwise.
"""

from __future__ import annotations

import os
import sys
from types import CodeType, FrameType
from typing import Any

_WSPROF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DEMO_DIR = os.path.join(_WSPROF_DIR, "demo")


def _torch_dirs() -> tuple[str, ...]:
    torch_mod = sys.modules.get("torch")
    path = getattr(torch_mod, "__file__", None)
    return (os.path.dirname(path),) if path else ()


class SiteTable:
    """Interns caller sites; new sites are appended as rows for the ``sites`` table.

    One per process: hooks keep references to :attr:`fast` and to their last-caller caches
    (:meth:`new_last`), so a new session empties them in place (:meth:`reset`): site ids are
    per trace.

    Args:
        out: receives ``(id, file, line, function)`` rows for new sites (``append``); None
            drops them (not recording).
    """

    def __init__(self, out: Any = None) -> None:
        self._out = out
        self._internal: dict[CodeType, bool] = {}
        self._ids: dict[tuple[CodeType, int], int] = {}
        #: (code, f_lasti) of a non-internal calling frame -> site id; filled by site_of.
        self.fast: dict[tuple[CodeType, int], int] = {}
        self._torch = _torch_dirs()
        #: Code objects of audited wrappers: skipped like torch's own frames.
        self.extra_internal: set[CodeType] = set()
        self._lasts: list[list[Any]] = []

    def new_last(self) -> list[Any]:
        """A hook's cache of its last caller, ``[code, f_lasti, site id]``, emptied by
        :meth:`reset`."""
        last: list[Any] = [None, -1, -1]
        self._lasts.append(last)
        return last

    def reset(self, out: Any) -> None:
        """Start a new trace: forget every site id and every internal mark."""
        self._out = out
        self._ids.clear()
        self.fast.clear()
        self._internal.clear()
        self._torch = _torch_dirs()
        self.extra_internal = set()
        # Caches of hooks that are gone are dropped (this list and the loop hold the only
        # references to them); the others are emptied: their ids belonged to the last trace.
        self._lasts = [last for last in self._lasts if sys.getrefcount(last) > 3]
        for last in self._lasts:
            last[0], last[1], last[2] = None, -1, -1

    def mark_internal(self, codes: set[CodeType]) -> None:
        """Treat ``codes`` (an audited wrapper's functions) as internal from now on."""
        self.extra_internal |= codes
        for c in codes:
            self._internal[c] = True
        self.fast.clear()

    def _is_internal(self, code: CodeType) -> bool:
        fn = code.co_filename
        if fn.startswith(_WSPROF_DIR) and not fn.startswith(_DEMO_DIR):
            return True
        if code in self.extra_internal:
            return True
        return any(fn.startswith(d + os.sep) for d in self._torch)

    def site_of(self, frame: FrameType | None) -> int:
        """Site id of the first non-internal frame at or above ``frame``; -1 if none."""
        internal = self._internal
        first = True
        while frame is not None:
            code = frame.f_code
            flag = internal.get(code)
            if flag is None:
                flag = internal[code] = self._is_internal(code)
            if not flag:
                key = (code, frame.f_lineno)
                sid = self._ids.get(key)
                if sid is None:
                    sid = self._ids[key] = len(self._ids)
                    if self._out is not None:
                        self._out.append(
                            (
                                sid,
                                code.co_filename,
                                frame.f_lineno,
                                code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
                            )
                        )
                if first:
                    self.fast[(code, frame.f_lasti)] = sid
                return sid
            first = False
            frame = frame.f_back
        return -1
