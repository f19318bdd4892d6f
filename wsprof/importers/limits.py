"""How many metrics one input may bring to the analysis, and the note naming what was left out.

A wide export (100,000 CSV columns, an AReaL table of 2,000,000 keys) would otherwise be held
and fitted whole: hours of analysis for series nobody reads. Importers admit metrics through a
:class:`MetricCap` while they read, so memory is bounded as well; the analysis applies the same
cap to series from any other source (:func:`wsprof.analysis.run.analyze_series`). Pure; stdlib.
"""

from __future__ import annotations

from collections.abc import Iterable

from wsprof.contracts.series import ROLLOUT_S, STEP_S, WEIGHT_SYNC_S
from wsprof.errors import quote

#: Most metrics of one input analysed. A slime, verl or OpenRLHF run logs 60-200 metrics
#: (the handed verl log: 69); a W&B export of several runs a few hundred. 500 keeps every real
#: export whole while bounding a hostile one: each series costs about 5 ms to fit (short) to
#: 0.3 s (40,000 steps), so 500 short series are seconds. The rest are named in a note.
MAX_METRICS = 500
#: Names of left-out metrics a note lists before ``...``.
NAMED_IN_NOTE = 5
#: Most left-out names remembered to count them (beyond it the count is a lower bound).
MAX_LEFT_OUT_COUNTED = 100_000
#: Series always admitted, whatever their position (the headline series the findings judge).
ALWAYS_KEPT = frozenset({WEIGHT_SYNC_S, ROLLOUT_S, STEP_S})


class MetricCap:
    """Admits at most ``limit`` distinct metric names (those in ``always`` on top), in the
    order first offered, and remembers what it left out for :meth:`note`.

    Args:
        limit: most names admitted (not counting ``always``).
        always: names admitted whatever the count (e.g. the framework keys of the headline
            series).
    """

    def __init__(self, limit: int = MAX_METRICS, always: Iterable[str] = ALWAYS_KEPT) -> None:
        self.limit = limit
        self.always = frozenset(always)
        self._kept: set[str] = set()
        self._counted = 0  # admitted names not in ``always``
        self._left_out: dict[str, None] = {}

    def admit(self, name: str) -> bool:
        """Whether metric ``name`` is read (the same answer every time for one name)."""
        if name in self._kept:
            return True
        if name in self.always or self._counted < self.limit:
            self._kept.add(name)
            if name not in self.always:
                self._counted += 1
            return True
        if len(self._left_out) < MAX_LEFT_OUT_COUNTED:
            self._left_out.setdefault(name, None)
        return False

    @property
    def left_out(self) -> list[str]:
        """The names left out, in the order first offered (at most MAX_LEFT_OUT_COUNTED)."""
        return list(self._left_out)

    def note(self, what: str = "metrics") -> str | None:
        """One line naming what was left out, or None when nothing was."""
        return left_out_note(self.left_out, self.limit, what)


def left_out_note(left_out: list[str], limit: int, what: str = "metrics") -> str | None:
    """The note for ``left_out`` names beyond a cap of ``limit``, or None when there are none.

    Args:
        left_out: the names not analysed, in input order.
        limit: the cap that left them out.
        what: what the names are (``metrics``, ``columns``).
    """
    if not left_out:
        return None
    count = (
        f"{len(left_out):,}"
        if len(left_out) < MAX_LEFT_OUT_COUNTED
        else f"more than {MAX_LEFT_OUT_COUNTED:,}"
    )
    names = ", ".join(quote(n, 60) for n in left_out[:NAMED_IN_NOTE])
    more = ", ..." if len(left_out) > NAMED_IN_NOTE else ""
    return (
        f"{count} {what} not analysed (at most {limit:,} per input; the headline series "
        f"first, then in input order): {names}{more}; export the ones you need to a file of "
        "their own"
    )
