"""Phases of asyncio tasks and threads (tests/targets/asyncio_phases.py, a real 2-rank gloo job).

Phases are per context: two tasks interleaving on one thread each stamp their own phase on
their collectives; a thread or task with no phase of its own inherits (the main thread's, the
creator's). The calls of each case are told apart by their tensor size (``bytes``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from helpers import TARGETS, run_ranks

import wsprof
from wsprof.capture.markers import PHASE_VAR, STATE, current_phase
from wsprof.trace.reader import read_run

WORLD = 2
SCRIPT = TARGETS / "asyncio_phases.py"
#: Mirrors the target's ELEMS: label -> (float32 elements, expected phase, step, calls).
EXPECTED: dict[str, tuple[int, str | None, int, int]] = {
    "interleaved_rollout": (1, "rollout", 0, 4),
    "interleaved_weight_sync": (2, "weight_sync", 0, 4),
    "thread_inherited": (3, "rollout", 1, 1),
    "thread_own": (4, "weight_sync", 1, 1),
    "child_inherited": (5, "rollout", 2, 1),
    "child_own": (6, "weight_sync", 2, 1),
    "creator": (7, "rollout", 2, 1),
    "child_after": (8, "rollout", 2, 1),
    "no_phase": (9, None, 3, 1),
}


def test_each_task_and_thread_stamps_its_own_phase(tmp_path: Path) -> None:
    run_ranks(SCRIPT, WORLD, str(tmp_path))
    traces = read_run(str(tmp_path))
    assert [t.meta["rank"] for t in traces] == list(range(WORLD))
    label_of = {4 * elems: label for label, (elems, _, _, _) in EXPECTED.items()}
    for rank, trace in enumerate(traces):
        order = json.loads((tmp_path / f"order-{rank}.json").read_text())
        # The two tasks really interleaved on one thread: their calls alternate.
        assert order[:8] == ["interleaved_rollout", "interleaved_weight_sync"] * 4, order
        calls = trace.calls
        assert set(calls.op.tolist()) == {"all_reduce"}
        seen: dict[str, int] = {}
        rows = sorted(
            zip(
                calls.t_start_ns.tolist(),
                calls.bytes.tolist(),
                calls.phase.tolist(),
                calls.step.tolist(),
                calls.thread.tolist(),
                strict=True,
            )
        )
        for _, nbytes, phase, step, _ in rows:
            label = label_of[nbytes]
            _, want_phase, want_step, _ = EXPECTED[label]
            assert (phase, step) == (want_phase, want_step), (
                f"rank {rank}: {label} call stamped phase {phase!r} step {step}"
            )
            seen[label] = seen.get(label, 0) + 1
        assert seen == {label: n for label, (_, _, _, n) in EXPECTED.items()}, seen
        assert [label_of[r[1]] for r in rows] == order  # one row per call, in call order
        # The interleaved calls were on one thread; the thread's calls on another.
        thread_of = {label_of[r[1]]: r[4] for r in rows}
        assert thread_of["interleaved_rollout"] == thread_of["interleaved_weight_sync"]
        assert thread_of["thread_own"] != thread_of["interleaved_rollout"]
        # The phase spans are written as before: the two tasks' spans overlap on one thread.
        spans = [s for s in trace.spans if s.kind == "phase" and s.step == 0]
        assert sorted(s.name for s in spans) == ["rollout", "weight_sync"]
        a, b = spans
        assert a.thread == b.thread
        assert a.t_start_ns < b.t_end_ns and b.t_start_ns < a.t_end_ns


def main_stack() -> tuple[str, ...]:
    """The main thread's phase stack (a call: no type narrowing between the asserts)."""
    return STATE.main_stack


def test_current_phase_per_context() -> None:
    """The rule the hooks apply, in this process (no collective needed)."""
    assert current_phase() is None and main_stack() == ()
    got: dict[str, str | None] = {}

    async def child() -> None:
        got["child_inherited"] = current_phase()
        with wsprof.phase("weight_sync"):
            await asyncio.sleep(0)
            got["child_own"] = current_phase()
        got["child_after"] = current_phase()

    async def main() -> None:
        with wsprof.phase("rollout"):
            task = asyncio.create_task(child())
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            got["creator"] = current_phase()  # the child is in its own phase now
            await task
        got["after"] = current_phase()

    asyncio.run(main())
    assert got == {
        "child_inherited": "rollout",
        "child_own": "weight_sync",
        "child_after": "rollout",
        "creator": "rollout",
        "after": None,
    }

    def thread_body() -> None:
        got["thread"] = current_phase()
        with wsprof.phase("train"):
            got["thread_own"] = current_phase()
        got["thread_after"] = current_phase()

    with wsprof.phase("rollout"):
        t = threading.Thread(target=thread_body)
        t.start()
        t.join()
        assert main_stack() == ("rollout",)  # the thread's phase is not the main thread's
    assert (got["thread"], got["thread_own"], got["thread_after"]) == (
        "rollout",
        "train",
        "rollout",
    )
    assert current_phase() is None and main_stack() == () and PHASE_VAR.get(()) == ()


def test_phases_exited_out_of_order_leave_no_stale_name() -> None:
    outer, inner = wsprof.phase("rollout"), wsprof.phase("weight_sync")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)  # not the innermost: its name alone is removed
    assert PHASE_VAR.get(()) == ("weight_sync",) and main_stack() == ("weight_sync",)
    inner.__exit__(None, None, None)
    assert PHASE_VAR.get(()) == () and main_stack() == () and current_phase() is None
    # One instance entered twice at once (nested) unwinds both.
    p = wsprof.phase("train")
    with p, p:
        assert PHASE_VAR.get(()) == ("train", "train")
    assert PHASE_VAR.get(()) == () and current_phase() is None
