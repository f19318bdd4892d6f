"""Coverage of wsprof's capture: every collective path of RL weight sync, bare and with wsprof.

Runs ``tests/targets/coverage_paths.py`` as real gloo jobs on 127.0.0.1 (world 2 for every
path but ``dtensor_2d``, world 4), each job once bare and once under ``wsprof.patch()``, with
``torch.profiler`` on in both, then prints per path:

* ``truth``: collectives issued per run, from the profiler (top-level ``c10d::`` op events;
  for a path that calls the ``Backend`` object directly, which makes no ``c10d::`` event,
  gloo's ``gloo:`` events), summed over ranks and steps, bare / with wsprof;
* ``rows``: calls wsprof recorded in those same step windows (a row of
  ``read_trace(path).calls``), and ``n_be``: the sum of their ``n_backend`` (collectives
  issued as wsprof saw them);
* ``covered``: the collectives those rows account for, each row ``max(n_backend, 1)``: one
  logical call that issues several collectives (``dist._broadcast_coalesced``'s buckets,
  ``all_gather_object``) is one row that covers them all, while a collective recorded twice
  (two rows) counts twice; ``cover``: covered / truth (judged: >= 95 %, and no more than
  truth / 95 %);
* ``ops ok``: whether every op kind of the truth is covered (>= 95 %) under its own kind;
* ``same``: results bit-identical (sha256 of every result tensor on every rank);
  ``exc``: the exceptions identical (type and message), bare vs wsprof.

``compiled@warm`` is ``compiled`` without its first (compiling) step.

Usage: python scripts/coverage_table.py [--keep DIR] [--json FILE]

The test ``tests/integration/test_coverage_paths.py`` judges the same numbers through
:func:`measure`.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "tests" / "targets" / "coverage_paths.py"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from wsprof.demo.ports import free_port  # noqa: E402
from wsprof.trace.reader import read_trace  # noqa: E402


def target_paths(target: Path = TARGET) -> dict[str, int]:
    """Path name -> world size, read from the target's ``PATHS`` table (without importing it:
    that would import torch); the table's order."""
    tree = ast.parse(target.read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "PATHS":
            table = node.value
            break
    else:
        raise RuntimeError(f"{target}: no PATHS table")
    assert isinstance(table, ast.Dict)
    out: dict[str, int] = {}
    for key, value in zip(table.keys, table.values):
        assert isinstance(key, ast.Constant) and isinstance(value, ast.Call)
        out[str(key.value)] = int(ast.literal_eval(value.args[0]))
    return out


#: Path name -> world size; the order of the table.
PATHS: dict[str, int] = target_paths()

#: Table rows that are a slice of a path's steps: name -> (path, first step).
VARIANTS: dict[str, tuple[str, int]] = {"compiled@warm": ("compiled", 1)}
#: Paths that issue no collective at all (coverage does not apply), with the reason.
NO_COLLECTIVE: dict[str, str] = {
    "pg_subclass": "the call raises before reaching any backend (no collective issued)",
}
#: The share of the ground truth wsprof must record.
MIN_COVERAGE = 0.95
#: Seconds one job may run before it is killed.
JOB_TIMEOUT_S = 150.0
MODES = ("bare", "wsprof")


def family(name: str) -> str:
    """The op kind of a profiler event name (``c10d::allgather_into_tensor_coalesced_``,
    ``gloo:sparse_all_reduce``) or of a wsprof op (``all_gather_into_tensor``); ``*`` for
    wsprof's ``coalesced`` (a coalescing block: one call of whatever kind it holds)."""
    n = name.split("::")[-1].split(":")[-1].replace("_", "").lower()
    if n == "coalesced":
        return "*"
    for key, fam in (
        ("reducescatter", "reduce_scatter"),
        ("allreduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("barrier", "barrier"),
        ("reduce", "reduce"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        ("send", "p2p"),
        ("recv", "p2p"),
        ("p2p", "p2p"),
    ):
        if key in n:
            return fam
    return n


def families(counts: Counter[str] | dict[str, int]) -> Counter[str]:
    out: Counter[str] = Counter()
    for k, v in counts.items():
        out[family(k)] += v
    return out


def needed(truth: int) -> int:
    """Rows needed to cover ``truth`` collectives at :data:`MIN_COVERAGE`."""
    return math.ceil(truth * MIN_COVERAGE - 1e-9)


def kinds_missing(truth: Counter[str], recorded: Counter[str]) -> dict[str, tuple[int, int]]:
    """Op kinds recorded under :data:`MIN_COVERAGE` of their truth: kind -> (recorded, truth).
    wsprof's ``coalesced`` rows (kind ``*``) fill any kind's shortfall."""
    spare = recorded.get("*", 0)
    short: dict[str, tuple[int, int]] = {}
    for kind, n in sorted(truth.items()):
        have = recorded.get(kind, 0)
        gap = max(needed(n) - have, 0)
        use = min(gap, spare)
        spare -= use
        if gap > use:
            short[kind] = (have + use, n)
    return short


# --- running the jobs ----------------------------------------------------------------------


@dataclass
class Job:
    world: int
    mode: str
    out: Path
    returncodes: list[int] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    timed_out: bool = False
    retried_after: str = ""  # why the first attempt failed, when this is the second

    @property
    def ok(self) -> bool:
        return bool(self.returncodes) and all(rc == 0 for rc in self.returncodes)

    def why(self) -> str:
        bad = [(r, rc) for r, rc in enumerate(self.returncodes) if rc != 0]
        if not bad:
            return ""
        r, rc = bad[0]
        how = f"killed after {JOB_TIMEOUT_S:.0f} s" if self.timed_out else f"exited {rc}"
        return f"{self.mode} world-{self.world} job: rank {r} {how}:\n{self.outputs[r][-3000:]}"


def launch(
    world: int, mode: str, out: Path, paths: str = "all", timeout: float = JOB_TIMEOUT_S
) -> Job:
    """Run the target as ``world`` ranks (``RANK WORLD PORT OUT PATHS --MODE``, the
    ``tests/helpers.run_ranks`` convention) and wait; never raises on a failed rank (its exit
    code and output are in the job; a job past ``timeout`` is killed)."""
    out.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "WSPROF_KEEP_STEPS": "0",
        "WSPROF_QUIET": "1",
        "MASTER_ADDR": "127.0.0.1",
    }
    env.pop("WSPROF_DISABLE", None)
    job = Job(world, mode, out)
    t0 = time.monotonic()
    logs = [open(out / f"log-{r}.txt", "w+") for r in range(world)]  # noqa: SIM115
    procs = [
        subprocess.Popen(
            [sys.executable, str(TARGET), str(r), str(world), port, str(out), paths, f"--{mode}"],
            stdout=logs[r],
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        for r in range(world)
    ]
    deadline = t0 + timeout
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            job.timed_out = True
            for q in procs:
                if q.poll() is None:
                    q.kill()
            for q in procs:
                q.wait()
            break
    job.wall_s = time.monotonic() - t0
    for p, fh in zip(procs, logs):
        job.returncodes.append(p.returncode)
        fh.seek(0)
        job.outputs.append("".join(line for line in fh if not line.startswith("USDT:")))
        fh.close()
    return job


def run_all(root: Path) -> list[Job]:
    """Every job, one after the other (2 cores: running them at once only slows each). A job
    that failed before writing any result is run once more on a fresh port (another process
    may take the free port before rank 0 binds it); a second failure stands."""
    jobs = []
    for w in sorted(set(PATHS.values())):
        for mode in MODES:
            out = root / f"{mode}-w{w}"
            job = launch(w, mode, out)
            if not job.ok and not list(out.glob("result-*.json")):
                first = job
                job = launch(w, mode, out)
                job.retried_after = first.why()
            jobs.append(job)
    return jobs


# --- judging -------------------------------------------------------------------------------


@dataclass
class RankResult:
    """One rank of one table row: its ground truth both runs, what wsprof recorded, and the
    bare/wsprof comparison."""

    rank: int
    truth_source: str  # "c10d" or "gloo"
    truth_bare: Counter[str]  # by event name, over the row's steps
    truth_wsprof: Counter[str]
    c10d_bare: list[dict[str, int]]  # per step, both sources, for the unchanged-count check
    c10d_wsprof: list[dict[str, int]]
    gloo_bare: list[dict[str, int]]
    gloo_wsprof: list[dict[str, int]]
    rows: int
    n_backend: int
    covered: int  # sum over rows of max(n_backend, 1)
    recorded_ops: Counter[str]  # rows by wsprof op
    #: rows by "api [layer] thread k" (k: the thread's order of first appearance), said when
    #: a check fails: which hook recorded what, on which thread
    recorded_by: Counter[str]
    covered_ops: Counter[str]  # covered by wsprof op
    coalesced_bytes: list[int]  # bytes of each recorded row of op "coalesced"
    row_bytes: list[int]
    results_same: bool
    exc_bare: list[str] | None
    exc_wsprof: list[str] | None
    errors_same: bool
    expect: dict[str, Any]
    steps: int  # steps the bare run ran in this row
    n_results: int  # results the bare run hashed (over all its steps)
    probe_bare: Any = None  # the path's probe after its last step (torch._dynamo's counters)
    probe_wsprof: Any = None

    @property
    def truth(self) -> int:
        return sum(self.truth_bare.values())

    @property
    def missing_kinds(self) -> dict[str, tuple[int, int]]:
        return kinds_missing(families(self.truth_bare), families(self.covered_ops))


@dataclass
class Row:
    name: str
    path: str
    world: int
    ranks: list[RankResult]
    problem: str | None = None  # why some result is missing

    def total(self, attr: str) -> int:
        return sum(getattr(r, attr) for r in self.ranks)

    @property
    def truth_wsprof(self) -> int:
        return sum(sum(r.truth_wsprof.values()) for r in self.ranks)


_traces: dict[str, Any] = {}


def _calls(trace: str | None) -> Any:
    if not trace:
        return None
    if trace not in _traces:
        _traces[trace] = read_trace(trace).calls
    return _traces[trace]


def _sum(steps: Iterable[dict[str, Any]], key: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for s in steps:
        out.update(s[key])
    return out


def _rank_result(bare: dict[str, Any], ws: dict[str, Any], first: int, source: str) -> RankResult:
    b_steps, w_steps = bare["steps"][first:], ws["steps"][first:]
    calls = _calls(ws.get("trace"))
    rows = n_backend = covered = 0
    ops: Counter[str] = Counter()
    by: Counter[str] = Counter()
    covered_ops: Counter[str] = Counter()
    coalesced: list[int] = []
    row_bytes: list[int] = []
    if calls is not None and len(calls.t_start_ns):
        mask = np.zeros(len(calls.t_start_ns), dtype=bool)
        for s in w_steps:
            mask |= (calls.t_start_ns >= s["t0_ns"]) & (calls.t_start_ns <= s["t1_ns"])
        sel = calls.take(mask)
        rows = int(mask.sum())
        n_backend = int(sel.n_backend.sum())
        ops = Counter(str(o) for o in sel.op.tolist())
        threads = list(dict.fromkeys(int(t) for t in calls.thread.tolist()))
        by = Counter(
            f"{a} [{la}] thread {threads.index(int(t))}"
            for a, la, t in zip(sel.api.tolist(), sel.layer.tolist(), sel.thread.tolist())
        )
        for o, nb in zip(sel.op.tolist(), sel.n_backend.tolist()):
            covered_ops[str(o)] += max(int(nb), 1)
        covered = sum(covered_ops.values())
        row_bytes = [int(b) for b in sel.bytes.tolist()]
        coalesced = [
            int(b) for b, o in zip(sel.bytes.tolist(), sel.op.tolist()) if o == "coalesced"
        ]
    same = (
        bare.get("sha256") == ws.get("sha256")
        and bare.get("step_sha256", [])[first:] == ws.get("step_sha256", [])[first:]
    )
    return RankResult(
        rank=int(bare["rank"]),
        truth_source=source,
        truth_bare=_sum(b_steps, source),
        truth_wsprof=_sum(w_steps, source),
        c10d_bare=[s["c10d"] for s in b_steps],
        c10d_wsprof=[s["c10d"] for s in w_steps],
        gloo_bare=[s["gloo"] for s in b_steps],
        gloo_wsprof=[s["gloo"] for s in w_steps],
        rows=rows,
        n_backend=n_backend,
        covered=covered,
        recorded_ops=ops,
        recorded_by=by,
        covered_ops=covered_ops,
        coalesced_bytes=coalesced,
        row_bytes=row_bytes,
        results_same=same,
        exc_bare=bare.get("exception"),
        exc_wsprof=ws.get("exception"),
        errors_same=bare.get("errors") == ws.get("errors"),
        expect=bare.get("expect", {}),
        steps=len(b_steps),
        n_results=int(bare.get("n_results", 0)),
        probe_bare=b_steps[-1].get("probe") if b_steps else None,
        probe_wsprof=w_steps[-1].get("probe") if w_steps else None,
    )


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def judge(root: Path, jobs: Sequence[Job] = ()) -> list[Row]:
    """Table rows from the jobs' result files under ``root``."""
    _traces.clear()
    names = [*PATHS, *VARIANTS]
    rows: list[Row] = []
    for name in names:
        path, first = VARIANTS.get(name, (name, 0))
        world = PATHS[path]
        row = Row(name, path, world, [])
        results = []
        for r in range(world):
            bare = _load(root / f"bare-w{world}" / f"result-{path}-{r}.json")
            ws = _load(root / f"wsprof-w{world}" / f"result-{path}-{r}.json")
            if bare is None or ws is None:
                which = "bare" if bare is None else "wsprof"
                why = [j.why() for j in jobs if j.world == world and j.mode == which]
                row.problem = f"rank {r}: no {which} result for {path}" + (
                    f"\n{why[0]}" if why and why[0] else ""
                )
                break
            results.append((bare, ws))
        if row.problem is None:
            c10d = sum(sum(_sum(b["steps"][first:], "c10d").values()) for b, _ in results)
            source = "c10d" if c10d else "gloo"
            try:
                row.ranks = [_rank_result(b, w, first, source) for b, w in results]
            except Exception as e:  # noqa: BLE001 - an unreadable trace is a table entry
                row.problem = f"cannot read the wsprof trace: {type(e).__name__}: {e}"
        rows.append(row)
    return rows


def measure(root: Path) -> tuple[list[Row], list[Job], float]:
    """Run every job under ``root`` and judge them: (rows, jobs, wall seconds)."""
    t0 = time.monotonic()
    jobs = run_all(root)
    return judge(root, jobs), jobs, time.monotonic() - t0


# --- the table -----------------------------------------------------------------------------


def _yn(ok: bool) -> str:
    return "yes" if ok else "NO"


def render(rows: Sequence[Row]) -> str:
    head = (
        f"{'path':<21} {'w':>1} {'truth b/w':>9} {'src':>4} {'rows':>5} {'n_be':>5} "
        f"{'covered':>7} {'cover':>6} {'ops ok':>6} {'same':>4} {'exc':>4}  "
        "recorded ops (rows)"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        if row.problem is not None:
            lines.append(f"{row.name:<21} {row.world:>1} {row.problem.splitlines()[0]}")
            continue
        truth, rows_n, covered = row.total("truth"), row.total("rows"), row.total("covered")
        cover = "n/a" if row.path in NO_COLLECTIVE or not truth else f"{covered / truth:.0%}"
        kinds_ok = all(not r.missing_kinds for r in row.ranks)
        ops: Counter[str] = Counter()
        for r in row.ranks:
            ops.update(r.recorded_ops)
        truth_ops: Counter[str] = Counter()
        for r in row.ranks:
            truth_ops.update(families(r.truth_bare))
        same = all(r.results_same for r in row.ranks)
        exc = all(r.exc_bare == r.exc_wsprof and r.errors_same for r in row.ranks)
        lines.append(
            f"{row.name:<21} {row.world:>1} {f'{truth}/{row.truth_wsprof}':>9} "
            f"{row.ranks[0].truth_source:>4} {rows_n:>5} {row.total('n_backend'):>5} "
            f"{covered:>7} {cover:>6} "
            f"{_yn(kinds_ok) if row.path not in NO_COLLECTIVE else 'n/a':>6} "
            f"{_yn(same):>4} {_yn(exc):>4}  "
            + (", ".join(f"{k}={v}" for k, v in sorted(ops.items())) or "-")
            + "  | truth: "
            + ", ".join(f"{k}={v}" for k, v in sorted(truth_ops.items()))
        )
    lines.append("")
    lines.append(
        "truth: collectives per run (all ranks, all steps), bare/with wsprof; src: c10d "
        "= top-level c10d:: profiler events, gloo = gloo: events (Backend object "
        "called directly); rows: wsprof calls recorded in the same windows; n_be: "
        "their n_backend sum; covered: sum of max(n_backend, 1); cover: "
        "covered/truth; ops ok: every op kind >= 95 %"
    )
    for row in rows:
        for r in row.ranks[:1] if row.name not in VARIANTS else []:
            if r.probe_bare != r.probe_wsprof:
                lines.append(
                    f"{row.name} rank {r.rank}: after the last step, bare "
                    f"{r.probe_bare} vs wsprof {r.probe_wsprof}"
                )
        for r in row.ranks:
            if r.exc_bare != r.exc_wsprof:
                lines.append(
                    f"{row.name} rank {r.rank}: exception bare {r.exc_bare} vs "
                    f"wsprof {r.exc_wsprof}"
                )
                break
    return "\n".join(lines)


def to_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        out.append(
            {
                "name": row.name,
                "world": row.world,
                "problem": row.problem,
                "ranks": [{**r.__dict__, "missing_kinds": r.missing_kinds} for r in row.ranks],
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", help="keep the jobs' results and traces in this folder")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wsprof-coverage-"))
    try:
        rows, jobs, wall = measure(root)
        print(render(rows))
        for j in jobs:
            print(
                f"job {j.mode} world {j.world}: {j.wall_s:.1f} s, exit codes {j.returncodes}"
                + (" (second attempt)" if j.retried_after else "")
            )
            if j.retried_after:
                print(f"first attempt: {j.retried_after}")
            if not j.ok:
                print(j.why())
        print(f"total {wall:.1f} s")
        if args.json:
            Path(args.json).write_text(json.dumps(to_json(rows), indent=1, default=str))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
