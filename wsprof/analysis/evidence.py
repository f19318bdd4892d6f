"""A finding's evidence as readable rows: ``(label, value)`` with each value in its unit.

Evidence keys carry their unit in their name (STYLE 3: ``first_s``, ``last_us``,
``gpu_total_bytes``, ``median_rollout_share``); :func:`evidence_rows` reads it from there, so
that a report shows ``1.73 s``, ``13.7 ms``, ``64 MiB`` and ``76%``, never ``1.7309843``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wsprof.contracts.counters import counter_unit, counter_unit_text
from wsprof.contracts.series import Series, implied_unit
from wsprof.contracts.units import Unit, fmt_bytes, fmt_duration, fmt_num, fmt_pct

#: Most items of a list or mapping shown in one value; the rest are counted.
MAX_ITEMS = 5


def label_of(key: str) -> str:
    """``median_weight_sync_s`` -> ``median weight sync``: the key without its unit suffix."""
    for suffix in (
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
                " per step" if "per_step" in suffix else " per call" if "per_call" in suffix else ""
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
    evidence: Mapping[str, Any], series: Mapping[str, Series] | None = None
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
    unit: tuple[Unit, str] | None = None
    tracks = isinstance(evidence.get("series"), str)
    if tracks:
        unit = _series_unit(str(evidence["series"]), known)
    elif isinstance(evidence.get("counter"), str):
        name = str(evidence["counter"])
        unit = (counter_unit(name), counter_unit_text(name))
    rows: list[tuple[str, str]] = []
    for key, value in evidence.items():
        if value is None:
            continue
        x = None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
        text: str | None = None
        if unit is not None and key in ("first", "last") and x is not None:
            text = unit[0].fmt(x, unit[1])
        elif unit is not None and key == "slope_per_step" and x is not None:
            text = unit[0].fmt_slope(x, unit[1])
        elif unit is not None and key == "projection" and isinstance(value, Mapping):
            level = value.get("value")
            if isinstance(level, (int, float)):
                text = f"{unit[0].fmt(float(level), unit[1])} at step {value.get('step')}"
        elif key == "slope_per_unit" and x is not None and tracks and unit is not None:
            per = str(evidence.get("unit") or "1")
            text = (
                f"{unit[0].fmt(x * _per_scale(per), unit[1])} per {per} "
                f"{evidence.get('counter', '')}".rstrip()
            )
        elif key == "unit" and "slope_per_unit" in evidence and tracks and unit is not None:
            continue  # said by the slope's row
        rows.append((label_of(key), text if text is not None else fmt_evidence(key, value)))
    return rows
