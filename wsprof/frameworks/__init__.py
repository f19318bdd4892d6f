"""What wsprof knows about each RL framework, as data: one module per framework.

Every framework module (:mod:`~wsprof.frameworks.slime`, :mod:`~wsprof.frameworks.verl`,
:mod:`~wsprof.frameworks.openrlhf`, :mod:`~wsprof.frameworks.areal`,
:mod:`~wsprof.frameworks.trl`) holds one :class:`Framework`: its top-level modules, the entry
points presets mark as phases (:mod:`wsprof.capture.presets`), the sampled-phase frame
patterns (:mod:`wsprof.analysis.phases`), its log's step line (:mod:`wsprof.importers.logs`),
the metric keys that become wsprof's series and what its other keys measure (timers,
per-token times, quality namespaces: :mod:`wsprof.analysis.kinds`). :data:`FRAMEWORKS` lists
them in the order that breaks ties (detection, log formats, series keys). The engines they
run on (vLLM, SGLang, DeepSpeed, ...) and their generic phase patterns are in
:mod:`~wsprof.frameworks.engines`.

Checked against the frameworks' released sources by ``scripts/check_frameworks.py`` (an entry
point passes when one of its alternative paths exists; a pattern when it matches a function
of the release, unless it is marked ``legacy``). ``wsprof frameworks`` prints this registry.

A leaf data layer: imports the standard library and :mod:`wsprof.contracts` only.
"""

from __future__ import annotations

from collections.abc import Iterable

from wsprof.frameworks import areal, openrlhf, slime, trl, verl
from wsprof.frameworks.engines import ENGINES
from wsprof.frameworks.model import (
    ANY,
    Engine,
    EntryPoint,
    Framework,
    LineShape,
    LogFormat,
    MetricKey,
    PhasePattern,
    frame_regex,
    patterns_by_phase,
    split_path,
)

#: Every framework, in the order that breaks ties.
#: The run folder's subfolder where ``wsprof run`` asks frameworks to write their own
#: weight-sync timelines (:attr:`Framework.timeline_env`).
RUN_TIMELINE_DIR = "framework-timeline"

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


def timer_keys() -> tuple[tuple[str, str], ...]:
    """``(prefix, suffix)`` of every framework's timer keys (all in seconds), in
    :data:`FRAMEWORKS` order (:attr:`Framework.timer_keys`)."""
    return tuple(t for f in FRAMEWORKS for t in f.timer_keys)


def timer_prefixes() -> tuple[str, ...]:
    """The key prefixes that alone make a key a timer in seconds (``timing_s/``): the timer
    keys without a suffix, in :data:`FRAMEWORKS` order."""
    return tuple(prefix for prefix, suffix in timer_keys() if not suffix)


def is_timer_key(key: str) -> bool:
    """Whether ``key`` (lower case) is one of a framework's timers, seconds (``timing_s/gen``,
    ``perf/update_weights_time``)."""
    return any(key.startswith(p) and key.endswith(s) for p, s in timer_keys())


def step_time_keys() -> frozenset[str]:
    """Keys that are step times in seconds though their name has no unit (every framework's
    :attr:`Framework.step_time_keys`)."""
    return frozenset(k for f in FRAMEWORKS for k in f.step_time_keys)


def per_token_prefix(key: str) -> tuple[Framework, str] | None:
    """The framework and prefix of a per-token time key, ms (``timing_per_token_ms/gen``:
    verl), else None (:attr:`Framework.per_token_prefixes`).

    Args:
        key: a metric key, lower case.
    """
    for f in FRAMEWORKS:
        for prefix in f.per_token_prefixes:
            if key.startswith(prefix):
                return f, prefix
    return None


def quality_namespace(key: str) -> tuple[Framework, str] | None:
    """The framework and namespace (``actor/``) of a key in a namespace that holds only
    training-quality and data statistics, else None (:attr:`Framework.quality_namespaces`).

    Args:
        key: a metric key, lower case.
    """
    for f in FRAMEWORKS:
        for namespace in f.quality_namespaces:
            if key.startswith(namespace):
                return f, namespace
    return None


def engine_patterns() -> dict[str, list[str]]:
    """The engines' sampled-phase patterns (:data:`~wsprof.frameworks.engines.ENGINES`):
    phase -> frame regexes, phases in canonical order."""
    return patterns_by_phase(p for e in ENGINES for p in e.phase_patterns)


__all__ = [
    "ANY",
    "ENGINES",
    "FRAMEWORKS",
    "NAMES",
    "Engine",
    "EntryPoint",
    "Framework",
    "LineShape",
    "LogFormat",
    "MetricKey",
    "PhasePattern",
    "detect",
    "engine_patterns",
    "find",
    "for_module",
    "frame_regex",
    "get",
    "is_timer_key",
    "log_formats",
    "patterns_by_phase",
    "per_token_prefix",
    "quality_namespace",
    "series_keys",
    "split_path",
    "step_time_keys",
    "timer_keys",
    "timer_prefixes",
]
