"""Digest a run's traces on this machine: in this process, or in a pool of worker processes.

Each trace is read and digested (:func:`~wsprof.analysis.digest.digest_trace`) by one worker;
only its digest comes back. The result is in the order of the paths given, whatever the number
of workers, so the run-level analysis of the digests, and its JSON, are the same byte for byte
with 1 worker or N.

Memory: a worker holds one trace (with its calls) at a time; this process holds the digests.
The run-level judging of each rank's own series is spread the same way (:func:`map_ordered`).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from wsprof.analysis.digest import Digest, digest_trace
from wsprof.errors import InputError
from wsprof.importers.slime_timeline import TimelineRun
from wsprof.trace.model import ProcessTrace
from wsprof.trace.reader import read_trace

A = TypeVar("A")
R = TypeVar("R")

#: A reader of one trace file (a wsprof trace, a Flight Recorder dump).
Reader = Callable[[str], ProcessTrace]

#: Below this many bytes of trace files in all, ``workers=None`` (auto) reads in this process:
#: starting a pool (about a second on a 2-core machine: a fork server importing numpy and
#: scipy, then its workers) costs more than it saves on a demo-sized run.
AUTO_POOL_MIN_BYTES = 64 * 2**20


def default_workers() -> int:
    """The cores this process may run on (``sched_getaffinity``, else ``cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def workers_for(paths: Sequence[str], workers: int | None) -> int:
    """How many workers digest ``paths``: ``workers`` as asked (at most one per trace); with
    None (auto), this machine's cores when the traces hold at least
    :data:`AUTO_POOL_MIN_BYTES`, else 1."""
    if workers is None:
        try:
            size = sum(os.path.getsize(p) for p in paths)
        except OSError:
            size = 0
        workers = default_workers() if size >= AUTO_POOL_MIN_BYTES else 1
    return max(1, min(workers, len(paths)))


def digest_files(
    paths: Sequence[str],
    read: Reader | None = None,
    workers: int | None = 1,
    timeline: TimelineRun | None = None,
) -> Iterator[Digest | InputError]:
    """Per path, in order: its digest (``index``: its place in ``paths``), or the
    :class:`~wsprof.errors.InputError` that reading it raised.

    Args:
        paths: trace files.
        read: reads one (default :func:`~wsprof.trace.reader.read_trace`).
        workers: worker processes (:func:`workers_for`; 1: this process, one trace at a time).
        timeline: a framework timeline to join each trace with.
    """
    read = read or read_trace
    n = workers_for(paths, workers)
    if n <= 1:
        for i, p in enumerate(paths):
            yield _digest_one(read, timeline, i, p)
        return
    with ProcessPoolExecutor(
        max_workers=n,
        mp_context=_context(),
        initializer=_init_worker,
        initargs=(read, timeline),
    ) as pool:
        yield from pool.map(_digest_in_worker, range(len(paths)), paths, chunksize=1)


def map_ordered(fn: Callable[[A], R], items: Sequence[A], workers: int) -> list[R]:
    """``[fn(x) for x in items]``, in a pool of ``workers`` processes when more than 1 (``fn``:
    a module-level function, its items and results picklable); in order either way."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    chunk = max(1, len(items) // (4 * workers))
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        return list(pool.map(fn, items, chunksize=chunk))


def _context() -> multiprocessing.context.BaseContext:
    """A fork server where there is one (no threads of this process are copied; the analysis
    modules are imported once, in the server), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["wsprof.analysis.pool"])
        return ctx
    return multiprocessing.get_context("spawn")  # pragma: no cover - not Linux


def _digest_one(read: Reader, timeline: TimelineRun | None, i: int, p: str) -> Digest | InputError:
    try:
        return digest_trace(read(p), i, timeline)
    except InputError as e:
        return e


_WORKER: tuple[Reader, TimelineRun | None] | None = None


def _init_worker(read: Reader, timeline: TimelineRun | None) -> None:
    global _WORKER
    _WORKER = (read, timeline)


def _digest_in_worker(i: int, p: str) -> Digest | InputError:
    assert _WORKER is not None
    return _digest_one(_WORKER[0], _WORKER[1], i, p)
