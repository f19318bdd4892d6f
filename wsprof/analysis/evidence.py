"""A finding's evidence as readable rows: ``(label, value)`` with each value in its unit.

Evidence keys carry their unit in their name (STYLE 3: ``first_s``, ``last_us``,
``gpu_total_bytes``, ``median_rollout_share``); :func:`evidence_rows` reads it from there, so
that a report shows ``1.73 s``, ``13.7 ms``, ``64 MiB`` and ``76%``, never ``1.7309843``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wsprof.contracts.units import fmt_bytes, fmt_duration, fmt_num, fmt_pct

#: Most items of a list or mapping shown in one value; the rest are counted.
MAX_ITEMS = 5


def label_of(key: str) -> str:
    """``median_weight_sync_s`` -> ``median weight sync``: the key without its unit suffix."""
    for suffix in ("_s_per_step", "_us_per_step", "_per_step", "_bytes", "_s", "_us", "_ns"):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)] + (" per step" if "per_step" in suffix else "")
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
    if key.endswith("_ns"):
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


def evidence_rows(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every evidence item as ``(label, value)``, values formatted by :func:`fmt_evidence`;
    None values are left out."""
    return [(label_of(k), fmt_evidence(k, v)) for k, v in evidence.items() if v is not None]
