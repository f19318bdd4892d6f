"""A one-rank gloo job that waits before it starts: for tests that must act between the
process's start (its pid known) and its first collective.

Usage: ``python gated_job.py PORT [patch]``. It prints ``pid <pid>``, waits for one line on
stdin, then imports torch (under ``wsprof run`` the bootstrap patches right then), with
``patch`` calls ``wsprof.patch()`` itself (``$WSPROF_OUT``), does 2 steps of 10 broadcasts and
exits 0, printing ``trace <path or None>`` when it patched itself.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    port, mode = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    print(f"pid {os.getpid()}", flush=True)
    sys.stdin.readline()
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    if mode == "patch":
        import wsprof

        print(f"trace {wsprof.patch()}", flush=True)
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(8)
    for step in range(2):
        if mode == "patch":
            import wsprof

            wsprof.step(step)
        for _ in range(10):
            dist.broadcast(t, 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
