"""What the rules look at (:class:`Facts`: series by name, processes, ranks, wrappers) and the
vocabulary of the times per step they judge: their labels and budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from wsprof.analysis.hang import Hang
from wsprof.analysis.model import (
    Headline,
    ProcessAnalysis,
    RankSeries,
    SeriesResult,
    WrapperFact,
)
from wsprof.contracts.series import (
    BETWEEN_LAYERS_S,
    COLLECTIVE_CALLS,
    ROLLOUT_S,
    STEP_S,
    WEIGHT_SYNC_S,
    counter_of,
)

#: Budgets of per-step times, s: the step at which the projection crosses it is reported. An
#: hour per step (or per weight sync) is where an RL run stops being usable: the motivating
#: run's 57-minute step was found because of it.
TIME_BUDGETS_S = {STEP_S: 3600.0, WEIGHT_SYNC_S: 3600.0}


TIME_SERIES = (WEIGHT_SYNC_S, STEP_S, ROLLOUT_S)
LABELS = {
    WEIGHT_SYNC_S: "weight-sync time",
    STEP_S: "step time",
    ROLLOUT_S: "rollout time",
    BETWEEN_LAYERS_S: "time between the API name and the backend",
    COLLECTIVE_CALLS: "collective calls per step",
}


@dataclass
class Facts:
    """What the rules look at: headline series by name, processes, recorded facts."""

    series: dict[str, SeriesResult]
    processes: Sequence[ProcessAnalysis]
    wrappers: list[WrapperFact] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    #: Series judged as times per step (slowdowns) and as counters (growth).
    time_series: tuple[str, ...] = TIME_SERIES
    counter_series: tuple[str, ...] | None = None
    #: Per-rank weight-sync and step times of every process with steps (rank order).
    ranks: Sequence[RankSeries] = ()
    #: The analysis's headline (:func:`wsprof.analysis.headline.headline_of`), computed once
    #: by whoever builds the facts; None: the rule computes it from ``processes``.
    headline: Headline | None = None
    #: The budgets the series were judged with (series name -> s): where a projection
    #: crosses them is reported (``wsprof watch --sync-budget`` changes the weight sync's).
    budgets: dict[str, float] = field(default_factory=lambda: dict(TIME_BUDGETS_S))
    #: Collectives some ranks wait in and another never issued, from Flight Recorder dumps
    #: (:func:`wsprof.analysis.hang.hangs_of`).
    hangs: Sequence[Hang] = ()

    def counters(self) -> list[str]:
        if self.counter_series is not None:
            return list(self.counter_series)
        return [n for n in self.series if counter_of(n) is not None]

    @property
    def primary(self) -> ProcessAnalysis | None:
        return self.processes[0] if self.processes else None
