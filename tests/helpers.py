"""Helpers shared by tests: repo paths and running real multi-process jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wsprof.demo.ports import free_port

REPO = Path(__file__).resolve().parents[1]
TARGETS = REPO / "tests" / "targets"
#: The shared cases folder: ``$WSPROF_CASES``, else ``../shared/cases`` beside the checkout.
CASES = Path(os.environ.get("WSPROF_CASES", REPO.parent / "shared" / "cases"))
#: A Python process with a known hot function (see its docstring).
BUSY_TARGET = TARGETS / "busy_target.py"
#: Seconds a target may take to end after release before a test kills it.
TARGET_EXIT_TIMEOUT_S = 10
#: True under CI (``CI=true``, as CI runs ``.ci/run``): a missing case is a failure, not a skip.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_cases(path: Path) -> None:
    """Skip the calling test when the shared case file ``path`` is missing; under CI fail.

    CI runs with a copy of ``shared/`` beside the checkout, so a missing case there means the
    verdict cases were silently not checked: that must fail, not pass as skipped.

    Raises:
        pytest.fail.Exception: under CI when ``path`` does not exist.
        pytest.skip.Exception: elsewhere when ``path`` does not exist.
    """
    import pytest

    if path.exists():
        return
    why = f"shared case {path} not found (the repo's sibling 'shared' checkout, or $WSPROF_CASES)"
    if IN_CI:
        pytest.fail(f"{why}: CI must run with the shared cases", pytrace=False)
    pytest.skip(why)


def pyspy_skip_reason() -> str | None:
    """Why py-spy tests cannot run here (py-spy missing or too old, ptrace not allowed), or None."""
    from wsprof.capture.pyspy.binary import find_pyspy
    from wsprof.capture.pyspy.ptrace import ptrace_problem
    from wsprof.errors import InputError

    try:
        find_pyspy()
    except InputError as e:
        return f"py-spy unavailable: {e}"
    problem = ptrace_problem(os.getpid())
    return f"ptrace not allowed here: {problem}" if problem else None


@contextmanager
def running_target(*args: str, script: Path = BUSY_TARGET) -> Iterator[subprocess.Popen[str]]:
    """Start a target script, wait for its ``ready`` line, release (close stdin) and reap it
    afterwards."""
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"target did not start (printed {line!r})"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=TARGET_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def run_ranks(
    script: Path, world: int, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> list[str]:
    """Run ``script RANK WORLD PORT *args`` as ``world`` real processes (with ``env`` added to
    the environment); fail on any error.

    Returns:
        Each rank's output (stdout and stderr).
    """
    port = str(free_port())
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), port, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        outputs.append(out)
    bad = [(i, p.returncode, outputs[i]) for i, p in enumerate(procs) if p.returncode != 0]
    assert not bad, f"rank {bad[0][0]} exited {bad[0][1]}:\n{bad[0][2][-3000:]}"
    return outputs


#: c10d's Flight Recorder off (0 entries): what no hook sees stays unrecorded, for tests of
#: the coverage audit's shortfall (with it on, :mod:`wsprof.capture.flight` records it).
NO_FLIGHT = {"TORCH_FR_BUFFER_SIZE": "0"}


def job_coverage(
    tmp_path: Path, code: str, world: int = 1, env: dict[str, str] | None = None
) -> Any:
    """Run ``code`` (a job script taking ``RANK WORLD PORT OUT``) as ``world`` real processes
    (``env`` added to their environment) and return the coverage audit of its run folder
    (:class:`wsprof.analysis.coverage_model.Coverage`)."""
    from wsprof.analysis.run import analyze_path

    script = tmp_path / "job.py"
    script.write_text(code)
    run_ranks(script, world, str(tmp_path / "run"), env=env)
    cov = analyze_path(str(tmp_path / "run")).coverage
    assert cov is not None
    return cov


@contextmanager
def gloo_world_of_one() -> Iterator[None]:
    """A real world-size-1 gloo process group on 127.0.0.1 in this process, for the module's
    in-process tests (``gloo = pytest.fixture(scope="module", autouse=True)(...)``)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def load_script(name: str) -> Any:
    """``scripts/<name>.py`` as a module (the benchmarks' generators write real traces)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


#: Share of its median step by which a job's own step clock must have grown (fitted trend over
#: the steps after the first) for a healthy job's "step time grows" to be the truth: half the
#: analysis's own bar (``SLOWDOWN_MATERIAL_SHARE``, 10%), so that two estimators of one trend
#: never disagree at the edge.
OWN_CLOCK_GREW_SHARE = 0.05


def own_clock_grew(step_s: list[float]) -> bool:
    """Whether a job's own timing of its steps (s, in step order) grew: a loaded machine slows
    a healthy job itself (a CI run: its rollout 0.47 -> 1.0 s over 12 steps), and then "step
    time grows" is what happened, not a false alarm. Straight-line least squares over the
    steps after the first (warm-up), slope x steps spanned against the median step."""
    import numpy as np

    v = np.asarray(step_s[1:], dtype=float)
    if len(v) < 3:
        return False
    slope = float(np.polyfit(np.arange(len(v)), v, 1)[0])
    return slope * (len(v) - 1) >= OWN_CLOCK_GREW_SHARE * float(np.median(v))


def only_step_time_warned(a: Any, truth: list[dict[str, Any]]) -> list[str]:
    """The warning-or-critical diagnoses of a healthy job's analysis that its own clock does
    not explain: none may blame the weight sync, a wrapper or a collective, and "step time
    grows" (``step_s``) only where :func:`own_clock_grew` says the job itself slowed.

    Args:
        a: the analysis (its primary process must be known).
        truth: the job's truth rows (``truth.jsonl``): the primary's, by pid, with ``step`` 0
            and up, give its own step times (``step_s``).
    """
    assert a.primary is not None
    mine = [
        t
        for t in truth
        if t.get("pid") == a.primary.pid and isinstance(t.get("step"), int) and t["step"] >= 0
    ]
    own = [float(t["step_s"]) for t in sorted(mine, key=lambda t: int(t["step"]))]
    warned = [d for d in a.diagnoses if d.severity in ("warning", "critical")]
    grew = own_clock_grew(own)
    return [
        f"{d.severity}: {d.title} (own clock grew: {grew})"
        for d in warned
        if not (grew and d.symptom_series == "step_s" and d.cause == "unexplained")
    ]
