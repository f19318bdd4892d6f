"""Time in the weight sync outside any collective, and a GPU idle during the sync."""

from __future__ import annotations

import numpy as np

from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding
from wsprof.analysis.rules.base import MATERIAL_STEP_SHARE, Rule, immaterial
from wsprof.contracts.series import STEP_S, SYNC_GAP_S, WEIGHT_SYNC_S
from wsprof.contracts.units import fmt_duration

#: Share of the weight-sync time spent outside any collective at or above which the gaps are
#: reported even when flat: a third of the sync goes to serialization, RPC or loading, not to
#: communication, which is the first thing to overlap or remove.
GAP_SHARE = 0.3
#: Mean GPU utilization during weight sync, percent, at or below which the GPUs are said to sit
#: idle (NVML's utilization is the share of time a kernel ran; a sync that keeps the GPU busy
#: with NCCL kernels shows far above this).
GPU_IDLE_PCT = 20.0
#: Least share of the step that weight sync takes for idle GPUs during it to matter.
GPU_IDLE_MIN_SYNC_SHARE = 0.1


class Gaps(Rule):
    """Time inside weight-sync phases that is in no collective: serialization, RPC, weight
    loading or gathering between the collectives."""

    kind = "gaps"
    description = "time inside the weight sync that is in no collective"

    def match(self, facts: Facts) -> list[Finding]:
        gap = facts.series.get(SYNC_GAP_S)
        sync = facts.series.get(WEIGHT_SYNC_S)
        if gap is None or sync is None or not gap.series.values:
            return []
        sync_by_step = dict(zip(sync.series.steps, sync.series.values))
        shares = [
            g / sync_by_step[s]
            for s, g in zip(gap.series.steps, gap.series.values)
            if sync_by_step.get(s, 0) > 0
        ]
        if not shares:
            return []
        median_share = float(np.median(shares))
        median_sync = float(np.median(sync.series.values))
        grows = (
            gap.verdict.accumulating
            and (gap.series.values[-1] - gap.series.values[0]) >= MATERIAL_STEP_SHARE * median_sync
        )
        if not grows and median_share < GAP_SHARE:
            return []
        vals = gap.series.values
        caller = facts.primary.sync_site if facts.primary else None
        title = (
            f"{median_share:.0%} of each weight sync is in no collective "
            f"({fmt_duration(float(np.median(vals)))} median per step)"
        )
        if caller:
            title += f", between the calls that {caller.split(' (')[0]} makes"
        severity = "warning" if grows else "info"
        if grows:
            title += (
                f", and it grows ({gap.verdict.shape}): {fmt_duration(vals[0])} -> "
                f"{fmt_duration(vals[-1])}"
            )
            step = facts.series.get(STEP_S)
            step_ref = float(np.median(step.series.values)) if step and step.series.values else 0
            grown = vals[-1] - vals[0]
            # Half a millisecond more between the calls of a 7 ms sync, in a step of half a
            # second: a healthy job's drift on a loaded machine (the healthy twin of
            # tests/targets/unmarked_sync_job.py read 284 µs -> 702 µs), as for the time
            # between layers.
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
                    "median_gap_share": median_share,
                    "first_s": vals[0],
                    "last_s": vals[-1],
                    "accumulating": gap.verdict.accumulating,
                    "shape": gap.verdict.shape,
                    "caller": facts.primary.sync_site if facts.primary else None,
                },
                (facts.primary.sync_site if facts.primary else None) or "weight_sync phase",
                "sample the weight sync (`wsprof attach PID` or py-spy) to see what runs between "
                "the collectives (state_dict gathering, serialization, RPC to the engines, "
                "weight loading) and overlap or remove it",
            )
        ]


class GpuIdleDuringSync(Rule):
    """The GPUs sit idle while weights are synced (NVML utilization inside weight-sync phases)."""

    kind = "gpu_idle_during_sync"
    description = "the GPUs sit idle during weight sync"

    def match(self, facts: Facts) -> list[Finding]:
        out: list[Finding] = []
        for pa in facts.processes:
            u = pa.gpu_util
            syncs = [
                r.weight_sync_s / r.step_s
                for r in pa.steps
                if r.weight_sync_s is not None and r.step_s > 0
            ]
            if u is None or not syncs or u.sync_pct > GPU_IDLE_PCT:
                continue
            share = float(np.median(syncs))
            if share < GPU_IDLE_MIN_SYNC_SHARE:
                continue
            other = f" (against {u.other_pct:.0f}% outside it)" if u.other_pct is not None else ""
            out.append(
                Finding(
                    self.kind,
                    "warning",
                    f"{pa.label}: the GPUs sit idle during weight sync: {u.sync_pct:.0f}% "
                    f"utilization{other}, while weight sync takes {share:.0%} of each step",
                    {
                        "process": pa.label,
                        "sync_util_pct": u.sync_pct,
                        "other_util_pct": u.other_pct,
                        "samples": u.n_sync,
                        "sync_share": share,
                    },
                    pa.label,
                    "the sync is bound by the host, not the GPUs: overlap it with generation "
                    "(async weight update), bucket parameters into fewer collectives, and keep "
                    "the weights on the GPU (NCCL or CUDA IPC rather than CPU copies)",
                )
            )
        return out
