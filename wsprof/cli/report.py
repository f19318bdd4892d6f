"""``wsprof report PATH -o FILE.html``: the self-contained HTML growth-curve report."""

from __future__ import annotations

import click

from wsprof.cli.options import (
    LINK_GBPS,
    RAY,
    TIMELINE,
    TIMELINE_RUN,
    WORKERS,
    analyze_joined,
    default_report_path,
)
from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_OK


@click.command()
@click.argument("path", type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="HTML file to write (default: reports/wsprof-<host>-<run>-<time>.html)",
)
@LINK_GBPS
@TIMELINE
@TIMELINE_RUN
@WORKERS
@RAY
def report(
    path: str,
    output: str | None,
    link_gbps: float | None,
    timeline: str | None,
    timeline_run: str | None,
    workers: int | None,
    ray_address: str | None,
) -> int:
    """Write the HTML report for PATH (run folder, .wsprof trace or CSV series)."""
    from wsprof.report.files import write_text
    from wsprof.report.renderers import REPORT_RENDERERS

    renderer = REPORT_RENDERERS["html"]
    analysis = analyze_joined(path, timeline, timeline_run, link_gbps, workers, ray_address)
    wrote = write_text(output or default_report_path(path), renderer.render(analysis), "the report")
    click.echo(escape_controls(wrote))
    return EXIT_OK
