"""A real process for py-spy to sample: a known hot function and a known sleeping one.

Prints ``ready`` (flushed) once both are running, then the main thread spins in
:func:`hot_spin` while a second thread sleeps in :func:`idle_sleep`. It ends when stdin closes
(the test releases it), or on its own after ``--exit-after SECONDS`` of spinning (a target that
exits in the middle of a sampling window).

``--tag TEXT`` only puts TEXT on the command line (for ``wsprof attach --match``).

Usage: ``python busy_target.py [--exit-after SECONDS] [--tag TEXT]``
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

#: Additions between two checks of the release flag (keeps hot_spin the leaf frame).
SPIN_CHUNK = 20_000
#: Seconds of each sleep in idle_sleep.
SLEEP_S = 0.02

_released = False


def hot_spin(deadline: float | None) -> int:
    """Burn CPU in this frame until released or until ``deadline`` (monotonic seconds)."""
    x = 0
    while not _released:
        for i in range(SPIN_CHUNK):
            x += i
        if deadline is not None and time.monotonic() >= deadline:
            break
    return x


def idle_sleep() -> None:
    """Sleep in short naps until released."""
    while not _released:
        time.sleep(SLEEP_S)


def _wait_for_stdin_close() -> None:
    global _released
    sys.stdin.read()
    _released = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exit-after", type=float, default=None, help="seconds of spinning")
    parser.add_argument("--tag", default=None, help="ignored; a mark on the command line")
    args = parser.parse_args()
    threading.Thread(target=idle_sleep, name="sleeper", daemon=True).start()
    if args.exit_after is None:
        threading.Thread(target=_wait_for_stdin_close, name="release", daemon=True).start()
    deadline = None if args.exit_after is None else time.monotonic() + args.exit_after
    print("ready", flush=True)
    hot_spin(deadline)


if __name__ == "__main__":
    main()
