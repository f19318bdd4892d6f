"""``wsprof export PATH --format perfetto|speedscope|csv -o FILE``, ``--format tensorboard -o
DIR``: data for other tools."""

from __future__ import annotations

import click

from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_OK
from wsprof.report.files import output_file
from wsprof.report.renderers import EXPORTERS, FolderExporter, choices_help

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
    "-o",
    "--output",
    type=click.Path(),
    required=True,
    help="file to write (tensorboard: the folder, made user-only; an earlier wsprof "
    "TensorBoard output there is replaced, any other non-empty folder refused)",
)
def export(path: str, fmt: str, output: str) -> int:
    """Export PATH (a run folder or .wsprof trace; csv and tensorboard also take a CSV series
    or a training log) for another tool."""
    from wsprof.inputs import load

    exporter = EXPORTERS[fmt]
    if isinstance(exporter, FolderExporter):
        exporter.ready()  # a missing extra is said before anything is read
        what = exporter.write_folder(
            load(path), output, lambda line: click.echo(escape_controls(line), err=True)
        )
        click.echo(escape_controls(f"{output}: {what}"))
        return EXIT_OK
    loaded = load(path)
    # written as the report is: a private temporary file beside -o, then one rename
    with output_file(output, "the export", make_folders=False) as fh:
        what = exporter.write(loaded, fh, lambda line: click.echo(escape_controls(line), err=True))
    click.echo(escape_controls(f"{output}: {what}"))
    return EXIT_OK
