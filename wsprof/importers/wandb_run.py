"""Per-step series from a W&B run's transaction log (``run-<id>.wandb``), offline or synced.

verl and OpenRLHF log their timers to W&B (``timing_s/update_weights``, ``timing_s/gen``,
``timing_s/step``; OpenRLHF's ``train/timing/broadcast``). A run folder keeps everything the
run logged in one file, ``wandb/offline-run-<time>-<id>/run-<id>.wandb`` (``run-...`` once
synced): a LevelDB-style log (https://github.com/google/leveldb/blob/main/doc/log_format.md)
of protobuf ``Record`` messages. wandb 0.31 writes it from its Go core and ships no Python
reader of it any more (``wandb/sdk/internal/datastore.py`` is gone), so the framing is read
here, as that reader read it: a 7-byte file header (``:W&B``, magic ``0xBEE1``, version 0),
then 32 KiB blocks of chunks, each ``crc32 (uint32 LE) | length (uint16 LE) | type (uint8)``
with the CRC-32 of the type byte and the data, chunk types FULL, FIRST, MIDDLE, LAST, and a
block's tail shorter than a chunk header zero-padded. Each whole record is parsed by the SDK's
own message class, ``wandb.proto.wandb_internal_pb2.Record``; nothing of wandb is started
(no run, no service, no network), and the file is only read.

- **History.** Each ``history`` record is one ``wandb.log`` row: its items (``key`` or
  ``nested_key`` joined by ``.``) and ``_step``. A value is a number when the item holds an
  integer or a float (``value_json`` or the typed fields); a nested dict without ``_type`` is
  read as its ``parent.child`` numbers. Text, booleans, None, media and histograms (a dict
  with ``_type``), ``NaN`` and infinities are skipped and counted in a note. Keys starting with
  ``_`` (``_step``, ``_runtime``, ``_timestamp``) are not metrics.
- **Steps.** A metric's step is the row's ``_step`` (verl logs ``wandb.log(data,
  step=global_steps)``, so that is verl's own step), unless a ``metric`` record
  (``define_metric``) gives it a ``step_metric``: OpenRLHF's ``define_metric("train/*",
  step_metric="train/global_step", step_sync=True)``. The step is then that key's value in the
  row, else its last value logged (W&B's ``step_sync``); a step metric is no series itself. A
  step logged twice keeps, per metric, the last value.
- **Names** are those of the log importer and the CSV export importer
  (:func:`wsprof.importers.logs.build_series`), so a run's W&B log, its console log and its
  CSV export give the same series: the frameworks' weight-sync, rollout and step timers
  become ``weight_sync_s``, ``rollout_s`` and ``step_s`` (a note names the key each is read
  from, ``weight_sync_s = timing_s/update_weights``), every other metric keeps the name it was
  logged under (``timing_s/gen_ref``, ``actor/entropy``), whose phase and kind analysis
  recognises (:func:`wsprof.contracts.phases.phase_of_series`, :mod:`wsprof.analysis.kinds`).
  A key under a ``define_metric`` namespace whose rest is such a framework key is read as that
  key: OpenRLHF logs its console line's ``timing/broadcast`` to W&B as
  ``train/timing/broadcast`` (``{"train/%s" % k: v ...}`` in ``ppo_trainer.py``).
- **Damage.** A file cut short (a run still writing, a copy interrupted) or damaged (a chunk
  whose CRC, type or length is wrong, a record that is no ``Record``) is read up to its last
  good record, and one note says where it stopped. A file that does not start with the header
  is no W&B log (:class:`~wsprof.errors.InputError`), as is a run with no numeric history.
- **Bounds.** At most :data:`MAX_RECORDS` records are read (a note says when the cap is hit),
  a record longer than :data:`MAX_RECORD_BYTES` is damage, and at most
  :data:`~wsprof.importers.limits.MAX_METRICS` metrics (the headline keys always).

``wandb`` is an optional extra (``pip install 'wsprof[wandb]'``), imported only when a run is
read.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from wsprof.contracts.series import WEIGHT_SYNC_S
from wsprof.errors import InputError, quote
from wsprof.importers.limits import ALWAYS_KEPT, MetricCap
from wsprof.importers.logs import SERIES_KEYS, Imported, build_series

#: Suffix of a run's transaction log.
WANDB_SUFFIX = ".wandb"
#: Prefixes of a run folder inside ``wandb/`` (offline, and online or synced).
RUN_DIR_PREFIXES = ("offline-run-", "run-")
#: The file header: ident, magic, version (``<4sHB``).
HEADER_IDENT = b":W&B"
HEADER_MAGIC = 0xBEE1
HEADER_VERSION = 0
HEADER_BYTES = 7
#: A chunk header: CRC-32, length, type (``<IHB``).
CHUNK_HEADER_BYTES = 7
#: Chunks never cross a block.
BLOCK_BYTES = 32768
CHUNK_FULL, CHUNK_FIRST, CHUNK_MIDDLE, CHUNK_LAST = 1, 2, 3, 4
#: Most records read from one file: a run logs about 3 records per step (a history row and
#: its summary updates), so 5,000,000 is over a million steps; the rest is left unread.
MAX_RECORDS = 5_000_000
#: Longest record assembled, bytes: a history row of 500 metrics is a few tens of kB; media
#: and tables are files beside the log, not in it. Longer is damage.
MAX_RECORD_BYTES = 64 << 20
#: Longest ``value_json`` parsed, bytes: a number or a dict of a few hundred numbers is a few
#: kB; a longer one (a table, a hostile dict of millions of keys, ~20 bytes of memory per byte
#: parsed) is skipped as no number, unparsed.
MAX_VALUE_JSON_BYTES = 1 << 20
#: Deepest nested dict of a logged value read as numbers (``{"a": {"b": 1}}`` -> ``a.b``).
MAX_NESTING = 4
#: Metrics always read, whatever their number: every key of a headline series.
ALWAYS_KEYS = ALWAYS_KEPT | {k for keys in SERIES_KEYS.values() for k in keys}
#: Framework keys of the headline series (``timing_s/update_weights``, ``timing/broadcast``).
FRAMEWORK_KEYS = frozenset(k for name, keys in SERIES_KEYS.items() for k in keys if k != name)
#: Most logged keys whose step metric and name are remembered (a hostile run's millions of
#: keys are looked up each time instead).
MAX_KEYS_REMEMBERED = 100_000
#: Run folders a message names before ``...``.
NAMED_RUNS = 3

_INSTALL_HINT = "reading a W&B run needs the wandb package: pip install 'wsprof[wandb]'"
_NOT_WANDB_HINT = (
    "expected a W&B run's transaction log (wandb/offline-run-*/run-<id>.wandb), its run "
    "folder or a wandb/ folder of one run"
)


def _logs_in(folder: str) -> list[str]:
    """The ``.wandb`` files directly in ``folder``, sorted (none when it cannot be listed)."""
    try:
        with os.scandir(folder) as it:
            return sorted(e.path for e in it if e.name.endswith(WANDB_SUFFIX) and e.is_file())
    except OSError:
        return []


def _runs_in(folder: str) -> list[str]:
    """The run folders directly in ``folder`` (a ``wandb/`` folder), sorted; the
    ``latest-run`` link is not counted (it names one of them)."""
    try:
        with os.scandir(folder) as it:
            dirs = sorted(
                e.path
                for e in it
                if e.name.startswith(RUN_DIR_PREFIXES) and not e.is_symlink() and e.is_dir()
            )
    except OSError:
        return []
    return [d for d in dirs if _logs_in(d)]


def _several_runs(path: str, runs: list[str]) -> InputError:
    names = ", ".join(os.path.basename(r) for r in runs[:NAMED_RUNS])
    more = ", ..." if len(runs) > NAMED_RUNS else ""
    example = os.path.join(path, os.path.basename(runs[-1]))
    return InputError(
        f"{path}: {len(runs)} W&B runs ({names}{more}); give one run's folder, e.g. {example}"
    )


def _log_file(path: str) -> str | None:
    """The ``.wandb`` file ``path`` means, or None when it is no W&B run.

    Raises:
        InputError: a folder of several runs, or a run folder with several logs.
    """
    if os.path.isfile(path):
        return path if path.endswith(WANDB_SUFFIX) else None
    if not os.path.isdir(path):
        return None
    logs = _logs_in(path)  # a run folder (wandb/offline-run-*, wandb/latest-run, a copy)
    if len(logs) > 1:
        raise InputError(
            f"{path}: {len(logs)} .wandb files in one folder "
            f"({', '.join(os.path.basename(f) for f in logs[:NAMED_RUNS])}"
            f"{', ...' if len(logs) > NAMED_RUNS else ''}); give one of them"
        )
    if logs:
        return logs[0]
    runs = _runs_in(path)
    if len(runs) > 1:
        raise _several_runs(path, runs)
    return _log_file(runs[0]) if runs else None


def is_wandb_run(path: str) -> bool:
    """Whether ``path`` is a W&B run: a ``.wandb`` file, a folder holding one (a run folder,
    ``wandb/offline-run-*`` or ``wandb/run-*``, or ``wandb/latest-run``), or a folder (the
    ``wandb/`` folder) whose ``offline-run-*``/``run-*`` folders hold exactly one run. Only
    names are looked at; :func:`load_wandb_run` reads the file.

    Args:
        path: what the user gave.

    Raises:
        InputError: a folder of several runs, or of several ``.wandb`` files (one line naming
            them and how to choose one).
    """
    return _log_file(path) is not None


# --- the transaction log's framing -------------------------------------------------------

#: CRC-32 of each chunk type byte, the seed of its chunk's checksum.
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in range(CHUNK_FULL, CHUNK_LAST + 1)}


@dataclass
class _Framing:
    """Where reading the chunks stopped, and why (None: at the end of the file)."""

    offset: int = HEADER_BYTES
    damage: str | None = None


def _check_header(path: str, fh: IO[bytes]) -> None:
    head = fh.read(HEADER_BYTES)
    if len(head) < HEADER_BYTES:
        raise InputError(
            f"{path}: {len(head)} bytes, shorter than a W&B log's header; {_NOT_WANDB_HINT}"
        )
    ident, magic, version = struct.unpack("<4sHB", head)
    if ident != HEADER_IDENT or magic != HEADER_MAGIC:
        raise InputError(
            f"{path}: does not start like a W&B transaction log (header {quote(head)}); "
            f"{_NOT_WANDB_HINT}"
        )
    if version != HEADER_VERSION:
        raise InputError(
            f"{path}: W&B log format version {version}, this wsprof reads version "
            f"{HEADER_VERSION}; export the run's history to CSV and give that"
        )


def _records(fh: IO[bytes], framing: _Framing) -> Iterator[bytes]:
    """Each whole record's bytes, in file order, from just after the header. Stops at the
    end of the file, or at the first damaged chunk (``framing.damage`` says what);
    ``framing.offset`` is the end of the last whole record."""
    pending = bytearray()  # a record begun by a FIRST chunk
    in_record = False
    offset = HEADER_BYTES
    while True:
        left_in_block = BLOCK_BYTES - offset % BLOCK_BYTES
        if left_in_block < CHUNK_HEADER_BYTES:  # a block's tail: zeros
            pad = fh.read(left_in_block)
            if pad.strip(b"\x00"):
                framing.damage = f"a block's padding is not zeros at byte {offset:,}"
                return
            if len(pad) < left_in_block:
                break
            offset += left_in_block
            continue
        header = fh.read(CHUNK_HEADER_BYTES)
        if len(header) < CHUNK_HEADER_BYTES:
            if header:
                framing.damage = f"the file ends inside a chunk header at byte {offset:,}"
                return
            break
        crc, length, kind = struct.unpack("<IHB", header)
        if (crc, length, kind) == (0, 0, 0) and not in_record:
            rest = fh.read(left_in_block - CHUNK_HEADER_BYTES)
            if not rest.strip(b"\x00") and not fh.read(1):
                return  # zeros to the end of the file: space never written
            framing.damage = f"an empty chunk at byte {offset:,}"
            return
        if kind not in _TYPE_CRC or CHUNK_HEADER_BYTES + length > left_in_block:
            framing.damage = f"a chunk of type {kind}, {length} bytes at byte {offset:,}"
            return
        data = fh.read(length)
        if len(data) < length:
            framing.damage = f"the file ends inside the chunk at byte {offset:,}"
            return
        if zlib.crc32(data, _TYPE_CRC[kind]) != crc:
            framing.damage = f"the chunk at byte {offset:,} fails its checksum"
            return
        if (kind in (CHUNK_FULL, CHUNK_FIRST)) == in_record:
            framing.damage = f"a chunk out of order at byte {offset:,}"
            return
        offset += CHUNK_HEADER_BYTES + length
        if kind in (CHUNK_FIRST, CHUNK_FULL):
            pending.clear()
        pending += data
        if len(pending) > MAX_RECORD_BYTES:
            framing.damage = f"a record longer than {MAX_RECORD_BYTES >> 20} MiB at byte {offset:,}"
            return
        in_record = kind in (CHUNK_FIRST, CHUNK_MIDDLE)
        if not in_record:
            framing.offset = offset
            yield bytes(pending)
    if in_record:
        framing.damage = f"the file ends inside a record begun before byte {offset:,}"


# --- history rows -> per-step values ------------------------------------------------------


def _record_class(path: str) -> tuple[Any, type[Exception]]:
    """The SDK's ``Record`` message class and protobuf's decode error (imported here: wandb
    is an optional extra)."""
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto import wandb_internal_pb2
    except ImportError as e:
        raise InputError(f"{path}: {_INSTALL_HINT}") from e
    return wandb_internal_pb2.Record, DecodeError  # type: ignore[attr-defined]


def _numbers(name: str, value: object, out: dict[str, float], depth: int = 0) -> int:
    """Put ``value``'s finite numbers in ``out`` under ``name`` (a dict's as ``name.key``);
    returns how many values were skipped (text, media, NaN, ...)."""
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isfinite(number):
            out[name] = number
            return 0
        return 1
    if isinstance(value, dict) and "_type" not in value and depth < MAX_NESTING:
        return sum(_numbers(f"{name}.{k}", v, out, depth + 1) for k, v in value.items())
    return 1


def _item_value(item: Any) -> object:
    """A history item's value as Python data (typed fields, else ``value_json``)."""
    which = item.WhichOneof("value")
    if which in ("integer", "number", "boolean", "text"):
        return getattr(item, which)
    if which == "none":
        return None
    text = item.json if which == "json" else item.value_json
    if len(text) > MAX_VALUE_JSON_BYTES:
        return None  # skipped as no number, never parsed
    try:
        return json.loads(text) if text else None
    except (ValueError, RecursionError):
        return text


def _item_key(item: Any) -> str:
    return str(item.key) if item.key else ".".join(item.nested_key)


@dataclass
class _History:
    """Step -> metric -> last value, and what was skipped or how steps were found."""

    records: dict[int, dict[str, float]] = field(default_factory=dict)
    rows: int = 0
    skipped: int = 0
    no_step: int = 0
    cap: MetricCap = field(default_factory=lambda: MetricCap(always=ALWAYS_KEYS))
    #: define_metric: name or glob -> its step metric.
    step_metrics: dict[str, str] = field(default_factory=dict)
    #: step metric -> its last value (step_sync).
    last_step: dict[str, int] = field(default_factory=dict)
    #: step metrics used, in order first used.
    used: dict[str, None] = field(default_factory=dict)
    #: keys read under a framework key's name (a define_metric namespace dropped).
    renamed: dict[str, str] = field(default_factory=dict)
    _keys: dict[str, tuple[str | None, str]] = field(default_factory=dict, repr=False)

    def define(self, metric: Any) -> None:
        """Keep a ``define_metric``'s step metric."""
        if metric.step_metric and (metric.name or metric.glob_name):
            self.step_metrics[metric.name or metric.glob_name] = metric.step_metric
            self._keys.clear()

    def _key(self, key: str) -> tuple[str | None, str]:
        """A logged key's step metric (``define_metric``: its name, else the first glob that
        matches) and the name it is read under (a glob's namespace dropped when the rest is
        a framework key: ``train/timing/broadcast`` -> ``timing/broadcast``)."""
        known = self._keys.get(key)
        if known is not None:
            return known
        found: tuple[str | None, str] = (self.step_metrics.get(key), key)
        if found[0] is None:
            for pattern, step_key in self.step_metrics.items():
                if "*" in pattern and fnmatch.fnmatchcase(key, pattern):
                    namespace = pattern.split("*", 1)[0]
                    rest = key[len(namespace) :]
                    if namespace.endswith("/") and rest in FRAMEWORK_KEYS:
                        self.renamed.setdefault(key, rest)
                        found = (step_key, rest)
                    else:
                        found = (step_key, key)
                    break
        if len(self._keys) < MAX_KEYS_REMEMBERED:
            self._keys[key] = found
        return found

    def add_row(self, history: Any) -> None:
        """One ``wandb.log`` row."""
        self.rows += 1
        row: dict[str, float] = {}
        for item in history.item:
            key = _item_key(item)
            if key.startswith("_") and key != "_step":
                continue  # W&B's own: _runtime, _timestamp, _wandb
            self.skipped += _numbers(key, _item_value(item), row)
        step = row.pop("_step", None)
        if step is None and history.HasField("step"):
            step = float(history.step.num)
        step_keys = set(self.step_metrics.values())
        for key in step_keys:
            if key in row and _whole(row[key]):
                self.last_step[key] = int(row[key])
        for key, value in row.items():
            if key in step_keys:
                continue
            step_key, name = self._key(key)
            at = step
            if step_key is not None:
                at = self.last_step.get(step_key)
                self.used.setdefault(step_key, None)
            if at is None or not _whole(at):
                self.no_step += 1
            elif self.cap.admit(name):
                self.records.setdefault(int(at), {})[name] = value


def _whole(value: float) -> bool:
    """A step number: whole, and at most 18 digits."""
    return value == int(value) and abs(value) < 1e18


def _read(
    path: str, reader: tuple[Any, type[Exception]], fh: IO[bytes]
) -> tuple[_History, _Framing, int, bool]:
    """Read the history of an open log: what it holds, where reading stopped, the records
    read and whether the record cap was hit."""
    record_class, decode_error = reader
    _check_header(path, fh)
    history = _History()
    framing = _Framing()
    n_records = 0
    capped = False
    good_end = framing.offset  # the end of the last record parsed
    for data in _records(fh, framing):
        if n_records >= MAX_RECORDS:
            capped = True
            break
        record = record_class()
        try:
            record.ParseFromString(data)
        except decode_error:
            framing.damage = f"a record that is no W&B Record at byte {good_end:,}"
            framing.offset = good_end
            break
        good_end = framing.offset
        n_records += 1
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.add_row(record.history)
        elif kind == "metric":
            history.define(record.metric)
    return history, framing, n_records, capped


def load_wandb_run(path: str) -> Imported:
    """Read a W&B run's logged history as per-step series (see the module docstring).

    Args:
        path: a ``.wandb`` file, a run folder holding one, or a ``wandb/`` folder of one run.

    Returns:
        The series (names as logged, steps ``_step`` or the ``define_metric`` step metric)
        and notes: how the run was read, values skipped, where a damaged file stopped, the
        record cap; ``format`` is ``wandb``.

    Raises:
        InputError: no W&B run at ``path``, a folder of several runs, wandb not installed, a
            file that is no W&B log, or a run with no numeric history. One line.
    """
    log = _log_file(path)
    if log is None:
        raise InputError(f"{path}: no W&B run here; {_NOT_WANDB_HINT}")
    reader = _record_class(path)
    try:
        size = os.path.getsize(log)
        with open(log, "rb") as fh:
            history, framing, n_records, capped = _read(log, reader, fh)
    except OSError as e:
        raise InputError(f"{log}: cannot read ({e.strerror or e}); check permissions") from e
    records = {s: v for s, v in history.records.items() if v}
    if not records:
        stopped = f"; reading stopped at {framing.damage}" if framing.damage else ""
        raise InputError(
            f"{log}: no numeric history in {history.rows} logged row(s) of {n_records} "
            f"record(s){stopped}; give a run that logged numbers with wandb.log"
        )
    series, key_notes = build_series(records)
    if not series:
        raise InputError(
            f"{log}: the only value is slime's weight sync before training (no training step "
            "to give it to); give a run of at least two steps"
        )
    steps = sorted(records)
    step_from = ", ".join(history.used) if history.used else "_step"
    notes = [
        f"read as a W&B run: {os.path.basename(log)}, {history.rows} logged rows, "
        f"{len(steps)} steps ({steps[0]}-{steps[-1]}) from {step_from}, {len(series)} metrics",
        *key_notes,
    ]
    if history.renamed:
        pairs = list(history.renamed.items())
        notes.append(
            "read under their framework names: "
            + ", ".join(f"{k} as {v}" for k, v in pairs[:NAMED_RUNS])
            + (", ..." if len(pairs) > NAMED_RUNS else "")
        )
    if framing.damage:
        notes.append(
            f"read up to the last good record (byte {framing.offset:,} of {size:,}): "
            f"{framing.damage} (a run still writing or a damaged copy)"
        )
    if capped:
        notes.append(
            f"read the first {MAX_RECORDS:,} records only (at most {MAX_RECORDS:,} per run); "
            "the rest of the run is not analysed"
        )
    if history.skipped:
        notes.append(
            f"{history.skipped:,} non-numeric value(s) skipped (text, media, histograms, NaN)"
        )
    if history.no_step:
        notes.append(
            f"{history.no_step:,} value(s) without a step skipped (their step metric "
            "not yet logged)"
        )
    left_out = history.cap.note()
    if left_out:
        notes.append(left_out)
    if not any(s.name == WEIGHT_SYNC_S for s in series):
        notes.append(
            "no weight-sync time in this run (keys tried: "
            + ", ".join(SERIES_KEYS[WEIGHT_SYNC_S][1:])
            + ")"
        )
    return Imported(tuple(series), tuple(notes), "wandb")
