"""CUDA caching-allocator counters and memory-snapshot summaries (CUDA only).

Read on the counter sampler's thread (``torch.cuda.memory_stats`` takes the allocator's lock
and is safe from any thread), never by a hook, and never before the process itself has
initialised CUDA (wsprof must not create a CUDA context).

With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` the allocator grows segments by
mapping more physical memory into them (cuMemMap): ``segment.all.current`` stays flat while
``reserved_bytes`` and ``num_device_alloc`` grow. Both are counted, and
``mappings = num_device_alloc - num_device_free`` is derived (PyTorch's CUDA memory management
notes, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF").
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from wsprof.contracts.counters import (
    CUDA_MAPPINGS,
    CUDA_TOTAL_BYTES,
    MEMORY_STATS_KEYS,
    CounterSource,
    cuda_counter,
    parse_counter,
)

#: ``torch.cuda.memory_stats()`` keys recorded, as ``cuda<device>.<key>`` counters (their units:
#: :data:`wsprof.contracts.counters.MEMORY_STATS_KEYS`).
ALLOCATOR_KEYS = tuple(MEMORY_STATS_KEYS)
#: Largest blocks listed in a snapshot summary.
SNAPSHOT_LARGEST = 10


def cuda_in_use() -> Any:
    """``torch.cuda`` when this process has already initialised CUDA, else None (never
    initialises it)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return None
    try:
        return cuda if cuda.is_available() and cuda.is_initialized() else None
    except Exception:  # noqa: BLE001 - a broken CUDA install is the same as none
        return None


def allocator_reading(stats: Mapping[str, Any], device: int) -> list[tuple[str, float]]:
    """Counters from one ``torch.cuda.memory_stats(device)`` dict: each of
    :data:`ALLOCATOR_KEYS` present, and ``mappings`` (device allocations minus frees).

    Returns:
        (``cuda<device>.<key>``, value) pairs; counts and bytes as floats.
    """
    out = [(cuda_counter(device, k), float(stats[k])) for k in ALLOCATOR_KEYS if k in stats]
    if "num_device_alloc" in stats and "num_device_free" in stats:
        out.append(
            (
                cuda_counter(device, CUDA_MAPPINGS),
                float(stats["num_device_alloc"]) - float(stats["num_device_free"]),
            )
        )
    return out


def total_reading(reading: Sequence[tuple[str, float]], total_bytes: int) -> tuple[str, float]:
    """The ``cuda<device>.total_bytes`` counter of the device an allocator reading is of.

    Raises:
        ValueError: ``reading`` holds no ``cuda<device>.*`` counter.
    """
    for name, _ in reading:
        c = parse_counter(name)
        if c is not None and c.source is CounterSource.CUDA and c.index is not None:
            return cuda_counter(c.index, CUDA_TOTAL_BYTES), float(total_bytes)
    raise ValueError("no allocator counter in the reading")


def read_allocator() -> list[tuple[str, float]]:
    """The current device's allocator counters; empty while CUDA is not initialised."""
    cuda = cuda_in_use()
    if cuda is None:
        return []
    device = int(cuda.current_device())
    return allocator_reading(cuda.memory_stats(device), device)


def summarize_snapshot(snapshot: Any) -> dict[str, Any]:
    """A ``torch.cuda.memory_snapshot()`` (a list of segment dicts, or a dict holding
    ``segments``) reduced to what explains growth; the raw snapshot is never stored.

    Returns:
        ``segments`` (count), ``expandable_segments`` (count), ``reserved_bytes``,
        ``allocated_bytes``, ``blocks`` (count), ``free_blocks``, ``segment_size_histogram``
        (``{"<=2^k": count}`` over segment sizes, bytes), ``largest_blocks`` (the
        :data:`SNAPSHOT_LARGEST` largest blocks as ``[bytes, state]``).
    """
    segments: Sequence[Mapping[str, Any]] = (
        snapshot.get("segments", []) if isinstance(snapshot, Mapping) else snapshot or []
    )
    hist: dict[str, int] = {}
    blocks: list[tuple[int, str]] = []
    reserved = allocated = n_expandable = 0
    for seg in segments:
        size = int(seg.get("total_size", 0))
        reserved += size
        allocated += int(seg.get("allocated_size", 0))
        n_expandable += bool(seg.get("is_expandable", False))
        k = max(size - 1, 0).bit_length()
        hist[f"<=2^{k}"] = hist.get(f"<=2^{k}", 0) + 1
        for b in seg.get("blocks", []):
            blocks.append((int(b.get("size", 0)), str(b.get("state", "?"))))
    blocks.sort(key=lambda b: -b[0])
    return {
        "segments": len(segments),
        "expandable_segments": n_expandable,
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "blocks": len(blocks),
        "free_blocks": sum(1 for _, state in blocks if "free" in state),
        "segment_size_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0][4:]))),
        "largest_blocks": [list(b) for b in blocks[:SNAPSHOT_LARGEST]],
    }


def take_snapshot_summary() -> dict[str, Any] | None:
    """Summarise ``torch.cuda.memory_snapshot()`` now; None while CUDA is not initialised."""
    cuda = cuda_in_use()
    if cuda is None:
        return None
    return summarize_snapshot(cuda.memory_snapshot())


def device_total_bytes() -> int | None:
    """Total memory of the current CUDA device, bytes; None without CUDA in use."""
    cuda = cuda_in_use()
    if cuda is None:
        return None
    return int(cuda.get_device_properties(cuda.current_device()).total_memory)
