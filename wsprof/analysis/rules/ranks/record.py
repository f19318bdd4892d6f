"""The evidence of an ``outlier_rank`` finding: one rank apart from the others of its world."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wsprof.analysis.evidence import Evidence, optional, unit
from wsprof.analysis.model import Finding


@dataclass(frozen=True, kw_only=True)
class OutlierEvidence(Evidence):
    """One rank apart from the others of its world (``outlier_rank``).

    Attributes:
        label: the rank's label (``rank N``).
        rank, host, pid: the rank, its host and process id (None when unknown).
        reasons: why it is apart (keys of :data:`OUTLIER_REASONS`).
        steps: its steps.
        first_weight_sync_s, last_weight_sync_s: its first and last weight-sync times.
        median_weight_sync_s: its median weight-sync time.
        others_median_weight_sync_s: the median of the other ranks' medians.
        ranks: the ranks compared.
        others_flat: the other ranks whose weight sync does not grow.
        robust_z: its median's modified z-score over the ranks' medians.
        ranks_median_weight_sync_s, ranks_mad_s: median and MAD of the ranks' medians.
        sync_lag_s: how long after the earliest rank it starts its weight sync (median).
        shape, slope_s_per_step: its weight sync's shape and slope (when judged).
        first_between_layers_s, last_between_layers_s, between_slope_s_per_step,
        own_growth_s, others_median_between_layers_s: its own time in the collectives
            (reason ``own_growth`` only).
        first_sync_gap_s, last_sync_gap_s, gap_growth_s, gap_slope_s_per_step: its own work
            between its collectives (reason ``gap_growth`` only).
        added_s: what it adds: the most of its growths and its excess over the ranks' median.
        wrapper: the wrapper found on its collective names: with reason ``own_growth`` only,
            and then always in the JSON (``null`` when none was found).
        more_outlier_ranks: the outlier ranks past the listed ones (the last listed only).
        outlier_ranks: every outlier rank of its world.
        wait_source: how its waits for peers, taken out of its weight sync before the ranks
            were compared, were found (``c10d sequence numbers`` or ``timing``; absent when
            none was).
    """

    label: str
    rank: int | None
    host: str | None
    pid: int | None
    reasons: list[str]
    steps: int = field(metadata=unit("count"))
    first_weight_sync_s: float = field(metadata=unit("s"))
    last_weight_sync_s: float = field(metadata=unit("s"))
    median_weight_sync_s: float | None = field(metadata=unit("s"))
    others_median_weight_sync_s: float = field(metadata=unit("s"))
    ranks: int = field(metadata=unit("count"))
    others_flat: int = field(metadata=unit("count"))
    robust_z: float
    ranks_median_weight_sync_s: float = field(metadata=unit("s"))
    ranks_mad_s: float = field(metadata=unit("s"))
    sync_lag_s: float | None = field(metadata=unit("s"))
    shape: str | None = optional()
    slope_s_per_step: float | None = optional("s")
    first_between_layers_s: float | None = optional("s")
    last_between_layers_s: float | None = optional("s")
    between_slope_s_per_step: float | None = optional("s")
    own_growth_s: float | None = optional("s")
    others_median_between_layers_s: float | None = optional("s")
    first_sync_gap_s: float | None = optional("s")
    last_sync_gap_s: float | None = optional("s")
    gap_growth_s: float | None = optional("s")
    gap_slope_s_per_step: float | None = optional("s")
    added_s: float = field(metadata=unit("s"))
    wrapper: str | None = None
    more_outlier_ranks: list[str | None] | None = optional()
    outlier_ranks: int = field(metadata=unit("count"))
    wait_source: str | None = optional()

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        if "own_growth" not in self.reasons:
            del out["wrapper"]  # said with the own growth only (null there when none was found)
        return out

    def process_named(self) -> str | None:
        return self.label

    def rank_named(self) -> int | None:
        return self.rank


def _added_s(f: Finding) -> float:
    """What an outlier finding's rank adds, s (0 for evidence of another kind)."""
    return f.evidence.added_s if isinstance(f.evidence, OutlierEvidence) else 0.0
