"""One rank of a real gloo job that checks wsprof's hooks change nothing.

Usage: python gloo_ops.py RANK WORLD_SIZE PORT OUT_DIR

Runs every hooked collective twice, unpatched then patched, and writes
``OUT_DIR/result-RANK.json`` with what differed (nothing, if wsprof is correct).
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist

import wsprof

warnings.simplefilter("ignore")


def ops(rank: int, world: int) -> dict[str, object]:
    """Run each op once; return comparable results (lists of floats, return-type names)."""
    out: dict[str, object] = {}
    t = torch.arange(4, dtype=torch.float32) + rank
    r = dist.broadcast(t.clone(), src=0)
    b = t.clone()
    dist.broadcast(b, src=1)
    out["broadcast"] = [b.tolist(), type(r).__name__]
    lst = [torch.empty(4) for _ in range(world)]
    dist.all_gather(lst, t)
    out["all_gather"] = [x.tolist() for x in lst]
    full = torch.empty(4 * world)
    dist.all_gather_into_tensor(full, t)
    out["all_gather_into_tensor"] = full.tolist()
    if hasattr(dist, "_all_gather_base"):
        full2 = torch.empty(4 * world)
        dist._all_gather_base(full2, t)
        out["_all_gather_base"] = full2.tolist()
    if hasattr(dist, "all_gather_single"):
        full3 = torch.empty(4 * world)
        dist.all_gather_single(full3, t)
        out["all_gather_single"] = full3.tolist()
    s = t.clone()
    dist.all_reduce(s)
    out["all_reduce"] = s.tolist()
    h = dist.all_reduce(t.clone() * 2, async_op=True)
    out["async_type"] = type(h).__name__
    out["async_wait"] = bool(h.wait())
    a = t.clone()
    h2 = dist.all_reduce(a, async_op=True)
    h2.wait()
    out["async_result"] = a.tolist()
    red = t.clone()
    dist.reduce(red, dst=0)
    out["reduce"] = red.tolist() if rank == 0 else None
    dist.barrier()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    recv = torch.empty(4)
    if rank % 2 == 0:
        dist.send(t, nxt)
        dist.recv(recv, prv)
    else:
        dist.recv(recv, prv)
        dist.send(t, nxt)
    out["send_recv"] = recv.tolist()
    objs = [{"rank": rank}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    out["broadcast_object_list"] = objs
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, {"r": rank})
    out["all_gather_object"] = gathered
    a2a = torch.empty(world)
    dist.all_to_all_single(a2a, torch.full((world,), float(rank)))
    out["all_to_all_single"] = a2a.tolist()
    try:
        dist.broadcast(t.clone(), src=world + 7)
        out["error"] = None
    except Exception as e:  # noqa: BLE001 - comparing what reaches the caller
        out["error"] = [type(e).__name__, str(e)]
    return out


def hooked_names() -> dict[str, object]:
    names = {n: dist.__dict__.get(n) for n in ("broadcast", "all_gather", "all_reduce")}
    pg = {n: dist.ProcessGroup.__dict__.get(n) for n in ("broadcast", "allgather", "allreduce")}
    return {**{f"dist.{k}": v for k, v in names.items()}, **{f"pg.{k}": v for k, v in pg.items()}}


def main() -> None:
    rank, world, port, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    originals = hooked_names()
    before = ops(rank, world)
    if len(sys.argv) > 5 and sys.argv[5] == "inject":
        # Fault injection: make wsprof's recording path fail on every call (the caller-site
        # lookup never succeeds, so no site is ever cached and every call reaches it).
        from wsprof.capture.sites import SiteTable

        def broken_site_of(self: object, frame: object) -> int:
            raise RuntimeError("injected recording failure")

        SiteTable.site_of = broken_site_of  # type: ignore[method-assign]
    path = wsprof.patch(os.path.join(out_dir, "trace"))
    path_again = wsprof.patch(os.path.join(out_dir, "elsewhere"))
    patched = hooked_names()
    from wsprof.capture.collectives import is_hook

    double_wrapped = is_hook(getattr(dist.broadcast, "__wrapped__", None))
    # torch compares P2POp's op with isend/irecv by identity: must still hold under patch.
    p2p_identity = dist.isend is dist.distributed_c10d.isend
    dist.P2POp(dist.isend, torch.ones(1), (rank + 1) % world)
    wsprof.step()
    after = ops(rank, world)
    wsprof.unpatch()
    restored = hooked_names()
    result = {
        "differences": {k: [before[k], after.get(k)] for k in before if before[k] != after.get(k)},
        "ops_run": sorted(before),
        "same_path_twice": path == path_again,
        "hooked": all(patched[k] is not originals[k] for k in originals),
        "double_wrapped": bool(double_wrapped),
        "p2p_identity": p2p_identity,
        "restored": all(restored[k] is originals[k] for k in originals),
        "error": after.get("error"),
        "trace": path,
    }
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"result-{rank}.json"), "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
