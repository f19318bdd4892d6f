"""A job whose step numbers repeat, for the per-step shares: ``wsprof.step(n)`` is called
twice with the same ``n`` (a retried step), and one step's rollout runs in two threads at once.

Every step spends :data:`ROLLOUT_S` in a ``rollout`` phase, then :data:`OTHER_S` outside any
phase, so each step's rollout share is about ``ROLLOUT_S / (ROLLOUT_S + OTHER_S)`` (80%)
however often its number was marked. Runs to the end on its own; no torch needed.

Usage: ``python step_repeats.py OUT``
"""

from __future__ import annotations

import sys
import threading
import time

import wsprof

#: Seconds of each rollout phase.
ROLLOUT_S = 0.2
#: Seconds of each step outside any phase.
OTHER_S = 0.05
#: Step numbers marked in turn: 1 and 3 twice each.
STEP_NUMBERS = (0, 1, 1, 2, 3, 3)
#: The step whose rollout runs in two threads at once.
THREADED_STEP = 4


def rollout() -> None:
    """One rollout phase."""
    with wsprof.phase("rollout"):
        time.sleep(ROLLOUT_S)


def main() -> None:
    wsprof.patch(sys.argv[1], counters=False)
    for n in STEP_NUMBERS:
        wsprof.step(n)
        rollout()
        time.sleep(OTHER_S)
    wsprof.step(THREADED_STEP)
    other = threading.Thread(target=rollout)
    other.start()
    rollout()
    other.join()
    time.sleep(OTHER_S)
    wsprof.unpatch()


if __name__ == "__main__":
    main()
