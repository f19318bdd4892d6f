"""The recorder: a crash-safe capture buffer drained into the trace file by a writer thread.

Hooks write each call, async completion, span, counter sample and issued-collective reading as
one fixed-size record into the ring (:mod:`wsprof.capture.buffer`, format in
:mod:`wsprof.trace.ring`), a shared mapping of ``<trace>.ring``; strings, caller sites, hook
ids and events go to the journal (:mod:`wsprof.trace.journal`) the moment they are made. Both
files survive any death of the process, so a call that returned is never lost: the reader
recovers what the trace had not received (:mod:`wsprof.trace.salvage`). A daemon thread drains
the ring every ``flush_interval_s`` into :class:`~wsprof.trace.writer.TraceWriter` in one
transaction, with the last sequence number drained; a clean close removes both files. When
the ring is full (the writer fell behind), new records are dropped and counted per step
(``dropped_calls``, ``meta['self']['dropped_by_step']``), never silently; the ring's size is
fixed (:data:`~wsprof.trace.ring.DEFAULT_CAPACITY` records, ``$WSPROF_RING_RECORDS``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from wsprof.capture import buffer
from wsprof.capture import settings as cfg
from wsprof.capture.links import read_links
from wsprof.capture.world import WorldProbe
from wsprof.contracts.events import EventKind
from wsprof.contracts.overhead import ProbeBudget, SelfOverhead
from wsprof.trace import journal as jfmt
from wsprof.trace import outputs
from wsprof.trace import ring as fmt
from wsprof.trace.model import TRACE_SUFFIX
from wsprof.trace.retention import Retention
from wsprof.trace.writer import TraceWriter

_now = time.monotonic_ns

#: Most call rows written per transaction (bounds a flush's transient memory to ~10 MiB).
FLUSH_CHUNK_ROWS = 32_768

#: Column order of a raw call row (all ints; -1 for none/unknown): the ring's call payload
#: with the hook id (standing for op, api, layer) at index 5.
RAW_CALL_COLUMNS = (
    "t_start_ns",
    "t_end_ns",
    "backend_ns",
    "n_backend",
    "thread",
    "hook",
    "bytes",
    "dtype",
    "grp",
    "is_async",
    "site",
    "step",
    "phase",
    "error",
)


def identity_meta(source: str) -> dict[str, Any]:
    """Who wrote a trace: wsprof and Python versions, host, pid, source, and the clock anchor
    (one monotonic reading paired with one wall-clock reading, to align processes)."""
    from wsprof._version import __version__

    return {
        "wsprof_version": __version__,
        "python_version": sys.version.split()[0],
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "source": source,
        "anchor": {"monotonic_ns": _now(), "unix_ns": time.time_ns()},
    }


def default_out_dir(settings: cfg.Settings) -> str:
    """``$WSPROF_OUT``, else ``./wsprof-out/<YYYYmmdd-HHMMSS>``.

    Args:
        settings: the ``WSPROF_*`` settings (their ``out``; never read here).
    """
    if settings.out:
        return settings.out
    return os.path.join("wsprof-out", time.strftime("%Y%m%d-%H%M%S"))


def trace_path(out_dir: str, pid: int | None = None) -> str:
    """``<out_dir>/<host>-<pid>.wsprof``."""
    return os.path.join(out_dir, f"{socket.gethostname()}-{pid or os.getpid()}{TRACE_SUFFIX}")


def new_trace_path(out_dir: str, tag: str = "") -> str:
    """``<out_dir>/<host>-<pid><tag>.wsprof``, or with ``-2``, ``-3``, ... before the suffix when
    that file, its ring, its journal or one of SQLite's side files (``-wal``, ``-shm``,
    ``-journal``) exists (a second ``patch()`` in one process, a pid reused by a container, a
    link planted at a predictable name in a shared folder): never append to an older trace,
    never open a name someone else made, never let SQLite open a side file it did not create
    (:func:`wsprof.trace.outputs.unique_path`). The files are then created exclusively
    (:func:`wsprof.trace.outputs.create_file`): a name taken meanwhile fails there.

    Raises:
        FileExistsError: every name tried is taken.
    """
    base = trace_path(out_dir)[: -len(TRACE_SUFFIX)] + tag
    return outputs.unique_path(base, TRACE_SUFFIX, siblings=(fmt.RING_SUFFIX, jfmt.JOURNAL_SUFFIX))


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


class _Sink:
    """What hooks, markers, the audit and the counter sampler append rows to: each row becomes
    one ring record (``encode`` -> kind word and 13 payload words) or one journal entry. An
    error is counted, never raised; in a forked child nothing is written (the ring is the
    parent's)."""

    def __init__(self, rec: Recorder, encode: Any) -> None:
        self._rec = rec
        self._encode = encode

    def append(self, row: tuple[Any, ...]) -> None:
        rec = self._rec
        if rec.pid != os.getpid():
            return
        try:
            self._encode(row)
        except Exception as e:  # noqa: BLE001 - never raise into training
            rec.internal_error("record", e)


def _disable_in_child(ref: weakref.ReferenceType[Recorder]) -> None:
    """A forked child (DataLoader workers, ...) shares the parent's ring mapping: it must never
    write there."""
    rec = ref()
    if rec is not None:
        rec.ring.disable_in_child()


def _zeros(n: int) -> tuple[int, ...]:
    return (0,) * n


class Recorder:
    """Owns the capture buffer (ring and journal), the trace writer and the writer thread of
    one process.

    Args:
        out_dir: run folder; the trace is ``<out_dir>/<host>-<pid>.wsprof``, with
            ``.wsprof.ring`` and ``.wsprof.journal`` beside it until a clean close.
        source: how records are captured: 'patch' | 'attach' | 'run' | 'inject'.
        flush_interval_s: seconds between drains of the ring into the trace (> 0).
        ring_records: the ring's capacity in records (rounded up to a power of two; 128 bytes
            each, so the default :data:`~wsprof.trace.ring.DEFAULT_CAPACITY` is a 16 MiB sparse
            file); default ``settings.ring_records`` (``$WSPROF_RING_RECORDS``), else that
            default. When a drain finds the ring over a quarter full, the next one comes sooner
            (bursts); when it is full, records are dropped and counted per step.
        retention: which steps keep full call detail (:mod:`wsprof.trace.retention`); None
            keeps every call.
        settings: the session's ``WSPROF_*`` settings (never read here): the ring's size and
            kind (``native``: compiled where built); default :class:`Settings` defaults.

    Raises:
        OSError: the trace, ring or journal file cannot be created.
        ValueError: ``flush_interval_s`` is not a positive number of seconds, or
            ``ring_records`` is not positive.
    """

    def __init__(
        self,
        out_dir: str,
        source: str = "patch",
        flush_interval_s: float = 0.5,
        ring_records: int | None = None,
        retention: Retention | None = None,
        settings: cfg.Settings | None = None,
    ) -> None:
        if not (
            isinstance(flush_interval_s, (int, float))
            and flush_interval_s > 0
            and flush_interval_s < float("inf")
        ):
            raise ValueError(
                f"flush_interval_s must be a positive number of seconds, not {flush_interval_s!r}"
            )
        self.out_dir = out_dir
        self.path = new_trace_path(out_dir)
        self.pid = os.getpid()
        self.flush_interval_s = float(flush_interval_s)
        s = cfg.Settings() if settings is None else settings
        #: the link limit the user stated (``WSPROF_LINK_GBPS``), GB/s; None: detected
        self.link_gbps = s.link_gbps
        # $WSPROF_RING_RECORDS, else $WSPROF_MAX_PENDING (its older name), else the default
        records = ring_records or s.ring_records or fmt.DEFAULT_CAPACITY
        self.capacity = fmt.capacity_for(records)
        #: c10d's issued-collective readings are appended here (:mod:`wsprof.capture.audit`)
        self.lost_calls = 0  # records found torn or damaged at a drain (should stay 0)
        #: async work handles forgotten before completion was seen (bounded table)
        self.forgotten_async = 0
        #: host ns a hooked call pays, measured at install (-1: not measured)
        self.hook_ns_per_call = -1
        self.internal_errors = 0
        self.write_errors = 0
        self.flush_ns_total = 0
        #: CPU time the drains took on their own thread, ns (wall time above includes waits
        #: for the GIL while the training thread runs)
        self.flush_cpu_ns_total = 0
        self._rank_known = False
        self._remembered: dict[str, Any] = {}  # identity taken while the group was up
        self.world = WorldProbe()  # world, groups and role modules (meta 'world', 'groups')
        self._world_written: tuple[int, int, bool] | None = None
        self.lock = threading.Lock()  # held by a drain
        self._flushing_here = threading.local()
        self._stop = threading.Event()
        self._writer = TraceWriter(
            self.path, retention=retention, allow_shared_out=s.allow_shared_out
        )
        made = [self.path]
        try:
            self.journal = jfmt.Journal(jfmt.journal_path(self.path))
            made.append(jfmt.journal_path(self.path))
            self.ring, self._mm = buffer.open_ring(
                fmt.ring_path(self.path), self.capacity, self.pid, native=s.native
            )
        except BaseException as e:
            # A name taken under us (a link planted between the check and the create): the
            # files made so far are ours; leave no empty trace behind. A ring that failed
            # for any other reason (a full disk) was created by us (O_EXCL) and goes too.
            self._writer.close()
            if len(made) > 1:
                self.journal.close()
                if not isinstance(e, FileExistsError):
                    made.append(fmt.ring_path(self.path))
            for path in made:
                with contextlib.suppress(OSError):
                    os.remove(path)
            raise
        self.strings = self._writer.strings
        self.strings.journal = self.journal
        self._view: npt.NDArray[np.int64] = np.frombuffer(
            self._mm, dtype="<i8", count=self.capacity * fmt.RECORD_WORDS, offset=fmt.HEADER_BYTES
        ).reshape(self.capacity, fmt.RECORD_WORDS)
        self._writer.set_meta(self._static_meta(source))
        intern = self.strings.intern
        put = self.ring.put
        span_w, counter_w, update_w, issued_w = fmt.SPAN, fmt.COUNTER, fmt.UPDATE, fmt.ISSUED
        z7, z9, z10 = _zeros(7), _zeros(9), _zeros(10)
        self.spans = _Sink(
            self, lambda r: put(span_w, intern(r[0]), intern(r[1]), r[2], r[3], r[4], r[5], *z7)
        )
        self.counters = _Sink(
            self, lambda r: put(counter_w, r[0], intern(r[1]), fmt.float_word(float(r[2])), *z10)
        )
        self.updates = _Sink(self, lambda r: put(update_w, r[0], r[1], r[2], r[3], *z9))
        self.issued = _Sink(
            self,
            lambda r: put(
                issued_w, r[0], r[1], intern(r[2]), intern(r[3]), r[4], intern(r[5]), *z7
            ),
        )
        add = self.journal.add
        self.events = _Sink(self, lambda r: add(["e", r[0], r[1], r[2]]))
        self.sites = _Sink(self, lambda r: add(["site", r[0], r[1], r[2], r[3]]))
        #: Called by the writer thread before each flush (the hooks' re-wrap audit).
        self.on_flush: list[Any] = []
        #: The counter sampler (:mod:`wsprof.capture.counters`), stopped before the last flush.
        self.sampler: Any = None
        #: The Flight Recorder reader (:mod:`wsprof.capture.flight`), set by the session when
        #: the hooks are installed: each drain tells it the calls drained.
        self.flight: Any = None
        # hook id -> (op, api, layer) string ids
        self._hooks: dict[int, tuple[int, int, int]] = {}
        self._hook_lookup = np.full((0, 3), -1, dtype=np.int64)
        self._hooks_stored = 0  # hooks in the trace's meta['hooks'] (the last drain's)
        self.closed_cleanly = False
        self._last_write_ok = True  # the last drain reached the trace
        if hasattr(os, "register_at_fork"):
            me = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _disable_in_child(me))
        self._thread = threading.Thread(target=self._run, name="wsprof-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _static_meta(self, source: str) -> dict[str, Any]:
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
            # Until a drain writes meta['ring'], nothing is drained: a reader of a trace whose
            # process died before its first drain recovers everything from the ring.
            "ring": {
                "drained": 0,
                "journal_bytes": 0,
                "capacity": self.capacity,
                "native": bool(getattr(self.ring, "native", False)),
            },
        }

    def written(self) -> int:
        """Call records written to the ring so far (collectives recorded)."""
        return int(self.ring.calls)

    def register_hook(self, hook: int, op: str, api: str, layer: str) -> None:
        """Name hook id ``hook`` as (canonical op, name called, layer) for this trace (call
        records carry the hook id only). Ids are the process's, stable across sessions."""
        ids = (self.strings.intern(op), self.strings.intern(api), self.strings.intern(layer))
        if self._hooks.get(hook) == ids:
            return
        self._hooks[hook] = ids
        self.journal.add(["hook", hook, *ids])

    def internal_error(self, where: str, exc: BaseException) -> None:
        """Count an error inside wsprof and keep the first of each kind as an event."""
        self.internal_errors += 1
        if self.internal_errors <= 100:
            self.event(EventKind.INTERNAL_ERROR, f"{where}: {type(exc).__name__}: {exc}")

    def event(self, kind: EventKind, detail: str) -> None:
        """Record a fact (wrapper found, sampler status, warning): ``kind``'s on-disk text and
        ``detail`` (the format :func:`wsprof.contracts.events.parse_event` reads)."""
        self.events.append((_now(), kind.value, detail))

    def _describe_links(self) -> None:
        """The links this machine has (NVLink, PCIe, NIC ports) and the limit the user stated,
        into ``meta['links']`` (:func:`wsprof.capture.links.read_links`, which never raises),
        read once on this thread: NVML's start-up stays off the training thread."""
        try:
            links = read_links()
            if self.link_gbps is not None:
                links["stated_gbytes_per_s"] = self.link_gbps
            with self.lock:
                self._writer.set_meta({"links": links})
        except Exception as e:  # noqa: BLE001 - never raised into training
            self.internal_error("links", e)

    def _run(self) -> None:
        wait_s = self.flush_interval_s
        self._describe_links()
        while not self._stop.wait(wait_s):
            busy = self.ring.head - self.ring.drained > self.capacity // 4
            self.flush()
            wait_s = min(0.05, self.flush_interval_s) if busy else self.flush_interval_s

    def remember_identity(self) -> None:
        """Take rank, world size and backend now (before the group is destroyed); the next
        flush writes them, and the exit line uses them."""
        self._identity()
        with contextlib.suppress(Exception):
            self.world.read()

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
        """Drain the ring and the journal into the trace. Never raises: failures are counted
        and recorded, and what failed stays in the ring for the next drain.

        In a forked child (DataLoader workers, ...) this does nothing: the ring and the
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

    def _records(self, lo: int, hi: int) -> npt.NDArray[np.int64]:
        """Ring records with sequence numbers ``lo + 1 .. hi`` that check; the others (torn or
        damaged: never expected) are counted in :attr:`lost_calls`."""
        seqs = np.arange(lo + 1, hi + 1, dtype=np.int64)
        start, n = (lo + 1) & (self.capacity - 1), hi - lo
        # One or two contiguous runs of slots (the ring wraps once at most), copied out.
        first = self._view[start : start + n]
        m: npt.NDArray[np.int64] = (
            np.concatenate([first, self._view[: n - len(first)]])
            if len(first) < n
            else first.copy()
        ).astype(np.int64, copy=False)
        ok = (m[:, 0] == seqs) & fmt.checks(m)
        if not bool(ok.all()):
            self.lost_calls += int((~ok).sum())
            m = m[ok]
        return m

    def _call_matrix(self, raw: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Raw call rows (:data:`RAW_CALL_COLUMNS`) -> ``(n, 16)`` matrix in
        :data:`~wsprof.trace.model.CALL_COLUMNS` order."""
        if len(self._hook_lookup) != len(self._hooks):
            top = max(self._hooks, default=-1) + 1
            lookup = np.full((top, 3), -1, dtype=np.int64)
            for h, ids in self._hooks.items():
                lookup[h] = ids
            self._hook_lookup = lookup
        hooks = self._hook_lookup[raw[:, 5]]
        out: npt.NDArray[np.int64] = np.concatenate([raw[:, :5], hooks, raw[:, 6:]], axis=1)
        return out

    def _flush_locked(self) -> None:
        t0 = _now()
        c0 = time.thread_time_ns()
        from wsprof.capture import audit

        audit.read(self)  # c10d's issued counts: what a killed process still has on disk
        for fn in list(self.on_flush):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - never raise into training
                self.internal_error("on_flush", e)
        ring = self.ring
        # The head first, then the journal: every string a record up to the head names was
        # journaled before that record was written.
        lo, hi = int(ring.drained), int(ring.head)
        entries, journal_bytes = self.journal.take()
        jrows = jfmt.rows(entries)
        try:
            # Who writes the rows (rank, world, roles): stored with the drain's first rows, in
            # their transaction, so that a reader (``watch``) never sees a step of a process
            # whose rank it cannot name.
            who: dict[str, Any] = {}
            if not self._rank_known:
                who.update(self._identity())
                self._rank_known = "backend" in who  # from the live group: final
            # Worlds and roles: each group once (a store round trip for its token), never at
            # close (a store whose server is gone must not be waited for).
            world = self.world.read(ask_stores=not self._stop.is_set())
            if self.world.state() != self._world_written:
                who.update(world)
                self._world_written = self.world.state()
            batches: dict[str, list[tuple[Any, ...]]] = {
                "strings": list(jrows.strings),
                "sites": list(jrows.sites),
                "events": list(jrows.events),
            }
            # At most FLUSH_CHUNK_ROWS records per transaction, so that the transient copies a
            # drain makes stay small however far behind it is.
            start = lo
            hooks_now = self._hooks_stored
            while True:
                end = min(hi, start + FLUSH_CHUNK_ROWS)
                dec = fmt.decode(self._records(start, end), self.strings.values)
                if self.flight is not None:
                    self.flight.saw(dec.calls)
                batches.update(spans=dec.spans, counters=dec.counters, issued=dec.issued)
                first = [(k, json.dumps(v)) for k, v in who.items()] if start == lo else []
                batches["meta"] = [
                    *first,
                    (
                        "ring",
                        json.dumps(
                            {
                                "drained": end,
                                "journal_bytes": journal_bytes,
                                "capacity": self.capacity,
                                "native": bool(getattr(ring, "native", False)),
                            }
                        ),
                    ),
                ]
                if start == lo and len(self._hooks) != self._hooks_stored:
                    # The hook table in the trace too: a salvage whose journal is gone or
                    # damaged still names the calls the ring kept.
                    batches["meta"].append(
                        (
                            "hooks",
                            json.dumps(
                                {str(h): list(ids) for h, ids in sorted(self._hooks.items())}
                            ),
                        )
                    )
                    hooks_now = len(self._hooks)
                self._writer.write(
                    batches, self._call_matrix(dec.calls) if len(dec.calls) else None, dec.updates
                )
                ring.drained = end
                batches = {}
                start = end
                if start >= hi:
                    break
            self._hooks_stored = hooks_now
            fmt.write_header_counts(self._mm, drained=hi, dropped=int(ring.dropped))
            stats = self.sampler.stats() if self.sampler is not None else None
            meta: dict[str, Any] = {}
            meta["self"] = SelfOverhead(
                dropped_calls=int(sum(ring.dropped_by_step.values())),
                dropped_records=int(ring.dropped),
                dropped_by_step={int(k): int(v) for k, v in ring.dropped_by_step.items()},
                lost_calls=self.lost_calls,
                forgotten_async=self.forgotten_async,
                internal_errors=self.internal_errors,
                write_errors=self.write_errors,
                journal_write_errors=self.journal.write_errors,
                # this flush included, up to its last write
                flush_ns_total=self.flush_ns_total + (_now() - t0),
                flush_cpu_ns_total=self.flush_cpu_ns_total + (time.thread_time_ns() - c0),
                hook_ns_per_call=self.hook_ns_per_call,
                ring_records=self.capacity,
                native_hooks=bool(getattr(ring, "native", False)),
                probes=None
                if stats is None
                else ProbeBudget(
                    spent_ns=stats["spent_ns"],
                    share=stats["share"],
                    by_probe=stats["by_probe"],
                    budget_fraction=stats["budget_fraction"],
                ),
            ).to_meta()
            if self.flight is not None:
                meta["flight"] = self.flight.stats()
            self._writer.set_meta(meta)
            self._last_write_ok = True
        except Exception as e:  # noqa: BLE001 - never raise into training
            self._last_write_ok = False
            if batches:  # this transaction's journal entries were not stored: next time
                self.journal.put_back(entries if start == lo else [])
            self.write_errors += 1
            if self.write_errors == 1:
                sys.stderr.write(
                    f"wsprof: cannot write {self.path}: {e}; records stay in "
                    f"{fmt.ring_path(self.path)} until it can\n"
                )
        self.flush_ns_total += _now() - t0
        self.flush_cpu_ns_total += time.thread_time_ns() - c0

    @property
    def dropped_calls(self) -> int:
        """Call records a full ring refused."""
        return int(sum(self.ring.dropped_by_step.values()))

    def close(self) -> None:
        """Stop the writer thread, drain what is left, mark the trace closed and remove the
        ring and journal when everything is in the trace. Idempotent."""
        if self._stop.is_set() or os.getpid() != self.pid:
            return
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                self.sampler.stop()
        self._stop.set()
        self._thread.join(timeout=10)
        if self.flight is not None:
            # Every call drained first: then each entry still waiting is decided.
            self.flush()
            try:
                self.flight.read(final=True)
            except Exception as e:  # noqa: BLE001 - never raise into training
                self.internal_error("flight", e)
        self.flush()
        with self.lock:
            complete = int(self.ring.drained) >= int(self.ring.head) and self._last_write_ok
            with contextlib.suppress(Exception):
                self._writer.set_meta(
                    {"closed": {"t_ns": _now(), "unix_ns": time.time_ns(), "complete": complete}}
                )
            self.closed_cleanly = complete
            with contextlib.suppress(Exception):
                self._writer.close()
            if complete:
                fmt.write_header_counts(
                    self._mm,
                    drained=int(self.ring.drained),
                    dropped=int(self.ring.dropped),
                    closed=True,
                )
            self.ring.close()
            self.journal.close()
            # Unmapped, so that many sessions in one process do not keep their rings mapped.
            self._view = np.zeros((0, fmt.RECORD_WORDS), dtype=np.int64)
            with contextlib.suppress(BufferError, ValueError):
                self._mm.close()
            if complete:
                for p in (fmt.ring_path(self.path), jfmt.journal_path(self.path)):
                    with contextlib.suppress(OSError):
                        os.unlink(p)
        atexit.unregister(self.close)
