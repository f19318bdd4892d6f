"""Units of measured values, and numbers as short human text in their unit.

One :class:`Unit` is attached where a value is made (a per-step series, a counter track) and
every renderer and finding formats through it: ``45.6 ms``, ``3 GiB``, ``53%``, and slopes as
``+1.2 MiB/step``. A column imported with a unit wsprof does not interpret (``tokens/s``,
``GiB``, ``ms``) is :attr:`Unit.OTHER` with that text beside it; :func:`unit_family` gives
any unit text's family and scale (``ms`` is seconds times 1e-3).
Pure; stdlib only.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

#: Nanoseconds, microseconds and seconds as plain ints and floats, named by their unit
#: (``t_start_ns: Nanoseconds``).
Nanoseconds = int
Microseconds = float
Seconds = float
Bytes = int


class Unit(Enum):
    """What a value measures. The value is the unit's canonical text (``s``, ``bytes``).

    ``OTHER`` is a unit wsprof does not interpret: an imported column's own text (``tokens/s``,
    ``GiB``, ``%``) goes with it, or none when nothing says what the value is.
    """

    SECONDS = "s"
    MICROSECONDS = "us"
    NANOSECONDS = "ns"
    BYTES = "bytes"
    BYTES_PER_SECOND = "bytes/s"
    SHARE = "share"
    COUNT = "count"
    OTHER = "other"

    @classmethod
    def parse(cls, text: str) -> Unit:
        """The unit a text names (``s``, ``us``, ``µs``, ``ns``, ``bytes``, ``B``, ``share``,
        ``fraction``, ``count``); :attr:`OTHER` for any other text (``GiB``, ``tokens/s``)."""
        return _ALIASES.get(text.strip(), cls.OTHER)

    def label(self, text: str = "") -> str:
        """The unit as shown beside a number or in a JSON ``unit`` field: the canonical text,
        or for :attr:`OTHER` the importer's own ``text`` (``""`` when none)."""
        return text if self is Unit.OTHER else self.value

    def fmt(self, x: float | None, text: str = "") -> str:
        """``x`` in this unit as short human text; None → ``—``.

        Args:
            x: the value, in this unit (seconds for SECONDS, bytes for BYTES, a fraction for
                SHARE, ...).
            text: the free unit text of an :attr:`OTHER` value (``tokens/s``); ignored else.

        Returns:
            ``12.3 ms``, ``1.5 GiB``, ``53%``, ``1,024``, ``3.2 tokens/s``.
        """
        if x is None:
            return "—"
        if self is Unit.SECONDS:
            return fmt_duration(x)
        if self is Unit.MICROSECONDS:
            return fmt_us(x)
        if self is Unit.NANOSECONDS:
            return fmt_duration(x / 1e9)
        if self is Unit.BYTES:
            return fmt_bytes(x)
        if self is Unit.BYTES_PER_SECOND:
            return fmt_rate(x)
        if self is Unit.SHARE:
            return fmt_pct(x)
        if self is Unit.COUNT:
            return fmt_num(x)
        return f"{fmt_num(x)} {text}".rstrip()

    def fmt_slope(self, x: float | None, text: str = "", per: str = "step") -> str:
        """A rate of change of a value in this unit: ``+1.2 MiB/step``, ``-3.4 ms/step``.

        Args:
            x: change per ``per``, in this unit.
            text: the free unit text of an :attr:`OTHER` value; ignored else.
            per: what the change is per.

        Returns:
            The signed change in this unit followed by ``/<per>``; ``—`` for None.
        """
        if x is None or not math.isfinite(x):
            return "—"
        sign = "+" if x > 0 else ""
        return f"{sign}{self.fmt(x, text)}/{per}"


#: Every unit text wsprof knows, with its family (the canonical :class:`Unit` of its dimension:
#: seconds, bytes, share or count) and its scale (family units per one of it: ``ms`` is
#: ``(SECONDS, 1e-3)``, ``GiB`` ``(BYTES, 2**30)``, ``%`` ``(SHARE, 0.01)``). The one table of
#: unit texts: :func:`unit_family` reads it, and :meth:`Unit.parse` names a :class:`Unit` only
#: for the texts whose family and scale are that unit's own.
UNIT_TEXTS: dict[str, tuple[Unit, float]] = {
    "s": (Unit.SECONDS, 1.0),
    "ms": (Unit.SECONDS, 1e-3),
    "us": (Unit.SECONDS, 1e-6),
    "µs": (Unit.SECONDS, 1e-6),
    "ns": (Unit.SECONDS, 1e-9),
    "min": (Unit.SECONDS, 60.0),
    "h": (Unit.SECONDS, 3600.0),
    "bytes": (Unit.BYTES, 1.0),
    "B": (Unit.BYTES, 1.0),
    "kB": (Unit.BYTES, 1e3),
    "KiB": (Unit.BYTES, 2.0**10),
    "MB": (Unit.BYTES, 1e6),
    "MiB": (Unit.BYTES, 2.0**20),
    "GB": (Unit.BYTES, 1e9),
    "GiB": (Unit.BYTES, 2.0**30),
    "TB": (Unit.BYTES, 1e12),
    "TiB": (Unit.BYTES, 2.0**40),
    "bytes/s": (Unit.BYTES_PER_SECOND, 1.0),
    "B/s": (Unit.BYTES_PER_SECOND, 1.0),
    "kB/s": (Unit.BYTES_PER_SECOND, 1e3),
    "MB/s": (Unit.BYTES_PER_SECOND, 1e6),
    "MiB/s": (Unit.BYTES_PER_SECOND, 2.0**20),
    "GB/s": (Unit.BYTES_PER_SECOND, 1e9),
    "GiB/s": (Unit.BYTES_PER_SECOND, 2.0**30),
    "Gb/s": (Unit.BYTES_PER_SECOND, 1e9 / 8),
    "Gbps": (Unit.BYTES_PER_SECOND, 1e9 / 8),
    "share": (Unit.SHARE, 1.0),
    "fraction": (Unit.SHARE, 1.0),
    "%": (Unit.SHARE, 0.01),
    "count": (Unit.COUNT, 1.0),
}

#: Words that name a unit at the end of a name (``reserved_gib``, ``sync_time_s``: STYLE's
#: units in names), lower-case, and the unit text of :data:`UNIT_TEXTS` each names.
UNIT_WORDS: dict[str, str] = {
    "s": "s",
    "sec": "s",
    "seconds": "s",
    "ms": "ms",
    "us": "us",
    "µs": "µs",
    "ns": "ns",
    "min": "min",
    "h": "h",
    "bytes": "bytes",
    "b": "B",
    "kb": "kB",
    "kib": "KiB",
    "mb": "MB",
    "mib": "MiB",
    "gb": "GB",
    "gib": "GiB",
    "tb": "TB",
    "tib": "TiB",
    "pct": "%",
    "percent": "%",
    "count": "count",
}


def unit_family(text: str) -> tuple[Unit, float]:
    """The family and scale of a unit text (see :data:`UNIT_TEXTS`).

    Args:
        text: a unit text (``ms``, ``GiB``, ``%``, ``tokens/s``).

    Returns:
        ``(family, scale)``: a value in ``text`` times ``scale`` is in ``family`` (seconds,
        bytes, a share, a count); ``(Unit.OTHER, 1.0)`` for a text wsprof does not know.
    """
    return UNIT_TEXTS.get(text.strip(), (Unit.OTHER, 1.0))


def unit_of_word(word: str) -> str:
    """The unit text a word names as a name's last part (``gib`` -> ``GiB``, ``sec`` -> ``s``,
    ``pct`` -> ``%``; see :data:`UNIT_WORDS`), or ``""``."""
    return UNIT_WORDS.get(word.strip().lower(), "")


#: Texts that name a :class:`Unit` itself: those of :data:`UNIT_TEXTS` whose family and scale
#: are the unit's own (``µs`` is MICROSECONDS; ``ms`` and ``GiB`` are :attr:`Unit.OTHER`).
_ALIASES: dict[str, Unit] = {
    text: unit
    for text, family in UNIT_TEXTS.items()
    for unit in Unit
    if unit is not Unit.OTHER and UNIT_TEXTS[unit.value] == family
}


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


def fmt_rate(bytes_per_s: float | None) -> str:
    """Bytes per second as a short bandwidth in decimal units, as NCCL's tests and link
    rates are given (``7.5 GB/s``, ``812 MB/s``, ``3.1 kB/s``); None → ``—``."""
    if bytes_per_s is None or not math.isfinite(bytes_per_s):
        return "—"
    a = abs(bytes_per_s)
    for scale, name in ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if a >= scale:
            return f"{bytes_per_s / scale:.3g} {name}"
    return f"{bytes_per_s:.3g} B/s"


def fmt_bytes_decimal(n: float | None) -> str:
    """Bytes in decimal units, beside a bandwidth in decimal units (``14.2 GB``, ``5.78 MB``,
    ``812 kB``, ``96 B``); None → ``—``."""
    if n is None or not math.isfinite(n):
        return "—"
    a = abs(n)
    for scale, name in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if a >= scale:
            return f"{n / scale:.3g} {name}"
    return f"{n:.0f} B"


def fmt_us(us: float | None) -> str:
    """Microseconds as a short human duration."""
    return fmt_duration(None if us is None else us / 1e6)


def fmt_pct(x: float | None) -> str:
    """A fraction as a percentage; None → ``—``."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.0%}" if abs(x) >= 0.1 else f"{x:.1%}"


def fmt_share_of(x: float | None) -> str:
    """A share of a limit as a percentage that stays readable when tiny (a gloo sync at
    0.04% of a stated link): :func:`fmt_pct` from 0.1% on, two significant digits below."""
    if x is None or not math.isfinite(x) or abs(x) >= 0.001 or x == 0:
        return fmt_pct(x)
    return f"{x * 100:.2g}%"


def fmt_bytes(n: float | None) -> str:
    """Bytes with a binary unit (``512 B``, ``1.5 GiB``); None → ``—``."""
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
        if 1e4 <= abs(x) < 1e15:  # 201,000 rather than 2.01e+05, to 4 significant digits
            return f"{float(f'{x:.4g}'):,.0f}"
        return f"{x:.4g}"
    return str(x)


def fmt_in_unit(x: float | None, unit: str) -> str:
    """A value in a unit text (diff items, evidence), made human for seconds, microseconds,
    bytes and shares; any other text follows the number (``5 count``, ``3 GiB``)."""
    if x is None:
        return "—"
    parsed = Unit.parse(unit)
    if parsed in _HUMAN:
        return parsed.fmt(x)
    return f"{fmt_num(x)} {unit}".rstrip()


#: Units :func:`fmt_in_unit` makes human; every other text is written after the number.
_HUMAN = frozenset({Unit.SECONDS, Unit.MICROSECONDS, Unit.BYTES, Unit.SHARE})
