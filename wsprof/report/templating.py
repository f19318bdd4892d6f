"""The one Jinja2 environment of wsprof's HTML pages (report and diff).

Autoescape is on: every value is HTML-escaped unless it is ``Markup`` (inline SVG figures,
``|tojson`` data). Besides, every plain string a template prints passes through
:func:`wsprof.contracts.safe_text.escape_controls` (line breaks kept) before it is escaped:
HTML escaping leaves bidirectional overrides (U+202E) and other control characters alone, and
a name read from a hostile input could reorder what the page shows ("Trojan source",
CVE-2021-42574) as it could on a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from wsprof.contracts.safe_text import escape_controls


def _finalize(value: Any) -> Any:
    """A printed value: a plain string with its control characters escaped; anything else
    (numbers, ``Markup`` made by wsprof itself) as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return escape_controls(value, newlines=True)
    return value


def environment(filters: dict[str, Callable[..., Any]]) -> Environment:
    """The templates' environment (``wsprof/report/templates``) with ``filters`` added.

    Args:
        filters: name -> function, as ``{{ x|name }}`` calls them.
    """
    env = Environment(
        loader=PackageLoader("wsprof", "report/templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.filters.update(filters)
    return env
