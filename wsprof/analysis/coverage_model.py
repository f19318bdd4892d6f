"""What the coverage audit found: per process group, the collectives c10d issued against those
wsprof recorded, and the lines every renderer says of them. Pure data; the audit that makes it
is :mod:`wsprof.analysis.coverage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class UnseenIssuer:
    """Who likely issued collectives the hooks did not see (:mod:`wsprof.analysis.coverage`).

    Attributes:
        op: the canonical op they likely were (``all_reduce``).
        when: when in a step they were likely issued (``during backward``).
        who: the issuer (``DDP's C++ reducer (gradient buckets)``).
        evidence: what in the trace points at it.
        limit: True when such calls cannot carry weight sync: the shortfall is a stated
            limit of the audit, not a reason to withhold the verdict.
    """

    op: str
    when: str
    who: str
    evidence: str
    limit: bool = False


@dataclass(frozen=True)
class GroupCoverage:
    """One process group of one process.

    ``issued``: collectives c10d counted on the group over the audited steps (None: the
    backend keeps no count); ``recorded``: collectives wsprof's hooks saw issued there;
    ``first_step``/``last_step``: the steps the readings span (-1: before the first step);
    ``short_steps``: steps where c10d issued more than wsprof recorded.
    """

    label: str
    rank: int | None
    group: str
    backend: str | None
    issued: int | None
    recorded: int
    first_step: int
    last_step: int
    short_steps: tuple[int, ...] = ()
    #: False when ``recorded`` counts calls, not the collectives they issued
    #: (``layers='api'``): a difference then proves nothing either way.
    exact: bool = True
    #: What the hooks saw issued on the group, per canonical op, most first: ``(op, n)``.
    recorded_ops: tuple[tuple[str, int], ...] = ()
    #: The likely issuer of the collectives wsprof did not see, from evidence in the trace
    #: (:func:`wsprof.analysis.coverage.ddp_reducer`), None when nothing points at one.
    likely: UnseenIssuer | None = None
    #: Of ``recorded``, collectives taken from c10d's Flight Recorder (issued from C++, no
    #: hook saw them: :mod:`wsprof.capture.flight`).
    flight: int = 0
    #: Flight Recorder entries of the process overwritten in c10d's ring before wsprof read
    #: them (counted per process, said on each of its groups).
    flight_lost: int = 0

    @property
    def is_limit(self) -> bool:
        """Whether the shortfall is a known limit (calls that cannot carry weight sync)."""
        return bool(self.missing) and self.likely is not None and self.likely.limit

    @property
    def missing(self) -> int | None:
        """Collectives issued by code wsprof does not see; None when unknown."""
        if self.issued is None or (not self.exact and self.issued != self.recorded):
            return None
        return max(self.issued - self.recorded, 0)

    @property
    def known(self) -> bool:
        """Whether the audit can say complete or incomplete for this group."""
        return self.missing is not None

    @property
    def statement(self) -> str:
        """One line for the terminal, JSON and report."""
        who = f"rank {self.rank}: " if self.rank is not None else f"{self.label}: "
        group = f"group{'s' if ', ' in self.group else ''} {self.group}"
        steps = _steps_text(self.first_step, self.last_step)
        if self.issued is None:
            return (
                f"{who}coverage of {group} unknown: its backend "
                f"({self.backend or 'unknown'}) keeps no count of issued collectives"
            )
        if not self.known:
            return (
                f"{who}coverage of {group} unknown: c10d counted {self.issued} collectives"
                f"{steps}, wsprof {self.recorded} calls; with layers='api' the collectives "
                "each call issued are not counted (patch with layers='both')"
            )
        if self.missing:
            where = (
                f"; short in steps {_list(self.short_steps)}"
                if self.short_steps and len(self.short_steps) < 12
                else f"; short in {len(self.short_steps)} steps"
                if self.short_steps
                else ""
            )
            saw = (
                f"; seen: {', '.join(f'{op} {n}' for op, n in self.recorded_ops)}"
                if self.recorded_ops
                else ""
            )
            out = (
                f"{who}recorded {self.recorded} of {self.issued} collectives on {group}"
                f"{steps} ({self.missing} issued by code wsprof does not see{where}{saw})"
            )
            if self.flight_lost:
                out += (
                    f"; {self.flight_lost} entries of c10d's Flight Recorder were overwritten "
                    "before wsprof read them (raise TORCH_FR_BUFFER_SIZE, or the probe budget "
                    "WSPROF_PROBE_BUDGET_PCT so that it reads more often)"
                )
            u = self.likely
            if u is None:
                return f"{out}; no evidence of their issuer in the trace"
            out += (
                f"; likely {u.op}: {self.missing} issued {u.when}, not seen by the Python "
                f"hooks: {u.who}; evidence: {u.evidence}"
            )
            if u.limit:
                out += (
                    f"; a limit, not a gap: {u.op}s of gradients cannot carry weight sync, "
                    "so the verdict does not wait on them"
                )
            return out
        whence = (
            f" ({self.flight} of them from c10d's Flight Recorder: issued where no Python "
            "hook sees)"
            if self.flight
            else ""
        )
        return f"{who}recorded all {self.issued} collectives on {group}{steps}{whence}"


@dataclass(frozen=True)
class Coverage:
    """The audit of a run: every audited group, plus processes that could not be audited."""

    groups: tuple[GroupCoverage, ...] = ()
    #: Labels of processes whose trace has no audit (written by an older wsprof).
    not_audited: tuple[str, ...] = ()

    @property
    def incomplete(self) -> tuple[GroupCoverage, ...]:
        """Groups where collectives were issued that wsprof did not record, most first."""
        short = [g for g in self.groups if g.missing]
        return tuple(sorted(short, key=lambda g: -(g.missing or 0)))

    @property
    def gaps(self) -> tuple[GroupCoverage, ...]:
        """Incomplete groups whose unseen calls could carry weight sync (not a known limit):
        what withholds a verdict."""
        return tuple(g for g in self.incomplete if not g.is_limit)

    @property
    def unknown(self) -> tuple[GroupCoverage, ...]:
        return tuple(g for g in self.groups if not g.known)

    @property
    def status(self) -> str:
        """``incomplete`` | ``unknown`` | ``complete`` | ``not_audited``: ``unknown`` also when
        some processes were audited and others not (an older trace, an unreadable one)."""
        if self.incomplete:
            return "incomplete"
        if self.unknown or (self.groups and self.not_audited):
            return "unknown"
        if self.groups:
            return "complete"
        return "not_audited"

    def lines(self, limit: int = 4) -> list[str]:
        """What a renderer says first: shortfalls, then unknown groups (at most ``limit``);
        nothing when every audited collective was recorded."""
        out = [g.statement for g in (*self.incomplete, *self.unknown)]
        out += [
            label
            if label.startswith("unreadable trace")
            else f"{label}: coverage not audited (trace written by a wsprof without the audit)"
            for label in self.not_audited
        ]
        if len(out) > limit:
            out = [*out[:limit], f"... and {len(out) - limit} more groups"]
        return out


def _steps_text(a: int, b: int) -> str:
    if a < 0 and b < 0:
        # Every reading at step -1: no step was marked while recording (steps found later
        # by analysis, from rhythm or bursts, are not the capture's), never "before" them.
        return (
            " over the whole run (no step marked while recording: c10d's count was read at "
            "flushes, not per step)"
        )
    a = max(a, 0)
    return f" in step {a}" if a == b else f" in steps {a}-{b}"


def _list(steps: Sequence[int]) -> str:
    return ", ".join(str(s) for s in steps)
