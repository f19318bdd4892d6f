"""Phase shares: the rollout share of each step, and sampled phases whose share rises."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wsprof.analysis.chain import Role, fmt_pct
from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.facts import Facts
from wsprof.analysis.headline import headline_of
from wsprof.analysis.model import ROLLOUT_SHARE_KIND, Finding, Severity
from wsprof.analysis.rules.base import (
    FRAME_SHIFT_MIN_CHANGE,
    Rule,
    _first_last,
    growth_is_material,
)
from wsprof.contracts.series import WEIGHT_SYNC_S, WINDOW_WEIGHT_SYNC_SHARE
from wsprof.contracts.units import fmt_duration

#: Least rise of the fitted weight-sync share over the windows for its growth (an accumulating
#: verdict) to be a warning: 10 points of the process's time; a trend in a share that stays
#: within a few points is not a slowdown worth acting on.
SAMPLED_SHARE_MIN_RISE = 0.1
#: Least rise of the mean weight-sync share, first third of the windows against the last third,
#: to be a warning whatever the curve's shape: a share cannot exceed 1, so weight sync that
#: takes over the process saturates (warmup_then_flat) instead of growing linearly. The same
#: materiality as :data:`FRAME_SHIFT_MIN_CHANGE`.
SAMPLED_SHARE_MIN_SHIFT = FRAME_SHIFT_MIN_CHANGE
#: Fewest windows with active samples for a rising weight-sync share to be judged (fewer: not a
#: curve, as for steps).
SAMPLED_SHARE_MIN_WINDOWS = 3


@dataclass(frozen=True, kw_only=True)
class RolloutShareEvidence(Evidence):
    """The headline's numbers (``rollout_share``).

    Attributes:
        steps: the steps they are read from.
        median_step_s: median step time.
        median_rollout_share: median rollout share of a step (only when rollout is marked).
        median_weight_sync_s: median own weight-sync time (only when the steps give one).
        last_weight_sync_s: the last step's own weight-sync time: with
            ``median_weight_sync_s`` only, and then always in the JSON (``null`` when the last
            step has none).
        median_weight_sync_share: median weight-sync share of a step.
        median_sync_wait_s: median wait for slower ranks to join the sync (only when > 0).
    """

    steps: int = field(metadata=unit("count"))
    median_step_s: float | None = field(metadata=unit("s"))
    median_rollout_share: float | None = optional("share")
    median_weight_sync_s: float | None = optional("s")
    last_weight_sync_s: float | None = field(default=None, metadata=unit("s"))
    median_weight_sync_share: float | None = optional("share")
    median_sync_wait_s: float | None = optional("s")

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        if self.median_weight_sync_s is None:
            del out["last_weight_sync_s"]  # said with the median only (null there when unknown)
        return out


class RolloutShare(Rule):
    """The two numbers a user wants first: rollout share and weight-sync time."""

    kind = ROLLOUT_SHARE_KIND
    description = "rollout share of each step and weight-sync share"

    def match(self, facts: Facts) -> list[Finding]:
        pa = facts.primary
        if pa is None or not pa.steps:
            return []
        # The numbers are the analysis's headline (computed once, wsprof.analysis.headline).
        h = facts.headline or headline_of(pa, list(facts.series.values()), "")
        parts = []
        if h.rollout_share_median is not None:
            parts.append(f"rollout {h.rollout_share_median:.0%} of each step")
        wait_s: float | None = None  # said only when the own sync is, and then when > 0
        if h.own_sync_median_s is not None:
            parts.append(
                f"weight sync {fmt_duration(h.own_sync_median_s)} median "
                f"({fmt_duration(h.own_sync_last_s)} last step)"
            )
            if h.sync_wait_median_s is not None and h.sync_wait_median_s > 0:
                wait_s = h.sync_wait_median_s
                parts.append(
                    f"plus {fmt_duration(h.sync_wait_median_s)} median waiting "
                    "for slower ranks to join it"
                )
        if not parts:
            return []
        synced = h.own_sync_median_s is not None
        return [
            Finding(
                self.kind,
                Severity.INFO,
                "; ".join(parts) + f" ({pa.label}, steps from {pa.step_source})",
                RolloutShareEvidence(  # the sync's numbers only with its median
                    steps=h.n_steps,
                    median_step_s=h.step_median_s,
                    median_rollout_share=h.rollout_share_median,
                    median_weight_sync_s=h.own_sync_median_s,
                    last_weight_sync_s=h.own_sync_last_step_s if synced else None,
                    median_weight_sync_share=h.weight_sync_share_median if synced else None,
                    median_sync_wait_s=wait_s,
                ),
                pa.label,
                _share_advice(h.rollout_share_median, h.weight_sync_share_median),
            )
        ]


#: Rollout share at or below which the generating GPUs are said to wait on something else
#: (in the motivating case rollout was 68 s of a 57-minute step, 2%); at or above
#: :data:`HIGH_ROLLOUT_SHARE` generation is what the step is made of.
LOW_ROLLOUT_SHARE = 0.3
HIGH_ROLLOUT_SHARE = 0.7


def _share_advice(rollout: float | None, sync: float | None) -> str:
    """What the two numbers say, worded for the share there is."""
    sync_txt = f" and weight sync {sync:.0%} of it" if sync is not None else ""
    if rollout is None:
        return (
            "mark rollout (wsprof.phase('rollout') or a preset) to get the rollout share; "
            "weight sync against step time is the other number to watch"
        )
    if rollout <= LOW_ROLLOUT_SHARE:
        return (
            f"rollout is {rollout:.0%} of the step{sync_txt}: the GPUs that generate wait on "
            "the rest of the step (weight sync, training); a growing weight sync makes it worse"
        )
    if rollout >= HIGH_ROLLOUT_SHARE:
        return (
            f"rollout is {rollout:.0%} of the step{sync_txt}: generation dominates, as it "
            "should; watch that the weight sync does not grow into it"
        )
    return (
        f"rollout is {rollout:.0%} of the step{sync_txt}: the rest of the step is training "
        "and weight sync; watch which of them grows"
    )


def _windows_word(n: int) -> str:
    return f"{n} window" if n == 1 else f"{n} windows"


def _pct_span(values: Sequence[float]) -> str:
    return f"{np.median(values):.0%} median ({values[0]:.0%} first -> {values[-1]:.0%} last)"


@dataclass(frozen=True, kw_only=True)
class SampledShareEvidence(Evidence):
    """Weight-sync and rollout shares of the sampled windows of a process
    (``sampled_phase_share``).

    Attributes:
        windows: windows with active samples.
        phase_source: the phase patterns the samples were classified by.
        median_weight_sync_share, first_weight_sync_share, last_weight_sync_share: weight
            sync's share of a window's active samples: median, first window, last window.
        median_rollout_share, first_rollout_share, last_rollout_share: the same for rollout.
        k_windows: windows on each side of the early/late means.
        early_weight_sync_share: mean weight-sync share of the first ``k_windows``.
        late_weight_sync_share: the same of the last ``k_windows``.
        shape: the judged share series' shape (the primary process with one only).
        accumulating: whether its verdict says it grows (with ``shape``).
        slope_per_window: its Theil-Sen slope, share per window (with ``shape``).
        fitted_rise: its fitted curve's rise, first window to last (with ``shape``).
        grows: whether the weight-sync share grows (and the per-step sync time does not say
            otherwise).
    """

    windows: int = field(metadata=unit("count"))
    phase_source: str
    median_weight_sync_share: float = field(metadata=unit("share"))
    first_weight_sync_share: float = field(metadata=unit("share"))
    last_weight_sync_share: float = field(metadata=unit("share"))
    median_rollout_share: float = field(metadata=unit("share"))
    first_rollout_share: float = field(metadata=unit("share"))
    last_rollout_share: float = field(metadata=unit("share"))
    k_windows: int = field(metadata=unit("count"))
    early_weight_sync_share: float = field(metadata=unit("share"))
    late_weight_sync_share: float = field(metadata=unit("share"))
    shape: str | None = optional()
    accumulating: bool | None = optional()
    slope_per_window: float | None = optional("share")
    fitted_rise: float | None = optional("share")
    grows: bool


class SampledPhaseShare(Rule):
    """Rollout share and weight-sync share per sampling window, from py-spy samples classified
    by frame patterns (:mod:`wsprof.analysis.phases`): the two numbers without step markers."""

    kind = "sampled_phase_share"
    roles = ((kind, Role.SAMPLED_SHARE),)
    description = "rollout and weight-sync share of samples per window, and whether sync grows"

    def symptom_rows(self, f: Finding) -> tuple[tuple[str, str], ...]:
        """The share of the weight sync, first window to last and early to late mean (another
        rule's evidence: its rows in their units)."""
        ev = f.evidence
        if not isinstance(ev, SampledShareEvidence):
            return super().symptom_rows(f)
        return (
            ("windows", str(ev.windows)),
            (
                "weight-sync share, first -> last",
                f"{fmt_pct(ev.first_weight_sync_share)} -> {fmt_pct(ev.last_weight_sync_share)}",
            ),
            (
                "mean, early -> late",
                f"{fmt_pct(ev.early_weight_sync_share)} -> {fmt_pct(ev.late_weight_sync_share)}",
            ),
            ("phase patterns", str(ev.phase_source)),
        )

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for i, pa in enumerate(facts.processes):
            active = [w for w in pa.windows if w.n_active > 0]
            if not active:
                continue
            sync = [w.weight_sync_share or 0.0 for w in active]
            roll = [w.rollout_share or 0.0 for w in active]
            src = pa.phase_source or "generic"
            where = f"{pa.label}, {_windows_word(len(active))}, {src} patterns"
            severity = Severity.INFO
            if not any(sync) and not any(roll):
                title = (
                    f"sampled phases ({where}): no sample matched a rollout or weight-sync pattern"
                )
                next_step = (
                    "name the entry points: wsprof attach PID --phase "
                    "weight_sync=REGEX --phase rollout=REGEX (or --framework NAME)"
                )
            else:
                title = (
                    f"sampled phases per window ({where}): weight sync {_pct_span(sync)} "
                    f"of active samples; rollout {_pct_span(roll)}"
                )
                next_step = (
                    "a low rollout share with a large weight-sync share means the GPUs "
                    "that generate wait on the sync"
                )
            k = max(1, len(sync) // 3)
            early, late = float(np.mean(sync[:k])), float(np.mean(sync[-k:]))
            grows = len(sync) >= SAMPLED_SHARE_MIN_WINDOWS and late - early >= (
                SAMPLED_SHARE_MIN_SHIFT
            )
            res = facts.series.get(WINDOW_WEIGHT_SYNC_SHARE) if i == 0 else None
            v = res.verdict if res is not None else None  # the judged series of the shares
            shape = ""
            rise: float | None = None
            if v is not None:
                rise = v.fitted[-1] - v.fitted[0] if v.fitted else 0.0
                shape = f"{v.shape}, {v.slope_per_step * 100:+.1f} points per window; "
                grows = grows or (v.accumulating and rise >= SAMPLED_SHARE_MIN_RISE)
            # Per-step times outrank sampled shares: where this process's steps give a weight
            # sync that does not grow, a rising share (start-up windows of imports, a loaded
            # machine) is not a slowdown.
            sync_res = facts.series.get(WEIGHT_SYNC_S) if i == 0 else None
            judged = sync_res.verdict if sync_res is not None else None
            if judged is None:  # another rank: its own per-step verdict
                judged = next((r.sync for r in facts.ranks if r.label == pa.label), None)
            # Flat: not accumulating, or (on the primary) growing by less than the bar at which
            # the per-step rule warns: the same judgement, not a second one on samples.
            material = (
                growth_is_material(sync_res, facts)
                if sync_res is not None
                else judged is not None and judged.accumulating
            )
            timed_flat = bool(pa.steps) and judged is not None and not material
            if grows and timed_flat:
                title += "; the per-step weight-sync time does not grow materially"
            if grows and not timed_flat:
                severity = Severity.WARNING
                first, last = _first_last(k)
                title = (
                    f"weight-sync share of samples rises per window: {sync[0]:.0%} -> "
                    f"{sync[-1]:.0%} over {_windows_word(len(sync))} ({shape}mean {early:.0%} "
                    f"in {first}, {late:.0%} in {last}; {pa.label}, {src} patterns); "
                    f"rollout {_pct_span(roll)}"
                )
                next_step = (
                    "weight sync takes more of the process's time window after window "
                    "(a share saturates as sync takes the window over): see the "
                    "frame_shift finding for where the time goes, fix it, then sample "
                    "again"
                )
            ev = SampledShareEvidence(
                windows=len(active),
                phase_source=src,
                median_weight_sync_share=float(np.median(sync)),
                first_weight_sync_share=sync[0],
                last_weight_sync_share=sync[-1],
                median_rollout_share=float(np.median(roll)),
                first_rollout_share=roll[0],
                last_rollout_share=roll[-1],
                k_windows=k,
                early_weight_sync_share=early,
                late_weight_sync_share=late,
                shape=v.shape if v is not None else None,
                accumulating=v.accumulating if v is not None else None,
                slope_per_window=v.slope_per_step if v is not None else None,
                fitted_rise=rise,
                grows=grows and not timed_flat,
            )
            out.append(Finding(self.kind, severity, title, ev, pa.label, next_step))
        return out
