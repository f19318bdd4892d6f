"""``wsprof analyze PATH``: verdicts and findings as text or JSON."""

from __future__ import annotations

import sys

import click

from wsprof.analysis.model import SEVERITIES
from wsprof.cli.options import (
    FAIL_ON,
    LINK_GBPS,
    RAY,
    TIMELINE,
    TIMELINE_RUN,
    WORKERS,
    analyze_joined,
    fails,
)
from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_FINDINGS, EXIT_OK
from wsprof.report.renderers import ANALYZE_RENDERERS, choices_help


@click.command()
@click.argument("path", type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list(ANALYZE_RENDERERS)),
    default="text",
    show_default=True,
    help=choices_help(ANALYZE_RENDERERS),
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON),
    default=None,
    help="exit 1 when a finding at or above this severity exists; 'inconclusive' "
    "also when the data cannot support a verdict",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="after the diagnoses, list every finding behind them (with where and next step)",
)
@LINK_GBPS
@TIMELINE
@TIMELINE_RUN
@WORKERS
@RAY
def analyze(
    path: str,
    fmt: str,
    fail_on: str | None,
    show_all: bool,
    link_gbps: float | None,
    timeline: str | None,
    timeline_run: str | None,
    workers: int | None,
    ray_address: str | None,
) -> int:
    """Analyse PATH: a run folder, a .wsprof trace, a CSV series (a step column and numeric
    columns, W&B exports too), a training log (slime, verl, OpenRLHF, AReaL), a TensorBoard
    folder, a W&B run or slime's communication timeline."""
    analysis = analyze_joined(path, timeline, timeline_run, link_gbps, workers, ray_address)
    limit = len(analysis.findings) if show_all else None
    click.echo(
        ANALYZE_RENDERERS[fmt].render(analysis, colour=sys.stdout.isatty(), max_findings=limit),
        nl=False,
    )
    if fails(analysis, fail_on):
        if analysis.verdict.status == "inconclusive":
            reason = escape_controls(analysis.verdict.reasons[0])
            sys.stderr.write(f"wsprof: exit 1: inconclusive: {reason}\n")
            return EXIT_FINDINGS
        level = "warning" if fail_on == "inconclusive" else str(fail_on)
        n = sum(
            1 for f in analysis.findings if SEVERITIES.index(f.severity) >= SEVERITIES.index(level)
        )
        sys.stderr.write(f"wsprof: exit 1: {n} finding(s) at or above {level}\n")
        return EXIT_FINDINGS
    return EXIT_OK
