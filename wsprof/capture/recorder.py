"""The recorder: bounded in-memory queues drained to the trace file by a background thread.

Hooks append rows to ``collections.deque`` objects (``append`` and ``popleft`` are atomic under
the GIL, so producers never take a lock). A call row is 14 integers in
:data:`RAW_CALL_COLUMNS` order packed into one ``bytes`` object (not tracked by the garbage
collector; about 145 bytes queued): strings are interned ids
(:class:`~wsprof.trace.writer.StringTable`) and the (op, api, layer) triple is one hook id, so
the writer turns a batch into a matrix with one ``numpy.frombuffer``. A daemon thread drains
the queues every ``flush_interval_s`` into :class:`~wsprof.trace.writer.TraceWriter` in one
transaction, so a killed process loses at most one interval. When the queue of calls holds
``max_pending`` rows, new rows are dropped and counted (``dropped_calls``), never silently.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from wsprof.capture.settings import env_int
from wsprof.trace.model import TRACE_SUFFIX
from wsprof.trace.retention import Retention
from wsprof.trace.writer import TraceWriter

_now = time.monotonic_ns

#: Most call rows written per transaction (bounds a flush's transient memory to ~10 MiB).
FLUSH_CHUNK_ROWS = 32_768

#: Column order of a call row as hooks append it (all ints; -1 for none/unknown).
RAW_CALL_COLUMNS = (
    "t_start_ns", "t_end_ns", "backend_ns", "n_backend", "thread", "hook", "bytes", "dtype",
    "grp", "is_async", "site", "step", "phase", "error",
)


def identity_meta(source: str) -> dict[str, Any]:
    """Who wrote a trace: wsprof and Python versions, host, pid, source, and the clock anchor
    (one monotonic reading paired with one wall-clock reading, to align processes)."""
    from wsprof import __version__

    return {
        "wsprof_version": __version__,
        "python_version": sys.version.split()[0],
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "source": source,
        "anchor": {"monotonic_ns": _now(), "unix_ns": time.time_ns()},
    }


def default_out_dir() -> str:
    """``$WSPROF_OUT``, else ``./wsprof-out/<YYYYmmdd-HHMMSS>``."""
    env = os.environ.get("WSPROF_OUT")
    if env:
        return env
    return os.path.join("wsprof-out", time.strftime("%Y%m%d-%H%M%S"))


def trace_path(out_dir: str, pid: int | None = None) -> str:
    """``<out_dir>/<host>-<pid>.wsprof``."""
    return os.path.join(out_dir, f"{socket.gethostname()}-{pid or os.getpid()}{TRACE_SUFFIX}")


def new_trace_path(out_dir: str, tag: str = "") -> str:
    """``<out_dir>/<host>-<pid><tag>.wsprof``, or with ``-2``, ``-3``, ... before the suffix when
    that file exists (a second ``patch()`` in one process, a pid reused by a container): never
    append to an older trace."""
    path = trace_path(out_dir)
    base = path[: -len(TRACE_SUFFIX)] + tag
    path = base + TRACE_SUFFIX
    k = 2
    while os.path.lexists(path):
        path = f"{base}-{k}{TRACE_SUFFIX}"
        k += 1
    return path


def _identity_from_env() -> dict[str, Any]:
    """Rank and world size from a launcher's environment (torchrun sets ``RANK`` and
    ``WORLD_SIZE``), for a process whose process group is not up yet (or already gone)."""
    try:
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if rank is None or world is None:
            return {}
        return {"rank": int(rank), "world_size": int(world)}
    except ValueError:
        return {}


class Recorder:
    """Owns the queues, the trace writer and the writer thread of one process.

    Args:
        out_dir: run folder; the trace is ``<out_dir>/<host>-<pid>.wsprof``.
        source: how records are captured: 'patch' | 'attach' | 'run'.
        flush_interval_s: seconds between background flushes.
        max_pending: most call rows held in memory before new ones are dropped (a queued row
            takes about 145 bytes, so the default, 131,072 or ``$WSPROF_MAX_PENDING``, bounds the
            queue near 18 MiB). When a flush
            finds the queue over a quarter full, the next one comes sooner (bursts).
        retention: which steps keep full call detail (:mod:`wsprof.trace.retention`); None
            keeps every call.

    Raises:
        OSError: the trace file cannot be created.
    """

    def __init__(
        self,
        out_dir: str,
        source: str = "patch",
        flush_interval_s: float = 0.5,
        max_pending: int | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.path = new_trace_path(out_dir)
        self.pid = os.getpid()
        self.flush_interval_s = flush_interval_s
        self.max_pending = max_pending or env_int("WSPROF_MAX_PENDING", 131_072, minimum=1)
        self.calls: deque[bytes] = deque()
        self.updates: deque[tuple[int, int, int, int]] = deque()
        self.spans: deque[tuple[Any, ...]] = deque()
        self.counters: deque[tuple[Any, ...]] = deque()
        self.events: deque[tuple[Any, ...]] = deque()
        self.sites: deque[tuple[Any, ...]] = deque()
        #: c10d's issued-collective readings (:mod:`wsprof.capture.audit`)
        self.issued: deque[tuple[Any, ...]] = deque()
        self.dropped_calls = 0
        #: call rows taken from the queue whose write failed (disk full, read-only folder)
        self.lost_calls = 0
        #: async work handles forgotten before completion was seen (bounded table)
        self.forgotten_async = 0
        #: host ns a hooked call pays, measured at install (-1: not measured)
        self.hook_ns_per_call = -1
        self.internal_errors = 0
        self.write_errors = 0
        self.flush_ns_total = 0
        self._rank_known = False
        self._remembered: dict[str, Any] = {}  # identity taken while the group was up
        self.lock = threading.Lock()  # held by flush; the calibration holds it too
        self._flushing_here = threading.local()
        self._stop = threading.Event()
        self._writer = TraceWriter(self.path, retention=retention)
        self._writer.set_meta(self._static_meta(source))
        self.strings = self._writer.strings
        #: Called by the writer thread before each flush (the hooks' re-wrap audit).
        self.on_flush: list[Any] = []
        #: The counter sampler (:mod:`wsprof.capture.counters`), stopped before the last flush.
        self.sampler: Any = None
        # hook id -> (op, api, layer) string ids
        self._hooks: list[tuple[int, int, int]] = []
        self._thread = threading.Thread(target=self._run, name="wsprof-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    @staticmethod
    def _static_meta(source: str) -> dict[str, Any]:
        torch_mod = sys.modules.get("torch")
        alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        return {
            **identity_meta(source),
            "torch_version": getattr(torch_mod, "__version__", None),
            "argv": sys.argv,
            # The allocator configuration is recorded because it decides how segments grow;
            # no other environment value is ever recorded.
            "pytorch_cuda_alloc_conf": alloc_conf,
            "expandable_segments": "expandable_segments:true" in alloc_conf.lower(),
        }

    def hook_id(self, op: str, api: str, layer: str) -> int:
        """The id call rows carry for (canonical op, name called, layer)."""
        self._hooks.append((self.strings.intern(op), self.strings.intern(api),
                            self.strings.intern(layer)))
        return len(self._hooks) - 1

    def _call_matrix(self, rows: list[bytes]) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Packed call rows (14 little-endian int64 each) -> ``(n, 16)`` matrix in
        :data:`~wsprof.trace.model.CALL_COLUMNS` order."""
        raw = np.frombuffer(b"".join(rows), dtype="<i8").astype(np.int64).reshape(
            -1, len(RAW_CALL_COLUMNS))
        hooks = np.array(self._hooks, dtype=np.int64).reshape(-1, 3)[raw[:, 5]]
        return np.concatenate([raw[:, :5], hooks, raw[:, 6:]], axis=1)

    def internal_error(self, where: str, exc: BaseException) -> None:
        """Count an error inside wsprof and keep the first of each kind as an event."""
        self.internal_errors += 1
        if self.internal_errors <= 100:
            self.events.append((_now(), "internal_error", f"{where}: {type(exc).__name__}: {exc}"))

    def event(self, kind: str, detail: str) -> None:
        """Record a fact (wrapper found, sampler status, warning)."""
        self.events.append((_now(), kind, detail))

    def _run(self) -> None:
        wait_s = self.flush_interval_s
        while not self._stop.wait(wait_s):
            busy = len(self.calls) > self.max_pending // 4
            self.flush()
            wait_s = min(0.05, self.flush_interval_s) if busy else self.flush_interval_s

    def remember_identity(self) -> None:
        """Take rank, world size and backend now (before the group is destroyed); the next
        flush writes them, and the exit line uses them."""
        self._identity()

    def _identity(self) -> dict[str, Any]:
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            return self._remembered or _identity_from_env()
        try:
            if not dist.is_initialized():
                return self._remembered or _identity_from_env()
            self._remembered = {
                "rank": dist.get_rank(),
                "world_size": dist.get_world_size(),
                "backend": str(dist.get_backend()),
            }
            return dict(self._remembered)
        except Exception:  # noqa: BLE001 - identity is best effort
            return dict(self._remembered)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Write everything queued so far. Never raises: failures are counted and recorded.

        In a forked child (DataLoader workers, ...) this does nothing: the queues and the
        connection are the parent's.

        Args:
            timeout_s: wait at most this long for a flush in progress (a signal handler: the
                flush it interrupted on its own thread never finishes while it waits, so
                it must not wait for ever); None waits.

        Returns:
            False when it did not flush (another process, or the wait timed out).
        """
        if os.getpid() != self.pid:
            return False
        if getattr(self._flushing_here, "on", False):
            return False  # a signal handler that interrupted this thread's own flush
        if not self.lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
            return False
        try:
            self._flushing_here.on = True
            self._flush_locked()
        finally:
            self._flushing_here.on = False
            self.lock.release()
        return True

    def _flush_locked(self) -> None:
        t0 = _now()
        from wsprof.capture import audit

        audit.read(self)  # c10d's issued counts: what a killed process still has on disk
        for fn in list(self.on_flush):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - never raise into training
                self.internal_error("on_flush", e)
        batches: dict[str, list[tuple[Any, ...]]] = {}
        for name in ("sites", "updates", "spans", "counters", "events", "issued"):
            q: deque[tuple[Any, ...]] = getattr(self, name)
            n = len(q)
            batches[name] = [q.popleft() for _ in range(n)]
        batches["call_updates"] = batches.pop("updates")
        pending = len(self.calls)
        try:
            meta: dict[str, Any] = {}
            if not self._rank_known:
                meta.update(self._identity())
                self._rank_known = "backend" in meta  # from the live group: final
            # Calls go in chunks of at most FLUSH_CHUNK_ROWS, so that the transient copies a
            # flush makes stay small however long the queue is.
            while True:
                k = min(pending, FLUSH_CHUNK_ROWS)
                pending -= k
                calls = [self.calls.popleft() for _ in range(k)]
                try:
                    self._writer.write(batches, self._call_matrix(calls) if calls else None)
                except Exception:
                    self.lost_calls += len(calls)
                    raise
                batches = {}
                if pending <= 0:
                    break
            meta["self"] = {
                "dropped_calls": self.dropped_calls,
                "lost_calls": self.lost_calls,
                "forgotten_async": self.forgotten_async,
                "internal_errors": self.internal_errors,
                "write_errors": self.write_errors,
                # this flush included, up to its last write
                "flush_ns_total": self.flush_ns_total + (_now() - t0),
                "hook_ns_per_call": self.hook_ns_per_call,
            }
            if self.sampler is not None:
                meta["self"]["probes"] = self.sampler.stats()
            self._writer.set_meta(meta)
        except Exception as e:  # noqa: BLE001 - never raise into training
            self.write_errors += 1
            if self.write_errors == 1:
                sys.stderr.write(f"wsprof: cannot write {self.path}: {e}\n")
        self.flush_ns_total += _now() - t0

    def close(self) -> None:
        """Stop the writer thread, flush what is left and close the file. Idempotent."""
        if self._stop.is_set() or os.getpid() != self.pid:
            return
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                self.sampler.stop()
        self._stop.set()
        self._thread.join(timeout=10)
        self.flush()
        with contextlib.suppress(Exception):
            self._writer.close()
        atexit.unregister(self.close)
