"""Flush on SIGTERM, chaining to whatever handler was there before.

A process killed by SIGTERM (torchrun and Ray stop workers that way) does not run ``atexit``
handlers, so without this the last flush interval would be lost. The handler writes everything
recorded, then does what the previous disposition would have done: call the user's handler, do
nothing for ``SIG_IGN``, or re-deliver the signal with the default action (the process ends with
the same signal status as without wsprof). SIGKILL cannot be caught: it loses at most one flush
interval.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_installed: dict[int, Any] = {}
_handlers: dict[int, Callable[[int, FrameType | None], None]] = {}
#: Signals whose handler was uninstalled from another thread (Python lets only the main
#: thread set handlers): the handler no longer flushes; the first signal puts the previous
#: disposition back and does what it would have done.
_inactive: set[int] = set()


def install(on_signal: Callable[[bool], None], signals: tuple[int, ...] = (signal.SIGTERM,)) -> str:
    """Install the chaining handler for ``signals``.

    Args:
        on_signal: called first on each signal (wsprof's flush), with True when the process
            is about to end (the previous disposition is the default action), False when a
            user handler runs next and may carry on; its errors are swallowed.
        signals: signal numbers.

    Returns:
        '' when installed, else why not (not the main thread: Python only lets the main thread
        set handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        return "patch() was called from a thread other than the main thread"
    for signum in signals:
        if signum in _installed:
            _inactive.discard(signum)
            continue
        previous = signal.getsignal(signum)

        def handler(num: int, frame: FrameType | None, previous: Any = previous) -> None:
            if num in _inactive:  # uninstalled off the main thread: restore, then chain
                _inactive.discard(num)
                _installed.pop(num, None)
                _handlers.pop(num, None)
                signal.signal(num, previous if previous is not None else signal.SIG_DFL)
            else:
                # The signal's own effect matters more than wsprof's flush: never let it fail.
                with contextlib.suppress(Exception):
                    on_signal(not callable(previous) and previous != signal.SIG_IGN)
            if callable(previous):
                previous(num, frame)
            elif previous == signal.SIG_IGN:
                return
            else:  # SIG_DFL (or unknown, set from C): restore it and re-deliver
                signal.signal(num, signal.SIG_DFL)
                os.kill(os.getpid(), num)

        signal.signal(signum, handler)
        _installed[signum] = previous
        _handlers[signum] = handler
    return ""


def uninstall() -> None:
    """Put the previous handlers back where ours is still the one installed. Off the main
    thread (an injected session's watchdog) ours stays installed but inactive: it flushes no
    more, and the first signal restores the previous disposition and does what it would."""
    if threading.current_thread() is not threading.main_thread():
        _inactive.update(_installed)
        return
    for signum, previous in list(_installed.items()):
        if signal.getsignal(signum) is _handlers[signum]:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        del _installed[signum]
        del _handlers[signum]
