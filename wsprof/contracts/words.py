"""Closed sets of words as ``str`` enums: a member is its word, so it compares, hashes, formats
and serializes as the text (``Severity.WARNING == "warning"``, ``f"{s}"`` and JSON give
``warning``) on every supported Python (3.10's ``(str, Enum)`` formats as the member's name
and hashes by it; ``enum.StrEnum`` is 3.11+)."""

from __future__ import annotations

from enum import Enum


class Words(str, Enum):
    """Base of a closed set of words (see the module docstring)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    __hash__ = str.__hash__
