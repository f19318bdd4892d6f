"""Who wrote a trace is stored with its first rows: a reader that sees a step of a process can
always name its rank (``wsprof watch`` read a step of ``pid23067`` on a loaded CI machine: the
rows' transaction had committed, the meta's with the rank had not yet)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from wsprof.capture.recorder import Recorder
from wsprof.trace.reader import read_trace


def test_the_rank_is_in_the_transaction_of_the_first_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    rec = Recorder(str(tmp_path), flush_interval_s=3600)  # flushed here only
    set_meta = rec._writer.set_meta
    try:
        t = time.monotonic_ns()
        rec.spans.append(("step", "0", t, t + 1_000_000, 0, 0))

        def killed(values: object) -> None:
            raise OSError("the process died between the rows' transaction and the meta's")

        rec._writer.set_meta = killed  # type: ignore[method-assign]
        rec.flush()
    finally:
        rec._writer.set_meta = set_meta  # type: ignore[method-assign]
    path = rec.path
    trace = read_trace(path)
    assert [s.name for s in trace.spans if s.kind == "step"] == ["0"]
    assert trace.meta.get("rank") == 3 and trace.meta.get("world_size") == 4, trace.meta
    rec.close()
    assert read_trace(path).meta.get("rank") == 3
