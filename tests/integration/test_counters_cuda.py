"""CUDA caching-allocator counters (skipped without CUDA): real memory_stats, expandable
segments growing by mappings, snapshot summaries, and patch() recording them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import wsprof
from wsprof.capture.allocator import read_allocator, take_snapshot_summary
from wsprof.trace.reader import read_trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

_EXPANDABLE = """
import json, torch
from wsprof.capture.allocator import read_allocator
kept, seen = [], []
for i in range(6):
    kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))  # 64 MiB more each time
    seen.append(dict(read_allocator()))
print(json.dumps(seen))
"""


def test_allocator_counters_of_this_process() -> None:
    x = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    reading = dict(read_allocator())
    d = torch.cuda.current_device()
    assert reading[f"cuda{d}.reserved_bytes.all.current"] >= 32 << 20
    assert reading[f"cuda{d}.segment.all.current"] >= 1
    summary = take_snapshot_summary()
    assert summary is not None and summary["segments"] >= 1
    assert summary["reserved_bytes"] >= 32 << 20
    del x


def test_expandable_segments_grow_by_mappings_not_segments() -> None:
    import json

    done = subprocess.run(
        [sys.executable, "-c", _EXPANDABLE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    mappings = [s["cuda0.mappings"] for s in seen]
    segments = [s["cuda0.segment.all.current"] for s in seen]
    reserved = [s["cuda0.reserved_bytes.all.current"] for s in seen]
    assert mappings[-1] > mappings[0], mappings
    assert reserved[-1] >= reserved[0] + 5 * (64 << 20), reserved
    assert segments[-1] <= segments[0] + 1, segments


def test_patch_records_allocator_counters(tmp_path: Path) -> None:
    torch.cuda.init()
    path = wsprof.patch(str(tmp_path / "run"))
    kept = []
    for _ in range(4):
        wsprof.step()
        kept.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
    wsprof.memory_snapshot("test")
    wsprof.unpatch()
    t = read_trace(str(path))
    d = torch.cuda.current_device()
    assert f"cuda{d}.reserved_bytes.all.current" in t.counters, sorted(t.counters)
    assert f"cuda{d}.total_bytes" in t.counters
    assert any(e.kind == "memory_snapshot" and '"reason": "test"' in e.detail for e in t.events)
