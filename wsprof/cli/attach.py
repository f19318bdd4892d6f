"""``wsprof attach PID...``: sample running processes from outside with py-spy, then analyse."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType

import click

from wsprof import frameworks
from wsprof.capture.settings import ENV_PYSPY
from wsprof.errors import EXIT_OK, InputError


@click.command()
@click.argument("pids", nargs=-1, type=int)
@click.option(
    "--match",
    default=None,
    metavar="REGEX",
    help="also attach to every process whose command line matches REGEX "
    "(e.g. every Ray actor of one job)",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    default=None,
    metavar="S",
    help="stop after S seconds (default: until Ctrl-C or SIGTERM); a target that "
    "exits before the end is a normal end: what was sampled is kept and reported",
)
@click.option(
    "--rate",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    metavar="HZ",
    help="samples per second per thread",
)
@click.option(
    "--window",
    type=click.IntRange(1, 3600),
    default=5,
    show_default=True,
    metavar="S",
    help="length of one sampling window, whole seconds",
)
@click.option(
    "--every",
    type=click.FloatRange(min=1),
    default=None,
    metavar="S",
    help="start a window every S seconds (>= --window; default back to back), "
    "e.g. --window 10 --every 60 for long runs",
)
@click.option("--subprocesses", is_flag=True, help="sample the targets' child processes too")
@click.option(
    "--blocking",
    is_flag=True,
    help="pause the target for each sample (exact stacks; can slow a target with "
    "many threads 5-15x at 100 Hz)",
)
@click.option(
    "--native",
    is_flag=True,
    help="native frames too (see a call blocked inside CUDA/NCCL); needs --blocking",
)
@click.option(
    "--phase",
    "phases",
    multiple=True,
    metavar="NAME=REGEX",
    help="classify samples whose stack has a frame matching REGEX as phase NAME "
    f"(before the built-in {'/'.join(f.title for f in frameworks.FRAMEWORKS)} "
    "patterns); repeatable",
)
@click.option(
    "--framework",
    type=click.Choice(frameworks.NAMES),
    default=None,
    help="built-in phase patterns to use (default: detected; `wsprof frameworks` lists them)",
)
@click.option("--live", is_flag=True, help="a terminal view of top frames and phase shares")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="run folder (default: wsprof-out/attach-<time>)",
)
@click.option(
    "--report/--no-report",
    "want_report",
    default=True,
    show_default=True,
    help="write the HTML report at the end, into the run folder",
)
@click.option(
    "--inject",
    is_flag=True,
    help="put wsprof's in-process hooks into the running targets (wsprof.patch() inside "
    "them: per-call times, caller sites, allocator counters), py-spy beside them, and take "
    "them out again at the end (gdb, or sys.remote_exec on Python 3.14+; see the README)",
)
@click.option(
    "--inject-timeout",
    type=click.FloatRange(min=0.1),
    default=20.0,
    show_default=True,
    metavar="S",
    help="with --inject: seconds a target's main thread has to run the injected call "
    "(it cannot while blocked in C); after it, the call is withdrawn and does nothing",
)
@click.option(
    "--sample/--no-sample",
    default=True,
    show_default=True,
    help="with --inject: also sample with py-spy",
)
@click.option(
    "--pyspy",
    "pyspy_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar=ENV_PYSPY,
    help="py-spy binary (default: the one installed with wsprof, else on PATH)",
)
def attach(
    pids: tuple[int, ...],
    match: str | None,
    duration: float | None,
    rate: int,
    window: int,
    every: float | None,
    subprocesses: bool,
    blocking: bool,
    native: bool,
    phases: tuple[str, ...],
    framework: str | None,
    live: bool,
    out: str | None,
    want_report: bool,
    inject: bool,
    inject_timeout: float,
    sample: bool,
    pyspy_path: str | None,
) -> int:
    """Sample running Python processes (PIDS and/or --match) with py-spy: no code change, no
    restart. Ctrl-C or SIGTERM stops sampling and keeps everything sampled so far."""
    from wsprof.capture.attach import ProcessPoller, parse_phase, resolve_targets
    from wsprof.capture.pyspy.binary import find_pyspy
    from wsprof.capture.pyspy.sampler import PySpySampler
    from wsprof.cli.options import make_run_folder, remove_run_folder

    if native and not blocking:
        raise InputError(
            "--native needs --blocking (py-spy pauses the target to unwind native frames)"
        )
    if every is not None and every < window:
        raise InputError(f"--every {every:g} is shorter than --window {window}")
    patterns = dict(parse_phase(p) for p in phases)
    if not inject and not sample:
        raise InputError("--no-sample needs --inject (without it there is nothing to record)")
    if sample:
        find_pyspy(pyspy_path)  # missing or too old: say so before touching any target
    targets = resolve_targets(pids, match, say=lambda line: click.echo(line, err=True))
    out = out or os.path.join("wsprof-out", f"attach-{time.strftime('%Y%m%d-%H%M%S')}")
    created = make_run_folder(out)

    def make_sampler() -> PySpySampler:
        return PySpySampler(
            targets,
            out,
            rate_hz=rate,
            window_s=window,
            every_s=every,
            duration_s=duration,
            blocking=blocking,
            native=native,
            subprocesses=subprocesses,
            pyspy_path=pyspy_path,
        )

    if inject:
        from wsprof.cli.inject import run_injected

        try:
            return run_injected(
                targets,
                os.path.abspath(out),
                explicit=pids,
                ack_timeout_s=inject_timeout,
                duration=duration,
                layers="both",
                make_sampler=make_sampler if sample else None,
                analyse=lambda: _analyse(out, want_report),
            )
        except BaseException:
            remove_run_folder(created, [])  # nothing recorded: no empty run folder left
            raise
    written: list[str] = []
    try:
        sampler = make_sampler()
        meta = {
            "phase_patterns": patterns,
            "framework": framework,
            "rate_hz": rate,
            "blocking": blocking,
        }
        poller = ProcessPoller(targets, out, extra_meta=meta)
        written += poller.paths.values()
    except BaseException:
        remove_run_folder(created, written)
        raise
    mode = "blocking" if blocking else "non-blocking"
    until = f"for {duration:g} s" if duration else "until Ctrl-C"
    click.echo(
        f"wsprof attach: pid {', '.join(map(str, targets))}, {rate} Hz {mode}, windows "
        f"of {window} s{'' if every is None else f' every {every:g} s'}, "
        f"{until}; trace in {out}",
        err=True,
    )
    t0 = time.monotonic()
    interrupted = False
    terminated = threading.Event()
    error: InputError | None = None

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        terminated.set()
        sampler.request_stop()  # py-spy writes its partial window and exits; never orphaned

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    try:
        poller.start()
        sampler.start()
        if live:
            from wsprof.cli.live import run_live

            run_live(sampler, poller, patterns, framework)
        else:
            while sampler.wait(timeout_s=0.5) is None:
                if terminated.is_set() or not poller.alive():
                    sampler.stop()
    except KeyboardInterrupt:
        interrupted = True
    except InputError as e:  # no such pid at start, ptrace denied or py-spy failed mid-run
        error = e
    finally:
        sampler.stop()
        poller.stop()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    written.append(str(sampler.path))
    if error is None and sampler.error is not None:
        error = InputError(str(sampler.error))
    elapsed = time.monotonic() - t0
    why = (
        "terminated"
        if terminated.is_set()
        else "interrupted"
        if interrupted
        else sampler.stop_reason
    )
    click.echo(
        f"wsprof attach: {sampler.samples} samples in {sampler.windows} windows over "
        f"{elapsed:.1f} s ({why})",
        err=True,
    )
    stopped = interrupted or terminated.is_set()
    exited = sorted(set(sampler.exited) | set(poller.exited))
    if error is None and exited and not stopped and not sampler.samples:
        error = InputError(
            f"pid {', '.join(map(str, exited))} exited after {elapsed:.1f} s, before any sample "
            "was taken; attach to a process that runs longer"
        )
    if error is not None and not sampler.samples:
        remove_run_folder(created, written)  # nothing sampled: no empty run folder left
        raise error
    if exited and not stopped:  # every job ends: a normal end, what was sampled is kept
        click.echo(
            f"wsprof attach: pid {', '.join(map(str, exited))} exited after "
            f"{elapsed:.1f} s; kept {sampler.samples} samples in {out}",
            err=True,
        )
    if sampler.samples:  # nothing sampled: no verdict that could read as "no problem"
        _analyse(out, want_report)
    if error is not None:
        raise error
    return EXIT_OK


def _analyse(out: str, want_report: bool) -> None:
    from wsprof.analysis.run import analyze
    from wsprof.inputs import load
    from wsprof.report.text import render_text

    analysis = analyze(load(out))
    click.echo(render_text(analysis, colour=sys.stdout.isatty()), nl=False)
    if want_report:
        from wsprof.cli.options import report_path_in
        from wsprof.report.html import write_html

        path = write_html(analysis, report_path_in(out))
        click.echo(f"report: {os.path.abspath(path)}")
    click.echo(f"trace:  {os.path.abspath(out)}  (wsprof analyze {out})")
