"""A job whose steps are much longer than a sampling window, for ``wsprof attach``: each step
generates (rollout), trains, then pushes weights, and the push gets slower every step.

Phases by function name: :func:`generate` (``ROLLOUT_S``), :func:`train_step`
(``TRAIN_S``), :func:`push_weights` (``SYNC_S`` + ``SYNC_GROWTH_S`` per step). Each spins the
CPU, so py-spy sees it active. Prints ``ready`` (flushed) and runs steps until stdin closes.

Usage: ``python long_steps_target.py``
"""

from __future__ import annotations

import sys
import threading
import time

ROLLOUT_S = 1.6
TRAIN_S = 0.8
SYNC_S = 1.0
SYNC_GROWTH_S = 0.8

_released = threading.Event()


def _spin(seconds: float) -> int:
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline:
        for i in range(2_000):
            x += i
    return x


def generate() -> int:
    return _spin(ROLLOUT_S)


def train_step() -> int:
    return _spin(TRAIN_S)


def push_weights(step: int) -> int:
    return _spin(SYNC_S + SYNC_GROWTH_S * step)


def main() -> None:
    threading.Thread(target=lambda: (sys.stdin.read(), _released.set()), daemon=True).start()
    print("ready", flush=True)
    step = 0
    while not _released.is_set():
        generate()
        train_step()
        push_weights(step)
        step += 1


if __name__ == "__main__":
    main()
