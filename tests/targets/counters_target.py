"""A marked run whose process keeps objects every step: ``STEPS`` steps, each keeping
``LEAK`` new :class:`Leaky` objects and doing a weight sync of 20 broadcasts.

Usage: ``python counters_target.py RANK WORLD PORT OUT STEPS LEAK [STEP_SLEEP_S [GAP_S]]``
(``GAP_S``: each weight sync also spends ``GAP_S * step`` seconds outside any collective, as a
serialization that grows would).
Exits non-zero if a broadcast result is wrong.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

import wsprof


class Leaky:
    """What the run keeps by mistake."""

    def __init__(self, i: int) -> None:
        self.i = i


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    steps, leak = int(sys.argv[5]), int(sys.argv[6])
    pause = float(sys.argv[7]) if len(sys.argv) > 7 else 0.1
    gap = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    wsprof.patch(out, flush_interval_s=0.1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    kept: list[Leaky] = []
    for step in range(steps):
        wsprof.step()
        kept.extend(Leaky(i) for i in range(leak))
        with wsprof.phase("weight_sync"):
            for i in range(20):
                t = torch.full((8,), float(step * 100 + i if rank == 0 else -1))
                dist.broadcast(t, src=0)
                if t[0].item() != step * 100 + i:
                    sys.exit(f"broadcast gave {t[0].item()}, expected {step * 100 + i}")
            time.sleep(gap * step)
        time.sleep(pause)
    dist.destroy_process_group()
    wsprof.unpatch()
    print(f"kept {len(kept)}")


if __name__ == "__main__":
    main()
