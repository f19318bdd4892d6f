"""Launch the demo job, sample rank 0 with py-spy from outside, then analyse and report."""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable
from dataclasses import replace

from wsprof.capture import pyspy
from wsprof.capture.pyspy.sampler import PySpySampler
from wsprof.demo.ports import free_port
from wsprof.demo.workload import DemoConfig, rank_main
from wsprof.errors import WsprofError
from wsprof.trace.outputs import make_private_dir

#: Seconds to wait for rank 0 to come up before giving up.
START_TIMEOUT_S = 120.0


class DemoFailed(WsprofError):
    """A demo rank failed; the message names the rank and its exit code."""


def run_job(cfg: DemoConfig, sample: bool = True, say: Callable[[str], None] = print) -> list[str]:
    """Run the demo ranks to completion, with py-spy on rank 0 when the OS allows it.

    Args:
        cfg: demo settings; ``cfg.out`` is the run folder.
        sample: try to sample rank 0 with py-spy.
        say: where one-line progress messages go.

    Returns:
        Notes for the report (e.g. why py-spy did not sample).

    Raises:
        DemoFailed: a rank exited non-zero or rank 0 never started.
        SharedFolderError: ``cfg.out`` is another user's or writable by others (one line).
    """
    cfg = replace(cfg, port=free_port())
    make_private_dir(cfg.out)  # user-only (0700); a shared one refused (trace.outputs)
    ctx = mp.get_context("spawn")
    rollouts = ctx.Queue()
    ready = ctx.Queue()
    procs = [
        ctx.Process(target=rank_main, args=(r, cfg, rollouts, ready), name=f"wsprof-demo-rank{r}")
        for r in range(cfg.world_size)
    ]
    for p in procs:
        p.start()
    notes: list[str] = []
    sampler: PySpySampler | None = None
    try:
        try:
            pid0 = ready.get(timeout=START_TIMEOUT_S)
        except queue.Empty as e:
            raise DemoFailed("demo rank 0 did not start within 120 s; see the output above") from e
        if sample:
            sampler, note = _start_sampler(cfg.out, int(pid0))
            if note:
                say(f"wsprof demo: py-spy not sampling: {note}")
                notes.append(f"py-spy did not sample rank 0: {note}")
        for p in procs:
            p.join()
    finally:
        if sampler is not None:
            reason = sampler.stop()
            if sampler.state == "failed":
                notes.append(f"py-spy stopped early: {reason}")
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
    failed = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    if failed:
        name, code = failed[0]
        raise DemoFailed(f"demo process {name} exited with code {code}; see its output above")
    return notes


def _start_sampler(out: str, pid: int) -> tuple[PySpySampler | None, str | None]:
    problem = pyspy.ptrace_problem(pid)
    if problem:
        return None, problem
    try:
        sampler = PySpySampler([pid], out_dir=out, rate_hz=50, window_s=2)
        sampler.start()
    except WsprofError as e:
        return None, str(e)
    return sampler, None
