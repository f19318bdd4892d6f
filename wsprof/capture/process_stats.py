"""Process and Python-runtime counters: psutil (RSS, threads, open fds, CPU %) and the garbage
collector (objects per generation; object counts of the types that grow).

Used in-process by :mod:`wsprof.capture.counters` and from outside by ``wsprof attach``.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter

import psutil

from wsprof.contracts.counters import gc_gen_counter, gc_type_counter, proc_counter

Reading = list[tuple[str, float]]

#: Types reported by :class:`GrowingTypes` (most growth since the first count first).
TOP_TYPES = 10


def process_reading(proc: psutil.Process) -> Reading:
    """``proc.rss_bytes``, ``proc.threads``, ``proc.cpu_pct`` (since the previous call on
    ``proc``; prime it once), ``proc.host_total_bytes`` (the host's memory: how far the RSS can
    grow) and, where the OS tells, ``proc.open_fds``.

    Raises:
        psutil.Error: the process is gone or cannot be read.
    """
    with proc.oneshot():
        out = [
            (proc_counter("rss_bytes"), float(proc.memory_info().rss)),
            (proc_counter("threads"), float(proc.num_threads())),
            (proc_counter("cpu_pct"), float(proc.cpu_percent(None))),
        ]
        with contextlib.suppress(psutil.Error, OSError):
            out.append((proc_counter("host_total_bytes"), float(psutil.virtual_memory().total)))
        with contextlib.suppress(psutil.Error, AttributeError):
            out.append((proc_counter("open_fds"), float(proc.num_fds())))
    return out


def gc_reading() -> Reading:
    """``gc.gen<i>.count`` (objects allocated minus freed since that generation's last
    collection, ``gc.get_count()``) and ``gc.gen<i>.collections`` (``gc.get_stats()``)."""
    out = [(gc_gen_counter(i, "count"), float(c)) for i, c in enumerate(gc.get_count())]
    out += [
        (gc_gen_counter(i, "collections"), float(s.get("collections", 0)))
        for i, s in enumerate(gc.get_stats())
    ]
    return out


def _type_name(k: type) -> str:
    """``module.qualname`` of a type; a type whose names raise or are not text (a metaclass
    with properties) is named by ``repr`` rather than switching the probe off."""
    try:
        return f"{str(k.__module__)}.{str(k.__qualname__)}"
    except Exception:  # noqa: BLE001 - any user type
        try:
            return f"<type at {id(k):#x}>" if not isinstance(repr(k), str) else repr(k)[:120]
        except Exception:  # noqa: BLE001
            return f"<type at {id(k):#x}>"


class GrowingTypes:
    """Object counts of the types whose counts grow: ``gc.type.<qualified name>`` counters.

    Each call walks every object the collector tracks (``gc.get_objects()``), so its cost grows
    with the heap: it runs at step boundaries on the probe budget. A type is reported from the
    first call at which it is among the :data:`TOP_TYPES` that grew most since the first count,
    and then at every call (so its series is complete from there).
    """

    def __init__(self, top: int = TOP_TYPES) -> None:
        self.top = top
        self.first: Counter[type] | None = None
        self.reported: dict[type, str] = {}

    def __call__(self) -> Reading:
        # Counting type objects (map and Counter run in C) and naming only the reported ones
        # is about 5x faster than naming every object's type.
        counts: Counter[type] = Counter(map(type, gc.get_objects()))
        if self.first is None:
            self.first = counts
            return []
        first = self.first
        growth = sorted(
            ((n - first.get(k, 0), i, k) for i, (k, n) in enumerate(counts.items())), reverse=True
        )
        for g, _, k in growth[: self.top]:
            if g > 0 and k not in self.reported and len(self.reported) < 2 * self.top:
                self.reported[k] = _type_name(k)
        return [
            (gc_type_counter(name), float(counts.get(k, 0)))
            for k, name in sorted(self.reported.items(), key=lambda kv: kv[1])
        ]
