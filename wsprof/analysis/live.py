"""Live analysis of a run folder being written: the model behind ``wsprof watch``.

Incremental: each refresh reads only the rows added since the previous one
(:mod:`wsprof.trace.follow`) and turns only the steps completed since into step rows, with the
same code as ``wsprof analyze`` (:func:`~wsprof.analysis.steps.steps_from_markers`). A step is
complete when its ``step`` span is in the trace: the recorder writes a step's span after every
call and phase of it (one ordered capture buffer), so its rows never change afterwards. What a
refresh keeps in memory is one row per step per process, running totals, and the calls and
spans of each process's open step; raw calls of completed steps are released. py-spy's
sampling windows (already one row per stack per window) are kept as read and joined to the
process whose pid they sampled, as in ``wsprof analyze`` (:meth:`LiveProcess.analysis`).

Judging stays bounded as the run grows:

- a series of more than :data:`MAX_JUDGED_POINTS` steps is judged on that many points, each
  the mean of consecutive steps (:func:`binned`): the curve's shape and its slope per step are
  kept, the classifier's cost (about 50 ms at 100 points, 550 ms at 1,000 on one core) is not
  paid again at every step;
- the headline series (the primary process's, as in ``wsprof analyze``) are judged again
  whenever they have a new step; each rank's own series (weight sync, time between layers,
  sync gaps: for the outlier-rank rule) within :data:`RANK_JUDGE_BUDGET_S` per refresh, the
  least recently judged first; the others keep their last verdict until their turn.

A growth verdict that rests on the newest step alone (without that step the series is not
judged to grow) is held back until the next step: judged live, the newest step is where a
single slow step (a checkpoint save, an evaluation) falls, and one slow step is not a trend.

The verdict, findings and diagnoses come from the same rules as ``wsprof analyze``
(:func:`~wsprof.analysis.rules.run_rules`, :func:`~wsprof.analysis.chains.diagnose`,
:func:`~wsprof.analysis.verdict.with_verdict`) applied to these rows. Steps are taken from step
markers (``wsprof.step()``, a preset's phases); a process without them is said to be
unjudged, never healthy: ``wsprof analyze`` finds its steps from the job's rhythm after the run.
Analysis never runs inside the training processes: this runs in the watching process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from wsprof.analysis.align import align, anchor_of, clock_input
from wsprof.analysis.conclude import conclude
from wsprof.analysis.coverage import coverage_of
from wsprof.analysis.facts import TIME_BUDGETS_S, Facts
from wsprof.analysis.growth import classify, hold_newest
from wsprof.analysis.headline import headline_of
from wsprof.analysis.link_limit import link_limit
from wsprof.analysis.live_process import LiveProcess, rows_in
from wsprof.analysis.model import (
    Analysis,
    AnalysisKind,
    GrowthVerdict,
    ProcessAnalysis,
    RankSeries,
    SeriesResult,
    StepRow,
)
from wsprof.analysis.process import (
    primary_key,
)
from wsprof.analysis.ranks import RankInput, judged_series, rank_series, sync_lags
from wsprof.analysis.run import with_unread
from wsprof.analysis.snapshot import LiveRank, OpTotal, WatchSnapshot
from wsprof.analysis.wire import sync_backends
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    SYNC_GAP_S,
    WEIGHT_SYNC_S,
    Series,
)
from wsprof.contracts.units import Unit
from wsprof.trace.follow import RunFollower, TraceFollower
from wsprof.trace.model import (
    SampleWindow,
)
from wsprof.trace.salvage import TraceState, end_of

#: Most points a series is judged on; longer series are judged on means of consecutive steps.
#: growth's classifier costs about 50 ms at 100 points and 550 ms at 1,000 (Theil-Sen and
#: Mann-Kendall are quadratic in the points), measured on one core of the CI machine.
MAX_JUDGED_POINTS = 100
#: Wall time per refresh for judging the ranks' own series again, s (the headline series are
#: always judged): 64 ranks x 3 series at about 50 ms each take 10 s, so each rank's turn
#: comes every few refreshes instead of every refresh taking 10 s.
RANK_JUDGE_BUDGET_S = 1.0


def binned(s: Series, max_points: int = MAX_JUDGED_POINTS) -> Series:
    """``s`` itself when it has at most ``max_points`` points, else the means of consecutive
    runs of ``ceil(n / max_points)`` points (the last run may be shorter), each at the rounded
    mean of its step numbers: the same slope per step, less noise, at most ``max_points``
    points. Per-point configurations are dropped."""
    n = len(s.values)
    if n <= max_points:
        return s
    width = math.ceil(n / max_points)
    idx = np.arange(n) // width
    counts = np.bincount(idx)
    values = np.bincount(idx, weights=np.asarray(s.values, dtype=np.float64)) / counts
    steps = np.bincount(idx, weights=np.asarray(s.steps, dtype=np.float64)) / counts
    return replace(
        s,
        steps=tuple(int(round(x)) for x in steps),
        values=tuple(float(v) for v in values),
        config=None,
    )


def _judge(
    s: Series, budgets: dict[str, float], notes: list[str] | None = None
) -> SeriesResult | None:
    """The series and its verdict, judged on at most :data:`MAX_JUDGED_POINTS` points (with
    its time budget, s, from ``budgets``; :func:`on_every_step`); None, with a note, when it
    cannot be judged."""
    b = binned(s)
    try:
        budget = budgets.get(s.name) if s.unit is Unit.SECONDS else None
        verdict = classify(b.values, steps=b.steps, budget=budget)
        # The newest step is the one a spike (a checkpoint save, an eval step) falls on:
        # growth that rests on it alone waits for the next step (as in `wsprof analyze`).
        verdict = hold_newest(b.values, verdict, steps=b.steps, budget=budget)
    except (ValueError, OverflowError, FloatingPointError, ZeroDivisionError) as e:
        if notes is not None:
            notes.append(f"series {s.name!r} not judged: {e}")
        return None
    return SeriesResult(s, verdict if b is s else on_every_step(verdict, b, s))


def on_every_step(verdict: GrowthVerdict, judged: Series, full: Series) -> GrowthVerdict:
    """A verdict judged on :func:`binned` points, restated for the full series: positions
    (change point, warm-up points) scaled to the steps they stand for, the fitted curve
    interpolated at every step; slopes, projections and budget steps are per step number
    already. ``evidence`` says how it was judged (``judged_points``, ``steps_per_point``)."""
    width = math.ceil(len(full.values) / len(judged.values))
    last = len(full.values) - 1
    stats = dict(verdict.evidence)
    if verdict.judged_from:
        stats["warmup_points"] = min(verdict.judged_from * width, last)
    stats.update(judged_points=len(judged.values), steps_per_point=width)
    fitted = np.interp(
        np.asarray(full.steps, dtype=np.float64),
        np.asarray(judged.steps, dtype=np.float64),
        np.asarray(verdict.fitted, dtype=np.float64),
    )
    return replace(
        verdict,
        change_point=(
            None if verdict.change_point is None else min(verdict.change_point * width, last)
        ),
        fitted=tuple(float(v) for v in fitted),
        evidence=stats,
    )


@dataclass
class _Judged:
    """A cached verdict and how many steps it was judged on."""

    steps: int
    verdict: GrowthVerdict | None


class LiveRun:
    """A run folder followed refresh by refresh (see the module docstring).

    Args:
        folder: the run folder; it may not exist yet.
        host: follow only the traces written on this host (one ``watch`` per node on a shared
            folder); None: all.
        sync_budget_s: the weight-sync time whose crossing step is projected, s (default:
            ``wsprof analyze``'s, :data:`~wsprof.analysis.facts.TIME_BUDGETS_S`).
        rank_budget_s: wall time per refresh for judging ranks' own series again, s.
        clock: the wall clock of a refresh's duration (injectable for tests).
        link_gbps: the link limit the user states, GB/s (``--link-gbps``); None: detected.
    """

    def __init__(
        self,
        folder: str,
        host: str | None = None,
        sync_budget_s: float | None = None,
        rank_budget_s: float = RANK_JUDGE_BUDGET_S,
        clock: Any = time.perf_counter,
        link_gbps: float | None = None,
    ) -> None:
        self.folder = folder
        self.link_gbps = link_gbps
        self.budgets = dict(TIME_BUDGETS_S)
        if sync_budget_s is not None:
            self.budgets[WEIGHT_SYNC_S] = float(sync_budget_s)
        self.follower = RunFollower(folder, host)
        self.procs: dict[str, LiveProcess] = {}
        self.rank_budget_s = rank_budget_s
        self._clock = clock
        self._judged: dict[tuple[str, str], _Judged] = {}
        self._primary: dict[str, _Judged] = {}
        self._primary_path: str | None = None
        self._primary_results: dict[str, SeriesResult] = {}
        #: path -> the generation of its follower whose rows ``procs`` holds.
        self._generation: dict[str, int] = {}
        #: path -> (what its per-rank row was made from, the row) as last made.
        self._rank_cache: dict[str, tuple[tuple[int, ...], RankSeries]] = {}
        self.refreshes = 0

    def refresh(self) -> WatchSnapshot:
        """Read what was added, make rows of the completed steps, judge, and return the run
        as it stands."""
        t0 = self._clock()
        new_steps: list[tuple[str, StepRow]] = []
        rows_read = 0
        for path, delta in self.follower.poll():
            if delta is None:
                continue
            gen = self.follower.traces[path].generation
            if self._generation.get(path, gen) != gen:
                self._forget(path)  # another file under the same name: read from its start
            self._generation[path] = gen
            proc = self.procs.setdefault(path, LiveProcess(path))
            rows_read += rows_in(delta)
            new_steps += [(proc.label, r) for r in proc.add(delta)]
        read_s = self._clock() - t0
        analysis = self._analysis()
        self.refreshes += 1
        followers = self.follower.traces
        ranks = tuple(self._live_rank(p, followers.get(p.path)) for p in self._ordered())
        states = [r.state for r in ranks]
        ended = bool(states) and all(s in ("closed", "killed", "removed") for s in states)
        new_steps.sort(key=lambda x: (x[1].step, x[0]))
        return WatchSnapshot(
            source=self.folder,
            analysis=analysis,
            ranks=ranks,
            new_steps=tuple(new_steps),
            refresh_s=self._clock() - t0,
            read_s=read_s,
            rows_read=rows_read,
            ended=ended,
            refreshes=self.refreshes,
            sync_budget_s=self.budgets[WEIGHT_SYNC_S],
        )

    def close(self) -> None:
        self.follower.close()

    def _forget(self, path: str) -> None:
        """Drop what was made of the trace at ``path`` (its rows, verdicts, rank row)."""
        self.procs.pop(path, None)
        self._rank_cache.pop(path, None)
        for key in [k for k in self._judged if k[0] == path]:
            del self._judged[key]
        if self._primary_path == path:
            self._primary_path = None
            self._primary.clear()
            self._primary_results.clear()

    def _ordered(self) -> list[LiveProcess]:
        """Primary first, as ``wsprof analyze`` orders processes: one with steps, by rank
        (unknown last), most calls, pid."""

        return sorted(
            self.procs.values(),
            key=lambda p: primary_key(bool(p.rows), p.rank, p.n_calls, p.pid),
        )

    def _primary_series(self, proc: LiveProcess, notes: list[str]) -> list[SeriesResult]:
        """The headline series judged again where they have new steps."""
        if proc.path != self._primary_path:
            self._primary_path = proc.path
            self._primary.clear()
            self._primary_results.clear()
        out: list[SeriesResult] = []
        for s in proc.series():
            hit = self._primary.get(s.name)
            if hit is None or hit.steps != len(s.values):
                res = _judge(s, self.budgets, notes)
                self._primary[s.name] = _Judged(len(s.values), res.verdict if res else None)
                if res is not None:
                    self._primary_results[s.name] = res
                else:
                    self._primary_results.pop(s.name, None)
            res = self._primary_results.get(s.name)
            if res is not None:
                out.append(res)
        return out

    def _rank_rows(
        self,
        procs: Sequence[LiveProcess],
        pas: Mapping[str, ProcessAnalysis],
        notes: list[str],
    ) -> list[RankSeries]:
        """Per-rank rows (as ``wsprof analyze`` makes them), judging within the budget
        (``pas``: path -> the process's analysis)."""
        with_steps = [p for p in procs if p.rows]
        if not with_steps:
            return []
        clock = align([clock_input(p.label, p.meta, p.first_ns or 0) for p in with_steps])
        if len(with_steps) > 1:
            notes.extend(clock.notes)
        self._judge_ranks(with_steps, pas)
        rows: dict[int, RankSeries] = {}
        todo: list[int] = []
        for i, p in enumerate(with_steps):
            cached = self._rank_cache.get(p.path)
            if cached is not None and cached[0] == self._rank_version(p):
                rows[i] = cached[1]
            else:
                todo.append(i)

        def verdicts_of(p: LiveProcess) -> Callable[[Series], GrowthVerdict | None]:
            def judged(s: Series) -> GrowthVerdict | None:
                hit = self._judged.get((p.path, s.name))
                return hit.verdict if hit is not None else None

            return judged

        rank_inputs: list[RankInput] = []
        for i in todo:
            p = with_steps[i]
            wrappers = [w for w in p.wrappers() if w.kind == "name"]
            rank_inputs.append(
                RankInput(
                    pas[p.path],
                    p.host,
                    clock.clocks[i],
                    tuple(r.sync_start_ns for r in p.rows),
                    wrappers[0].label() if wrappers else None,
                )
            )
        made = rank_series(rank_inputs, [verdicts_of(with_steps[i]) for i in todo])
        for i, row in zip(todo, made):
            rows[i] = row
            self._rank_cache[with_steps[i].path] = (self._rank_version(with_steps[i]), row)
        ordered = [rows[i] for i in sorted(rows)]
        lags = sync_lags(ordered)
        return [replace(r, sync_lag_s=lag) for r, lag in zip(ordered, lags)]

    def _judge_ranks(
        self, procs: Sequence[LiveProcess], pas: Mapping[str, ProcessAnalysis]
    ) -> None:
        """Judge the ranks' own series that have new steps, the least recently judged first,
        until :attr:`rank_budget_s` is spent; the others keep their verdicts."""
        deadline = self._clock() + self.rank_budget_s
        for p in sorted(procs, key=lambda p: self._judged_steps(p) - len(p.rows)):
            if self._clock() > deadline:
                break
            names = (WEIGHT_SYNC_S, BETWEEN_LAYERS_S, SYNC_GAP_S)
            if all(self._judged_at((p.path, n)) == len(p.rows) for n in names):
                continue
            for name, s in judged_series(pas[p.path]).items():
                res = _judge(s, self.budgets)
                self._judged[(p.path, name)] = _Judged(len(p.rows), res.verdict if res else None)
            for name in names:  # a series without values is judged as nothing, once
                self._judged.setdefault((p.path, name), _Judged(len(p.rows), None))

    def _judged_at(self, key: tuple[str, str]) -> int:
        hit = self._judged.get(key)
        return hit.steps if hit is not None else -1

    def _rank_version(self, p: LiveProcess) -> tuple[int, ...]:
        """What a rank's row is made from: its steps and the steps its verdicts were judged on."""
        return (
            len(p.rows),
            *(self._judged_at((p.path, n)) for n in (WEIGHT_SYNC_S, BETWEEN_LAYERS_S, SYNC_GAP_S)),
        )

    def _judged_steps(self, p: LiveProcess) -> int:
        hit = self._judged.get((p.path, "weight_sync_s"))
        return hit.steps if hit is not None else 0

    def windows_by_pid(self) -> dict[int, list[SampleWindow]]:
        """pid -> the sampling windows every trace read holds of it, traces by rank (unknown
        last) and pid, as ``wsprof analyze`` reads a run folder."""
        out: dict[int, list[SampleWindow]] = {}
        traces = sorted(self.procs.values(), key=lambda p: (_or_last(p.rank), p.pid or 0))
        for p in traces:
            for w in p.samples:
                out.setdefault(w.pid, []).append(w)
        return out

    def windows_of(
        self, p: LiveProcess, by_pid: Mapping[int, Sequence[SampleWindow]] | None = None
    ) -> Sequence[SampleWindow]:
        """The sampling windows of ``p``'s pid recorded by the traces read (a sampler's), as
        ``wsprof analyze`` matches them; :meth:`LiveProcess.analysis` uses them when its own
        trace has none."""
        if p.samples or p.pid is None:
            return ()
        return (self.windows_by_pid() if by_pid is None else by_pid).get(p.pid, ())

    def _analysis(self) -> Analysis:
        # A sampler's trace is no process of the run (as in `wsprof analyze`): its windows
        # are joined to the processes whose pids they sampled.
        followed = self._ordered()
        procs = [p for p in followed if not p.sampler_only] or followed
        notes: list[str] = []
        by_pid = self.windows_by_pid()
        analyses = [p.analysis(self.windows_of(p, by_pid)) for p in procs]
        pas = {p.path: a for p, a in zip(procs, analyses)}
        results = self._primary_series(procs[0], notes) if procs and procs[0].rows else []
        ranks = self._rank_rows(procs, pas, notes)
        wrappers = procs[0].wrappers() if procs else []
        errors = [e for p in procs for e in p.internal_errors]
        limit = (
            link_limit(
                analyses[0].meta,
                sync_backends(analyses[0].steps, analyses[0].meta),
                {str(h) for p in procs if (h := p.meta.get("host"))},
                self.link_gbps,
            )
            if analyses
            else None
        )
        head = headline_of(analyses[0] if analyses else None, results, self.folder, analyses, limit)
        facts = Facts(
            {r.series.name: r for r in results},
            analyses,
            wrappers,
            errors,
            ranks=ranks,
            headline=head,
            budgets=self.budgets,
        )
        unmarked = [p.label for p in procs if not p.rows and p.n_calls]
        if unmarked:
            notes.append(
                f"no completed step markers yet in {', '.join(unmarked)}: watch judges steps "
                "marked by wsprof.step() or a preset; `wsprof analyze` finds the steps of an "
                "unmarked job from its rhythm when the run is over"
            )
        repeated = sum(p.repeated for p in procs)
        if repeated:
            notes.append(
                f"{repeated} step span(s) repeated a step number already completed: watch "
                "counted each step once (`wsprof analyze` merges them)"
            )
        if any(len(p.rows) > MAX_JUDGED_POINTS for p in procs):
            notes.append(
                f"series of more than {MAX_JUDGED_POINTS} steps are judged on at most "
                f"{MAX_JUDGED_POINTS} points, each the mean of consecutive steps "
                "(`wsprof analyze` judges every step)"
            )
        unread = tuple(f"skipped {m}" for m in self.follower.problems())
        analysis = conclude(
            facts,
            Analysis(
                source=self.folder,
                kind=AnalysisKind.RUN,
                processes=tuple(analyses),
                series=tuple(results),
                findings=(),
                diagnoses=(),
                notes=tuple(notes),
                wrappers=tuple(wrappers),
                ranks=tuple(ranks),
                coverage=with_unread(
                    coverage_of([(p.label, p.audit(), p.n_calls > 0) for p in procs]), unread
                ),
                unread=unread,
                headline=head,
            ),
            {a.label: p.wrappers() for p, a in zip(procs, analyses)},
        )
        return analysis

    def _live_rank(self, p: LiveProcess, follower: TraceFollower | None) -> LiveRank:
        ov = p.self_overhead
        problem = follower.problem if follower is not None else None
        removed = follower is None or follower.removed
        anchor = anchor_of(p.meta)
        groups = p.audit() or []
        issued_known = bool(groups) and all(g.issued is not None for g in groups)
        hit = self._judged.get((p.path, "weight_sync_s"))
        if p.path == self._primary_path and "weight_sync_s" in self._primary_results:
            sync: GrowthVerdict | None = self._primary_results["weight_sync_s"].verdict
            judged = self._primary["weight_sync_s"].steps
        else:
            sync, judged = (hit.verdict, hit.steps) if hit is not None else (None, 0)
        return LiveRank(
            label=p.label,
            rank=p.rank,
            host=p.host,
            pid=p.pid,
            path=p.path,
            state=TraceState.REMOVED if removed else end_of(p.meta),
            started_unix_ns=anchor[1] if anchor else None,
            steps=len(p.rows),
            last=p.rows[-1] if p.rows else None,
            ops=tuple(
                sorted(
                    (OpTotal(op, int(v[0]), v[1] / 1e9) for op, v in p.ops.items()),
                    key=lambda o: -o.seconds,
                )
            ),
            issued=sum(g.issued or 0 for g in groups) if issued_known else None,
            recorded=sum(g.recorded for g in groups) if issued_known else None,
            hook_s=(
                ov.hook_ns_per_call * p.n_calls / 1e9 if ov.hook_ns_per_call is not None else None
            ),
            flush_s=ov.flush_s,
            probe_s=ov.probes.spent_ns / 1e9 if ov.probes is not None else 0.0,
            dropped_calls=ov.dropped_calls,
            lost_calls=ov.lost_calls,
            dropped_records=ov.dropped_records,
            internal_errors=len(p.internal_errors),
            sync=sync,
            sync_judged_steps=judged,
            problem=problem,
        )


def _or_last(rank: int | None) -> int:
    return rank if rank is not None else 1 << 30
