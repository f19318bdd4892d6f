"""``wsprof export PATH --format perfetto|speedscope|csv -o FILE``: data for other tools."""

from __future__ import annotations

import json
import os

import click

from wsprof.errors import EXIT_OK, InputError

FORMATS = ("perfetto", "speedscope", "csv")


@click.command()
@click.argument("path", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="perfetto: Chrome trace JSON for ui.perfetto.dev (calls, steps, phases, "
                   "counters); speedscope: py-spy samples for speedscope.app; csv: the per-step "
                   "table (step, phase times, sync time, calls, counters)")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="file to write")
def export(path: str, fmt: str, output: str) -> int:
    """Export PATH (a run folder or .wsprof trace; csv also takes a CSV series) for another
    tool."""
    from wsprof.report import export as ex

    try:
        if fmt == "csv":
            from wsprof.analysis.run import analyze_path

            try:
                text = ex.step_csv(analyze_path(path))
            except ValueError as e:
                raise InputError(f"{path}: {e}") from e
            with open(output, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            click.echo(f"{output}: per-step table")
            return EXIT_OK
        from wsprof.trace.reader import read_run_lenient

        if path.endswith(".csv"):
            raise InputError(f"{path}: a CSV series has no calls or samples to export as {fmt}; "
                             "give a run folder or a .wsprof trace")
        traces, problems = read_run_lenient(path)
        for p in problems:
            click.echo(f"wsprof: note: {p}", err=True)
        tmp = output + ".part"
        with open(tmp, "w", encoding="utf-8") as fh:
            if fmt == "perfetto":
                from wsprof.analysis.coverage import audit_run

                coverage = audit_run([(t.label, t) for t in traces])
                for line in coverage.lines():
                    click.echo(f"wsprof: coverage {coverage.status}: {line}", err=True)
                n = ex.write_perfetto(traces, fh, coverage)
                what = f"{n:,} trace events (open in https://ui.perfetto.dev)"
            else:
                doc = ex.speedscope(traces, name=os.path.basename(os.path.abspath(path)))
                if not doc["profiles"]:
                    raise InputError(f"{path}: no py-spy samples to export; sample a job with "
                                     "`wsprof attach PID` (or `wsprof demo --pyspy`) first")
                json.dump(doc, fh)
                what = f"{len(doc['profiles'])} sampled profiles (open in https://speedscope.app)"
        os.replace(tmp, output)
    except OSError as e:
        raise InputError(f"{output}: cannot write ({e.strerror or e}); choose a writable path "
                         "with -o") from e
    finally:
        if fmt != "csv" and os.path.exists(output + ".part"):
            os.remove(output + ".part")
    click.echo(f"{output}: {what}")
    return EXIT_OK
