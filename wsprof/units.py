"""Numbers as short human text in their unit (``45.6 ms``, ``3 GiB``, ``53%``).

One place for formatting, shared by analysis (finding titles) and every renderer. Pure; no
torch, no numpy.
"""

from __future__ import annotations

import math
from typing import Any


def fmt_duration(seconds: float | None) -> str:
    """Seconds as a short human duration (``12.3 µs``, ``4.56 ms``, ``1.23 s``); None → ``—``."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    a = abs(seconds)
    if a < 1e-9:  # below the clock's resolution
        return "0 s"
    if a < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if a < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    if a < 600:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.3g} min"


def fmt_us(us: float | None) -> str:
    """Microseconds as a short human duration."""
    return fmt_duration(None if us is None else us / 1e6)


def fmt_pct(x: float | None) -> str:
    """A fraction as a percentage; None → ``—``."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.0%}" if abs(x) >= 0.1 else f"{x:.1%}"


def fmt_bytes(n: float | None) -> str:
    """Bytes with a binary unit."""
    if n is None or not math.isfinite(n):
        return "—"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    return f"{value:.3g} TiB"  # pragma: no cover


def fmt_num(x: Any) -> str:
    """A number in 4 significant digits (ints with thousands separators); None → ``—``."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:.4g}"
    return str(x)


def fmt_in_unit(x: float | None, unit: str) -> str:
    """A value in a unit, made human for seconds, microseconds, bytes and shares."""
    if x is None:
        return "—"
    if unit == "s":
        return fmt_duration(x)
    if unit in ("us", "µs"):
        return fmt_us(x)
    if unit in ("bytes", "B"):
        return fmt_bytes(x)
    if unit in ("share", "fraction"):
        return fmt_pct(x)
    return f"{fmt_num(x)} {unit}".rstrip()
