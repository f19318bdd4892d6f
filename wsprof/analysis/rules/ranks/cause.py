"""How an ``outlier_rank`` finding reads as a diagnosis: its own symptom and where (the rank)."""

from __future__ import annotations

from wsprof.analysis.chain import Cause, ChainContext, Draft
from wsprof.analysis.model import OUTLIER_RANK, Finding, Link
from wsprof.analysis.rules.ranks.record import OutlierEvidence
from wsprof.contracts.units import fmt_duration, fmt_num

#: What each reason of an outlier_rank finding says in its diagnosis's title.
OUTLIER_REASONS = {
    "sync_growth": "its weight sync grows while the other ranks' stays flat",
    "own_growth": "its own time in the collectives grows",
    "gap_growth": "its own work between its collectives grows",
    "level": "its weight sync is far slower than the other ranks'",
}


class OutlierCause(Cause):
    """One rank apart from the others: its own symptom (the finding) and where (the rank)."""

    kind = OUTLIER_RANK
    cause = "outlier_rank"
    order = 90
    own_symptom = True

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        """The rank's own chain (None for evidence that is not an :class:`OutlierEvidence`)."""
        ev = f.evidence
        if not isinstance(ev, OutlierEvidence):
            return None
        rows = (
            ("rank", str(ev.label)),
            ("median weight sync", fmt_duration(ev.median_weight_sync_s)),
            ("other ranks' median", fmt_duration(ev.others_median_weight_sync_s)),
            ("robust z", fmt_num(ev.robust_z)),
        )
        why = [str(r) for r in ev.reasons]
        said = [OUTLIER_REASONS[r] for r in why if r in OUTLIER_REASONS] or ["differs from them"]
        return Draft(
            self.cause,
            f"{ev.label} alone among {ev.ranks} ranks: " + " and ".join(said),
            [f],
            symptom=Link("symptom", f.title, (f.id,), rows),
            where=Link("where", str(f.where), (f.id,), (("process", str(f.where)),)),
            next_step=f.next_step,
            process=str(ev.label),
        )
