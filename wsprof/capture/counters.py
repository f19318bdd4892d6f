"""In-process counters on a budget: what grows, sampled without becoming the slow probe.

In the motivating case the bug *was* a per-call memory probe whose cost grew with the caching
allocator. So every counter source here is a :class:`Probe` run by one background thread
(:class:`CounterSampler`), never by a hook, and every run is paid from a :class:`Budget`: a
token bucket filled at ``fraction`` of wall time (default 0.5 %, ``$WSPROF_PROBE_BUDGET_PCT``).
Each probe draws on its own share of that budget (:attr:`ProbeSpec.share_pct`; every probe is
one :class:`ProbeSpec` of :data:`PROBES`, whose shares sum to 100 %), so an expensive
probe in debt (walking a large heap) never starves the cheap ones (the allocator's counters).
A probe whose cost grows therefore runs less often on its own; its measured cost is recorded
(``wsprof.probe_us.<name>`` counters and ``meta.self.probes``), and skipped runs are counted.

When a probe runs is a set of triggers:

* ``boundary``: at step and phase boundaries (``wsprof.step()``/``phase()`` bump a counter
  the sampler thread watches; the probe runs on the sampler thread within one tick);
* ``step``: once per step, at the first tick after ``wsprof.step()`` that is not inside a
  sync burst (for costly probes: a stall there would land in the weight-sync time);
* ``burst``: at most every ``interval_s`` while collective calls are being recorded (a
  weight-sync burst);
* ``periodic``: every ``interval_s``.

The probes :func:`install` sets up:

========== ================== ========= ===========================================
probe      triggers           interval  counters
========== ================== ========= ===========================================
allocator  boundary, burst    50 ms     ``cuda<d>.<memory_stats key>``,
                                        ``cuda<d>.mappings``, ``cuda<d>.total_bytes``
process    step, periodic     1 s       ``proc.*`` (psutil), ``gc.gen<i>.*``
gc_types   step               -         ``gc.type.<type>`` (types that grow)
sharing    boundary, periodic 250 ms    ``share.*``, ``proc.rss_shmem_bytes`` once a
                                        tensor was shared (:mod:`wsprof.capture.sharing`)
shm_files  periodic           1 s       ``proc.shm_files`` once a tensor was shared
share_holders periodic        1 s       a ``share_holder`` event naming what holds
                                        a shared storage kept alive (a few times)
flight     step, periodic     1 s       no counter: collectives c10d issued that no hook
                                        saw, from torch's Flight Recorder, when c10d's
                                        counts show some (:mod:`wsprof.capture.flight`)
nvml       periodic           100 ms    ``nvml.gpu<i>.*``, ``nvml.process_gpu_bytes``
snapshot   step               -         a ``memory_snapshot`` event when the mappings
                                        grew at :data:`SNAPSHOT_AFTER_GROWTHS`
                                        step starts in a row (at most
                                        :data:`MAX_TRIGGERED_SNAPSHOTS` per process)
========== ================== ========= ===========================================

The allocator's interval inside bursts is ``$WSPROF_PROBE_INTERVAL_MS``.

A probe that raises is counted; after :data:`MAX_CONSECUTIVE_ERRORS` in a row it is switched
off with an event in the trace. Nothing here ever raises into the training loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wsprof.capture import settings as _settings
from wsprof.contracts.counters import (
    CUDA_MAPPINGS,
    NVML_MEM_TOTAL_BYTES,
    CounterSource,
    nvml_gpu_counter,
    parse_counter,
    probe_cost_counter,
)
from wsprof.contracts.events import EventKind, MemorySnapshot, ProbeTrouble

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

_now = time.monotonic_ns
#: A probe's cost is the CPU time of the sampler thread while it runs (what it takes from the
#: process; time spent waiting for the GIL while the training thread runs is not a cost).
_cpu = time.thread_time_ns

#: Default share of wall time all probes together may cost (the counters issue: <= 0.5 %).
DEFAULT_BUDGET_FRACTION = _settings.DEFAULT_PROBE_BUDGET_FRACTION
#: Most budget saved up while probes are idle, in seconds of probe time (a step boundary after a
#: quiet minute may spend it at once, no more).
BUDGET_CAP_S = 0.02
#: Seconds between two wake-ups of the sampler thread.
TICK_S = 0.05
#: A probe that raises this many times in a row is switched off.
MAX_CONSECUTIVE_ERRORS = 3
#: Weight of the latest cost in a probe's moving average of its cost.
COST_EMA_ALPHA = 0.3

Reading = list[tuple[str, float]]


class Budget:
    """A token bucket of probe time: tokens (ns) accrue at ``fraction`` of wall time, up to
    ``cap_ns``; a probe may start while tokens cover its expected cost (a probe dearer than
    half the cap: when the bucket is at least half full, so that cheaper probes run in the same
    round), and its measured cost is taken out (the balance may go
    negative; then nothing runs until it refills).

    Over any wall interval W, probes spend at most ``cap_ns + fraction * W`` plus one probe's
    overshoot. Thread-safe.

    Args:
        fraction: share of wall time, 0 < fraction <= 1.
        cap_ns: most tokens saved up, ns.
        clock: monotonic ns (a test may pass its own).
    """

    def __init__(
        self,
        fraction: float = DEFAULT_BUDGET_FRACTION,
        cap_ns: int = int(BUDGET_CAP_S * 1e9),
        clock: Callable[[], int] = _now,
    ) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"budget fraction {fraction!r} is not in (0, 1]")
        self.fraction = fraction
        self.cap_ns = cap_ns
        self._clock = clock
        self._t = clock()
        self.t0_ns = self._t
        self.tokens_ns = float(cap_ns)
        self.spent_ns = 0
        self._lock = threading.Lock()

    def _refill(self) -> None:
        t = self._clock()
        self.tokens_ns = min(self.cap_ns, self.tokens_ns + (t - self._t) * self.fraction)
        self._t = t

    def allows(self, expected_ns: float) -> bool:
        """Whether a probe expected to cost ``expected_ns`` may run now."""
        with self._lock:
            self._refill()
            return self.tokens_ns > 0 and self.tokens_ns >= min(expected_ns, self.cap_ns / 2)

    def spend(self, cost_ns: int) -> None:
        """Take a probe's measured cost out of the bucket."""
        with self._lock:
            self._refill()
            self.tokens_ns -= cost_ns
            self.spent_ns += cost_ns

    def share(self) -> float:
        """Probe time spent / wall time since the budget was created."""
        return self.spent_ns / max(self._clock() - self.t0_ns, 1)


@dataclass
class Probe:
    """One counter source and its accounting.

    Args:
        name: short name (``allocator``, ``process``, ``gc_types``, ``nvml``).
        read: returns (counter name, value) pairs; may raise (counted, never propagated).
        when: triggers, a subset of {``boundary``, ``step``, ``burst``, ``periodic``}.
        interval_s: least seconds between two ``burst`` or ``periodic`` runs.
    """

    name: str
    read: Callable[[], Reading]
    when: frozenset[str] = frozenset({"boundary"})
    interval_s: float = 1.0
    runs: int = 0
    skipped: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    total_ns: int = 0
    max_ns: int = 0
    cost_ema_ns: float = 0.0
    last_ns: int = 0
    off: bool = False
    last_error: str = ""
    #: a step started and this ``step`` probe has not run for it yet
    pending: bool = False
    #: this probe's own budget; None draws on the sampler's
    budget: Budget | None = None

    def stats(self) -> dict[str, Any]:
        """What ``meta.self.probes[name]`` holds (costs in ns)."""
        return {
            "when": sorted(self.when),
            "interval_s": self.interval_s,
            "runs": self.runs,
            "skipped": self.skipped,
            "errors": self.errors,
            "total_ns": self.total_ns,
            "mean_ns": self.total_ns // self.runs if self.runs else None,
            "max_ns": self.max_ns,
            "off": self.off,
        }


@dataclass
class CounterSampler:
    """Runs probes on one daemon thread and queues their readings on the recorder.

    Args:
        recorder: where readings (``counters``) and events go; its ``calls`` queue tells a
            sync burst.
        probes: the sources.
        budget: probe-time budget of the probes that have none of their own; the total of
            all budgets is reported.
        boundaries: returns a number that changes at every step/phase boundary.
        steps: returns a number that changes at every step start.
        tick_s: seconds between wake-ups.
    """

    recorder: Recorder
    probes: Sequence[Probe]
    budget: Budget = field(default_factory=Budget)
    boundaries: Callable[[], int] = lambda: 0
    steps: Callable[[], int] = lambda: 0
    tick_s: float = TICK_S
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _seen_boundary: int = 0
    _seen_step: int = 0
    _last_call: Any = None

    def start(self) -> None:
        """Run one round of every probe the budget allows now (a baseline; once-per-step
        probes wait for the first step: a short run without steps never pays for them), then
        every tick."""
        self._seen_boundary = self.boundaries()
        self._seen_step = self.steps()
        self.tick(every=True, per_step=False)
        self._thread = threading.Thread(target=self._run, name="wsprof-counters", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after a last round of what the budget allows (before the recorder's
        last flush). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self.tick(every=True)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def _in_burst(self) -> bool:
        """Records were written since the last round (collectives are being issued)."""
        last = self.recorder.written()
        burst = bool(last != self._last_call)
        self._last_call = last
        return burst

    def tick(self, every: bool = False, per_step: bool = True) -> None:
        """One round: run every probe that is due (``every``: each probe is due; with
        ``per_step`` False, each but the ``step`` probes) and that the budget allows. Never
        raises."""
        try:
            b = self.boundaries()
            boundary = b != self._seen_boundary
            self._seen_boundary = b
            st = self.steps()
            new_step = st != self._seen_step
            self._seen_step = st
            burst = self._in_burst()
            now = _now()
            for p in self.probes:
                if p.off:
                    continue
                if new_step and "step" in p.when:
                    p.pending = True
                waited = now - p.last_ns >= p.interval_s * 1e9
                due = (
                    (every and (per_step or "step" not in p.when))
                    or (boundary and "boundary" in p.when)
                    or (p.pending and not burst)
                    or (waited and ("periodic" in p.when or (burst and "burst" in p.when)))
                )
                if not due:
                    continue
                p.pending = False
                if not (p.budget or self.budget).allows(p.cost_ema_ns):
                    p.skipped += 1
                    continue
                self._run_probe(p, now)
        except Exception as e:  # noqa: BLE001 - never raise into training
            self.recorder.internal_error("counters", e)

    def _run_probe(self, p: Probe, now: int) -> None:
        t0 = _cpu()
        try:
            reading = p.read()
        except Exception as e:  # noqa: BLE001 - a failing source is counted, not raised
            reading = None
            p.errors += 1
            p.consecutive_errors += 1
            p.last_error = f"{type(e).__name__}: {e}"
            if p.errors == 1:
                ev = ProbeTrouble(probe=p.name, message=p.last_error)
                self.recorder.event(EventKind.PROBE_ERROR, ev.encode())
            if p.consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                p.off = True
                self.recorder.event(
                    EventKind.PROBE_OFF,
                    ProbeTrouble(
                        kind=EventKind.PROBE_OFF,
                        probe=p.name,
                        message=f"off after {p.consecutive_errors} errors in a row "
                        f"({p.last_error})",
                    ).encode(),
                )
        cost = _cpu() - t0
        (p.budget or self.budget).spend(cost)
        p.last_ns = now
        p.runs += reading is not None
        p.total_ns += cost
        p.max_ns = max(p.max_ns, cost)
        p.cost_ema_ns = (
            cost if p.runs <= 1 else (COST_EMA_ALPHA * cost + (1 - COST_EMA_ALPHA) * p.cost_ema_ns)
        )
        if reading is None:
            return
        p.consecutive_errors = 0
        t = _now()
        q = self.recorder.counters
        for name, value in reading:
            q.append((t, name, float(value)))
        q.append((t, probe_cost_counter(p.name), cost / 1e3))

    def _budgets(self) -> list[Budget]:
        out = [self.budget] + [p.budget for p in self.probes if p.budget is not None]
        return list({id(b): b for b in out}.values())

    def fraction(self) -> float:
        """The share of wall time all probes together may spend: the sum of the budgets in use
        (the sampler's own counts only when a probe draws on it)."""
        own = [p.budget for p in self.probes if p.budget is not None]
        shared = any(p.budget is None for p in self.probes)
        return sum(b.fraction for b in own) + (self.budget.fraction if shared else 0.0)

    def spent_ns(self) -> int:
        """Probe time spent so far, ns (CPU time of the sampler thread in probes)."""
        return sum(b.spent_ns for b in self._budgets())

    def stats(self) -> dict[str, Any]:
        """``meta.self.probes``: per probe runs, skips, errors and cost; and the budget."""
        return {
            "budget_fraction": self.fraction(),
            "share": self.spent_ns() / max(_now() - self.budget.t0_ns, 1),
            "spent_ns": self.spent_ns(),
            "by_probe": {p.name: p.stats() for p in self.probes},
        }


#: Consecutive step starts at which the allocator's mappings (segments without expandable
#: segments) must have grown for a memory snapshot to be summarised: growth that persists for a
#: few steps, not one allocation.
SNAPSHOT_AFTER_GROWTHS = 5
#: Most snapshots taken on a growth trigger per process (each walks every block).
MAX_TRIGGERED_SNAPSHOTS = 2


class _SnapshotTrigger:
    """Summarises a memory snapshot when the allocator keeps growing (see the module table)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.last: float | None = None
        self.growths = 0
        self.taken = 0

    def __call__(self) -> Reading:
        from wsprof.capture import allocator

        if self.taken >= MAX_TRIGGERED_SNAPSHOTS:
            return []
        by_key = {
            c.key: v
            for k, v in allocator.read_allocator()
            if (c := parse_counter(k)) is not None and c.source is CounterSource.CUDA
        }
        value = by_key.get(CUDA_MAPPINGS, by_key.get("segment.all.current"))
        if value is None:
            return []
        self.growths = self.growths + 1 if self.last is not None and value > self.last else 0
        self.last = value
        if self.growths < SNAPSHOT_AFTER_GROWTHS:
            return []
        self.growths = 0
        self.taken += 1
        record_snapshot(
            self.recorder,
            f"growth: mappings/segments rose at "
            f"{SNAPSHOT_AFTER_GROWTHS} step starts in a row (now {value:.0f})",
        )
        return []


def record_snapshot(recorder: Recorder, reason: str) -> dict[str, Any] | None:
    """Summarise ``torch.cuda.memory_snapshot()`` into a ``memory_snapshot`` event (JSON: the
    summary of :func:`wsprof.capture.allocator.summarize_snapshot`, the reason and its cost in
    ns). None, and no event, while CUDA is not initialised."""
    from wsprof.capture import allocator

    t0 = time.perf_counter_ns()
    summary = allocator.take_snapshot_summary()
    if summary is None:
        return None
    summary = {**summary, "reason": reason, "cost_ns": time.perf_counter_ns() - t0}
    recorder.event(EventKind.MEMORY_SNAPSHOT, MemorySnapshot(summary=summary).encode())
    return summary


@dataclass(frozen=True)
class ProbeContext:
    """What a probe's reader is built from (:attr:`ProbeSpec.make`).

    Args:
        recorder: where readings and events go.
        burst_interval_s: the allocator's interval inside sync bursts, s.
    """

    recorder: Recorder
    burst_interval_s: float


@dataclass(frozen=True)
class ProbeSpec:
    """One counter probe of :func:`install`: the one place a new probe goes is :data:`PROBES`.

    Args:
        name: short name (``probe_us.<name>`` counters, ``meta.self.probes[name]``).
        share_pct: its share of the probe budget, percent (an integer > 0); the shares of
            :data:`PROBES` sum to 100 exactly (:func:`check_shares`), so a new probe must take
            its share from the others.
        when: triggers (see the module docstring).
        interval_s: least seconds between two ``burst`` or ``periodic`` runs; None: the burst
            interval (``$WSPROF_PROBE_INTERVAL_MS``).
        make: builds the reader; returns a string instead when the source is unavailable here
            (why, recorded as a ``counters`` event).
    """

    name: str
    share_pct: int
    when: frozenset[str]
    interval_s: float | None
    make: Callable[[ProbeContext], Callable[[], Reading] | str]


def _allocator_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    from wsprof.capture import allocator

    total_sent: list[bool] = []

    def read_allocator() -> Reading:
        out = allocator.read_allocator()
        if out and not total_sent:
            total = allocator.device_total_bytes()
            if total is not None:
                out.append(allocator.total_reading(out, total))
                total_sent.append(True)
        return out

    return read_allocator


def _process_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    import psutil

    from wsprof.capture import process_stats

    me = psutil.Process()
    me.cpu_percent(None)

    def read_process() -> Reading:
        return process_stats.process_reading(me) + process_stats.gc_reading()

    return read_process


def _gc_types_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    from wsprof.capture import process_stats

    return process_stats.GrowingTypes()


def _sharing_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    from wsprof.capture import sharing

    return sharing.reading


def _shm_files_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    from wsprof.capture import sharing

    return sharing.shm_files


def _share_holders_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    from wsprof.capture import sharing

    return sharing.search_holders


def _flight_probe(ctx: ProbeContext) -> Callable[[], Reading] | str:
    reader = ctx.recorder.flight
    if reader is None:
        return "no Flight Recorder reads: the collective hooks are not installed"
    return reader.read  # type: ignore[no-any-return]


def _snapshot_probe(ctx: ProbeContext) -> Callable[[], Reading]:
    return _SnapshotTrigger(ctx.recorder)


def _nvml_probe(ctx: ProbeContext) -> Callable[[], Reading] | str:
    import os

    from wsprof.capture.nvml import Nvml

    nvml = Nvml()
    if not nvml.ok:
        return f"no NVML counters: {nvml.why}"
    pid = os.getpid()
    nvml_totals = nvml.total_bytes()
    sent: list[bool] = []

    def read_nvml() -> Reading:
        out = nvml.reading_for(pid)
        if not sent:
            out += [
                (nvml_gpu_counter(i, NVML_MEM_TOTAL_BYTES), float(b))
                for i, b in nvml_totals.items()
            ]
            sent.append(True)
        return out

    return read_nvml


#: Every counter probe, in the order a round runs them (see the module table). A probe's
#: budget is its share of the whole; NVML's share stays unused where there is no NVML.
PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec("allocator", 30, frozenset({"boundary", "burst"}), None, _allocator_probe),
    ProbeSpec("process", 13, frozenset({"step", "periodic"}), 1.0, _process_probe),
    ProbeSpec("gc_types", 8, frozenset({"step"}), 1.0, _gc_types_probe),
    ProbeSpec("sharing", 10, frozenset({"boundary", "periodic"}), 0.25, _sharing_probe),
    ProbeSpec("shm_files", 2, frozenset({"periodic"}), 1.0, _shm_files_probe),
    ProbeSpec("share_holders", 3, frozenset({"periodic"}), 1.0, _share_holders_probe),
    ProbeSpec("snapshot", 4, frozenset({"step"}), 1.0, _snapshot_probe),
    ProbeSpec("flight", 15, frozenset({"step", "periodic"}), 1.0, _flight_probe),
    ProbeSpec("nvml", 15, frozenset({"periodic"}), 0.1, _nvml_probe),
)


def check_shares(specs: Sequence[ProbeSpec]) -> None:
    """Check that probe names are unique and their shares are integers > 0 summing to 100.

    Raises:
        ValueError: one line saying which rule the specs break.
    """
    names = [p.name for p in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"counter probes named twice: {sorted(names)}")
    bad = [
        p.name
        for p in specs
        if isinstance(p.share_pct, bool) or not isinstance(p.share_pct, int) or p.share_pct <= 0
    ]
    if bad:
        raise ValueError(f"counter probes {bad}: share_pct must be an integer percent > 0")
    total = sum(p.share_pct for p in specs)
    if total != 100:
        raise ValueError(
            f"counter probe shares sum to {total} %, not 100 %: give a new probe "
            "its share out of the others'"
        )


check_shares(PROBES)

#: The allocator's default interval inside sync bursts, ms (``$WSPROF_PROBE_INTERVAL_MS``).
DEFAULT_BURST_INTERVAL_MS = _settings.DEFAULT_PROBE_INTERVAL_MS


def install(
    recorder: Recorder,
    boundaries: Callable[[], int],
    steps: Callable[[], int],
    *,
    fraction: float | None = None,
    interval_s: float | None = None,
    probes: Sequence[ProbeSpec] = PROBES,
) -> CounterSampler:
    """Set up ``probes`` (default: every one of :data:`PROBES`) on ``recorder`` and start
    sampling.

    Args:
        recorder: where readings go.
        boundaries: changes at every step and phase boundary; ``steps``: at every step start.
        fraction: share of wall time all probes may cost, in (0, 1]; default
            :data:`DEFAULT_BUDGET_FRACTION` (the session passes ``$WSPROF_PROBE_BUDGET_PCT``).
        interval_s: the allocator's interval inside bursts, s; default
            :data:`DEFAULT_BURST_INTERVAL_MS` (the session passes ``$WSPROF_PROBE_INTERVAL_MS``).
        probes: the probe specs (their shares checked by :func:`check_shares`).

    Returns:
        The running sampler (stop it before the recorder's last flush).

    Raises:
        ValueError: ``probes`` whose shares do not sum to 100 %, or a bad ``fraction``.
    """
    check_shares(probes)
    if fraction is None or interval_s is None:
        from wsprof.capture import settings as cfg

        s = cfg.Settings()  # the defaults: the session passes its settings' values
        if fraction is None:
            fraction = s.probe_budget_fraction or DEFAULT_BUDGET_FRACTION
        if interval_s is None:
            interval_s = (s.probe_interval_ms or DEFAULT_BURST_INTERVAL_MS) / 1e3
    Budget(fraction)  # checks it
    ctx = ProbeContext(recorder, interval_s)
    built: list[Probe] = []
    for spec in probes:
        reader = spec.make(ctx)
        if isinstance(reader, str):
            recorder.event(EventKind.COUNTERS, reader)
            continue
        share = spec.share_pct / 100
        built.append(
            Probe(
                spec.name,
                reader,
                spec.when,
                interval_s if spec.interval_s is None else spec.interval_s,
                budget=Budget(fraction * share, cap_ns=int(BUDGET_CAP_S * 1e9 * share)),
            )
        )
    sampler = CounterSampler(recorder, built, Budget(fraction), boundaries, steps)
    sampler.start()
    return sampler
