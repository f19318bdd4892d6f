"""The rule: a rank whose weight sync or own time stands out from its world's."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from wsprof.analysis.facts import Facts
from wsprof.analysis.model import (
    OUTLIER_RANK,
    SEVERITIES,
    Finding,
    GrowthVerdict,
    RankSeries,
    Severity,
)
from wsprof.analysis.robust import above_the_others, finite, robust_z
from wsprof.analysis.rules.base import (
    CRITICAL_GROWTH_RATIO,
    SLOWDOWN_MATERIAL_SHARE,
    Rule,
)
from wsprof.analysis.rules.ranks.cause import OutlierCause
from wsprof.analysis.rules.ranks.record import OutlierEvidence, _added_s
from wsprof.contracts.units import Unit, fmt_duration

#: Fewest ranks with a weight-sync time for ranks to be compared: with two, neither is "the
#: outlier" (each is as far from the other), so one or two ranks never give an outlier_rank.
OUTLIER_MIN_RANKS = 3
#: Most ranks that can be the outliers: a quarter of the ranks, at least one. When more ranks
#: grow, the growth is the run's (the accumulating_slowdown finding), not one rank's.
OUTLIER_MAX_SHARE = 0.25
#: Modified z-score of a rank's median weight-sync time above which it is an outlier:
#: z = 0.6745 (x - median) / MAD over the ranks' medians, threshold 3.5 as recommended by
#: B. Iglewicz and D. Hoaglin, "How to Detect and Handle Outliers" (ASQC, 1993). Median and MAD
#: are not moved by the outliers themselves, unlike a mean and standard deviation.
OUTLIER_Z = 3.5
#: And at least this far above the ranks' median: ranks that agree tightly make a 5 % difference
#: a large z-score, but a fifth more sync time on one rank is where it starts to matter.
OUTLIER_MIN_EXCESS = 0.2
#: And its per-step weight-sync times must be above the other ranks' per-step times by a one-sided
#: Mann-Whitney U test at this level (H. B. Mann and D. R. Whitney, Ann. Math. Statist. 18,
#: 1947): with 3 ranks the MAD of 3 medians is tiny and makes any difference a large z-score, and
#: a median over 2-3 noisy steps is not a rank's level. With 3 steps against 6 the test cannot
#: go below 1/84 = 0.012, so the first steps of a live run never make a rank "far slower".
OUTLIER_LEVEL_P = 0.01
#: Least growth of a rank's own time in its collectives (time between layers, first step to last
#: on its fitted curve) for it to count, as a share of the rank's median weight-sync time: a
#: quarter of the sync is what a wrapper must add before it, not the communication, is what
#: peers wait for (as for :data:`BETWEEN_LAYERS_SHARE`); a few µs drift per call is noise.
OUTLIER_OWN_GROWTH_SHARE = 0.25
#: A rank "grows while the others stay flat" only when its weight-sync slope is at least this
#: many times the other ranks' median slope: in a collective every rank waits for the slowest,
#: so all ranks grow together when the cause is shared (the demo's probe runs on every rank),
#: and a per-rank "accumulating" verdict alone flips with noise on short runs.
OUTLIER_GROWTH_RATIO = 3.0
#: Most outlier_rank findings (one per rank, worst first); the rest are counted in the last one.
OUTLIER_MAX_FINDINGS = 5


def _ratio(first: float, last: float) -> float:
    return last / first if first > 0 else float("inf")


def _fitted_rise(v: GrowthVerdict | None) -> float:
    """What a verdict's fitted curve rises from the first step to the last (0 without one)."""
    if v is None or not v.fitted:
        return 0.0
    return float(v.fitted[-1] - v.fitted[0])


def _waiters(r: RankSeries, others: Sequence[RankSeries]) -> str:
    """``; the weight sync of N other ranks grows with it: ...`` when others' sync grows."""
    grown = sum(1 for o in others if o.sync is not None and o.sync.accumulating)
    if not grown:
        return ""
    return (
        f"; the weight sync of {grown} other ranks grows with it: they wait for {r.label} "
        "in the collectives"
    )


class OutlierRank(Rule):
    """One rank (or a few) differs from the others: its weight sync grows while theirs stays
    flat, its own time in the collectives grows while theirs does not, or its median weight-sync
    time is far above theirs (robust z-score over the ranks)."""

    kind = OUTLIER_RANK
    causes = (OutlierCause(),)
    description = "one rank's weight sync grows or is far slower while the other ranks' is not"

    def match(self, facts: Facts) -> list[Finding]:
        # Ranks are compared within one process world only (a trainer's weight sync is a
        # push, an engine's a receive: not the same work).
        found: list[Finding] = []
        for world in dict.fromkeys(r.world for r in facts.ranks):
            found += self._match_rows([r for r in facts.ranks if r.world == world])
        order = {s: k for k, s in enumerate(SEVERITIES)}
        found.sort(key=lambda f: (-order[f.severity], -_added_s(f)))
        return found

    def _match_rows(self, ranks: Sequence[RankSeries]) -> list[Finding]:
        rows = [r for r in ranks if r.median_weight_sync_s is not None]
        n = len(rows)
        if n < OUTLIER_MIN_RANKS:
            return []
        most = max(1, int(n * OUTLIER_MAX_SHARE))
        reasons: dict[int, list[str]] = {}

        def flag(idx: list[int], reason: str) -> None:
            if 0 < len(idx) <= most:
                for i in idx:
                    reasons.setdefault(i, []).append(reason)

        slopes = [max(r.sync.slope_per_step, 0.0) if r.sync is not None else 0.0 for r in rows]

        def grows_alone(i: int) -> bool:
            others = [s for j, s in enumerate(slopes) if j != i]
            return slopes[i] > 0 and slopes[i] >= OUTLIER_GROWTH_RATIO * float(np.median(others))

        flag(
            [
                i
                for i, r in enumerate(rows)
                if r.sync is not None and r.sync.accumulating and grows_alone(i)
            ],
            "sync_growth",
        )
        flag(
            [
                i
                for i, r in enumerate(rows)
                if r.between is not None
                and r.between.accumulating
                and _fitted_rise(r.between)
                >= OUTLIER_OWN_GROWTH_SHARE * float(r.median_weight_sync_s or 0.0)
            ],
            "own_growth",
        )
        gap_grows = [
            r.gap is not None
            and r.gap.accumulating
            and _fitted_rise(r.gap)
            >= OUTLIER_OWN_GROWTH_SHARE * float(r.median_weight_sync_s or 0.0)
            for r in rows
        ]
        # Its own work between its collectives grows while the other ranks' does not: they
        # wait for it inside the collectives, so every rank's sync grows alike.
        flag([i for i in range(n) if gap_grows[i] and sum(gap_grows) <= most], "gap_growth")
        medians = [float(r.median_weight_sync_s or 0.0) for r in rows]
        z = robust_z(medians)
        med = float(np.median(medians))
        flag(
            [
                i
                for i in range(n)
                if z[i] > OUTLIER_Z
                and medians[i] >= (1 + OUTLIER_MIN_EXCESS) * med
                and above_the_others([x.weight_sync_s for x in rows], i, OUTLIER_LEVEL_P)
            ],
            "level",
        )
        if not reasons:
            return []
        mad = float(np.median(np.abs(np.array(medians) - med)))
        found = [
            self._finding(rows, i, why, z[i], med, mad, len(reasons)) for i, why in reasons.items()
        ]
        order = {s: k for k, s in enumerate(SEVERITIES)}
        found.sort(key=lambda f: (-order[f.severity], -_added_s(f)))
        if len(found) > OUTLIER_MAX_FINDINGS:
            rest = len(found) - OUTLIER_MAX_FINDINGS + 1
            last = found[OUTLIER_MAX_FINDINGS - 1]
            assert isinstance(last.evidence, OutlierEvidence)  # made by _finding
            found[OUTLIER_MAX_FINDINGS - 1] = dataclasses.replace(
                last,
                title=f"{last.title}; {rest - 1} more outlier rank{'s' if rest > 2 else ''} "
                "(the rank table lists them)",
                evidence=dataclasses.replace(
                    last.evidence,
                    more_outlier_ranks=[f.where for f in found[OUTLIER_MAX_FINDINGS:]],
                ),
            )
            found = found[:OUTLIER_MAX_FINDINGS]
        return found

    def _finding(
        self,
        rows: Sequence[RankSeries],
        i: int,
        why: list[str],
        z: float,
        med: float,
        mad: float,
        outliers: int,
    ) -> Finding:
        """The finding of rank ``rows[i]``, one of ``outliers`` outlier ranks of its world."""
        r = rows[i]
        others = [o for k, o in enumerate(rows) if k != i]
        sync = finite(r.weight_sync_s)
        other_meds = [float(o.median_weight_sync_s or 0.0) for o in others]
        others_med = float(np.median(other_meds))
        n_flat = sum(1 for o in others if o.sync is None or not o.sync.accumulating)
        # Its own time in the collectives (own_growth) and its own work between them
        # (gap_growth): in the evidence with their reason only.
        own_first: float | None = None
        own_last: float | None = None
        own_slope: float | None = None
        own_growth: float | None = None
        others_own_median: float | None = None
        gap_first: float | None = None
        gap_last: float | None = None
        gap_growth: float | None = None
        gap_slope: float | None = None
        parts: list[str] = []
        severity = Severity.WARNING
        added = 0.0
        if "sync_growth" in why and r.sync is not None:
            v: GrowthVerdict = r.sync
            k = min(v.judged_from, len(sync) - 1)  # after a slow first step, judged from there
            after = f" after a slow first {fmt_duration(sync[0])}" if k else ""
            parts.append(
                f"weight sync grows ({v.shape}): {fmt_duration(sync[k])} -> "
                f"{fmt_duration(sync[-1])} over {len(sync) - k} steps{after} "
                f"({Unit.SECONDS.fmt_slope(v.slope_per_step)}) while "
                f"{'the other' if n_flat == len(others) else f'{n_flat} of the other'} "
                f"{len(others)} ranks stay flat (median {fmt_duration(others_med)})"
            )
            added = max(added, _fitted_rise(v))
            if _ratio(sync[k], sync[-1]) >= CRITICAL_GROWTH_RATIO:
                severity = Severity.CRITICAL
        if "own_growth" in why and r.between is not None:
            own = r.between_layers_s
            growth = _fitted_rise(r.between)
            others_own = [float(np.median(o.between_layers_s)) for o in others]
            own_first, own_last = own[0], own[-1]
            own_slope, own_growth = r.between.slope_per_step, growth
            others_own_median = float(np.median(others_own))
            if parts:  # after the sync growth: the short form
                text = (
                    f"its own time in the collectives grows {fmt_duration(own[0])} -> "
                    f"{fmt_duration(own[-1])} per step"
                )
            else:
                text = (
                    f"its own time in the collectives (between the API name and the "
                    f"backend) grows {fmt_duration(own[0])} -> "
                    f"{fmt_duration(own[-1])} per step "
                    f"({Unit.SECONDS.fmt_slope(r.between.slope_per_step)}) while the other "
                    f"ranks' stays near {fmt_duration(float(np.median(others_own)))}"
                )
                text += _waiters(r, others)
            parts.append(text)
            added = max(added, growth)
            if _ratio(own[0], own[-1]) >= CRITICAL_GROWTH_RATIO:
                severity = Severity.CRITICAL
        if "gap_growth" in why and r.gap is not None:
            gaps = finite(r.sync_gap_s)
            growth = _fitted_rise(r.gap)
            gap_first, gap_last = gaps[0], gaps[-1]
            gap_growth, gap_slope = growth, r.gap.slope_per_step
            text = (
                f"its own work between its collectives in the weight sync grows "
                f"{fmt_duration(gaps[0])} -> {fmt_duration(gaps[-1])} per step "
                f"({Unit.SECONDS.fmt_slope(r.gap.slope_per_step)}) while the other ranks' "
                "does not" + _waiters(r, others)
            )
            parts.append(text)
            added = max(added, growth)
            if _ratio(gaps[0], gaps[-1]) >= CRITICAL_GROWTH_RATIO:
                severity = Severity.CRITICAL
        if "level" in why:
            times = float(r.median_weight_sync_s or 0.0) / med if med > 0 else float("inf")
            parts.append(
                f"median weight sync {fmt_duration(r.median_weight_sync_s)}, "
                f"{times:.1f}x the ranks' median {fmt_duration(med)} (robust z {z:.1f} > "
                f"{OUTLIER_Z})"
                if not parts
                else f"median {times:.1f}x the ranks' (robust z {z:.1f})"
            )
            added = max(added, float(r.median_weight_sync_s or 0.0) - med)
        title = f"{r.where()}: " + "; ".join(parts)
        step = r.median_step_s
        if why == ["sync_growth"] and step and added < SLOWDOWN_MATERIAL_SHARE * step:
            # As for the run's own slowdown: growth that adds under a tenth of a step is
            # information (a CI run's healthy rank drifted 2 ms over 10 steps of 0.3 s).
            severity = Severity.INFO
            title += (
                f"; so far {fmt_duration(added)} added, {added / step:.0%} of a step: "
                "watch it, not yet material"
            )
        pid = r.pid if r.pid is not None else "PID"
        on = f" on {r.host}" if r.host else ""
        next_step = (
            f"look at this rank while it runs: `wsprof attach {pid}`{on} (py-spy shows what it "
            "does during the sync); check its GPU and NIC (nvidia-smi -q: clocks, throttling, "
            "ECC and PCIe/NVLink errors; NIC link errors) and what differs in its "
            "configuration from the other ranks; fix it, then measure again"
        )
        if "own_growth" in why:
            found_wrapper = (
                f"wrapper {r.wrapper} was found on its collective names"
                if r.wrapper
                else f"`wsprof attach {pid}`{on} while it syncs"
            )
            next_step = (
                "this rank spends more time in its own code around the collectives every step "
                f"(a wrapper or probe that runs on it: {found_wrapper}): take it off the "
                "per-call path, then measure again"
            )
        ev = OutlierEvidence(
            wait_source=r.wait_source,
            label=r.label,
            rank=r.rank,
            host=r.host,
            pid=r.pid,
            reasons=why,
            steps=len(r.steps),
            first_weight_sync_s=sync[0],
            last_weight_sync_s=sync[-1],
            median_weight_sync_s=r.median_weight_sync_s,
            others_median_weight_sync_s=others_med,
            ranks=len(rows),
            others_flat=n_flat,
            robust_z=z,
            ranks_median_weight_sync_s=med,
            ranks_mad_s=mad,
            sync_lag_s=r.sync_lag_s,
            shape=r.sync.shape if r.sync is not None else None,
            slope_s_per_step=r.sync.slope_per_step if r.sync is not None else None,
            first_between_layers_s=own_first,
            last_between_layers_s=own_last,
            between_slope_s_per_step=own_slope,
            own_growth_s=own_growth,
            others_median_between_layers_s=others_own_median,
            first_sync_gap_s=gap_first,
            last_sync_gap_s=gap_last,
            gap_growth_s=gap_growth,
            gap_slope_s_per_step=gap_slope,
            added_s=added,
            wrapper=r.wrapper if "own_growth" in why else None,
            outlier_ranks=outliers,
        )
        return Finding(self.kind, severity, title, ev, r.where(), next_step)
