"""One rank of a real gloo job whose phases are entered by asyncio tasks and threads.

Usage: python asyncio_phases.py RANK WORLD_SIZE PORT OUT_DIR

Every call is a ``dist.all_reduce`` whose float32 tensor size (:data:`ELEMS`) says which case
and which side made it, so the test can tell the calls apart by their ``bytes``; each case is a
step (``wsprof.step()``). All ranks make the same calls in the same order.

* step 0 (``interleaved``): two tasks on the event loop of the main thread, one in
  ``phase("rollout")``, one in ``phase("weight_sync")``, alternating collectives with
  ``await asyncio.sleep(0)`` between them.
* step 1 (``thread``): inside the main thread's ``phase("rollout")``, a thread calls with no
  phase of its own (inherits ``rollout``), then inside its own ``phase("weight_sync")``.
* step 2 (``child_task``): a task created inside ``phase("rollout")`` calls (inherits it), then
  calls inside its own ``phase("weight_sync")`` while its creator, still in ``rollout``, calls
  too, then calls again after leaving its own phase.
* step 3: one call with no phase open anywhere.

Writes ``OUT_DIR/order-RANK.json``: the labels of the calls in the order they were made.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import warnings

import torch
import torch.distributed as dist

import wsprof

warnings.simplefilter("ignore")

#: Elements of the float32 tensor of each kind of call (``bytes`` = 4 * elements).
ELEMS = {
    "interleaved_rollout": 1,
    "interleaved_weight_sync": 2,
    "thread_inherited": 3,
    "thread_own": 4,
    "child_inherited": 5,
    "child_own": 6,
    "creator": 7,
    "child_after": 8,
    "no_phase": 9,
}
#: Collectives per task in the interleaved case.
ROUNDS = 4

order: list[str] = []


def call(label: str) -> None:
    """One all_reduce of the size of ``label``."""
    dist.all_reduce(torch.ones(ELEMS[label]))
    order.append(label)


async def in_phase(name: str, label: str) -> None:
    with wsprof.phase(name):
        for _ in range(ROUNDS):
            call(label)
            await asyncio.sleep(0)


async def interleaved() -> None:
    await asyncio.gather(
        in_phase("rollout", "interleaved_rollout"),
        in_phase("weight_sync", "interleaved_weight_sync"),
    )


def thread_body() -> None:
    call("thread_inherited")
    with wsprof.phase("weight_sync"):
        call("thread_own")


async def child(own: asyncio.Event, creator_done: asyncio.Event) -> None:
    call("child_inherited")
    with wsprof.phase("weight_sync"):
        own.set()
        await creator_done.wait()  # the creator calls while this task is in its own phase
        call("child_own")
    call("child_after")


async def child_task() -> None:
    own, creator_done = asyncio.Event(), asyncio.Event()
    with wsprof.phase("rollout"):
        task = asyncio.create_task(child(own, creator_done))
        await own.wait()
        call("creator")
        creator_done.set()
        await task


def main() -> None:
    rank, world, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    wsprof.patch(out_dir)
    try:
        wsprof.step(0)
        asyncio.run(interleaved())
        wsprof.step(1)
        with wsprof.phase("rollout"):
            t = threading.Thread(target=thread_body)
            t.start()
            t.join()
        wsprof.step(2)
        asyncio.run(child_task())
        wsprof.step(3)
        call("no_phase")
    finally:
        wsprof.unpatch()
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"order-{rank}.json"), "w") as f:
        json.dump(order, f)


if __name__ == "__main__":
    main()
