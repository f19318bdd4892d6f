"""What is a weight push: the ops that carry one and the evidence that a run of them is one.

RL frameworks push new weights from the trainers to the inference engines with broadcasts,
gathers, scatters or point-to-point calls (:data:`SYNC_OPS`), on a group made for it (the
*push group*: :mod:`wsprof.analysis.updates`) or, in one world, among the trainers. A run of
such calls is a push only on evidence (:func:`is_push`): it touches the push group, or it
moves at least :data:`MIN_PUSH_BYTES` of floating-point payload (a model's parameters; a
gather of rewards or a pickled object list is neither). Without evidence a step has no
weight sync, and the headline says so instead of a number.

Pure numpy over a :class:`~wsprof.trace.model.CallTable`; no torch.
"""

from __future__ import annotations

import numpy as np

from wsprof.trace.model import CallTable

#: Canonical ops that push weights from a trainer to engines (or gather full weights).
SYNC_OPS = frozenset(
    {
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "scatter",
        "send",
        "recv",
        "batch_p2p",
    }
)
#: Fewest bytes of floating-point payload per step for a run of weight-push calls with no
#: push group to count as a weight push: the parameters of the smallest model worth syncing
#: (16 K float32). TRL's reward and advantage gathers move a few hundred bytes, an
#: ``all_gather_object`` moves bytes (uint8), a DDP buffer broadcast a rotary table.
MIN_PUSH_BYTES = 64 * 1024


def is_float(dtype: object) -> bool:
    s = str(dtype)
    return s.startswith(("float", "bfloat", "half", "double")) or "float" in s


def float_bytes(calls: CallTable, lo: int = 0, hi: int | None = None) -> int:
    """Bytes of floating-point payload of the calls ``[lo, hi)``."""
    hi = len(calls) if hi is None else hi
    if hi <= lo:
        return 0
    dt = calls.dtype[lo:hi].tolist()
    b = calls.bytes[lo:hi]
    mask = np.fromiter((is_float(d) for d in dt), dtype=bool, count=len(dt))
    return int(b[mask & (b > 0)].sum())


def is_push(calls: CallTable, lo: int, hi: int, group: str | None) -> bool:
    """True when the calls ``[lo, hi)`` are a weight push: one of them is on the push group
    (``group``), or they move at least :data:`MIN_PUSH_BYTES` of floating-point payload."""
    if group is not None and bool(np.any(calls.grp[lo:hi] == group)):
        return True
    return float_bytes(calls, lo, hi) >= MIN_PUSH_BYTES
