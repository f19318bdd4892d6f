"""Calls ``wsprof.flush()`` in a tight loop (a user who flushes every step) until killed: a
SIGTERM then lands inside a flush on the main thread.

Usage: ``python flush_loop.py OUT``; prints ``ready`` once looping.
"""

from __future__ import annotations

import sys

import wsprof


def main() -> None:
    wsprof.patch(sys.argv[1], counters=False)
    print("ready", flush=True)
    i = 0
    while True:
        wsprof.step()
        for _ in range(50):
            wsprof.counter("i", i)
        wsprof.flush()
        i += 1


if __name__ == "__main__":
    main()
