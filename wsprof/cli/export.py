"""``wsprof export PATH --format perfetto|speedscope|csv -o FILE``: data for other tools."""

from __future__ import annotations

import click

from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_OK
from wsprof.report.files import output_file
from wsprof.report.renderers import EXPORTERS, choices_help

#: The export formats, from the registry (:data:`wsprof.report.renderers.EXPORTERS`).
FORMATS = tuple(EXPORTERS)


@click.command()
@click.argument("path", type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    required=True,
    help=choices_help(EXPORTERS, sep=": "),
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="file to write"
)
def export(path: str, fmt: str, output: str) -> int:
    """Export PATH (a run folder or .wsprof trace; csv also takes a CSV series) for another
    tool."""
    from wsprof.inputs import load

    loaded = load(path)
    exporter = EXPORTERS[fmt]
    # written as the report is: a private temporary file beside -o, then one rename
    with output_file(output, "the export", make_folders=False) as fh:
        what = exporter.write(loaded, fh, lambda line: click.echo(escape_controls(line), err=True))
    click.echo(escape_controls(f"{output}: {what}"))
    return EXIT_OK
