"""Options and helpers shared by commands."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import click

from wsprof.analysis.model import SEVERITIES, Analysis
from wsprof.errors import InputError
from wsprof.trace.model import TRACE_SUFFIX
from wsprof.trace.outputs import SQLITE_SIDE_FILES, make_private_dir

if TYPE_CHECKING:
    from wsprof.inputs import Loaded

#: ``--link-gbps`` of analyze, report and watch: the link limit a weight sync is held against.
LINK_GBPS = click.option(
    "--link-gbps",
    type=click.FloatRange(min=0, min_open=True, max=1e6),
    default=None,
    metavar="GB/S",
    help="the link's limit per direction in GB/s (1e9 bytes/s), held against each weight "
    "sync's bandwidth instead of the link wsprof detected (gloo over TCP has none)",
)


TIMELINE = click.option(
    "--timeline",
    type=click.Path(exists=True),
    default=None,
    metavar="PATH",
    help="slime's communication timeline (a JSONL file or a folder of them) to join with the "
    "run's traces: the framework's steps, syncs and buckets (default: the one in the run "
    "folder, which `wsprof run` asks slime to write)",
)


TIMELINE_RUN = click.option(
    "--timeline-run",
    default=None,
    metavar="ID",
    help="of a slime timeline holding several runs (one file appended by a re-run), the "
    "run_id to read (default: the newest; the others are named in the notes)",
)


#: ``--workers`` of analyze and report: processes that digest the traces on this machine.
WORKERS = click.option(
    "--workers",
    type=click.IntRange(min=1, max=1024),
    default=None,
    metavar="N",
    help="processes that read and digest the traces (default: this machine's cores for a run "
    "of 64 MiB of traces or more, else 1); the result is the same for any N",
)

#: ``--ray`` of analyze and report: digest the traces where they are, on the Ray cluster.
RAY = click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="auto",
    default=None,
    metavar="[ADDRESS]",
    help="digest each node's traces on that node, one Ray task per node (PATH: the run folder "
    "as each node sees it; ADDRESS: the cluster's, default auto); only digests travel. Needs "
    "pip install 'wsprof[ray]'",
)


def analyze_joined(
    path: str,
    timeline: str | None,
    timeline_run: str | None,
    link_gbps: float | None,
    workers: int | None,
    ray_address: str | None,
) -> Analysis:
    """The analysis of ``path`` for analyze and report: read here (``--workers``) or digested
    on the nodes of a Ray cluster (``--ray``).

    Raises:
        InputError: as :func:`load_joined`; ``--ray`` without Ray, with ``--timeline``, or a
            cluster where no trace could be read.
    """
    from wsprof.analysis.run import analyze, analyze_digests

    if ray_address is None:
        return analyze(load_joined(path, timeline, timeline_run), link_gbps, workers)
    if timeline is not None or timeline_run is not None:
        raise InputError(
            "--timeline joins on one machine: leave out --ray, or analyse the traces without "
            "the timeline"
        )
    from wsprof.analysis.on_ray import digest_on_ray
    from wsprof.analysis.pool import default_workers

    digests, problems = digest_on_ray(path, ray_address, workers)
    return analyze_digests(digests, path, problems, link_gbps, workers or default_workers())


def load_joined(path: str, timeline: str | None, timeline_run: str | None = None) -> Loaded:
    """``load(path)``, with ``timeline`` (``--timeline``) to join when given, and the run
    ``timeline_run`` (``--timeline-run``) of the timeline.

    Raises:
        InputError: ``path`` is not a run of traces (a timeline joins recorded calls only), or
            it cannot be read.
    """
    from wsprof.inputs import LoadedRun, LoadedSeries, load

    loaded = load(path, timeline_run)
    if timeline_run is not None and timeline is None:
        is_timeline = (isinstance(loaded, LoadedRun) and loaded.timeline is not None) or (
            isinstance(loaded, LoadedSeries) and loaded.imported.format == "slime-timeline"
        )
        if not is_timeline:
            raise InputError(
                f"{path}: --timeline-run picks a run of slime's communication timeline, and "
                "this holds none; leave it out, or add --timeline PATH"
            )
    if timeline is None:
        return loaded
    if not isinstance(loaded, LoadedRun) or loaded.read is not None:
        raise InputError(
            f"{path}: --timeline joins a timeline with a run's .wsprof traces, and this is "
            "not one; give the timeline alone as PATH to read it by itself"
        )
    return replace(loaded, timeline=timeline)


def default_report_path(source: str) -> str:
    """``reports/wsprof-<host>-<run name>-<time>.html`` under the current folder."""
    return os.path.join("reports", _report_name(source))


def report_path_in(folder: str) -> str:
    """``<folder>/wsprof-<host>-<folder name>-<time>.html``: the report of a run that wsprof
    wrote itself (``wsprof attach``), kept with the traces it reads."""
    return os.path.join(folder, _report_name(folder))


def source_name(path: str) -> str:
    """The name of a run folder or trace for a default file name (``run1``, ``rank0``)."""
    return os.path.basename(os.path.normpath(path)).removesuffix(TRACE_SUFFIX) or "run"


def _report_name(source: str) -> str:
    name = source_name(source)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"wsprof-{socket.gethostname()}-{name}-{stamp}.html"


def make_run_folder(
    path: str, option: str = "--out", allow_shared: bool | None = None
) -> list[str]:
    """Create the run folder ``path`` (and its missing parents) user-only (0700), refuse it
    when another user owns it or can write in it, and check that a file can be written in it,
    before any process is started or attached to (:func:`wsprof.trace.outputs.make_private_dir`).

    Args:
        path: the run folder.
        option: the option that names it, for the error.
        allow_shared: accept a shared folder (``--allow-shared-out``); None:
            ``WSPROF_ALLOW_SHARED_OUT`` (:mod:`wsprof.capture.settings`).

    Returns:
        The folders created, deepest first (for :func:`remove_run_folder`); empty when ``path``
        existed.

    Raises:
        InputError: it is shared (and that was not allowed), or it cannot be created or
            written (one line: which, why, what to do).
    """
    missing: list[str] = []
    try:
        if allow_shared is None:
            from wsprof.capture.settings import read

            allow_shared = read().allow_shared_out
        missing = make_private_dir(path, allow_shared, option)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".wsprof-probe-"):
            pass
    except OSError as e:
        remove_run_folder(missing)
        raise InputError(
            f"{path}: cannot write the run folder ({e.strerror or e}); choose a "
            f"writable folder with {option}"
        ) from e
    return missing


def remove_run_folder(created: Sequence[str], files: Sequence[str] = ()) -> None:
    """Remove ``files``, then each folder of ``created`` (deepest first) that is empty: what a
    run that failed before sampling anything leaves. Never raises.

    Args:
        created: folders from :func:`make_run_folder`.
        files: files the run wrote in them.
    """
    for f in files:
        with contextlib.suppress(OSError):
            os.remove(f)
        for extra in SQLITE_SIDE_FILES:  # if any were left
            with contextlib.suppress(OSError):
                os.remove(f + extra)
    for d in created:
        try:
            os.rmdir(d)
        except OSError:
            return


#: ``--fail-on`` values: a finding severity, or ``inconclusive`` (fails on a warning or worse
#: and on a verdict the data cannot support).
FAIL_ON = ("warning", "critical", "inconclusive")


def fails(analysis: Analysis, fail_on: str | None) -> bool:
    """True when a finding is at or above ``fail_on`` severity; for ``inconclusive``, also when
    the verdict is inconclusive (:class:`~wsprof.analysis.model.Verdict`)."""
    if not fail_on:
        return False
    if fail_on == "inconclusive":
        return analysis.verdict.status == "inconclusive" or fails(analysis, "warning")
    level = SEVERITIES.index(fail_on)
    return any(SEVERITIES.index(f.severity) >= level for f in analysis.findings)
