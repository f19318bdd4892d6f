"""What a per-step series measures, and so whether it can accumulate (leak) at all.

A training log holds a hundred metrics; only a few measure something a job can accumulate:
the time a step (or a phase of it) takes, memory held, and resources held (allocator segments,
handles, file descriptors, process groups, threads, objects). The rest move for reasons that
are no leak: ``training/global_step`` grows by one per step by design, a reward rises as the
model learns, a learning rate follows its schedule, a throughput or a per-token time moves with
the batch. Those are shown in the tables but never get slowdown or memory-growth findings.

:func:`series_kind` judges a series by its **name first** (the framework key conventions
below), then by its **values** (a monotonic counter: see :func:`counter_by_values`); a name
that says nothing leaves the ``default`` kind (:attr:`SeriesKind.OTHER` for imported metrics).

Name conventions, first match wins (names are lower-cased; a trace's ``counter:`` prefix is
dropped; the *last part* is what follows the last ``/``, or ``.`` in a trace counter). A
framework's own keys (timers, per-token times, quality namespaces) are read from the registry
(:mod:`wsprof.frameworks`: ``timer_keys``, ``per_token_prefixes``, ``quality_namespaces``):

============================ ============================================ =================
kind                         names                                        from
============================ ============================================ =================
rate (per-token time)        ``timing_per_token_ms/*``, ``*per_token*``   verl
                                                                          ``metric_utils.py``
                                                                          ``compute_timing_
                                                                          metrics``
quality (namespaces)         ``actor/*``, ``critic/*``, ``val-core/*``,   verl
                             ``val-aux/*``, ``reward_extra_info/*``,      ``metric_utils.py``
                             ``response_length*/*``, ``prompt_length/*``, ``compute_data_
                             ``response/*``, ``num_turns/*``,             metrics``,
                             ``global_seqlen/*`` (``*/lr`` excepted)      ``dp_actor.py``
monotonic counter (clock)    last part ``_runtime``, ``_timestamp``,      W&B history,
                             ``elapsed*``, ``wall_time``, ``uptime``      TensorBoard
monotonic counter            last part ``step``, ``global_step``,         verl
                             ``epoch``, ``iteration``, ``rollout_id``,    ``ray_trainer.py``
                             ``consumed_*``, ``*cumulative*``,            (``training/global_
                             ``*_so_far``, ``*_seen``, ``num_updates``    step``, ``training/
                                                                          epoch``), slime
                                                                          (``rollout/step``),
                                                                          Megatron
                                                                          (``consumed_
                                                                          samples``)
learning-rate schedule       a name part ``lr`` or ``learning_rate``      verl ``actor/lr``,
                                                                          OpenRLHF
                                                                          ``actor_lr``
duration (step time)         ``time_per_step``, ``step_time``             verl ``perf/time_
                                                                          per_step``
rate (throughput, share)     ``*_per_*``, ``throughput``, ``tflops``,     verl ``perf/
                             ``mfu``, ``util``, ``pct``, ``share``, unit  throughput``,
                             ``%``; ``ratio``/``frac`` of a timer         ``perf/mfu/*``;
                                                                          slime ``perf/*_
                                                                          tflops``
bytes / memory               a bytes unit (``_bytes``, ``_gib``, ``_gb``, verl ``perf/max_
                             ...), ``memory``, ``mem``, ``rss``, ``vram`` memory_*_gb``;
                                                                          wsprof's allocator
                                                                          and NVML counters
duration                     ``timing_s/*``, ``timing/*``, ``timeperf/*``, verl, OpenRLHF,
                             ``perf/*_time``, a time unit (``_s``,        AReaL, slime timers
                             ``_ms``, ...), ``time``, ``latency``
resource count               ``segment``, ``handle``, ``fd``, ``group``,  wsprof's probes
                             ``thread``, ``object``, ``mapping``, ...;    (allocator, proc,
                             ``gc.type.*``, ``gc.gen<i>.count``           gc)
other (workload size)        ``num_tokens``, ``total_num_tokens``,        verl ``perf/total_
                             ``num_samples``, ``batch_size``              num_tokens``
quality (words)              ``loss``, ``reward``, ``score``,             all four
                             ``advantage``, ``return``, ``ratio``,        frameworks
                             ``kl``, ``entropy``, ``clipfrac``,
                             ``grad_norm``, ``accuracy``, ``length``, ...
resource count (unit)        unit ``count`` (a ``_count`` column)         CSV series
============================ ============================================ =================

Per-token timings are a **rate**, not a duration: verl computes
``timing_per_token_ms/<phase> = timing_s/<phase> * 1000 / tokens`` of the batch, so it moves
with the batch's token count and length mix (fixed per-batch costs spread over fewer or more
tokens) even when nothing accumulates; the phase's own time ``timing_s/<phase>`` is judged as
a duration, so a real slowdown of that phase is still found, once, where it costs wall time.

Pure functions of names and numbers; no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from wsprof import frameworks
from wsprof.contracts.counters import CounterKind, CounterSource, counter_kind, parse_counter
from wsprof.contracts.series import Series, counter_of
from wsprof.contracts.series import SeriesKind as SeriesKind  # re-exported for the rules
from wsprof.contracts.units import Unit, unit_family

#: The kinds that can accumulate and so get slowdown (duration) or memory-growth (bytes,
#: resource count) findings; every other kind is shown but never judged as a leak.
ACCUMULATING_KINDS = frozenset({SeriesKind.DURATION, SeriesKind.BYTES, SeriesKind.RESOURCE})
#: The kinds the memory-growth rule judges (durations go to the slowdown rule).
HELD_KINDS = frozenset({SeriesKind.BYTES, SeriesKind.RESOURCE})

#: Fewest points for the values alone to call a series a monotonic counter: with two points
#: every series has a constant difference.
COUNTER_MIN_POINTS = 3
#: Relative tolerance on "constant" per-step increments and on "equal to the logging stride":
#: counters are exact integers or exact sums; a log prints at least 6 significant digits.
COUNTER_REL_TOL = 1e-6


_TOKEN_SPLIT = re.compile(r"[/._\-\s@:]+")
#: Last parts of cumulative clocks: wall time since start grows by the step time every step.
_CLOCK_RE = re.compile(
    r"_?runtime|_?timestamp|elapsed(?:_time)?(?:_s)?|wall_?time|"
    r"time_elapsed(?:_s)?|uptime(?:_s)?"
)
#: Last parts of step, epoch and sample counters.
_COUNTER_RE = re.compile(
    r"(?:global_|train_|training_|trainer_|rollout_|update_|optimizer_|opt_|current_|cur_)?"
    r"(?:step|steps|iter|iters|iteration|iterations|epoch|epochs|update|updates)"
    r"|rollout_id|step_id|(?:num|n)_(?:updates|iterations|epochs|optimizer_steps)"
    r"|consumed\w*|\w*cumulative\w*|cum_\w+|\w*_so_far|\w+_seen"
)
_STEP_DURATION_RE = re.compile(r"time_per_step|step_time|step_duration")
_RATE_TOKENS = frozenset(
    {
        "throughput",
        "tflops",
        "flops",
        "mfu",
        "tps",
        "qps",
        "util",
        "utilization",
        "pct",
        "percent",
        "share",
        "speed",
    }
)
_RATIO_TOKENS = frozenset({"ratio", "frac", "fraction"})
_BYTES_TOKENS = frozenset({"bytes", "memory", "mem", "rss", "vram", "vms"})
_TIME_TOKENS = frozenset({"time", "latency", "duration", "seconds", "secs"})
_RESOURCE_TOKENS = frozenset(
    {
        "segment",
        "segments",
        "handle",
        "handles",
        "fd",
        "fds",
        "group",
        "groups",
        "thread",
        "threads",
        "object",
        "objects",
        "mapping",
        "mappings",
        "allocation",
        "allocations",
        "block",
        "blocks",
        "tensor",
        "tensors",
        "buffer",
        "buffers",
        "communicator",
        "communicators",
        "comm",
        "comms",
        "socket",
        "sockets",
        "connection",
        "connections",
        "stream",
        "streams",
        "refs",
        "entries",
        "works",
    }
)
#: Last name parts of a per-step workload size (also read by :mod:`wsprof.analysis.workload`).
WORKLOAD_RE = re.compile(
    r"(?:total_)?(?:num|n)_(?:tokens|samples|sequences|seqs|prompts|"
    r"responses)|batch_size|total_tokens"
)
_QUALITY_TOKENS = frozenset(
    {
        "loss",
        "losses",
        "reward",
        "rewards",
        "score",
        "scores",
        "advantage",
        "advantages",
        "return",
        "returns",
        "kl",
        "entropy",
        "clipfrac",
        "clip",
        "ratio",
        "grad",
        "norm",
        "accuracy",
        "acc",
        "success",
        "correct",
        "pass",
        "length",
        "len",
        "seqlen",
        "perplexity",
        "ppl",
        "vpred",
        "vf",
        "pg",
        "explained",
        "win",
        "turns",
        "truncated",
        "aborted",
    }
)


def _probe_kind(low: str) -> KindVerdict | None:
    """The kind of one of wsprof's own probe counters, from the kind column of the counter
    tables (:func:`wsprof.contracts.counters.counter_kind`): allocator statistics, process, gc
    and probe costs; None where the name rules decide (NVML, process, a device's total, any
    other name)."""
    c = parse_counter(low)
    if c is None:
        return None
    kind = counter_kind(low)
    if c.source is CounterSource.CUDA:
        if kind is CounterKind.EVENTS:
            return KindVerdict(
                SeriesKind.COUNTER,
                "a cumulative allocator event count (torch.cuda.memory_stats num_*)",
            )
        if kind is CounterKind.HELD and not c.key.endswith(_BYTES_KEYS):
            return KindVerdict(
                SeriesKind.RESOURCE, "allocator blocks or segments held (torch.cuda.memory_stats)"
            )
        return None
    if c.source is CounterSource.GC_GEN and kind is CounterKind.EVENTS:
        return KindVerdict(SeriesKind.COUNTER, "a cumulative collection count (gc.get_stats)")
    if c.source in (CounterSource.GC_GEN, CounterSource.GC_TYPE, CounterSource.GC) and kind in (
        CounterKind.CYCLE,
        CounterKind.HELD,
    ):
        return KindVerdict(SeriesKind.RESOURCE, "objects held (gc)")
    if kind is CounterKind.COST:
        return KindVerdict(SeriesKind.DURATION, "wsprof's own probe cost, µs")
    return None


#: Allocator byte statistics are judged by their name (``_bytes``), as any byte counter.
_BYTES_KEYS = ("_bytes.all.current", "_bytes.current")


@dataclass(frozen=True)
class KindVerdict:
    """The kind of a series and why.

    Attributes:
        kind: what the series measures.
        reason: the name rule or the values behind it, one phrase.
    """

    kind: SeriesKind
    reason: str

    @property
    def can_accumulate(self) -> bool:
        """Whether the series can be an accumulating problem (:data:`ACCUMULATING_KINDS`)."""
        return self.kind in ACCUMULATING_KINDS


def _norm(name: str) -> str:
    low = name.strip().lower()
    counter = counter_of(low)
    return counter if counter is not None else low


def kind_by_name(name: str, unit: str = "") -> KindVerdict | None:
    """The kind a series name (and unit) says, or None when they say nothing.

    Args:
        name: the series name (a framework key, a CSV column, a trace's ``counter:<name>``).
        unit: the unit the importer gave it (``s``, ``GiB``, ``%``, ``count``, ``""``).

    Returns:
        The kind and the rule that gave it (see the module docstring), or None.
    """
    low = _norm(name)
    last = low.rsplit("/", 1)[-1] if "/" in low else low.rsplit(".", 1)[-1]
    tokens = set(_TOKEN_SPLIT.split(low)) - {""}
    last_tokens = set(_TOKEN_SPLIT.split(last)) - {""}
    # the frameworks' timer keys (:attr:`wsprof.frameworks.Framework.timer_keys`)
    timer = frameworks.is_timer_key(low)
    probe = _probe_kind(low)
    if probe is not None:
        return probe
    per_token = frameworks.per_token_prefix(low)
    if per_token is not None or "per_token" in low:
        whose = f", {per_token[0].title} {per_token[1].rstrip('/')}" if per_token else ""
        return KindVerdict(
            SeriesKind.RATE, f"a per-token time (phase time / tokens of the batch{whose})"
        )
    lr = "lr" in tokens or "learning_rate" in low or "learning-rate" in low
    namespace = frameworks.quality_namespace(low)
    if namespace is not None:
        if lr:
            return KindVerdict(SeriesKind.LR_SCHEDULE, "a learning rate (its schedule)")
        fw, prefix = namespace
        return KindVerdict(
            SeriesKind.QUALITY,
            f"a training-quality or data metric ({fw.title}'s {prefix} namespace)",
        )
    if _CLOCK_RE.fullmatch(last):
        return KindVerdict(SeriesKind.COUNTER, "a cumulative clock (time since start)")
    if _COUNTER_RE.fullmatch(last):
        return KindVerdict(SeriesKind.COUNTER, "a step, epoch or sample counter by name")
    if lr:
        return KindVerdict(SeriesKind.LR_SCHEDULE, "a learning rate (its schedule)")
    if _STEP_DURATION_RE.search(last):
        return KindVerdict(SeriesKind.DURATION, "a step time")
    rate = (
        "_per_" in last
        or tokens & _RATE_TOKENS
        or unit == "%"
        or ((timer or tokens & _TIME_TOKENS) and last_tokens & _RATIO_TOKENS)
    )
    if rate and not tokens & _BYTES_TOKENS:  # a memory share is memory held
        return KindVerdict(SeriesKind.RATE, "a rate, throughput or share")
    family = unit_family(unit)[0]  # a time or byte unit (wsprof.contracts.units.UNIT_TEXTS)
    if family is Unit.BYTES or tokens & _BYTES_TOKENS or any(t.endswith("bytes") for t in tokens):
        return KindVerdict(SeriesKind.BYTES, "memory or bytes held")
    if timer or family is Unit.SECONDS or last_tokens & _TIME_TOKENS:
        return KindVerdict(SeriesKind.DURATION, "a time (timer key or time unit)")
    if last_tokens & _RESOURCE_TOKENS:
        return KindVerdict(SeriesKind.RESOURCE, "a count of resources held")
    if WORKLOAD_RE.fullmatch(last):
        return KindVerdict(
            SeriesKind.OTHER, "a per-step workload size (tokens or samples in the batch)"
        )
    if tokens & _QUALITY_TOKENS:
        return KindVerdict(SeriesKind.QUALITY, "a training-quality metric by name")
    if unit == "count":
        return KindVerdict(SeriesKind.RESOURCE, "a count (unit count)")
    return None


def counter_by_values(steps: Sequence[int], values: Sequence[float]) -> str | None:
    """Why the values look like a monotonic counter by design, or None.

    A counter either grows by exactly its logging stride (value difference / step difference is
    1 at every point: a step number, logged every step or every k steps) or is a whole number
    that grows by the same positive amount per step at every point (samples consumed with a
    fixed batch). Noise-free growth like this is what a counter does; it is also what a
    perfectly regular leak does, which is why names come first (a name that says bytes or
    resources is never overridden by its values).

    Args:
        steps: step numbers, increasing.
        values: one value per step.

    Returns:
        A phrase naming the increment, or None (fewer than :data:`COUNTER_MIN_POINTS` points,
        steps not increasing, a non-finite value, or increments that are not constant).
    """
    if len(steps) != len(values) or len(values) < COUNTER_MIN_POINTS:
        return None
    if not all(math.isfinite(v) for v in values):
        return None
    rates: list[float] = []
    for (s0, v0), (s1, v1) in zip(zip(steps, values), zip(steps[1:], values[1:])):
        if s1 <= s0:
            return None
        rates.append((v1 - v0) / (s1 - s0))
    lo, hi = min(rates), max(rates)
    if lo <= 0 or hi - lo > COUNTER_REL_TOL * hi:
        return None
    if abs(lo - 1.0) <= COUNTER_REL_TOL and abs(hi - 1.0) <= COUNTER_REL_TOL:
        stride = {s1 - s0 for s0, s1 in zip(steps, steps[1:])}
        per = f"every {min(stride)} steps" if len(stride) == 1 and min(stride) > 1 else "per step"
        return f"grows by exactly its logging stride (+1 per step number, logged {per})"
    whole = all(abs(v - round(v)) <= COUNTER_REL_TOL * max(1.0, abs(v)) for v in values)
    if whole:
        return f"a whole number growing by a constant {hi:g} per step"
    return None


def series_kind(series: Series, default: SeriesKind = SeriesKind.OTHER) -> KindVerdict:
    """The kind of a series: its own ``kind`` if set, else by name, else by values.

    Args:
        series: the series.
        default: the kind of a series whose name and values say nothing:
            :attr:`SeriesKind.OTHER` for imported metrics (never judged); the trace's user
            counters pass :attr:`SeriesKind.RESOURCE` (``wsprof.counter()`` records a count of
            something held).

    Returns:
        The kind and why.
    """
    if series.kind is not None:
        return KindVerdict(SeriesKind(series.kind), "given by the importer")
    by_name = kind_by_name(series.name, series.unit_label)
    if by_name is not None:
        return by_name
    why = counter_by_values(series.steps, series.values)
    if why is not None:
        return KindVerdict(SeriesKind.COUNTER, why)
    return KindVerdict(default, "nothing in its name or values says what it measures")


def kinds_note(kinds: dict[str, SeriesKind]) -> str | None:
    """One note: how many series of each kind, and that only three kinds are judged.

    Args:
        kinds: series name -> kind.

    Returns:
        The note, or None when every series can accumulate.
    """
    counts = {k: sum(1 for v in kinds.values() if v is k) for k in SeriesKind}
    not_judged = [
        f"{n} {k.value.replace('_', ' ')}"
        for k, n in counts.items()
        if n and k not in ACCUMULATING_KINDS
    ]
    if not not_judged:
        return None
    return (
        "not judged for accumulation (shown only): "
        + ", ".join(not_judged)
        + " series; only durations, bytes and resource counts can accumulate"
    )
