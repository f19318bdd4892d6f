"""A finding's evidence: the typed record a rule writes (:class:`Evidence`, a frozen dataclass
in the rule's module), its JSON (:meth:`Evidence.as_dict`, today's keys) and its readable rows
(:func:`evidence_rows`: ``(label, value)`` with each value in its unit).

A field's unit is in its metadata (:func:`unit`: ``s``, ``us``, ``ns``, ``bytes``, ``share``,
``pct``, ``count``; ``series`` for a value in the unit of the series the evidence names) and in
its name's suffix, which the JSON keeps (STYLE 3: ``first_s``, ``last_us``,
``gpu_total_bytes``, ``median_rollout_share``), so that a report shows ``1.73 s``,
``13.7 ms``, ``64 MiB`` and ``76%``, never ``1.7309843``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from wsprof.contracts.counters import counter_unit, counter_unit_text
from wsprof.contracts.series import Series, implied_unit
from wsprof.contracts.units import (
    Unit,
    fmt_bytes,
    fmt_bytes_decimal,
    fmt_duration,
    fmt_num,
    fmt_pct,
    fmt_rate,
)


class Evidence:
    """The numbers behind a finding, as the rule that found them typed them.

    Each rule module defines its record as a frozen dataclass subclass whose field names are
    the JSON keys; a field made with :func:`optional` is left out of the JSON when None (a key
    that only some findings have), every other field is always there (None as ``null``). Fields
    are in the JSON's key order.
    """

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of the evidence (nested records as objects)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get("optional"):
                continue
            out[f.name] = value.as_dict() if isinstance(value, Evidence) else value
        return out

    def series_named(self) -> str | None:
        """The series the evidence is about (its ``first``/``last``/slope are in that series'
        unit), None when it names none."""
        return None

    def counter_named(self) -> str | None:
        """The counter the evidence is about, None when it names none."""
        return None

    def process_named(self) -> str | None:
        """The label of the process the evidence is about (a rank), None when none."""
        return None

    def rank_named(self) -> int | None:
        """The rank the evidence is about, None when none."""
        return None


@dataclasses.dataclass(frozen=True)
class FreeEvidence(Evidence):
    """Evidence without a typed record: a test's, a plug-in rule's. ``values`` is its JSON."""

    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def __getattr__(self, name: str) -> Any:
        """A key of ``values`` read as a field (a plug-in rule's evidence can take a role in a
        chain when it has the role's keys); AttributeError for any other name."""
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def series_named(self) -> str | None:
        return _text(self.values, "series")

    def counter_named(self) -> str | None:
        return _text(self.values, "counter")

    def process_named(self) -> str | None:
        return _text(self.values, "label") or _text(self.values, "process")

    def rank_named(self) -> int | None:
        rank = self.values.get("rank")
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _text(values: Mapping[str, Any], key: str) -> str | None:
    """A JSON object's text value at ``key``, None when it is not text."""
    value = values.get(key)
    return value if isinstance(value, str) else None


def unit(name: str) -> dict[str, str]:
    """Field metadata: the unit of an evidence field (see the module docstring)."""
    return {"unit": name}


def optional(unit_name: str | None = None) -> Any:
    """A field that only some findings have: default None, left out of the JSON when None."""
    meta: dict[str, Any] = {"optional": True}
    if unit_name is not None:
        meta["unit"] = unit_name
    return dataclasses.field(default=None, metadata=meta)


#: Most items of a list or mapping shown in one value; the rest are counted.
MAX_ITEMS = 5


def label_of(key: str) -> str:
    """``median_weight_sync_s`` -> ``median weight sync``: the key without its unit suffix."""
    for suffix in (
        "_bytes_per_s",
        "_bytes_per_step",
        "_s_per_step",
        "_us_per_step",
        "_per_step",
        "_ns_per_call",
        "_bytes",
        "_s",
        "_us",
        "_ns",
    ):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)] + (
                " per step"
                if "per_step" in suffix
                else " per call"
                if "per_call" in suffix
                else " per second"
                if suffix == "_bytes_per_s"
                else ""
            )
            break
    return key.replace("_", " ")


def fmt_evidence(key: str, value: Any) -> str:
    """One evidence value in the unit its key names (see the module docstring).

    Args:
        key: the evidence key (``last_us``, ``share_of_sync_growth``, ``spearman_rho``).
        value: a number, text, list or mapping; None is ``—``.

    Returns:
        One line of text.
    """
    if isinstance(value, Mapping):
        items = list(value.items())
        text = ", ".join(
            f"{label_of(str(k))} {fmt_evidence(str(k), v)}" for k, v in items[:MAX_ITEMS]
        )
        return text + (f", +{len(items) - MAX_ITEMS} more" if len(items) > MAX_ITEMS else "")
    if isinstance(value, (list, tuple)):
        shown = [fmt_evidence(key, v) for v in value[:MAX_ITEMS]]
        more = f", +{len(value) - MAX_ITEMS} more" if len(value) > MAX_ITEMS else ""
        return ", ".join(shown) + more if shown else "none"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return fmt_num(value)
    x = float(value)
    if key.endswith("_bytes_per_s"):
        return fmt_rate(x)
    if key.endswith("_bytes_per_step"):
        return fmt_bytes_decimal(x) + "/step"
    if key.endswith(("_s", "_s_per_step")):
        return fmt_duration(x) + ("/step" if key.endswith("_per_step") else "")
    if key.endswith(("_us", "_us_per_step", "_us_per_call")):
        return fmt_duration(x / 1e6) + ("/step" if key.endswith("_per_step") else "")
    if key.endswith(("_ns", "_ns_per_call")):
        return fmt_duration(x / 1e9)
    if key.endswith("_bytes"):
        return fmt_bytes(x)
    if key.endswith("_pct"):
        return f"{x:.0f}%"
    if "share" in key or key in ("change", "probe_share"):
        return fmt_pct(x)
    if isinstance(value, int):
        return f"{value:,}"
    return fmt_num(x)


def _series_unit(name: str, series: Mapping[str, Series]) -> tuple[Unit, str] | None:
    """The unit of a series key an evidence names: from the judged series when there, else
    from the key."""
    known = series.get(name)
    if known is not None:
        return known.unit, known.unit_text
    unit = implied_unit(name)
    return (unit, "") if unit is not None else None


def _per_scale(per: str) -> float:
    """Counter units in one ``unit`` of a correlation: ``GiB`` is 2**30 bytes, ``1,000`` is
    1000."""
    if per == "GiB":
        return 2.0**30
    try:
        return float(per.replace(",", "").replace("_", ""))
    except ValueError:
        return 1.0


def evidence_rows(
    evidence: Evidence, series: Mapping[str, Series] | None = None
) -> list[tuple[str, str]]:
    """Every evidence item as ``(label, value)``, None values left out.

    Values are formatted by :func:`fmt_evidence` (their key's unit suffix); the keys without
    one take the unit of the series the evidence names (``series``: ``weight_sync_s``), else
    of its counter (``counter``): ``first``, ``last``, ``slope_per_step`` and ``projection``
    of a growth, and ``slope_per_unit`` of a correlation, in the tracked series' unit per
    ``unit`` counter units (``+5.3 ms per 1,000 demo.allocator_segments``).

    Args:
        evidence: a finding's evidence.
        series: the analysis's judged series by key (their units); None: units from keys.
    """
    known = series or {}
    in_unit: tuple[Unit, str] | None = None
    named, counter = evidence.series_named(), evidence.counter_named()
    tracks = named is not None
    if named is not None:
        in_unit = _series_unit(named, known)
    elif counter is not None:
        in_unit = (counter_unit(counter), counter_unit_text(counter))
    items = evidence.as_dict()
    rows: list[tuple[str, str]] = []
    for key, value in items.items():
        if value is None:
            continue
        x = None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
        text: str | None = None
        if in_unit is not None and key in ("first", "last") and x is not None:
            text = in_unit[0].fmt(x, in_unit[1])
        elif in_unit is not None and key == "slope_per_step" and x is not None:
            text = in_unit[0].fmt_slope(x, in_unit[1])
        elif in_unit is not None and key == "projection" and isinstance(value, Mapping):
            level = value.get("value")
            if isinstance(level, (int, float)):
                text = f"{in_unit[0].fmt(float(level), in_unit[1])} at step {value.get('step')}"
        elif key == "slope_per_unit" and x is not None and tracks and in_unit is not None:
            per = str(items.get("unit") or "1")
            text = (
                f"{in_unit[0].fmt(x * _per_scale(per), in_unit[1])} per {per} {counter or ''}"
            ).rstrip()
        elif key == "unit" and "slope_per_unit" in items and tracks and in_unit is not None:
            continue  # said by the slope's row
        rows.append((label_of(key), text if text is not None else fmt_evidence(key, value)))
    return rows
