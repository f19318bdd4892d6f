"""What a diagnosis is built from: the :class:`Draft` of a chain (symptom -> where -> why ->
next step), the :class:`Cause` interface a rule implements to start one from its finding, and
the :class:`ChainContext` both read.

The chain builder (:mod:`wsprof.analysis.chains`) names no rule kind: it asks each rule of the
registry for its causes (``Rule.causes``) and the roles its findings play in a chain
(``Rule.roles``), and a rule says, in its own module, how its chain reads. Adding a cause is one
rule module (``tests/unit/test_chains.py`` registers a throwaway one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from wsprof.analysis.facts import Facts
from wsprof.analysis.model import Finding, Link, WrapperFact
from wsprof.analysis.samples import split_frame
from wsprof.contracts.units import fmt_duration
from wsprof.contracts.words import Words


class Role(Words):
    """What a finding that is not a cause is to a chain (``Rule.roles``: kind -> role)."""

    #: A per-step time that grows (weight sync, step, rollout): the chain's symptom.
    SLOWDOWN = "slowdown"
    #: Without steps, a phase's growing share of the samples: a symptom of last resort.
    SAMPLED_SHARE = "sampled_share"
    #: The frames that gained share of the samples, early against late: a why link.
    FRAME_SHIFT = "frame_shift"
    #: The hottest frame of the run: joins the frame link when it is the same function.
    HOT_FRAME = "hot_frame"
    #: A counter that tracks a slowdown: a why link.
    COUNTER = "counter"
    #: A counter that grows: joins the counter link of the same counter.
    COUNTER_GROWTH = "counter_growth"


# --------------------------------------------------------------------------- what a role reads
# A finding that plays a role in a chain carries evidence with these fields (its rule's typed
# record has them: structural typing, no import of the rule).


@runtime_checkable
class SlowdownLike(Protocol):
    """Role ``SLOWDOWN``: the series that grows, its Theil-Sen slope (series unit per step) and
    the curve's confidence (0..1)."""

    series: str
    slope_per_step: float
    confidence: float


@runtime_checkable
class SampledShareLike(Protocol):
    """Role ``SAMPLED_SHARE``: whether the weight sync's share of the samples grows."""

    grows: bool | None


@runtime_checkable
class FrameLike(Protocol):
    """Roles ``FRAME_SHIFT`` and ``HOT_FRAME``: the process whose samples it read."""

    process: str


@runtime_checkable
class HotFrameLike(Protocol):
    """Role ``HOT_FRAME``: the hottest line, and the frame's samples of all the run's."""

    process: str
    hottest_line: str
    samples: int
    total: int
    share: float


@runtime_checkable
class CounterLike(Protocol):
    """Role ``COUNTER``: the counter, the series it tracks, Spearman's rho, and the least
    squares cost (series unit per ``unit`` counter units)."""

    counter: str
    series: str
    unit: str
    slope_per_unit: float
    spearman_rho: float


@runtime_checkable
class CounterGrowthLike(Protocol):
    """Role ``COUNTER_GROWTH``: the counter that grows."""

    counter: str


#: What each role reads of its finding's evidence: a finding whose evidence lacks it is left
#: out of the role (never guessed).
ROLE_EVIDENCE: dict[Role, type] = {
    Role.SLOWDOWN: SlowdownLike,
    Role.SAMPLED_SHARE: SampledShareLike,
    Role.FRAME_SHIFT: FrameLike,
    Role.HOT_FRAME: HotFrameLike,
    Role.COUNTER: CounterLike,
    Role.COUNTER_GROWTH: CounterGrowthLike,
}


def _wrong(f: Finding, role: str) -> TypeError:
    return TypeError(f"{f.kind} evidence lacks the fields of the {role} role")


# One accessor per role (a protocol class cannot be a ``type[E]`` argument for mypy); the chain
# builder calls them on findings it sorted into the role by :data:`ROLE_EVIDENCE`.


def as_slowdown(f: Finding) -> SlowdownLike:
    """``f``'s evidence as role ``SLOWDOWN`` reads it (TypeError when it cannot)."""
    if not isinstance(ev := f.evidence, SlowdownLike):
        raise _wrong(f, "slowdown")
    return ev


def as_sampled_share(f: Finding) -> SampledShareLike:
    """``f``'s evidence as role ``SAMPLED_SHARE`` reads it (TypeError when it cannot)."""
    if not isinstance(ev := f.evidence, SampledShareLike):
        raise _wrong(f, "sampled share")
    return ev


def as_frame(f: Finding) -> FrameLike:
    """``f``'s evidence as roles ``FRAME_SHIFT`` and ``HOT_FRAME`` read it."""
    if not isinstance(ev := f.evidence, FrameLike):
        raise _wrong(f, "frame")
    return ev


def as_hot_frame(f: Finding) -> HotFrameLike:
    """``f``'s evidence as role ``HOT_FRAME`` reads it (TypeError when it cannot)."""
    if not isinstance(ev := f.evidence, HotFrameLike):
        raise _wrong(f, "hot frame")
    return ev


def as_counter(f: Finding) -> CounterLike:
    """``f``'s evidence as role ``COUNTER`` reads it (TypeError when it cannot)."""
    if not isinstance(ev := f.evidence, CounterLike):
        raise _wrong(f, "counter")
    return ev


def as_counter_growth(f: Finding) -> CounterGrowthLike:
    """``f``'s evidence as role ``COUNTER_GROWTH`` reads it (TypeError when it cannot)."""
    if not isinstance(ev := f.evidence, CounterGrowthLike):
        raise _wrong(f, "counter growth")
    return ev


@dataclass
class Draft:
    """A diagnosis being built (see :class:`~wsprof.analysis.model.Diagnosis` for the fields
    it ends as).

    Attributes:
        cause: the diagnosis's cause (:data:`~wsprof.analysis.model.CAUSES`).
        title: one line naming the cause and what it costs.
        findings: every finding the chain holds, its cause's first.
        symptom, where, why: the chain's links (None / empty where not found).
        next_step: what to do; empty until the cause's :meth:`Cause.next_step` writes it.
        missing: one line per missing link.
        symptom_series: series key of the symptom's curve.
        symptom_confidence: the symptom curve's confidence, 0..1.
        culprit_frame: the why link's frame, ``function (file)``.
        culprit_counter: the why link's counter name.
        process: label of the process the chain was read from.
        places: function names a why frame may be matched against in the stacks (a wrapper's
            function, the weight sync's caller).
        explains: what it explains of the symptom's growth, symptom unit per step (ordering).
        counter_cost: the why counter's fitted cost in words.
        shared: ids of findings it shares with the chain before it (the run's slowdown), left
            out of its severity.
        detail: the cause's own where text before any other link joined it (a cause that is
            re-read as another rebuilds its where from it).
    """

    cause: str
    title: str
    findings: list[Finding]
    symptom: Link | None = None
    where: Link | None = None
    why: list[Link] = field(default_factory=list)
    next_step: str = ""
    missing: list[str] = field(default_factory=list)
    symptom_series: str | None = None
    symptom_confidence: float = 1.0
    culprit_frame: str | None = None
    culprit_counter: str | None = None
    process: str | None = None
    places: tuple[str, ...] = ()
    explains: float = 0.0
    counter_cost: str = ""
    shared: set[str] = field(default_factory=set)
    detail: str = ""


@dataclass(frozen=True)
class ChainContext:
    """What the causes read besides their finding.

    Attributes:
        facts: what the rules looked at.
        findings: every finding of the analysis, most severe first.
        wrappers: the wrappers on collective names and process groups, most time between the
            layers first.
    """

    facts: Facts
    findings: tuple[Finding, ...]
    wrappers: tuple[WrapperFact, ...]

    @property
    def top_wrapper(self) -> WrapperFact | None:
        """The wrapper on a collective name with the most time between the layers."""
        return next((w for w in self.wrappers if w.kind == "name"), None)

    @property
    def process(self) -> str | None:
        """The primary process's label (None for a series input)."""
        return self.facts.primary.label if self.facts.primary is not None else None

    def findings_of(self, kind: str) -> list[Finding]:
        """The findings of one kind, in the analysis's order (a cause reading its own kind's
        companions, never another rule's)."""
        return [f for f in self.findings if f.kind == kind]


class Cause:
    """How a finding kind starts a chain: one diagnosis per finding (a rule lists its causes
    in ``Rule.causes``).

    Attributes:
        kind: the finding kind it reads.
        cause: the diagnosis's cause name.
        order: causes are drafted in ascending order (a cause may merge into a draft made
            before it).
        own_symptom: True for a chain whose finding is its own symptom (one rank apart): it
            takes no part in the run's slowdown, frame or counter links, and has no missing
            links.

    A draft's ``cause`` names the :class:`Cause` whose :meth:`next_step` and :meth:`tracks`
    the builder calls for it, so a chain re-read as another cause (a per-call slowdown under
    a wrapper, :meth:`on_culprit_under`) takes that cause's next step. A cause whose finding
    joins an earlier draft (the wrapper's) edits that draft in :meth:`draft` and returns None.
    """

    kind = ""
    cause = ""
    order = 100
    own_symptom = False

    def draft(self, f: Finding, ctx: ChainContext, drafts: list[Draft]) -> Draft | None:
        """The chain of ``f``, or None when ``f`` joined one of ``drafts`` (or is no cause)."""
        raise NotImplementedError  # pragma: no cover - interface

    def own(self, d: Draft) -> Finding | None:
        """The finding of this cause's kind that ``d`` holds (the run's slowdown, frames and
        counters join a chain before and after it)."""
        return next((f for f in d.findings if f.kind == self.kind), None)

    def next_step(self, d: Draft, ctx: ChainContext) -> str:
        """What to do, in the terms of the chain (default: its finding's own next step)."""
        f = self.own(d)
        return f.next_step if f is not None else ""

    def tracks(self, series: str) -> bool:
        """Whether a counter that tracks ``series`` belongs to this cause's chain."""
        return False

    def holds(self, d: Draft, counter: str, process: str | None) -> bool:
        """Whether the growth of ``counter`` on ``process`` (a ``COUNTER_GROWTH`` finding no
        other chain took) is what this cause's chain ``d`` keeps: it joins ``d`` as a why
        link instead of standing alone (kept shared buckets raise the process's shared
        memory and its open fds)."""
        return False

    def on_culprit_under(self, d: Draft, place: str, ctx: ChainContext) -> None:
        """Called when the why frame of ``d`` runs under one of its places (``place``):
        a cause may read itself again (a per-call slowdown under a wrapper is the wrapper's)."""
        return None


# --------------------------------------------------------------------------- shared wording


def short(qualname: str) -> str:
    """``_probed.<locals>.with_memory_probe`` -> ``with_memory_probe``."""
    return qualname.rsplit(".", 1)[-1]


def function_of(frame: str) -> str:
    """``fn (file.py:12)`` -> ``fn``."""
    return split_frame(frame)[0]


def ids(findings: Iterable[Finding]) -> tuple[str, ...]:
    """The findings' ids, in order."""
    return tuple(f.id for f in findings)


def wrapper_names(w: WrapperFact, wrappers: Sequence[WrapperFact]) -> list[str]:
    """Every API name the wrapper ``w`` (same function, same file) sits on, sorted."""
    return sorted({x.api for x in wrappers if x.qualname == w.qualname and x.file == w.file})


def wrapper_who(w: WrapperFact) -> str:
    """``qualname (file:line)``."""
    return f"{w.qualname} ({w.file}:{w.line})"


def fmt_call(us: object) -> str:
    """A per-call latency given in µs, in ms from 1 ms on (``2.58 ms``), else µs."""
    if not isinstance(us, (int, float)):
        return "-"
    return fmt_duration(float(us) / 1e6)


def fmt_pct(x: object) -> str:
    """A share as a whole percentage, ``-`` when not a number."""
    return f"{float(x):.0%}" if isinstance(x, (int, float)) else "-"
