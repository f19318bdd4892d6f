"""What is a weight push: the ops that carry one and the evidence that a run of them is one.

RL frameworks push new weights from the trainers to the inference engines with broadcasts,
gathers, scatters or point-to-point calls (:data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS`),
on a group made for it (the
*push group*: :mod:`wsprof.analysis.updates`) or, in one world, among the trainers. A run of
such calls is a push only on evidence: it is an update on the push group, or (:func:`is_push`) it
moves at least :data:`MIN_PUSH_BYTES` of floating-point payload (a model's parameters; a
gather of rewards or a pickled object list is neither). Without evidence a step has no
weight sync, and the headline says so instead of a number.

Pure numpy over a :class:`~wsprof.trace.model.CallTable`; no torch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from wsprof.trace.model import CallTable

#: Fewest bytes of floating-point payload per step for a run of weight-push calls with no
#: push group to count as a weight push: the parameters of the smallest model worth syncing
#: (16 K float32). TRL's reward and advantage gathers move a few hundred bytes, an
#: ``all_gather_object`` moves bytes (uint8), a DDP buffer broadcast a rotary table.
MIN_PUSH_BYTES = 64 * 1024


def is_float(dtype: object) -> bool:
    s = str(dtype)
    return s.startswith(("float", "bfloat", "half", "double")) or "float" in s


def float_mask(dtypes: npt.NDArray[np.object_]) -> npt.NDArray[np.bool_]:
    """Per call, whether its payload is a floating-point tensor (:func:`is_float`; each
    distinct dtype name is looked at once)."""
    vals = dtypes.tolist()
    floats = {d for d in set(vals) if is_float(d)}
    return np.fromiter((d in floats for d in vals), dtype=bool, count=len(vals))


def float_bytes(calls: CallTable, lo: int = 0, hi: int | None = None) -> int:
    """Bytes of floating-point payload of the calls ``[lo, hi)``."""
    hi = len(calls) if hi is None else hi
    if hi <= lo:
        return 0
    b = calls.bytes[lo:hi]
    return int(b[float_mask(calls.dtype[lo:hi]) & (b > 0)].sum())


def is_push(calls: CallTable, lo: int, hi: int) -> bool:
    """True when the calls ``[lo, hi)`` are a weight push by their payload: they move at least
    :data:`MIN_PUSH_BYTES` of floating-point tensors (a process with a push group has its
    steps and syncs from the updates on it: :mod:`wsprof.analysis.updates`)."""
    return float_bytes(calls, lo, hi) >= MIN_PUSH_BYTES
