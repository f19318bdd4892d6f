"""Stand-in for slime's ``update_weight_from_distributed.py``: same class and method names;
``update_weights`` broadcasts a few tensors over the default (gloo) process group."""

from __future__ import annotations

import torch
import torch.distributed as dist


class UpdateWeightFromDistributed:
    def __init__(self, n_params: int = 8) -> None:
        self.params = [torch.ones(16) for _ in range(n_params)]

    def update_weights(self) -> None:
        for p in self.params:
            dist.broadcast(p, src=0)
