"""Slowdown that py-spy sampling (as ``wsprof attach`` does it) imposes on a live target.

The target (``scripts/bench_attach_target.py``) is a torch-like process with ~150 Python threads,
most idle (``Event.wait``, ``Queue.get``, ``Condition.wait``, ``sleep``), a few doing light
periodic work, torch's intra-op pool set to ``--torch-threads`` (default 1, so that on a 2-core
machine the timed thread has one core and py-spy plus this driver the other) and its inter-op
pool started. Its main thread runs fixed units of work (small matmuls plus Python bookkeeping,
~5 ms each) in phases of N units on command from stdin, and reports each phase's wall time
and every unit's duration; the driver synchronises on those lines, never on sleeps.

In ONE run of one target, after a warm-up, phases alternate ``off, nonblocking, off, blocking,
off, ...`` for ``--rounds`` rounds, so that drift (thermal, noisy neighbours) hits every mode
alike. An attached phase samples the target with wsprof's own sampler,
``PySpySampler([pid], out_dir, rate_hz=100, window_s=1, blocking=...)`` (one ``py-spy record``
per 1 s window, py-spy restarted every window, the raw output parsed and written to the trace
by the sampler thread in this process), started just before the phase and stopped just after.

Unattached and non-blocking phases run N units (about ``--phase-s`` of wall time); blocking
phases are sized from the previous blocking phase to last about as long (blocking slows the
target several-fold). Each attached phase is compared with the mean of the two unattached
phases around it; the slowdown printed is the median over rounds of those ratios of wall time
per unit (inverse throughput, every pause included) with its standard error. The same ratio of
each unattached phase against its unattached neighbours is printed as the noise floor: on a
shared VM the machine's own speed drifts by tens of percent in bursts, and the result is only as
exact as that row is tight. Pooled ratios over all phases of a mode follow, of wall time per unit
and of the median unit time (robust to slow bursts). Also printed: unit time median/mean/p99
per mode, the target's thread counts (Python, and OS threads from /proc/<pid>/task), its CPU
time per second, the CPU of every other process on the machine (``/proc/stat`` less the target,
this process and its children; a warning when the machine was not quiet), py-spy's own CPU (its
processes are this driver's children: ``RUSAGE_CHILDREN``), the driver's CPU (the sampler
thread), samples collected, the rate py-spy achieved on the timed thread, the threads it
recorded, its window length, and the machine.

Not a test: speed checks stay out of the suite. Default arguments take about 2.5 minutes.

Usage: python scripts/bench_attach.py [--rounds 8] [--phase-s 4] [--rate 100] [--threads 150]
    [--torch-threads 1] [--unit-ms 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import psutil
import torch

from wsprof.capture.pyspy.binary import find_pyspy
from wsprof.capture.pyspy.sampler import PySpySampler
from wsprof.trace.reader import read_trace

TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_attach_target.py")
OFF, NONBLOCKING, BLOCKING = "off", "nonblocking", "blocking"
MODES = (OFF, NONBLOCKING, BLOCKING)
#: Seconds of warm-up before the first measured phase.
WARMUP_S = 3.0
#: A frame only the target's main thread has, and only while it runs a phase.
MAIN_FRAME = "run_phase ("
#: Fewest units in a phase.
MIN_UNITS = 20
#: Guessed slowdown of blocking mode, to size its first phase.
FIRST_BLOCKING_SLOWDOWN = 8
#: CPUs used by other processes during a phase above which the result is flagged.
OTHERS_WARN = 0.1
#: The issue's bar for the non-blocking slowdown.
BAR = 1.02


@dataclass
class Phase:
    mode: str
    wall_s: float
    cpu_s: float
    units_us: list[int]
    samples: int = 0
    windows: int = 0
    errors: int = 0
    pyspy_cpu_s: float = 0.0
    driver_cpu_s: float = 0.0
    sampler_wall_s: float = 0.0
    main_samples: int = 0
    tids: set[int] = field(default_factory=set)
    window_s: list[float] = field(default_factory=list)
    span_s: float = 0.0
    others_cpu_s: float = 0.0

    @property
    def per_unit_s(self) -> float:
        """Phase wall time per unit: the inverse of throughput."""
        return self.wall_s / len(self.units_us)


@dataclass
class Target:
    proc: subprocess.Popen[str]
    unit_ms: float
    py_threads: int
    os_threads: int
    phases: list[Phase] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command(self, line: str, expect: str) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return read_line(self.proc, expect)

    def run(self, n: int, mode: str) -> Phase:
        _, _, wall_ns, cpu_ns, units = self.command(f"run {n}", "phase")
        units_us = [int(u) for u in units.split(",")]
        return Phase(mode, int(wall_ns) / 1e9, int(cpu_ns) / 1e9, units_us)


def read_line(proc: subprocess.Popen[str], expect: str) -> list[str]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(expect):
        err = proc.stderr.read() if proc.stderr is not None and proc.poll() is not None else ""
        sys.exit(f"target said {line.strip()!r}, expected {expect!r}; stderr: {err.strip()}")
    return line.split()


def start_target(threads: int, torch_threads: int, unit_ms: float) -> Target:
    proc = subprocess.Popen(
        [
            sys.executable,
            TARGET,
            "--threads",
            str(threads),
            "--torch-threads",
            str(torch_threads),
            "--unit-ms",
            str(unit_ms),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    fields = dict(kv.split("=") for kv in read_line(proc, "ready")[1:])
    return Target(
        proc, float(fields["unit_ms"]), int(fields["py_threads"]), int(fields["os_threads"])
    )


def cpu_s(who: int) -> float:
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def busy_s() -> float:
    """CPU seconds all CPUs of the machine have been busy (``/proc/stat``), steal included."""
    with open("/proc/stat", encoding="ascii") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / os.sysconf("SC_CLK_TCK")


class Meter:
    """CPU used on the whole machine by anything other than the target, this process and its
    children (py-spy) between :meth:`start` and :meth:`stop`: another job on the machine."""

    def __init__(self, target: psutil.Process) -> None:
        self.target = target
        self._t0 = (0.0, 0.0, 0.0)

    def _now(self) -> tuple[float, float, float]:
        t = self.target.cpu_times()
        ours = t.user + t.system + cpu_s(resource.RUSAGE_SELF) + cpu_s(resource.RUSAGE_CHILDREN)
        return time.perf_counter(), busy_s(), ours

    def start(self) -> None:
        self._t0 = self._now()

    def stop(self, phase: Phase) -> Phase:
        wall, busy, ours = self._now()
        phase.span_s = wall - self._t0[0]
        phase.others_cpu_s = max(0.0, (busy - self._t0[1]) - (ours - self._t0[2]))
        return phase


def attached_phase(target: Target, n: int, mode: str, rate_hz: int, out_dir: str) -> Phase:
    sampler = PySpySampler(
        [target.pid], out_dir, rate_hz=rate_hz, window_s=1, blocking=mode == BLOCKING
    )
    cpu0 = cpu_s(resource.RUSAGE_CHILDREN)  # after the constructor's `py-spy --version`
    self0 = cpu_s(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    sampler.start()
    phase = target.run(n, mode)
    sampler.stop()
    sampler.wait()  # raises the sampler's failure (ptrace denied, py-spy failed)
    phase.sampler_wall_s = time.perf_counter() - t0
    phase.pyspy_cpu_s = cpu_s(resource.RUSAGE_CHILDREN) - cpu0
    phase.driver_cpu_s = cpu_s(resource.RUSAGE_SELF) - self0
    phase.samples, phase.windows, phase.errors = sampler.samples, sampler.windows, sampler.errors
    windows: set[tuple[int, int]] = set()
    for w in read_trace(sampler.path).samples:
        phase.tids.add(w.tid)
        windows.add((w.t_start_ns, w.t_end_ns))
        if any(f.startswith(MAIN_FRAME) for f in w.frames):
            phase.main_samples += w.count
    phase.window_s = [(b - a) / 1e9 for a, b in windows]
    return phase


def ratios(phases: list[Phase], mode: str) -> list[float]:
    """Per phase of ``mode``: its wall time per unit / the mean of the neighbouring off phases'.
    For ``mode`` off: each inner off phase against the off phases before and after it (two
    phases away: twice the distance, so a conservative noise floor)."""
    out: list[float] = []
    step = 2 if mode == OFF else 1
    for i, p in enumerate(phases):
        if p.mode != mode or i < step or i + step >= len(phases):
            continue
        near = [q for q in (phases[i - step], phases[i + step]) if q.mode == OFF]
        if near:
            out.append(p.per_unit_s / statistics.fmean(q.per_unit_s for q in near))
    return out


def pooled(phases: list[Phase]) -> tuple[float, float]:
    """(Wall time per unit over all ``phases``, median of all their unit times), seconds."""
    wall = sum(p.wall_s for p in phases) / sum(len(p.units_us) for p in phases)
    return wall, statistics.median(u for p in phases for u in p.units_us) / 1e6


def median_se(xs: list[float]) -> float:
    """Standard error of the median of ``xs`` (normal approximation: 1.2533 sd / sqrt(n))."""
    return 1.2533 * statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4f} \u00b1{median_se(xs):.4f} [{min(xs):.4f} .. {max(xs):.4f}]"


def machine() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "?"
            )
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{platform.system()} {platform.release()}, {model}, {os.cpu_count()} cores "
        f"({usable} usable), Python {platform.python_version()}, torch {torch.__version__}, "
        f"py-spy {find_pyspy().version_str}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=8, help="rounds of off/nonblocking/off/blocking")
    ap.add_argument("--phase-s", type=float, default=4.0, help="length of an unattached phase")
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--threads", type=int, default=150, help="Python threads in the target")
    ap.add_argument("--torch-threads", type=int, default=1, help="target's torch.set_num_threads")
    ap.add_argument("--unit-ms", type=float, default=5.0, help="one unit of work, ms")
    args = ap.parse_args()

    t_begin = time.perf_counter()
    out_dir = tempfile.mkdtemp(prefix="wsprof-bench-attach-")
    target = start_target(args.threads, args.torch_threads, args.unit_ms)
    try:
        proc = psutil.Process(target.pid)
        warm = target.run(max(1, round(WARMUP_S * 1e3 / target.unit_ms)), "warmup")
        n = max(MIN_UNITS, round(args.phase_s / warm.per_unit_s))
        # Units per phase of each mode: about --phase-s of wall time, sized from the mode's
        # previous phase (blocking slows the target several-fold; its first phase is a guess).
        first_blocking = max(MIN_UNITS, n // FIRST_BLOCKING_SLOWDOWN)
        units: dict[str, int] = {OFF: n, NONBLOCKING: n, BLOCKING: first_blocking}
        schedule = [OFF]
        for _ in range(args.rounds):
            schedule += [NONBLOCKING, OFF, BLOCKING, OFF]
        os_threads_attached = 0
        meter = Meter(proc)
        for mode in schedule:
            meter.start()
            if mode == OFF:
                phase = target.run(units[mode], mode)
            else:
                phase = attached_phase(target, units[mode], mode, args.rate, out_dir)
                units[mode] = max(MIN_UNITS, round(args.phase_s / phase.per_unit_s))
            target.phases.append(meter.stop(phase))
            os_threads_attached = max(os_threads_attached, proc.num_threads())
        target.command("info", "info")
    finally:
        if target.proc.stdin is not None:
            target.proc.stdin.close()
        target.proc.wait(30)
        shutil.rmtree(out_dir, ignore_errors=True)

    by_mode = {m: [p for p in target.phases if p.mode == m] for m in MODES}
    print(f"machine: {machine()}")
    print(
        f"target: {target.py_threads} Python threads, {os_threads_attached} OS threads "
        f"(/proc/<pid>/task), torch.set_num_threads({args.torch_threads}); unit "
        f"{target.unit_ms:.2f} ms (calibrated), {n} units per unattached phase"
    )
    print(
        f"py-spy: {args.rate} Hz, window_s=1 (one py-spy process per second), "
        f"{args.rounds} rounds of off/nonblocking/off/blocking (+ a closing off phase)"
    )
    print(
        f"{'mode':<12}{'unit ms: median':>16}{'mean':>7}{'p99':>8}{'target':>8}{'others':>8}"
        f"{'py-spy':>8}{'driver':>8}{'samples':>9}{'main Hz':>8}{'threads':>8}"
        f"{'window s':>9}{'errors':>7}"
    )
    print(
        f"{'':<12}{'':>16}{'':>7}{'':>8}{'cpu/wall':>8}{'cpu/s':>8}{'cpu/s':>8}{'cpu/s':>8}"
        f"{'/s':>9}{'':>8}{'seen':>8}{'mean':>9}{'':>7}"
    )
    for m in MODES:
        ps = by_mode[m]
        unit_ms = [u / 1e3 for p in ps for u in p.units_us]
        wall = sum(p.wall_s for p in ps)
        swall = sum(p.sampler_wall_s for p in ps)
        row = (
            f"{m:<12}{statistics.median(unit_ms):>16.3f}{statistics.fmean(unit_ms):>7.3f}"
            f"{statistics.quantiles(unit_ms, n=100)[98]:>8.3f}"
            f"{sum(p.cpu_s for p in ps) / wall:>8.3f}"
            f"{sum(p.others_cpu_s for p in ps) / sum(p.span_s for p in ps):>8.3f}"
        )
        if swall:
            wins = [w for p in ps for w in p.window_s]
            row += (
                f"{sum(p.pyspy_cpu_s for p in ps) / swall:>8.3f}"
                f"{sum(p.driver_cpu_s for p in ps) / swall:>8.3f}"
                f"{sum(p.samples for p in ps) / swall:>9.0f}"
                f"{sum(p.main_samples for p in ps) / wall:>8.1f}"
                f"{max(len(p.tids) for p in ps):>8}"
                f"{statistics.fmean(wins) if wins else 0.0:>9.2f}"
                f"{sum(p.errors for p in ps):>7}"
            )
        print(row)
    print(
        f"target cpu/wall: the target's CPU time per second of phase (all its threads); others "
        f"cpu/s: CPU of every other process on the machine (/proc/stat); py-spy "
        f"cpu/s: py-spy's CPU per second attached; driver cpu/s: this process (the sampler "
        f"thread parsing and writing); main Hz: samples of the timed thread per second (the "
        f"rate py-spy achieved; asked {args.rate}); window s: py-spy window length (asked 1)"
    )
    print(
        "slowdown, per round: an attached phase's wall time per unit (inverse throughput) / "
        "the mean of the two unattached phases around it; median over rounds \u00b1its "
        "standard error [min .. max]. Row 'off': each unattached phase against the unattached "
        "ones around it, the noise floor (ideally 1.0000, tight). Pooled: over all phases of "
        "the mode against all unattached ones; the median unit ratio ignores slow bursts"
    )
    print(
        f"{'mode':<12}{'per round: wall per unit':>38}{'pooled: wall/unit':>19}"
        f"{'median unit':>13}{'samples':>9}"
    )
    off_wall, off_median = pooled(by_mode[OFF])
    verdict = ""
    for m in (OFF, NONBLOCKING, BLOCKING):
        wall_r = ratios(target.phases, m)
        if not wall_r:
            continue
        wall, median = pooled(by_mode[m])
        print(
            f"{m:<12}{spread(wall_r):>38}{wall / off_wall:>19.4f}{median / off_median:>13.4f}"
            f"{sum(p.samples for p in by_mode[m]):>9}"
        )
        if m == NONBLOCKING:
            med, se = statistics.median(wall_r), median_se(wall_r)
            if abs(med - BAR) < 2 * se:
                word = f"cannot tell at this noise (the bar is within 2 s.e. of {med:.4f})"
            else:
                word = "within" if med <= BAR else "OVER"
                word = f"{word} the bar"
            verdict = f"non-blocking slowdown {med:.4f} \u00b1{se:.4f} vs bar {BAR:.2f}: {word}"
    print(verdict)
    others = max(p.others_cpu_s / p.span_s for p in target.phases)
    if others > OTHERS_WARN:
        print(
            f"WARNING: other processes used up to {others:.2f} CPUs during a phase; the "
            "machine was not quiet, so the ratios mix py-spy's cost with theirs"
        )
    print(f"total {time.perf_counter() - t_begin:.0f} s")


if __name__ == "__main__":
    main()
