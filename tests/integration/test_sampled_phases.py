"""Sampled phases from real py-spy samples of a real process (tests/targets/phase_target.py).

The target repeats steps of a constant ``generate`` and an ``update_weights`` that grows every
step. Sampled in 1 s windows and classified with ``--phase``-style user patterns, the
weight-sync share must be larger in the late windows than in the early ones, and the frame that
gained share must be ``update_weights``. Proportions only, never exact counts; the test
synchronises on the target's ``ready`` line and on the sampler, never on sleeps.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import pyspy_skip_reason, running_target

from wsprof.analysis.phases import build_patterns, phase_shares_by_window
from wsprof.analysis.run import analyze_run
from wsprof.analysis.samples import early_late_shift
from wsprof.capture.pyspy.sampler import STOP_DURATION, PySpySampler
from wsprof.trace.reader import read_run, read_trace
from wsprof.trace.writer import TraceWriter

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(REPO, "tests", "targets", "phase_target.py")
#: The patterns a user would give: ``--phase weight_sync=update_weights --phase rollout=...``.
PATTERNS = {"weight_sync": r"update_weights", "rollout": r"(?:^|\.)generate \("}
#: Windows sampled (1 s each): enough for a first and a last third of 2 windows each.
WINDOWS = 6
#: Least rise of the weight-sync share, first 2 windows against the last 2. The target's sync
#: goes from about 25% to about 60% of each window over the sampling, and still rises by over
#: 20 points when the sampler starts 2 s late (a CI machine's did: its share had grown so close
#: to saturation with a faster-growing target that it rose 59% -> 72% only).
MIN_RISE = 0.15
_SKIP = pyspy_skip_reason()
pytestmark = [pytest.mark.pyspy, pytest.mark.skipif(_SKIP is not None, reason=str(_SKIP))]


def test_weight_sync_share_grows_in_real_samples(tmp_path: Path) -> None:
    with running_target(script=Path(TARGET)) as proc:
        sampler = PySpySampler([proc.pid], str(tmp_path), window_s=1, duration_s=WINDOWS)
        sampler.start()
        reason = sampler.wait(timeout_s=30)
        assert proc.poll() is None, "the target must outlive the sampling"
    assert reason == STOP_DURATION and sampler.samples > 0

    samples = read_trace(sampler.path).samples
    rows = [
        r for r in phase_shares_by_window(samples, build_patterns(None, PATTERNS)) if r.n_active > 0
    ]
    assert len(rows) >= 4, f"expected {WINDOWS} windows with samples, got {len(rows)}"
    for r in rows:  # the target only generates and syncs
        assert (r.rollout_share or 0) + (r.weight_sync_share or 0) >= 0.8
    early = sum(r.weight_sync_share or 0.0 for r in rows[:2]) / 2
    late = sum(r.weight_sync_share or 0.0 for r in rows[-2:]) / 2
    assert late - early >= MIN_RISE, f"weight-sync share {early:.0%} -> {late:.0%}"

    shift = early_late_shift(samples, k=2)
    assert shift is not None and shift.gained and shift.lost
    assert shift.gained[0].frame.startswith("update_weights (")
    assert shift.lost[0].frame.startswith("generate (")

    # The same through analyze_run, as `wsprof attach --phase ...` leaves the run folder: a
    # process trace naming the target and its patterns, next to the sampler's trace.
    writer = TraceWriter(str(tmp_path / f"host-{proc.pid}.wsprof"))
    writer.set_meta({"pid": proc.pid, "source": "attach", "phase_patterns": PATTERNS})
    writer.close()
    analysis = analyze_run(read_run(str(tmp_path)), str(tmp_path))
    pa = analysis.primary
    assert pa is not None and pa.pid == proc.pid and pa.phase_source == "user"
    assert len(pa.windows) >= 4
    found = {f.kind: f for f in analysis.findings}
    assert (
        found["sampled_phase_share"].evidence.as_dict()["late_weight_sync_share"]
        > (found["sampled_phase_share"].evidence.as_dict()["early_weight_sync_share"])
    )
    assert any(r.series.name == "window_weight_sync_share" for r in analysis.series)
    # One diagnosis: the rising weight-sync share of samples, and the frame the time went to.
    if found["sampled_phase_share"].evidence.as_dict()["grows"]:
        d = analysis.diagnoses[0]
        assert d.cause in ("sampled", "unexplained"), [x.title for x in analysis.diagnoses]
        assert d.culprit_frame is not None and d.culprit_frame.startswith("update_weights (")
        assert d.where is not None and "update_weights" in d.where.text
        assert "update_weights" in d.next_step
