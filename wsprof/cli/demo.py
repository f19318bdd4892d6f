"""``wsprof demo``: a real multi-process weight-sync job, profiled, analysed and reported."""

from __future__ import annotations

import os
import time

import click

from wsprof.errors import EXIT_OK


@click.command()
@click.option(
    "--steps", type=click.IntRange(2, 1000), default=8, show_default=True, help="training steps"
)
@click.option(
    "--world-size",
    type=click.IntRange(2, 64),
    default=3,
    show_default=True,
    help="processes: rank 0 trains, the others are inference engines",
)
@click.option(
    "--params",
    type=click.IntRange(9, 10_000),
    default=128,
    show_default=True,
    help="parameter tensors in the model (one broadcast each per sync)",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="run folder (default: wsprof-out/demo-<time>)",
)
@click.option(
    "--fault",
    type=click.Choice(["probe", "calls", "probe+calls", "none"]),
    default="probe",
    show_default=True,
    help="probe: a wrapper probes free memory by walking a growing segment pool "
    "before every collective (the motivating bug); calls: the sync sends more small buffers "
    "every step, one collective each; probe+calls: both (two causes); none: healthy",
)
@click.option(
    "--markers/--no-markers",
    default=True,
    show_default=True,
    help="mark steps and phases; without, steps are found from sync bursts",
)
@click.option(
    "--pyspy/--no-pyspy",
    default=True,
    show_default=True,
    help="sample rank 0 with py-spy from outside",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="HTML report to write (default: reports/wsprof-<host>-<run>-<time>.html)",
)
def demo(
    steps: int,
    world_size: int,
    params: int,
    out: str | None,
    fault: str,
    markers: bool,
    pyspy: bool,
    report_path: str | None,
) -> int:
    """Run a small RL weight-sync loop (gloo, CPU), profile it and write the report."""
    from wsprof.analysis.run import analyze
    from wsprof.cli.options import default_report_path, make_run_folder
    from wsprof.demo.run import run_job
    from wsprof.demo.workload import DemoConfig
    from wsprof.inputs import load
    from wsprof.report.files import write_text
    from wsprof.report.renderers import ANALYZE_RENDERERS, REPORT_RENDERERS

    out = out or os.path.join("wsprof-out", f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    make_run_folder(out)  # before any rank starts: each would only warn and run unprofiled
    cfg = DemoConfig(
        steps=steps, world_size=world_size, params=params, out=out, fault=fault, markers=markers
    )
    click.echo(f"wsprof demo: {world_size} ranks, {steps} steps, fault={fault}, trace in {out}")
    t0 = time.monotonic()
    notes = run_job(cfg, sample=pyspy, say=click.echo)
    click.echo(f"wsprof demo: job finished in {time.monotonic() - t0:.1f} s; analysing")
    analysis = analyze(load(out))
    if notes:
        from dataclasses import replace

        analysis = replace(analysis, notes=tuple(notes) + analysis.notes)
    path = write_text(
        report_path or default_report_path(out),
        REPORT_RENDERERS["html"].render(analysis),
        "the report",
    )
    click.echo(ANALYZE_RENDERERS["text"].render(analysis), nl=False)
    click.echo(f"report: {os.path.abspath(path)}")
    click.echo(f"trace:  {os.path.abspath(out)}  (wsprof analyze {out})")
    return EXIT_OK
