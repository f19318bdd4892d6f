"""Our own writer of slime's trainer communication timeline (test input only).

Writes the JSONL layout documented by slime (THUDM/slime ``docs/.../communication_timeline.md``)
and produced by ``slime/observability/communication_timeline.py``
(``COMMUNICATION_TIMELINE_VERSION = 2``), with the bucket lifecycle of
``slime/observability/weight_sync_trace.py``. This is an independent implementation of the
documented layout, not slime's code:

- one JSON object per line, ``json.dumps(record, sort_keys=True, separators=(",", ":"))``,
  flushed per line, written when a span ends or an event happens, in ``sequence_id`` order;
- ``sequence_id`` is taken when a span starts or an event happens, so a span that is still open
  holds back the records after it; a cancelled span (slime's trailing ``weight_convert`` probe
  when the bucket iterator is exhausted) leaves a hole in the sequence;
- the standard fields (``global_step``, ``rollout_id``, ``weight_version``, ``bucket_id``,
  ``trainer_rank``, ``engine_id``, ``message_bytes``, ``transport``) are pulled out of the
  context and the call's fields, null when absent (``trainer_rank`` defaults to the rank); the
  rest go into ``metadata``;
- the path template takes ``{rank}``, ``{trainer_rank}``, ``{local_rank}``, ``{pid}``,
  ``{hostname}``, ``{role}``, ``{world_size}``; ``.role-<role>`` is appended for a non-trainer
  role without ``{role}``/``{pid}``, and ``.rank-N`` for ``world_size > 1`` without
  ``{rank}``/``{trainer_rank}``/``{pid}``.

``clock`` lets synthetic cases write exact, deterministic times: a callable returning
``(wall_ns, monotonic_ns)`` (default :func:`system_clock`), e.g. a :class:`ManualClock`.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TIMELINE_ENV = "SLIME_COMMUNICATION_TIMELINE"
RUN_ID_ENV = "SLIME_COMMUNICATION_TIMELINE_RUN_ID"
SCHEMA_VERSION = 2

STANDARD_FIELDS = (
    "global_step",
    "rollout_id",
    "weight_version",
    "bucket_id",
    "trainer_rank",
    "engine_id",
    "message_bytes",
    "transport",
)
# Keys schema 2 added to every record (absent from schema 1).
V2_KEYS = {
    "gpu_timestamp_semantics": "event-bracket",
    "timestamp_domain": "process-realtime-projected-cuda-event",
    "clock_sync_error_bound_us": None,
}

Clock = Callable[[], tuple[int, int]]


def system_clock() -> tuple[int, int]:
    """(wall ns, monotonic ns) as slime reads them: ``time.time_ns`` and
    ``time.perf_counter_ns`` (CLOCK_MONOTONIC on Linux)."""
    return time.time_ns(), time.perf_counter_ns()


class ManualClock:
    """A clock that moves only when told: both readings advance together."""

    def __init__(self, wall_ns: int, mono_ns: int) -> None:
        self.wall_ns = wall_ns
        self.mono_ns = mono_ns

    def __call__(self) -> tuple[int, int]:
        return self.wall_ns, self.mono_ns

    def advance(self, seconds: float) -> None:
        ns = round(seconds * 1e9)
        self.wall_ns += ns
        self.mono_ns += ns


def resolve_path(
    template: str,
    *,
    rank: int,
    local_rank: int,
    role: str,
    world_size: int,
    pid: int,
    hostname: str,
) -> Path:
    """The file one process writes for ``template`` (slime's placeholder and suffix rules)."""
    values = {
        "rank": rank,
        "trainer_rank": rank,
        "local_rank": local_rank,
        "pid": pid,
        "hostname": hostname,
        "role": role,
        "world_size": world_size,
    }
    path = Path(template.format_map(values)).expanduser()
    if role != "trainer" and "{role}" not in template and "{pid}" not in template:
        path = _add_suffix(path, f"role-{role}")
    if world_size > 1 and not any(f"{{{k}}}" in template for k in ("rank", "trainer_rank", "pid")):
        path = _add_suffix(path, f"rank-{rank}")
    return path


def _add_suffix(path: Path, tag: str) -> Path:
    """``dir/name.jsonl`` -> ``dir/name.<tag>.jsonl`` (``dir/name.<tag>`` without a suffix)."""
    suffix = path.suffix
    stem = path.name[: -len(suffix)] if suffix else path.name
    return path.with_name(f"{stem}.{tag}{suffix}")


class Span:
    """The handle a ``Timeline.span`` block receives: add fields, or cancel the record."""

    def __init__(self, record: dict[str, Any], start_mono_ns: int) -> None:
        self.record = record
        self.start_mono_ns = start_mono_ns
        self.cancelled = False

    def update(self, **fields: Any) -> None:
        for name, value in fields.items():
            if name in STANDARD_FIELDS:
                self.record[name] = value
            else:
                self.record["metadata"][name] = value

    def cancel(self) -> None:
        """Drop the record; its ``sequence_id`` stays used (a hole in the file's sequence)."""
        self.cancelled = True


class Timeline:
    """One process's append-only timeline file."""

    def __init__(
        self,
        path_template: str,
        *,
        rank: int,
        world_size: int,
        role: str = "trainer",
        run_id: str | None = None,
        local_rank: int = 0,
        schema_version: int = SCHEMA_VERSION,
        clock: Clock | None = None,
        pid: int | None = None,
        hostname: str | None = None,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.role = role
        self.local_rank = local_rank
        self.run_id = run_id or os.environ.get(RUN_ID_ENV) or uuid.uuid4().hex
        self.schema_version = schema_version
        self.clock = clock or system_clock
        self.pid = os.getpid() if pid is None else pid
        self.hostname = socket.gethostname() if hostname is None else hostname
        self.path = resolve_path(
            path_template,
            rank=rank,
            local_rank=local_rank,
            role=role,
            world_size=world_size,
            pid=self.pid,
            hostname=self.hostname,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8", buffering=1)
        self._context: list[dict[str, Any]] = [{}]
        self._next_sequence_id = 0
        self._next_write_id = 0
        self._pending: dict[int, dict[str, Any] | None] = {}

    @contextmanager
    def context(self, **fields: Any) -> Iterator[None]:
        """Fields added to every record made inside the block."""
        self._context.append({**self._context[-1], **fields})
        try:
            yield
        finally:
            self._context.pop()

    @contextmanager
    def span(self, operation: str, **fields: Any) -> Iterator[Span]:
        """A span record around the block; an exception marks it ``error`` and propagates."""
        wall, mono = self.clock()
        record = self._base_record(operation, fields)
        record.update(
            record_type="span",
            api_launch_timestamp_ns=wall,
            api_launch_monotonic_ns=mono,
            stream_id=None,
        )
        span = Span(record, mono)
        try:
            yield span
        except BaseException as error:
            self._finish(span, error)
            raise
        self._finish(span, None)

    def event(self, operation: str, **fields: Any) -> None:
        """An instantaneous record (launch == completion, ``duration_ns`` 0)."""
        wall, mono = self.clock()
        record = self._base_record(operation, fields)
        record.update(
            record_type="event",
            api_launch_timestamp_ns=wall,
            api_return_timestamp_ns=wall,
            completion_timestamp_ns=wall,
            consumer_timestamp_ns=None,
            api_launch_monotonic_ns=mono,
            completion_monotonic_ns=mono,
            duration_ns=0,
            gpu_start_timestamp_ns=None,
            gpu_end_timestamp_ns=None,
            gpu_elapsed_ns=None,
            status="ok",
        )
        self._queue(record["sequence_id"], record)

    def close(self) -> None:
        self._file.close()

    def _base_record(self, operation: str, fields: dict[str, Any]) -> dict[str, Any]:
        merged = {**self._context[-1], **fields}
        standard = {name: merged.pop(name, None) for name in STANDARD_FIELDS}
        if standard["trainer_rank"] is None:
            standard["trainer_rank"] = self.rank
        logical = (
            standard["global_step"],
            standard["rollout_id"],
            standard["weight_version"],
            standard["bucket_id"],
            operation,
        )
        sequence_id = self._next_sequence_id
        self._next_sequence_id += 1
        record: dict[str, Any] = {"schema_version": self.schema_version, "framework": "slime"}
        if self.schema_version != 1:
            record.update(V2_KEYS)
        record.update(
            run_id=self.run_id,
            role=self.role,
            rank=self.rank,
            local_rank=self.local_rank,
            world_size=self.world_size,
            hostname=self.hostname,
            pid=self.pid,
            sequence_id=sequence_id,
            logical_operation_id="/".join("-" if v is None else str(v) for v in logical),
            operation=operation,
            metadata=merged,
            **standard,
        )
        return record

    def _finish(self, span: Span, error: BaseException | None) -> None:
        record = span.record
        if span.cancelled:
            self._queue(record["sequence_id"], None)
            return
        wall, mono = self.clock()
        record.update(
            api_return_timestamp_ns=wall,
            completion_timestamp_ns=wall,
            consumer_timestamp_ns=None,
            completion_monotonic_ns=mono,
            duration_ns=mono - span.start_mono_ns,
            gpu_start_timestamp_ns=None,
            gpu_end_timestamp_ns=None,
            gpu_elapsed_ns=None,
            status="ok" if error is None else "error",
        )
        if error is not None:
            record["metadata"]["error_type"] = type(error).__name__
            record["metadata"]["error_message"] = str(error)
        self._queue(record["sequence_id"], record)

    def _queue(self, sequence_id: int, record: dict[str, Any] | None) -> None:
        """Hold a finished record until every earlier sequence id is written or cancelled."""
        self._pending[sequence_id] = record
        while self._next_write_id in self._pending:
            ready = self._pending.pop(self._next_write_id)
            if ready is not None:
                line = json.dumps(ready, sort_keys=True, separators=(",", ":"))
                self._file.write(line + "\n")
                self._file.flush()
            self._next_write_id += 1
