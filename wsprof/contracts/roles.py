"""Roles of process worlds, and the module names that are evidence of them.

RL post-training frameworks (slime, verl, AReaL, OpenRLHF) run the trainers and the inference
engines as separate process worlds (each its own ``init_process_group``, so each has a rank 0),
joined by a weight-update group made outside both. Capture records which of
:data:`ROLE_MODULES` a process has imported (``meta['modules']``, names only); analysis
(:mod:`wsprof.analysis.worlds`) gives each world a role from that and the other evidence.

Pure data; standard library only.
"""

from __future__ import annotations

from enum import Enum


class Role(str, Enum):
    """What a process world does in the job."""

    TRAINER = "trainer"
    ENGINE = "inference engine"
    OTHER = "other"


#: Modules whose presence says "trainer": training frameworks and sharded-training wrappers.
TRAINER_MODULES = (
    "megatron",
    "megatron.core",
    "deepspeed",
    "torch.distributed.fsdp",
    "torch.distributed._composable.fsdp",
)
#: Modules whose presence says "inference engine".
ENGINE_MODULES = ("sglang", "vllm")
#: Every module name capture looks for (in ``sys.modules``, never importing one).
ROLE_MODULES = TRAINER_MODULES + ENGINE_MODULES
