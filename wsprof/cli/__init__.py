"""Command line (click); one module per command. ``main`` returns the exit code.

Exit codes (DESIGN.md): 0 ok, 1 findings at or above ``--fail-on``, 2 usage or input error.
"""

from __future__ import annotations

import gc
import re
import sys

import click

from wsprof._version import __version__
from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_USAGE, WsprofError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wsprof")
def cli() -> None:
    """wsprof: weight-sync profiler and leak detector for distributed RL post-training."""


def _register() -> None:
    from wsprof.cli import analyze, attach, demo, diff, export, frameworks, report, run, watch

    cli.add_command(demo.demo)
    cli.add_command(attach.attach)
    cli.add_command(analyze.analyze)
    cli.add_command(report.report)
    cli.add_command(diff.diff)
    cli.add_command(export.export)
    cli.add_command(run.run)
    cli.add_command(watch.watch)
    cli.add_command(frameworks.frameworks_command)


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors become one line on stderr and an exit code, never a traceback.

    Every error line has its control characters escaped
    (:func:`wsprof.contracts.safe_text.escape_controls`): paths and names in it may come from
    a hostile input. A MemoryError or RecursionError anywhere in a command becomes one line
    naming the command's inputs and what to do, exit 2 (:func:`_exhausted`).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        rv = cli.main(args=args, prog_name="wsprof", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.UsageError as e:
        # One line, like every other error: what is wrong and where the help is.
        where = e.ctx.command_path if e.ctx is not None else "wsprof"
        message = _folded(e.format_message()).rstrip(".")
        _error(f"{message}; see `{where} --help`")
        return EXIT_USAGE
    except click.ClickException as e:
        _error(_folded(e.format_message()))
        return int(e.exit_code)
    except click.Abort:
        sys.stderr.write("wsprof: interrupted\n")
        return 130
    except WsprofError as e:
        _error(str(e))
        return e.exit_code
    except (MemoryError, RecursionError) as e:
        kind: type[BaseException] = type(e)
        # The traceback holds every frame of the command, and with them what filled the
        # memory: dropped here, so that the line below can be written.
        e.__traceback__ = None
        del e
    else:
        return rv if isinstance(rv, int) else 0
    gc.collect()
    _error(_exhausted(kind, args))
    return EXIT_USAGE


def _folded(message: str) -> str:
    """click's message on one line: the line breaks of its layout, with the indentation
    around them, become one space (a lone ``\\r`` or other control is left to be escaped)."""
    return re.sub(r"[ \t]*\n\s*", " ", message)


def _error(message: str) -> None:
    """``wsprof: error: MESSAGE`` on stderr, one line, control characters escaped."""
    sys.stderr.write(f"wsprof: error: {escape_controls(message)}\n")


def _exhausted(kind: type[BaseException], args: list[str]) -> str:
    """What to say when a command ran out of memory (MemoryError) or of stack
    (RecursionError, from data nested deeper than Python's recursion limit): the inputs named
    on the command line, what happened, what to do."""
    try:
        inputs = _input_paths(args)
    except (MemoryError, RecursionError):  # still short of either: the line without names
        inputs = []
    what = ", ".join(inputs) if inputs else "the input"
    if issubclass(kind, RecursionError):
        return (
            f"{what}: nested deeper than Python's recursion limit; give a trace wsprof wrote, "
            "or a CSV or log as its tool exported it (a file of that kind that fails here is "
            "a wsprof bug: report it with the file)"
        )
    return (
        f"{what}: ran out of memory; give a smaller input (fewer steps, rows or columns: "
        "--before-steps/--after-steps for diff), or run it where more memory is free"
    )


def _input_paths(args: list[str]) -> list[str]:
    """The path arguments (``click.Path``) of the command ``args`` name, parsed again without
    running it; empty when they cannot be told."""
    try:
        ctx = cli.make_context("wsprof", list(args), resilient_parsing=True)
        words = [*ctx.protected_args, *ctx.args]
        if not words:
            return []
        name, cmd, rest = cli.resolve_command(ctx, words)
        if cmd is None or name is None:
            return []
        sub = cmd.make_context(name, rest, parent=ctx, resilient_parsing=True)
    except (click.ClickException, click.exceptions.Exit):
        return []
    paths = [
        sub.params.get(p.name)
        for p in cmd.params
        if isinstance(p, click.Argument) and isinstance(p.type, click.Path) and p.name
    ]
    return [p for p in paths if isinstance(p, str)]
