"""The engines any framework may run on: vLLM and SGLang (rollout, weight loading), torch
autograd and optimizers, DeepSpeed, accelerate and Megatron-core (training). Their
sampled-phase patterns are the generic ones (:mod:`wsprof.analysis.phases`): tried after the
framework's own, in the same tier.

Pure data; standard library and :mod:`wsprof.contracts` only.
"""

from __future__ import annotations

from wsprof.contracts.phases import ROLLOUT, TRAIN, WEIGHT_SYNC
from wsprof.frameworks.model import ANY, Engine, PhasePattern

VLLM = Engine(
    "vllm",
    "vLLM",
    (
        PhasePattern(
            WEIGHT_SYNC,
            r"load_weights",
            r"vllm/[^()]*\.py",
            "a model's load_weights, called by every colocated weight sync",
        ),
        PhasePattern(
            ROLLOUT,
            r"LLM\.(?:generate|chat|_run_engine)|AsyncLLM\.generate|LLMEngine\.step",
            note="LLM.generate / chat (vllm/entrypoints/llm.py), the v1 engine",
        ),
        PhasePattern(ROLLOUT, r"generate|chat|_run_engine", r"vllm/entrypoints/llm\.py"),
        PhasePattern(ROLLOUT, r"\w*ModelRunner\.execute_model|EngineCore\.step\w*"),
        PhasePattern(ROLLOUT, r"execute_model|step\w*", r"vllm/v1/(?:engine|worker)/\w+\.py"),
    ),
)

SGLANG = Engine(
    "sglang",
    "SGLang",
    (
        PhasePattern(
            WEIGHT_SYNC,
            r"update_weights_from_(?:distributed|tensor|disk)",
            note="engine side (sglang/srt/...: Engine, TokenizerManager, ModelRunner, "
            "Scheduler): update_weights_from_distributed / _tensor / _disk",
        ),
        PhasePattern(
            ROLLOUT,
            r"Engine\.(?:generate|async_generate)|TokenizerManager\.generate_request",
            note="Engine.generate",
        ),
        PhasePattern(
            ROLLOUT,
            r"Scheduler\.(?:event_loop_\w+|run_batch)",
            note="the scheduler loop (sglang/srt/managers/scheduler.py)",
        ),
        PhasePattern(ROLLOUT, r"event_loop_\w+|run_batch", r"sglang/srt/managers/scheduler\.py"),
    ),
)

TORCH = Engine(
    "torch",
    "PyTorch",
    (
        PhasePattern(
            TRAIN,
            r"backward|_engine_run_backward",
            r"torch/_tensor\.py|torch/autograd/\w+\.py",
            "autograd: Tensor.backward (torch/_tensor.py), torch.autograd.backward, "
            "_engine_run_backward (torch/autograd/graph.py)",
        ),
        PhasePattern(
            TRAIN,
            ANY,
            r"torch/optim/\w+\.py",
            "optimizers: Adam.step (torch/optim/adam.py), the _use_grad wrapper",
        ),
    ),
)

DEEPSPEED = Engine(
    "deepspeed",
    "DeepSpeed",
    (
        PhasePattern(TRAIN, r"DeepSpeedEngine\.(?:backward|step)"),
        PhasePattern(TRAIN, r"backward|step", r"deepspeed/runtime/engine\.py"),
    ),
)

ACCELERATE = Engine(
    "accelerate",
    "accelerate",
    (
        PhasePattern(TRAIN, r"Accelerator\.(?:backward|step)"),
        PhasePattern(TRAIN, r"backward|step", r"accelerate/accelerator\.py"),
    ),
)

MEGATRON = Engine(
    "megatron",
    "Megatron-core",
    (
        PhasePattern(
            TRAIN,
            r"forward_backward_\w+",
            r"megatron/core/pipeline_parallel/schedules\.py",
            "the pipeline schedules' forward_backward_*",
        ),
    ),
)

#: Every engine, in the order their patterns are listed.
ENGINES: tuple[Engine, ...] = (SGLANG, VLLM, TORCH, DEEPSPEED, ACCELERATE, MEGATRON)
