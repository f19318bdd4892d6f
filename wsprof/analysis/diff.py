"""Compare two runs, or two step windows of one run: what got faster, what got slower, and
where the overhead moved.

The lesson behind it: re-measure after every fix, because overhead moves to the next slowest
place. Each side is measured on the steps of its primary process (the process whose series
``wsprof analyze`` headlines: rank 0 when ranks are known):

- per step: the median step time, weight-sync time and rollout share, and the mean time in
  collective calls;
- per canonical op: calls per step, median latency per call and time per step;
- per caller site (``function (file)``): calls per step and time per step;
- per phase (a ``wsprof.phase()`` name): time per step;
- per py-spy leaf frame (``function (file)``): its share of the active samples;
- for a per-step series file (CSV): each column's median per step.

"Per step" numbers are sums over the side's steps divided by its number of steps (a side
without steps counts as one step). The diff pairs the items of both sides by name (an item
absent on a side that measured its kind had zero calls and time there) and sorts them by the
absolute change of their time per step. A change counts when it is at least
:data:`MIN_REL_CHANGE` of its before value and :data:`MIN_SHARE_OF_REFERENCE` of a step; the
overhead *moved* to the item of a kind with the largest counted increase when that kind's total
got smaller or another item of it got faster.

Sites and frames are named without their line numbers: a fix usually edits the file it fixes,
so the same call site has another line after it (the lines seen are kept in ``detail``).

Pure: loaded inputs (:mod:`wsprof.inputs`) in, frozen dataclasses out; never imports torch.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from wsprof.analysis.model import ProcessAnalysis, StepRow, by_step_number
from wsprof.contracts.phases import WEIGHT_SYNC, resolve_phase
from wsprof.contracts.series import ROLLOUT_SHARE, STEP_S, WEIGHT_SYNC_S
from wsprof.contracts.units import (
    Unit,
    fmt_bytes_decimal,
    fmt_duration,
    fmt_in_unit,
    fmt_pct,
    fmt_rate,
    unit_family,
)
from wsprof.errors import InputError, quote
from wsprof.inputs import Loaded, LoadedLog, LoadedRun, LoadedSeries, load
from wsprof.trace.model import CallTable, CallTotals, ProcessTrace, SampleWindow, Span

#: A change smaller than this fraction of its before value is noise (10 %).
MIN_REL_CHANGE = 0.10
#: A change of time per step smaller than this fraction of the reference (the larger median
#: step time of the two sides; without steps, the larger total of the item's kind) does not
#: matter (1 %).
MIN_SHARE_OF_REFERENCE = 0.01
#: Smallest change of time per step that counts, s (1 µs: below it sums are clock noise).
MIN_CHANGE_S = 1e-6
#: Smallest change of a frame's share of active samples that counts (5 percentage points).
MIN_SHARE_CHANGE = 0.05
#: Frames below this share of active samples on a side are left out of that side (1 %).
MIN_FRAME_SHARE = 0.01
#: Most frames kept per side, most samples first.
MAX_FRAMES = 30
#: Items named per verdict line (faster, slower); the rest are counted.
MAX_VERDICT_ITEMS = 3
#: Fewer steps than this on a side: a note says its medians are noisy.
MIN_STEPS_FOR_MEDIANS = 3

#: Item kinds, in the order the verdict and the reports list them.
ITEM_KINDS = ("op", "site", "phase", "series", "frame")
#: Site of calls whose caller is unknown (site id -1 or not in ``sites``).
UNKNOWN_SITE = "(unknown caller)"
#: Site of calls that retention removed from the detail of a thinned step and whose op had no
#: kept call in that step (their count and time are exact, their caller unknown).
THINNED_SITE = "(not kept in detail)"
#: Comparison bases: per step (both sides have steps) or per second of wall time.
BASIS_STEP = "step"
BASIS_SECOND = "second"

#: A half-open step range [start, stop) on step numbers; None ends are open.
StepRange = tuple[int | None, int | None]


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Delta:
    """One number before and after, in the unit of the field that holds it.

    Attributes:
        before: value on the before side; None where unknown.
        after: value on the after side; None where unknown.
        change: ``after - before``; None when either is unknown.
        rel_change: ``change / before``; None when ``before`` is 0 or unknown.
    """

    before: float | None
    after: float | None
    change: float | None
    rel_change: float | None

    @classmethod
    def of(cls, before: float | None, after: float | None) -> Delta:
        """The delta of two values (either may be None)."""
        change = after - before if before is not None and after is not None else None
        rel = change / before if change is not None and before else None
        return cls(before, after, change, rel)


@dataclass(frozen=True)
class ItemDiff:
    """One item (an op, caller site, phase, frame or series) on both sides.

    Attributes:
        kind: ``op`` (canonical op), ``site`` (caller site ``function (file)``), ``phase``
            (a phase name), ``series`` (a column of a per-step series file) or ``frame``
            (py-spy leaf frame ``function (file)``).
        name: the item, the same on both sides.
        detail: what else identifies it: the names called (op), the lines seen (site), the
            unit (series); empty when nothing.
        s_per_step: time per step, s (op, site, phase; a series in a time unit: its median
            per step); None for frames and other series.
        calls_per_step: calls per step (op, site); None for the other kinds.
        median_us: median host latency per call, µs (op; None on a side without its calls).
        share: share of the side's active py-spy samples, 0..1 (frame).
        value: median per step of a series not in a time unit, in ``unit``.
        unit: the unit of ``value``; empty otherwise.
    """

    kind: str
    name: str
    detail: str = ""
    s_per_step: Delta | None = None
    calls_per_step: Delta | None = None
    median_us: Delta | None = None
    share: Delta | None = None
    value: Delta | None = None
    unit: str = ""

    @property
    def label(self) -> str:
        """How the verdict names the item: ``broadcast``, ``site push (sync.py)``,
        ``phase rollout``, ``frame f (a.py)``, ``update_weights_time_s``."""
        return self.name if self.kind in ("op", "series") else f"{self.kind} {self.name}"

    @property
    def main(self) -> Delta | None:
        """The number the item is judged by: time per step, else share, else value."""
        return self.s_per_step or self.share or self.value


@dataclass(frozen=True)
class SideSummary:
    """What one side of the diff covers.

    Attributes:
        role: ``before`` or ``after``.
        source: the path given.
        kind: ``run`` (traces) or ``series`` (a per-step series file).
        process: label of the primary process (``rank 0``); None for a series file.
        step_source: where its steps came from: ``markers``, ``bursts``, ``none`` (no steps:
            the whole trace counts as one step) or ``series``.
        step_range: the half-open [start, stop) asked for; None: every step.
        steps: step numbers measured.
        n_calls: collective calls in those steps (exact where retention thinned the detail).
        n_samples: active py-spy samples of the process in those steps' time.
        notes: what the reader should know about this side.
        wall_s: wall time covered, s: the selected steps (first start to last end), else the
            whole trace; None for a series file or when nothing is timed.
    """

    role: str
    source: str
    kind: str
    process: str | None
    step_source: str
    step_range: StepRange | None
    steps: tuple[int, ...]
    n_calls: int
    n_samples: int
    notes: tuple[str, ...] = ()
    wall_s: float | None = None

    def describe(self, range_option: str | None = None) -> str:
        """One line: ``rank 0 of RUN, steps 0-4 (5 from markers), 120 calls``.

        Args:
            range_option: what introduces the step range asked for (a renderer of the
                command line passes its option, ``--before-steps``); default
                ``<role> steps``.
        """
        who = f"{self.process} of {self.source}" if self.process else self.source
        if self.steps:
            span = (
                f"step {self.steps[0]}"
                if len(self.steps) == 1
                else f"steps {self.steps[0]}-{self.steps[-1]}"
            )
            where = f"{span} ({len(self.steps)} from {self.step_source})"
        else:
            where = "no steps (the whole trace"
            where += f", {fmt_duration(self.wall_s)} of wall time)" if self.wall_s else ")"
        if self.step_range is not None:
            what = range_option or f"{self.role} steps"
            where += f" of {what} {format_step_range(self.step_range)}"
        parts = [who, where]
        if self.kind == "run":
            parts.append(f"{self.n_calls:,} calls")
            if self.n_samples:
                parts.append(f"{self.n_samples:,} py-spy samples")
        return ", ".join(parts)


@dataclass(frozen=True)
class DiffResult:
    """``wsprof diff``: two sides, what changed and the verdict; what every renderer reads.

    Attributes:
        before: the before side.
        after: the after side.
        step_s: median step time, s (None on both sides with the ``second`` basis).
        weight_sync_s: weight-sync time per step (its total over the steps / steps), s; with
            the ``second`` basis, per second of wall time (s/s). The one weight-sync figure:
            no item repeats it.
        rollout_share: median rollout share of a step, 0..1.
        collective_s: time in collective calls per step, s (mean over the steps; with the
            ``second`` basis per second of wall time).
        items: every item of both sides, largest absolute change of time per step first, then
            frames by the change of their share, then other series by relative change.
        faster: items whose time per step (frames: share) fell by a counted change, most first.
        slower: items whose time per step (frames: share) rose by a counted change, most first.
        moved_to: per kind, the item with the largest counted increase, where that kind's total
            got smaller or another of its items got faster: where the overhead went.
        verdict: the verdict as lines, the headline first.
        notes: what limits the comparison (different processes, few steps, ...).
        basis: ``step`` when both sides have steps (or are series files): every ``s_per_step``
            and ``calls_per_step`` is per step; ``second`` when a run side has none: both
            sides as whole-run rates, per second of the wall time each covers (time per
            second, calls per second; latency per call stays per call).
        sync_bytes: median bytes a weight sync moved (NCCL tests' sizes), bytes.
        sync_bandwidth: median bandwidth of a weight sync, bytes/s (bus bandwidth where
            every step has a factor, else algorithm bandwidth: :attr:`StepRow.wire`).
    """

    before: SideSummary
    after: SideSummary
    step_s: Delta
    weight_sync_s: Delta
    rollout_share: Delta
    collective_s: Delta
    items: tuple[ItemDiff, ...]
    faster: tuple[ItemDiff, ...]
    slower: tuple[ItemDiff, ...]
    moved_to: tuple[ItemDiff, ...]
    verdict: tuple[str, ...]
    notes: tuple[str, ...] = ()
    basis: str = BASIS_STEP
    sync_bytes: Delta = Delta(None, None, None, None)
    sync_bandwidth: Delta = Delta(None, None, None, None)

    @property
    def per(self) -> str:
        """What times and counts are per: ``step`` or ``s`` (second of wall time)."""
        return "step" if self.basis == BASIS_STEP else "s"

    @property
    def per_words(self) -> str:
        """``per step`` or ``per second of wall time``."""
        return "per step" if self.basis == BASIS_STEP else "per second of wall time"

    def of_kind(self, kind: str) -> tuple[ItemDiff, ...]:
        """The items of one kind, in the order of :attr:`items`."""
        return tuple(i for i in self.items if i.kind == kind)


# --------------------------------------------------------------------------- one side


@dataclass(frozen=True)
class Measure:
    """One item on one side (see :class:`ItemDiff` for the fields and their units)."""

    s_per_step: float | None = None
    calls_per_step: float | None = None
    median_us: float | None = None
    share: float | None = None
    value: float | None = None
    unit: str = ""
    detail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Side:
    """One side measured, before pairing: what :func:`diff_sides` reads.

    Attributes:
        summary: what the side covers.
        step_s: median step time, s (None without steps).
        weight_sync_s: weight-sync time per step, s: its total over the steps / steps (None
            where unknown).
        rollout_share: median rollout share, 0..1 (None where unknown).
        collective_s: time in collective calls per step, s (None without calls).
        items: ``(kind, name)`` -> its measure.
        kinds: the kinds this side measured (an item of such a kind missing here had none).
        units: the steps that per-step numbers are divided by (1 for a side without steps:
            its per-step numbers are whole-run totals until :func:`diff_sides` makes them
            rates).
        sync_bytes: median bytes per weight sync, bytes (None where unknown).
        sync_bandwidth: median weight-sync bandwidth, bytes/s (None where unknown).
    """

    summary: SideSummary
    step_s: float | None
    weight_sync_s: float | None
    rollout_share: float | None
    collective_s: float | None
    items: dict[tuple[str, str], Measure] = field(default_factory=dict)
    kinds: frozenset[str] = frozenset()
    units: int = 1
    sync_bytes: float | None = None
    sync_bandwidth: float | None = None


def parse_step_range(text: str, option: str = "steps") -> StepRange:
    """``A:B`` as a half-open step range; ``A:`` and ``:B`` leave an end open.

    Args:
        text: what the user gave.
        option: what gave it (for the message: the CLI passes its option).

    Returns:
        ``(start, stop)``, either None where open.

    Raises:
        InputError: not ``A:B`` with integers, or an empty range (``B <= A``).
    """
    head, sep, tail = text.strip().partition(":")
    try:
        start = int(head) if head.strip() else None
        stop = int(tail) if tail.strip() else None
    except ValueError:
        start = stop = None
        sep = ""
    if not sep:
        raise InputError(
            f"{option} {quote(text)}: expected A:B, step numbers with A < B "
            "(half-open: 0:5 is steps 0 to 4; A: and :B leave an end open)"
        )
    if start is not None and stop is not None and stop <= start:
        raise InputError(
            f"{option} {quote(text)}: empty step range (B must be greater than A; "
            f"half-open: {start}:{start + 1} is step {start} alone)"
        )
    return start, stop


def format_step_range(r: StepRange) -> str:
    """``0:5``, ``10:``, ``:3``."""
    return f"{'' if r[0] is None else r[0]}:{'' if r[1] is None else r[1]}"


def _in_range(step: int, r: StepRange | None) -> bool:
    return r is None or ((r[0] is None or step >= r[0]) and (r[1] is None or step < r[1]))


def _median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if math.isfinite(v)]
    return float(statistics.median(vals)) if vals else None


class StepRangeError(InputError):
    """A step range that selects no step of a side. The message names the side and its
    steps, not a command-line option; :meth:`with_option` says it with the option that gave
    the range (the CLI's wording).

    Attributes:
        role: ``before`` or ``after``.
        source: the side's path.
        step_range: the range asked for.
        detail: what is wrong and what to do, after the range.
    """

    def __init__(self, role: str, source: str, step_range: StepRange, detail: str) -> None:
        self.role, self.source, self.step_range, self.detail = role, source, step_range, detail
        super().__init__(self.text(f"{role} steps"))

    def text(self, what: str) -> str:
        """The message, the range introduced by ``what`` (``before steps``, an option)."""
        return (
            f"{self.role.upper()} {self.source}: {what} "
            f"{format_step_range(self.step_range)}{self.detail}"
        )

    def with_option(self, option: str) -> InputError:
        """The same error, naming ``option`` (``--before-steps``) for the range."""
        return InputError(self.text(option))


def measure(loaded: Loaded, step_range: StepRange | None = None, role: str = "before") -> Side:
    """Measure one side read by :func:`wsprof.inputs.load`: a run or a per-step series file.

    A run's traces are read once: the primary process's trace (with its calls) comes from
    the same pass that analyses the run.

    Args:
        loaded: the side's input.
        step_range: only these steps of the primary process (and the calls in them).
        role: ``before`` or ``after`` (names the side in messages).

    Returns:
        The side's measures.

    Raises:
        InputError: no trace could be read, the input is a training log, or the range
            selects no step (:class:`StepRangeError`).
    """
    if isinstance(loaded, LoadedRun):
        return _measure_run(loaded, step_range, role)
    if isinstance(loaded, LoadedLog):
        raise InputError(
            f"{role.upper()} {loaded.path}: a {loaded.imported.format} training log, not a run "
            "or a per-step series file; compare two runs (folders or .wsprof traces) or two "
            "CSV series"
        )
    return _measure_series(loaded, step_range, role)


def measure_path(path: str, step_range: StepRange | None = None, role: str = "before") -> Side:
    """``measure(load(path), ...)``: a run folder, a trace file or a per-step series file.

    Raises:
        InputError: see :func:`wsprof.inputs.load` and :func:`measure`.
    """
    return measure(load(path), step_range, role)


def _measure_run(run: LoadedRun, step_range: StepRange | None, role: str) -> Side:
    from wsprof.analysis.run import analyze_loaded_run

    # One trace at a time, as ``wsprof analyze`` reads a run; the primary's calls are kept.
    result = analyze_loaded_run(run)
    pa = result.analysis.primary
    trace = result.primary_trace
    if pa is None or trace is None:
        raise InputError(f"{run.path}: no process to compare; give a run folder written by wsprof")
    return measure_process(
        trace, pa, result.primary_windows, step_range, role, run.path, list(run.problems)
    )


def _select_rows(
    pa: ProcessAnalysis, step_range: StepRange | None, role: str, source: str
) -> list[int]:
    rows = pa.steps
    if step_range is None:
        return list(range(len(rows)))
    if not rows:
        raise StepRangeError(
            role,
            source,
            step_range,
            f": {pa.label} has no steps to select (no wsprof.step() "
            "markers and no sync bursts found); compare whole runs instead",
        )
    sel = [i for i, r in enumerate(rows) if _in_range(r.step, step_range)]
    if not sel:
        nums = sorted(r.step for r in rows)
        raise StepRangeError(
            role,
            source,
            step_range,
            f" selects none of {pa.label}'s steps "
            f"({nums[0]}-{nums[-1]}); choose a range within them",
        )
    return sel


def _thinned_weights(
    calls: CallTable, totals: CallTotals, steps: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], dict[str, tuple[float, float]]]:
    """Per kept call, how many calls and how much time it stands for in a thinned trace.

    Each (step, op) group's kept calls share the group's exact totals in proportion (so that
    per-op sums are exact and per-site sums are estimates from an evenly spaced sample).

    Returns:
        (calls weight, time weight in ns, per op: (calls, ns) of groups with no kept call).
    """
    tm = np.isin(totals.step, steps)
    t_step, t_op = totals.step[tm], totals.op[tm]
    t_n, t_d = totals.n[tm].astype(np.float64), totals.duration_ns[tm].astype(np.float64)
    ops = sorted({str(o) for o in calls.op.tolist()} | {str(o) for o in t_op.tolist()})
    code = {o: i for i, o in enumerate(ops)}
    k = len(ops)
    c_key = calls.step.astype(np.int64) * k + np.array(
        [code[str(o)] for o in calls.op.tolist()], dtype=np.int64
    )
    t_key = t_step.astype(np.int64) * k + np.array(
        [code[str(o)] for o in t_op.tolist()], dtype=np.int64
    )
    keys, c_inv = np.unique(c_key, return_inverse=True)
    dur = calls.duration_ns.astype(np.float64)
    kept_n = np.bincount(c_inv, minlength=len(keys)).astype(np.float64)
    kept_d = np.bincount(c_inv, weights=dur, minlength=len(keys))
    pos = np.clip(np.searchsorted(keys, t_key), 0, max(len(keys) - 1, 0))
    hit = (keys[pos] == t_key) if len(keys) else np.zeros(len(t_key), dtype=bool)
    tot_n = np.bincount(pos[hit], weights=t_n[hit], minlength=len(keys))
    tot_d = np.bincount(pos[hit], weights=t_d[hit], minlength=len(keys))
    f_n = np.where(kept_n > 0, tot_n / np.maximum(kept_n, 1), 1.0)
    f_d = np.where(kept_d > 0, tot_d / np.maximum(kept_d, 1.0), f_n)
    rest: dict[str, tuple[float, float]] = {}
    for key, n, d in zip(t_key[~hit].tolist(), t_n[~hit].tolist(), t_d[~hit].tolist()):
        op = ops[int(key) % k]
        a, b = rest.get(op, (0.0, 0.0))
        rest[op] = (a + n, b + d)
    return f_n[c_inv], dur * f_d[c_inv], rest


def _phase_seconds(
    spans: Sequence[Span], rows: Sequence[StepRow] | None, by_number: bool
) -> dict[str, float]:
    """Seconds per phase over the phase spans of ``rows`` (by step number with markers, else
    by the span's start within the step); every phase span with ``rows`` None (a process
    without steps: the whole trace is the window). A name is read as its canonical phase
    (:func:`~wsprof.contracts.phases.resolve_phase`: ``sync`` and ``update_weights`` are
    ``weight_sync``), any other as given; a phase's time is the time covered by at least one
    of its spans (``generate`` inside ``rollout`` counts once), as in the step rows."""
    found: dict[str, list[tuple[int, int]]] = {}
    numbers = {r.step for r in rows or ()}
    for sp in spans:
        if sp.kind != "phase":
            continue
        if rows is None:
            ok = True
        elif by_number:
            ok = sp.step in numbers
        else:
            ok = any(r.t_start_ns <= sp.t_start_ns < r.t_end_ns for r in rows or ())
        if ok:
            found.setdefault(resolve_phase(sp.name), []).append((sp.t_start_ns, sp.t_end_ns))
    return {name: _covered_s(intervals) for name, intervals in found.items()}


def _covered_s(intervals: Sequence[tuple[int, int]]) -> float:
    """Length of the union of ``[start, end)`` intervals (ns), s."""
    total = 0
    end: int | None = None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += max(b - a, 0)
            end = max(a, b)
        elif b > end:
            total += b - end
            end = b
    return total / 1e9


def measure_process(
    trace: ProcessTrace,
    pa: ProcessAnalysis,
    windows: Sequence[SampleWindow] = (),
    step_range: StepRange | None = None,
    role: str = "before",
    source: str | None = None,
    problems: Sequence[str] = (),
) -> Side:
    """Measure one process (the primary of a run) over its steps in ``step_range``.

    Args:
        trace: the process's trace, with its calls.
        pa: its analysis (:func:`wsprof.analysis.process.analyze_process` or the primary of
            :func:`wsprof.analysis.run.analyze_run`).
        windows: py-spy sample windows of the process (its own and a sampler's).
        step_range: only these steps (by step number) and the calls in them.
        role: ``before`` or ``after`` (names the side in messages).
        source: the path the trace came from (default: the trace's path).
        problems: traces of the run that could not be read (become notes).

    Returns:
        The side's measures: per-step medians, and per op, site, phase and frame.

    Raises:
        InputError: ``step_range`` selects no step of the process.
    """
    from wsprof.analysis.samples import hot_frames
    from wsprof.analysis.steps import assign_calls

    src = source if source is not None else trace.path
    notes = list(problems)
    sel = _select_rows(pa, step_range, role, src)
    rows = [pa.steps[i] for i in sel]
    by_number = by_step_number(pa.step_source)
    units = len(rows) or 1
    calls = trace.calls
    if pa.steps:
        calls = calls.take(np.isin(assign_calls(calls, pa.steps, by_number), sel))
    items: dict[tuple[str, str], Measure] = {}
    kinds: set[str] = set()
    # Per op and per site, with the exact totals where retention thinned the detail.
    dur = calls.duration_ns.astype(np.float64)
    w_n, w_d = np.ones(len(calls)), dur
    rest: dict[str, tuple[float, float]] = {}
    thinned = trace.thinned and trace.totals is not None and by_number and bool(rows)
    if thinned and trace.totals is not None:
        steps = np.array([r.step for r in rows], dtype=np.int64)
        w_n, w_d, rest = _thinned_weights(calls, trace.totals, steps)
        notes.append(
            "retention thinned some of these steps: per-op numbers are exact, per-site "
            "numbers are estimated from the calls kept in detail"
        )
    n_total = float(w_n.sum()) + sum(n for n, _ in rest.values())
    if len(calls) or rest:
        kinds |= {"op", "site"}
    op_names = sorted({str(o) for o in calls.op.tolist()} | set(rest))
    for op in op_names:
        m = calls.op == op
        extra_n, extra_d = rest.get(op, (0.0, 0.0))
        items[("op", op)] = Measure(
            s_per_step=(float(w_d[m].sum()) + extra_d) / 1e9 / units,
            calls_per_step=(float(w_n[m].sum()) + extra_n) / units,
            median_us=float(np.median(dur[m])) / 1e3 if m.any() else None,
            detail=tuple(sorted({str(a) for a in calls.api[m].tolist()})),
        )
    site_n: dict[str, float] = {}
    site_d: dict[str, float] = {}
    site_lines: dict[str, set[str]] = {}
    if len(calls):
        ids, inv = np.unique(calls.site, return_inverse=True)
        sn = np.bincount(inv, weights=w_n, minlength=len(ids))
        sd = np.bincount(inv, weights=w_d, minlength=len(ids))
        for i, sid in enumerate(ids.tolist()):
            site = trace.sites.get(int(sid))
            name = f"{site.function} ({site.file})" if site is not None else UNKNOWN_SITE
            site_n[name] = site_n.get(name, 0.0) + float(sn[i])
            site_d[name] = site_d.get(name, 0.0) + float(sd[i])
            if site is not None:
                site_lines.setdefault(name, set()).add(str(site.line))
    for n, d in rest.values():
        site_n[THINNED_SITE] = site_n.get(THINNED_SITE, 0.0) + n
        site_d[THINNED_SITE] = site_d.get(THINNED_SITE, 0.0) + d
    for name in site_n:
        lines = sorted(site_lines.get(name, ()), key=int)
        items[("site", name)] = Measure(
            s_per_step=site_d[name] / 1e9 / units,
            calls_per_step=site_n[name] / units,
            detail=tuple(lines),
        )
    # Per phase: phase spans. Weight sync is the one headline figure, not a phase item: its
    # phase spans, else the spans of the steps' sync bursts.
    phases = _phase_seconds(trace.spans, rows if pa.steps else None, by_number)
    sync_total = phases.pop(WEIGHT_SYNC, None)
    if sync_total is None and any(r.weight_sync_s is not None for r in rows):
        sync_total = sum(r.weight_sync_s or 0.0 for r in rows)
        notes.append(
            "no weight_sync phase markers: weight sync is the span of each step's sync burst"
        )
    if phases:
        kinds.add("phase")
    for name, s in phases.items():
        items[("phase", name)] = Measure(s_per_step=s / units)
    # Per hot frame, over the sample windows that overlap the selected steps.
    if step_range is not None and rows:
        lo, hi = min(r.t_start_ns for r in rows), max(r.t_end_ns for r in rows)
        windows = [w for w in windows if w.t_end_ns > lo and w.t_start_ns < hi]
    frames = hot_frames(windows, lines=False)
    n_active = frames[0].total if frames else 0
    if n_active:
        kinds.add("frame")
    for f in frames[:MAX_FRAMES]:  # without line numbers: ``function (file)``
        if f.share >= MIN_FRAME_SHARE:
            items[("frame", f.frame)] = Measure(share=f.share)
    # Medians over the steps (from bursts the process's last step is cut short: left out).
    timed = [
        r
        for r in rows
        if not (pa.step_source == "bursts" and r is pa.steps[-1] and len(pa.steps) > 1)
    ]
    if rows and len(rows) < MIN_STEPS_FOR_MEDIANS:
        notes.append(
            f"only {len(rows)} step(s): their medians are noisy; compare at least "
            f"{MIN_STEPS_FOR_MEDIANS} steps on each side"
        )
    if not pa.steps:
        notes.append(
            "no steps found (no wsprof.step() markers, no sync bursts or rhythm): "
            "its numbers are whole-run totals, compared as rates per second of wall "
            "time"
        )
    op_s = [m.s_per_step for (k, _), m in items.items() if k == "op" and m.s_per_step is not None]
    summary = SideSummary(
        role=role,
        source=src,
        kind="run",
        process=pa.label,
        step_source=pa.step_source,
        step_range=step_range,
        steps=tuple(r.step for r in rows),
        n_calls=int(round(n_total)),
        n_samples=n_active,
        notes=tuple(notes),
        wall_s=_wall_s(trace, rows if pa.steps else None),
    )
    wire = _wire_medians(rows)
    return Side(
        summary=summary,
        step_s=_median([r.step_s for r in timed]),
        weight_sync_s=sync_total / units if sync_total is not None else None,
        rollout_share=_median([s for s in (r.rollout_share for r in rows) if s is not None]),
        collective_s=sum(op_s) if op_s else None,
        items=items,
        kinds=frozenset(kinds),
        units=units,
        sync_bytes=wire[0],
        sync_bandwidth=wire[1],
    )


def _wire_medians(rows: Sequence[StepRow]) -> tuple[float | None, float | None]:
    """Median bytes and bandwidth of the rows' weight syncs (:attr:`StepRow.wire`): bus
    bandwidth where every sync has a factor, else algorithm bandwidth."""
    wires = [r.wire for r in rows if r.wire is not None and r.wire.bytes > 0]
    bus = [w.busbw for w in wires]
    bws = bus if all(b is not None for b in bus) else [w.algbw for w in wires]
    return _median([float(w.bytes) for w in wires]), _median([b for b in bws if b is not None])


def _wall_s(trace: ProcessTrace, rows: Sequence[StepRow] | None) -> float | None:
    """Wall time a side covers, s: from the first selected step's start to the last one's end;
    without steps (``rows`` None), from the trace's first call, span or counter reading to its
    last. None when nothing is timed."""
    if rows is not None:
        if not rows:
            return None
        lo, hi = min(r.t_start_ns for r in rows), max(r.t_end_ns for r in rows)
    else:
        starts: list[int] = []
        ends: list[int] = []
        if len(trace.calls):
            starts.append(int(trace.calls.t_start_ns.min()))
            ends.append(int(trace.calls.t_end_ns.max()))
        for sp in trace.spans:
            starts.append(sp.t_start_ns)
            ends.append(sp.t_end_ns)
        for t, _ in trace.counters.values():
            if len(t):
                starts.append(int(t.min()))
                ends.append(int(t.max()))
        if not starts:
            return None
        lo, hi = min(starts), max(ends)
    return (hi - lo) / 1e9 if hi > lo else None


def _measure_series(loaded: LoadedSeries, step_range: StepRange | None, role: str) -> Side:
    """A per-step series file: each column's median over the steps in ``step_range``."""
    path = loaded.path
    items: dict[tuple[str, str], Measure] = {}
    steps: set[int] = set()
    medians: dict[str, float] = {}
    sync_mean: float | None = None
    for s in loaded.imported.series:
        vals = [
            v for st, v in zip(s.steps, s.values) if _in_range(st, step_range) and math.isfinite(v)
        ]
        steps |= {st for st in s.steps if _in_range(st, step_range)}
        med = _median(vals)
        if med is None:
            continue
        medians[s.name] = med
        if s.name == WEIGHT_SYNC_S:  # as for a run: its total over the steps / steps
            sync_mean = math.fsum(vals) / len(vals)
        unit = s.unit_label
        family, scale = unit_family(unit)
        if family is Unit.SECONDS:
            items[("series", s.name)] = Measure(s_per_step=med * scale, detail=(unit,))
        else:
            items[("series", s.name)] = Measure(
                value=med, unit=unit, detail=(unit,) if unit else ()
            )
    if step_range is not None and not steps:
        raise StepRangeError(
            role,
            path,
            step_range,
            " selects no row of the series file; choose a range within its step column",
        )
    notes = []
    if 0 < len(steps) < MIN_STEPS_FOR_MEDIANS:
        notes.append(f"only {len(steps)} step(s): their medians are noisy")
    summary = SideSummary(
        role=role,
        source=path,
        kind="series",
        process=None,
        step_source="series",
        step_range=step_range,
        steps=tuple(sorted(steps)),
        n_calls=0,
        n_samples=0,
        notes=tuple(notes),
    )
    items.pop(("series", WEIGHT_SYNC_S), None)  # the one weight-sync figure: headline
    return Side(
        summary=summary,
        step_s=medians.get(STEP_S),
        weight_sync_s=sync_mean,
        rollout_share=medians.get(ROLLOUT_SHARE),
        collective_s=None,
        items=items,
        kinds=frozenset({"series"}) if items else frozenset(),
    )


# --------------------------------------------------------------------------- the diff


def _absent(kind: str, side: Side) -> Measure:
    """An item missing on a side: none of it there when the side measured its kind."""
    if kind not in side.kinds:
        return Measure()
    if kind in ("op", "site"):
        return Measure(s_per_step=0.0, calls_per_step=0.0)
    if kind == "phase":
        return Measure(s_per_step=0.0)
    if kind == "frame":
        return Measure(share=0.0)
    return Measure()


def _pair(kind: str, name: str, b: Measure, a: Measure) -> ItemDiff:
    def d(x: float | None, y: float | None, keep: bool) -> Delta | None:
        return Delta.of(x, y) if keep else None

    timed = (
        kind in ("op", "site", "phase") or b.s_per_step is not None or (a.s_per_step is not None)
    )
    valued = kind == "series" and not timed
    detail = ", ".join(dict.fromkeys((*b.detail, *a.detail)))
    if kind == "site" and detail:
        lines = sorted({*b.detail, *a.detail}, key=int)
        detail = f"line{'s' if len(lines) > 1 else ''} {', '.join(lines)}"
    return ItemDiff(
        kind=kind,
        name=name,
        detail=detail,
        s_per_step=d(b.s_per_step, a.s_per_step, timed),
        calls_per_step=d(b.calls_per_step, a.calls_per_step, kind in ("op", "site")),
        median_us=d(b.median_us, a.median_us, kind == "op"),
        share=d(b.share, a.share, kind == "frame"),
        value=d(b.value, a.value, valued),
        unit=(b.unit or a.unit) if valued else "",
    )


def _sort_key(item: ItemDiff) -> tuple[int, float, str, str]:
    for rank, delta in enumerate((item.s_per_step, item.share)):
        if delta is not None:
            return rank, -abs(delta.change or 0.0), item.kind, item.name
    rel = item.value.rel_change if item.value is not None else None
    return 2, -abs(rel or 0.0), item.kind, item.name


def _kind_total(items: Sequence[ItemDiff], kind: str, after: bool) -> float:
    total = 0.0
    for i in items:
        if i.kind == kind and i.s_per_step is not None:
            v = i.s_per_step.after if after else i.s_per_step.before
            total += v or 0.0
    return total


def counted(item: ItemDiff, reference_s: float) -> bool:
    """True when the item's change is more than noise.

    Time per step: at least :data:`MIN_REL_CHANGE` of the before value (any change from
    zero), at least :data:`MIN_SHARE_OF_REFERENCE` of ``reference_s`` and at least
    :data:`MIN_CHANGE_S`. A frame's share: at least :data:`MIN_SHARE_CHANGE`. Other series
    are never counted (they are not times).

    Args:
        item: the item.
        reference_s: the time a step takes (or the kind's total), s.
    """
    if item.share is not None:
        return item.share.change is not None and abs(item.share.change) >= MIN_SHARE_CHANGE
    return item.s_per_step is not None and counted_time(item.s_per_step, reference_s)


def counted_time(d: Delta, reference_s: float) -> bool:
    """True when a change of time per step is more than noise (see :func:`counted`).

    Args:
        d: a time per step before and after, s.
        reference_s: the time a step takes (or the kind's total), s.
    """
    if d.change is None:
        return False
    change = abs(d.change)
    if change < max(MIN_CHANGE_S, MIN_SHARE_OF_REFERENCE * reference_s):
        return False
    return not d.before or change >= MIN_REL_CHANGE * abs(d.before)


def fmt_rel(delta: Delta) -> str:
    """A relative change: ``-96%``, ``+40%``, ``x12`` (beyond +1000%), ``new``, ``gone``."""
    if delta.change is None:
        return "-"
    if delta.rel_change is None:
        return "new" if delta.change > 0 else "same"
    if delta.after == 0 and delta.before:
        return "gone"
    if delta.rel_change >= 9.995:
        return f"x{1 + delta.rel_change:.0f}"
    return f"{delta.rel_change:+.0%}"


def fmt_change_s(change: float | None) -> str:
    """A signed duration: ``+140 ms``, ``-380 ms``."""
    if change is None:
        return "-"
    text = fmt_duration(change)
    return text if text.startswith("-") or change == 0 else f"+{text}"


def fmt_item_change(item: ItemDiff, per: str = "step") -> str:
    """The change an item is judged by, with its unit: ``-380 ms/step (-96%)`` (``per`` is
    ``step`` or ``s``: ``-12 ms/s``), ``+30 pts of samples (10% -> 40%)``."""
    if item.s_per_step is not None:
        d = item.s_per_step
        return f"{fmt_change_s(d.change)}/{per} ({fmt_rel(d)})"
    if item.share is not None:
        d = item.share
        pts = (d.change or 0.0) * 100
        return f"{pts:+.0f} pts of samples ({fmt_pct(d.before)} -> {fmt_pct(d.after)})"
    if item.value is not None:
        d = item.value
        return (
            f"{fmt_in_unit(d.before, item.unit)} -> {fmt_in_unit(d.after, item.unit)} "
            f"({fmt_rel(d)})"
        )
    return "-"


def _named(items: Sequence[ItemDiff], per: str = "step") -> str:
    text = "; ".join(f"{i.label} {fmt_item_change(i, per)}" for i in items[:MAX_VERDICT_ITEMS])
    if len(items) > MAX_VERDICT_ITEMS:
        text += f" (+{len(items) - MAX_VERDICT_ITEMS} more)"
    return text


def fmt_time(value: float | None, basis: str = BASIS_STEP) -> str:
    """A time per step (``140 ms``) or per second of wall time (``140 ms/s``)."""
    text = fmt_duration(value)
    return text if basis == BASIS_STEP or value is None else f"{text}/s"


def _headline(
    step_s: Delta,
    sync: Delta,
    collective: Delta,
    series: Delta,
    reference_s: float,
    basis: str = BASIS_STEP,
) -> str:
    """The first verdict line: the step time (else the time in collectives, else the sum of
    a series file's time columns), before and after, and the weight sync."""
    parts: list[str] = []
    for what, d in (
        ("step time", step_s),
        ("weight sync", sync),
        ("time in collectives", collective),
        ("time columns summed", series),
    ):
        if d.before is not None and d.after is not None:
            parts.append(
                f"{what} {fmt_time(d.before, basis)} -> {fmt_time(d.after, basis)} ({fmt_rel(d)})"
            )
    main = next((d for d in (step_s, collective, series) if d.change is not None), None)
    per = "per step" if basis == BASIS_STEP else "per second of wall time"
    if main is None:
        return "no step, collective or series times on both sides: see the items below"
    word = (
        "about the same"
        if not counted_time(main, reference_s)
        else "faster"
        if (main.change or 0.0) < 0
        else "slower"
    )
    return f"{word} {per}: " + "; ".join(parts[:2])


def _as_rates(side: Side) -> Side:
    """A side's per-step numbers as rates per second of its wall time (unknown without it)."""
    wall = side.summary.wall_s
    k = side.units / wall if wall else None

    def rate(x: float | None) -> float | None:
        return x * k if x is not None and k is not None else None

    items = {
        key: replace(m, s_per_step=rate(m.s_per_step), calls_per_step=rate(m.calls_per_step))
        for key, m in side.items.items()
    }
    return replace(
        side,
        step_s=None,
        weight_sync_s=rate(side.weight_sync_s),
        collective_s=rate(side.collective_s),
        items=items,
    )


def comparison_basis(before: Side, after: Side) -> str:
    """``step`` when both sides have steps (series files always do), else ``second``."""
    if before.summary.kind == "series" or (before.summary.steps and after.summary.steps):
        return BASIS_STEP
    return BASIS_SECOND


def diff_sides(before: Side, after: Side) -> DiffResult:
    """Pair the items of two sides, judge every change and write the verdict.

    Args:
        before: the side measured first (before the fix).
        after: the side measured after.

    Returns:
        The diff.

    Raises:
        InputError: one side is a series file and the other a run (nothing to pair).
    """
    b, a = before.summary, after.summary
    basis = comparison_basis(before, after) if b.kind == a.kind else BASIS_STEP
    if basis == BASIS_SECOND:
        before, after = _as_rates(before), _as_rates(after)
    per = "step" if basis == BASIS_STEP else "s"
    if b.kind != a.kind:
        raise InputError(
            f"cannot compare a {b.kind} with a {a.kind}: BEFORE {b.source} is a "
            f"{'per-step series file' if b.kind == 'series' else 'run'} and AFTER {a.source} "
            f"is {'a per-step series file' if a.kind == 'series' else 'a run'}; give two runs "
            "(folders or .wsprof traces) or two series files"
        )
    keys = sorted(
        set(before.items) | set(after.items),
        key=lambda k: (ITEM_KINDS.index(k[0]) if k[0] in ITEM_KINDS else 99, k[1]),
    )
    items = sorted(
        (
            _pair(
                kind,
                name,
                before.items.get((kind, name)) or _absent(kind, before),
                after.items.get((kind, name)) or _absent(kind, after),
            )
            for kind, name in keys
        ),
        key=_sort_key,
    )
    step_s = Delta.of(before.step_s, after.step_s)
    # The reference a change is judged against: a step, else (rates) a second of wall time.
    refs = [v for v in (before.step_s, after.step_s) if v] if basis == BASIS_STEP else [1.0]
    faster: list[ItemDiff] = []
    slower: list[ItemDiff] = []
    moved: list[ItemDiff] = []
    for kind in ITEM_KINDS:
        of_kind = [i for i in items if i.kind == kind]
        total_b, total_a = _kind_total(of_kind, kind, False), _kind_total(of_kind, kind, True)
        ref = max(refs) if refs else max(total_b, total_a)
        changed = [i for i in of_kind if counted(i, ref)]
        down = sorted(
            (i for i in changed if (i.main and i.main.change or 0.0) < 0),
            key=lambda i: i.main.change if i.main and i.main.change else 0.0,
        )
        up = sorted(
            (i for i in changed if (i.main and i.main.change or 0.0) > 0),
            key=lambda i: -(i.main.change if i.main and i.main.change else 0.0),
        )
        faster += down
        slower += up
        # Overhead moved: the largest increase, where the kind's total fell or another item of
        # it got faster (the rule of thumb: fix one place, the next slowest shows).
        if up and (down or (kind != "frame" and total_a < total_b)):
            moved.append(up[0])
    sync = Delta.of(before.weight_sync_s, after.weight_sync_s)
    collective = Delta.of(before.collective_s, after.collective_s)
    series = Delta.of(
        _kind_total(items, "series", False) if "series" in before.kinds else None,
        _kind_total(items, "series", True) if "series" in after.kinds else None,
    )
    reference = (
        max(refs)
        if refs
        else max(
            before.collective_s or 0.0,
            after.collective_s or 0.0,
            series.before or 0.0,
            series.after or 0.0,
        )
    )
    verdict = [_headline(step_s, sync, collective, series, reference, basis)]
    nbytes = Delta.of(before.sync_bytes, after.sync_bytes)
    bandwidth = Delta.of(before.sync_bandwidth, after.sync_bandwidth)
    if nbytes.before is not None and nbytes.after is not None:
        verdict.append(
            f"on the wire: {fmt_bytes_decimal(nbytes.before)} -> "
            f"{fmt_bytes_decimal(nbytes.after)} per sync at {fmt_rate(bandwidth.before)} -> "
            f"{fmt_rate(bandwidth.after)} (median)"
        )
    if faster:
        verdict.append(f"got faster: {_named(faster, per)}")
    if slower:
        verdict.append(f"got slower: {_named(slower, per)}")
    if moved:
        verdict.append(
            "overhead moved to "
            + "; ".join(f"{i.label} {fmt_item_change(i, per)}" for i in moved)
            + ": the next place to look (re-measure after every fix)"
        )
    if not faster and not slower:
        verdict.append(
            f"nothing changed by {MIN_REL_CHANGE:.0%} of itself and "
            f"{MIN_SHARE_OF_REFERENCE:.0%} of "
            f"{'a step' if basis == BASIS_STEP else 'the wall time'}"
        )
    return DiffResult(
        before=b,
        after=a,
        step_s=step_s,
        weight_sync_s=sync,
        rollout_share=Delta.of(before.rollout_share, after.rollout_share),
        collective_s=collective,
        items=tuple(items),
        faster=tuple(faster),
        slower=tuple(slower),
        moved_to=tuple(moved),
        verdict=tuple(verdict),
        notes=tuple(_comparability(b, a, basis)),
        basis=basis,
        sync_bytes=nbytes,
        sync_bandwidth=bandwidth,
    )


def _comparability(b: SideSummary, a: SideSummary, basis: str = BASIS_STEP) -> list[str]:
    """Notes on what makes the two sides less comparable, then each side's own notes."""
    notes: list[str] = []
    if basis == BASIS_SECOND:
        has = [
            f"{s.role.upper()} has {'no' if not s.steps else len(s.steps)} step(s)" for s in (b, a)
        ]
        notes.append(
            f"{' and '.join(has)}: both sides are compared as whole-run rates, time "
            "and calls per second of the wall time each covers (latency per call as "
            "is); step time is not compared. Add wsprof.step() for per-step numbers"
        )
        for s in (b, a):
            if not s.wall_s:
                notes.append(f"{s.role}: no timed record, so no wall time: its rates are unknown")
    if b.kind == "run" and b.process != a.process:
        notes.append(
            f"the sides are different processes ({b.process} before, {a.process} "
            "after): the primary of each run is compared"
        )
    if basis == BASIS_STEP and b.step_source != a.step_source:
        notes.append(
            f"steps came from {b.step_source} before and from {a.step_source} after: "
            "step boundaries differ, so per-step numbers compare less well"
        )
    if os.path.abspath(b.source) == os.path.abspath(a.source) and set(b.steps) & set(a.steps):
        both = sorted(set(b.steps) & set(a.steps))
        notes.append(
            f"the two windows of {b.source} share {len(both)} step(s) "
            f"({both[0]}-{both[-1]}): choose disjoint before and after step ranges"
        )
    notes += [f"before: {n}" for n in b.notes]
    notes += [f"after: {n}" for n in a.notes]
    return notes


def diff_paths(
    before: str,
    after: str,
    before_steps: StepRange | None = None,
    after_steps: StepRange | None = None,
) -> DiffResult:
    """``diff_loaded(load(before), load(after), ...)``: measure both paths and diff them.

    Args:
        before: run folder, trace or series file before the fix.
        after: the same after it (may be the same path with other steps).
        before_steps: steps of ``before`` to compare (half-open); None: every step.
        after_steps: steps of ``after`` to compare; None: every step.

    Returns:
        The diff.

    Raises:
        InputError: a path cannot be read, a range selects no step, or the sides are of
            different kinds.
    """
    return diff_loaded(load(before), load(after), before_steps, after_steps)


def diff_loaded(
    before: Loaded,
    after: Loaded,
    before_steps: StepRange | None = None,
    after_steps: StepRange | None = None,
) -> DiffResult:
    """Measure both inputs (each read once) and diff them (what ``wsprof diff`` runs).

    Args:
        before: the input before the fix (:func:`wsprof.inputs.load`).
        after: the input after it (may be the same path with other steps).
        before_steps: steps of ``before`` to compare (half-open); None: every step.
        after_steps: steps of ``after`` to compare; None: every step.

    Returns:
        The diff.

    Raises:
        InputError: no trace could be read, a range selects no step
            (:class:`StepRangeError`), or the sides are of different kinds.
    """
    return diff_sides(measure(before, before_steps, "before"), measure(after, after_steps, "after"))
