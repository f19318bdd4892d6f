"""The one input layer: what a path holds, read once, as a typed result.

:func:`load` is the only place that tells a run folder or trace from a CSV series or a
training log (by suffix and by the SQLite header); ``analyze``, ``diff``, ``report`` and
``export`` all start from it, and the analysis is a pure function of what it returns:

- :class:`LoadedRun`: a run folder or one ``.wsprof`` trace. Its traces are read lazily, one
  at a time (:meth:`LoadedRun.traces`), so that analysis can release each trace's calls
  before the next is read and a run of many ranks needs the memory of about two traces;
  traces that cannot be read are skipped and described in :attr:`LoadedRun.problems`.
- :class:`LoadedSeries`: a ``.csv``/``.tsv`` per-step series or metric export
  (:func:`wsprof.importers.metrics_csv.load_csv`).
- :class:`LoadedLog`: a training log of slime, verl, OpenRLHF or AReaL
  (:func:`wsprof.importers.logs.load_log`).
- slime's communication timeline (a JSONL file or a folder of them, no ``.wsprof`` trace)
  is a :class:`LoadedSeries` of the framework's own weight syncs
  (:func:`wsprof.importers.slime_timeline.load_timeline`);
- a TensorBoard log directory (event files, no ``.wsprof`` trace) and a W&B run (a
  ``wandb/run-*`` folder or its ``.wandb`` file) are :class:`LoadedSeries` too
  (:func:`wsprof.importers.tensorboard.load_tensorboard`,
  :func:`wsprof.importers.wandb_run.load_wandb_run`): per-step series, as a metric export's.

Every error is a one-line :class:`~wsprof.errors.InputError` that says what cannot be read and
what to give instead; none names a command-line option (the CLI adds those).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from wsprof.errors import InputError
from wsprof.importers.logs import Imported, load_log
from wsprof.importers.metrics_csv import load_csv
from wsprof.importers.slime_timeline import is_timeline, load_timeline
from wsprof.importers.tensorboard import is_tensorboard_dir, load_tensorboard
from wsprof.importers.wandb_run import is_wandb_run, load_wandb_run
from wsprof.trace.flight_dumps import find_dumps, read_dump_trace
from wsprof.trace.model import TRACE_SUFFIX, ProcessTrace
from wsprof.trace.reader import (
    find_traces,
    is_sqlite,
    read_run_lenient,
    read_trace,
    require_trace_file,
)

#: What a trace yields after it is read: the trace itself, or its digest.
T = TypeVar("T")

#: Suffixes read as a per-step series (compared case-insensitively).
SERIES_SUFFIXES = (".csv", ".tsv")


@dataclass
class LoadedRun:
    """A run folder or one trace file, its traces read on demand.

    Attributes:
        path: the path given.
        trace_paths: every trace file of the run, in file order.
        problems: one line per trace that could not be read (``skipped <why>``), filled as
            :meth:`traces` meets them.
        read: reads one of ``trace_paths``: a Flight Recorder dump for a folder of dumps
            (:func:`wsprof.trace.flight_dumps.read_dump_trace`); None: a wsprof trace.
        timeline: a slime communication timeline (file or folder) to join with the traces
            (:mod:`wsprof.analysis.timeline_join`): the run folder when it holds one, or what
            the user gave; None without one.
        timeline_run: the timeline's run id to join (None: its newest run).
    """

    path: str
    trace_paths: tuple[str, ...]
    problems: list[str] = field(default_factory=list)
    read: Callable[[str], ProcessTrace] | None = None
    timeline: str | None = None
    timeline_run: str | None = None
    _errors: list[InputError] = field(default_factory=list, repr=False)

    def traces(self) -> Iterator[ProcessTrace]:
        """Every readable trace, in file order, one at a time (each is read when the iterator
        reaches it). An unreadable one is skipped and described in :attr:`problems`.

        Raises:
            InputError: no trace of the run could be read (after the last one was tried; the
                message names the first problem, as :func:`read_all` does).
        """
        read = self.reader()
        yield from self.admit(
            ((p, _read_or_error(read, p)) for p in self.trace_paths), lambda t: t.rank
        )

    def reader(self) -> Callable[[str], ProcessTrace]:
        """How one of :attr:`trace_paths` is read: :attr:`read`, else a wsprof trace."""
        return self.read or read_trace

    def admit(
        self, items: Iterable[tuple[str, T | InputError]], rank_of: Callable[[T], int | None]
    ) -> Iterator[T]:
        """What was read of each trace (``(path, what its reading gave)``, file order) that the
        run keeps: an :class:`~wsprof.errors.InputError` is skipped and described in
        :attr:`problems`, as is a second dump of one rank (``rank_of``). The one admission rule
        for traces read here and digests made elsewhere (:mod:`wsprof.analysis.pool`).

        Raises:
            InputError: nothing could be read (after the last item; the message names the first
                problem).
        """
        self.problems.clear()
        self._errors.clear()
        n_read = 0
        ranks: dict[int, str] = {}
        for p, got in items:
            if isinstance(got, InputError):
                self._errors.append(got)
                self.problems.append(f"skipped {got}")
                continue
            rank = rank_of(got)
            if self.read is not None and rank is not None:
                # Dumps: one per rank. A second one of a rank (a re-run's, a JSON beside the
                # pickle) would mix two moments of the job.
                if rank in ranks:
                    self.problems.append(
                        f"skipped {p}: a second dump of rank {rank} (read {ranks[rank]}); "
                        "keep one dump per rank in the folder"
                    )
                    continue
                ranks[rank] = p
            n_read += 1
            yield got
        if not n_read:
            self._raise_none_read()

    def _raise_none_read(self) -> None:
        errors = self._errors
        if len(errors) > 1:
            raise InputError(
                f"{self.path}: none of its {len(errors)} traces could be read (the first: "
                f"{errors[0]})"
            ) from errors[0]
        if errors:
            raise errors[0]
        raise InputError(f"{self.path}: no trace could be read; re-record the run")

    def read_all(self) -> tuple[list[ProcessTrace], list[str]]:
        """Every readable trace at once, ordered by rank then pid (what an export of the
        whole run needs), and one line per trace skipped.

        Raises:
            InputError: no trace could be read.
        """
        if self.read is not None:
            traces = sorted(self.traces(), key=_rank_then_path)
            return traces, list(self.problems)
        traces, problems = read_run_lenient(self.path)
        self.problems[:] = problems
        return traces, problems


def _read_or_error(read: Callable[[str], ProcessTrace], path: str) -> ProcessTrace | InputError:
    try:
        return read(path)
    except InputError as e:
        return e


def _rank_then_path(t: ProcessTrace) -> tuple[int, str]:
    return (t.rank if t.rank is not None else 1 << 62, t.path)


@dataclass(frozen=True)
class LoadedSeries:
    """A per-step series file (CSV or TSV; plain or a metric export such as W&B's), or a
    TensorBoard log directory or a W&B run (``imported.format`` says which).

    Attributes:
        path: the path given.
        imported: its series and the notes on how it was read.
    """

    path: str
    imported: Imported


@dataclass(frozen=True)
class LoadedLog:
    """A training log (slime, verl, OpenRLHF, AReaL) read as per-step series.

    Attributes:
        path: the path given.
        imported: its series and the notes on how it was read.
    """

    path: str
    imported: Imported


#: What :func:`load` returns.
Loaded = LoadedRun | LoadedSeries | LoadedLog


def is_series_path(path: str) -> bool:
    """True when ``path`` is a file read as a per-step series (by its suffix)."""
    return os.path.isfile(path) and path.lower().endswith(SERIES_SUFFIXES)


def load(path: str, timeline_run: str | None = None) -> Loaded:
    """What ``path`` holds: a run (folder or trace), a series file or a training log.

    A file ending in ``.csv``/``.tsv`` is a series; a folder of Flight Recorder dumps (or one
    dump: files that start like a pickle or a dump's JSON, and no ``.wsprof`` trace) is a run
    of one process per dump (:mod:`wsprof.trace.flight_dumps`); a W&B run is a series
    (:mod:`wsprof.importers.wandb_run`), and so is a folder with TensorBoard event files under
    it and no ``.wsprof`` trace (:mod:`wsprof.importers.tensorboard`: one run's event files);
    any other file that
    neither ends in ``.wsprof`` nor starts like SQLite is a training log; everything else (a
    folder, a trace, a missing path) is a run, whose trace files are listed now and read
    later.

    Args:
        path: what the user gave.
        timeline_run: of slime's communication timeline holding several runs, the run id to
            read (None: the newest).

    Returns:
        The typed result; a series or log is read whole, a run's traces lazily.

    Raises:
        InputError: the path does not exist, a folder holds no trace, or a series or log
            cannot be read (one line: what and why).
    """
    if is_series_path(path):
        return LoadedSeries(path, load_csv(path))  # a CSV series or a metric export (W&B)
    if is_timeline(path) and (os.path.isfile(path) or not _has_traces(path)):
        # slime's communication timeline
        return LoadedSeries(path, load_timeline(path, timeline_run))
    dumps = find_dumps(path)
    if dumps:  # torch's Flight Recorder dumps (TORCH_FR_DUMP_TEMP_FILE), one per rank
        return LoadedRun(path, tuple(dumps), read=read_dump_trace)
    # A W&B run (wandb/run-*/run-*.wandb, a run folder or the .wandb file): before the
    # TensorBoard check (wandb's sync_tensorboard puts event files under a run folder too)
    # and before the log check (a .wandb file is binary).
    if is_wandb_run(path):
        return LoadedSeries(path, load_wandb_run(path))
    if is_tensorboard_dir(path) and not _has_traces(path):
        return LoadedSeries(path, load_tensorboard(path))  # one run's TensorBoard event files
    if os.path.isfile(path) and not path.lower().endswith(TRACE_SUFFIX) and not is_sqlite(path):
        return LoadedLog(path, load_log(path))  # a training log: slime, verl, OpenRLHF, AReaL
    require_trace_file(path)
    # A run folder that also holds slime's timeline (`wsprof run` sets it there): joined.
    timeline = path if os.path.isdir(path) and is_timeline(path) else None
    return LoadedRun(path, tuple(find_traces(path)), timeline=timeline, timeline_run=timeline_run)


def _has_traces(path: str) -> bool:
    """Whether a folder holds a ``.wsprof`` trace (then it is a run folder, whatever else
    lies beside the traces)."""
    try:
        return bool(find_traces(path))
    except InputError:
        return False
