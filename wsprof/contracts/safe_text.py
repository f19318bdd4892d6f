"""Text read from an input made safe to print on a terminal: control characters escaped.

A trace, CSV or log names operations, phases, hosts, frames, counters and columns; a hostile
or damaged one can put terminal escapes in those names (ESC ``[31m`` recolours the terminal,
OSC 52 writes the clipboard, ``\\r`` overwrites the line before it, C1 ``\\x9b`` is a one-byte
CSI on some terminals). Every line wsprof prints that holds such text passes through
:func:`escape_controls`; the escaped text stays readable (``\\x1b[31m``).
"""

from __future__ import annotations

import unicodedata

#: Characters escaped besides Unicode's control characters (category Cc: C0, DEL, C1): the
#: bidirectional overrides and isolates (they reorder what a terminal shows: "Trojan source",
#: CVE-2021-42574) and the Unicode line and paragraph separators (a new line to some readers).
_ALSO = (
    "\u061c\u200e\u200f"  # Arabic letter mark, left-to-right and right-to-left marks
    "\u202a\u202b\u202c\u202d\u202e"  # embeddings, pop, overrides
    "\u2066\u2067\u2068\u2069"  # isolates
    "\u2028\u2029"  # line and paragraph separators
)


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


#: ``str.translate`` table: every character escaped, to its Python-style escape.
_TABLE: dict[int, str] = {
    n: _escape(chr(n)) for n in range(0x100) if unicodedata.category(chr(n)) == "Cc"
} | {ord(ch): _escape(ch) for ch in _ALSO}
_KEEP_NEWLINE = {**_TABLE, ord("\n"): "\n"}


def escape_controls(text: str, newlines: bool = False) -> str:
    """``text`` with every control character written as its escape (``\\x1b``, ``\\r``
    as ``\\x0d``, ``\\u202e``), printable text unchanged.

    Args:
        text: what to print (a name, a line, a whole report).
        newlines: keep ``\\n`` as a line break (a multi-line report); else it is escaped too
            (one line: an error message).

    Returns:
        The text, safe to write to a terminal; already escaped text comes back unchanged.
    """
    return text.translate(_KEEP_NEWLINE if newlines else _TABLE)
