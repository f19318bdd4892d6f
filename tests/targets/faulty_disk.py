"""A world-size-1 gloo process whose trace disk fills up mid-run (then frees up again).

Usage: python faulty_disk.py OUT_DIR PORT MODE

MODE ``full``: after the first flush, the process's file-size limit (RLIMIT_FSIZE) is set to
the trace's current size, so every later write fails as on a full disk; training goes on and
must not notice; before exiting the limit is lifted (the disk was cleaned), so wsprof can record
what it lost. MODE ``notadir``: the run folder's path is a regular file (as unwritable as a
read-only folder, also for root).

Prints one JSON line: the collectives' results, compared with the unpatched ones.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import warnings

import torch
import torch.distributed as dist

import wsprof

warnings.simplefilter("ignore")


def work() -> list[float]:
    out = []
    for i in range(30):
        t = torch.full((256,), float(i))
        dist.broadcast(t, 0)
        dist.all_reduce(t)
        out.append(float(t.sum()))
    return out


def main() -> None:
    out, port, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    expected = work()
    if mode == "notadir":
        with open(out, "w") as fh:
            fh.write("not a folder")
    path = wsprof.patch(out, flush_interval_s=3600)
    results: list[list[float]] = []
    for step in range(4):
        wsprof.step()
        results.append(work())
        wsprof.flush()
        if step == 0 and mode == "full" and path is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
            size = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
            hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    if mode == "full":
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    wsprof.unpatch()
    print(json.dumps({"same": all(r == expected for r in results), "path": path}), flush=True)
    # torch 2.13's gloo aborts the interpreter at exit now and then when a group is left.
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
