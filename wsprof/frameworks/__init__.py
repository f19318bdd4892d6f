"""What wsprof knows about each RL framework, as data: one module per framework.

Every framework module (:mod:`~wsprof.frameworks.slime`, :mod:`~wsprof.frameworks.verl`,
:mod:`~wsprof.frameworks.openrlhf`, :mod:`~wsprof.frameworks.areal`,
:mod:`~wsprof.frameworks.trl`) holds one :class:`Framework`: its top-level modules, the entry
points presets mark as phases (:mod:`wsprof.capture.presets`), the sampled-phase frame
patterns (:mod:`wsprof.analysis.phases`), its log's step line (:mod:`wsprof.importers.logs`)
and the metric keys that become wsprof's series. :data:`FRAMEWORKS` lists them in the order
that breaks ties (detection, log formats, series keys).

Checked against the frameworks' released sources by ``scripts/check_frameworks.py`` (an entry
point passes when one of its alternative paths exists; a pattern when it matches a function
of the release, unless it is marked ``legacy``). ``wsprof frameworks`` prints this registry.

A leaf data layer: imports the standard library and :mod:`wsprof.contracts` only.
"""

from __future__ import annotations

from collections.abc import Iterable

from wsprof.frameworks import areal, openrlhf, slime, trl, verl
from wsprof.frameworks.model import (
    ANY,
    EntryPoint,
    Framework,
    LineShape,
    LogFormat,
    MetricKey,
    PhasePattern,
    frame_regex,
    split_path,
)

#: Every framework, in the order that breaks ties.
FRAMEWORKS: tuple[Framework, ...] = (
    slime.FRAMEWORK,
    verl.FRAMEWORK,
    openrlhf.FRAMEWORK,
    areal.FRAMEWORK,
    trl.FRAMEWORK,
)
#: Their names, in the same order.
NAMES: tuple[str, ...] = tuple(f.name for f in FRAMEWORKS)
_BY_NAME = {f.name: f for f in FRAMEWORKS}


def get(name: str) -> Framework:
    """The framework called ``name`` (case-insensitive).

    Raises:
        KeyError: no such framework; the message names the known ones.
    """
    fw = _BY_NAME.get(name.strip().lower())
    if fw is None:
        raise KeyError(f"unknown framework {name!r}; one of {', '.join(NAMES)}")
    return fw


def find(name: str | None) -> Framework | None:
    """The framework called ``name`` (case-insensitive), else None."""
    return _BY_NAME.get(name.strip().lower()) if name else None


def for_module(module: str) -> Framework | None:
    """The framework an imported module belongs to (``verl.workers.fsdp_workers`` -> verl).

    Args:
        module: a dotted module name.

    Returns:
        The framework whose top-level package the module is in, else None.
    """
    top = module.partition(".")[0]
    return next((f for f in FRAMEWORKS if top in f.modules), None)


def detect(modules: Iterable[str]) -> list[Framework]:
    """The frameworks among imported modules (e.g. ``sys.modules``), in :data:`FRAMEWORKS`
    order.

    Args:
        modules: an iterable of dotted module names.

    Returns:
        Each framework one of whose top-level packages is among ``modules``.
    """
    names = {str(m).partition(".")[0] for m in modules}
    return [f for f in FRAMEWORKS if names.intersection(f.modules)]


def series_keys(headlines: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Headline series -> the framework keys it is read from, first present wins: the series'
    own name first (an export may already use it), then every framework's keys in
    :data:`FRAMEWORKS` order.

    Args:
        headlines: the headline series names, in the order wanted.
    """
    out: dict[str, tuple[str, ...]] = {}
    for name in headlines:
        keys = [name]
        for fw in FRAMEWORKS:
            keys += [m.key for m in fw.metric_keys if m.series == name and m.key not in keys]
        out[name] = tuple(keys)
    return out


def log_formats() -> tuple[LogFormat, ...]:
    """Every framework's log format, in :data:`FRAMEWORKS` order."""
    return tuple(f.log_format for f in FRAMEWORKS if f.log_format is not None)


__all__ = [
    "ANY",
    "FRAMEWORKS",
    "NAMES",
    "EntryPoint",
    "Framework",
    "LineShape",
    "LogFormat",
    "MetricKey",
    "PhasePattern",
    "detect",
    "find",
    "for_module",
    "frame_regex",
    "get",
    "log_formats",
    "series_keys",
    "split_path",
]
