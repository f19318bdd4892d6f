"""One rank of a real gloo job where one rank stops calling collectives and the others hang.

Usage: python flight_hang.py RANK WORLD_SIZE PORT OUT_DIR

All ranks run ``STEPS`` steps of collectives on the default group (two ``all_reduce`` and one
``broadcast`` a step). Then the last rank "hangs": it does not call the next collective, while
every other rank enters an ``all_reduce`` that blocks until the group's ``TIMEOUT_S`` timeout.

Each rank writes c10d's Flight Recorder dump to ``OUT_DIR/fr_dumps/nccl_trace_rank_RANK`` (the
name torch's default ``TORCH_FR_DUMP_TEMP_FILE`` prefix gives, ``<prefix><rank>``) and its JSON
form to ``OUT_DIR/fr_dumps_json/`` under the same name: torch 2.13 writes no dump on its own for
gloo (only NCCL's watchdog does), so a watcher thread writes
``torch._C._distributed_c10d._dump_fr_trace`` and ``_dump_fr_trace_json`` while the rank is
blocked, ``DUMP_AFTER_S`` seconds after it entered the all_reduce. The
hanging rank dumps while in no collective, then waits (bounded) until the others are done so
their collective times out rather than failing on a closed connection. Blocked ranks catch the
timeout and exit 0. Writes ``OUT_DIR/result-RANK.json``: ``{"dump": path, "hung_at":
"all_reduce" or null}``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (  # type: ignore[attr-defined]  # not in torch's stubs
    _dump_fr_trace,
    _dump_fr_trace_json,
)

warnings.simplefilter("ignore")
STEPS = 3
#: The process group's timeout: how long the blocked all_reduce waits before it fails.
TIMEOUT_S = 5
#: Seconds after entering the blocked all_reduce that the watcher writes the dump.
DUMP_AFTER_S = 1.5
#: Most seconds the hanging rank waits for the others to finish.
WAIT_OTHERS_S = 20


def write_dump(path: str) -> None:
    """Write this process's Flight Recorder dump to ``path`` and its JSON form to the same name
    in the ``_json`` folder beside, each atomically (tmp + rename)."""
    folder, name = os.path.split(path)
    for dest, data in (
        (path, _dump_fr_trace(includeCollectives=True, includeStackTraces=False, onlyActive=False)),
        (
            os.path.join(f"{folder}_json", name),
            _dump_fr_trace_json(includeCollectives=True, onlyActive=False),
        ),
    ):
        with open(f"{dest}.tmp", "wb") as f:
            f.write(data)
        os.replace(f"{dest}.tmp", dest)


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dumps = os.path.join(out, "fr_dumps")
    os.makedirs(dumps, exist_ok=True)
    os.makedirs(f"{dumps}_json", exist_ok=True)
    dump = os.path.join(dumps, f"nccl_trace_rank_{rank}")
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S)
    )
    t = torch.ones(16)
    for _ in range(STEPS):
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        dist.all_reduce(t)
    hangs = rank == world - 1
    hung_at = None
    if hangs:
        write_dump(dump)  # in no collective: the others are blocked waiting for us
        others = [os.path.join(out, f"result-{r}.json") for r in range(world - 1)]
        deadline = time.monotonic() + WAIT_OTHERS_S
        while not all(os.path.exists(p) for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        entered = threading.Event()

        def watch() -> None:
            entered.wait()
            time.sleep(DUMP_AFTER_S)
            write_dump(dump)

        watcher = threading.Thread(target=watch, name="fr-dump-watcher", daemon=True)
        watcher.start()
        hung_at = "all_reduce"
        entered.set()
        try:
            dist.all_reduce(t)  # blocks: the hanging rank never joins
            print(f"rank {rank}: all_reduce returned", flush=True)
        except RuntimeError as e:
            print(f"rank {rank}: all_reduce failed as expected: {e}", flush=True)
        watcher.join()
    result = os.path.join(out, f"result-{rank}.json")
    with open(f"{result}.tmp", "w") as f:
        json.dump({"dump": dump, "hung_at": hung_at}, f)
    os.replace(f"{result}.tmp", result)
    if hung_at is not None:
        # A gloo group whose collective timed out may abort in its destructors at exit
        # ("terminate called without an active exception"): leave without running them.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
