"""A 3-rank gloo job started without wsprof, for ``wsprof attach --inject`` tests.

``python inject_job.py RANK WORLD PORT STEPS [STEP_S]``. Like a framework, it wraps
``dist.broadcast`` at start with its own wrapper whose cost grows (it scans a list that gains
an entry per call). Each step broadcasts 8 tensors from rank 0 and all-reduces a checksum.
Rank 0 prints ``step N`` after each step; at the end every rank prints ``checksum X`` (the
sum of what it received: identical with and without injection) and ``identity ok`` when
``dist.broadcast`` is still the job's own wrapper (the injected hooks were removed).
``INJECT_JOB_HIDE_WSPROF=1`` makes ``import wsprof`` fail in it (an environment without
wsprof); ``INJECT_JOB_PATCH=DIR`` makes it call ``wsprof.patch(DIR)`` itself;
``INJECT_JOB_SLIME=1`` (with ``tests/standins/presets`` on ``PYTHONPATH``) imports slime's
stand-in ``UpdateWeightFromDistributed`` and calls its ``update_weights`` every step, and
prints ``preset restored`` at the end when that method is its own again;
``INJECT_JOB_BLOCK_AT=N`` (``INJECT_JOB_BLOCK_S``) sleeps in step N, outside Python;
``INJECT_JOB_SIGUSR1=1`` installs a SIGUSR1 handler (signals may then arrive at any time).
"""

from __future__ import annotations

import functools
import os
import sys
import time

import torch
import torch.distributed as dist

if os.environ.get("INJECT_JOB_HIDE_WSPROF"):  # an environment without wsprof
    sys.modules["wsprof"] = None  # type: ignore[assignment]
if os.environ.get("INJECT_JOB_SIGUSR1"):  # a job that takes signals (a profiler, a timer)
    import signal

    signal.signal(signal.SIGUSR1, lambda *_: None)
RANK, WORLD, PORT, STEPS = (int(a) for a in sys.argv[1:5])
STEP_S = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(PORT))
torch.set_num_threads(1)

_seen: list[int] = []


def _framework_wrap(fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def with_bookkeeping(*args, **kwargs):  # type: ignore[no-untyped-def]
        _seen.append(len(_seen))
        sum(1 for x in _seen if x >= 0)  # grows with every call: the slowdown
        return fn(*args, **kwargs)

    return with_bookkeeping


dist.broadcast = _framework_wrap(dist.broadcast)
if os.environ.get("INJECT_JOB_PATCH"):  # a job that profiles itself already
    import wsprof

    wsprof.patch(os.environ["INJECT_JOB_PATCH"])
OURS = dist.broadcast
updater = None
if os.environ.get("INJECT_JOB_SLIME"):  # a framework imported before the injection
    from slime.backends.megatron_utils.update_weight.update_weight_from_distributed import (
        UpdateWeightFromDistributed,
    )

    updater = UpdateWeightFromDistributed(n_params=2)
    ORIGINAL_UPDATE = UpdateWeightFromDistributed.__dict__["update_weights"]

dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
params = [torch.full((256,), float(i)) for i in range(8)]
total = torch.zeros(1, dtype=torch.float64)
for step in range(STEPS):
    t_end = time.monotonic() + STEP_S
    for i, p in enumerate(params):
        if RANK == 0:
            p.copy_(torch.full((256,), float(step * 8 + i)))
        dist.broadcast(p, src=0)
        total += p.double().sum()
    if updater is not None:
        updater.update_weights()  # the framework's weight sync (a preset marks it)
    check = total.clone()
    dist.all_reduce(check)
    while time.monotonic() < t_end:  # the step's compute
        pass
    if RANK == 0:
        print(f"step {step}", flush=True)
    if step == int(os.environ.get("INJECT_JOB_BLOCK_AT", "-1")):
        time.sleep(float(os.environ.get("INJECT_JOB_BLOCK_S", "5")))  # blocked outside Python
dist.barrier()
print(f"checksum {total.item():.1f}", flush=True)
print("identity ok" if dist.broadcast is OURS else "identity CHANGED", flush=True)
if updater is not None:
    same = UpdateWeightFromDistributed.__dict__["update_weights"] is ORIGINAL_UPDATE
    print("preset restored" if same else "preset LEFT", flush=True)
dist.destroy_process_group()
