"""Settings read from the environment by capture (``WSPROF_*``), validated.

A bad value never stops training: it is named in a one-line warning on stderr and the default
is used.
"""

from __future__ import annotations

import os
import sys


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """``$name`` as an integer >= ``minimum``; ``default`` when unset, empty or invalid (with a
    one-line warning on stderr for an invalid value)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        sys.stderr.write(f"wsprof: ignoring {name}={raw!r}: not an integer >= {minimum}; "
                         f"using {default}\n")
        return default
    return value
