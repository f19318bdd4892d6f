"""Command line (click); one module per command. ``main`` returns the exit code.

Exit codes (DESIGN.md): 0 ok, 1 findings at or above ``--fail-on``, 2 usage or input error.
"""

from __future__ import annotations

import sys

import click

from wsprof._version import __version__
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
    """Run the CLI; errors become one line on stderr and an exit code, never a traceback."""
    try:
        rv = cli.main(args=argv, prog_name="wsprof", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.UsageError as e:
        # One line, like every other error: what is wrong and where the help is.
        where = e.ctx.command_path if e.ctx is not None else "wsprof"
        message = e.format_message().rstrip(".")
        sys.stderr.write(f"wsprof: error: {message}; see `{where} --help`\n")
        return EXIT_USAGE
    except click.ClickException as e:
        e.show()
        return int(e.exit_code)
    except click.Abort:
        sys.stderr.write("wsprof: interrupted\n")
        return 130
    except WsprofError as e:
        sys.stderr.write(f"wsprof: error: {e}\n")
        return e.exit_code
    return rv if isinstance(rv, int) else 0
