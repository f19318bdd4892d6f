"""``wsprof frameworks [NAME...] [--format text|json]``: what wsprof knows about each RL
framework (the registry, :mod:`wsprof.frameworks`): preset entry points, sampled-phase
patterns, the log's step line and the metric keys read as wsprof's series."""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum
from typing import Any

import click

from wsprof import frameworks
from wsprof.errors import EXIT_OK
from wsprof.frameworks import Framework


def framework_record(fw: Framework) -> dict[str, Any]:
    """One framework as plain JSON data (what ``--format json`` prints for it).

    Args:
        fw: a registry entry.

    Returns:
        ``name``, ``title``, ``modules``, ``distribution`` (PyPI, null when not there),
        ``repository``, ``entry_points`` (phase and ``module:qualname`` paths),
        ``phase_patterns`` (phase, frame regex, its parts, ``legacy``), ``log_format`` (null
        when none), ``log_keys`` (framework key -> wsprof series, with the steps it is
        logged late by), ``tensorboard`` (its scalars' step axis and the tags kept apart) and
        ``timeline`` (the variable that makes it write its own weight-sync timeline).
    """
    fmt = fw.log_format
    return {
        "name": fw.name,
        "title": fw.title,
        "modules": list(fw.modules),
        "distribution": fw.distribution,
        "repository": fw.repository,
        "entry_points": [
            {"phase": e.phase, "paths": list(e.paths), "note": e.note} for e in fw.entry_points
        ],
        "phase_patterns": [
            {
                "phase": p.phase,
                "regex": p.regex,
                "function": p.function,
                "file": p.file,
                "legacy": p.legacy,
                "note": p.note,
            }
            for p in fw.phase_patterns
        ],
        "log_format": None
        if fmt is None
        else {
            "name": fmt.name,
            "marker": fmt.marker,
            "shape": fmt.shape.value,
            "example": fmt.example,
            "source": fmt.source,
        },
        "log_keys": [
            {"key": m.key, "series": m.series, "shift_steps": m.shift_steps, "note": m.note}
            for m in fw.metric_keys
        ],
        "timer_keys": [{"prefix": prefix, "suffix": suffix} for prefix, suffix in fw.timer_keys],
        "step_time_keys": list(fw.step_time_keys),
        "tensorboard": None
        if fw.tensorboard is None
        else {
            "step_axis": fw.tensorboard.step_axis,
            "apart": [{"prefix": a, "axis": b} for a, b in fw.tensorboard.apart],
        },
        "timeline": None
        if fw.timeline_env is None
        else {"env": fw.timeline_env, "file": fw.timeline_template},
    }


def render_json(items: tuple[Framework, ...]) -> str:
    """The frameworks as a JSON document ``{"frameworks": [...]}`` (:func:`framework_record`)."""
    return json.dumps({"frameworks": [framework_record(f) for f in items]}, indent=2) + "\n"


def render_text(items: tuple[Framework, ...]) -> str:
    """The frameworks for a terminal: one block each."""
    lines: list[str] = []
    for fw in items:
        pypi = f"PyPI {fw.distribution}" if fw.distribution else "not on PyPI"
        lines.append(
            f"{fw.title} ({fw.name}): modules {', '.join(fw.modules)}; {pypi}; {fw.repository}"
        )
        lines.append("  preset entry points:")
        for e in fw.entry_points:
            lines.append(f"    {e.phase:<12} {e.paths[0]}")
            lines += [f"    {'':<9}or {path}" for path in e.paths[1:]]
        fmt = fw.log_format
        lines.append(f"  log: {fmt.example}" if fmt else "  log: no step line wsprof reads")
        for m in fw.metric_keys:
            late = f" (logged {m.shift_steps} step late)" if m.shift_steps else ""
            lines.append(f"    {m.key} -> {m.series}{late}")
        if fw.tensorboard is not None:
            lines.append(f"  TensorBoard: scalars on {fw.tensorboard.step_axis}")
        if fw.timeline_env is not None:
            lines.append(
                f"  own weight-sync timeline: {fw.timeline_env} (wsprof run sets it to "
                f"RUN/framework-timeline/{fw.timeline_template})"
            )
        lines.append(f"  sampled-phase patterns ({len(fw.phase_patterns)}):")
        for p in fw.phase_patterns:
            where = f" in {p.file}" if p.file else ""
            legacy = " (older releases)" if p.legacy else ""
            lines.append(f"    {p.phase:<12} {p.function}{where}{legacy}")
        lines.append("")
    return "\n".join(lines)


class OutputFormat(Enum):
    """What ``--format`` prints."""

    TEXT = "text"
    JSON = "json"


RENDERERS: dict[OutputFormat, Callable[[tuple[Framework, ...]], str]] = {
    OutputFormat.TEXT: render_text,
    OutputFormat.JSON: render_json,
}


@click.command(name="frameworks")
@click.argument("names", nargs=-1, type=click.Choice(frameworks.NAMES, case_sensitive=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in OutputFormat]),
    default=OutputFormat.TEXT.value,
    show_default=True,
    help="text for a terminal, json for tools",
)
def frameworks_command(names: tuple[str, ...], fmt: str) -> int:
    """What wsprof knows about each framework (or only NAMES): preset entry points
    (module:qualname), sampled-phase patterns, log step line and metric keys."""
    items = tuple(frameworks.get(n) for n in names) if names else frameworks.FRAMEWORKS
    click.echo(RENDERERS[OutputFormat(fmt)](items), nl=False)
    return EXIT_OK
