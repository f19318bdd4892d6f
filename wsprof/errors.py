"""Errors that reach the user as one line and an exit code."""

from __future__ import annotations

#: Exit codes of every command (DESIGN.md): 0 ok, 1 findings at/above --fail-on, 2 usage/input.
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


class WsprofError(Exception):
    """An error explained in one line; ``exit_code`` is what the CLI returns."""

    exit_code = EXIT_USAGE


class InputError(WsprofError):
    """A path, trace, series or log that cannot be read: says what is wrong and what to do."""


#: Longest excerpt of a value read from a bad input that an error message quotes.
MAX_QUOTE_CHARS = 60


def quote(value: object, max_chars: int = MAX_QUOTE_CHARS) -> str:
    """``repr(value)``, cut to ``max_chars``: a file's content quoted in an error message stays
    one short line (``repr`` escapes newlines) whatever the file held.

    Args:
        value: the cell, column name or field to quote.
        max_chars: the longest result; longer ones end in ``...``.

    Returns:
        The quoted text.
    """
    text = repr(value)
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
