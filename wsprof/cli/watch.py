"""``wsprof watch RUN_DIR``: follow a run folder while it is written; serve OpenMetrics.

Its own process (analysis never runs inside the training processes): one per run folder, or
one per node on a shared folder. Every ``--every`` seconds it reads what the traces gained
(:mod:`wsprof.trace.follow`), makes rows of the steps completed since
(:mod:`wsprof.analysis.live`), prints a line per step and a block per verdict change,
updates what ``/metrics`` serves (:mod:`wsprof.report.openmetrics`), and with ``--tensorboard``
appends the new steps' scalars and the changed verdict to TensorBoard event files
(:mod:`wsprof.report.tensorboard_out`).
"""

from __future__ import annotations

import errno
import math
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

import click

from wsprof.analysis.model import SEVERITIES
from wsprof.analysis.snapshot import WatchSnapshot
from wsprof.cli.options import LINK_GBPS, fails
from wsprof.contracts.safe_text import escape_controls
from wsprof.errors import EXIT_FINDINGS, EXIT_OK, InputError

if TYPE_CHECKING:
    from wsprof.report.tensorboard_out import TensorBoardOut

#: Default seconds between refreshes: a step of an RL run lasts minutes, and a Prometheus
#: server scrapes every 15 s by default.
DEFAULT_EVERY_S = 5.0
#: Default address ``--serve PORT`` binds: this host only; another only when given.
DEFAULT_HOST = "127.0.0.1"
#: Default seconds the final page stays served after the run ended: two scrapes at
#: Prometheus' default 15 s interval.
DEFAULT_LINGER_S = 30.0


def parse_serve(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``PORT`` (on :data:`DEFAULT_HOST`).

    Raises:
        InputError: not of that form, or a port outside 0..65535.
    """
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = DEFAULT_HOST, value
    host = host.strip("[]") or DEFAULT_HOST
    try:
        n = int(port)
    except ValueError:
        n = -1
    if not 0 <= n <= 65535:
        raise InputError(
            f"--serve {value!r}: give HOST:PORT or PORT (a port 0-65535), e.g. --serve 9464"
        )
    return host, n


def address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (``[::1]:9464``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(host: str, port: int, collector: Any) -> tuple[str, int]:
    """Serve ``collector`` at ``http://host:port/metrics`` from a daemon thread (the official
    client's app: it answers an OpenMetrics scraper in OpenMetrics, others in the Prometheus
    text format; its server bounded against idle clients, :mod:`wsprof.cli.metrics_server`).
    Returns the address bound (port 0 picks a free one).

    Raises:
        InputError: the address cannot be bound (in use, not this host's).
    """
    from wsprof.cli.metrics_server import start_metrics_server

    try:
        server = start_metrics_server(host, port, collector)
    except OSError as e:
        if isinstance(e, socket.gaierror) or e.errno == errno.EADDRNOTAVAIL:
            hint = "give an address of this host (127.0.0.1, 0.0.0.0, ::1, or one of its own)"
        elif e.errno == errno.EACCES:
            hint = "a port below 1024 needs privileges: choose a port above it"
        else:
            hint = "choose another port (or stop what holds it)"
        raise InputError(
            f"--serve {address(host, port)}: cannot listen there ({e.strerror or e}); {hint}"
        ) from e
    bound = server.server_address
    return str(bound[0]), int(bound[1])


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse NaN and infinity (``click.FloatRange`` lets both through)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number of seconds")
    return value


def _echo(line: str, err: bool = False) -> None:
    """Print one line, control characters escaped: hosts, paths, phase and finding names in
    it come from the traces."""
    click.echo(escape_controls(line), err=err)


def _fail_level(snapshot: WatchSnapshot, fail_on: str | None) -> bool:
    return fail_on is not None and fails(snapshot.analysis, fail_on)


@click.command()
@click.argument("run_dir", type=click.Path())
@click.option(
    "--serve",
    "serve_at",
    default=None,
    metavar="HOST:PORT",
    help=f"serve OpenMetrics at http://HOST:PORT/metrics (PORT alone: on {DEFAULT_HOST})",
)
@click.option(
    "--every",
    type=click.FloatRange(min=0.05, max=86_400),
    callback=_finite,
    default=DEFAULT_EVERY_S,
    show_default=True,
    help="seconds between refreshes",
)
@click.option(
    "--fail-on",
    type=click.Choice([s.value for s in SEVERITIES]),
    default=None,
    help="exit 1 the moment a finding at or above this severity appears (for job schedulers)",
)
@click.option(
    "--host",
    default=None,
    help="follow only the traces written on this host (one watch per node on a shared run "
    "folder; trace names start with the host name)",
)
@click.option(
    "--sync-budget",
    type=click.FloatRange(min=0, min_open=True),
    callback=_finite,
    default=None,
    metavar="S",
    help="project the step at which weight sync reaches S seconds "
    "(wsprof_weight_sync_projected_step; default 3600)",
)
@click.option(
    "--once",
    is_flag=True,
    help="one refresh: print where the run stands and exit (for cron)",
)
@click.option(
    "--forever",
    is_flag=True,
    help="keep watching (and serving) after every trace has ended",
)
@click.option(
    "--linger",
    type=click.FloatRange(min=0, max=86_400),
    callback=_finite,
    default=DEFAULT_LINGER_S,
    show_default=True,
    help="with --serve: seconds the final page stays served after every trace has ended "
    "(so that the last scrape sees the end)",
)
@click.option(
    "--tensorboard",
    "tensorboard_dir",
    default=None,
    metavar="DIR",
    type=click.Path(),
    help="also write each completed step's scalars (wsprof/...) per rank and the verdict, when "
    "it changes, as TensorBoard event files in DIR (as `wsprof export --format tensorboard`; "
    "needs wsprof[tensorboard])",
)
@LINK_GBPS
def watch(
    run_dir: str,
    serve_at: str | None,
    every: float,
    fail_on: str | None,
    host: str | None,
    sync_budget: float | None,
    once: bool,
    forever: bool,
    linger: float,
    tensorboard_dir: str | None,
    link_gbps: float | None,
) -> int:
    """Follow RUN_DIR (a run folder being written by `wsprof run` or wsprof.patch()): a line
    per completed step, a block per verdict change, OpenMetrics with --serve. Ends when every
    trace has ended (a clean exit or a process gone), unless --forever; Ctrl-C stops it.
    With --tensorboard DIR, each completed step's scalars and each verdict change are written
    to TensorBoard event files in DIR, one run per rank, flushed at every refresh."""
    if os.path.isfile(run_dir) and not _is_timeline_only(run_dir):
        raise InputError(
            f"{run_dir}: a file; give the run folder the job writes (`wsprof run --out`, "
            "$WSPROF_OUT) or slime's communication timeline"
        )
    if _is_timeline_only(run_dir):
        if serve_at is not None or tensorboard_dir is not None:
            raise InputError(
                f"{run_dir}: a framework's timeline is followed as lines; --serve and "
                "--tensorboard follow a run folder's .wsprof traces"
            )
        return _watch_timeline(run_dir, every, fail_on, once, forever)
    tb = None
    if tensorboard_dir is not None:  # the extra and the folder checked before anything else
        from wsprof.report.tensorboard_out import TensorBoardOut

        tb = TensorBoardOut(tensorboard_dir, "--tensorboard")
    try:
        return _watch(
            run_dir, serve_at, every, fail_on, host, sync_budget, once, forever, linger, tb,
            link_gbps,
        )  # fmt: skip
    finally:
        if tb is not None:
            tb.close()


def _watch(
    run_dir: str,
    serve_at: str | None,
    every: float,
    fail_on: str | None,
    host: str | None,
    sync_budget: float | None,
    once: bool,
    forever: bool,
    linger: float,
    tb: TensorBoardOut | None,
    link_gbps: float | None,
) -> int:
    """The watch loop (:func:`watch`); ``tb``: the TensorBoard output, or None."""
    from wsprof.analysis.live import LiveRun
    from wsprof.report.openmetrics import SnapshotCollector
    from wsprof.report.watch import (
        change_lines,
        status_line,
        step_lines,
        verdict_key,
        verdict_word,
    )

    collector = SnapshotCollector()
    if serve_at is not None:
        bound = serve(*parse_serve(serve_at), collector)
        _echo(f"wsprof watch: serving http://{address(*bound)}/metrics", err=True)
    run = LiveRun(
        os.path.abspath(run_dir), host=host, sync_budget_s=sync_budget, link_gbps=link_gbps
    )
    stop = threading.Event()
    try:
        if not run.follower.exists():
            if once:
                raise InputError(
                    f"{run_dir}: no such folder; give the run folder (`wsprof run --out`, "
                    "$WSPROF_OUT) that the job writes"
                )
            _echo(f"wsprof watch: waiting for {run_dir} to appear (Ctrl-C stops)", err=True)
            while not run.follower.exists():
                stop.wait(every)
        said: str | None = None
        key: tuple[Any, ...] | None = None
        printed = -1  # the last step number printed
        problems: set[str] = set()
        while True:
            snap = run.refresh()
            collector.update(snap)
            if tb is not None:
                tb.add(snap.analysis)
                tb.flush()
            for p in run.follower.problems():
                if p not in problems:
                    problems.add(p)
                    _echo(f"wsprof watch: {p}", err=True)
            if once:
                if not snap.ranks and not run.follower.problems():
                    raise InputError(
                        f"{run_dir}: folder holds no .wsprof trace yet; point at the run folder "
                        "the job writes (`wsprof run --out`, $WSPROF_OUT)"
                    )
                _echo(status_line(snap))
                for line in change_lines(None, snap)[1:]:
                    _echo(line)
                return _exit(snap, fail_on)
            for line in step_lines(snap, printed):
                _echo(line)
            lead = snap.ranks[0].label if snap.ranks else None
            printed = max([printed, *(r.step for who, r in snap.new_steps if who == lead)])
            now = verdict_key(snap.analysis)
            if snap.ranks and any(r.steps for r in snap.ranks) and now != key:
                for line in change_lines(said, snap):
                    _echo(line)
                key = now
                said = verdict_word(snap.analysis)
            if _fail_level(snap, fail_on):
                return _exit(snap, fail_on)
            if snap.ended and not forever:
                _echo(
                    f"wsprof watch: every trace has ended ({len(snap.ranks)}); "
                    f"`wsprof analyze {run_dir}` for the whole run",
                    err=True,
                )
                if serve_at is not None and linger > 0:
                    stop.wait(linger)  # the last scrapes see the end
                return EXIT_OK
            sys.stdout.flush()
            stop.wait(every)
    finally:
        run.close()


def _is_timeline_only(path: str) -> bool:
    """Whether ``path`` holds slime's communication timeline and no ``.wsprof`` trace."""
    from wsprof.importers.slime_timeline import is_timeline
    from wsprof.trace.reader import find_traces

    if not os.path.exists(path) or not is_timeline(path):
        return False
    try:
        return not (os.path.isdir(path) and find_traces(path))
    except InputError:
        return True


def _writers_gone(pids: set[tuple[str | None, int | None]]) -> bool:
    """Whether every process that wrote the timeline has exited: those on this host are
    asked; one on another host (or without a pid) is never known to be gone."""
    import psutil

    here = socket.gethostname()
    for host, pid in pids:
        if pid is None or (host is not None and host != here):
            return False
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False  # alive (an exited one its parent has not reaped yet is gone)
        except psutil.NoSuchProcess:
            continue
        except psutil.Error:
            return False  # not ours to ask: alive as far as we know
    return bool(pids)


def _watch_timeline(path: str, every: float, fail_on: str | None, once: bool, forever: bool) -> int:
    """Follow slime's communication timeline as it is written: a line per completed weight
    sync, a block per verdict change; ends when every writer on this host has exited (unless
    ``forever``)."""
    from wsprof.analysis.run import analyze_series
    from wsprof.importers.slime_timeline import TimelineFollower, imported_of, pick_run
    from wsprof.report.watch import (
        timeline_change_lines,
        timeline_sync_line,
        verdict_key,
        verdict_word,
    )

    follower = TimelineFollower(path)
    stop = threading.Event()
    printed: set[tuple[str, int]] = set()
    elsewhere_said = False
    said: str | None = None
    key: tuple[Any, ...] | None = None
    while True:
        read = follower.poll()
        for p in follower.restarted:
            _echo(f"wsprof watch: {p} was truncated or replaced: read again from its start")
        if follower.restarted:
            printed.clear()
            key, said = None, None
        analysis = None
        if read.runs:
            run, _ = pick_run(read)
            proc = run.primary()
            syncs = proc.syncs() if proc is not None else []
            if syncs:
                imported = imported_of(read)
                analysis = analyze_series(imported.series, path)
                verdict = verdict_word(analysis)
                for sync in syncs:
                    if (run.run_id, sync.weight_version) not in printed:
                        printed.add((run.run_id, sync.weight_version))
                        if not once:
                            _echo(timeline_sync_line(sync, verdict))
                now = verdict_key(analysis)
                if now != key and not once:
                    for line in timeline_change_lines(said, analysis, len(syncs)):
                        _echo(line)
                    key, said = now, verdict
            if once:
                if analysis is None:
                    raise InputError(
                        f"{path}: no weight sync has ended in the timeline yet; watch it "
                        "without --once to wait for the first"
                    )
                _echo(
                    f"{path}: {len(syncs)} weight syncs; "
                    + (f"{analysis.headline.summary()}; " if analysis.headline else "")
                    + f"verdict: {verdict_word(analysis)}"
                )
            if analysis is not None and fails(analysis, fail_on):
                _echo(f"wsprof: exit 1: a finding at or above {fail_on}", err=True)
                return EXIT_FINDINGS
            if once:
                return EXIT_OK
            writers = {(p.hostname, p.pid) for p in run.processes.values()}
            here = socket.gethostname()
            if (
                not forever
                and not elsewhere_said
                and any(pid is None or (host is not None and host != here) for host, pid in writers)
            ):
                elsewhere_said = True
                _echo(
                    "wsprof watch: the timeline was written on another host (or without "
                    "pids): its end cannot be seen from here; Ctrl-C stops, --once says "
                    "where it stands",
                    err=True,
                )
            if not forever and _writers_gone(writers):
                _echo(
                    f"wsprof watch: every process that wrote the timeline has exited; "
                    f"`wsprof analyze {path}` for the whole run",
                    err=True,
                )
                return EXIT_OK
        elif once:
            raise InputError(f"{path}: the timeline holds no record yet")
        sys.stdout.flush()
        stop.wait(every)


def _exit(snap: WatchSnapshot, fail_on: str | None) -> int:
    if not _fail_level(snap, fail_on):
        return EXIT_OK
    level = SEVERITIES.index(str(fail_on))
    hits = [f for f in snap.analysis.findings if SEVERITIES.index(f.severity) >= level]
    _echo(
        f"wsprof: exit 1: {len(hits)} finding(s) at or above {fail_on}: {hits[0].title}",
        err=True,
    )
    return EXIT_FINDINGS
