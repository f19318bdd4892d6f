"""A real TRL ``GRPOTrainer`` run on CPU: 2 ranks (DDP over gloo), a tiny random Qwen2, no vLLM.

Nothing here imports wsprof: the test runs this script under ``wsprof run`` (patched at torch
import, no markers) and once without it, and compares. No downloads: the tokenizer is built
from the ``tokenizers`` library and the model from a ``Qwen2Config``, both in this file.

    python -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 \
        --master-port PORT trl_grpo.py --steps 12 --truth truth.jsonl [--wrapper-after-patch]

What it writes (``--truth FILE``, one JSON line each, appended with one ``os.write``):

- per rank and training step: ``rank, pid, step`` (0-based), ``t_start_ns`` / ``t_end_ns``
  (``time.monotonic_ns()``, the clock of wsprof's traces, from a ``TrainerCallback``'s
  ``on_step_begin`` / ``on_step_end``), ``step_s``, ``trl_timers_s`` (TRL's own
  ``profiling_context`` timers of that step, s, by name: ``GRPOTrainer.transformers.generate``,
  the reward function, ...), ``probe_s`` / ``probe_calls`` (time and calls of the wrapper's
  probe in that step) and ``probe_entries`` (the probe's list length in that step);
- per rank at the end: ``kind: "final"``, ``checksum`` (sha256 of every parameter's bytes in
  ``named_parameters`` order) and ``wrapped`` (the names the wrapper replaced, with its
  ``file:line``).

``--wrapper-after-patch`` reproduces slime's bug (slime issue #2268) in TRL: when training
starts (``on_train_begin``, long after ``wsprof run`` patched at torch import), the module
attributes in :data:`WRAPPED_NAMES` are replaced with slime's ``get_new_comm_function``
wrapper, whose free-memory probe walks a fake allocator's segment list that grows by
``--leak`` entries every step. Sources followed: THUDM/slime 624b824a
``slime/utils/reloadable_process_group.py`` (``monkey_patch_torch_dist``,
``get_new_comm_function``, ``_wrap_low_level_call``) and ``slime/utils/memory_utils.py``
(``available_memory``); the same shape as ``shared/jobs/slime_shaped/common.py``.
Results are unchanged by the wrapper (it only reads).

TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, ``trl/extras/profiling.py``), transformers 5.x,
accelerate 1.16: generation without vLLM is ``GRPOTrainer._generate_single_turn`` ->
``transformers.generate`` inside the step; rewards and metrics are gathered with accelerate's
``gather`` (``torch.distributed.all_gather_into_tensor``) and ``gather_object``
(``torch.distributed.all_gather_object``); DDP's gradient all-reduces come from its C++
reducer. There is no weight push: without vLLM the policy generates itself.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
import torch.distributed as dist

#: Words of the toy language (the tokenizer's vocabulary after the special tokens).
WORDS = (
    *("the", "cat", "dog", "sat", "ran", "on", "a", "mat", "log", "red", "blue", "big"),
    *("small", "one", "two", "three", "four", "five", "yes", "no", "and", "or", "is"),
    *("was", "it", "he", "she", "we", "they", "here", "there", "up", "down", "left"),
    *("right", "go", "stop"),
)
#: Special tokens, ids 0-2.
PAD, EOS, UNK = "[PAD]", "[EOS]", "[UNK]"
#: Tiny Qwen2: hidden size, layers, heads, KV heads, MLP size.
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 32, 2, 4, 2, 64
#: Tokens generated per completion at most.
MAX_COMPLETION = 8
#: Prompts in the in-memory dataset.
N_PROMPTS = 64
#: Module attributes the wrapper replaces (slime's list, plus the reduce and the object
#: gather TRL/accelerate call through ``torch.distributed``).
WRAPPED_NAMES = (
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "all_gather_single",
    "all_reduce",
    "all_gather_object",
    "broadcast_object_list",
)
#: Fake allocator segments before the first step.
BASE_SEGMENTS = 2000
#: Segments added per step under the wrapper (``--leak``). TRL issues about 15 wrapped calls
#: per step (slime's weight sync: hundreds), so each walk must grow more than slime_shaped's
#: 4000 for the probe to matter: about +4 ms per call and step (+60 ms per step), against
#: steps of 0.1-0.3 s on 2 idle cores; at 20,000 a loaded machine's noise hid it once.
LEAK_PER_STEP = 50_000


# ---------------------------------------------------------------- the leak (slime #2268's shape)
class FakeAllocator:
    """What a caching allocator with expandable segments looks like to a free-memory probe: a
    list of segments that every training step grows and that :meth:`mem_get_info` walks."""

    def __init__(self, base_segments: int = BASE_SEGMENTS) -> None:
        self.segs = [(i * 2097152) | (i & 1) for i in range(base_segments)]
        self.probe_s = 0.0
        self.calls = 0

    def grow(self, n: int) -> None:
        k = len(self.segs)
        self.segs.extend(((k + i) * 2097152) | ((k + i) & 1) for i in range(n))

    def mem_get_info(self) -> tuple[int, int]:
        free = 0
        for s in self.segs:
            if s & 1:
                free += s >> 1
        return free, len(self.segs)

    def take(self) -> tuple[float, int]:
        out = (self.probe_s, self.calls)
        self.probe_s, self.calls = 0.0, 0
        return out


ALLOC = FakeAllocator()


def available_memory() -> dict[str, float]:
    """slime ``utils/memory_utils.available_memory``: device free/total (the fake allocator's
    walk) and host memory (psutil)."""
    free, total = ALLOC.mem_get_info()
    try:
        import psutil

        host = float(psutil.virtual_memory().available)
    except ImportError:
        host = 0.0
    return {"free_GB": round(free / 2**30, 2), "total": float(total), "host_available": host}


@contextlib.contextmanager
def _wrap_low_level_call(check_memory: bool = True) -> Iterator[None]:
    """slime ``utils/reloadable_process_group._wrap_low_level_call``: probe free memory before
    every collective (``clear_memory()`` when low: never taken here)."""
    try:
        if check_memory:
            t0 = time.perf_counter()
            mem_info = available_memory()
            if mem_info["free_GB"] < 0:
                raise AssertionError("unreachable")
            ALLOC.probe_s += time.perf_counter() - t0
            ALLOC.calls += 1
        yield
    except Exception as e:
        e.add_note("after torch distributed error")
        raise


def get_new_comm_function(func: Callable[..., Any]) -> Callable[..., Any]:
    """slime ``get_new_comm_function``: the wrapper (no ``functools.wraps``, as in slime)."""

    def new_function(*args: Any, **kwargs: Any) -> Any:
        with _wrap_low_level_call(check_memory=True):
            return func(*args, **kwargs)

    return new_function


def monkey_patch_torch_dist() -> list[str]:
    """slime ``monkey_patch_torch_dist``: replace the module attributes once. Returns the
    names replaced."""
    done = []
    for name in WRAPPED_NAMES:
        if hasattr(dist, name):
            setattr(dist, name, get_new_comm_function(getattr(dist, name)))
            done.append(name)
    return done


# ---------------------------------------------------------------- model, tokenizer, data
def build_tokenizer() -> Any:
    """A word-level tokenizer from the ``tokenizers`` library, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate((PAD, EOS, UNK, *WORDS))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK
    )
    fast.padding_side = "left"
    return fast


def build_model(tokenizer: Any, seed: int) -> Any:
    """A random tiny Qwen2 (``transformers`` ``Qwen2Config`` / ``Qwen2ForCausalLM``)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def build_dataset(seed: int) -> Any:
    """``N_PROMPTS`` prompts of 3-6 words, in memory."""
    import random

    from datasets import Dataset

    rng = random.Random(seed)
    prompts = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) for _ in range(N_PROMPTS)
    ]
    return Dataset.from_dict({"prompt": prompts})


def reward_yes(completions: list[str], **kwargs: Any) -> list[float]:
    """The rule: +1 per ``yes``, -0.5 per ``no``, plus a little for length."""
    out = []
    for c in completions:
        words = c.split()
        out.append(words.count("yes") - 0.5 * words.count("no") + 0.01 * len(words))
    return out


# ---------------------------------------------------------------- ground truth
class Truth:
    """One JSON line per row, appended with a single write (``O_APPEND``)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None

    def write(self, **row: Any) -> None:
        if self.fd is not None:
            os.write(self.fd, (json.dumps(row) + "\n").encode())


TIMERS: dict[str, float] = {}


def record_trl_timers() -> None:
    """Keep TRL's own ``profiling_context`` durations (it logs them to W&B/MLflow/Trackio
    only, on the main process only): wrap ``ProfilingContext.__exit__`` to add each block's
    time to :data:`TIMERS` on every rank. Reads only."""
    from trl.extras.profiling import ProfilingContext

    orig_exit = ProfilingContext.__exit__

    def __exit__(self: Any, *exc: Any) -> Any:
        if self._start_time is not None:
            d = time.perf_counter() - self._start_time
            TIMERS[self.name] = TIMERS.get(self.name, 0.0) + d
        return orig_exit(self, *exc)

    ProfilingContext.__exit__ = __exit__  # type: ignore[method-assign]


def make_callback(truth: Truth, rank: int, wrapper: bool, leak: int) -> Any:
    from transformers import TrainerCallback

    class GroundTruth(TrainerCallback):  # type: ignore[misc]
        """Step times (monotonic ns) and, with the wrapper, its install and growth."""

        def __init__(self) -> None:
            self.t0 = 0
            self.step = 0
            self.wrapped: list[str] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if wrapper:  # after wsprof patched (at torch import), as slime's actor init
                self.wrapped = monkey_patch_torch_dist()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if wrapper:
                ALLOC.grow(leak)
            ALLOC.take()
            TIMERS.clear()
            self.t0 = time.monotonic_ns()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            t1 = time.monotonic_ns()
            probe_s, calls = ALLOC.take()
            truth.write(
                kind="step",
                rank=rank,
                pid=os.getpid(),
                step=self.step,
                t_start_ns=self.t0,
                t_end_ns=t1,
                step_s=(t1 - self.t0) / 1e9,
                trl_timers_s=dict(TIMERS),
                probe_s=probe_s,
                probe_calls=calls,
                probe_entries=len(ALLOC.segs),
            )
            self.step += 1

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            # TRL's own per-step time (``step_time``, s), logged on every rank after the step.
            if logs and "step_time" in logs:
                truth.write(
                    kind="log", rank=rank, step=state.global_step - 1, step_time_s=logs["step_time"]
                )

    return GroundTruth()


def checksum(model: Any) -> str:
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="training steps (max_steps)")
    ap.add_argument("--truth", default="", help="ground-truth JSONL, appended to")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--wrapper-after-patch",
        action="store_true",
        help="install slime's probing wrapper at on_train_begin",
    )
    ap.add_argument(
        "--leak",
        type=int,
        default=LEAK_PER_STEP,
        help="fake allocator segments added per step under the wrapper",
    )
    a = ap.parse_args()

    from trl import GRPOConfig, GRPOTrainer

    record_trl_timers()
    rank = int(os.environ.get("RANK", "0"))
    truth = Truth(a.truth)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, a.seed)
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as out:
        cfg = GRPOConfig(
            output_dir=out,
            use_vllm=False,
            use_cpu=True,
            report_to=[],
            seed=a.seed,
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=MAX_COMPLETION,
            max_steps=a.steps,
            logging_steps=1,
            save_strategy="no",
            learning_rate=1e-3,
            disable_tqdm=True,
            dataloader_num_workers=0,
            ddp_backend="gloo",
        )
        cb = make_callback(truth, rank, a.wrapper_after_patch, a.leak)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_yes,
            args=cfg,
            train_dataset=build_dataset(a.seed),
            processing_class=tokenizer,
            callbacks=[cb],
        )
        trainer.train()
        final = trainer.accelerator.unwrap_model(trainer.model)
        inner = get_new_comm_function(print).__code__  # new_function's own code
        truth.write(
            kind="final",
            rank=rank,
            pid=os.getpid(),
            checksum=checksum(final),
            wrapped=cb.wrapped,
            wrapper_file=inspect.getsourcefile(get_new_comm_function),
            wrapper_line=inner.co_firstlineno,
            steps=cb.step,
        )
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
