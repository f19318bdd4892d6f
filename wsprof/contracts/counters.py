"""Recorded counter names: the one place a counter's name is built, taken apart, and given its
unit.

The probes of :mod:`wsprof.capture` record counters as ``(t_ns, name, value)``; the name is the
whole contract (the trace stores no unit). Every name wsprof records is built by a function
here, from a table that also says its unit:

* ``cuda<d>.<key>``: :func:`cuda_counter`, keys and units in :data:`CUDA_KEYS` (the
  ``torch.cuda.memory_stats`` keys, ``mappings``, ``total_bytes``): bytes or counts;
* ``nvml.gpu<i>.<key>``: :func:`nvml_gpu_counter`, :data:`NVML_GPU_KEYS` (``util_pct``,
  ``mem_used_bytes``, ``mem_total_bytes``); ``nvml.process_gpu_bytes``
  (:data:`NVML_PROCESS_GPU_BYTES`), bytes;
* ``proc.<key>``: :func:`proc_counter`, :data:`PROC_KEYS` (``rss_bytes``, ``threads``,
  ``cpu_pct``, ``open_fds``);
* ``share.<key>``: :func:`share_counter`, :data:`SHARE_KEYS` (tensors shared with other
  processes: exports, imports, bytes still alive, ``ipc_collect`` calls);
* ``gc.gen<i>.<key>``: :func:`gc_gen_counter`, :data:`GC_GEN_KEYS` (``count``,
  ``collections``), counts; ``gc.type.<qualified name>``: :func:`gc_type_counter`, a count;
* ``wsprof.probe_us.<probe>``: :func:`probe_cost_counter`, µs.

:func:`parse_counter` takes any name apart (the inverse of the builders); :func:`counter_unit`
reads a name's unit from the same tables, and only for a name no builder makes (a user's
``wsprof.counter()``, a key an older wsprof recorded) falls back to the name rule: bytes when
a dotted part ends in ``_bytes``. Percentages (``*_pct``) are recorded as 0..100, so they are
:attr:`Unit.OTHER` with the text ``%`` (:func:`counter_unit_text`), not a :attr:`Unit.SHARE`
(a fraction). Pure; stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from wsprof.contracts.units import Unit
from wsprof.contracts.words import Words

#: Unit text of a percentage counter (``proc.cpu_pct``, ``nvml.gpu0.util_pct``), 0..100.
PERCENT_TEXT = "%"
#: The unit of a recorded counter: a :class:`Unit` and, for :attr:`Unit.OTHER`, its text.
CounterUnit = tuple[Unit, str]

_BYTES: CounterUnit = (Unit.BYTES, "")
_COUNT: CounterUnit = (Unit.COUNT, "")
_PCT: CounterUnit = (Unit.OTHER, PERCENT_TEXT)


class CounterKind(Words):
    """What a counter's value is, the column of the tables below beside its unit. Only
    :attr:`HELD` and :attr:`LEVEL` counters are gauges (:func:`is_gauge`): the others grow
    with time, reset or stay put whatever a process holds."""

    #: Something a process holds now: bytes, segments, mappings, objects, threads.
    HELD = "held"
    #: A rate or a utilization now (percent).
    LEVEL = "level"
    #: Events counted since the process started (allocator calls, collections).
    EVENTS = "events"
    #: A count that rises and resets (a gc generation's objects since its last collection).
    CYCLE = "cycle"
    #: A constant recorded once (a device's or the host's total memory).
    SIZE = "size"
    #: wsprof's own probe cost (the self_overhead finding reports it).
    COST = "cost"


#: The kinds that say what a process holds now.
GAUGE_KINDS = frozenset({CounterKind.HELD, CounterKind.LEVEL})
_HELD, _LEVEL, _EVENTS = CounterKind.HELD, CounterKind.LEVEL, CounterKind.EVENTS
_CYCLE, _SIZE = CounterKind.CYCLE, CounterKind.SIZE


class CounterSource(Enum):
    """Which probe records a counter (its name's prefix)."""

    CUDA = "cuda"
    NVML_GPU = "nvml_gpu"
    NVML_PROCESS = "nvml_process"
    PROC = "proc"
    GC_GEN = "gc_gen"
    GC_TYPE = "gc_type"
    GC = "gc"
    PROBE_COST = "probe_cost"
    SHARE = "share"


# ----------------------------------------------------------------------------- the tables

#: ``torch.cuda.memory_stats()`` keys the allocator probe records, and their units.
MEMORY_STATS_KEYS: dict[str, CounterUnit] = {
    "segment.all.current": _COUNT,
    "reserved_bytes.all.current": _BYTES,
    "allocated_bytes.all.current": _BYTES,
    "active_bytes.all.current": _BYTES,
    "inactive_split.all.current": _COUNT,
    "inactive_split_bytes.all.current": _BYTES,
    "num_alloc_retries": _COUNT,
    "num_device_alloc": _COUNT,
    "num_device_free": _COUNT,
    "num_sync_all_streams": _COUNT,
    "oversize_segments.current": _COUNT,
}
#: What each ``torch.cuda.memory_stats()`` key the probe records is.
MEMORY_STATS_KINDS: dict[str, CounterKind] = {
    "segment.all.current": _HELD,
    "reserved_bytes.all.current": _HELD,
    "allocated_bytes.all.current": _HELD,
    "active_bytes.all.current": _HELD,
    "inactive_split.all.current": _HELD,
    "inactive_split_bytes.all.current": _HELD,
    "num_alloc_retries": _EVENTS,
    "num_device_alloc": _EVENTS,
    "num_device_free": _EVENTS,
    "num_sync_all_streams": _EVENTS,
    "oversize_segments.current": _HELD,
}
#: Derived allocator counter: device allocations minus frees (cuMemMap mappings held).
CUDA_MAPPINGS = "mappings"
#: The device's total memory, recorded once with the allocator's counters.
CUDA_TOTAL_BYTES = "total_bytes"
#: Every ``cuda<d>.<key>`` key and its unit.
CUDA_KEYS: dict[str, CounterUnit] = {
    **MEMORY_STATS_KEYS,
    CUDA_MAPPINGS: _COUNT,
    CUDA_TOTAL_BYTES: _BYTES,
}
#: What every ``cuda<d>.<key>`` key is.
CUDA_KINDS: dict[str, CounterKind] = {
    **MEMORY_STATS_KINDS,
    CUDA_MAPPINGS: _HELD,
    CUDA_TOTAL_BYTES: _SIZE,
}
#: ``torch.cuda.memory_stats`` statistics (``<stat>.<pool>.<current|peak|...>`` keys beyond
#: the table, which an older wsprof recorded) that count blocks or segments held; its
#: ``num_*`` keys are event counts.
CUDA_HELD_STATS = frozenset(
    {
        "segment",
        "allocation",
        "active",
        "inactive_split",
        "oversize_segments",
        "oversize_allocations",
    }
)
#: The ``cuda<d>.<key>`` counters of memory held on the device (bounded by ``total_bytes``).
CUDA_HELD_BYTES_KEYS = (
    "reserved_bytes.all.current",
    "allocated_bytes.all.current",
    "active_bytes.all.current",
)

#: NVML utilization of a GPU, percent.
NVML_UTIL_PCT = "util_pct"
#: NVML memory used on a GPU (every process), bytes.
NVML_MEM_USED_BYTES = "mem_used_bytes"
#: NVML memory of a GPU, bytes (recorded once).
NVML_MEM_TOTAL_BYTES = "mem_total_bytes"
#: Every ``nvml.gpu<i>.<key>`` key and its unit.
NVML_GPU_KEYS: dict[str, CounterUnit] = {
    NVML_UTIL_PCT: _PCT,
    NVML_MEM_USED_BYTES: _BYTES,
    NVML_MEM_TOTAL_BYTES: _BYTES,
}
NVML_GPU_KINDS: dict[str, CounterKind] = {
    NVML_UTIL_PCT: _LEVEL,
    NVML_MEM_USED_BYTES: _HELD,
    NVML_MEM_TOTAL_BYTES: _SIZE,
}
#: A process's GPU memory summed over the GPUs NVML lists it on, bytes.
NVML_PROCESS_GPU_BYTES = "nvml.process_gpu_bytes"
_NVML_PROCESS_KEYS: dict[str, CounterUnit] = {"process_gpu_bytes": _BYTES}
_NVML_PROCESS_KINDS: dict[str, CounterKind] = {"process_gpu_bytes": _HELD}

#: Every ``proc.<key>`` key (psutil) and its unit.
PROC_KEYS: dict[str, CounterUnit] = {
    "rss_bytes": _BYTES,
    "threads": _COUNT,
    "cpu_pct": _PCT,
    "open_fds": _COUNT,
    # The host's memory (psutil.virtual_memory().total): how far the RSS can grow.
    "host_total_bytes": _BYTES,
    # Shared memory in the RSS (``RssShmem`` of /proc/<pid>/status): shm and tmpfs pages.
    "rss_shmem_bytes": _BYTES,
    # /dev/shm files the process maps or holds open (torch's shared-memory storages).
    "shm_files": _COUNT,
    # The size of /dev/shm (statvfs): how far shared memory can grow on this host.
    "shm_total_bytes": _BYTES,
}
PROC_KINDS: dict[str, CounterKind] = {
    "rss_bytes": _HELD,
    "threads": _HELD,
    "cpu_pct": _LEVEL,
    "open_fds": _HELD,
    "host_total_bytes": _SIZE,
    "rss_shmem_bytes": _HELD,
    "shm_files": _HELD,
    "shm_total_bytes": _SIZE,
}
#: Every ``gc.gen<i>.<key>`` key and its unit: objects allocated less freed since the
#: generation's last collection (``gc.get_count()``), collections so far (``gc.get_stats()``).
GC_GEN_KEYS: dict[str, CounterUnit] = {"count": _COUNT, "collections": _COUNT}
GC_GEN_KINDS: dict[str, CounterKind] = {"count": _CYCLE, "collections": _EVENTS}

_CUDA_PREFIX = "cuda"
_NVML_GPU_PREFIX = "nvml.gpu"
_NVML_PREFIX = "nvml."
_PROC_PREFIX = "proc."
_GC_GEN_PREFIX = "gc.gen"
_GC_TYPE_PREFIX = "gc.type."
_GC_PREFIX = "gc."
_PROBE_COST_PREFIX = "wsprof.probe_us."
_SHARE_PREFIX = "share."

#: Tensors shared with other processes (:mod:`wsprof.capture.sharing`), per process since it
#: started: ``exports`` (storages handed out: CUDA IPC handles, shared-memory fds or files),
#: their ``exported_bytes``; ``alive_bytes`` / ``alive_exports``: exported storages still
#: alive in this process now; ``imports`` (handles opened), ``imported_bytes``,
#: ``imported_alive_bytes``: opened storages still alive; ``reopens``: handles opened again
#: while an earlier open of them was still alive (the double-open leak); ``ipc_collects``:
#: ``torch.cuda.ipc_collect()`` calls; ``exports_since_collect``: CUDA exports since the last
#: one; ``export_us`` / ``import_us``: time inside the share and open calls. Per update (a
#: burst of shares: one weight version's buckets), recorded when the next one begins:
#: ``kept_bytes`` / ``imported_kept_bytes`` (what every earlier update left alive),
#: ``update_exports`` / ``update_imports``, ``update_exported_bytes`` /
#: ``update_imported_bytes``, ``update_export_us`` / ``update_import_us`` (time inside its
#: calls) and ``update_export_span_us`` / ``update_import_span_us`` (first share to last) of
#: the update that ended, stamped at its last share (the last update's at process exit).
SHARE_KEYS: dict[str, CounterUnit] = {
    "exports": _COUNT,
    "exported_bytes": _BYTES,
    "alive_bytes": _BYTES,
    "alive_exports": _COUNT,
    "imports": _COUNT,
    "imported_bytes": _BYTES,
    "imported_alive_bytes": _BYTES,
    "reopens": _COUNT,
    "ipc_collects": _COUNT,
    "exports_since_collect": _COUNT,
    "export_us": (Unit.MICROSECONDS, ""),
    "import_us": (Unit.MICROSECONDS, ""),
    "kept_bytes": _BYTES,
    "imported_kept_bytes": _BYTES,
    "update_exports": _COUNT,
    "update_imports": _COUNT,
    "update_exported_bytes": _BYTES,
    "update_imported_bytes": _BYTES,
    "update_export_us": (Unit.MICROSECONDS, ""),
    "update_import_us": (Unit.MICROSECONDS, ""),
    "update_export_span_us": (Unit.MICROSECONDS, ""),
    "update_import_span_us": (Unit.MICROSECONDS, ""),
}
SHARE_KINDS: dict[str, CounterKind] = {
    "exports": _EVENTS,
    "exported_bytes": _EVENTS,
    "alive_bytes": _HELD,
    "alive_exports": _HELD,
    "imports": _EVENTS,
    "imported_bytes": _EVENTS,
    "imported_alive_bytes": _HELD,
    "reopens": _EVENTS,
    "ipc_collects": _EVENTS,
    "exports_since_collect": _CYCLE,
    "export_us": _EVENTS,
    "import_us": _EVENTS,
    "kept_bytes": _HELD,
    "imported_kept_bytes": _HELD,
    "update_exports": _SIZE,
    "update_imports": _SIZE,
    "update_exported_bytes": _SIZE,
    "update_imported_bytes": _SIZE,
    "update_export_us": _SIZE,
    "update_import_us": _SIZE,
    "update_export_span_us": _SIZE,
    "update_import_span_us": _SIZE,
}


# ----------------------------------------------------------------------------- builders


def _check(table: dict[str, CounterUnit], key: str, what: str) -> None:
    if key not in table:
        raise ValueError(f"{what} counter {key!r} is not one of {sorted(table)}")


def cuda_counter(device: int, key: str) -> str:
    """``cuda<device>.<key>`` for a key of :data:`CUDA_KEYS`.

    Raises:
        ValueError: ``key`` is not in :data:`CUDA_KEYS` (add it there, with its unit).
    """
    _check(CUDA_KEYS, key, "allocator")
    return f"{_CUDA_PREFIX}{int(device)}.{key}"


def nvml_gpu_counter(index: int, key: str) -> str:
    """``nvml.gpu<index>.<key>`` for a key of :data:`NVML_GPU_KEYS`.

    Raises:
        ValueError: ``key`` is not in :data:`NVML_GPU_KEYS`.
    """
    _check(NVML_GPU_KEYS, key, "NVML")
    return f"{_NVML_GPU_PREFIX}{int(index)}.{key}"


def proc_counter(key: str) -> str:
    """``proc.<key>`` for a key of :data:`PROC_KEYS`.

    Raises:
        ValueError: ``key`` is not in :data:`PROC_KEYS`.
    """
    _check(PROC_KEYS, key, "process")
    return _PROC_PREFIX + key


def share_counter(key: str) -> str:
    """``share.<key>`` for a key of :data:`SHARE_KEYS`.

    Raises:
        ValueError: ``key`` is not in :data:`SHARE_KEYS`.
    """
    _check(SHARE_KEYS, key, "sharing")
    return _SHARE_PREFIX + key


@dataclass(frozen=True)
class ShareSideCounters:
    """The ``share.*`` counters of one side of tensor sharing (``export`` or ``import``):
    what capture records and analysis reads, named in one place.

    Attributes:
        total: shares (opens) since the process started.
        kept: bytes every earlier update left alive, recorded when the next one begins.
        update_count, update_bytes, update_us, update_span_us: the update that ended: its
            shares, bytes, µs inside its calls, µs from its first share to its last.
    """

    total: str
    kept: str
    update_count: str
    update_bytes: str
    update_us: str
    update_span_us: str


def share_side_counters(side: str) -> ShareSideCounters:
    """The counter names of ``side`` (``export`` or ``import``).

    Raises:
        ValueError: another side.
    """
    keys: tuple[str, ...]
    if side == "export":
        keys = ("exports", "kept_bytes", "update_exports", "update_exported_bytes")
        keys += ("update_export_us", "update_export_span_us")
    elif side == "import":
        keys = ("imports", "imported_kept_bytes", "update_imports", "update_imported_bytes")
        keys += ("update_import_us", "update_import_span_us")
    else:
        raise ValueError(f"sharing side {side!r} is not export or import")
    return ShareSideCounters(*(share_counter(k) for k in keys))


def gc_gen_counter(generation: int, key: str) -> str:
    """``gc.gen<generation>.<key>`` for a key of :data:`GC_GEN_KEYS`.

    Raises:
        ValueError: ``key`` is not in :data:`GC_GEN_KEYS`.
    """
    _check(GC_GEN_KEYS, key, "gc")
    return f"{_GC_GEN_PREFIX}{int(generation)}.{key}"


def gc_type_counter(type_name: str) -> str:
    """``gc.type.<type_name>``: objects of one type the collector tracks, a count."""
    return _GC_TYPE_PREFIX + type_name


def probe_cost_counter(probe: str) -> str:
    """``wsprof.probe_us.<probe>``: one run's cost of a counter probe, µs."""
    return _PROBE_COST_PREFIX + probe


# ----------------------------------------------------------------------------- parsers


@dataclass(frozen=True)
class CounterName:
    """A recorded counter's name taken apart.

    Attributes:
        source: the probe that records it.
        index: the CUDA device, NVML GPU or gc generation; None for the others.
        key: what follows the prefix (``reserved_bytes.all.current``, ``rss_bytes``, a type's
            qualified name).
    """

    source: CounterSource
    index: int | None
    key: str


_INDEXED = (
    (CounterSource.CUDA, re.compile(r"cuda(\d+)\.(.+)", re.DOTALL)),
    (CounterSource.NVML_GPU, re.compile(r"nvml\.gpu(\d+)\.(.+)", re.DOTALL)),
    (CounterSource.GC_GEN, re.compile(r"gc\.gen(\d+)\.(.+)", re.DOTALL)),
)
_PREFIXED = (
    (CounterSource.GC_TYPE, _GC_TYPE_PREFIX),
    (CounterSource.PROBE_COST, _PROBE_COST_PREFIX),
    (CounterSource.PROC, _PROC_PREFIX),
    (CounterSource.SHARE, _SHARE_PREFIX),
    (CounterSource.NVML_PROCESS, _NVML_PREFIX),
    (CounterSource.GC, _GC_PREFIX),
)


def parse_counter(name: str) -> CounterName | None:
    """A counter name taken apart (the inverse of the builders of this module).

    Args:
        name: a recorded counter's name (no ``counter:`` series prefix).

    Returns:
        Its source, index and key; None for a name no wsprof probe makes (a user counter).
    """
    for source, rx in _INDEXED:
        m = rx.fullmatch(name)
        if m:
            return CounterName(source, int(m.group(1)), m.group(2))
    for source, prefix in _PREFIXED:
        if name.startswith(prefix) and len(name) > len(prefix):
            return CounterName(source, None, name[len(prefix) :])
    return None


def format_counter(c: CounterName) -> str:
    """The name of a parsed counter (``format_counter(parse_counter(n)) == n``)."""
    if c.source is CounterSource.CUDA:
        return f"{_CUDA_PREFIX}{c.index}.{c.key}"
    if c.source is CounterSource.NVML_GPU:
        return f"{_NVML_GPU_PREFIX}{c.index}.{c.key}"
    if c.source is CounterSource.GC_GEN:
        return f"{_GC_GEN_PREFIX}{c.index}.{c.key}"
    prefix = dict(_PREFIXED)[c.source]
    return prefix + c.key


def is_gpu_counter(name: str) -> bool:
    """Whether a counter comes from the CUDA allocator or NVML."""
    c = parse_counter(name)
    return c is not None and c.source in (
        CounterSource.CUDA,
        CounterSource.NVML_GPU,
        CounterSource.NVML_PROCESS,
    )


def is_nvml_gpu(name: str, key: str) -> bool:
    """Whether ``name`` is ``nvml.gpu<i>.<key>`` of some GPU ``i``."""
    c = parse_counter(name)
    return c is not None and c.source is CounterSource.NVML_GPU and c.key == key


def total_bytes_of(counter: str) -> str | None:
    """The recorded device total that bounds a GPU-memory counter: ``cuda<d>.total_bytes`` for
    ``cuda<d>.{reserved,allocated,active}_bytes.all.current``, ``nvml.gpu<i>.mem_total_bytes``
    for ``nvml.gpu<i>.mem_used_bytes``; None for any other counter (``nvml.process_gpu_bytes``
    is bounded by every GPU's total: :func:`is_nvml_gpu` with :data:`NVML_MEM_TOTAL_BYTES`)."""
    c = parse_counter(counter)
    if c is None or c.index is None:
        return None
    if c.source is CounterSource.CUDA and c.key in CUDA_HELD_BYTES_KEYS:
        return cuda_counter(c.index, CUDA_TOTAL_BYTES)
    if c.source is CounterSource.NVML_GPU and c.key == NVML_MEM_USED_BYTES:
        return nvml_gpu_counter(c.index, NVML_MEM_TOTAL_BYTES)
    return None


# ----------------------------------------------------------------------------- units


def _name_rule(counter: str) -> CounterUnit:
    """The fallback for names no builder makes: bytes when a dotted part ends in ``_bytes``."""
    parts = counter.split(".")
    if any(p == "bytes" or p.endswith("_bytes") for p in parts):
        return _BYTES
    return (Unit.OTHER, "")


def _unit_of(counter: str) -> CounterUnit:
    c = parse_counter(counter)
    if c is None:
        return _name_rule(counter)
    table: dict[str, CounterUnit] | None = {
        CounterSource.CUDA: CUDA_KEYS,
        CounterSource.NVML_GPU: NVML_GPU_KEYS,
        CounterSource.NVML_PROCESS: _NVML_PROCESS_KEYS,
        CounterSource.PROC: PROC_KEYS,
        CounterSource.SHARE: SHARE_KEYS,
        CounterSource.GC_GEN: GC_GEN_KEYS,
    }.get(c.source)
    if table is not None and c.key in table:
        return table[c.key]
    if c.source is CounterSource.GC_TYPE:
        return _COUNT
    if c.source is CounterSource.PROBE_COST:
        return (Unit.MICROSECONDS, "")
    if c.source is CounterSource.CUDA and _name_rule(counter)[0] is Unit.OTHER:
        return _COUNT  # every torch.cuda.memory_stats value is a count or bytes
    return _name_rule(counter)  # a key an older wsprof recorded


def counter_unit(counter: str) -> Unit:
    """The unit of a recorded counter: from the table of its builder (see the module table);
    for a name no builder makes, :attr:`Unit.BYTES` when a dotted part ends in ``_bytes``
    (``my.pool_bytes``), else :attr:`Unit.OTHER`."""
    return _unit_of(counter)[0]


def counter_unit_text(counter: str) -> str:
    """The free unit text of a counter whose unit is :attr:`Unit.OTHER` (``%`` for the
    ``*_pct`` counters); ``""`` for every other."""
    return _unit_of(counter)[1]


def counter_kind(counter: str) -> CounterKind | None:
    """What a recorded counter is: the kind column of its builder's table; for keys beyond the
    tables, allocator ``num_*`` keys are events and ``<stat>.*`` keys of
    :data:`CUDA_HELD_STATS` held, a gc generation's other keys events, gc object counts held;
    wsprof's own counters (``wsprof.*``) its cost. None for a name no builder makes (a user's
    ``wsprof.counter``)."""
    if counter.startswith("wsprof."):
        return CounterKind.COST
    c = parse_counter(counter)
    if c is None:
        return None
    table = {
        CounterSource.CUDA: CUDA_KINDS,
        CounterSource.NVML_GPU: NVML_GPU_KINDS,
        CounterSource.NVML_PROCESS: _NVML_PROCESS_KINDS,
        CounterSource.PROC: PROC_KINDS,
        CounterSource.SHARE: SHARE_KINDS,
        CounterSource.GC_GEN: GC_GEN_KINDS,
    }.get(c.source)
    if table is not None and c.key in table:
        return table[c.key]
    if c.source is CounterSource.CUDA:
        if c.key.startswith("num_") and "." not in c.key:
            return CounterKind.EVENTS
        if "." in c.key and c.key.split(".", 1)[0] in CUDA_HELD_STATS:
            return CounterKind.HELD
        return None
    if c.source is CounterSource.GC_GEN:
        return CounterKind.EVENTS  # collected, uncollectable (gc.get_stats)
    if c.source in (CounterSource.GC_TYPE, CounterSource.GC):
        return CounterKind.HELD
    if c.source is CounterSource.PROBE_COST:
        return CounterKind.COST
    return None


def is_gauge(counter: str) -> bool:
    """Whether a counter measures something held now (:data:`GAUGE_KINDS`, or a name no
    builder makes); the others are left out of counter findings (still plotted)."""
    kind = counter_kind(counter)
    return kind is None or kind in GAUGE_KINDS
