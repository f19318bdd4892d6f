"""``wsprof run [--out DIR] [--preset NAME] -- CMD ...``: run CMD with every Python process it
starts patched (the bootstrap in ``hooks/`` on ``PYTHONPATH``); CMD's exit code is returned."""

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
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    default=None,
    help="mark this framework's weight-sync and rollout entry points as phases "
    "(default: whichever framework the processes import)",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run(out: str | None, preset: str | None, cmd: tuple[str, ...]) -> int:
    """Run CMD (after `--`) with wsprof patched into every Python process it starts."""
    from wsprof.capture import settings as cfg
    from wsprof.capture.recorder import default_out_dir

    folder = os.path.abspath(out or default_out_dir(cfg.read()))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"{folder}: cannot create the run folder ({e.strerror}); choose a "
            "writable one with --out"
        ) from e
    hooks = hooks_dir()
    if not os.path.isfile(os.path.join(hooks, "sitecustomize.py")):
        raise InputError(
            f"{hooks}: the bootstrap is missing from this wsprof install; reinstall wsprof"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (hooks, env.get("PYTHONPATH", "")) if p)
    env.update(settings.child_env(folder, preset))
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
    sys.stderr.write(f"wsprof: run folder {folder} (wsprof analyze {folder})\n")
    return rc if rc >= 0 else 128 - rc
