"""A world-size-1 gloo process that broadcasts in a tight loop, counting each call that returned
into a file that outlives it, until it dies the way MODE says.

Usage: python counted_loop.py OUT_DIR COUNTER_FILE PORT MODE

``wsprof.patch(OUT_DIR, keep_steps=0)`` (every call kept in full: no thinning), then
``wsprof.step()`` before every :data:`CALLS_PER_STEP`-th call and ``dist.broadcast`` of a small
tensor for ever. After each call returns, one ``os.pwrite`` at offset 0 of COUNTER_FILE (opened
with ``os.open``) stores two little-endian int64: how many calls have returned and the step the
last of them ran in. The kernel keeps what was written whatever happens to the process, so the
test knows exactly how many calls returned before the death.

It prints ``ready`` once patched and past its first step, then by MODE:

* ``sigkill``: loops until the test SIGKILLs it;
* ``exit-thread``: a second thread calls ``os._exit(1)`` after 0.5-1 s of calls;
* ``segv``: a second thread reads address 0 (``ctypes.string_at(0)``) after 0.5-1 s: a real
  SIGSEGV, with ``faulthandler`` off, so the process dies by the signal;
* ``abort``: a second thread calls ``os.abort()`` after 0.5-1 s (SIGABRT).

Whatever the mode, it gives up after :data:`MAX_RUN_S` seconds (exit status 2) so a test that
died first never leaves it running.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import random
import struct
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist

import wsprof

#: Calls per ``wsprof.step()``.
CALLS_PER_STEP = 100
#: Seconds after which the loop ends by itself (status 2).
MAX_RUN_S = 60.0
#: Layout of the counter file: (calls returned, step of the last returned call).
COUNTER = struct.Struct("<qq")

warnings.simplefilter("ignore")


def _die_later(mode: str) -> None:
    time.sleep(random.uniform(0.5, 1.0))
    if mode == "exit-thread":
        os._exit(1)
    elif mode == "segv":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()


def main() -> None:
    out, counter_path, port, mode = sys.argv[1:5]
    if mode not in ("sigkill", "exit-thread", "segv", "abort"):
        raise SystemExit(f"unknown mode {mode!r}")
    faulthandler.disable()  # die by the signal itself, not by faulthandler's re-raise
    fd = os.open(counter_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.pwrite(fd, COUNTER.pack(0, -1), 0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    wsprof.patch(out, keep_steps=0)
    t = torch.ones(8)
    n = 0
    step = wsprof.step()
    dist.broadcast(t, 0)
    n += 1
    os.pwrite(fd, COUNTER.pack(n, step), 0)
    print("ready", flush=True)
    if mode != "sigkill":
        threading.Thread(target=_die_later, args=(mode,), daemon=True).start()
    deadline = time.monotonic() + MAX_RUN_S
    while True:
        if n % CALLS_PER_STEP == 0:
            step = wsprof.step()
            if time.monotonic() > deadline:
                os._exit(2)
        dist.broadcast(t, 0)
        n += 1
        os.pwrite(fd, COUNTER.pack(n, step), 0)


if __name__ == "__main__":
    main()
