"""A world-size-1 gloo process recording collectives, ended in a chosen way.

Usage: python killed_rank.py OUT_DIR MODE

Records ``FLUSHED`` broadcasts, flushes, records ``UNFLUSHED`` more (within the flush interval,
which is set long), prints ``ready`` and then, by MODE:

* ``wait``: blocks on stdin (the test kills it with SIGKILL or SIGTERM);
* ``handler``: like ``wait``, with a user SIGTERM handler installed *before* ``patch()`` that
  writes ``OUT_DIR/handler-ran`` and exits with status 3;
* ``raise``: raises an uncaught exception;
* ``exit``: returns normally.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

import torch
import torch.distributed as dist

import wsprof

FLUSHED, UNFLUSHED = 40, 25

warnings.simplefilter("ignore")


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    if mode == "handler":

        def on_term(signum: int, frame: object) -> None:
            with open(os.path.join(out, "handler-ran"), "w") as fh:
                fh.write("yes")
            os._exit(3)

        signal.signal(signal.SIGTERM, on_term)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[3])
    dist.init_process_group("gloo", rank=0, world_size=1)
    wsprof.patch(out, flush_interval_s=3600)
    wsprof.step()
    t = torch.ones(8)
    for _ in range(FLUSHED):
        dist.broadcast(t, 0)
    wsprof.flush()
    wsprof.step()
    for _ in range(UNFLUSHED):
        dist.broadcast(t, 0)
    print("ready", flush=True)
    if mode in ("wait", "handler"):
        sys.stdin.read()
    elif mode == "raise":
        raise RuntimeError("training failed")


if __name__ == "__main__":
    main()
