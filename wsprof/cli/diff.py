"""``wsprof diff BEFORE AFTER``: what got faster, what got slower, where the overhead moved."""

from __future__ import annotations

import os
import socket
import time

import click

from wsprof.cli.options import source_name
from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_OK
from wsprof.report.renderers import DIFF_RENDERERS, choices_help


def default_diff_path(before: str, after: str, suffix: str = ".html") -> str:
    """``reports/wsprof-diff-<host>-<before>-vs-<after>-<time>.html`` under the current
    folder (``suffix``: the renderer's)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(
        "reports",
        f"wsprof-diff-{socket.gethostname()}-{source_name(before)}-vs-{source_name(after)}-{stamp}{suffix}",
    )


@click.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option(
    "--before-steps",
    default=None,
    metavar="A:B",
    help="compare only steps A..B-1 of BEFORE (half-open; A: and :B leave an end open)",
)
@click.option(
    "--after-steps", default=None, metavar="C:D", help="compare only steps C..D-1 of AFTER"
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list(DIFF_RENDERERS)),
    default="text",
    show_default=True,
    help=choices_help(DIFF_RENDERERS),
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="file to write (html default: reports/wsprof-diff-<host>-...-<time>.html; "
    "text and json default: stdout)",
)
def diff(
    before: str,
    after: str,
    before_steps: str | None,
    after_steps: str | None,
    fmt: str,
    output: str | None,
) -> int:
    """Compare BEFORE with AFTER: two runs (run folders, .wsprof traces or CSV series), or two
    step windows of one run (wsprof diff RUN RUN --before-steps 0:5 --after-steps 10:15).

    Re-measure after every fix: overhead moves to the next slowest place.
    """
    from wsprof.analysis.diff import StepRangeError, diff_loaded, parse_step_range
    from wsprof.inputs import load
    from wsprof.report.files import write_text

    b_range = None if before_steps is None else parse_step_range(before_steps, "--before-steps")
    a_range = None if after_steps is None else parse_step_range(after_steps, "--after-steps")
    try:
        result = diff_loaded(load(before), load(after), b_range, a_range)
    except StepRangeError as e:  # analysis names the side's steps; here they are an option
        raise e.with_option(f"--{e.role}-steps") from e
    renderer = DIFF_RENDERERS[fmt]
    text = renderer.render(result)
    if renderer.writes_file or output:
        path = output or default_diff_path(before, after, renderer.suffix)
        click.echo(escape_controls(write_text(path, text, "the diff")))
    else:
        click.echo(text, nl=False)
    return EXIT_OK
