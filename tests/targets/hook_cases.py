"""One rank of a real gloo job that exercises the ways a collective is reached (issue 3).

Usage: python hook_cases.py RANK WORLD_SIZE PORT OUT_DIR [SCENARIO ...]

Each scenario runs in its own ``wsprof.patch(OUT_DIR/SCENARIO)`` / ``wsprof.unpatch()`` cycle,
so each has a trace of its own; what the scenario saw from inside the process (results, thread
ids, group names, wrapper timings, exceptions) goes to ``OUT_DIR/result-RANK.json`` as
``{scenario: {...}}``. A scenario that raises records its traceback under ``"exception"`` and
the next one still runs. Every scenario puts the genuine ``torch.distributed`` functions back
when it ends, whatever a "framework" in it replaced.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# Scenario "captured": a reference taken before wsprof.patch(), the way a framework module
# does ``from torch.distributed import broadcast`` at import time.
from torch.distributed import broadcast as early_broadcast

import wsprof

warnings.simplefilter("ignore")

#: Seconds each framework wrapper sleeps per call (its "free-memory probe").
PROBE_SLEEP_S = 0.002
#: Calls per wrapped name in the wrapper scenarios.
N_WRAPPED_CALLS = 5
#: Threads in the threads scenario, and all_reduce calls per thread.
N_THREADS = 3
N_PER_THREAD = 200

#: The genuine functions, saved before anything is patched.
GENUINE = {name: dist.__dict__[name] for name in ("broadcast", "all_gather_into_tensor")}


def _restore_genuine() -> None:
    for name, fn in GENUINE.items():
        setattr(dist, name, fn)


def _bc_value(rank: int) -> torch.Tensor:
    return torch.arange(4, dtype=torch.float32) + 10 * rank


# --------------------------------------------------------------------------------------------
# 1. captured reference
# --------------------------------------------------------------------------------------------
def captured(rank: int, world: int) -> dict[str, Any]:
    t = _bc_value(rank)
    ret = early_broadcast(t, src=0)
    return {
        "still_original": early_broadcast is GENUINE["broadcast"],
        "patched_name_differs": dist.broadcast is not early_broadcast,
        "result": t.tolist(),
        "ret_type": type(ret).__name__,
    }


# --------------------------------------------------------------------------------------------
# 2. framework wraps the collectives AFTER wsprof.patch()
# --------------------------------------------------------------------------------------------
def _framework_wrap(prev: Callable[..., Any], windows: list[list[int]]) -> Callable[..., Any]:
    """A framework's functools.wraps wrapper: probe (sleep), then call what was there."""

    @functools.wraps(prev)
    def framework_after(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic_ns()
        time.sleep(PROBE_SLEEP_S)
        ret = prev(*args, **kwargs)
        windows.append([t0, time.monotonic_ns()])
        return ret

    return framework_after


def wrapped_after(rank: int, world: int) -> dict[str, Any]:
    bc_windows: list[list[int]] = []
    ag_windows: list[list[int]] = []
    hooks = {"broadcast": dist.broadcast, "all_gather_into_tensor": dist.all_gather_into_tensor}
    # What the framework assigned (reading the name back gives wsprof's hook around it until
    # unpatch(): issue 28, hooks stay outermost).
    wrappers = {
        "broadcast": _framework_wrap(hooks["broadcast"], bc_windows),
        "all_gather_into_tensor": _framework_wrap(hooks["all_gather_into_tensor"], ag_windows),
    }
    dist.broadcast = wrappers["broadcast"]
    dist.all_gather_into_tensor = wrappers["all_gather_into_tensor"]
    results = []
    for i in range(N_WRAPPED_CALLS):
        t = _bc_value(rank) + i
        dist.broadcast(t, src=i % world)
        full = torch.empty(4 * world)
        dist.all_gather_into_tensor(full, _bc_value(rank))
        results.append([t.tolist(), full.tolist()])
    wsprof.unpatch()
    # After unpatch: the framework's wrapper is still what the name holds, still works, and
    # reaches the genuine function.
    still_wrapper = all(dist.__dict__[n] is wrappers[n] for n in wrappers)
    chain_reaches_genuine = {}
    for name, w in wrappers.items():
        seen, obj = [], w
        while obj is not None and len(seen) < 16:
            seen.append(obj)
            obj = getattr(obj, "__wrapped__", None)
        chain_reaches_genuine[name] = any(o is GENUINE[name] for o in seen)
    n_before = len(bc_windows)
    t = _bc_value(rank)
    dist.broadcast(t, src=0)
    full = torch.empty(4 * world)
    dist.all_gather_into_tensor(full, _bc_value(rank))
    return {
        "results": results,
        "bc_windows": bc_windows[:n_before],
        "ag_windows": ag_windows[:n_before],
        "still_wrapper_after_unpatch": still_wrapper,
        "chain_reaches_genuine": chain_reaches_genuine,
        "wrapper_ran_after_unpatch": len(bc_windows) == n_before + 1,
        "after_unpatch_results": [t.tolist(), full.tolist()],
    }


# --------------------------------------------------------------------------------------------
# 3. framework wraps dist.broadcast BEFORE wsprof.patch()
# --------------------------------------------------------------------------------------------
def install_probe(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The framework's probe wrapper, installed before wsprof is patched."""

    @functools.wraps(fn)  # PROBE-WRAPPER: the line wsprof must name
    def probe_before(*args: Any, **kwargs: Any) -> Any:
        time.sleep(PROBE_SLEEP_S)
        return fn(*args, **kwargs)

    return probe_before


def wrapped_before_setup() -> Callable[..., Any]:
    probe = install_probe(dist.broadcast)
    dist.broadcast = probe
    return probe


def wrapped_before(rank: int, world: int, probe: Callable[..., Any]) -> dict[str, Any]:
    results = []
    for i in range(N_WRAPPED_CALLS):
        t = _bc_value(rank) + i
        dist.broadcast(t, src=i % world)
        results.append(t.tolist())
    wsprof.unpatch()
    return {
        "results": results,
        "probe_qualname": probe.__code__.co_qualname,
        "probe_restored": dist.__dict__["broadcast"] is probe,
    }


# --------------------------------------------------------------------------------------------
# 4. a group object that forwards to an inner ProcessGroup
# --------------------------------------------------------------------------------------------
class ReloadableGroup:
    """What frameworks with reloadable groups do: a plain object forwarding to a real group."""

    def __init__(self, inner: dist.ProcessGroup) -> None:
        self.inner = inner

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:
        return self.inner.broadcast(tensors, opts)


class SubclassGroup(dist.ProcessGroup):
    """A real Python subclass of ProcessGroup (constructible in torch 2.13 with (rank, size))
    whose broadcast forwards to an inner group."""

    def __init__(self, inner: dist.ProcessGroup) -> None:
        super().__init__(inner.rank(), inner.size())
        self.inner = inner
        self.forwarded = 0

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        self.forwarded += 1
        return self.inner.broadcast(tensors, opts)


def forwarding_group(rank: int, world: int, inner: dist.ProcessGroup) -> dict[str, Any]:
    out: dict[str, Any] = {"inner_name": str(inner.group_name)}
    g = ReloadableGroup(inner)
    t = _bc_value(rank)
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    g.broadcast([t], opts).wait()
    out["plain_result"] = t.tolist()
    out["t_between"] = [time.monotonic_ns()]
    # Sub-case: a real subclass of dist.ProcessGroup.
    sub = SubclassGroup(inner)
    t = _bc_value(rank)
    sub.broadcast([t], opts).wait()
    out["sub_direct_result"] = t.tolist()
    out["t_between"].append(time.monotonic_ns())
    # dist.broadcast(group=sub) only works once c10d knows the group: an unregistered group
    # is refused with a ValueError before any communication.
    try:
        dist.broadcast(_bc_value(rank), 0, group=sub)
        out["sub_unregistered_error"] = None
    except ValueError as e:
        out["sub_unregistered_error"] = str(e)
    out["t_between"].append(time.monotonic_ns())
    c10d._world.pg_group_ranks[sub] = {i: i for i in range(world)}
    try:
        t = _bc_value(rank)
        dist.broadcast(t, 0, group=sub)
        out["sub_api_result"] = t.tolist()
    finally:
        del c10d._world.pg_group_ranks[sub]
    out["sub_forwarded"] = sub.forwarded
    return out


# --------------------------------------------------------------------------------------------
# 5. threads, each on its own group
# --------------------------------------------------------------------------------------------
def threads(rank: int, world: int, groups: list[dist.ProcessGroup]) -> dict[str, Any]:
    start = threading.Barrier(N_THREADS)
    idents: list[int] = [0] * N_THREADS
    sums: list[float] = [0.0] * N_THREADS
    errors: list[str] = []

    def work(k: int) -> None:
        try:
            idents[k] = threading.get_ident()
            start.wait()
            total = 0.0
            for _ in range(N_PER_THREAD):
                t = torch.full((8,), float(rank + k))
                dist.all_reduce(t, group=groups[k])
                total += float(t[0])
            sums[k] = total
        except Exception:  # noqa: BLE001 - reported in the result
            errors.append(traceback.format_exc())

    ts = [threading.Thread(target=work, args=(k,)) for k in range(N_THREADS)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    return {
        "threads": [
            {"ident": idents[k], "grp": str(groups[k].group_name), "sum": sums[k]}
            for k in range(N_THREADS)
        ],
        "errors": errors,
        "expected_sums": [
            N_PER_THREAD * float(sum(r + k for r in range(world))) for k in range(N_THREADS)
        ],
    }


# --------------------------------------------------------------------------------------------
# 6. object collectives and batched p2p
# --------------------------------------------------------------------------------------------
def logical_calls(rank: int, world: int) -> dict[str, Any]:
    objs: list[Any] = [{"from": rank, "x": list(range(5))}, "two"] if rank == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {"r": rank})
    send = _bc_value(rank)
    recv = torch.empty(4)
    ops = [
        dist.P2POp(dist.isend, send, (rank + 1) % world),
        dist.P2POp(dist.irecv, recv, (rank - 1) % world),
    ]
    reqs = dist.batch_isend_irecv(ops)
    for req in reqs:
        req.wait()
    return {
        "broadcast_object_list": objs,
        "all_gather_object": gathered,
        "batch_recv": recv.tolist(),
        "expected_batch_recv": _bc_value((rank - 1) % world).tolist(),
        "n_reqs": len(reqs),
    }


# --------------------------------------------------------------------------------------------
# 7. coalescing manager
# --------------------------------------------------------------------------------------------
def _coalesced_block(rank: int) -> list[list[float]]:
    t1 = torch.arange(4, dtype=torch.float32) + rank
    t2 = torch.full((3,), 2.0 * rank + 1)
    with c10d._coalescing_manager(c10d._get_default_group(), async_ops=False):
        dist.all_reduce(t1)
        dist.all_reduce(t2)
    return [t1.tolist(), t2.tolist()]


# --------------------------------------------------------------------------------------------
# 8. async_op=True
# --------------------------------------------------------------------------------------------
def _async_all_reduce(rank: int) -> list[Any]:
    t = torch.arange(4, dtype=torch.float32) * (rank + 1)
    w = dist.all_reduce(t, async_op=True)
    handle = type(w).__name__
    done = w.wait()
    return [t.tolist(), handle, bool(done)]


SCENARIOS = (
    "captured",
    "wrapped_after",
    "wrapped_before",
    "forwarding_group",
    "threads",
    "logical_calls",
    "coalescing",
    "async_op",
)


def run_scenario(
    name: str, rank: int, world: int, out_dir: str, groups: list[dist.ProcessGroup]
) -> dict[str, Any]:
    """Run one scenario in its own patch()/unpatch() cycle; never leaves anything patched."""
    folder = os.path.join(out_dir, name)
    res: dict[str, Any] = {}
    try:
        if name == "coalescing":
            res["unpatched"] = _coalesced_block(rank)
        elif name == "async_op":
            res["unpatched"] = _async_all_reduce(rank)
        probe = wrapped_before_setup() if name == "wrapped_before" else None
        res["t_patch"] = time.monotonic_ns()
        res["trace"] = wsprof.patch(folder)
        if name == "captured":
            res.update(captured(rank, world))
        elif name == "wrapped_after":
            res.update(wrapped_after(rank, world))
        elif name == "wrapped_before":
            assert probe is not None
            res.update(wrapped_before(rank, world, probe))
        elif name == "forwarding_group":
            res.update(forwarding_group(rank, world, groups[0]))
        elif name == "threads":
            res.update(threads(rank, world, groups))
        elif name == "logical_calls":
            res.update(logical_calls(rank, world))
        elif name == "coalescing":
            res["patched"] = _coalesced_block(rank)
        elif name == "async_op":
            res["patched"] = _async_all_reduce(rank)
    except Exception:  # noqa: BLE001 - reported in the result; the next scenario still runs
        res["exception"] = traceback.format_exc()
    finally:
        wsprof.unpatch()
        _restore_genuine()
    return res


def main() -> None:
    rank, world, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    names = sys.argv[5:] or list(SCENARIOS)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    timeout = datetime.timedelta(seconds=30)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    # Groups made before any patch, in the same order on every rank.
    groups = [dist.new_group(list(range(world)), timeout=timeout) for _ in range(N_THREADS)]
    results: dict[str, Any] = {}
    for name in names:
        dist.barrier()
        results[name] = run_scenario(name, rank, world, out_dir, groups)
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"result-{rank}.json"), "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
