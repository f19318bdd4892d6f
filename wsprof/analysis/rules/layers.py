"""Time between the collective API and the backend (a wrapper's own cost), and per-call time
against the number of calls."""

from __future__ import annotations

import numpy as np

from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, ProcessAnalysis, SeriesResult
from wsprof.analysis.rules.base import (
    SLOWDOWN_MATERIAL_SHARE,
    Rule,
    _top_wrapper,
    _wrapper_where,
    immaterial,
)
from wsprof.contracts.series import BETWEEN_LAYERS_S, COLLECTIVE_CALLS, STEP_S, WEIGHT_SYNC_S, op_of
from wsprof.contracts.units import fmt_duration

#: Share of the weight-sync growth that this rank's own time between layers explains at or above
#: which the wrapper is called the cause (critical). Collectives also wait for the peers'
#: wrappers, which shows as backend time on this rank, so a quarter already means the wrapper
#: dominates once every rank runs it; below it a growing wrapper is still reported (warning).
BETWEEN_LAYERS_SHARE = 0.25
#: Growth of the time between layers over the run, as a share of the median weight-sync time
#: (of the median step time when there is no sync), below which a growing trend is noise that
#: no one would act on: a healthy wrapper's few ms drifting on a loaded machine.
BETWEEN_LAYERS_MATERIAL = 0.05


def _wrapped_names(facts: Facts) -> str:
    """Every name the top wrapper sits on (the same bug under several names)."""
    top = _top_wrapper(facts)
    if top is None:
        return ""
    same = {w.api for w in facts.wrappers if w.qualname == top.qualname and w.file == top.file}
    return ", ".join(sorted(same))


class BetweenLayers(Rule):
    """Time between the collective name called and the process-group backend grows: a wrapper
    around the collectives (not the communication) is the cost."""

    kind = "between_layers"
    description = "time spent in wrappers between the collective name and the backend grows"

    def match(self, facts: Facts) -> list[Finding]:
        bl = facts.series.get(BETWEEN_LAYERS_S)
        sync = facts.series.get(WEIGHT_SYNC_S)
        if bl is None or not bl.verdict.accumulating:
            return []
        ref = sync if sync is not None else facts.series.get(STEP_S)
        judged = bl.series.values[bl.verdict.judged_from :]  # a slow first step left out
        grown = max(judged) - min(judged[: max(1, len(judged) // 3)])
        if (
            ref is not None
            and ref.series.values
            and grown < BETWEEN_LAYERS_MATERIAL * float(np.median(ref.series.values))
        ):
            return []
        step = facts.series.get(STEP_S)
        step_ref = float(np.median(step.series.values)) if step and step.series.values else None
        share = None
        if sync is not None and sync.verdict.slope_per_step > 0:
            share = bl.verdict.slope_per_step / sync.verdict.slope_per_step
        # Critical when it explains the sync's growth (or there is no sync to compare with);
        # a wrapper whose time grows inside a sync that does not grow is a warning.
        flat_sync = sync is not None and share is None
        severity = (
            "warning"
            if flat_sync or (share is not None and share < BETWEEN_LAYERS_SHARE)
            else "critical"
        )
        vals = judged
        wrapped = _wrapped_names(facts)
        where = _wrapper_where(facts)
        title = (
            f"time between the collective API and the backend grows "
            f"{bl.series.fmt_slope(bl.verdict.slope_per_step)} ({bl.series.fmt(vals[0])} -> "
            f"{bl.series.fmt(vals[-1])} per step)"
        )
        if share is not None:
            title += f": {min(share, 1.0):.0%} of the weight-sync growth on this rank"
        elif flat_sync:
            title += "; the weight sync it sits in does not grow (yet)"
        if where:
            title += f"; wrapper {where.split(' (')[0]} around {wrapped}"
        # A wrapper drifting by a millisecond on a loaded machine, in a step of a second.
        quiet = immaterial(grown, step_ref)
        if quiet is not None:
            severity = "info"
            title += quiet
        return [
            Finding(
                self.kind,
                severity,
                title,
                {
                    "slope_s_per_step": bl.verdict.slope_per_step,
                    "share_of_sync_growth": share,
                    "wrapped_names": wrapped,
                    "first_s": vals[0],
                    "last_s": vals[-1],
                },
                where,
                "the wrapper does work per collective whose cost grows (in the motivating case a "
                "free-memory probe walking allocator segments): remove it from the per-call path "
                "or run it once per sync, for every name it wraps, then re-measure; peers that run "
                "the same wrapper make this rank wait in the backend too",
            )
        ]


#: Bucket size of the bucketing estimate, bytes: PyTorch DDP's default gradient bucket
#: (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel), a size known to amortise
#: the per-call cost of collectives; weight-sync frameworks use larger buckets, so the estimate
#: is conservative.
BUCKET_BYTES = 25 * 2**20


def bucketing_estimate(
    pa: ProcessAnalysis | None, calls_per_step: float, per_call_us: float
) -> dict[str, float] | None:
    """What bucketing one step's collectives into :data:`BUCKET_BYTES` collectives would save.

    Args:
        pa: the process (its ops' bytes and steps give the payload per step).
        calls_per_step: collective calls in a step.
        per_call_us: what each call avoided saves, µs (the fixed per-call cost of the cost
            model, or the per-call growth).

    Returns:
        ``buckets`` (calls after bucketing), ``calls``, ``saved_s`` (per step, s); None when the
        payload per step is unknown or bucketing would not reduce the calls.
    """
    if pa is None or not pa.steps or per_call_us <= 0:
        return None
    bytes_per_step = sum(o.bytes_total for o in pa.ops) / len(pa.steps)
    if bytes_per_step <= 0:
        return None
    buckets = max(1.0, float(np.ceil(bytes_per_step / BUCKET_BYTES)))
    if buckets >= calls_per_step:
        return None
    return {
        "buckets": buckets,
        "calls": calls_per_step,
        "saved_s": (calls_per_step - buckets) * per_call_us / 1e6,
    }


def _bucketing_text(est: dict[str, float] | None) -> str:
    if est is None:
        return ""
    return (
        f"; bucketed into {BUCKET_BYTES >> 20} MiB collectives the {est['calls']:.0f} calls "
        f"would be {est['buckets']:.0f}, saving about {fmt_duration(est['saved_s'])}"
        "/step"
    )


class PerCallVsCallCount(Rule):
    """Is each call slower, or are there more calls? With an estimate of what bucketing the
    calls into fewer, larger collectives would save (:func:`bucketing_estimate`)."""

    kind = "per_call_growth"
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
                    "warning",
                    f"collective calls per step grow {count.verdict.slope_per_step:.1f}/step "
                    f"({count.series.values[0]:.0f} -> {count.series.values[-1]:.0f})"
                    + (
                        f", each paying about {model.fixed_us:.0f} µs whatever its size"
                        if model is not None
                        else ""
                    )
                    + _bucketing_text(est),
                    {
                        "slope_per_step": count.verdict.slope_per_step,
                        "fixed_us_per_call": model.fixed_us if model is not None else None,
                        "bucketing": est,
                    },
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
            title += _bucketing_text(est)
            if not step_grows:
                title += "; step and weight-sync time do not grow"
            out.append(
                Finding(
                    self.kind,
                    "warning" if step_grows else "info",
                    title,
                    {
                        **{
                            op: {
                                "first_us": res.series.values[0],
                                "last_us": res.series.values[-1],
                                "slope_us_per_step": res.verdict.slope_per_step,
                            }
                            for op, res in grown
                        },
                        "bucketing": est,
                    },
                    ", ".join(op for op, _ in grown),
                    "per-call cost grows, not the number of calls: compare the time between "
                    "layers (wrappers) with the backend time to see whether communication or "
                    "the code around it slows down",
                )
            )
        return out
