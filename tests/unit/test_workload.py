"""A step time that grows with the work of the step (longer responses at a flat tokens/s) is
workload, not a leak (issue 28 item 6); the same growth without the work growing stays a
slowdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wsprof.analysis.run import analyze_path

pytestmark = pytest.mark.pure

HEADER = "rollout/step,perf/step_time,rollout/response_lengths,perf/tokens_per_gpu_per_sec\n"


def _csv(path: Path, step: np.ndarray, resp: np.ndarray, tps: np.ndarray) -> str:
    rows = [f"{i},{s:.4f},{r:.1f},{t:.1f}" for i, (s, r, t) in enumerate(zip(step, resp, tps))]
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return str(path)


def test_longer_responses_at_flat_throughput_are_workload(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 40
    resp = 1000 * (1 + 0.25 * np.arange(n) / n) * (1 + 0.02 * rng.standard_normal(n))
    tps = 500 * (1 + 0.02 * rng.standard_normal(n))
    a = analyze_path(_csv(tmp_path / "w.csv", resp * 8 / tps + 2, resp, tps))
    slow = [f for f in a.findings if f.kind == "accumulating_slowdown"]
    assert slow and slow[0].severity == "info", [(f.severity, f.title) for f in a.findings]
    assert "workload, not a leak" in slow[0].title
    assert slow[0].evidence.as_dict()["workload"]["series"] == "rollout/response_lengths"
    assert a.verdict.status == "no_problem"


def test_the_same_growth_without_more_work_is_a_slowdown(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n = 40
    resp = 1000 * (1 + 0.02 * rng.standard_normal(n))
    tps = 500 * (1 + 0.02 * rng.standard_normal(n))
    step = resp * 8 / tps + 2 + 0.1 * np.arange(n)  # +100 ms/step that no work explains
    a = analyze_path(_csv(tmp_path / "l.csv", step, resp, tps))
    slow = [f for f in a.findings if f.kind == "accumulating_slowdown"]
    assert slow and slow[0].severity in ("warning", "critical")
    assert "workload" not in slow[0].evidence.as_dict()
    assert a.verdict.status == "problems"


def test_growth_on_the_newest_step_alone_waits_in_analyze_as_in_watch(tmp_path: Path) -> None:
    # A flat step time whose last step is a checkpoint save: growth that rests on the newest
    # step alone is no trend yet, in `wsprof analyze` as in `wsprof watch`, and the verdict is
    # inconclusive, not "no problem" and not a leak.
    from wsprof.analysis.live import _judge
    from wsprof.analysis.run import classify_series
    from wsprof.contracts.series import STEP_S, Series
    from wsprof.contracts.units import Unit

    # Without its last step the series is judged flat; with it, a material growth (+4 s over
    # the run, 20% of a step; found by search).
    values = [
        20.28,
        19.42,
        19.78,
        16.94,
        23.5,
        22.72,
        20.71,
        22.56,
        22.02,
        20.97,
        23.47,
        21.73,
        28.0,
    ]
    s = Series(STEP_S, Unit.SECONDS, tuple(range(13)), tuple(values))
    (analyzed,) = classify_series([s], [])
    watched = _judge(s, {})
    assert watched is not None
    for v in (analyzed.verdict, watched.verdict):
        assert not v.accumulating and v.evidence.get("newest_step_alone") == 1.0
    resp = np.full(13, 1000.0)
    tps = np.full(13, 500.0)
    a = analyze_path(_csv(tmp_path / "spike.csv", np.array(values), resp, tps))
    assert a.verdict.status == "inconclusive", a.verdict
    assert any("newest step" in r for r in a.verdict.reasons), a.verdict.reasons


def test_rss_growth_is_judged_against_the_hosts_memory() -> None:
    # A healthy AReaL-shaped trainer: RSS +3 MiB a step over 12 steps on a 24 GiB host: the
    # host's memory lasts 8,000 more steps: info. The same curve at 1 GiB a step: warning.
    from wsprof.analysis.facts import Facts
    from wsprof.analysis.growth import classify
    from wsprof.analysis.model import SeriesResult
    from wsprof.analysis.rules.counters import CounterGrowth
    from wsprof.contracts.counters import proc_counter
    from wsprof.contracts.series import Series, counter_key
    from wsprof.contracts.units import Unit

    def facts(per_step: float) -> Facts:
        steps = tuple(range(12))
        rss = tuple(318e6 + per_step * k + 1e5 * ((-1) ** k) for k in steps)
        host = tuple(24 * 2.0**30 for _ in steps)
        out = {}
        for name, vals in (("rss_bytes", rss), ("host_total_bytes", host)):
            s = Series(counter_key(proc_counter(name)), Unit.BYTES, steps, vals)
            out[s.name] = SeriesResult(s, classify(vals))
        return Facts(out, [])

    (slow,) = CounterGrowth().match(facts(3 * 2.0**20))
    assert slow.severity == "info" and "lasts" in slow.title, slow.title
    (fast,) = CounterGrowth().match(facts(2.0**30))
    assert fast.severity in ("warning", "critical"), fast.title


def test_a_newest_step_within_the_others_spread_is_noise_not_held() -> None:
    # Millisecond steps (uniform noise, found by search): the fit grows only with the last
    # point, which is within the spread of the others: no slow step, nothing to hold; the
    # same series ending in a step far above the spread is held as one slow step.
    from wsprof.analysis.growth import classify, hold_newest

    noise = [5.9, 4.86, 3.59, 5.62, 7.0, 7.46, 7.89]
    v = classify(noise)
    assert v.accumulating and not classify(noise[:-1]).accumulating
    held = hold_newest(noise, v)
    assert not held.accumulating and "newest_step_alone" not in held.evidence
    spike = [*noise[:-1], 30.0]
    held = hold_newest(spike, classify(spike))
    assert not held.accumulating and held.evidence.get("newest_step_alone") == 1.0


def test_a_newest_step_above_a_settled_rise_is_held_not_called_noise() -> None:
    # Shaped like a CI run of tests/targets/unmarked_sync_job.py (its first six steps and
    # about its tenth; the three between were cut from the log): the sync rose 45 -> 523 ms,
    # settled at 550-570 ms (the others' verdict: warmup_then_flat), and its newest step read
    # 860 ms. Against the spread of the values (45-570 ms) that step was "within the spread",
    # and the growth was dropped as noise with nothing said; against the settled level it
    # stands far out: one step that alone says "grows", held and said.
    from wsprof.analysis.growth import classify, hold_newest

    rise = [0.045, 0.152, 0.250, 0.368, 0.458, 0.523, 0.55, 0.56, 0.57, 0.86]
    v = classify(rise)
    assert v.accumulating and classify(rise[:-1]).shape == "warmup_then_flat"
    held = hold_newest(rise, v)
    assert not held.accumulating and held.evidence.get("newest_step_alone") == 1.0
