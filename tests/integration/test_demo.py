"""`wsprof demo` end to end: real ranks, real hooks, trace, analysis, report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

STEPS = "12"


def wsprof(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wsprof", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four demo runs: probe fault / healthy, with and without step markers."""
    out: dict[str, Path] = {}
    for fault in ("probe", "none"):
        for markers in ("--markers", "--no-markers"):
            d = tmp_path_factory.mktemp(f"demo-{fault}{markers}")
            # py-spy samples only the runs with markers: on 2 cores its CPU (about half a core
            # here) adds timing noise that the burst-found steps of --no-markers cannot absorb.
            pyspy = "--pyspy" if markers == "--markers" else "--no-pyspy"
            res = wsprof(
                "demo",
                "--steps",
                STEPS,
                "--fault",
                fault,
                markers,
                pyspy,
                "--out",
                str(d / "run"),
                "--report",
                str(d / "report.html"),
            )
            assert res.returncode == 0, res.stdout + res.stderr
            assert f"report: {d / 'report.html'}" in res.stdout
            out[f"{fault}{markers}"] = d
    return out


def verdict(run: Path) -> dict[str, object]:
    res = wsprof("analyze", str(run / "run"), "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def series(doc: dict[str, object], name: str) -> dict[str, object]:
    found = [s for s in doc["series"] if s["name"] == name]  # type: ignore[index, union-attr]
    assert found, f"no {name} series"
    return found[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("markers", ["--markers", "--no-markers"])
def test_probe_fault_is_an_accumulating_weight_sync_slowdown(
    runs: dict[str, Path], markers: str
) -> None:
    doc = verdict(runs[f"probe{markers}"])
    sync = series(doc, "weight_sync_s")
    assert sync["accumulating"] is True, (sync["shape"], [round(v, 3) for v in sync["values"]])
    assert sync["shape"] in ("linear", "superlinear", "exponential")
    assert len(sync["values"]) == int(STEPS)  # type: ignore[arg-type]
    kinds = [f["kind"] for f in doc["findings"]]  # type: ignore[union-attr]
    assert "accumulating_slowdown" in kinds
    assert "between_layers" in kinds, "the probe wrapper between API and backend is named"
    bl = [f for f in doc["findings"] if f["kind"] == "between_layers"][0]  # type: ignore
    assert "with_memory_probe" in bl["where"] and "framework.py" in bl["where"]
    assert doc["step_source"] == ("markers" if markers == "--markers" else "rhythm")


@pytest.mark.parametrize("markers", ["--markers", "--no-markers"])
def test_healthy_run_has_no_slowdown(runs: dict[str, Path], markers: str) -> None:
    """The healthy demo gets no warning of what the demo's fault changes: no weight-sync or
    between-layers slowdown at warning or above (the verdict a user reads).

    The demo runs 3 ranks on the machine's 2 shared cores, whose speed drifts: seen in
    fresh-clone CI runs, the healthy weight sync rising 100 -> 131 ms over 12 steps (an ``info``
    "watch" finding, verdict ``no_problem``: the severity rules judge 5 % of a step as not yet
    a problem) and the CPU-bound step time 0.42 -> 0.58 s. That drift is in the data; step,
    rollout and train time are left out here for that reason.
    """
    doc = verdict(runs[f"none{markers}"])
    wrong = [
        f["title"]
        for f in doc["findings"]  # type: ignore[union-attr]
        if f["severity"] in ("warning", "critical")
        and (
            f["kind"] == "between_layers"
            or (
                f["kind"] == "accumulating_slowdown"
                and f["evidence"].get("series") not in ("step_s", "rollout_s", "train_s")
            )
        )
    ]
    assert not wrong, [(f["severity"], f["title"]) for f in doc["findings"]]  # type: ignore[index]


def test_markers_give_the_two_numbers(runs: dict[str, Path]) -> None:
    doc = verdict(runs["probe--markers"])
    steps = doc["steps"]
    assert len(steps) == int(STEPS)  # type: ignore[arg-type]
    for s in steps[1:]:  # type: ignore[index]
        assert 0 < s["rollout_share"] < 1
        assert s["weight_sync_s"] > 0 and s["n_calls"] >= 100
    share = [f for f in doc["findings"] if f["kind"] == "rollout_share"]  # type: ignore
    assert share and "rollout" in share[0]["title"]


def test_report_is_self_contained(runs: dict[str, Path]) -> None:
    html = (runs["probe--markers"] / "report.html").read_text()
    assert "accumulating_slowdown" in html or "weight-sync time grows" in html
    assert "<script src" not in html and "https://" not in html.split("</head>")[0]


@pytest.mark.browser
def test_demo_report_opens_offline_in_chromium(runs: dict[str, Path]) -> None:
    from tests.browser import browser_skip_reason, offline_check

    reason = browser_skip_reason()
    if reason:
        pytest.skip(reason)
    seen: dict[str, bool] = {}

    def look(page: object) -> None:
        seen["verdict"] = page.locator("#verdict").is_visible()  # type: ignore[attr-defined]
        text = page.locator("#verdict").inner_text()  # type: ignore[attr-defined]
        seen["names_slowdown"] = "weight-sync time grows" in text

    requests, errors = offline_check(runs["probe--markers"] / "report.html", look)
    assert requests == [] and errors == []
    assert seen == {"verdict": True, "names_slowdown": True}


def _text(run: Path) -> str:
    res = wsprof("analyze", str(run / "run"))
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_probe_fault_is_one_diagnosis_naming_wrapper_frame_and_counter(
    runs: dict[str, Path],
) -> None:
    """One bug, one diagnosis: the wrapper and every name it sits on, the hot frame that gained
    share (under the wrapper in its stacks), the counter with its cost per 1,000 segments."""
    doc = verdict(runs["probe--markers"])
    diagnoses = doc["diagnoses"]
    assert diagnoses, doc["findings"]
    d = diagnoses[0]  # type: ignore[index]
    assert d["cause"] == "wrapper", [x["title"] for x in diagnoses]  # type: ignore[union-attr]
    where = d["where"]["text"]
    assert "with_memory_probe" in where and "framework.py" in where
    assert all(name in where for name in ("dist.broadcast", "dist.all_gather"))
    assert d["culprit_frame"].startswith("SegmentPool.free_bytes")
    assert d["culprit_counter"] == "demo.allocator_segments"
    assert "called from with_memory_probe" in " ".join(w["text"] for w in d["why"])
    assert "per 1,000 demo.allocator_segments" in d["next_step"]
    assert d["missing"] == [] and d["confidence_word"] == "high"
    # The findings of the one cause are in it, not beside it.
    same_cause = [x for x in diagnoses if x["severity"] != "info"]  # type: ignore[union-attr]
    assert len(same_cause) == 1, [x["title"] for x in same_cause]
    assert doc["verdict"]["n_problems"] == 1  # type: ignore[index]
    kinds = {f["id"]: f["kind"] for f in doc["findings"]}  # type: ignore[union-attr]
    grouped = {kinds[i] for i in d["finding_ids"]}
    assert {"accumulating_slowdown", "between_layers", "frame_shift"} <= grouped
    assert {"counter_correlation", "memory_growth"} <= grouped
    # The terminal shows the cause once: at most two warning-or-worse items.
    text = _text(runs["probe--markers"])
    tagged = [line for line in text.splitlines() if "[critical]" in line or "[warning]" in line]
    assert 1 <= len(tagged) <= 2, tagged
    assert text.splitlines()[1] == "VERDICT: 1 problem found" or text.splitlines()[1].startswith(
        "VERDICT: 1 problem found ("
    )


@pytest.mark.parametrize("markers", ["--markers", "--no-markers"])
def test_healthy_run_has_no_weight_sync_diagnosis(runs: dict[str, Path], markers: str) -> None:
    """No cause on the collectives and no weight-sync symptom (step, rollout and train time
    drift with the shared cores: see test_healthy_run_has_no_slowdown)."""
    doc = verdict(runs[f"none{markers}"])
    wrong = [
        d["title"]
        for d in doc["diagnoses"]  # type: ignore[union-attr]
        # "sampled": a rising weight-sync share of samples (the first window is start-up)
        # while the per-step weight sync stays flat is no slowdown.
        if d["cause"] in ("wrapper", "call_count", "per_call", "gaps", "sampled")
        or d["symptom_series"] == "weight_sync_s"
    ]
    assert not wrong, wrong


def test_workers_give_the_same_json_byte_for_byte(runs: dict[str, Path]) -> None:
    """``--workers 3`` digests the demo's traces in a pool: the JSON is the one of 1 worker."""
    run = str(runs["probe--markers"] / "run")
    one = wsprof("analyze", run, "--format", "json", "--workers", "1")
    three = wsprof("analyze", run, "--format", "json", "--workers", "3")
    assert one.returncode == three.returncode == 0, one.stderr + three.stderr
    assert json.loads(one.stdout)["diagnoses"], "the probe run has a diagnosis to compare"
    assert one.stdout == three.stdout
