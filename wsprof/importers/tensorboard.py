"""Per-step series from a TensorBoard log directory (``events.out.tfevents.*`` files).

slime writes ``perf/update_weights_time``, ``perf/rollout_time`` and ``perf/step_time`` into
TensorBoard event files by default, one file per process (``SummaryWriter`` in each: the train
process's ``perf/*`` and ``train/*``, the rollout process's ``rollout/*``, ``eval/*`` and
``perf/rollout_time``), each in a folder of its own. :func:`load_tensorboard` reads them as the
log and CSV importers read theirs: an :class:`~wsprof.importers.logs.Imported` of per-step
series, named and aligned by :func:`~wsprof.importers.logs.build_series` (the tag
``perf/update_weights_time`` becomes ``weight_sync_s``, moved back a step as in slime's log;
every other tag keeps its name, so the phase and kind recognition of the log's keys applies).

**Runs.** Every event file under the folder (at most :data:`MAX_EVENT_FILES`) is read; the
files of one folder are one writer. Writer folders that are siblings (the same parent) are
one run when no tag is written by two of them (one job's processes each log their own tags:
slime's train and rollout processes in two timestamped folders), and else one run each (two
runs of one experiment log the same tags). A folder holding several runs is refused, one line
naming them; give the run's folder (``DIR/<run>``).

**Step axes.** The framework is recognised from the tags (its headline keys,
:attr:`wsprof.frameworks.Framework.metric_keys`), and its
:class:`~wsprof.frameworks.model.TensorBoardLayout` says which step each tag is logged
against: slime's ``perf/*``, ``rollout/*`` and ``eval/*`` on ``rollout/step`` (the per-step
series), ``train/*`` on ``train/step`` (per optimizer step: kept apart, named in a note, never
mixed into the per-step series). A tag logged by two writers at one step keeps the value of
the later file (files in name order: their names hold the time they were opened).

**Records.** Event files are TFRecord files: each record is a length, its masked CRC-32C, the
serialised ``Event``, its masked CRC-32C. The records are framed here with TensorBoard's
``masked_crc32c`` and decoded with its ``Event`` proto; TensorBoard's own loaders
(``EventFileLoader``, ``EventAccumulator``) end a file silently at its first bad record (the
``DataLossError`` is swallowed, and the stub reader would retry the same record forever), so
they can neither skip a corrupt record nor count one. Here a file cut mid-record is read up to
its last complete record (a note names it); a record whose data fails its check is skipped
and counted (a note), one whose length fails its check is resynchronised on the next valid
length within :data:`MAX_RESYNC_BYTES`; at most :data:`MAX_RECORDS_PER_FILE` records per file
are read (a note says so when hit). Scalars are ``simple_value`` summaries (TB1,
``torch.utils.tensorboard``) or scalar tensors of the ``scalars`` plugin (TB2,
``tensorboard.summary``); histograms, images and text are ignored; non-finite values are
missing values. The input folder is only read, never written.

``tensorboard`` is an optional dependency (``pip install wsprof[tensorboard]``), imported
when a folder is read.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from wsprof import frameworks
from wsprof.errors import InputError, quote
from wsprof.frameworks.model import Framework, TensorBoardLayout
from wsprof.importers.files import open_regular
from wsprof.importers.limits import ALWAYS_KEPT, MetricCap
from wsprof.importers.logs import SERIES_KEYS, Imported, build_series

#: What every TensorBoard event file's name holds (``events.out.tfevents.<time>.<host>...``).
EVENT_FILE_MARK = "tfevents"
#: Most event files read under one folder (name order); a note says when more were found.
MAX_EVENT_FILES = 1_000
#: Most folders walked looking for event files (a home directory given by mistake).
MAX_FOLDERS_WALKED = 10_000
#: Most records read per event file: a long run logs ~100 scalars a step, so 5M records are
#: 50,000 steps; a note says when a file had more.
MAX_RECORDS_PER_FILE = 5_000_000
#: Most records read under one folder, all files together (reading is ~100,000 records a
#: second: about a minute); the files after it are not read and a note says so.
MAX_RECORDS_READ = 5_000_000
#: Event files whose read note is given one by one; more are summed in one note.
FILES_NAMED = 10
#: Longest record taken as one (an event holding a scalar is ~100 bytes; an image a few MiB):
#: a checked length beyond it is damage.
MAX_RECORD_BYTES = 256 << 20
#: Bytes searched for the next valid record after a record whose length fails its check.
MAX_RESYNC_BYTES = 1 << 20
#: Tags a note names before ``...``.
TAGS_NAMED = 5

_HEADER = struct.Struct("<QI")  # length, masked CRC-32C of the length
_CRC = struct.Struct("<I")
_INSTALL_HINT = (
    "reading TensorBoard event files needs the tensorboard package: "
    "pip install 'wsprof[tensorboard]'"
)

#: step -> tag -> value.
Records = dict[int, dict[str, float]]


def is_event_file(name: str) -> bool:
    """Whether a file name is a TensorBoard event file's (``events.out.tfevents.*``)."""
    return name.startswith("events.out.") and EVENT_FILE_MARK in name


def _walk(path: str) -> Iterator[tuple[int, list[str]]]:
    """Each folder under ``path`` (``path`` first, then depth first in name order) with its
    event files: regular files (a link to one included) named like one, never a FIFO, a
    device or a folder so named. Iterative, so no depth of nesting exhausts the stack;
    symbolic links to folders are not followed; a folder that cannot be listed is passed."""
    stack = [path]
    n = 0
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        files: list[str] = []
        subs: list[str] = []
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    subs.append(e.path)
                elif is_event_file(e.name) and e.is_file():
                    files.append(e.path)
            except OSError:
                continue
        yield n, files
        n += 1
        stack.extend(reversed(subs))


def find_event_files(path: str) -> tuple[list[str], bool]:
    """Every event file under ``path``, in path order, at most :data:`MAX_EVENT_FILES`.

    Symbolic links to folders are not followed; at most :data:`MAX_FOLDERS_WALKED` folders
    are walked; only regular files are event files.

    Args:
        path: a folder.

    Returns:
        The event files' paths, and whether the caps left some out.
    """
    found: list[str] = []
    capped = False
    for n, files in _walk(path):
        if n >= MAX_FOLDERS_WALKED:
            capped = True
            break
        found.extend(files)
        if len(found) > MAX_EVENT_FILES:
            capped = True
            break
    found.sort()
    return found[:MAX_EVENT_FILES], capped


def is_tensorboard_dir(path: str) -> bool:
    """Whether ``path`` is a folder with a TensorBoard event file under it."""
    if not os.path.isdir(path):
        return False
    for n, files in _walk(path):
        if n >= MAX_FOLDERS_WALKED:
            return False
        if files:
            return True
    return False


@dataclass
class EventFile:
    """What one event file held.

    Attributes:
        path: the file.
        records: complete records read.
        corrupt: records skipped because they failed their check.
        truncated: the file ends inside a record (read up to the last complete one).
        capped: :data:`MAX_RECORDS_PER_FILE` records were read and the rest not.
        budget_left: the folder's :data:`MAX_RECORDS_READ` records were read before the end
            of this file: the rest of it (and every file after it) not read.
        lost_tail: a damaged length found no valid record after it within
            :data:`MAX_RESYNC_BYTES`: the rest of the file was not read.
        undecodable: complete records that are no ``Event``.
        scalars: tag -> step -> value (the last one logged at a step).
        other_summaries: summary values read as no number (histograms, images, text, a
            value that is not finite).
    """

    path: str
    records: int = 0
    corrupt: int = 0
    truncated: bool = False
    capped: bool = False
    budget_left: bool = False
    lost_tail: bool = False
    undecodable: int = 0
    scalars: dict[str, dict[int, float]] = field(default_factory=dict)
    other_summaries: int = 0

    @property
    def tags(self) -> frozenset[str]:
        """The scalar tags it holds."""
        return frozenset(self.scalars)


class _TensorBoard:
    """The few parts of the ``tensorboard`` package read here, imported once (lazily)."""

    def __init__(self) -> None:
        # tensorboard ships no type information: typed here, at the three names read
        # (mypy's ignore_missing_imports admits the untyped package).
        try:
            from tensorboard.compat.proto import event_pb2
            from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import (
                masked_crc32c,
            )
            from tensorboard.util import tensor_util
        except ImportError as e:
            raise InputError(_INSTALL_HINT) from e
        self.masked_crc32c: Callable[[bytes], int] = masked_crc32c
        self.event_from_bytes: Callable[[bytes], Any] = event_pb2.Event.FromString
        self.make_ndarray: Callable[[Any], Any] = tensor_util.make_ndarray


def _records(
    fh: IO[bytes], tb: _TensorBoard, got: EventFile, budget: int = MAX_RECORDS_PER_FILE
) -> Iterator[bytes]:
    """The data of each complete, checked record of an open event file, at most ``budget``
    (and :data:`MAX_RECORDS_PER_FILE`); ``got``'s counters say what was skipped and why
    reading stopped."""
    crc = tb.masked_crc32c
    while True:
        if got.records >= MAX_RECORDS_PER_FILE:
            got.capped = bool(fh.read(1))
            return
        if got.records >= budget:
            got.budget_left = bool(fh.read(1))
            return
        header = fh.read(_HEADER.size)
        if not header:
            return
        if len(header) < _HEADER.size:
            got.truncated = True
            return
        length, header_crc = _HEADER.unpack(header)
        if crc(header[:8]) != header_crc or length > MAX_RECORD_BYTES:
            got.corrupt += 1
            if not _resync(fh, tb, fh.tell() - _HEADER.size + 1):
                got.lost_tail = True
                return
            continue
        data = fh.read(length)
        tail = fh.read(_CRC.size)
        if len(data) < length or len(tail) < _CRC.size:
            got.truncated = True
            return
        got.records += 1
        if crc(data) != _CRC.unpack(tail)[0]:
            got.corrupt += 1  # the length was sound: the next record starts after this one
            continue
        yield data


def _resync(fh: IO[bytes], tb: _TensorBoard, start: int) -> bool:
    """Seek to the first offset at or after ``start`` (within :data:`MAX_RESYNC_BYTES`)
    where a record's length passes its check; False when there is none."""
    fh.seek(start)
    window = fh.read(MAX_RESYNC_BYTES + _HEADER.size)
    crc = tb.masked_crc32c
    for i in range(max(0, len(window) - _HEADER.size + 1)):
        length, header_crc = _HEADER.unpack_from(window, i)
        if length <= MAX_RECORD_BYTES and crc(window[i : i + 8]) == header_crc:
            fh.seek(start + i)
            return True
    if len(window) < MAX_RESYNC_BYTES + _HEADER.size:
        fh.seek(start + len(window))  # the rest is too short to hold a record: a clean end
        return True
    return False


def _scalar(value: Any, tb: _TensorBoard) -> float | None:
    """The number of a summary value: a ``simple_value`` or a scalar tensor of the
    ``scalars`` plugin; None for anything else or a value that is not finite."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        number = float(value.simple_value)
    elif kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
        if any(d.size != 1 for d in value.tensor.tensor_shape.dim):
            return None  # no scalar; and a declared shape is never allocated (2^40 floats)
        try:
            array = tb.make_ndarray(value.tensor)
        except (ValueError, TypeError):
            return None
        if array.size != 1 or array.dtype.kind not in "biuf":
            return None
        number = float(array.reshape(()).item())
    else:
        return None
    return number if math.isfinite(number) else None


def read_event_file(
    path: str, tb: _TensorBoard | None = None, budget: int = MAX_RECORDS_PER_FILE
) -> EventFile:
    """Read the scalars of one event file (see the module docstring for damaged files).

    Args:
        path: the event file.
        tb: the tensorboard parts (imported here when None).
        budget: most records read from it (the folder's :data:`MAX_RECORDS_READ` left).

    Returns:
        What it held, with its counters.

    Raises:
        InputError: tensorboard is not installed, or the file cannot be opened or is no
            regular file.
    """
    tb = tb or _TensorBoard()
    got = EventFile(path)
    try:
        with open_regular(path, "give a folder of event files") as fh:
            for data in _records(fh, tb, got, budget):
                try:
                    event = tb.event_from_bytes(data)
                except Exception:  # noqa: BLE001 (protobuf's DecodeError: a damaged event)
                    got.undecodable += 1
                    continue
                if event.WhichOneof("what") != "summary":
                    continue
                for value in event.summary.value:
                    number = _scalar(value, tb)
                    if number is None:
                        got.other_summaries += 1
                        continue
                    got.scalars.setdefault(value.tag, {})[int(event.step)] = number
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e}); check permissions") from e
    return got


def _read_all(paths: list[str], tb: _TensorBoard) -> tuple[list[EventFile], int]:
    """Read the event files in order until :data:`MAX_RECORDS_READ` records are read; the
    files read and how many were left unread."""
    files: list[EventFile] = []
    left = MAX_RECORDS_READ
    for p in paths:
        if left <= 0:
            break
        f = read_event_file(p, tb, left)
        files.append(f)
        left -= f.records
    return files, len(paths) - len(files)


@dataclass(frozen=True)
class Run:
    """The event files of one run.

    Attributes:
        name: its folder relative to the folder given (``.``: that folder).
        files: its event files, in name order.
    """

    name: str
    files: tuple[EventFile, ...]


def group_runs(root: str, files: list[EventFile]) -> list[Run]:
    """Group event files into runs (see the module docstring).

    Args:
        root: the folder given.
        files: every event file read under it.

    Returns:
        The runs, by folder name.
    """
    writers: dict[str, list[EventFile]] = {}
    for f in files:
        writers.setdefault(os.path.dirname(f.path), []).append(f)
    siblings: dict[str, list[str]] = {}
    for folder in writers:
        siblings.setdefault(os.path.dirname(folder), []).append(folder)
    runs: list[Run] = []
    for parent, folders in siblings.items():
        tags = [frozenset().union(*(f.tags for f in writers[d])) for d in folders]
        disjoint = sum(len(t) for t in tags) == len(frozenset().union(*tags))
        if len(folders) > 1 and disjoint:
            runs.append(Run(_rel(root, parent), tuple(f for d in folders for f in writers[d])))
        else:
            runs.extend(Run(_rel(root, d), tuple(writers[d])) for d in folders)
    return sorted(runs, key=lambda r: r.name)


def _rel(root: str, folder: str) -> str:
    return os.path.relpath(folder, root)


def framework_of(tags: frozenset[str]) -> Framework | None:
    """The framework whose headline keys (:attr:`Framework.metric_keys`) are most among the
    tags (ties: :data:`wsprof.frameworks.FRAMEWORKS` order), None when none is."""
    best: Framework | None = None
    best_n = 0
    for fw in frameworks.FRAMEWORKS:
        n = sum(m.key in tags for m in fw.metric_keys)
        if n > best_n:
            best, best_n = fw, n
    return best


def _names(tags: list[str]) -> str:
    shown = ", ".join(quote(t, 60) for t in tags[:TAGS_NAMED])
    return shown + (", ..." if len(tags) > TAGS_NAMED else "")


def _file_note(root: str, f: EventFile) -> str:
    scalars = sum(len(v) for v in f.scalars.values())
    return (
        f"read {_rel(root, f.path)}: {f.records:,} records, {len(f.scalars)} scalar tags, "
        f"{scalars:,} values"
    )


def _damage_notes(root: str, f: EventFile) -> list[str]:
    name = _rel(root, f.path)
    notes = []
    if f.truncated:
        notes.append(
            f"{name}: cut mid-record (a process still writing, or a copy cut short); read "
            f"up to its last complete record ({f.records:,} records)"
        )
    if f.corrupt or f.undecodable:
        notes.append(
            f"{name}: {f.corrupt + f.undecodable:,} corrupt record(s) skipped (failed their "
            "checksum or held no event)"
        )
    if f.lost_tail:
        notes.append(
            f"{name}: no valid record within {MAX_RESYNC_BYTES:,} bytes after a damaged one; "
            "the rest of the file was not read"
        )
    if f.budget_left:
        notes.append(
            f"{name}: read up to the {MAX_RECORDS_READ:,} records read under one folder; "
            "the rest of it not read"
        )
    if f.capped:
        notes.append(
            f"{name}: more than {MAX_RECORDS_PER_FILE:,} records; the first "
            f"{MAX_RECORDS_PER_FILE:,} read"
        )
    return notes


def _merge(run: Run, layout: TensorBoardLayout | None) -> tuple[Records, dict[str, list[str]], int]:
    """Step -> tag -> value of the run's per-step tags (later files win), tags kept apart by
    axis, and how many values a later file replaced."""
    cap = MetricCap(always=ALWAYS_KEPT | {k for keys in SERIES_KEYS.values() for k in keys})
    records: Records = {}
    apart: dict[str, list[str]] = {}
    replaced = 0
    axis_tags = set(layout.axis_tags) if layout else set()
    for f in run.files:
        for tag, points in f.scalars.items():
            axis = layout.apart_axis(tag) if layout else None
            if axis is not None:
                if tag not in apart.setdefault(axis, []):
                    apart[axis].append(tag)
                continue
            if tag in axis_tags or not cap.admit(tag):
                continue
            for step, value in points.items():
                values = records.setdefault(step, {})
                replaced += tag in values
                values[tag] = value
    left_out = cap.note("tags")
    if left_out:
        apart.setdefault("", []).append(left_out)
    return records, apart, replaced


def load_tensorboard(path: str) -> Imported:
    """Read a TensorBoard log directory of one run as per-step series.

    Args:
        path: a folder with event files under it (one run; see the module docstring).

    Returns:
        The per-step series; its notes say which files were read, the framework and axis,
        what was kept apart and any damage met. ``format`` is ``tensorboard``.

    Raises:
        InputError: tensorboard is not installed; the folder holds no event file, several
            runs, or no scalar on the per-step axis. The message is one line.
    """
    paths, files_capped = find_event_files(path)
    if not paths:
        raise InputError(
            f"{path}: no TensorBoard event file (events.out.tfevents.*) under it; give the "
            "folder a SummaryWriter wrote"
        )
    tb = _TensorBoard()
    read, unread = _read_all(paths, tb)
    runs = group_runs(path, read)
    runs = [r for r in runs if any(f.scalars for f in r.files)] or runs
    if len(runs) > 1:
        names = ", ".join(quote(r.name, 60) for r in runs[:20])
        more = ", ..." if len(runs) > 20 else ""
        raise InputError(
            f"{path}: {len(runs)} TensorBoard runs found ({names}{more}); give one run's "
            f"folder, e.g. {os.path.join(path, runs[0].name)}"
        )
    run = runs[0]
    tags = frozenset().union(*(f.tags for f in run.files))
    if not tags:
        damaged = sum(f.corrupt + f.undecodable for f in run.files)
        why = f" ({damaged:,} corrupt records skipped)" if damaged else ""
        raise InputError(
            f"{path}: {len(run.files)} TensorBoard event file(s) but no scalar in them{why}; "
            "give the folder the training process logged its scalars to"
        )
    fw = framework_of(tags)
    layout = fw.tensorboard if fw else None
    records, apart, replaced = _merge(run, layout)
    records = {s: v for s, v in records.items() if v}
    if not records:
        raise InputError(
            f"{path}: TensorBoard scalars only on other step axes "
            f"({', '.join(a for a in apart if a)}); no per-step scalar to analyse"
        )
    series, notes = build_series(records)
    if not series:
        raise InputError(
            f"{path}: the only per-step value is slime's weight sync before training (no "
            "training step to give it to); give a log of at least two steps"
        )
    steps = sorted(records)
    axis = (
        f"{fw.title} tags on {layout.step_axis}"
        if fw and layout
        else (f"{fw.title} tags" if fw else "tags") + " on each event's step"
    )
    head = (
        f"read as TensorBoard event files: {len(run.files)} file(s), {axis}, {len(steps)} "
        f"steps ({steps[0]}-{steps[-1]}), {len(series)} metrics"
    )
    found = [_file_note(path, f) for f in run.files[:FILES_NAMED]]
    if len(run.files) > FILES_NAMED:
        rest = run.files[FILES_NAMED:]
        found.append(
            f"read {len(rest):,} more event files: "
            f"{sum(f.records for f in rest):,} records, "
            f"{sum(len(v) for f in rest for v in f.scalars.values()):,} values"
        )
    damage = [n for f in run.files for n in _damage_notes(path, f)]
    extra = []
    for other, kept in apart.items():
        if other:
            extra.append(
                f"kept apart, not in the per-step series: {len(kept)} tag(s) logged per "
                f"{other} ({_names(kept)})"
            )
        else:
            extra.extend(kept)  # the metric cap's note
    if replaced:
        extra.append(f"{replaced:,} value(s) logged again at one step: the later file's kept")
    if files_capped:
        extra.append(
            f"more than {MAX_EVENT_FILES:,} event files (or {MAX_FOLDERS_WALKED:,} folders) "
            f"under {path}: the first {MAX_EVENT_FILES:,} in name order read"
        )
    if unread:
        extra.append(
            f"{unread:,} event file(s) not read: {MAX_RECORDS_READ:,} records were read "
            f"under {path} before them (at most {MAX_RECORDS_READ:,} per folder)"
        )
    if fw is None:
        extra.append(
            "no framework's tags recognised (e.g. perf/update_weights_time): every scalar "
            "read on its event's step"
        )
    return Imported(tuple(series), (head, *found, *damage, *notes, *extra), "tensorboard")
