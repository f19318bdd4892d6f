"""Steps from py-spy's sampled phases: ``wsprof attach`` on a job with long steps.

Sampled from outside, a process has no collective calls and no markers, only sampling windows
whose stacks were classified into phases (:mod:`wsprof.analysis.phases`: rollout, train,
weight sync). When a step is much longer than a window (RL steps take minutes; windows one
second), the windows themselves show the step's phases one after another: rollout windows,
then train, then weight sync, then rollout again. :func:`steps_from_windows` cuts a step at the
first rollout window after any other phase and sums each phase's time per step.

Each window is assigned the phase with most of its active samples among rollout, train and
weight sync (none: the window is ``other`` and belongs to the step it falls in). A phase's
time in a window is the window's length times that phase's share of the window's samples, so
phase times add up to the sampled time, idle included in ``step_s``.

Pure: window summaries in, step rows out.
"""

from __future__ import annotations

from collections.abc import Sequence

from wsprof.analysis.model import StepRow, WindowSummary
from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC

#: Fewest steps worth reporting (fewer: the windows stand in for steps, as before).
MIN_SAMPLED_STEPS = 3
#: A window belongs to a phase when that phase has at least this share of its active samples.
MIN_WINDOW_SHARE = 0.5
_PHASES = (ROLLOUT, TRAIN, WEIGHT_SYNC)


def window_phase(w: WindowSummary) -> str | None:
    """The phase with at least :data:`MIN_WINDOW_SHARE` of ``w``'s active samples, or None."""
    if w.n_active <= 0:
        return None
    best = max(_PHASES, key=lambda p: w.phase_samples.get(p, 0))
    return best if w.phase_samples.get(best, 0) >= MIN_WINDOW_SHARE * w.n_active else None


def steps_from_windows(windows: Sequence[WindowSummary]) -> list[StepRow]:
    """One step per rollout that follows another phase in the windows (time order).

    Windows before the first such rollout are left out (the step they belong to started before
    sampling did, as does a rollout in the very first window); the last step ends with the last
    window and is cut short when sampling stopped early. Rows have ``rollout_s``, ``train_s``
    and ``weight_sync_s`` from sample shares (s), no collective counts. Empty with fewer than
    :data:`MIN_SAMPLED_STEPS` steps.
    """
    phases = [window_phase(w) for w in windows]
    starts: list[int] = []
    prev: str | None = None
    for i, p in enumerate(phases):
        if p is None:
            continue
        if p == ROLLOUT and prev != ROLLOUT and i > 0:
            starts.append(i)
        prev = p
    if len(starts) < MIN_SAMPLED_STEPS:
        return []
    bounds = [*starts, len(windows)]
    rows: list[StepRow] = []
    for k in range(len(starts)):
        ws = windows[bounds[k] : bounds[k + 1]]
        times = {p: 0.0 for p in _PHASES}
        for w in ws:
            dur = (w.t_end_ns - w.t_start_ns) / 1e9
            for p in _PHASES:
                if w.n_samples:
                    times[p] += dur * w.phase_samples.get(p, 0) / w.n_samples
        t0, t1 = ws[0].t_start_ns, ws[-1].t_end_ns
        step_s = (t1 - t0) / 1e9
        known = sum(times.values())
        rows.append(
            StepRow(
                k,
                t0,
                t1,
                step_s,
                times[ROLLOUT],
                times[TRAIN],
                times[WEIGHT_SYNC],
                max(step_s - known, 0.0),
                0,
                0.0,
                0.0,
            )
        )
    return rows
