"""Two independent causes in one real run give two diagnoses: ``wsprof demo --fault
probe+calls`` (3 gloo ranks: the probe wrapper walks a growing pool before every collective,
and the weight sync sends 16 more buffers every step, one broadcast each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_probe_and_growing_calls_are_two_diagnoses(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "wsprof", "demo", "--fault", "probe+calls", "--steps", "8"]
        + ["--params", "64", "--no-pyspy", "--out", str(run), "--report", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = subprocess.run(
        [sys.executable, "-m", "wsprof", "analyze", str(run), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    doc = json.loads(out.stdout)
    causes = [d["cause"] for d in doc["diagnoses"] if d["severity"] != "info"]
    assert sorted(causes[:2]) == ["call_count", "wrapper"], [
        (d["cause"], d["title"]) for d in doc["diagnoses"]
    ]
    calls = next(d for d in doc["diagnoses"] if d["cause"] == "call_count")
    assert "calls per step grow +16.0/step" in calls["where"]["text"]
    assert "sync_weights" in calls["where"]["text"]  # the caller that issues them
    wrapper = next(d for d in doc["diagnoses"] if d["cause"] == "wrapper")
    assert "with_memory_probe" in wrapper["where"]["text"]
    # Without py-spy the wrapper's chain says which link is missing and how to get it.
    assert any("py-spy" in m for m in wrapper["missing"]) or wrapper["why"]
    assert doc["verdict"]["n_problems"] >= 2
    # Each cause's own finding sits in its own diagnosis only.
    kinds = {f["id"]: f["kind"] for f in doc["findings"]}
    assert "between_layers" not in {kinds[i] for i in calls["finding_ids"]}
    assert "call_count_growth" not in {kinds[i] for i in wrapper["finding_ids"]}
