"""What bucketing one step's collectives into fewer, larger ones would save: the estimate
the per-call rule gives with more calls every step."""

from __future__ import annotations

import numpy as np

from wsprof.analysis.model import ProcessAnalysis
from wsprof.contracts.units import fmt_duration

#: Bucket size of the bucketing estimate, bytes: PyTorch DDP's default gradient bucket
#: (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel), a size known to amortise
#: the per-call cost of collectives; weight-sync frameworks use larger buckets, so the estimate
#: is conservative.
BUCKET_BYTES = 25 * 2**20


def bucketing_estimate(
    pa: ProcessAnalysis | None, calls_per_step: float, per_call_us: float
) -> dict[str, float] | None:
    """What bucketing one step's collectives into :data:`BUCKET_BYTES` collectives would save.

    Args:
        pa: the process (its ops' bytes and steps give the payload per step).
        calls_per_step: collective calls in a step.
        per_call_us: what each call avoided saves, µs (the fixed per-call cost of the cost
            model, or the per-call growth).

    Returns:
        ``buckets`` (calls after bucketing), ``calls``, ``saved_s`` (per step, s); None when the
        payload per step is unknown or bucketing would not reduce the calls.
    """
    if pa is None or not pa.steps or per_call_us <= 0:
        return None
    bytes_per_step = sum(o.bytes_total for o in pa.ops) / len(pa.steps)
    if bytes_per_step <= 0:
        return None
    buckets = max(1.0, float(np.ceil(bytes_per_step / BUCKET_BYTES)))
    if buckets >= calls_per_step:
        return None
    return {
        "buckets": buckets,
        "calls": calls_per_step,
        "saved_s": (calls_per_step - buckets) * per_call_us / 1e6,
    }


def bucketing_text(est: dict[str, float] | None) -> str:
    """``; bucketed into 25 MiB collectives the N calls would be M, saving about X/step``,
    empty without an estimate."""
    if est is None:
        return ""
    return (
        f"; bucketed into {BUCKET_BYTES >> 20} MiB collectives the {est['calls']:.0f} calls "
        f"would be {est['buckets']:.0f}, saving about {fmt_duration(est['saved_s'])}"
        "/step"
    )
