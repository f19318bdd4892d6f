"""The GPU check: run once on a machine with an NVIDIA GPU (2-4 minutes on one H200).

Checks what cannot be checked on CPU machines and prints one line per check, PASS or FAIL:

1. CUDA device time: ``wsprof.patch(device_time=True)`` on a world-size-1 NCCL group, 200
   ``all_reduce`` calls of 64 MiB: every call gets ``device_ns`` from CUDA events (resolved by
   the writer thread, no synchronisation on the calling thread), and device time per call is
   within sane bounds of the host-observed time to completion.
2. NCCL completion hook: with ``TORCH_NCCL_ENABLE_TIMING=1`` the counters
   ``nccl.<op>.active_s`` appear (where the installed torch has the hook).
3. Hook cost on NCCL: added host time per call, patched against unpatched (both layers).
4. The motivating pattern, for real: with ``expandable_segments:True`` a loop whose allocator
   mappings grow step by step, and a per-parameter NCCL weight sync through a framework
   wrapper that calls ``torch.cuda.mem_get_info``, ``memory_allocated`` and
   ``memory_reserved`` before each broadcast. Prints per step the sync time, the wrapper's
   probe cost and the allocator counters wsprof recorded; checks that wsprof's findings name a
   ``cuda0.*`` counter and that its own probing stayed within budget.
5. What the probes cost at a small and a large allocator: ``memory_stats()``,
   ``mem_get_info()``, ``memory_snapshot()``.
6. Tensor sharing by CUDA IPC (a producer and a consumer process, spawned, both under
   ``wsprof.patch()``): per step the producer sends a fresh 64 MiB weight bucket (as
   :data:`SHARE_BUCKETS` tensors) to the consumer as ``ForkingPickler.dumps`` bytes over a
   ``Pipe``, variants :data:`SHARE_VARIANTS`. Prints per variant what wsprof recorded
   (``share.*`` counters, the ``share_holder`` path) and the producer's
   ``memory_allocated`` growth per step; checks only that every variant ran.
7. The CUDA-only tests of the suite (``pytest -m cuda``).
8. c10d's Flight Recorder on NCCL (``TORCH_NCCL_ENABLE_TIMING=1``): a one-rank DDP model
   trains a few steps under ``wsprof.patch()``; DDP's reducer all-reduces from C++ (no hook
   sees them) are recorded from the recorder as calls of layer ``c10d`` with their bytes and
   NCCL's device time (:mod:`wsprof.capture.flight`); prints what the reader took.
9. Link limits (:func:`wsprof.capture.links.read_links`): prints per GPU its NVLink links up,
   version and GB/s, and its PCIe gen x width and GB/s (current and max), and each RDMA NIC
   port; checks that NVML gave one PCIe entry per GPU it counts, gen and width known.

Usage: python scripts/gpu_check.py [--calls 200]
Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch
import torch.distributed as dist

import wsprof
from wsprof.analysis.run import analyze_path
from wsprof.capture.links import MAX_GPUS, read_links
from wsprof.contracts.events import ShareHolder
from wsprof.trace.reader import find_traces, read_trace

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)


def per_call_host_ns(t: torch.Tensor, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / n


def _median_us(fn: object, n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def motivating_pattern(steps: int = 10, n_params: int = 300) -> None:
    """Check 4: growing mappings + a probing wrapper on every broadcast."""
    params = [torch.ones(512 * 1024, dtype=torch.bfloat16, device="cuda") for _ in range(n_params)]
    original = dist.broadcast
    probe_ns = [0]

    def with_memory_probe(tensor: torch.Tensor, src: int = 0, *a: object, **k: object) -> object:
        t0 = time.perf_counter_ns()
        free, _total = torch.cuda.mem_get_info()
        torch.cuda.memory_allocated()
        torch.cuda.memory_reserved()
        probe_ns[0] += time.perf_counter_ns() - t0
        return original(tensor, src, *a, **k)

    dist.broadcast = with_memory_probe  # the framework's wrapper, installed before patch()
    out = tempfile.mkdtemp(prefix="wsprof-gpu-pattern-")
    path = wsprof.patch(out)
    kept: list[torch.Tensor] = []
    print(
        f"step  sync_s  probe_ms  mappings  segments  reserved_GiB  "
        f"(PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')})",
        flush=True,
    )
    for step in range(steps):
        wsprof.step()
        with wsprof.phase("train"):
            # Kept and freed blocks of odd sizes: the allocator maps more memory every step.
            batch = [
                torch.empty((1 + (i * 7919) % 13) << 20, dtype=torch.uint8, device="cuda")
                for i in range(400)
            ]
            kept += batch[::2]
            del batch
        torch.cuda.synchronize()
        probe_ns[0] = 0
        t0 = time.perf_counter()
        with wsprof.phase("weight_sync"):
            for p in params:
                dist.broadcast(p, 0)
            torch.cuda.synchronize()
        sync_s = time.perf_counter() - t0
        stats = torch.cuda.memory_stats()
        mappings = stats.get("num_device_alloc", 0) - stats.get("num_device_free", 0)
        print(
            f"{step:4}  {sync_s:6.3f}  {probe_ns[0] / 1e6:8.2f}  {mappings:8}  "
            f"{stats['segment.all.current']:8}  "
            f"{stats['reserved_bytes.all.current'] / 2**30:12.2f}",
            flush=True,
        )
    wsprof.unpatch()
    dist.broadcast = original
    trace = read_trace(str(path))
    cuda_counters = sorted(k for k in trace.counters if k.startswith("cuda"))
    check(
        "allocator counters recorded",
        any(k.endswith(".mappings") for k in cuda_counters),
        ", ".join(cuda_counters[:6]) + (" ..." if len(cuda_counters) > 6 else ""),
    )
    analysis = analyze_path(out)
    for f in analysis.findings:
        print(f"   [{f.severity}] {f.kind}: {f.title}", flush=True)
    named = [
        f
        for f in analysis.findings
        if f.kind in ("counter_correlation", "memory_growth") and (f.where or "").startswith("cuda")
    ]
    check(
        "findings name a cuda counter",
        bool(named),
        "; ".join(f"{f.kind}: {f.where}" for f in named) or "none",
    )
    probes = trace.meta["self"].get("probes") or {}
    share = float(probes.get("share") or 0)
    check(
        "counter probes within budget",
        0 < share <= 0.0075,
        f"{share:.3%} of wall time (budget {probes.get('budget_fraction', 0):.1%}); "
        + ", ".join(
            f"{k} {v['runs']} runs/{v['skipped']} skipped"
            for k, v in (probes.get("by_probe") or {}).items()
        ),
    )
    del kept
    torch.cuda.empty_cache()


def probe_costs() -> None:
    """Check 5: probe costs at a small and at a large allocator."""
    torch.cuda.empty_cache()
    rows = []
    for label in ("small", "large"):
        kept = []
        if label == "large":
            kept = [
                torch.empty((1 + i % 17) << 16, dtype=torch.uint8, device="cuda")
                for i in range(20_000)
            ]
            del kept[::3]
        stats = torch.cuda.memory_stats()
        rows.append(
            (
                label,
                stats["segment.all.current"],
                stats.get("num_device_alloc", 0) - stats.get("num_device_free", 0),
                _median_us(torch.cuda.memory_stats, 50),
                _median_us(torch.cuda.mem_get_info, 50),
                _median_us(torch.cuda.memory_snapshot, 5),
            )
        )
        del kept
    print("allocator  segments  mappings  memory_stats_us  mem_get_info_us  memory_snapshot_us")
    for label, seg, maps, ms, mg, snap in rows:
        print(f"{label:9}  {seg:8}  {maps:8}  {ms:15.1f}  {mg:15.1f}  {snap:18.1f}", flush=True)
    check("probe costs measured", all(r[3] > 0 for r in rows), "table above")


def flight_case(steps: int = 5) -> None:
    """Check 8: DDP's C++ all-reduces on NCCL, recorded from c10d's Flight Recorder."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)).cuda()
    model = DDP(net, device_ids=[0], bucket_cap_mb=4)
    grad_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    path = wsprof.patch(tempfile.mkdtemp(prefix="wsprof-gpu-flight-"))
    for _ in range(steps):
        wsprof.step()
        model(torch.randn(64, 1024, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    wsprof.unpatch()
    trace = read_trace(str(path))
    calls = trace.calls
    c10d = (calls.layer == "c10d") & (calls.op == "all_reduce")
    flight = trace.meta.get("flight", {})
    per_step = [int(calls.bytes[c10d & (calls.step == s)].sum()) for s in range(steps)]
    dev = calls.device_ns[c10d]
    med_ms = statistics.median(dev[dev >= 0].tolist()) / 1e6 if (dev >= 0).any() else 0.0
    print(
        f"flight: {flight}; c10d all_reduce bytes per step {per_step} (gradients "
        f"{grad_bytes}); device time on {int((dev >= 0).sum())} of {int(c10d.sum())}, "
        f"median {med_ms:.3f} ms",
        flush=True,
    )
    check(
        "Flight Recorder: DDP's all-reduces recorded with bytes",
        bool(c10d.any()) and all(b == grad_bytes for b in per_step[1:]),
        f"{int(c10d.sum())} c10d all_reduce calls, bytes per step {per_step}",
    )
    check(
        "Flight Recorder: NCCL device time on them",
        bool((dev >= 0).any()),
        f"{int((dev >= 0).sum())} of {int(c10d.sum())} with device time",
    )


# ----------------------------------------------------------------------------- check 6

#: Where the sharing case puts its buckets (``cpu`` in a scratch copy exercises the code path
#: without a GPU, by torch's ``file_system`` CPU sharing instead of CUDA IPC).
SHARE_DEVICE = "cuda"
#: Steps per variant, and each step's bucket as this many tensors of ``SHARE_BUCKET_MIB``
#: (64 MiB a step; several tensors so that the oldest kept one outlives the
#: ``sharing.HOLD_AFTER`` = 16 later exports the holder search waits for).
SHARE_STEPS = 8
SHARE_BUCKETS = 4
SHARE_BUCKET_MIB = 16
#: Seconds both processes keep what they hold after the last step, before ``unpatch``: the
#: holder search looks at a storage 2 s old at the earliest, on a 1 s period.
SHARE_HOLD_S = 3.0
#: The children's allocator: plain (no ``expandable_segments``, which changes how a block is
#: exported), the classic CUDA IPC path.
SHARE_ALLOC_CONF = ""
#: The children's probe budget, percent of wall time (``WSPROF_PROBE_BUDGET_PCT``; default
#: 0.5): at the default the ``sharing`` probe (5 % of it, ~1.5 ms a reading) samples about
#: once in 6 s, once or twice in a variant's few seconds.
SHARE_PROBE_BUDGET_PCT = "5"
#: variant -> what it does (the first line of the table's legend).
SHARE_VARIANTS = {
    "healthy": "consumer drops before its ack; producer drops, ipc_collect() each step",
    "no_collect": "consumer keeps the last step's tensors; producer drops, no ipc_collect()",
    "producer_keeps": "producer appends every bucket to Producer.sent; ipc_collect() each step",
    "double_open": "consumer unpickles the same bytes twice and keeps both (Consumer.opened)",
    "double_open_nocache": "as double_open, torch's shared_cache cleared between the opens",
}


class Producer:
    """The trainer's side: makes a fresh bucket each step and sends it."""

    def __init__(self) -> None:
        self.sent: list[torch.Tensor] = []  # producer_keeps


class Consumer:
    """The engine's side: opens each bucket."""

    def __init__(self) -> None:
        self.last: list[torch.Tensor] = []  # no_collect: the last step's tensors
        self.opened: list[tuple[torch.Tensor, torch.Tensor]] = []  # double_open*


def _share_child_start(out: str) -> torch.device:
    dev = torch.device(SHARE_DEVICE)
    if dev.type == "cpu":
        torch.multiprocessing.set_sharing_strategy("file_system")  # bytes unpickled twice
    else:
        torch.cuda.set_device(0)
    os.environ["WSPROF_OUT"] = out
    os.environ.setdefault("WSPROF_PROBE_BUDGET_PCT", SHARE_PROBE_BUDGET_PCT)
    wsprof.patch()
    return dev


def _share_producer(variant: str, conn: Connection, result: Connection, out: str) -> None:
    """Child: send SHARE_STEPS buckets; ``result`` gets the allocated bytes per step."""
    try:
        dev = _share_child_start(out)
        cuda = dev.type == "cuda"
        me = Producer()
        numel = SHARE_BUCKET_MIB * 2**20 // 4
        allocated = [torch.cuda.memory_allocated() if cuda else 0]
        for step in range(SHARE_STEPS):
            wsprof.step()
            with wsprof.phase("weight_sync"):
                bucket = [
                    torch.full((numel,), float(step * SHARE_BUCKETS + i), device=dev)
                    for i in range(SHARE_BUCKETS)
                ]
                if cuda:
                    torch.cuda.synchronize()
                conn.send([bytes(ForkingPickler.dumps(t)) for t in bucket])
                ack = conn.recv()
                if ack != step:
                    raise RuntimeError(f"consumer acked {ack!r} at step {step}")
                if variant == "producer_keeps":
                    me.sent.extend(bucket)
                del bucket
                if cuda and variant != "no_collect":
                    torch.cuda.ipc_collect()
            allocated.append(torch.cuda.memory_allocated() if cuda else 0)
        conn.send(None)
        time.sleep(SHARE_HOLD_S)
        if conn.recv() != "done":  # the consumer let go
            raise RuntimeError("consumer did not finish")
        wsprof.unpatch()
        me.sent.clear()
        if cuda:
            torch.cuda.ipc_collect()
        result.send(("ok", allocated))
    except BaseException:
        result.send(("crash", traceback.format_exc()))
        raise


def _share_consumer(variant: str, conn: Connection, out: str) -> None:
    """Child: open every bucket, keep what the variant keeps, ack each step."""
    from torch.multiprocessing import reductions

    _share_child_start(out)
    me = Consumer()
    step = 0
    while True:
        wsprof.step()
        msg = conn.recv()
        if msg is None:
            break
        with wsprof.phase("weight_sync"):
            got = []
            for data in msg:
                t = pickle.loads(data)
                if variant.startswith("double_open"):
                    if variant == "double_open_nocache":
                        reductions.shared_cache.clear()
                    again = pickle.loads(data)
                    me.opened.append((t, again))
                    float(again[-1])
                float(t[0])  # read it: the handle opened and the memory is there
                got.append(t)
                del t
            if variant == "no_collect":
                me.last = got
            del got
        conn.send(step)
        step += 1
    time.sleep(SHARE_HOLD_S)
    wsprof.unpatch()
    me.last.clear()
    me.opened.clear()
    conn.send("done")


def _share_numbers(folder: str) -> tuple[dict[str, float], list[str]]:
    """Most of each ``share.*`` counter (``samples``: readings of the ``sharing`` probe) and
    the holder paths of the trace in ``folder``."""
    tr = read_trace(find_traces(folder)[0])
    most = {"samples": float(len(tr.counters.get("share.exports", ((), ()))[1]))}
    most |= {
        k[len("share.") :]: float(v[1].max())
        for k, v in tr.counters.items()
        if k.startswith("share.") and len(v[1])
    }
    holders = [f"{e.side}:{e.path}" for e in tr.events if isinstance(e, ShareHolder) and e.path]
    return most, holders


def sharing_case() -> None:
    """Check 6: a bucket a step sent by CUDA IPC, healthy and leaking; prints a table."""
    ctx = torch.multiprocessing.get_context("spawn")
    root = tempfile.mkdtemp(prefix="wsprof-gpu-share-")
    mib = 2**20
    crashed: list[str] = []
    rows = []
    was_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    for variant in SHARE_VARIANTS:
        dirs = {side: os.path.join(root, variant, side) for side in ("producer", "consumer")}
        a, b = ctx.Pipe()
        r_recv, r_send = ctx.Pipe(duplex=False)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = SHARE_ALLOC_CONF  # read by the children
        try:
            procs = [
                ctx.Process(target=_share_producer, args=(variant, a, r_send, dirs["producer"])),
                ctx.Process(target=_share_consumer, args=(variant, b, dirs["consumer"])),
            ]
            for p in procs:
                p.start()
        finally:
            if was_conf is None:
                os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            else:
                os.environ["PYTORCH_CUDA_ALLOC_CONF"] = was_conf
        for c in (a, b, r_send):
            c.close()
        outcome: tuple[str, object] = ("crash", "producer sent no result")
        if r_recv.poll(180):
            with contextlib.suppress(EOFError):
                outcome = r_recv.recv()
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.terminate()
                p.join(10)
        codes = [p.exitcode for p in procs]
        if outcome[0] != "ok" or codes != [0, 0]:
            crashed.append(variant)
            print(f"   {variant} crashed (exit codes {codes}): {outcome[1]}", flush=True)
            continue
        allocated = outcome[1]
        assert isinstance(allocated, list)
        try:
            prod, prod_holders = _share_numbers(dirs["producer"])
            cons, cons_holders = _share_numbers(dirs["consumer"])
        except Exception as e:  # noqa: BLE001 - a trace that cannot be read is a crash here
            crashed.append(variant)
            print(f"   {variant}: traces not read: {e}", flush=True)
            continue
        rows.append(
            (
                variant,
                int(prod.get("exports", 0)),
                int(cons.get("imports", 0)),
                prod.get("alive_bytes", 0) / mib,
                cons.get("imported_alive_bytes", 0) / mib,
                int(cons.get("reopens", 0)),
                int(prod.get("ipc_collects", 0)),
                int(prod.get("exports_since_collect", 0)),
                (allocated[-1] - allocated[0]) / len(allocated[1:]) / mib,
                f"{prod['samples']:.0f}/{cons['samples']:.0f}",
                ", ".join(prod_holders + cons_holders) or "-",
            )
        )
    budget = os.environ.get("WSPROF_PROBE_BUDGET_PCT", SHARE_PROBE_BUDGET_PCT)
    print(
        f"sharing: {SHARE_STEPS} steps x {SHARE_BUCKETS} x {SHARE_BUCKET_MIB} MiB on "
        f"{SHARE_DEVICE}, PYTORCH_CUDA_ALLOC_CONF={SHARE_ALLOC_CONF!r}, "
        f"WSPROF_PROBE_BUDGET_PCT={budget}, "
        f"traces in {root}; most of each counter (samples: sharing probe readings, "
        "producer/consumer)"
    )
    for name, what in SHARE_VARIANTS.items():
        print(f"   {name}: {what}")
    print(
        "variant              exports  imports  alive_MiB  imp_alive_MiB  reopens  "
        "ipc_collects  since_collect  alloc_MiB/step  samples  holder"
    )
    for v, ex, im, al, ial, ro, ic, sc, grow, n, holder in rows:
        print(
            f"{v:19}  {ex:7}  {im:7}  {al:9.0f}  {ial:13.0f}  {ro:7}  {ic:12}  {sc:13}  "
            f"{grow:14.1f}  {n:>7}  {holder}",
            flush=True,
        )
    check(
        "tensor sharing variants ran",
        not crashed,
        f"{len(rows)} of {len(SHARE_VARIANTS)} ran" + (f"; crashed: {crashed}" if crashed else ""),
    )


def _cell(value: object, fmt: str = "") -> str:
    return "?" if value is None else format(value, fmt)


def links_case() -> None:
    """Check 9: the link limits wsprof stores in the trace's meta."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = min(int(pynvml.nvmlDeviceGetCount()), MAX_GPUS)
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - a FAIL line, and the other checks still run
        check("link limits: one PCIe entry per GPU", False, f"NVML: {type(e).__name__}: {e}")
        return
    got = read_links()
    nvlink = {n["gpu"]: n for n in got["nvlink"]}
    print(
        f"links: NVML counts {count} GPUs, torch sees {torch.cuda.device_count()}; "
        "GB/s per direction"
    )
    print(
        "gpu  bus_id            nvlink_up  version  nvlink_GB/s  source         pcie     GB/s  max"
    )
    for p in got["pcie"]:
        n = nvlink.get(p["gpu"], {})
        print(
            f"{p['gpu']:3}  {_cell(p.get('bus_id')):16}  {_cell(n.get('links_up')):>9}  "
            f"{_cell(n.get('version')):>7}  {_cell(n.get('gbytes_per_s'), '.1f'):>11}  "
            f"{_cell(n.get('rate_source')):13}  "
            f"{_cell(p.get('gen'))}x{_cell(p.get('width')):<5}  "
            f"{_cell(p.get('gbytes_per_s'), '.1f'):>5}  "
            f"{_cell(p.get('max_gen'))}x{_cell(p.get('max_width'))} "
            f"{_cell(p.get('max_gbytes_per_s'), '.1f')}"
            + "".join(f"  ({w})" for w in (p.get("why"), n.get("why")) if w),
            flush=True,
        )
    for nic in got["nics"]:
        print(
            f"nic  {nic['device']}:{nic['port']}  {_cell(nic.get('state'))}  "
            f"{_cell(nic.get('link_layer'))}  {_cell(nic.get('gbit_per_s'))} Gbit/s  "
            f"({_cell(nic.get('rate_text'))})" + (f"  {nic['why']}" if nic.get("why") else ""),
            flush=True,
        )
    for part, line in got["why"].items():
        print(f"   why {part}: {line}", flush=True)
    gpus = [p["gpu"] for p in got["pcie"]]
    known = all(p.get("gen") and p.get("width") for p in got["pcie"])
    check(
        "link limits: one PCIe entry per GPU",
        gpus == list(range(count)) and known and "nvml" not in got["why"],
        f"{len(gpus)} PCIe entries for {count} GPUs, gen and width known: {known}; "
        f"{len(got['nvlink'])} with NVLink, {len(got['nics'])} NIC ports",
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("FAIL  no CUDA device: run this on a GPU machine", flush=True)
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29571")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    big = torch.ones(16 * 2**20, device="cuda")  # 64 MiB
    out = tempfile.mkdtemp(prefix="wsprof-gpu-")
    path = wsprof.patch(out, device_time=True)
    for _ in range(args.calls):
        dist.all_reduce(big)
    torch.cuda.synchronize()
    wsprof.unpatch()
    trace = read_trace(str(path))
    calls = trace.calls
    timed = calls.device_ns[calls.device_ns >= 0]
    check(
        "device time on every call",
        len(timed) == args.calls == len(calls),
        f"{len(timed)} of {len(calls)} calls timed",
    )
    if len(timed):
        dev_ms = statistics.median(timed.tolist()) / 1e6
        host_ms = statistics.median(calls.duration_ns.tolist()) / 1e6
        check(
            "device time is plausible",
            0 < dev_ms < 1000,
            f"median device {dev_ms:.3f} ms, host {host_ms:.3f} ms per 64 MiB all_reduce",
        )
    nccl = [k for k in trace.counters if k.startswith("nccl.")]
    has_hook = hasattr(dist.ProcessGroup, "_register_on_completion_hook")
    check(
        "NCCL completion hook counters",
        bool(nccl) or not has_hook,
        f"{nccl or 'none'} (torch has the hook: {has_hook})",
    )
    small = torch.ones(1024, device="cuda")
    per_call_host_ns(small, 100)
    base, hooked = [], []
    for _ in range(5):
        base.append(per_call_host_ns(small, 500))
        wsprof.patch(tempfile.mkdtemp(prefix="wsprof-gpu-bench-"))
        hooked.append(per_call_host_ns(small, 500))
        wsprof.unpatch()
    b, h = statistics.median(base), statistics.median(hooked)
    check(
        "hook cost on NCCL",
        h - b < 10_000,
        f"{b:.0f} -> {h:.0f} ns per 4 KiB all_reduce (+{h - b:.0f} ns, ratio {h / b:.3f})",
    )
    motivating_pattern()
    probe_costs()
    flight_case()
    dist.destroy_process_group()
    sharing_case()
    links_case()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests"],
        capture_output=True,
        text=True,
        check=False,
    )
    tail = done.stdout.strip().splitlines()[-1:] or ["no output"]
    check("pytest -m cuda", done.returncode == 0 and "skipped" not in tail[0], tail[0])
    failed = [r for r in RESULTS if not r[1]]
    print(f"{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
