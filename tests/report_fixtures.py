"""Hand-built :class:`Analysis` objects for report tests (no trace, no torch).

``make_run_analysis`` is a realistic run: 3 ranks, 8 steps, a weight sync that grows step after
step, calls to broadcast / all_gather / all_gather_into_tensor with time between layers that
grows, allocator counters, py-spy hot frames and findings. ``make_series_analysis`` is what a
CSV series gives: headline series and no process. ``payload`` puts a string into every place
user data reaches a report (names, paths, metadata, titles) for escaping tests.
"""

from __future__ import annotations

import numpy as np

from wsprof.analysis.evidence import FreeEvidence
from wsprof.analysis.model import (
    Analysis,
    CallPoints,
    CounterTrack,
    Finding,
    GrowthVerdict,
    HotFrame,
    OpStats,
    ProcessAnalysis,
    Projection,
    RankSeries,
    SeriesResult,
    StepRow,
    WrapperFact,
)
from wsprof.contracts.series import imported_series
from wsprof.contracts.units import Unit

N_STEPS = 8
OPS = ("broadcast", "all_gather", "all_gather_into_tensor")
T0_NS = 1_000_000_000_000  # monotonic ns of each process's first record
STEP_START_OFFSET_S = 5.0  # first step starts this long after the first record


def series_result(
    name: str,
    unit: str,
    values: list[float],
    *,
    shape: str,
    accumulating: bool,
    degree: int = 1,
    config: tuple[str, ...] | None = None,
) -> SeriesResult:
    """A series with a polynomial fit standing in for the growth classifier.

    Args:
        name: series name.
        unit: series unit.
        values: one value per step (steps 0..n-1).
        shape: the verdict's shape.
        accumulating: the verdict's accumulating flag.
        degree: polynomial degree of the fit (0 = flat).
        config: optional configuration per step.

    Returns:
        The series and a plausible verdict with a projection 8 steps ahead when accumulating.
    """
    steps = np.arange(len(values), dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    coef = np.polyfit(steps, y, degree)
    fitted = np.polyval(coef, steps)
    slope = float(np.polyfit(steps, y, 1)[0])
    proj_step = len(values) - 1 + 8
    positive = bool(np.all(y > 0))
    return SeriesResult(
        series=imported_series(
            name,
            unit,
            tuple(range(len(values))),
            tuple(float(v) for v in values),
            config=config,
        ),
        verdict=GrowthVerdict(
            shape=shape,
            accumulating=accumulating,
            confidence=0.97 if accumulating else 0.9,
            slope_per_step=slope,
            growth_factor_per_step=float((y[-1] / y[0]) ** (1 / (len(y) - 1)))
            if positive
            else None,
            change_point=None,
            fitted=tuple(float(v) for v in fitted),
            projection=Projection(proj_step, float(np.polyval(coef, proj_step)))
            if accumulating
            else None,
            budget_step=12 if accumulating else None,
            evidence={"mann_kendall_p": 0.001 if accumulating else 0.6, "aic_linear": -12.5},
        ),
    )


def _weight_sync_s(step: int) -> float:
    return 0.8 + 0.35 * step + 0.03 * step * step


def _steps(rank: int) -> tuple[StepRow, ...]:
    rows = []
    t = T0_NS + int(STEP_START_OFFSET_S * 1e9)
    for i in range(N_STEPS):
        rollout = 6.0 + 0.1 * ((i * 7 + rank) % 3)
        train = 2.5 + 0.05 * rank
        sync = _weight_sync_s(i)
        other = 0.4
        step_s = rollout + train + sync + other
        rows.append(
            StepRow(
                step=i,
                t_start_ns=t,
                t_end_ns=t + int(step_s * 1e9),
                step_s=step_s,
                rollout_s=rollout,
                train_s=train,
                weight_sync_s=sync,
                other_s=other,
                n_calls=600,
                collective_s=sync * 0.9,
                between_layers_s=sync * 0.6,
            )
        )
        t += int(step_s * 1e9)
    return tuple(rows)


def call_points(n_per_step: int = 600, n_steps: int = N_STEPS, op_prefix: str = "") -> CallPoints:
    """Per-call points: latency and time between layers grow with the step.

    Args:
        n_per_step: calls per step.
        n_steps: steps.
        op_prefix: prepended to every op name.

    Returns:
        The points, in call order.
    """
    n = n_per_step * n_steps
    rng = np.random.default_rng(0)
    idx = np.arange(n)
    step = idx // n_per_step
    op_i = idx % len(OPS)
    base = np.array([300.0, 120.0, 90.0])[op_i]
    between = np.where(op_i == 1, 40.0 * (1 + step) ** 1.5, 3.0) * rng.lognormal(0, 0.2, n)
    latency = base * rng.lognormal(0, 0.3, n) + between
    return CallPoints(
        index=tuple(int(i) for i in idx),
        latency_us=tuple(float(v) for v in latency),
        between_layers_us=tuple(float(v) for v in between),
        step=tuple(int(s) for s in step),
        op=tuple(op_prefix + OPS[int(i)] for i in op_i),
        n_total=n * 4,
        site=tuple(f"sync_weights{op_prefix} (fsdp_workers.py:{160 + int(i)})" for i in op_i),
    )


def _process(rank: int, payload: str) -> ProcessAnalysis:
    steps = _steps(rank)
    end_s = (steps[-1].t_end_ns - T0_NS) / 1e9
    t = np.linspace(0.0, end_s, 60)
    segments = 40 + np.floor(t / end_s * N_STEPS) * 12
    rss = 8e9 + t * 2e7
    frames_tail = f"{payload}/verl/workers/fsdp_workers.py"
    hot = (
        HotFrame(f"_all_gather_wrapper{payload} ({frames_tail}:412)", 420, 1000),
        HotFrame("_record_tensor_meta (verl/utils/tensor_registry.py:88)", 260, 1000),
        HotFrame("broadcast (torch/distributed/distributed_c10d.py:2640)", 120, 1000),
        HotFrame("generate (vllm/entrypoints/llm.py:351)", 90, 1000),
        HotFrame("forward (transformers/models/qwen2/modeling_qwen2.py:710)", 60, 1000),
    )
    stacks = (
        (
            (
                "main (train.py:40)",
                "fit (verl/trainer/ppo/ray_trainer.py:1020)",
                "sync_weights (verl/workers/sharding_manager/fsdp_vllm.py:160)",
                "all_gather (torch/distributed/c10d_logger.py:81)",
                f"_all_gather_wrapper{payload} ({frames_tail}:412)",
            ),
            420,
        ),
        (
            (
                "main (train.py:40)",
                "fit (verl/trainer/ppo/ray_trainer.py:1020)",
                "sync_weights (verl/workers/sharding_manager/fsdp_vllm.py:160)",
                f"_all_gather_wrapper{payload} ({frames_tail}:412)",
                "_record_tensor_meta (verl/utils/tensor_registry.py:88)",
            ),
            260,
        ),
        (("main (train.py:40)", "generate (vllm/entrypoints/llm.py:351)"), 90),
    )
    return ProcessAnalysis(
        label=f"rank {rank} (node-{rank // 2}, pid {4100 + rank}){payload}",
        rank=rank,
        pid=4100 + rank,
        step_source="markers",
        steps=steps,
        ops=(
            OpStats(
                op=f"broadcast{payload}",
                apis=("torch.distributed.broadcast", f"ProcessGroup.broadcast{payload}"),
                n_calls=1600,
                total_s=0.61,
                median_us=310.0,
                p99_us=1200.0,
                between_layers_median_us=3.1,
                bytes_total=14 * 2**30,
            ),
            OpStats(
                op=f"all_gather{payload}",
                apis=("torch.distributed.all_gather", "ProcessGroup.allgather"),
                n_calls=1600,
                total_s=2.9,
                median_us=640.0,
                p99_us=9800.0,
                between_layers_median_us=410.0,
                bytes_total=7 * 2**30,
            ),
            OpStats(
                op="all_gather_into_tensor",
                apis=(
                    "torch.distributed.all_gather_into_tensor",
                    "torch.distributed._all_gather_base",
                ),
                n_calls=1600,
                total_s=0.2,
                median_us=95.0,
                p99_us=300.0,
                between_layers_median_us=2.8,
                bytes_total=3 * 2**30,
            ),
        ),
        calls=call_points(op_prefix=payload),
        counters=(
            CounterTrack(
                f"cuda.segment.all.current{payload}",
                tuple(float(x) for x in t),
                tuple(float(x) for x in segments),
            ),
            CounterTrack(
                "rss_bytes",
                tuple(float(x) for x in t),
                tuple(float(x) for x in rss),
                unit=Unit.BYTES,
            ),
            CounterTrack("empty_counter", (), ()),
        ),
        hot_frames=hot,
        hot_stacks=stacks,
        early_stacks=stacks[1:],
        late_stacks=stacks,
        n_samples=1000,
        meta={
            "wsprof_version": "0.1.0",
            "torch_version": "2.4.0",
            "host": f"node-{rank // 2}{payload}",
            "pid": 4100 + rank,
            "rank": rank,
            "world_size": 3,
            "backend": "nccl",
            "argv": ["python", "-m", "verl.trainer.main_ppo", f"data.path={payload}"],
            "pytorch_cuda_alloc_conf": "expandable_segments:True",
            "anchor": {"monotonic_ns": T0_NS, "unix_ns": 1_717_000_000_000_000_000},
            f"user_key{payload}": payload or "value",
        },
    )


def _findings(payload: str) -> tuple[Finding, ...]:
    return (
        Finding(
            kind="accumulating_slowdown",
            severity="critical",
            title=f"Weight sync grows 0.44 s per step (0.8 s → 4.7 s over 8 steps){payload}",
            evidence=FreeEvidence(
                {"slope_s_per_step": 0.44, "shape": "superlinear", "p_value": 0.0004}
            ),
            where=f"verl/workers/sharding_manager/fsdp_vllm.py:160{payload}",
            next_step="Look at what the all_gather wrapper keeps per call (between-layers time).",
        ),
        Finding(
            kind="between_layers",
            severity="warning",
            title=f"62% of all_gather time is spent between the API and the backend{payload}",
            evidence=FreeEvidence(
                {
                    "between_layers_s": 2.1,
                    f"wrapper{payload}": f"{payload}_all_gather_wrapper",
                }
            ),
            where=f"{payload}/verl/workers/fsdp_workers.py:412",
            next_step="Read the wrapper at that line: it does work that grows with every call.",
        ),
        Finding(
            kind="allocator_segments",
            severity="warning",
            title="Allocator segments grow 12 per step and are never released",
            evidence=FreeEvidence({"segments_per_step": 12.0, "expandable_segments": True}),
            where="rank 0",
            next_step="Check for tensors kept alive across steps (caches, registries).",
        ),
        Finding(
            kind="rollout_share",
            severity="info",
            title="Rollout takes 58% of each step",
            evidence=FreeEvidence({"rollout_share": 0.58}),
            where=None,
            next_step="Nothing to do; listed for context.",
        ),
    )


def _rank(rank: int) -> RankSeries:
    steps = _steps(rank)
    return RankSeries(
        label=f"rank {rank}",
        rank=rank,
        host=f"node-{rank // 2}",
        pid=4100 + rank,
        step_source="markers",
        steps=tuple(r.step for r in steps),
        weight_sync_s=tuple(r.weight_sync_s for r in steps),
        step_s=tuple(r.step_s for r in steps),
        between_layers_s=tuple(r.between_layers_s for r in steps),
        start_s=tuple((r.t_start_ns - T0_NS) / 1e9 for r in steps),
        sync_start_s=tuple(None for _ in steps),
        clock="host",
        sync=None,
        between=None,
        median_weight_sync_s=float(np.median([r.weight_sync_s or 0.0 for r in steps])),
        median_step_s=float(np.median([r.step_s for r in steps])),
    )


def make_run_analysis(payload: str = "", n_processes: int = 3) -> Analysis:
    """A realistic run of ``n_processes`` ranks and 8 steps with a growing weight sync.

    Args:
        payload: a string inserted into every user-supplied name (empty for a normal run).
        n_processes: how many ranks.

    Returns:
        The analysis.
    """
    syncs = [_weight_sync_s(i) for i in range(N_STEPS)]
    steps0 = _steps(0)
    latency = call_points()
    # Named as wsprof.analysis.run.step_series names them.
    series = (
        series_result(
            "weight_sync_s", "s", syncs, shape="superlinear", accumulating=True, degree=2
        ),
        series_result("step_s", "s", [r.step_s for r in steps0], shape="linear", accumulating=True),
        series_result(
            "rollout_s",
            "s",
            [r.rollout_s or 0.0 for r in steps0],
            shape="flat",
            accumulating=False,
            degree=0,
        ),
        series_result(
            "rollout_share",
            "",
            [r.rollout_share or 0.0 for r in steps0],
            shape="flat",
            accumulating=False,
            degree=0,
        ),
        series_result(
            "between_layers_s",
            "s",
            [r.between_layers_s for r in steps0],
            shape="superlinear",
            accumulating=True,
            degree=2,
        ),
        series_result(
            "collective_calls",
            "",
            [float(r.n_calls) for r in steps0],
            shape="flat",
            accumulating=False,
            degree=0,
        ),
        *(
            series_result(
                f"median_us:{payload}{op}",
                "us",
                [
                    float(
                        np.median(
                            [
                                v
                                for v, s, o in zip(
                                    latency.latency_us, latency.step, latency.op, strict=True
                                )
                                if s == i and o == op
                            ]
                        )
                    )
                    for i in range(N_STEPS)
                ],
                shape="linear" if op == "all_gather" else "flat",
                accumulating=op == "all_gather",
                degree=1 if op == "all_gather" else 0,
            )
            for op in OPS
        ),
        series_result(
            f"counter:cuda.segment.all.current{payload}",
            "",
            [52.0 + 12 * i for i in range(N_STEPS)],
            shape="linear",
            accumulating=True,
        ),
        series_result(
            "counter:rss_bytes",
            "",
            [8e9 + 2e7 * (r.t_end_ns - T0_NS) / 1e9 for r in steps0],
            shape="linear",
            accumulating=True,
        ),
    )
    return Analysis(
        source=f"/data/runs/ppo-qwen2-7b{payload}",
        kind="run",
        processes=tuple(_process(r, payload) for r in range(n_processes)),
        series=series,
        findings=_findings(payload),
        wrappers=(
            WrapperFact(
                "dist.all_gather",
                "name",
                f"_all_gather_wrapper{payload}",
                "verl.x",
                f"{payload}/verl/workers/fsdp_workers.py",
                412,
                ("torch.distributed.all_gather",),
                False,
                2.4,
            ),
            WrapperFact(
                "dist.broadcast",
                "name",
                f"_all_gather_wrapper{payload}",
                "verl.x",
                f"{payload}/verl/workers/fsdp_workers.py",
                412,
                ("torch.distributed.broadcast",),
                True,
                None,
            ),
        ),
        ranks=tuple(_rank(r) for r in range(n_processes)),
        notes=(
            "rank 2: 3 calls after the last step were not attributed to a step",
            f"py-spy sampled at 100 Hz{payload}",
        ),
    )


def make_series_analysis() -> Analysis:
    """What a CSV of per-step metrics gives: headline series, no process.

    Returns:
        The analysis.
    """
    n = 30
    ws = [1.2 * 1.06**i for i in range(n)]
    return Analysis(
        source="metrics/weight_sync.csv",
        kind="series",
        processes=(),
        series=(
            series_result(
                "weight_sync_s", "s", ws, shape="exponential", accumulating=True, degree=2
            ),
            series_result(
                "rollout_share",
                "share",
                [0.6 + 0.01 * ((i * 5) % 3) for i in range(n)],
                shape="flat",
                accumulating=False,
                degree=0,
            ),
            series_result(
                "gen_tokens_per_s",
                "tokens/s",
                [1800.0 + 10 * ((i * 3) % 4) for i in range(n)],
                shape="flat",
                accumulating=False,
                degree=0,
                config=tuple("tp=1" if i < 15 else "tp=2" for i in range(n)),
            ),
        ),
        findings=(
            Finding(
                kind="accumulating_slowdown",
                severity="critical",
                title="Weight sync grows ×1.06 per step (1.2 s → 6.1 s over 30 steps)",
                evidence=FreeEvidence({"growth_factor_per_step": 1.06}),
                where=None,
                next_step="Profile a run with `wsprof run` to find where the time goes.",
            ),
        ),
        notes=("read 30 rows from metrics/weight_sync.csv",),
    )
