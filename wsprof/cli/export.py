"""``wsprof export PATH --format perfetto|speedscope|csv -o FILE``: data for other tools."""

from __future__ import annotations

import contextlib
import os
import tempfile

import click

from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_OK, InputError
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
    # A private temporary file beside the output (mkstemp: O_EXCL, a random name, 0600), then
    # one rename: a link planted at a predictable ``<output>.part`` is never written through,
    # and a reader never sees half a file.
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(
            dir=os.path.dirname(os.path.abspath(output)),
            prefix=f".{os.path.basename(output)}.",
            suffix=".part",
        )
        with open(fd, "w", encoding="utf-8", newline="") as fh:
            what = exporter.write(
                loaded, fh, lambda line: click.echo(escape_controls(line), err=True)
            )
        os.replace(tmp, output)
        tmp = None
    except OSError as e:
        raise InputError(
            f"{output}: cannot write ({e.strerror or e}); choose a writable path with -o"
        ) from e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)
    click.echo(escape_controls(f"{output}: {what}"))
    return EXIT_OK
