"""Target process for ``scripts/bench_attach.py``: a torch-like process with ~150 threads.

Starts the Python threads a training process typically has, most of them idle: threads blocked
on ``threading.Event.wait`` (watchdogs, shutdown waiters), on ``queue.Queue.get`` (a data-loader
pin-memory thread, a checkpoint-writer pool, log shippers), in ``Condition.wait`` with a timeout
or ``time.sleep`` loops (heartbeats, NCCL-style watchdogs), and a few that do light periodic work
(metrics, progress, a tiny matmul every few tens of ms). torch's intra-op pool is set with
``torch.set_num_threads(--torch-threads)`` (default 1, which keeps the timing stable on a
2-core machine where py-spy and the driver need the other core); torch's inter-op pool is
started too.

Then it calibrates one *unit* of work (small matmuls plus Python bookkeeping, about
``--unit-ms`` ms) once, and serves commands from stdin, one per line, so the driver
synchronises on its output rather than on sleeps:

* ``run N``: run N units in the main thread; prints
  ``phase <N> <wall_ns> <cpu_ns> <us,us,...>`` (phase wall time, process CPU time, each unit's
  duration in microseconds);
* ``info``: prints ``info py_threads=<n> os_threads=<n>``;
* ``quit`` or end of input: exits.

At start it prints ``ready unit_ms=<calibrated> py_threads=<n> os_threads=<n>``.

Usage: python scripts/bench_attach_target.py [--threads 150] [--torch-threads 1] [--unit-ms 5]
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable

import torch

#: Matrix side of the unit's matmuls.
MAT_N = 64
#: Matmuls per unit.
MATMULS = 4
#: Bookkeeping iterations per unit before calibration.
BASE_ITERS = 1000
#: Units timed per calibration step.
CALIBRATE_UNITS = 50
#: Calibration steps (each rescales the bookkeeping to the unit time measured).
CALIBRATE_ROUNDS = 3

_stop = threading.Event()


# -- the background threads --------------------------------------------------------------------


def _event_waiter(ev: threading.Event) -> None:
    ev.wait()


def _queue_consumer(q: queue.Queue[object]) -> None:
    while q.get() is not None:
        pass


def _cond_watchdog(period_s: float) -> None:
    cond = threading.Condition()
    with cond:
        while not _stop.is_set():
            cond.wait(period_s)


def _sleeper(period_s: float) -> None:
    while not _stop.is_set():
        time.sleep(period_s)


def _metrics_worker(period_s: float) -> None:
    """Light periodic Python work: fold a few numbers into a dict, like a metrics logger."""
    stats: dict[str, float] = {}
    i = 0
    while not _stop.wait(period_s):
        i += 1
        for k in range(50):
            key = f"m{k % 10}"
            stats[key] = stats.get(key, 0.0) * 0.9 + (i * k) % 7
        _ = sorted(stats.items())


def _tensor_worker(period_s: float) -> None:
    """Light periodic torch work (a tiny matmul), like a gradient-norm or EMA tracker."""
    a = torch.randn(32, 32)
    while not _stop.wait(period_s):
        a = torch.tanh(a @ a.T * 0.01)


#: The light periodic workers: name, function, period in seconds.
BUSY: list[tuple[str, Callable[[float], None], float]] = [
    ("metrics", _metrics_worker, 0.05),
    ("progress", _metrics_worker, 0.1),
    ("heartbeat", _metrics_worker, 0.02),
    ("grad-norm", _tensor_worker, 0.05),
    ("ema", _tensor_worker, 0.1),
    ("log-ship", _metrics_worker, 0.2),
]
BUSY_NAMES = {name for name, _, _ in BUSY}


def start_threads(n: int) -> list[threading.Thread]:
    """Start background threads until this process has about ``n`` Python threads.

    Mix (of the threads started here): 6 light periodic workers, then idle ones split among
    ``Event.wait`` (40%), ``Queue.get`` (30%), ``Condition.wait(1 s)`` watchdogs (15%) and
    ``time.sleep(0.5 s)`` loops (15%).
    """
    threads: list[threading.Thread] = []
    ev = threading.Event()
    q: queue.Queue[object] = queue.Queue()

    def spawn(name: str, fn: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=fn, args=args, name=name, daemon=True)
        t.start()
        threads.append(t)

    wanted = max(0, n - threading.active_count())
    for name, fn, period in BUSY[:wanted]:
        spawn(name, fn, period)
    idle = wanted - len(threads)
    for i in range(idle):
        share = i / max(idle, 1)
        if share < 0.40:
            spawn(f"event-wait-{i}", _event_waiter, ev)
        elif share < 0.70:
            spawn(f"queue-get-{i}", _queue_consumer, q)
        elif share < 0.85:
            spawn(f"watchdog-{i}", _cond_watchdog, 1.0)
        else:
            spawn(f"sleeper-{i}", _sleeper, 0.5)
    return threads


# -- the timed workload ------------------------------------------------------------------------


def unit(a: torch.Tensor, b: torch.Tensor, iters: int, book: dict[int, int]) -> torch.Tensor:
    """One fixed unit: a few small matmuls and some Python bookkeeping."""
    c = a
    for _ in range(MATMULS):
        c = torch.tanh(c @ b)
    for i in range(iters):
        book[i & 255] = book.get(i & 255, 0) + i
    return c


def _unit_s(a: torch.Tensor, b: torch.Tensor, iters: int) -> float:
    """Median seconds of one unit over :data:`CALIBRATE_UNITS` units."""
    book: dict[int, int] = {}
    times: list[float] = []
    for _ in range(CALIBRATE_UNITS):
        t0 = time.perf_counter()
        unit(a, b, iters, book)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def calibrate(a: torch.Tensor, b: torch.Tensor, unit_ms: float) -> int:
    """Bookkeeping iterations per unit that make one unit about ``unit_ms`` ms (medians, so
    that a background thread's wake-up does not skew it)."""
    _unit_s(a, b, BASE_ITERS)  # warm-up
    mm_s = _unit_s(a, b, 0)
    iters = BASE_ITERS
    for _ in range(CALIBRATE_ROUNDS):
        per_iter_s = max((_unit_s(a, b, iters) - mm_s) / iters, 1e-9)
        iters = max(1, round((unit_ms / 1e3 - mm_s) / per_iter_s))
    return iters


def run_phase(a: torch.Tensor, b: torch.Tensor, iters: int, n: int) -> str:
    book: dict[int, int] = {}
    durations: list[int] = []
    cpu0 = time.process_time_ns()
    t0 = time.perf_counter_ns()
    prev = t0
    for _ in range(n):
        unit(a, b, iters, book)
        now = time.perf_counter_ns()
        durations.append((now - prev) // 1000)
        prev = now
    wall = prev - t0
    cpu = time.process_time_ns() - cpu0
    return f"phase {n} {wall} {cpu} {','.join(map(str, durations))}"


def os_threads() -> int:
    try:
        return len(os.listdir(f"/proc/{os.getpid()}/task"))
    except OSError:
        return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=150, help="Python threads in all")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--unit-ms", type=float, default=5.0, help="target duration of one unit")
    args = ap.parse_args()

    torch.set_num_threads(args.torch_threads)
    torch.set_num_interop_threads(2)
    torch.manual_seed(0)
    a = torch.randn(MAT_N, MAT_N)
    b = torch.randn(MAT_N, MAT_N) / MAT_N**0.5
    # Start torch's pools as a training process would: an intra-op parallel op and an
    # inter-op task.
    torch.randn(512, 512) @ torch.randn(512, 512)
    torch.jit.wait(torch.jit.fork(torch.add, a, b))  # type: ignore[no-untyped-call]

    threads = start_threads(args.threads)
    iters = calibrate(a, b, args.unit_ms)
    unit_ms = _unit_s(a, b, iters) * 1e3
    print(
        f"ready unit_ms={unit_ms:.3f} py_threads={threading.active_count()} "
        f"os_threads={os_threads()}",
        flush=True,
    )
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            print(run_phase(a, b, iters, int(cmd[1])), flush=True)
        elif cmd[0] == "info":
            print(
                f"info py_threads={threading.active_count()} os_threads={os_threads()}",
                flush=True,
            )
        elif cmd[0] == "quit":
            break
    # End the threads that wake up on their own (so none is inside torch at interpreter exit);
    # the rest stay blocked, as daemons.
    _stop.set()
    for t in threads:
        if t.name in BUSY_NAMES:
            t.join()


if __name__ == "__main__":
    main()
