"""Stand-in for ``ray.util.collective.types`` (only what the stand-in functions use)."""

from torch.distributed import ReduceOp

__all__ = ["ReduceOp"]
