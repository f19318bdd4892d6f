"""wsprof's per-step numbers as TensorBoard scalars: ``wsprof export --format tensorboard`` and
``wsprof watch --tensorboard``.

One TensorBoard run per process (a subfolder named from its label: ``rank 0`` is ``rank0/``),
so that ``tensorboard --logdir DIR`` (or the user's own logdir, with ``DIR`` inside it) shows
each rank as a run beside the user's curves. Every scalar's tag starts with :data:`TAG_PREFIX`
and ends with the series' name as ``wsprof analyze --format json`` names it (``series[].name``):

- for every process, the series its step rows give (:func:`~wsprof.analysis.per_step.
  row_series`: ``weight_sync_s``, the rank's own sync, ``sync_wait_s``, ``step_s``,
  ``rollout_s``, ``rollout_share``, ``between_layers_s``, ``collective_calls``, ``sync_gap_s``
  and the wire's ``weight_sync_bytes``, ``weight_sync_wire_s``, ``weight_sync_busbw``,
  ``weight_sync_algbw``) and :data:`SPAN_NAME` (the sync's whole span, the wait included);
- for the primary process, also every series of the analysis (its op latencies and counters);
- in the primary's run, the verdict, the two numbers and the diagnoses (:func:`wsprof.report.
  text.render_summary`) as text (TensorBoard's text plugin, tag :data:`VERDICT_TAG`) at the
  primary's last step, written again whenever the verdict changes.

Values are TensorBoard's scalars (``simple_value``: 32-bit floats, what every TensorBoard
reader and TensorBoard's own writers use); an event's wall time is the end of its step on the
wall clock when the trace has a clock anchor (so TensorBoard's wall-time axis lines the ranks up
with the user's own curves), else the time it was written.

Files are written with TensorBoard's own record writer
(:class:`tensorboard.summary.writer.record_writer.RecordWriter`) into files this module creates
as every wsprof output is created (:mod:`wsprof.trace.outputs`): folders user-only (0700),
files exclusively (``O_EXCL | O_NOFOLLOW``), never through a link, never in a folder another
user can write. A folder that is not empty is written only when it is a previous wsprof
TensorBoard output (it holds :data:`MARKER`): its event files are replaced, nothing else in it
is touched. ``tensorboard`` is an optional extra, imported only here and only when used
(:func:`require_tensorboard`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from wsprof.analysis.align import anchor_of
from wsprof.analysis.model import (
    Analysis,
    AnalysisKind,
    ProcessAnalysis,
    SeriesResult,
    StepRow,
)
from wsprof.analysis.per_step import row_series
from wsprof.contracts.safe_text import escape_controls
from wsprof.contracts.series import Series
from wsprof.contracts.units import Unit
from wsprof.errors import InputError
from wsprof.report.files import new_file_mode
from wsprof.report.text import render_summary
from wsprof.report.watch import verdict_key
from wsprof.trace.outputs import (
    ALLOW_HINT,
    SharedFolderError,
    check_private_dir,
    create_file,
    make_private_dir,
)

#: The prefix of every tag wsprof writes: TensorBoard groups the scalars by it.
TAG_PREFIX = "wsprof/"
#: Tag of the verdict text (TensorBoard's text plugin).
VERDICT_TAG = TAG_PREFIX + "verdict"
#: Series name of the weight sync's whole span, the wait for slower ranks included (the step
#: row's ``weight_sync_s``; the series ``weight_sync_s`` is the rank's own time in it).
SPAN_NAME = "weight_sync_span_s"
#: The file that marks a folder as wsprof's TensorBoard output (so that it may be written again).
MARKER = ".wsprof-tensorboard"
#: What an event file's name starts with (TensorBoard finds event files by ``tfevents``).
EVENT_PREFIX = "events.out.tfevents."
#: How to get the optional extra.
INSTALL_HINT = "pip install 'wsprof[tensorboard]'"
#: Run folder of a series input (a CSV or a training log: no processes).
SERIES_RUN = "series"
#: Longest run folder name made from a label.
MAX_RUN_NAME = 64
#: Bytes read of an event file to tell whether wsprof wrote it (its first record, the
#: ``file_version`` event, is ~40 bytes).
FIRST_RECORD_BYTES = 4096

_UNSAFE_TAG = re.compile(r"[^A-Za-z0-9_.:/+-]")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def require_tensorboard() -> None:
    """Check that the ``tensorboard`` package (the modules this one writes with) can be
    imported.

    Raises:
        InputError: it cannot (one line: why, and how to install it).
    """
    try:  # what this module uses: an install too broken to write fails here, not midway
        import tensorboard.compat.proto.event_pb2
        import tensorboard.plugins.text.summary_v2
        import tensorboard.summary.writer.record_writer  # noqa: F401
    except (ImportError, TypeError) as e:  # TypeError: a protobuf too old for its protos
        raise InputError(
            f"TensorBoard output needs the tensorboard package ({e}); install it with "
            f"`{INSTALL_HINT}`"
        ) from e


def tag_of(name: str) -> str:
    """The tag of the series ``name``: :data:`TAG_PREFIX` and the name, each character outside
    letters, digits and ``_.:/+-`` (a counter named in a hostile trace) as ``_``."""
    return TAG_PREFIX + _UNSAFE_TAG.sub("_", name)


def run_name(label: str) -> str:
    """The run folder of a process labelled ``label``: ``rank 0`` -> ``rank0``, ``pid 42`` ->
    ``pid42``; spaces dropped, other characters outside letters, digits and ``_.-`` as ``_``,
    no leading dot, at most :data:`MAX_RUN_NAME` characters; ``process`` when nothing is left."""
    name = _UNSAFE_NAME.sub("_", label.replace(" ", "")).lstrip(".")[:MAX_RUN_NAME]
    return name or "process"


# --------------------------------------------------------------------------- what is written


@dataclass(frozen=True)
class RunSeries:
    """The per-step series one TensorBoard run gets.

    Attributes:
        key: the process it is of (label, pid); ``(SERIES_RUN, None)`` for a series input.
        label: its label (``rank 0``), or :data:`SERIES_RUN`.
        series: ``(tag, series)`` in writing order: the analysis's series first (the primary),
            then the rows' own; a tag met twice keeps its first series' point at each step.
        wall_s: step -> its end on the wall clock, s (steps of a trace with a clock anchor).
        last_row: the last step row read (None: none, or a series input).
    """

    key: tuple[str, int | None]
    label: str
    series: tuple[tuple[str, Series], ...]
    wall_s: dict[int, float] = field(default_factory=dict)
    last_row: int | None = None


def _finite(s: Series, after: int | None = None) -> Iterable[tuple[int, float]]:
    for step, v in zip(s.steps, s.values):
        if (after is None or step > after) and math.isfinite(v):
            yield step, v


def _span_series(rows: Sequence[StepRow]) -> Series | None:
    pts = [(r.step, r.weight_sync_s) for r in rows if r.weight_sync_s is not None]
    if not pts:
        return None
    return Series(SPAN_NAME, Unit.SECONDS, tuple(p[0] for p in pts), tuple(p[1] for p in pts))


def process_series(
    pa: ProcessAnalysis, judged: Sequence[SeriesResult] = (), after: int | None = None
) -> RunSeries:
    """What the run of process ``pa`` gets: the analysis's ``judged`` series (pass the
    analysis's for the primary), then its rows' series (:func:`~wsprof.analysis.per_step.
    row_series`, the names ``wsprof analyze`` gives them) and :data:`SPAN_NAME`, of the rows
    numbered above ``after`` (None: every row)."""
    rows = [r for r in pa.steps if after is None or r.step > after]
    pairs = [(tag_of(r.series.name), r.series) for r in judged]
    pairs += [(tag_of(s.name), s) for s in row_series(rows, pa.step_source)]
    span = _span_series(rows)
    if span is not None:
        pairs.append((tag_of(span.name), span))
    anchor = anchor_of(pa.meta)
    wall = (
        {r.step: (r.t_end_ns - anchor[0] + anchor[1]) / 1e9 for r in rows}
        if anchor is not None
        else {}
    )
    pid = pa.pid if isinstance(pa.pid, int) else None
    last = rows[-1].step if rows else None
    return RunSeries((pa.label, pid), pa.label, tuple(pairs), wall, last)


def runs_of(
    analysis: Analysis, after: dict[tuple[str, int | None], int] | None = None
) -> list[RunSeries]:
    """The runs of ``analysis``: one per process with steps (the primary first, with the
    analysis's series), or one named :data:`SERIES_RUN` for a series input (a CSV, a log).
    ``after``: per process key, the last row already written (its rows up to it are skipped)."""
    if analysis.kind is AnalysisKind.SERIES:
        return [
            RunSeries(
                (SERIES_RUN, None),
                SERIES_RUN,
                tuple((tag_of(r.series.name), r.series) for r in analysis.series),
            )
        ]
    out: list[RunSeries] = []
    for i, pa in enumerate(analysis.processes):
        if not pa.steps:
            continue
        key = (pa.label, pa.pid if isinstance(pa.pid, int) else None)
        judged = analysis.series if i == 0 else ()
        out.append(process_series(pa, judged, (after or {}).get(key)))
    return out


def verdict_text(analysis: Analysis) -> str:
    """The verdict, the two numbers and the diagnoses as Markdown for TensorBoard's text
    plugin: the 80-column text of ``wsprof run``'s summary as an indented code block (kept as
    laid out; no line of it can end the block), control characters escaped."""
    text = escape_controls(render_summary(analysis, colour=False), newlines=True)
    return "\n".join("    " + line for line in text.rstrip("\n").split("\n")) + "\n"


# --------------------------------------------------------------------------- the folder


def _refuse(folder: str, why: str, option: str) -> InputError:
    return InputError(f"{folder}: {why}; choose another folder with {option}")


def prepare_folder(folder: str, option: str = "-o") -> None:
    """Make ``folder`` ready for TensorBoard output: create it (and its missing parents)
    user-only, or check that the existing one is a folder of this user's that no other user
    can write; a folder that holds anything but a previous wsprof TensorBoard output
    (:data:`MARKER`) is refused; a previous output's event files are removed (its other
    files are left) so that the new ones do not mix with them; the marker is written.

    Args:
        folder: the output folder.
        option: the option that named it, for the errors (``-o``, ``--tensorboard``).

    Raises:
        InputError: it is a link, not a folder, shared, not empty and not wsprof's, or it
            cannot be created or written (one line: why, and what to do).
    """
    try:
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            make_private_dir(folder, option=option)
        else:
            if stat.S_ISLNK(st.st_mode):
                raise _refuse(folder, "is a symbolic link; not written through it", option)
            if not stat.S_ISDIR(st.st_mode):
                raise _refuse(folder, "exists and is not a folder", option)
            check_private_dir(folder, option=option)
        entries = os.listdir(folder)
        if entries and MARKER not in entries:
            raise _refuse(
                folder,
                "folder is not empty and holds no earlier wsprof TensorBoard output (no "
                f"{MARKER}): not written into",
                option,
            )
        if MARKER in entries:
            _clear(folder, option)
        else:
            fd = create_file(os.path.join(folder, MARKER), os.O_WRONLY)
            with open(fd, "w", encoding="utf-8") as fh:
                fh.write(
                    "wsprof TensorBoard output: the event files in the subfolders of this "
                    "folder are replaced by the next `wsprof export --format tensorboard` or "
                    "`wsprof watch --tensorboard` into it\n"
                )
                os.fchmod(fh.fileno(), new_file_mode())
    except SharedFolderError as e:
        raise InputError(str(e).replace(f", or {ALLOW_HINT}", "")) from e
    except OSError as e:
        raise _cannot_write(folder, option, e) from e


def _written_by_wsprof(path: str) -> bool:
    """Whether ``path`` is a regular file (not a link) whose first record is the event this
    module opens its files with (``source_metadata.writer`` ``wsprof``): only the first
    :data:`FIRST_RECORD_BYTES` bytes are read."""
    from tensorboard.compat.proto import event_pb2

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with open(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = fh.read(FIRST_RECORD_BYTES)
    if len(head) < 12:
        return False
    length = int.from_bytes(head[:8], "little")
    data = head[12 : 12 + length]
    if len(data) < length:
        return False
    try:
        event = event_pb2.Event.FromString(data)
    except Exception:  # noqa: BLE001 (protobuf's DecodeError: not an event of ours)
        return False
    return bool(event.source_metadata.writer == "wsprof")


def _clear(folder: str, option: str) -> None:
    """Remove the event files of a previous output (regular files named :data:`EVENT_PREFIX`...
    in its run folders whose first event says wsprof wrote them) and the run folders they
    leave empty; other files and folders (the user's own runs put there) are left."""
    st = os.lstat(os.path.join(folder, MARKER))
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(folder, f"{MARKER} in it is not a regular file", option)
    for name in os.listdir(folder):
        sub = os.path.join(folder, name)
        if not stat.S_ISDIR(os.lstat(sub).st_mode):
            continue
        removed = False
        for f in os.listdir(sub):
            path = os.path.join(sub, f)
            if f.startswith(EVENT_PREFIX) and _written_by_wsprof(path):
                os.remove(path)
                removed = True
        if removed:
            with contextlib.suppress(OSError):
                os.rmdir(sub)  # empty: a run of the previous output only


# --------------------------------------------------------------------------- the writer


class _EventFile:
    """One TensorBoard run: its folder and one event file, written record by record with
    TensorBoard's own record writer (length, CRC-32C, the serialised ``Event``).

    Attributes:
        path: the event file.
        last: tag -> the last step written under it (steps of a tag only ever grow).
        wall_s: step -> its end on the wall clock, s, as far as known.
        last_row: the last step row written (its rows up to it are not read again).
    """

    def __init__(self, folder: str, option: str) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            os.mkdir(folder, 0o700)
        else:
            if not stat.S_ISDIR(st.st_mode):
                raise _refuse(folder, "is not a folder (a link or a file)", option)
        check_private_dir(folder, option=option)
        host = _UNSAFE_NAME.sub("_", socket.gethostname()) or "host"
        base = f"{EVENT_PREFIX}{int(time.time()):010d}.{host}.{os.getpid()}"
        fd = -1
        for k in range(1000):
            self.path = os.path.join(folder, f"{base}.{k}")
            try:
                fd = create_file(self.path, os.O_WRONLY)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"{folder}: 1000 event file names are taken")
        # open for the writer's life (closed by close()), not a with-block
        self._file: IO[bytes] = open(fd, "wb")  # noqa: SIM115
        os.fchmod(self._file.fileno(), new_file_mode())
        self._writer = RecordWriter(self._file)
        self._event = event_pb2.Event
        self._summary = summary_pb2.Summary
        self.last: dict[str, int] = {}
        self.wall_s: dict[int, float] = {}
        self.last_row: int | None = None
        self._write(
            self._event(
                wall_time=time.time(),
                file_version="brain.Event:2",
                source_metadata=event_pb2.SourceMetadata(writer="wsprof"),
            )
        )

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def scalars(self, step: int, values: dict[str, float], now: float) -> None:
        """One event at ``step`` holding each ``tag: value`` (``simple_value``)."""
        for tag in values:
            self.last[tag] = step
        self._write(
            self._event(
                wall_time=self.wall_s.get(step, now),
                step=step,
                summary=self._summary(
                    value=[self._summary.Value(tag=t, simple_value=v) for t, v in values.items()]
                ),
            )
        )

    def text(self, tag: str, step: int, text: str, now: float) -> None:
        """One event at ``step`` holding ``text`` (Markdown) for TensorBoard's text plugin."""
        from tensorboard.plugins.text.summary_v2 import text_pb

        self._write(
            self._event(wall_time=self.wall_s.get(step, now), step=step, summary=text_pb(tag, text))
        )

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _cannot_write(folder: str, option: str, e: OSError) -> InputError:
    return InputError(
        f"{folder}: cannot write TensorBoard output ({e.strerror or e}); choose another "
        f"folder with {option}"
    )


class TensorBoardOut:
    """The TensorBoard output of a run: :meth:`add` writes what an analysis has that was not
    written yet (each tag's steps above the last written, the verdict when it changed), so
    that ``wsprof export`` calls it once and ``wsprof watch`` at every refresh.

    Args:
        folder: the output folder (prepared by :func:`prepare_folder` here).
        option: the option that named it, for the errors.

    Raises:
        InputError: as :func:`prepare_folder`; the tensorboard package is missing.
    """

    def __init__(self, folder: str, option: str = "-o") -> None:
        require_tensorboard()
        prepare_folder(folder, option)
        self.folder = folder
        self.option = option
        self._runs: dict[tuple[str, int | None], _EventFile] = {}
        self._verdict: tuple[Any, ...] | None = None
        self._verdict_step = -1
        #: Scalar points written so far.
        self.points = 0

    def _run(self, rs: RunSeries) -> _EventFile:
        run = self._runs.get(rs.key)
        if run is not None:
            return run
        taken = {os.path.basename(os.path.dirname(r.path)) for r in self._runs.values()}
        name = base = run_name(rs.label)
        if name in taken and rs.key[1] is not None:  # two processes, one label: the pid
            name = base = f"{name}-pid{rs.key[1]}"
        k = 2
        while name in taken:
            name, k = f"{base}-{k}", k + 1
        run = self._runs[rs.key] = _EventFile(os.path.join(self.folder, name), self.option)
        return run

    def add(self, analysis: Analysis) -> int:
        """Write every point of ``analysis`` not written yet, and the verdict text (in the
        primary's run, at its last step) when it changed (:func:`wsprof.report.watch.
        verdict_key`) or was never written.

        Returns:
            The scalar points written.

        Raises:
            InputError: a file cannot be written (one line).
        """
        after = {k: r.last_row for k, r in self._runs.items() if r.last_row is not None}
        now = time.time()
        written = 0
        primary: tuple[_EventFile, int] | None = None
        try:
            for i, rs in enumerate(runs_of(analysis, after)):
                run = self._run(rs)
                run.wall_s.update(rs.wall_s)
                by_step: dict[int, dict[str, float]] = {}
                for tag, s in rs.series:
                    for step, v in _finite(s, run.last.get(tag)):
                        by_step.setdefault(step, {}).setdefault(tag, v)
                for step in sorted(by_step):
                    run.scalars(step, by_step[step], now)
                    written += len(by_step[step])
                if rs.last_row is not None:
                    run.last_row = (
                        rs.last_row if run.last_row is None else max(rs.last_row, run.last_row)
                    )
                top = max(run.last.values(), default=None)
                if i == 0 and top is not None:
                    primary = (run, top)
            key = verdict_key(analysis)
            if primary is not None and key != self._verdict:
                run, step = primary
                step = max(step, self._verdict_step)
                run.text(VERDICT_TAG, step, verdict_text(analysis), now)
                self._verdict, self._verdict_step = key, step
        except OSError as e:
            raise _cannot_write(self.folder, self.option, e) from e
        self.points += written
        return written

    @property
    def runs(self) -> list[str]:
        """The run folders written, in the order they were made."""
        return [os.path.basename(os.path.dirname(r.path)) for r in self._runs.values()]

    def flush(self) -> None:
        """Flush every event file (``wsprof watch``: at each refresh).

        Raises:
            InputError: a file cannot be written (one line).
        """
        try:
            for run in self._runs.values():
                run.flush()
        except OSError as e:
            raise _cannot_write(self.folder, self.option, e) from e

    def close(self) -> None:
        """Flush and close every event file.

        Raises:
            InputError: a file cannot be written (one line); every file is closed first.
        """
        failed: OSError | None = None
        for run in self._runs.values():
            try:
                run.close()
            except OSError as e:
                failed = failed or e
        if failed is not None:
            raise _cannot_write(self.folder, self.option, failed)


def export_tensorboard(analysis: Analysis, folder: str, option: str = "-o") -> TensorBoardOut:
    """Write ``analysis`` as TensorBoard output in ``folder`` (``wsprof export --format
    tensorboard``).

    Raises:
        InputError: the analysis has no per-step series (no steps, nothing judged), the
            tensorboard package is missing, or the folder cannot be written (one line).
    """
    if not any(rs.series for rs in runs_of(analysis)):
        raise InputError(
            f"{analysis.source}: no steps to export (add wsprof.step() at the top of each "
            "step, or give a run whose steps wsprof analyze finds)"
        )
    out = TensorBoardOut(folder, option)
    try:
        out.add(analysis)
    finally:
        out.close()
    return out
