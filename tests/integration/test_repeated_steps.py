"""A step number marked twice is one step, and no share of a step exceeds 100%: a real
``wsprof.patch()`` run (tests/targets/step_repeats.py), analysed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import TARGETS

from wsprof.analysis.run import analyze_path

#: Expected rollout share of every step of the target (ROLLOUT_S / (ROLLOUT_S + OTHER_S)).
EXPECTED_SHARE = 0.8
#: How far a share may fall below it on a loaded machine (a late wake-up lengthens "other").
SHARE_SLACK = 0.25


def test_repeated_step_numbers_are_one_step_and_shares_stay_under_100pct(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    subprocess.run(
        [sys.executable, str(TARGETS / "step_repeats.py"), str(out)],
        check=True,
        timeout=120,
        env={**os.environ, "WSPROF_QUIET": "1"},
    )
    analysis = analyze_path(str(out))
    [pa] = analysis.processes
    assert [r.step for r in pa.steps] == [0, 1, 2, 3, 4]
    shares = [r.rollout_share for r in pa.steps]
    assert all(s is not None and EXPECTED_SHARE - SHARE_SLACK <= s <= 1.0 for s in shares), shares
    by_step = {r.step: r for r in pa.steps}
    # A step marked twice lasts as long as both of its spans, with both rollouts in it.
    assert by_step[1].step_s > 1.5 * by_step[0].step_s
    assert by_step[1].rollout_s is not None and by_step[0].rollout_s is not None
    assert by_step[1].rollout_s > 1.5 * by_step[0].rollout_s
    [finding] = [f for f in analysis.findings if f.kind == "rollout_share"]
    assert finding.evidence.as_dict()["median_rollout_share"] <= 1.0
    assert "%" in finding.title and int(finding.title.split("%")[0].split()[-1]) <= 100
