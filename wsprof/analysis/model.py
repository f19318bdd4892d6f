"""Results of analysis: what every renderer (HTML, text, JSON) reads. Pure data, no torch.

Units are in field names (``_s`` seconds, ``_ns`` nanoseconds, ``_bytes`` bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wsprof.analysis.coverage_model import Coverage
from wsprof.analysis.evidence import Evidence
from wsprof.analysis.sharing import Sharing
from wsprof.contracts.overhead import SelfOverhead
from wsprof.contracts.series import Series
from wsprof.contracts.units import (
    Unit,
    fmt_bytes_decimal,
    fmt_duration,
    fmt_rate,
    fmt_share_of,
)
from wsprof.contracts.words import Words

#: Every shape a per-step series can get (see :mod:`wsprof.analysis.growth`).
SHAPES = (
    "flat",
    "warmup_then_flat",
    "step_change",
    "linear",
    "superlinear",
    "exponential",
    "sawtooth",
)

#: Shapes that mean "grows step after step".
GROWING_SHAPES = frozenset({"linear", "superlinear", "exponential"})


#: Finding severities, lowest first.
class Severity(Words):
    """How much a finding or a diagnosis matters, least first."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


SEVERITIES = tuple(Severity)
#: The kinds of finding a renderer singles out (the rules' own ``kind``; a renderer imports no
#: rule module): a rank named as an outlier, and the rollout share the headline already shows.
OUTLIER_RANK = "outlier_rank"
ROLLOUT_SHARE_KIND = "rollout_share"


#: What each fitted model is called in a sentence (``projected ... by the linear fit``).
MODEL_WORDS = {
    "linear": "straight-line",
    "config_linear": "per-configuration straight-line",
    "quadratic": "quadratic",
    "exponential": "exponential",
}


@dataclass(frozen=True)
class Projection:
    """The fitted model's value at a future step.

    Attributes:
        step: the step number projected to.
        value: the model's value there, series unit.
        model: the fitted model (``linear``, ``quadratic``, ``exponential``,
            ``config_linear``): weighted least squares of :mod:`wsprof.analysis.growth`, which
            is not the Theil-Sen slope of the verdict (the two differ when the curve bends).
        fit_first_step: first step number of the points the model was fitted to.
        fit_last_step: last step number of those points.
    """

    step: int
    value: float
    model: str = ""
    fit_first_step: int | None = None
    fit_last_step: int | None = None

    def basis(self) -> str:
        """``the straight-line fit of steps 0-7``: where the projection comes from."""
        word = MODEL_WORDS.get(self.model, self.model or "fitted")
        if self.fit_first_step is None or self.fit_last_step is None:
            return f"the {word} fit"
        return f"the {word} fit of steps {self.fit_first_step}-{self.fit_last_step}"


@dataclass(frozen=True)
class GrowthVerdict:
    """The shape of a series and whether it is an accumulating problem.

    Attributes:
        shape: one of :data:`SHAPES`.
        accumulating: True when the series grows step after step (and keeps growing).
        confidence: 0..1, how sure the classifier is of ``accumulating``.
        slope_per_step: robust (Theil-Sen) slope, series unit per step (per step number as
            logged: a log every 3 steps counts 3 steps between its points).
        growth_factor_per_step: ratio per step (step number) of the exponential fit (or of the
            last points for very short series); None when the series is not positive.
        change_point: *position* (index into the values, and into ``Series.steps``) of the first
            point after a level change (step_change / warmup); its step number is
            ``steps[change_point]`` (also the statistic ``change_point_step``).
        fitted: the chosen model evaluated at every point (for plots), same length as the input.
        projection: the chosen model at ``projection.step``, a step number (growing shapes only).
        budget_step: first step number at which the projection crosses the given budget, if any.
        evidence: the numbers the verdict rests on (test statistics, p-values, criteria).
        outlier_steps: step numbers of single-point excursions (a checkpoint save, an eval step)
            left out of the verdict because with them in, and only then, it said growth; and
            the periodic spikes (``spike_steps``), always left out.
        spike_steps: step numbers of isolated high points at a regular period on the series'
            base (checkpoint saves, evals every N steps), left out of the trend.
        spike_period: steps between those spikes, None when there are none.
    """

    shape: str
    accumulating: bool
    confidence: float
    slope_per_step: float
    growth_factor_per_step: float | None
    change_point: int | None
    fitted: tuple[float, ...]
    projection: Projection | None
    budget_step: int | None = None
    evidence: dict[str, float] = field(default_factory=dict)
    outlier_steps: tuple[int, ...] = ()
    spike_steps: tuple[int, ...] = ()
    spike_period: int | None = None

    def _stat(self, name: str) -> float | None:
        """One of the classifier's statistics (:mod:`wsprof.analysis.growth`), None if absent:
        the one place their names are read; others use the typed properties below."""
        value = self.evidence.get(name)
        return float(value) if value is not None else None

    @property
    def judged_from(self) -> int:
        """Position of the first point the verdict judged: after a slow start that was left
        out (statistic ``warmup_points``, :func:`wsprof.analysis.growth.classify`), else 0.
        A first-to-last comparison starts there."""
        return int(self._stat("warmup_points") or 0)

    @property
    def newest_step_alone(self) -> bool:
        """True when growth rested on the newest step alone and the verdict waits for more
        (:func:`wsprof.analysis.growth.hold_newest`)."""
        return bool(self._stat("newest_step_alone"))

    @property
    def slope_lo(self) -> float | None:
        """Low end of the Theil-Sen slope's confidence interval, series unit per step; None
        for a series too short for the interval."""
        return self._stat("theil_sen_slope_lo")


@dataclass(frozen=True)
class SeriesResult:
    """A series and its verdict."""

    series: Series
    verdict: GrowthVerdict


@dataclass(frozen=True)
class Finding:
    """One thing worth acting on.

    Attributes:
        kind: rule name (``accumulating_slowdown``, ``between_layers``, ...).
        severity: 'info' | 'warning' | 'critical'.
        title: one line, with the number that matters.
        evidence: the numbers behind it, typed by its rule (:class:`~wsprof.analysis.evidence.
            Evidence`; its JSON is ``evidence.as_dict()``).
        where: a place (``file:line``, a function, a rank) or None.
        next_step: what to do about it.
        id: ``F1``, ``F2``, ... in the analysis's order (most severe first), set by
            :func:`wsprof.analysis.rules.run_rules`; diagnoses link to findings by it.
    """

    kind: str
    severity: Severity
    title: str
    evidence: Evidence
    where: str | None
    next_step: str
    id: str = ""


#: :attr:`StepRow.sync_wait_source` of waits from c10d's sequence numbers.
WAIT_BY_SEQ = "c10d sequence numbers"
#: :attr:`StepRow.sync_wait_source` of waits from the timing of the ranks' syncs.
WAIT_BY_TIMING = "timing"


@dataclass(frozen=True)
class OpWire:
    """One op's transfers inside one weight sync (:mod:`wsprof.analysis.wire`).

    Attributes:
        op: the canonical op (``broadcast``).
        n_calls: its calls that started inside the sync (barriers are not transfers).
        bytes: the buffers they moved, bytes, as NCCL's tests size a collective: the whole
            gathered or reduced-then-scattered buffer (a gather recorded from one rank's
            input counts that times the group size); calls of unknown size left out.
        bus_bytes: ``bytes`` times each call's bus factor (:func:`wsprof.analysis.wire.
            bus_factor`), bytes; None when a call's factor is unknown (group size unknown,
            gather or scatter to one rank).
        wire_s: time covered by at least one of its calls of known size, from start to
            completion (overlapping async calls count once), clipped to the sync, s.
        n_unknown: calls whose size is unknown (object collectives, sparse tensors).
    """

    op: str
    n_calls: int
    bytes: int
    bus_bytes: float | None
    wire_s: float
    n_unknown: int = 0


@dataclass(frozen=True)
class SyncWire:
    """What one weight sync put on the wire: every op's transfers together
    (:func:`wsprof.analysis.wire.sync_wire`). Fields as :class:`OpWire`'s, summed over ops;
    ``wire_s`` is the union over every op's calls; ``ops`` most bytes first; ``groups`` the
    process groups its transfers ran on (names)."""

    n_calls: int
    bytes: int
    bus_bytes: float | None
    wire_s: float
    n_unknown: int
    ops: tuple[OpWire, ...] = ()
    groups: tuple[str, ...] = ()

    @property
    def algbw(self) -> float | None:
        """Algorithm bandwidth, bytes/s: ``bytes / wire_s`` (NCCL tests' ``algbw``); None
        without transfer time."""
        return self.bytes / self.wire_s if self.wire_s > 0 and self.bytes > 0 else None

    @property
    def busbw(self) -> float | None:
        """Bus bandwidth, bytes/s: ``bus_bytes / wire_s`` (NCCL tests' ``busbw``, comparable
        to a link's peak whatever the op); None when a factor or the time is unknown."""
        if self.bus_bytes is None or self.wire_s <= 0 or self.bytes <= 0:
            return None
        return self.bus_bytes / self.wire_s


@dataclass(frozen=True)
class StepRow:
    """One training step of one process. Phase times are None where no marker gave them.

    ``weight_sync_s`` comes from a ``weight_sync`` phase, else from the detected sync burst.
    """

    step: int
    t_start_ns: int
    t_end_ns: int
    step_s: float
    rollout_s: float | None
    train_s: float | None
    weight_sync_s: float | None
    other_s: float
    n_calls: int
    collective_s: float
    between_layers_s: float
    #: Time inside weight-sync phases covered by no collective call (serialization, RPC, weight
    #: loading between the collectives), s; None without weight-sync phase markers.
    sync_gap_s: float | None = None
    #: Monotonic ns at which the step's weight sync started: its first weight-sync phase span
    #: (markers), its sync run's first call (rhythm), its burst's first call; None without one.
    sync_start_ns: int | None = None
    #: Part of ``weight_sync_s`` spent waiting for peers: how long after this rank the last
    #: rank of the run started the same step's weight sync, s (run clock; needs the traces of
    #: several ranks); None when unknown.
    sync_wait_s: float | None = None
    #: The weight sync's first collective as ``(group, number in the group)``, the same on
    #: every rank (c10d's sequence number: calls read from Flight Recorder dumps); None unknown.
    sync_key: tuple[str, int] | None = None
    #: How :attr:`sync_wait_s` was found: :data:`WAIT_BY_SEQ` (the ranks joined at the same
    #: collective by its sequence number) or :data:`WAIT_BY_TIMING` (ranks that met, inferred
    #: from the spread of their starts and ends); None without a wait.
    sync_wait_source: str | None = None
    #: What the weight sync moved: bytes, time on the wire, per op
    #: (:func:`wsprof.analysis.wire.with_wire`); None without a sync, or in a step whose
    #: calls retention thinned.
    wire: SyncWire | None = None

    @property
    def outside_transfers_s(self) -> float | None:
        """The rank's own weight sync (:attr:`own_sync_s`) less its time on the wire, s: the
        sync's time in no transfer of known size (work between calls, barriers, RPCs, object
        collectives); None without both."""
        own = self.own_sync_s
        if own is None or self.wire is None:
            return None
        return max(own - self.wire.wire_s, 0.0)

    @property
    def own_sync_s(self) -> float | None:
        """``weight_sync_s`` less the wait for peers (:attr:`sync_wait_s`), s: the rank's own
        time in its weight sync; ``weight_sync_s`` when the wait is unknown."""
        if self.weight_sync_s is None or self.sync_wait_s is None:
            return self.weight_sync_s
        return max(self.weight_sync_s - self.sync_wait_s, 0.0)

    @property
    def rollout_share(self) -> float | None:
        """rollout_s / step_s, 0..1 (a rollout phase that outlasts its step's span counts as
        the whole step), or None."""
        if self.rollout_s is None or self.step_s <= 0:
            return None
        return min(self.rollout_s / self.step_s, 1.0)


@dataclass(frozen=True)
class OpStats:
    """Per canonical op (and the names it was called by) over the whole run of one process."""

    op: str
    apis: tuple[str, ...]
    n_calls: int
    total_s: float
    median_us: float
    p99_us: float
    between_layers_median_us: float
    bytes_total: int


@dataclass(frozen=True)
class CallCostModel:
    """Host time of one collective call as a line in its payload, ``fixed_us + us_per_mib *
    MiB``: least squares (``scipy.stats.linregress``) through the median latency of each
    payload-size class (powers of two), so that neither many tiny calls nor a few huge ones
    dominate. ``fixed_us`` (clipped at 0) is what every call pays whatever its size: what
    bucketing small tensors into fewer collectives saves per call avoided.

    Attributes:
        fixed_us: per-call cost at zero bytes, µs.
        us_per_mib: added cost per MiB of payload, µs.
        n_sizes: payload-size classes the line was fitted through (>= 2).
    """

    fixed_us: float
    us_per_mib: float
    n_sizes: int


@dataclass(frozen=True)
class GpuUtil:
    """NVML GPU utilization samples of one process, inside and outside weight-sync phases.

    Attributes:
        sync_pct: mean utilization during weight sync, percent.
        other_pct: mean utilization outside weight sync, percent (None without samples there).
        n_sync: samples during weight sync.
    """

    sync_pct: float
    other_pct: float | None
    n_sync: int


@dataclass(frozen=True)
class CallPoints:
    """Per-call latency points for plotting, downsampled keeping extremes.

    Arrays as tuples of equal length: call index in the process, latency (µs), time between
    layers (µs), step, canonical op, and caller site (``function (file:line)`` for the sites
    with the most time, ``other sites`` or ``unknown`` for the rest; empty when not known).
    """

    index: tuple[int, ...]
    latency_us: tuple[float, ...]
    between_layers_us: tuple[float, ...]
    step: tuple[int, ...]
    op: tuple[str, ...]
    n_total: int
    site: tuple[str, ...] = ()


@dataclass(frozen=True)
class CounterTrack:
    """A counter sampled over time and, where calls exist, paired with per-step latency.

    Attributes:
        name: the counter's name (``proc.rss_bytes``).
        t_s: seconds since the process's first record, one per sample.
        value: the counter's value at each sample, in ``unit``.
        unit: what the values measure (:func:`wsprof.contracts.counters.counter_unit`).
    """

    name: str
    t_s: tuple[float, ...]
    value: tuple[float, ...]
    unit: Unit = Unit.OTHER


@dataclass(frozen=True)
class HotFrame:
    """A frame and its share of py-spy samples in one window (or the whole run)."""

    frame: str
    samples: int
    total: int

    @property
    def share(self) -> float:
        return self.samples / self.total if self.total else 0.0


@dataclass(frozen=True)
class WindowSummary:
    """One py-spy sampling window of one process: where its samples were and in which phase.

    Attributes:
        t_start_ns: window start, sampler monotonic ns.
        t_end_ns: window end, sampler monotonic ns.
        n_samples: every sample of the window (all threads), idle ones included.
        n_active: samples whose leaf is not a blocking call.
        top_frame: the leaf frame with most active samples (``total`` is ``n_active``); None
            without active samples.
        common_frame: the deepest frame (``function (file)``) present in at least half of the
            active samples (:func:`wsprof.analysis.samples.common_frame`); None when none is.
        phase_shares: phase -> share of ``n_samples``; idle samples are phase ``idle``,
            samples no pattern matched ``other``.
        rollout_share: rollout samples / ``n_active``; None without active samples.
        weight_sync_share: weight-sync samples / ``n_active``; None without active samples.
        phase_samples: phase -> samples (the counts behind ``phase_shares``).
    """

    t_start_ns: int
    t_end_ns: int
    n_samples: int
    n_active: int
    top_frame: HotFrame | None
    common_frame: str | None
    phase_shares: dict[str, float]
    rollout_share: float | None
    weight_sync_share: float | None
    phase_samples: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FrameShift:
    """One frame's inclusive share of active samples early and late in the sampling.

    Attributes:
        frame: ``function (file)``.
        early_share: share of the early windows' active samples whose stack holds the frame.
        late_share: the same over the late windows.
        early_samples: samples behind ``early_share``.
        late_samples: samples behind ``late_share``.
    """

    frame: str
    early_share: float
    late_share: float
    early_samples: int
    late_samples: int

    @property
    def change(self) -> float:
        """late_share - early_share (positive: gained share)."""
        return self.late_share - self.early_share


@dataclass(frozen=True)
class WindowShift:
    """The first ``k`` sampling windows against the last ``k``: which frames gained share.

    Attributes:
        k: windows on each side.
        n_windows: windows with active samples.
        early_total: active samples in the first ``k`` windows.
        late_total: active samples in the last ``k`` windows.
        gained: frames that gained share, most first.
        lost: frames that lost share, most first.
    """

    k: int
    n_windows: int
    early_total: int
    late_total: int
    gained: tuple[FrameShift, ...]
    lost: tuple[FrameShift, ...]
    #: Each gained frame's inclusive share of every window's active samples, in window order
    #: (0..1; one value per window with active samples): the curve behind early and late.
    per_window: dict[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessAnalysis:
    """Everything analysis derived for one process (one rank)."""

    label: str
    rank: int | None
    pid: int | None
    step_source: StepSource
    steps: tuple[StepRow, ...]
    ops: tuple[OpStats, ...]
    calls: CallPoints
    counters: tuple[CounterTrack, ...]
    hot_frames: tuple[HotFrame, ...]  # leaf frames, most samples first
    hot_stacks: tuple[tuple[tuple[str, ...], int], ...]  # (stack root-first, samples)
    n_samples: int
    meta: dict[str, Any]
    #: py-spy sampling windows of this process, in time order.
    windows: tuple[WindowSummary, ...] = ()
    #: Where the phase patterns came from: a framework name (slime, verl, openrlhf, areal,
    #: trl), ``generic`` (no framework recognised), ``user`` or ``user+<framework>`` (``--phase``
    #: patterns first); None without samples.
    phase_source: str | None = None
    #: First third of the windows against the last third (None with fewer than 2 windows).
    shift: WindowShift | None = None
    #: Per-call cost against payload size (None with fewer than 2 payload-size classes).
    cost_model: CallCostModel | None = None
    #: GPU utilization in and out of weight sync (None without NVML samples in a sync phase).
    gpu_util: GpuUtil | None = None
    #: Whole stacks (root first, per function) of the first and the last third of the sampling
    #: windows, ``(stack, samples)`` most first: the flame charts. Empty with < 2 windows.
    early_stacks: tuple[tuple[tuple[str, ...], int], ...] = ()
    late_stacks: tuple[tuple[tuple[str, ...], int], ...] = ()
    #: Caller site (``function (file:line)``) of most weight-sync calls: the user's function
    #: that issues them, where time between the collectives is spent; None when unknown.
    sync_site: str | None = None
    #: wsprof's own cost and losses in the process (``meta['self']``, typed by the reader).
    self_overhead: SelfOverhead = field(default_factory=SelfOverhead)
    #: How its steps' weight sync was told (``weight-sync phases``, ``sends weights on group
    #: 'X' (12 updates)``, ``payloads of 64 KiB or more of float tensors per step``); None
    #: when no step has one: no weight sync found.
    sync_evidence: str | None = None
    #: One phrase per step left out of its steps (a truncated first or last step).
    left_out: tuple[str, ...] = ()
    #: Tensors it shared with other processes or opened, per update (None: none).
    sharing: Sharing | None = None


@dataclass(frozen=True)
class World:
    """One process world of the run: the processes that share a default group (their own
    ``init_process_group``), with the role analysis gave it (:mod:`wsprof.analysis.worlds`).

    Attributes:
        label: ``world N`` (N from 1, trainer worlds first).
        role: ``trainer``, ``inference engine`` or ``other`` (:class:`wsprof.contracts.roles.Role`).
        size: the world size its processes recorded, None when unknown.
        pids: its processes' pids (None where unknown), in rank order.
        ranks: their ranks in the world (None where unknown).
        store: ``host:port`` of the store its default group rendezvoused through, if known.
        evidence: why this role, one short phrase each (strongest first).
    """

    label: str
    role: str
    size: int | None
    pids: tuple[int | None, ...]
    ranks: tuple[int | None, ...]
    store: str | None
    evidence: tuple[str, ...]

    def line(self) -> str:
        """``world 1: trainer, 2 processes (ranks 0-1, pids 11, 12); evidence: ...``."""
        ranks = [r for r in self.ranks if r is not None]
        span = f"ranks {min(ranks)}-{max(ranks)}" if ranks else "ranks unknown"
        pids = ", ".join(str(p) for p in self.pids if p is not None) or "?"
        why = "; ".join(self.evidence) or "no evidence"
        return (
            f"{self.label}: {self.role}, {len(self.pids)} processes ({span}, pids {pids}); "
            f"evidence: {why}"
        )


@dataclass(frozen=True)
class RankSeries:
    """One process's per-step times, for comparing the ranks of a run (see
    :mod:`wsprof.analysis.ranks`). Per-step tuples all have the length of ``steps``.

    Attributes:
        label: ``rank N`` (or ``pid N``).
        rank: the rank, None when unknown.
        host: host name from the trace, None when unknown.
        pid: process id, None when unknown.
        step_source: where the steps came from (``markers`` | ``rhythm`` | ``bursts`` |
            ``sampled``).
        steps: step numbers.
        weight_sync_s: weight-sync time of each step, s (None where unknown).
        step_s: step time, s.
        between_layers_s: time inside the collective names but outside the backend, s: the
            rank's own time in its collectives (wrappers, probes); peers that wait for it show
            that wait as backend time instead.
        start_s: each step's start on the run clock, s (see :mod:`wsprof.analysis.align`).
        sync_start_s: each step's weight-sync start on the run clock, s (None where unknown).
        clock: how the process was put on the run clock: ``host`` (its host's shared monotonic
            clock), ``process`` (its own anchor) or ``none`` (no anchor: its own clock).
        sync: growth verdict of ``weight_sync_s`` (None when it could not be judged).
        between: growth verdict of ``between_layers_s`` (None when it could not be judged).
        median_weight_sync_s: median of ``weight_sync_s``, s (None without any).
        median_step_s: median of ``step_s``, s.
        sync_lag_s: median over steps of how long after the earliest rank this rank started
            its weight sync, s (aligned ranks only; across hosts within the clock skew).
        wrapper: the foreign wrapper on a collective name with the most time between layers
            in this process (``qualname (file:line)``), None when none was found.
        sync_gap_s: per step, time inside its weight sync in no collective: the rank's own
            work between its collectives, s (None where unknown).
        gap: growth verdict of ``sync_gap_s`` (None when it could not be judged).
        wait_source: how the waits for peers taken out of ``weight_sync_s`` were found:
            :data:`WAIT_BY_SEQ` when any step was joined by sequence numbers, else
            :data:`WAIT_BY_TIMING` when any wait was inferred, else None.
    """

    label: str
    rank: int | None
    host: str | None
    pid: int | None
    step_source: StepSource
    steps: tuple[int, ...]
    weight_sync_s: tuple[float | None, ...]
    step_s: tuple[float, ...]
    between_layers_s: tuple[float, ...]
    start_s: tuple[float, ...]
    sync_start_s: tuple[float | None, ...]
    clock: str
    sync: GrowthVerdict | None
    between: GrowthVerdict | None
    median_weight_sync_s: float | None
    median_step_s: float
    sync_lag_s: float | None = None
    wrapper: str | None = None
    sync_gap_s: tuple[float | None, ...] = ()
    gap: GrowthVerdict | None = None
    #: The process world it belongs to (``world N``: :class:`World`); None when the run has
    #: one world or worlds are unknown. Ranks are compared only within one world.
    world: str | None = None
    wait_source: str | None = None

    def where(self) -> str:
        """``rank 3 (host node-b, pid 4242)``: how findings name the process."""
        parts = [
            f"host {self.host}" if self.host else None,
            f"pid {self.pid}" if self.pid is not None else None,
        ]
        inner = ", ".join(p for p in parts if p)
        return f"{self.label} ({inner})" if inner else self.label


@dataclass(frozen=True)
class WrapperFact:
    """A foreign wrapper on a collective name, or a ``ProcessGroup`` subclass in use.

    Attributes:
        api: the name it sits on (``dist.broadcast``) or ``ProcessGroup`` for a subclass.
        kind: ``name`` (a wrapper on a collective name) or ``group_class``.
        qualname: the wrapper's (or subclass's) qualified name; file and line where defined.
        wraps: what it wraps, outermost first.
        after_patch: found on a re-wrap after ``wsprof.patch()`` (else at patch time).
        between_s: total time between layers of the calls made through ``api``, s (None when
            no call went through it).
    """

    api: str
    kind: str
    qualname: str
    module: str | None
    file: str | None
    line: int | None
    wraps: tuple[str, ...]
    after_patch: bool
    between_s: float | None

    def label(self) -> str:
        """``qualname (file:line)``."""
        return f"{self.qualname} ({self.file}:{self.line})"


#: What a diagnosis can name as its cause (:attr:`Diagnosis.cause`; see
#: :mod:`wsprof.analysis.chains`).
CAUSES = (
    "wrapper",  # a wrapper on the collective names: time between the API and the backend grows
    "call_count",  # more collective calls every step
    "payload",  # more bytes in each weight sync every step
    "sync_part",  # a part of the framework's own weight sync grows (slime's timeline)
    "per_call",  # each call slower, with no wrapper time growing: the backend or communication
    "gaps",  # time in the weight sync outside any collective grows
    "outlier_rank",  # one rank apart from the others
    "shared_buckets",  # weight buckets shared with another process, kept update after update
    "sampled",  # no steps: the weight-sync share of py-spy samples rises
    "unexplained",  # a per-step time grows and no recorded fact says where
    "finding",  # one finding of its own (memory growth, idle GPUs, wsprof's own losses)
)
#: Roles of the links of a chain, in reading order.
LINK_ROLES = ("symptom", "where", "why")


@dataclass(frozen=True)
class Link:
    """One link of a diagnosis chain.

    Attributes:
        role: one of :data:`LINK_ROLES`.
        text: one line with its numbers and units.
        finding_ids: ids of the findings behind it (:attr:`Finding.id`).
        rows: its evidence as ``(label, value)`` pairs, each value formatted in its unit
            (ms, MiB, %), for tables.
    """

    role: str
    text: str
    finding_ids: tuple[str, ...] = ()
    rows: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Diagnosis:
    """One cause and the chain from its symptom to its culprit
    (:func:`wsprof.analysis.chains.diagnose`).

    Attributes:
        id: ``D1``, ``D2``, ... most severe first.
        cause: one of :data:`CAUSES`.
        severity: the most severe of its findings ('info' | 'warning' | 'critical').
        confidence: 0..1 (:func:`wsprof.analysis.chains.confidence_of`).
        title: one line naming the cause and how much it costs.
        symptom: what grows: a per-step time, a share of samples, a counter.
        where: where the added time goes (the wrapper and every name it sits on, per-call
            against call-count growth, gaps outside the collectives); None when no recorded
            fact says (see ``missing``).
        why: what explains it: the frame that gained share of the samples, the counter that
            tracks the slowdown with its fitted cost per unit; empty when nothing does.
        next_step: what to do, in the terms of this chain.
        missing: one line per missing link: which, and how to get it.
        finding_ids: every finding grouped into it, in the analysis's order.
        symptom_series: series key of the symptom's growth curve (``weight_sync_s``), None
            when the symptom is not a per-step series.
        culprit_frame: the why link's frame (``function (file)``), None without one.
        culprit_counter: the why link's counter name, None without one.
        process: label of the process the chain was read from, None for a series input.
    """

    id: str
    cause: str
    severity: Severity
    confidence: float
    title: str
    symptom: Link
    where: Link | None
    why: tuple[Link, ...]
    next_step: str
    missing: tuple[str, ...] = ()
    finding_ids: tuple[str, ...] = ()
    symptom_series: str | None = None
    culprit_frame: str | None = None
    culprit_counter: str | None = None
    process: str | None = None

    @property
    def links(self) -> tuple[Link, ...]:
        """The chain in reading order: symptom, where (when known), why."""
        return (self.symptom, *((self.where,) if self.where is not None else ()), *self.why)

    @property
    def confidence_word(self) -> str:
        """``high`` (>= 0.7), ``medium`` (>= 0.4) or ``low``."""
        if self.confidence >= 0.7:
            return "high"
        return "medium" if self.confidence >= 0.4 else "low"


#: Verdict statuses: problems found, none while the data supports a verdict, or not enough data.
class VerdictStatus(Words):
    """The answer of an analysis."""

    PROBLEMS = "problems"
    NO_PROBLEM = "no_problem"
    INCONCLUSIVE = "inconclusive"


VERDICT_STATUSES = tuple(VerdictStatus)


class StepSource(Words):
    """Where a process's steps came from, strongest evidence first."""

    MARKERS = "markers"  # wsprof.step() / phase markers, or a framework preset's
    TIMELINE = "timeline"  # the framework's own timeline (slime's communication timeline)
    UPDATES = "updates"  # weight updates on its push group
    SHARED = "shared"  # weight buckets it opened by handle (a colocated engine)
    RHYTHM = "rhythm"  # the job's rhythm of collectives
    BURSTS = "bursts"  # bursts of collectives
    SAMPLED = "sampled"  # py-spy windows of the weight-sync phase
    NONE = "none"


def by_step_number(source: str) -> bool:
    """Whether a process's calls carry the number of their step (markers, a framework's
    timeline), so that they are put in steps by number rather than by time."""
    return source in (StepSource.MARKERS, StepSource.TIMELINE)


class AnalysisKind(Words):
    """What an analysis read: a run's traces or a log's or CSV's series."""

    RUN = "run"
    SERIES = "series"


@dataclass(frozen=True)
class Verdict:
    """The one-line answer of an analysis (:mod:`wsprof.analysis.verdict`).

    Attributes:
        status: one of :data:`VERDICT_STATUSES`. ``no_problem`` only when the data can show a
            problem (steps, enough of them, every issued collective recorded).
        n_problems: causes found: diagnoses at warning or above.
        reasons: why the data cannot support a verdict (``inconclusive``), or what limits a
            ``problems`` verdict; each ends with what to do.
    """

    status: VerdictStatus
    n_problems: int = 0
    reasons: tuple[str, ...] = ()
    #: Findings at warning or above (the evidence behind the ``n_problems`` diagnoses).
    n_findings: int = 0


@dataclass(frozen=True)
class Headline:
    """Rollout share and weight-sync time per step, with the step time beside them.

    From the primary process's steps when it has any, else from the per-step series
    ``rollout_share`` and ``weight_sync_s`` (a CSV or a log); computed by
    :func:`wsprof.analysis.headline.headline_of`.

    Attributes:
        source: where the numbers come from (``steps of rank 0``, ``the per-step series of
            X``, ``no steps``).
        process: label of the primary process whose steps were read; None otherwise.
        step_source: where its steps came from (``markers``, ``bursts``, ...); None otherwise.
        n_steps: the primary's steps (a series file: the points of its ``step_s``).
        step_median_s: median step time over its steps, s.
        rollout_share_median: median rollout share of a step, 0..1.
        rollout_share_first: the first representative share (the second of 3 or more: step 0
            often waits on start-up), 0..1.
        rollout_share_last: the last step's share, 0..1.
        weight_sync_median_s: median weight-sync time per step (the sync's span, waiting for
            peers included; a series file's ``weight_sync_s``), s.
        weight_sync_first_s: the first step's weight sync, s.
        weight_sync_last_s: the last step's weight sync, s.
        own_sync_median_s: median of the rank's own weight-sync time (the wait for slower
            ranks taken out), s.
        own_sync_last_s: the last known own weight-sync time, s.
        own_sync_last_step_s: the own weight-sync time of the last step (None when that step
            has none), s.
        weight_sync_share_median: median share of a step spent in its own weight sync, 0..1.
        sync_wait_median_s: median wait for slower ranks to join the sync, s.
        weight_sync_result: the ``weight_sync_s`` series and its verdict, when judged.
        rollout_source: where the rollout share comes from when not from the primary's steps
            (``steps of rank 1``: the rollout ranks marked it; ``sampling windows of rank 0``;
            ``rollout_s / step_s of X``); None when from the primary's steps or unknown.
        sync_evidence: how the primary's weight sync was told (``sends weights on group
            'slime-pp_0' (13 updates)``, ``weight-sync phases``, ...); None otherwise.
        no_sync_found: why the primary's steps have no weight sync (no push by any evidence):
            the headline says so instead of a number; None when it has one or has no steps.
    """

    source: str
    process: str | None = None
    step_source: StepSource | None = None
    n_steps: int = 0
    step_median_s: float | None = None
    rollout_share_median: float | None = None
    rollout_share_first: float | None = None
    rollout_share_last: float | None = None
    weight_sync_median_s: float | None = None
    weight_sync_first_s: float | None = None
    weight_sync_last_s: float | None = None
    own_sync_median_s: float | None = None
    own_sync_last_s: float | None = None
    own_sync_last_step_s: float | None = None
    weight_sync_share_median: float | None = None
    sync_wait_median_s: float | None = None
    weight_sync_result: SeriesResult | None = None
    rollout_source: str | None = None
    sync_evidence: str | None = None
    no_sync_found: str | None = None
    #: Median bytes a step's weight sync moved (NCCL tests' sizes), bytes.
    sync_bytes_median: float | None = None
    #: Median time a step's weight sync spent in transfers, s.
    sync_wire_median_s: float | None = None
    #: Median bus bandwidth of a step's weight sync (algorithm bandwidth where a factor is
    #: unknown: :attr:`bandwidth_kind`), bytes/s.
    sync_bandwidth_median: float | None = None
    #: ``busbw`` or ``algbw``: which bandwidth :attr:`sync_bandwidth_median` is.
    bandwidth_kind: str | None = None
    #: The link limit it is held against, bytes/s (None: unknown), what it is and why.
    link_limit_bytes_per_s: float | None = None
    link_limit_name: str | None = None
    link_limit_why: str | None = None
    #: sync_bandwidth_median / link_limit_bytes_per_s, 0..1 (None when either is unknown).
    link_share: float | None = None
    #: Median share of a step's own weight sync in no transfer of known size, 0..1.
    outside_transfers_share_median: float | None = None

    def wire_summary(self) -> str | None:
        """``14.2 GB at 7.5 GB/s bus bandwidth = 17% of the 45 GB/s NIC ... limit; 61% of
        the sync outside transfers``: the third number; None without bytes."""
        if self.sync_bytes_median is None:
            return None
        text = f"{fmt_bytes_decimal(self.sync_bytes_median)} per sync"
        if self.sync_bandwidth_median is not None:
            kind = "bus" if self.bandwidth_kind == "busbw" else "algorithm"
            text += f" at {fmt_rate(self.sync_bandwidth_median)} {kind} bandwidth"
        if self.link_share is not None and self.link_limit_bytes_per_s is not None:
            text += (
                f" = {fmt_share_of(self.link_share)} of the "
                f"{fmt_rate(self.link_limit_bytes_per_s)} "
                f"{self.link_limit_name} limit"
            )
        elif self.link_limit_name is not None:
            text += f" (link limit {self.link_limit_name})"
        if self.outside_transfers_share_median is not None:
            text += f"; {self.outside_transfers_share_median:.0%} of the sync outside transfers"
        return text

    def summary(self) -> str | None:
        """``rollout 18% of each step (median); weight sync 1.06 s median, 1.73 s last step
        (steps of rank 0, from markers)``: the two numbers in one line; None without either."""
        parts: list[str] = []
        if self.rollout_share_median is not None:
            of = f" ({self.rollout_source})" if self.rollout_source else ""
            parts.append(f"rollout {self.rollout_share_median:.0%} of each step (median){of}")
        sync = self.own_sync_median_s if self.own_sync_median_s is not None else None
        sync = sync if sync is not None else self.weight_sync_median_s
        last = self.own_sync_last_s if self.own_sync_last_s is not None else None
        last = last if last is not None else self.weight_sync_last_s
        if sync is not None:
            text = f"weight sync {fmt_duration(sync)} median, {fmt_duration(last)} last step"
            wire = self.wire_summary()
            parts.append(f"{text}: {wire}" if wire else text)
        elif self.no_sync_found is not None:
            parts.append(f"no weight sync found ({self.no_sync_found})")
        if not parts:
            return None
        src = self.source
        if self.step_source:
            src += f", from {self.step_source}"
        return "; ".join(parts) + f" ({src})"


@dataclass(frozen=True)
class Analysis:
    """The whole result of ``wsprof analyze``: what every renderer reads.

    ``series`` are the headline per-step series (from the primary process, or from a CSV/log);
    ``findings`` are sorted most severe first; ``diagnoses`` group them by cause, most severe
    first (what renderers lead with).
    """

    source: str
    kind: AnalysisKind
    processes: tuple[ProcessAnalysis, ...]
    series: tuple[SeriesResult, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    #: Wrappers found on collective names and ProcessGroup subclasses, most between-layers
    #: time first.
    wrappers: tuple[WrapperFact, ...] = ()
    #: Per-rank weight-sync and step times of every process with steps, in rank order (empty
    #: for a series file).
    ranks: tuple[RankSeries, ...] = ()
    #: The coverage audit: c10d's issued collectives per group against what was recorded
    #: (None for a series file).
    coverage: Coverage | None = None
    #: The answer (see :class:`Verdict`); set by :func:`wsprof.analysis.verdict.with_verdict`.
    verdict: Verdict = Verdict(VerdictStatus.NO_PROBLEM)
    #: Rollout share and weight-sync time, computed once
    #: (:func:`wsprof.analysis.headline.headline_of`); None on an analysis made by hand.
    headline: Headline | None = None
    #: The findings grouped by cause (:func:`wsprof.analysis.chains.diagnose`).
    diagnoses: tuple[Diagnosis, ...] = ()
    #: One line per trace of the run that could not be read (``skipped <path>: <why>``): not
    #: judged, so the verdict says so (:mod:`wsprof.analysis.verdict`).
    unread: tuple[str, ...] = ()
    #: The run's process worlds and their roles (:mod:`wsprof.analysis.worlds`); empty for a
    #: series file or traces that recorded no world.
    worlds: tuple[World, ...] = ()

    @property
    def primary(self) -> ProcessAnalysis | None:
        """The process the headline series come from (rank 0 when known)."""
        return self.processes[0] if self.processes else None
