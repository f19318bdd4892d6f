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
