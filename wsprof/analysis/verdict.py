"""The verdict: problems, no problem, or inconclusive -- never a silent "no problem".

"No accumulating problem" is a claim about growth curves; it is only made when the data could
have shown one. :func:`judge` returns ``inconclusive`` (with the reason and what to do) when:

- a run has no steps (no markers, no preset, no rhythm or bursts found) and no sampling
  windows that stand in for them;
- there are fewer than :data:`MIN_STEPS_FOR_VERDICT` steps (or windows, or series points);
- the coverage audit found collectives that were issued but not recorded, unless the trace
  shows they cannot carry weight sync (DDP's gradient all-reduces: a limit, said in COVERAGE);
- a process lost records at its end (a damaged capture buffer) or a full capture buffer
  dropped calls (:mod:`wsprof.analysis.ending`);
- a trace of the run could not be read (corrupt or truncated);
- a rank of the primary's world (a trainer) has no steps: its own series were not judged;
- a time per step grows only with its newest step (``growth.hold_newest``), in ``analyze``
  and ``watch`` alike;
- a series input has no series that can accumulate.

With problems found, the same limits are kept as ``reasons``: a problem seen on part of the
data is still a problem.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from wsprof.analysis.ending import end_limits
from wsprof.analysis.facts import TIME_SERIES
from wsprof.analysis.model import Analysis, SeriesResult, Verdict, VerdictStatus
from wsprof.analysis.rules.base import SLOWDOWN_MATERIAL_SHARE
from wsprof.analysis.workload import explained_by_workload
from wsprof.contracts.series import STEP_S

#: Fewest steps (points of a series) for a "no problem" verdict: below 5 a rank trend test
#: cannot reach the 5% level (Mann-Kendall's smallest one-sided p for n = 4 is 1/24 only for a
#: perfectly ordered series) and a slow leak hides in the noise (see growth's short-series rules).
MIN_STEPS_FOR_VERDICT = 5


def _reasons(a: Analysis) -> list[str]:
    out: list[str] = []
    by_name = {r.series.name: r for r in a.series}
    held = [
        r.series.name
        for r in a.series
        if r.verdict.newest_step_alone
        and r.series.name in TIME_SERIES
        and _material(r, by_name)
        and explained_by_workload(r, by_name) is None  # a longer rollout is no trend either
    ]
    if held:
        # Growth that rests on the newest step alone waits for more steps: not "no problem".
        out.append(
            f"{', '.join(held)} grows only with its newest step (one slow step is not a "
            "trend): judged again with the next step"
        )
    if a.kind == "series":
        judged = [r for r in a.series if r.series.values]
        if not judged:
            out.append(
                "no series that can accumulate (durations, memory, resource counts): "
                "give a log or CSV with per-step times or memory"
            )
        elif max(len(r.series.values) for r in judged) < MIN_STEPS_FOR_VERDICT:
            n = max(len(r.series.values) for r in judged)
            out.append(
                f"only {n} step(s) in the series: a curve needs at least "
                f"{MIN_STEPS_FOR_VERDICT}; log more steps"
            )
        return out
    pa = a.primary
    if pa is None:
        return [
            "no process traces to judge: run the job under `wsprof run` or call "
            "wsprof.patch() in it"
        ]
    if not pa.steps:
        n_windows = sum(1 for w in pa.windows if w.n_active > 0)
        if n_windows == 0:
            out.append(
                "no steps found (no wsprof.step() markers, no preset, no repeating "
                "pattern of collectives): add wsprof.step() at the top of each training "
                "step, or set WSPROF_PRESET for your framework"
            )
        elif n_windows < MIN_STEPS_FOR_VERDICT:
            out.append(
                f"no steps and only {n_windows} sampling window(s): sample longer "
                f"(at least {MIN_STEPS_FOR_VERDICT} windows) or add wsprof.step()"
            )
    elif len(pa.steps) < MIN_STEPS_FOR_VERDICT:
        out.append(
            f"only {len(pa.steps)} step(s) of {pa.label} (from {pa.step_source}): a curve "
            f"needs at least {MIN_STEPS_FOR_VERDICT}; run longer"
        )
    out += _unjudged_trainers(a)

    for p in a.processes:
        out += end_limits(p.meta, p.self_overhead, p.label)
    if a.unread:
        n = len(a.unread)
        out.append(
            f"{n} trace{'s' if n != 1 else ''} of the run could not be read "
            f"({a.unread[0].removeprefix('skipped ')}): what could not be read was not "
            "judged; repair or remove the file, or analyse the readable traces alone"
        )
    cov = a.coverage
    # A shortfall whose unseen calls cannot carry weight sync (DDP's gradient all-reduces,
    # from evidence in the trace) is a limit stated in COVERAGE, not a reason to withhold
    # the verdict: otherwise every DDP job would be inconclusive forever.
    if cov is not None and cov.gaps:
        missing = sum(g.missing or 0 for g in cov.gaps)
        out.append(
            f"coverage incomplete: {missing} issued collective(s) were not recorded "
            "(see COVERAGE); what wsprof did not see cannot be judged"
        )
    return out


def _material(r: SeriesResult, by_name: dict[str, SeriesResult]) -> bool:
    """Whether ``r``'s growth, were it confirmed, would be a finding at warning or above: it
    adds at least :data:`~wsprof.analysis.rules.base.SLOWDOWN_MATERIAL_SHARE` of a median
    step over the steps seen (as :class:`~wsprof.analysis.rules.slowdown.AccumulatingSlowdown`)."""
    step = by_name.get(STEP_S)
    s = r.series
    if step is None or not step.series.values or len(s.steps) < 2:
        return True
    added = r.verdict.slope_per_step * (s.steps[-1] - s.steps[0])
    return added >= SLOWDOWN_MATERIAL_SHARE * statistics.median(step.series.values)


def _unjudged_trainers(a: Analysis) -> list[str]:
    """A reason per rank of the primary's world (the trainers) whose steps could not be found:
    its own series were not judged, so a leak on it alone would go unseen (issue 28: never a
    silent "no problem" for a trainer rank)."""
    pa = a.primary
    if pa is None or not pa.steps or not a.worlds:
        return []
    world = next((w for w in a.worlds if pa.pid in w.pids), None)
    if world is None:
        return []
    missing = [p.label for p in a.processes if p.pid in world.pids and not p.steps]
    if not missing:
        return []
    return [
        f"no steps found on {', '.join(missing)} (same world as {pa.label}): its own series "
        "were not judged; mark its steps with wsprof.step() or set WSPROF_PRESET"
    ]


def judge(a: Analysis) -> Verdict:
    """The verdict of ``a`` from its findings, steps, series and coverage."""
    n_findings = sum(1 for f in a.findings if f.severity != "info")
    # A problem is a cause: the diagnoses at warning or above (one bug trips several
    # findings). An analysis built by hand without diagnoses counts its findings.
    n = sum(1 for d in a.diagnoses if d.severity != "info") if a.diagnoses else n_findings
    reasons = tuple(_reasons(a))
    if n_findings:
        return Verdict(VerdictStatus.PROBLEMS, max(n, 1), reasons, n_findings)
    status = VerdictStatus.INCONCLUSIVE if reasons else VerdictStatus.NO_PROBLEM
    return Verdict(status, 0, reasons)


def with_verdict(a: Analysis) -> Analysis:
    """``a`` with its :attr:`~wsprof.analysis.model.Analysis.verdict` set."""
    return replace(a, verdict=judge(a))
