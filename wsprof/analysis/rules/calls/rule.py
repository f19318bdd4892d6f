"""The rule: per-call time against the number of calls, with what bucketing would save."""

from __future__ import annotations

import numpy as np

from wsprof.analysis.bucketing import bucketing_estimate, bucketing_text
from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, SeriesResult, Severity
from wsprof.analysis.rules.base import SLOWDOWN_MATERIAL_SHARE, Rule
from wsprof.analysis.rules.calls.cause import CallCountCause, PerCallCause
from wsprof.analysis.rules.calls.record import CallCountEvidence, OpGrowth, PerCallEvidence
from wsprof.contracts.series import COLLECTIVE_CALLS, STEP_S, WEIGHT_SYNC_S, op_of


class PerCallVsCallCount(Rule):
    """Is each call slower, or are there more calls? With an estimate of what bucketing the
    calls into fewer, larger collectives would save (:func:`bucketing_estimate`)."""

    kind = "per_call_growth"
    causes = (CallCountCause(), PerCallCause())
    description = "each collective gets slower (per_call_growth) or there are more (call_count)"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        count = facts.series.get(COLLECTIVE_CALLS)
        pa = facts.primary
        if count is not None and count.verdict.accumulating:
            model = pa.cost_model if pa is not None else None
            est = bucketing_estimate(
                pa, count.series.values[-1], model.fixed_us if model is not None else 0.0
            )
            out.append(
                Finding(
                    "call_count_growth",
                    Severity.WARNING,
                    f"collective calls per step grow {count.verdict.slope_per_step:.1f}/step "
                    f"({count.series.values[0]:.0f} -> {count.series.values[-1]:.0f})"
                    + (
                        f", each paying about {model.fixed_us:.0f} µs whatever its size"
                        if model is not None
                        else ""
                    )
                    + bucketing_text(est),
                    CallCountEvidence(
                        slope_per_step=count.verdict.slope_per_step,
                        fixed_us_per_call=model.fixed_us if model is not None else None,
                        bucketing=est,
                    ),
                    None,
                    "more calls each step: look for per-tensor sync of a growing set of tensors; "
                    "bucket tensors into fewer, larger collectives",
                )
            )
        step = facts.series.get(STEP_S)
        median_step_s = float(np.median(step.series.values)) if step is not None else None
        calls_per_step = float(np.median(count.series.values)) if count is not None else 1.0

        n_steps = len(pa.steps) if pa is not None and pa.steps else 0
        op_calls = {
            o.op: o.n_calls / n_steps for o in (pa.ops if pa is not None else ()) if n_steps
        }

        def material(op: str, res: SeriesResult) -> bool:
            if median_step_s is None or median_step_s <= 0:
                return True
            # The fitted growth over the steps seen (robust to one noisy end point), times
            # the calls of this op per step.
            span = res.series.steps[-1] - res.series.steps[0] if res.series.steps else 0
            added_s = res.verdict.slope_per_step * span * 1e-6 * op_calls.get(op, calls_per_step)
            return added_s >= SLOWDOWN_MATERIAL_SHARE * median_step_s

        # Calls that get slower while neither the step nor the weight sync does are noise of
        # a loaded machine or made up elsewhere in the step: information, not a problem.
        step_grows = any(
            facts.series[n].verdict.accumulating
            for n in (STEP_S, WEIGHT_SYNC_S)
            if n in facts.series
        )

        grown = [
            (op, res)
            for op, res in ((op_of(name), res) for name, res in facts.series.items())
            if op is not None and res.verdict.accumulating and material(op, res)
        ]
        if grown:
            grown.sort(key=lambda p: -p[1].verdict.slope_per_step)
            parts = [
                f"{op} {res.series.values[0]:.0f} -> {res.series.values[-1]:.0f} µs"
                for op, res in grown
            ]
            flat_count = count is not None and not count.verdict.accumulating
            title = "each collective call gets slower (median per step): " + ", ".join(parts)
            if flat_count and count is not None:
                title += f"; calls per step stay at {np.median(count.series.values):.0f}"
            # Bucketing pays the added per-call cost once per bucket instead of once per call.
            res0 = grown[0][1]
            est = bucketing_estimate(
                pa, calls_per_step, res0.series.values[-1] - res0.series.values[0]
            )
            title += bucketing_text(est)
            if not step_grows:
                title += "; step and weight-sync time do not grow"
            out.append(
                Finding(
                    self.kind,
                    Severity.WARNING if step_grows else Severity.INFO,
                    title,
                    PerCallEvidence(
                        ops={
                            op: OpGrowth(
                                first_us=res.series.values[0],
                                last_us=res.series.values[-1],
                                slope_us_per_step=res.verdict.slope_per_step,
                            )
                            for op, res in grown
                        },
                        bucketing=est,
                    ),
                    ", ".join(op for op, _ in grown),
                    "per-call cost grows, not the number of calls: compare the time between "
                    "layers (wrappers) with the backend time to see whether communication or "
                    "the code around it slows down",
                )
            )
        return out
