"""Settings read from the environment by capture (``WSPROF_*``), validated.

A bad number never stops training: :func:`env_int` names it in a one-line warning on stderr
and uses the default. A bad flag or choice (:func:`env_flag`, :func:`env_choice`: what to
profile at all, and how) raises ``ValueError`` with one line naming the variable, the value and
the accepted values: ``wsprof.patch()`` passes it on, the ``wsprof run`` bootstrap
(:mod:`wsprof.bootstrap`) turns it into a warning and carries on.
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


#: Spellings of a yes/no ``WSPROF_*`` flag (compared lower case, stripped).
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def env_flag(name: str, default: bool = False) -> bool:
    """``$name`` as a yes/no flag; ``default`` when unset or empty.

    Args:
        name: the environment variable, e.g. ``WSPROF_DISABLE``.
        default: the value when it is unset or empty.

    Returns:
        True for ``1``/``true``/``yes``/``on``, False for ``0``/``false``/``no``/``off``
        (any case).

    Raises:
        ValueError: any other value (one line naming the variable, the value and the accepted
            values).
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    word = raw.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(
        f"{name}={raw!r} is not a yes/no flag; set it to one of "
        f"{', '.join(TRUE_WORDS + FALSE_WORDS)} or unset it"
    )


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """``$name`` as one of ``choices``; ``default`` when unset or empty.

    Args:
        name: the environment variable, e.g. ``WSPROF_LAYERS``.
        choices: the accepted values (compared lower case, stripped).
        default: the value when it is unset or empty.

    Returns:
        The chosen value, lower case.

    Raises:
        ValueError: a value not in ``choices`` (one line naming the variable, the value and the
            accepted values).
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() in choices:
        return raw.lower()
    raise ValueError(
        f"{name}={raw!r} is not one of {', '.join(choices)}; set it to one of them or unset it"
    )
