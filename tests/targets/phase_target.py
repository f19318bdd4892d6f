"""A real process for sampled phases: a weight sync that grows every step, a constant rollout.

Prints ``ready`` (flushed) once running, then repeats training steps until stdin closes (the
test releases it): :func:`generate` spins for :data:`GENERATE_S`, then :func:`update_weights`
for ``SYNC_START_S + SYNC_GROWTH_S * step`` (the slowdown, as in the motivating case where weight
sync grew step after step while rollout stayed flat). Both spin in the same leaf,
:func:`_spin`, so only the stack tells the phases apart.

Usage: ``python phase_target.py``
"""

from __future__ import annotations

import sys
import threading
import time

#: Seconds of generation per step (constant).
GENERATE_S = 0.5
#: Seconds of weight sync in the first step.
SYNC_START_S = 0.05
#: Seconds the weight sync grows by every step.
SYNC_GROWTH_S = 0.1
#: Additions between two clock reads (keeps _spin the leaf frame).
SPIN_CHUNK = 5_000

_released = threading.Event()


def _spin(seconds: float) -> int:
    """Burn CPU in this frame for ``seconds`` (or until released)."""
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline and not _released.is_set():
        for i in range(SPIN_CHUNK):
            x += i
    return x


def generate() -> int:
    """The rollout: constant duration."""
    return _spin(GENERATE_S)


def update_weights(step: int) -> int:
    """The weight sync: longer every step."""
    return _spin(SYNC_START_S + SYNC_GROWTH_S * step)


def train_loop() -> None:
    step = 0
    while not _released.is_set():
        generate()
        update_weights(step)
        step += 1


def _wait_for_stdin_close() -> None:
    sys.stdin.read()
    _released.set()


def main() -> None:
    threading.Thread(target=_wait_for_stdin_close, name="release", daemon=True).start()
    print("ready", flush=True)
    train_loop()


if __name__ == "__main__":
    main()
