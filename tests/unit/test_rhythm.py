"""Steps from the job's rhythm (``wsprof.analysis.rhythm``), waits for peers
(``ranks.peer_waits``) and the inconclusive verdict, on call tables built row by row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wsprof.analysis.model import WindowSummary
from wsprof.analysis.pushes import is_push
from wsprof.analysis.ranks import peer_waits
from wsprof.analysis.rhythm import find_cycle, idle_before, steps_from_rhythm, tokens
from wsprof.analysis.sampled_steps import steps_from_windows
from wsprof.analysis.steps import drop_truncated_edges
from wsprof.analysis.updates import push_group, steps_from_updates, updates
from wsprof.cli import main
from wsprof.trace.model import CallTable

pytestmark = pytest.mark.pure

MS = 1_000_000


class _Job:
    """Appends calls at a running clock: ``call(op, dur_ms, gap_ms, site, nbytes)``."""

    def __init__(self) -> None:
        self.t = 0
        self.rows: list[tuple[object, ...]] = []

    def call(
        self,
        op: str,
        dur_ms: float,
        gap_ms: float = 0.1,
        site: int = 1,
        nbytes: int = 1024,
        grp: str = "0",
    ) -> None:
        self.t += int(gap_ms * MS)
        t0, self.t = self.t, self.t + int(dur_ms * MS)
        self.rows.append(
            (
                t0,
                self.t,
                int(dur_ms * MS),
                1,
                1,
                op,
                f"dist.{op}",
                "api",
                nbytes,
                "torch.float32",
                grp,
                0,
                site,
                -1,
                None,
                None,
            )
        )

    def table(self) -> CallTable:
        return CallTable.from_rows(self.rows)


def _leaky_job(steps: int, grow_ms: float, train_ms: float = 150.0) -> CallTable:
    """Per step: training, a barrier, then 16 equal broadcasts of a 64 KiB parameter from one
    site with a gap between them that grows by ``grow_ms`` per step (the wrapper's
    overhead)."""
    j = _Job()
    j.call("broadcast", 1, site=9, nbytes=8)  # set-up: once
    for k in range(steps):
        j.call("barrier", 2, gap_ms=train_ms, site=2, nbytes=0)
        for _ in range(16):
            j.call("broadcast", 0.3, gap_ms=0.1 + grow_ms * k, site=3, nbytes=64 * 1024)
    return j.table()


def test_growing_overhead_between_calls_does_not_hide_the_steps() -> None:
    # By the last step the gaps between broadcasts (45 ms) are far longer than a tenth of the
    # pause between steps: idle-gap detection loses the steps exactly when the bug grows.
    calls = _leaky_job(10, grow_ms=5.0)
    rows = steps_from_rhythm(calls)
    assert len(rows) == 10
    # A step ends with its weight sync: the first holds the set-up broadcast too.
    assert [r.n_calls for r in rows] == [18] + [17] * 9
    sync = [r.weight_sync_s for r in rows]
    assert all(s is not None for s in sync)
    # Each sync is the barrier the ranks meet at when it starts (the frameworks' timers count
    # it; a wait for peers there is told apart across ranks), the 16 broadcasts and the gaps
    # before and between them.
    expected = [(2.0 + 16 * 0.3 + 16 * (0.1 + 5.0 * k)) / 1e3 for k in range(10)]
    assert np.allclose(sync, expected, rtol=0.02)
    assert all(r.sync_gap_s is not None and r.sync_gap_s > 0 for r in rows[1:])
    assert all(r.sync_start_ns is not None for r in rows)


def test_fsdp_like_steps_with_many_collectives_per_step() -> None:
    j = _Job()
    rng = np.random.default_rng(0)
    for _k in range(8):
        for layer in range(24):  # forward: one all-gather per layer, sizes differ per layer
            j.call(
                "all_gather_into_tensor",
                0.2,
                gap_ms=rng.uniform(40, 60) if layer == 0 else 0.5,
                site=5,
                nbytes=4096 * (layer + 1),
            )
        for layer in range(24):  # backward: reduce-scatter per layer
            j.call("reduce_scatter_tensor", 0.2, gap_ms=0.5, site=6, nbytes=4096 * (24 - layer))
        j.call("all_reduce", 0.05, site=7, nbytes=4)  # grad-norm
        for p in range(6):  # weight push to the engines
            j.call("broadcast", 1.0, gap_ms=rng.uniform(5, 80), site=8, nbytes=1 << (20 + p))
    rows = steps_from_rhythm(j.table())
    assert len(rows) == 8
    assert all(r.n_calls == 55 for r in rows)
    # The sync is the longest run of weight-push ops: the forward all-gathers (24 calls).
    assert all(r.weight_sync_s is not None for r in rows)


def test_no_repetition_no_steps() -> None:
    j = _Job()
    rng = np.random.default_rng(1)
    for i in range(60):
        j.call("broadcast", 0.2, gap_ms=float(rng.uniform(0, 50)), site=i, nbytes=i)
    assert steps_from_rhythm(j.table()) == []


def test_cycle_cut_goes_before_the_longest_pause() -> None:
    calls = _leaky_job(6, grow_ms=1.0)
    cyc = find_cycle(tokens(calls), idle_before(calls))
    assert cyc is not None and cyc.n_steps == 6
    assert all(str(calls.op[i]) == "barrier" for i in cyc.starts)
    assert cyc.coverage > 0.8


def test_peer_waits_only_where_ranks_met() -> None:
    s = 10**9
    # Rank 0 starts 150 ms before rank 2; all three end together: rank 0 waited 150 ms.
    met = [
        [
            (0, s),
        ],
        [(75 * MS, s)],
        [(150 * MS, s + 1000)],
    ]
    waits = peer_waits([[0], [0], [0]], met)
    assert [round(w[0] or 0, 3) for w in waits] == [0.15, 0.075, 0.0]
    # Independent syncs (ends as spread as starts): nobody waited for anybody.
    apart = [[(0, 10 * MS)], [(8 * MS, 30 * MS)]]
    assert peer_waits([[0], [0]], apart) == [[None], [None]]
    # One rank alone: unknown.
    assert peer_waits([[0]], [[(0, s)]]) == [[None]]


def test_steps_already_in_lockstep_neither_show_nor_refute_meeting() -> None:
    """A barrier-ended job: every step's syncs start within a fraction of a ms, except the
    first, whose sync waits 240 ms for the ranks still starting up. The lockstep steps cannot
    show meeting (no start spread to close), so they must not outvote the first step: its wait
    is subtracted (before, rank 0's median sync came out 1.2x its peers' and named it an
    outlier rank)."""
    s = 10**9
    first = [(0, 300 * MS), (240 * MS, 300 * MS + 1000)]
    later = [
        [(k * s + 100_000 * r, k * s + 50 * MS + 1000 * r) for r in range(2)] for k in range(1, 8)
    ]
    spans = [[first[r]] + [step[r] for step in later] for r in range(2)]
    waits = peer_waits([list(range(8))] * 2, spans)
    assert round(waits[0][0] or 0, 3) == 0.24 and waits[1][0] == 0
    assert all(w is not None and w <= 0.001 for w in waits[0][1:] + waits[1][1:])
    # Starts spread and ends as spread in most steps: still no meeting anywhere.
    apart = [[(k * s, k * s + 10 * MS), (k * s + 8 * MS, k * s + 30 * MS)] for k in range(4)]
    assert peer_waits([list(range(4))] * 2, [[a[r] for a in apart] for r in range(2)]) == [
        [None] * 4,
        [None] * 4,
    ]


def _csv(tmp_path: Path, values: list[float]) -> str:
    p = tmp_path / "s.csv"
    p.write_text("step,weight_sync_s\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values)))
    return str(p)


def test_few_steps_are_inconclusive_not_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    few = _csv(tmp_path, [1.0, 1.02, 0.99])
    assert main(["analyze", few]) == 0
    out = capsys.readouterr().out
    assert "VERDICT: INCONCLUSIVE: only 3 step(s)" in out
    assert "no accumulating problem" not in out
    assert main(["analyze", "--format", "json", few]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"]["status"] == "inconclusive"
    assert main(["analyze", "--fail-on", "inconclusive", few]) == 1
    assert "inconclusive" in capsys.readouterr().err
    enough = _csv(tmp_path, [1.0, 1.02, 0.99, 1.01, 1.0, 0.98, 1.01])
    assert main(["analyze", "--fail-on", "inconclusive", enough]) == 0
    assert "VERDICT: no accumulating problem" in capsys.readouterr().out


def _window(i: int, phase: str | None, n: int = 100) -> WindowSummary:
    samples = {phase: n} if phase else {"other": n}
    return WindowSummary(
        i * 10**9,
        (i + 1) * 10**9,
        n,
        n,
        None,
        None,
        {k: v / n for k, v in samples.items()},
        None,
        None,
        samples,
    )


def test_steps_from_sampled_phases_of_long_steps() -> None:
    # Sampling starts in a weight sync; then 5 steps: 3 rollout windows, 1 train, a sync of
    # k+1 windows, an idle window.
    ws: list[WindowSummary] = [_window(0, "weight_sync")]
    for k in range(5):
        for ph in ["rollout"] * 3 + ["train"] + ["weight_sync"] * (k + 1) + [None]:
            ws.append(_window(len(ws), ph))
    rows = steps_from_windows(ws)
    assert len(rows) == 5
    assert [r.weight_sync_s for r in rows] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(r.rollout_s == 3.0 and r.train_s == 1.0 for r in rows)
    # Windows longer than a step show no phase sequence: no steps, the windows stand in.
    assert steps_from_windows([_window(i, "weight_sync") for i in range(10)]) == []
    # A rollout in the first window started before sampling: that step is left out.
    assert [r.weight_sync_s for r in steps_from_windows([_window(0, "rollout"), *ws[1:]])] == [
        2.0,
        3.0,
        4.0,
        5.0,
    ]


# ------------------------------------------------------------------ weight pushes by evidence


def _engine(steps: int, initial_push: bool = True) -> tuple[CallTable, dict[str, object]]:
    """An inference engine (SGLang-shaped, TP rank 1): a scheduler loop that receives pickled
    requests from TP rank 0 every few ms on group '1' (int64 size + uint8 pickle), a decode
    loop of a varying number of tokens (two all-reduces each on the default group), then the
    weight update it receives: 20 float32 broadcasts of 256 KiB on 'slime-pp_0'."""
    j = _Job()
    rng = np.random.default_rng(3)

    def update() -> None:
        for i in range(20):
            j.call("broadcast", 2.0, gap_ms=0.3 if i else 5.0, site=7, nbytes=1 << 18, grp="pp")

    def control() -> None:
        j.call("broadcast", 0.05, gap_ms=8.0, site=3, nbytes=8, grp="1")
        j.call("broadcast", 0.05, site=4, nbytes=600, grp="1")

    j.call("barrier", 1, site=1, nbytes=0)
    if initial_push:
        update()
    for _ in range(steps):
        for _ in range(int(rng.integers(12, 33))):
            control()
            j.call("all_reduce", 0.2, gap_ms=1.0, site=5, nbytes=4096)
            j.call("all_reduce", 0.2, site=6, nbytes=4096)
        update()
    for _ in range(5):
        control()
    table = j.table()
    table.dtype[:] = np.where(table.bytes == 8, "torch.int64", table.dtype)
    table.dtype[:] = np.where(table.bytes == 600, "torch.uint8", table.dtype)
    meta = {
        "world": {"rank": 1, "size": 2},
        "groups": [
            {"name": "0", "size": 2, "rank": 1, "default": True},
            {"name": "1", "size": 2, "rank": 1, "default": False},
            {"name": "pp", "size": 3, "rank": 2, "default": False},
        ],
    }
    return table, meta


def test_engine_steps_are_the_weight_updates_it_receives() -> None:
    calls, meta = _engine(8)
    up = updates(calls, meta)
    assert up is not None and up.group == "pp" and not up.sender
    assert len(up.bursts) == 9  # the initial push and one per step
    rows = steps_from_updates(calls, up)
    # The segment before the initial push is start-up, not a step; after the last update,
    # the loop's tail is a truncated step: left out. One step per decoded batch? Never.
    assert len(rows) == 8
    syncs = [r.weight_sync_s for r in rows]
    assert all(s is not None and 0.035 < s < 0.06 for s in syncs), syncs  # 20 x 2 ms + gaps
    assert all(r.t_end_ns > r.t_start_ns for r in rows)
    assert all(a.t_end_ns == b.t_start_ns for a, b in zip(rows, rows[1:]))


def test_a_control_group_of_pickled_requests_is_not_a_push_group() -> None:
    calls, meta = _engine(6)
    keep = calls.grp != "pp"
    found = push_group(calls.take(np.nonzero(keep)[0]), meta)
    assert found is None


def test_tiny_gathers_are_no_weight_sync() -> None:
    # TRL without vLLM: per step a few gathers of rewards and lengths (tens of bytes): a run
    # of weight-push ops, but no push by any evidence.
    j = _Job()
    for _ in range(10):
        for site in (11, 12, 13, 14):
            j.call("all_gather", 0.1, gap_ms=40.0 if site == 11 else 0.2, site=site, nbytes=64)
    rows = steps_from_rhythm(j.table())
    assert len(rows) >= 9
    assert all(r.weight_sync_s is None for r in rows)
    assert not is_push(j.table(), 0, 4)


def test_two_unlike_halves_are_one_step() -> None:
    # TRL's step: generation (gathers of prompts, rewards: 11 calls) then optimisation (7
    # calls); a k=2 anchor would cut 24 steps for 12.
    j = _Job()
    for _ in range(12):
        for i in range(11):
            j.call("all_gather", 0.1, gap_ms=30.0 if i == 0 else 0.5, site=20 + i % 3, nbytes=64)
        for i in range(7):
            j.call("broadcast", 0.1, gap_ms=25.0 if i == 0 else 0.5, site=30 + i % 2, nbytes=32)
    rows = steps_from_rhythm(j.table())
    assert len(rows) in (11, 12, 13), [r.n_calls for r in rows]
    assert all(r.n_calls == 18 for r in rows[1:-1]), [r.n_calls for r in rows]


def test_truncated_edges_are_left_out() -> None:
    j = _Job()
    for _ in range(6):
        j.call("barrier", 1, gap_ms=100.0, site=1, nbytes=0)
        for _ in range(8):
            j.call("all_reduce", 0.5, site=2)
    j.call("barrier", 1, gap_ms=100.0, site=1, nbytes=0)  # the job ends inside a step
    rows, said = drop_truncated_edges(steps_from_rhythm(j.table()))
    assert [r.n_calls for r in rows] == [9] * 6
    assert [r.step for r in rows] == list(range(6))
    assert len(said) == 1 and "last step (1 calls" in said[0]


def test_updates_of_equal_buckets_with_stretched_gaps() -> None:
    # AReaL with a slow trainer rank: an engine receives 6 equal buckets per update, the gaps
    # between buckets stretched by the trainer's gathers (80-150 ms) to within 3x of the gaps
    # between updates (300-400 ms): neither a fixed gap ratio nor the group's rhythm (one
    # bucket long) gives the updates; the largest gaps that leave updates of equal bytes do.
    j = _Job()
    rng = np.random.default_rng(5)
    for _ in range(10):
        for b in range(6):
            gap = float(rng.uniform(300, 400)) if b == 0 else float(rng.uniform(80, 150))
            for i in range(10):
                j.call(
                    "broadcast",
                    0.5,
                    gap_ms=gap if i == 0 else 0.05,
                    site=7,
                    nbytes=1 << 17,
                    grp="pp",
                )
    calls = j.table()
    meta = {"world": {"rank": 0, "size": 2}, "groups": [{"name": "pp", "size": 3, "rank": 1}]}
    up = updates(calls, meta)
    assert up is not None and len(up.bursts) == 10, up
    assert all(b - a + 1 == 60 for a, b in up.bursts)


def _trl_like_job(steps: int) -> tuple[CallTable, list[int]]:
    """TRL's GRPO shape without step markers: a DDP set-up broadcast of the model (128 KiB
    of float32, once), then per step a rollout (compute, then its gathers), training (its
    reductions) and, after the step's end, the logger's metric gathers. The pause before the
    logger's gathers (backward and optimizer) is longer than the one before the rollout's
    first gather (generation): the pauses alone cut the step at the logger. Returns the
    calls and the rollout phases' starts (ns), as TRL's preset marks them."""
    j = _Job()
    for _ in range(4):
        j.call("broadcast", 1, site=1, nbytes=32 * 1024)  # DDP: _sync_module_states
    rollouts: list[int] = []
    for _k in range(steps):
        rollouts.append(j.t + 2 * MS)  # on_step_begin, then generation starts
        j.call("all_gather", 0.5, gap_ms=20, site=2, nbytes=32)  # first gather of the rollout
        for _ in range(3):
            j.call("all_gather", 0.5, site=3, nbytes=16)
        for _ in range(4):
            j.call("all_reduce", 0.5, gap_ms=5, site=5, nbytes=8)  # training
        j.call("all_gather", 0.5, gap_ms=30, site=6, nbytes=8)  # the logger, after the step
        j.call("all_gather", 0.5, site=7, nbytes=8)
    return j.table(), rollouts


def test_rollout_phases_place_the_cut_and_set_up_is_no_step() -> None:
    calls, rollouts = _trl_like_job(8)
    by_pause = steps_from_rhythm(calls)
    # Without the phases the cut goes before the logger's gathers (the longest pause), and the
    # set-up before them makes a step whose "sync" is DDP's broadcast of the model.
    assert calls.site[np.searchsorted(calls.t_start_ns, by_pause[1].t_start_ns)] == 6
    rows = steps_from_rhythm(calls, rollout_starts_ns=rollouts)
    assert len(rows) == 8
    starts = [int(calls.site[np.searchsorted(calls.t_start_ns, r.t_start_ns)]) for r in rows]
    assert starts == [2] * 8
    # Each step starts inside its own rollout's phase, after the phase's start.
    assert all(0 < r.t_start_ns - t < 25 * MS for r, t in zip(rows, rollouts))
    assert all(r.weight_sync_s is None for r in rows)


def test_a_lone_set_up_push_before_the_rhythm_is_no_weight_sync() -> None:
    """No repetition pushes weights: the head step (the set-up before the first repetition)
    keeps its calls but its broadcast of the model is not a weight sync."""
    calls, _ = _trl_like_job(8)
    rows = steps_from_rhythm(calls)
    assert rows and all(r.weight_sync_s is None for r in rows)
