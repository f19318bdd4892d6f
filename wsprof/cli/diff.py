"""``wsprof diff BEFORE AFTER``: what got faster, what got slower, where the overhead moved."""

from __future__ import annotations

import os
import socket
import time

import click

from wsprof.errors import EXIT_OK


def default_diff_path(before: str, after: str) -> str:
    """``reports/wsprof-diff-<host>-<before>-vs-<after>-<time>.html`` under the current
    folder."""

    def name(path: str) -> str:
        return os.path.basename(os.path.normpath(path)).replace(".wsprof", "") or "run"

    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(
        "reports",
        f"wsprof-diff-{socket.gethostname()}-{name(before)}-vs-{name(after)}-{stamp}.html")


@click.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option("--before-steps", default=None, metavar="A:B",
              help="compare only steps A..B-1 of BEFORE (half-open; A: and :B leave an end open)")
@click.option("--after-steps", default=None, metavar="C:D",
              help="compare only steps C..D-1 of AFTER")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text",
              show_default=True, help="text for people, json for machines, html for a page")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="file to write (html default: reports/wsprof-diff-<host>-...-<time>.html; "
                   "text and json default: stdout)")
def diff(before: str, after: str, before_steps: str | None, after_steps: str | None, fmt: str,
         output: str | None) -> int:
    """Compare BEFORE with AFTER: two runs (run folders, .wsprof traces or CSV series), or two
    step windows of one run (wsprof diff RUN RUN --before-steps 0:5 --after-steps 10:15).

    Re-measure after every fix: overhead moves to the next slowest place.
    """
    from wsprof.analysis.diff import diff_paths, parse_step_range

    b_range = None if before_steps is None else parse_step_range(before_steps, "--before-steps")
    a_range = None if after_steps is None else parse_step_range(after_steps, "--after-steps")
    result = diff_paths(before, after, b_range, a_range)
    if fmt == "html":
        from wsprof.report.diff_html import write_diff_html

        click.echo(write_diff_html(result, output or default_diff_path(before, after)))
        return EXIT_OK
    if fmt == "json":
        from wsprof.report.diff_json import render_diff_json

        text = render_diff_json(result) + "\n"
    else:
        from wsprof.report.diff_text import render_diff_text

        text = render_diff_text(result)
    if output:
        from wsprof.report.files import write_text

        click.echo(write_text(output, text, "the diff"))
    else:
        click.echo(text, nl=False)
    return EXIT_OK
