"""``wsprof run [--out DIR] [--allow-shared-out] [--preset NAME] -- CMD ...``: run CMD with every
Python process it starts patched (the bootstrap in ``hooks/`` on ``PYTHONPATH``); CMD's exit code
is returned. The run folder is created user-only (0700); one another user owns or can write in
is refused (exit 2) unless ``--allow-shared-out`` (or ``WSPROF_ALLOW_SHARED_OUT=1``). The folder
is resolved once (no links) before CMD starts: its processes and the closing analysis use that
path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from importlib import resources

import click

from wsprof.capture import settings
from wsprof.capture.presets import PRESETS
from wsprof.errors import InputError


def hooks_dir() -> str:
    """The folder holding the bootstrap ``sitecustomize.py`` (inside the installed package, so
    that a wheel install works as an editable one)."""
    return str(resources.files("wsprof").joinpath("_hooks"))


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="run folder (default: $WSPROF_OUT, else ./wsprof-out/<time>)",
)
@click.option(
    "--allow-shared-out",
    is_flag=True,
    default=False,
    help="use a run folder another user owns or can write in (group/other-writable); files "
    "are still created exclusively, never through a link (also $WSPROF_ALLOW_SHARED_OUT=1)",
)
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default=None,
    help="mark this framework's weight-sync and rollout entry points as phases "
    "(default: whichever framework the processes import)",
)
@click.option(
    "--report/--no-report",
    "want_report",
    default=True,
    show_default=True,
    help="when CMD ends, analyse the run folder: print the verdict and diagnoses (on stderr) "
    "and write the HTML report into the folder",
)
@click.option(
    "--framework-timeline/--no-framework-timeline",
    "framework_timeline",
    default=True,
    show_default=True,
    help="ask the framework to write its own weight-sync timeline into the run folder "
    "(slime: SLIME_COMMUNICATION_TIMELINE, unless already set); the analysis joins it with "
    "the recorded collectives",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    out: str | None,
    allow_shared_out: bool,
    preset: str | None,
    want_report: bool,
    framework_timeline: bool,
    cmd: tuple[str, ...],
) -> int:
    """Run CMD (after `--`) with wsprof patched into every Python process it starts; CMD's
    exit code is returned whatever the analysis finds."""
    from wsprof.capture import settings as cfg
    from wsprof.capture.recorder import default_out_dir
    from wsprof.cli.options import make_run_folder

    s = cfg.read()
    folder = os.path.abspath(out or default_out_dir(s))
    allow = allow_shared_out or s.allow_shared_out
    option = "--out" if out else f"--out (or ${cfg.ENV_OUT})"
    make_run_folder(folder, option, allow)
    # Resolved once, then checked again: the children write to, and the closing analysis
    # reads, this folder even if a link on the way to it is repointed during the run.
    folder = os.path.realpath(folder)
    make_run_folder(folder, option, allow)
    hooks = hooks_dir()
    if not os.path.isfile(os.path.join(hooks, "sitecustomize.py")):
        raise InputError(
            f"{hooks}: the bootstrap is missing from this wsprof install; reinstall wsprof"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hooks, env.get("PYTHONPATH", "")) if p)
    env.update(settings.child_env(folder, preset, allow_shared_out=allow))
    if framework_timeline:
        env.update(timeline_env(folder, env))
    try:
        proc = subprocess.Popen(list(cmd), env=env)
    except OSError as e:
        raise InputError(
            f"cannot start {cmd[0]!r} ({e.strerror}); check the command after `--`"
        ) from e
    # Ctrl-C reaches the whole foreground group by itself; SIGTERM is passed on.
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:
                continue  # the child got it too; wait for it to finish
    finally:
        signal.signal(signal.SIGTERM, previous)
    traced = want_report and _report(folder)
    hint = f" (wsprof analyze {folder})" if traced or not want_report else ""
    sys.stderr.write(f"wsprof: run folder {folder}{hint}\n")
    return rc if rc >= 0 else 128 - rc


def timeline_env(folder: str, env: dict[str, str]) -> dict[str, str]:
    """The variables that make each framework write its own weight-sync timeline into
    ``folder`` (:attr:`~wsprof.frameworks.model.Framework.timeline_env`), for those the user
    has not set in ``env`` (only that framework reads its variable; it creates the subfolder
    :data:`~wsprof.frameworks.RUN_TIMELINE_DIR` inside the user-only run folder)."""
    from wsprof.frameworks import FRAMEWORKS, RUN_TIMELINE_DIR

    return {
        fw.timeline_env: os.path.join(folder, RUN_TIMELINE_DIR, fw.timeline_template)
        for fw in FRAMEWORKS
        if fw.timeline_env and fw.timeline_env not in env
    }


def _report(folder: str) -> bool:
    """The verdict lines and the report of what the run recorded, on stderr (CMD's stdout
    stays its own); a failure is one line and never changes CMD's exit code. False when the
    folder holds no trace."""
    from wsprof.trace.model import TRACE_SUFFIX

    try:
        names = os.listdir(folder)
    except OSError:
        return False
    if not any(n.endswith(TRACE_SUFFIX) for n in names):
        sys.stderr.write(
            f"wsprof: no trace in {folder}: no Python process of CMD called a collective "
            "or wsprof.step()\n"
        )
        return False
    try:
        from wsprof.analysis.run import analyze
        from wsprof.cli.options import report_path_in
        from wsprof.inputs import load
        from wsprof.report.html import write_html
        from wsprof.report.text import render_summary

        analysis = analyze(load(folder))
        sys.stderr.write(render_summary(analysis, colour=sys.stderr.isatty()))
        path = write_html(analysis, report_path_in(folder))
        sys.stderr.write(f"wsprof: report {os.path.abspath(path)}\n")
    except Exception as e:  # noqa: BLE001 - the job ran; its exit code is what matters
        sys.stderr.write(
            f"wsprof: could not analyse {folder} ({type(e).__name__}: {e}); run "
            f"`wsprof analyze {folder}` to see why\n"
        )
    return True
