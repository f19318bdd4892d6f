"""The capture buffer's writing side: a ring of records in a shared file mapping.

Format and reading: :mod:`wsprof.trace.ring`. Two implementations with one interface:
``wsprof.capture._fasthooks.Ring`` (C, built at install where a compiler exists; it is also
what the compiled hooks write to) and :class:`PyRing` (pure Python, everywhere else).
:func:`open_ring` picks one, as the session's settings say (``WSPROF_NATIVE``); the hooks
follow the ring (:func:`wsprof.capture.collectives.install` uses the compiled hooks only on a
compiled ring), so hooks and ring are always of one kind.

Interface: ``put(w1, *13 payload words) -> bool`` writes the next record (False: the ring was
full, the record dropped and counted); ``head`` is the last sequence number written;
``calls`` counts the call records among them; ``drained`` is set by the writer thread once
records up to it are in the trace; ``dropped`` and ``dropped_by_step`` (step -> dropped call
records) count what a full ring refused.
"""

from __future__ import annotations

import mmap
import os
import threading
from typing import TYPE_CHECKING, Any

from wsprof.trace import ring as fmt

if TYPE_CHECKING:
    from wsprof.capture.settings import Settings

_pack_into = __import__("struct").Struct(f"<{fmt.RECORD_WORDS}q").pack_into
_SALT = fmt.CHECK_SALT
_STEP_WORD = fmt.CALL_PAYLOAD.index("step")


class PyRing:
    """The pure-Python ring writer.

    Args:
        mm: a writable shared mapping of a file made by :func:`wsprof.trace.ring.create`.
        capacity: records (a power of two).
    """

    native = False

    def __init__(self, mm: mmap.mmap, capacity: int) -> None:
        self.mm = mm
        self.capacity = capacity
        self.head = 0
        self.calls = 0
        self.drained = 0
        self.dropped = 0
        self.dropped_by_step: dict[int, int] = {}
        # Re-entrant: a signal handler (the SIGTERM flush) may interrupt a put on its thread;
        # that inner put is refused and counted (_busy), never waited for (a deadlock).
        self._lock = threading.RLock()
        self._busy = False
        self.closed = False

    def put(
        self,
        w1: int,
        a: int,
        b: int,
        c: int,
        d: int,
        e: int,
        f: int,
        g: int,
        h: int,
        i: int,
        j: int,
        k: int,
        m: int,
        n: int,
    ) -> bool:
        """Write one record (kind and hook id in ``w1``, 13 payload words)."""
        with self._lock:
            if self.closed:
                return False
            if self._busy:
                self._drop(w1, k)
                return False
            self._busy = True  # before the sequence number is taken
            try:
                seq = self.head + 1
                if seq - self.drained > self.capacity:
                    self._drop(w1, k)
                    return False
                _pack_into(
                    self.mm,
                    fmt.HEADER_BYTES + (seq & (self.capacity - 1)) * fmt.RECORD_BYTES,
                    seq,
                    w1,
                    a,
                    b,
                    c,
                    d,
                    e,
                    f,
                    g,
                    h,
                    i,
                    j,
                    k,
                    m,
                    n,
                    _SALT ^ seq ^ w1 ^ a ^ b ^ c ^ d ^ e ^ f ^ g ^ h ^ i ^ j ^ k ^ m ^ n,
                )
                self.head = seq
                if w1 & 0xFF == fmt.CALL:
                    self.calls += 1
            finally:
                self._busy = False
        return True

    def _drop(self, w1: int, step: int) -> None:
        self.dropped += 1
        if w1 & 0xFF == fmt.CALL:
            self.dropped_by_step[step] = self.dropped_by_step.get(step, 0) + 1

    def close(self) -> None:
        """Stop writing (later puts are refused silently: the process is ending)."""
        with self._lock:
            self.closed = True

    def disable_in_child(self) -> None:
        """After ``fork()``, in the child: never write the parent's ring (no lock taken: a
        lock held by another thread of the parent stays held in the child)."""
        self._lock = threading.RLock()
        self._busy = False
        self.closed = True


def compiled_module() -> Any:
    """The compiled recording path ``wsprof.capture._fasthooks``, or None where it was not
    built (no compiler at install, Python < 3.11) or was built for another ring format.
    Looked up once per process; whether a session uses it is :func:`native_module`'s call."""
    global _COMPILED
    if _COMPILED is None:
        mod: Any = False
        try:
            from wsprof.capture import _fasthooks  # type: ignore[attr-defined]

            if _fasthooks.CHECK_SALT == _SALT:
                mod = _fasthooks
        except ImportError:
            pass
        _COMPILED = mod
    return _COMPILED or None


_COMPILED: Any = None


def native_module(settings: Settings) -> Any:
    """The compiled recording path for a session with ``settings``: :func:`compiled_module`,
    or None where it was not built or ``settings.native`` is False (``WSPROF_NATIVE=0``).

    Args:
        settings: the session's settings (never read here).
    """
    return compiled_module() if settings.native else None


def open_ring(path: str, capacity: int, pid: int, native: bool = True) -> tuple[Any, mmap.mmap]:
    """Create the ring file at ``path`` and a writer for it: the compiled one where it was
    built and ``native`` (the session's ``Settings.native``), else :class:`PyRing`.

    Returns:
        (writer, the shared mapping): the mapping is the writer thread's view for draining.

    Raises:
        OSError: the file cannot be created, sized or mapped.
    """
    fd = fmt.create(path, capacity, pid)
    try:
        mm = mmap.mmap(
            fd,
            fmt.HEADER_BYTES + capacity * fmt.RECORD_BYTES,
            flags=mmap.MAP_SHARED,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
        )
    finally:
        os.close(fd)
    compiled = compiled_module() if native else None
    writer = compiled.Ring(mm, capacity) if compiled is not None else PyRing(mm, capacity)
    return writer, mm


def scratch_ring(like: Any, records: int) -> Any:
    """A ring of the same implementation as ``like`` in anonymous memory, for records that
    are not the job's (the hooks' start-up calibration). Close it after use."""
    capacity = fmt.capacity_for(records)
    mm = mmap.mmap(-1, fmt.HEADER_BYTES + capacity * fmt.RECORD_BYTES)
    return type(like)(mm, capacity)
