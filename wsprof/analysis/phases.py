"""Phases without code change: py-spy samples classified by frame patterns.

Every sample's stack is put in one phase: ``rollout`` (generation), ``weight_sync`` (pushing new
weights to the inference engines), ``train`` (forward/backward/optimizer), ``idle`` (the leaf is
a blocking call, see :func:`wsprof.analysis.samples.idle_stack`) or ``other`` (nothing matched).
User patterns (``wsprof attach --phase NAME=REGEX``) may add phases of any other name.

Patterns are regular expressions searched in py-spy frames, ``function (file:line)``. What
py-spy writes there matters:

- ``function`` is the qualified name (``UpdateWeightFromDistributed.update_weights``) on
  Python >= 3.11 and the bare name (``update_weights``) before; built-in patterns match both.
- ``file`` is the path relative to the Python prefix or ``site-packages`` for installed code
  (``torch/distributed/distributed_c10d.py``, ``verl/workers/fsdp_workers.py``) and the bare
  file name for anything else (a source checkout installed in editable mode: ``actor.py``).

Precedence (:func:`classify_stack`), first rule that applies decides:

1. an idle leaf -> ``idle``;
2. user patterns, scanning the stack from the leaf to the root (a user pattern anywhere in the
   stack beats every built-in one);
3. the framework's patterns and the generic ones (:data:`GENERIC_PATTERNS`), from the leaf to
   the root: the innermost matching frame decides, so ``update_weights`` called from inside a
   rollout function (TRL syncs weights in ``_generate_single_turn``; verl's sharding manager
   in ``generate_sequences``) is weight sync, and ``backward`` under a framework's training
   step is train. Within one frame the framework's patterns come before the generic ones and
   phases are tried in the order weight_sync, rollout, train;
4. last tier, under no rollout or train frame anywhere in the stack -> ``weight_sync``:

   - a weight-moving collective (:data:`COLLECTIVE_PATTERNS`: every name of the alias table,
     :mod:`wsprof.contracts.ops`, whose canonical op moves tensors, i.e. ``broadcast``,
     ``all_gather*``, ``_all_gather_base``, point-to-point, in ``distributed_c10d.py`` or
     ``_functional_collectives.py``, ``ProcessGroup`` methods, and communicators outside
     torch);
   - a sync entry point inferred from the samples (:func:`sync_entry_points`): a user
     function seen calling such a collective, so that its own Python time between the
     collectives (a wrapper's registry scan, bucketing, casts) is weight sync too;
5. ``other``.

A stack with both a rollout (or train) frame and a collective is rollout (train): there the
collective is the engine's tensor parallelism (vLLM's ``GroupCoordinator.all_gather`` under
``LLM.generate``) or gradient sync (under ``backward``), not a weight push. A weight sync a
framework runs from inside its rollout function is still weight sync when its entry point is
one of the framework's patterns (rule 3: the innermost frame decides), and ``--phase
weight_sync=REGEX`` names any other (rule 2).

Pure: no torch, no live process.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wsprof import frameworks
from wsprof.analysis.model import WindowSummary
from wsprof.analysis.samples import (
    code_frames,
    common_frame,
    group_windows,
    hot_frames,
    idle_stack,
    split_frame,
)
from wsprof.contracts import ops
from wsprof.contracts.phases import (
    CANONICAL_PHASES,
    IDLE,
    OTHER,
    RESERVED_PHASES,
    ROLLOUT,
    WEIGHT_SYNC,
    canonical_phase,
    phase_key,
)
from wsprof.frameworks import frame_regex
from wsprof.trace.model import SampleWindow

#: Folder each framework's code lives in (as py-spy shows installed packages' files).
FRAMEWORK_MODULES = {fw.name: fw.modules for fw in frameworks.FRAMEWORKS}
#: Each framework's patterns (:attr:`wsprof.frameworks.Framework.phase_patterns`): phase ->
#: frame regexes.
BUILTIN_PATTERNS: dict[str, dict[str, list[str]]] = {
    fw.name: fw.patterns() for fw in frameworks.FRAMEWORKS
}
_frame = frame_regex

#: Patterns for any framework, after the framework's own (same tier, see the module
#: docstring): the engines' (vLLM, SGLang, torch, DeepSpeed, accelerate, Megatron-core;
#: :mod:`wsprof.frameworks.engines`).
GENERIC_PATTERNS: dict[str, list[str]] = frameworks.engine_patterns()


def _moving_names(*tables: Mapping[str, str]) -> tuple[str, ...]:
    """Names of ``tables`` (name -> canonical op) whose op is in
    :data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS`."""
    return tuple(sorted({n for t in tables for n, op in t.items() if op in ops.WEIGHT_MOVING_OPS}))


#: ``torch.distributed`` functions (module functions and functional collectives, as py-spy
#: shows their Python frames in ``distributed_c10d.py`` and ``_functional_collectives.py``)
#: that move weights: every alias wsprof hooks for those ops (``broadcast``,
#: ``all_gather_into_tensor``, ``_all_gather_base``, ``send_object_list``, ...), the
#: point-to-point names left unhooked (``isend``, ``irecv``) and the coalescing manager.
C10D_SYNC_FUNCTIONS = tuple(
    sorted(
        {
            *_moving_names(ops.API_OPS, ops.FUNCTIONAL_OPS["_c10d_functional"]),
            *(
                n
                for n in ops.API_EXCLUDED
                if ops.FUNCTIONAL_OPS["_c10d_functional"].get(n) in ops.WEIGHT_MOVING_OPS
            ),
            ops.COALESCING,
        }
    )
)
#: ``ProcessGroup`` (and backend class) methods that move weights, visible when Python wraps
#: them.
BACKEND_SYNC_METHODS = _moving_names(ops.BACKEND_OPS)


def _alternation(names: Iterable[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))


#: Weight-moving collectives: weight sync when no other pattern matched anywhere in the stack
#: (the same names under ``backward`` are gradient sync, under ``generate`` tensor parallelism).
#: Built from the alias table (see :data:`~wsprof.contracts.ops.WEIGHT_MOVING_OPS`), plus
#: communicators outside torch.distributed, which the alias table does not cover.
COLLECTIVE_PATTERNS: list[str] = [
    _frame(_alternation(C10D_SYNC_FUNCTIONS), r"distributed_c10d\.py|_functional_collectives\.py"),
    # ProcessGroup methods, visible when Python wraps them
    _frame(rf"ProcessGroup\w*\.(?:{_alternation(BACKEND_SYNC_METHODS)})"),
    # vLLM / SGLang communicators outside torch.distributed (pynccl.py), Ray collectives
    _frame(r"broadcast|all_gather|send|recv", r"pynccl\.py"),
    _frame(r"broadcast|allgather|send|recv", r"ray/util/collective/collective\.py"),
]
FALLBACK_PATTERNS: dict[str, list[str]] = {WEIGHT_SYNC: COLLECTIVE_PATTERNS}
_COLLECTIVE_RE = re.compile("|".join(f"(?:{r})" for r in COLLECTIVE_PATTERNS))


#: Dot-separated parts of a frame's qualified function name that patterns see, the innermost
#: ones: a pattern names a function and at most its class and module (``Actor\.update_weights``),
#: and the optional qualifier of :func:`wsprof.frameworks.model.frame_regex` followed by a
#: function pattern of any name backtracks quadratically in a longer name (a 65 KB name of
#: dots took 17 s per frame).
MAX_NAME_PARTS = 8


def pattern_text(frame: str) -> str:
    """``frame`` as phase and framework patterns see it: its qualified function name cut to
    its last :data:`MAX_NAME_PARTS` dot-separated parts (linear in the frame's length)."""
    end = frame.find(" (")
    name = frame if end < 0 else frame[:end]
    if name.count(".") < MAX_NAME_PARTS:
        return frame
    return ".".join(name.rsplit(".", MAX_NAME_PARTS)[1:]) + frame[len(name) :]


def is_collective_frame(frame: str) -> bool:
    """True for a py-spy frame of a weight-moving collective (see :data:`COLLECTIVE_PATTERNS`)."""
    return _COLLECTIVE_RE.search(pattern_text(frame)) is not None


_Tier = tuple[tuple[str, "re.Pattern[str]"], ...]


@dataclass(frozen=True)
class PhasePatterns:
    """Compiled phase patterns in precedence order (see the module docstring).

    Attributes:
        tiers: each tier is ``(phase, regex)`` pairs, tried frame by frame from the leaf.
        source: ``user``, ``user+<framework>``, ``<framework>`` or ``generic``.
        framework: the framework whose built-in patterns are used, if any.
        user: the user patterns, ``(phase, regex)``, as given.
        entry_points: weight-sync entry points inferred from the samples (the user functions
            seen calling a weight-moving collective, ``function (file)``; see
            :func:`sync_entry_points`), matched in the last tier with the collectives.
    """

    tiers: tuple[_Tier, ...]
    source: str
    framework: str | None = None
    user: tuple[tuple[str, str], ...] = ()
    entry_points: tuple[str, ...] = ()


@dataclass(frozen=True)
class WindowPhases:
    """Phase counts of one sampling window (all threads and pids sampled in it).

    Attributes:
        t_start_ns: window start, sampler monotonic ns.
        t_end_ns: window end, sampler monotonic ns.
        n_samples: every sample with a code frame, idle ones included.
        samples: phase -> samples (``idle`` and ``other`` included).
    """

    t_start_ns: int
    t_end_ns: int
    n_samples: int
    samples: dict[str, int]

    @property
    def n_active(self) -> int:
        """Samples not idle."""
        return self.n_samples - self.samples.get(IDLE, 0)

    @property
    def shares(self) -> dict[str, float]:
        """phase -> share of all samples of the window (idle is a phase of its own)."""
        return {p: n / self.n_samples for p, n in self.samples.items()} if self.n_samples else {}

    def active_share(self, phase: str) -> float | None:
        """Samples of ``phase`` / active samples; None without active samples."""
        return self.samples.get(phase, 0) / self.n_active if self.n_active > 0 else None

    @property
    def rollout_share(self) -> float | None:
        """Rollout samples / active samples."""
        return self.active_share(ROLLOUT)

    @property
    def weight_sync_share(self) -> float | None:
        """Weight-sync samples / active samples."""
        return self.active_share(WEIGHT_SYNC)


def normalize_phase(name: str) -> str:
    """A user phase name as classification uses it: lower case, ``-`` and spaces as ``_``,
    aliases (:data:`wsprof.contracts.phases.PHASE_ALIASES`) resolved.

    Raises:
        ValueError: empty, or reserved (:data:`RESERVED_PHASES`).
    """
    key = canonical_phase(name) or phase_key(name)
    if not key:
        raise ValueError("empty phase name; give NAME=REGEX, e.g. weight_sync=update_weights")
    if key in RESERVED_PHASES:
        raise ValueError(
            f"phase name {name!r} is reserved (idle and other are assigned by "
            "classification); pick another name"
        )
    return key


def _compile(phases: Mapping[str, Sequence[str]], order: Sequence[str]) -> _Tier:
    """One tier: per phase (built-ins in ``order`` first, then the others as given) one
    alternation of its regexes."""
    names = [p for p in order if p in phases] + [p for p in phases if p not in order]
    tier: list[tuple[str, re.Pattern[str]]] = []
    for phase in names:
        regexes = [r for r in phases[phase] if r]
        if regexes:
            tier.append((phase, re.compile("|".join(f"(?:{r})" for r in regexes))))
    return tuple(tier)


def _user_tier(user: Mapping[str, str | Sequence[str]]) -> tuple[_Tier, list[tuple[str, str]]]:
    merged: dict[str, list[str]] = {}
    pairs: list[tuple[str, str]] = []
    for name, value in user.items():
        phase = normalize_phase(str(name))
        regexes = [value] if isinstance(value, str) else [str(v) for v in value]
        for regex in regexes:
            try:
                re.compile(regex)
            except re.error as e:
                raise ValueError(f"phase {name!r}: bad regular expression {regex!r} ({e})") from e
            merged.setdefault(phase, []).append(regex)
            pairs.append((phase, regex))
    # User phases keep the order given; they are all tried before any built-in.
    return _compile(merged, ()), pairs


def build_patterns(
    framework: str | None = None, user: Mapping[str, str | Sequence[str]] | None = None
) -> PhasePatterns:
    """Phase patterns: the user's first, then the framework's with the generic ones, then the
    collective fallback.

    Args:
        framework: one of :data:`wsprof.frameworks.NAMES`, or None for the generic patterns only.
        user: phase name -> regex (or regexes), e.g. ``{"weight_sync": "sync_to_engines"}``.

    Raises:
        ValueError: an unknown framework, a reserved or empty phase name, a bad regex.
    """
    if framework is not None and framework not in BUILTIN_PATTERNS:
        raise ValueError(f"unknown framework {framework!r}; one of {', '.join(frameworks.NAMES)}")
    tiers: list[_Tier] = []
    pairs: list[tuple[str, str]] = []
    if user:
        tier, pairs = _user_tier(user)
        if tier:
            tiers.append(tier)
    builtin: list[tuple[str, re.Pattern[str]]] = []
    if framework is not None:
        builtin += _compile(BUILTIN_PATTERNS[framework], CANONICAL_PHASES)
    builtin += _compile(GENERIC_PATTERNS, CANONICAL_PHASES)
    tiers.append(tuple(builtin))
    tiers.append(_compile(FALLBACK_PATTERNS, CANONICAL_PHASES))
    base = framework or "generic"
    source = ("user" if framework is None else f"user+{framework}") if pairs else base
    return PhasePatterns(tuple(tiers), source, framework, tuple(pairs))


def classify_stack(frames: Sequence[str], patterns: PhasePatterns) -> str:
    """The phase of one stack (see the module docstring for the precedence).

    Args:
        frames: root first, as py-spy gave them (pseudo-frames are ignored).
        patterns: from :func:`build_patterns` or :func:`patterns_for`.

    Returns:
        ``idle``, a phase name, or ``other``.
    """
    code = code_frames(frames)
    if not code:
        return OTHER
    if idle_stack(code):
        return IDLE
    texts = [pattern_text(f) for f in reversed(code)]
    for tier in patterns.tiers:
        for frame in texts:
            for phase, regex in tier:
                if regex.search(frame):
                    return phase
    return OTHER


@functools.cache
def _framework_regex(framework: str) -> re.Pattern[str]:
    pats = [r for regexes in BUILTIN_PATTERNS[framework].values() for r in regexes]
    return re.compile("|".join(f"(?:{r})" for r in pats))


_MODULE_RE = {
    fw: re.compile(rf"(?:^|/)(?:{'|'.join(mods)})/") for fw, mods in FRAMEWORK_MODULES.items()
}


def detect_framework(windows: Iterable[SampleWindow]) -> str | None:
    """The framework whose code the samples are in.

    A sample counts for a framework when a frame of its stack matches one of the framework's
    built-in patterns or lies in the framework's package folder (``slime/``, ``verl/``,
    ``openrlhf/``, ``areal/`` or ``realhf/``, ``trl/``; only installed packages show their
    folder, see the module docstring). Idle samples count too: a waiting thread still shows
    whose code it waits in.

    Args:
        windows: sample groups.

    Returns:
        The framework with the most samples (ties: the order of
        :data:`wsprof.frameworks.NAMES`), or None when no sample counts for any.
    """
    regexes = {fw: _framework_regex(fw) for fw in frameworks.NAMES}
    counts: Counter[str] = Counter()
    seen: dict[tuple[str, ...], tuple[str, ...]] = {}
    for w in windows:
        if w.count <= 0:
            continue
        frames = code_frames(w.frames)
        hits = seen.get(frames)
        if hits is None:
            found: list[str] = []
            for fw in frameworks.NAMES:
                for frame in frames:
                    file = split_frame(frame)[1] or ""
                    if regexes[fw].search(pattern_text(frame)) or _MODULE_RE[fw].search(
                        file.replace("\\", "/")
                    ):
                        found.append(fw)
                        break
            hits = seen[frames] = tuple(found)
        for fw in hits:
            counts[fw] += w.count
    if not counts:
        return None
    best = max(counts.values())
    return next(fw for fw in frameworks.NAMES if counts[fw] == best)


#: Files whose frames are never a sync entry point: torch's own wrappers between the user's
#: call and the collective (``c10d_logger.py``'s ``_exception_logger.<locals>.wrapper``) and
#: wsprof's (its demo aside), as for caller sites (:mod:`wsprof.capture.sites`).
_INTERNAL_FILE_RE = re.compile(r"(?:^|/)(?:torch/|wsprof/(?!demo/))")
#: Functions that are a module's or a thread's body, never a sync entry point.
_BODY_FUNCTIONS = frozenset({"<module>", "run", "_bootstrap", "_bootstrap_inner"})


def _entry_key(frame: str) -> str | None:
    """``function (file)`` of a frame that can be a sync entry point, else None."""
    function, file, _ = split_frame(frame)
    if file is None or function in _BODY_FUNCTIONS or function.startswith("0x"):
        return None
    if _INTERNAL_FILE_RE.search(file.replace("\\", "/")):
        return None
    return f"{function} ({file})"


def _caller_of_collective(code: Sequence[str]) -> tuple[int, str] | None:
    """(index, key) of the user frame that called the innermost weight-moving collective of a
    stack (torch's and wsprof's frames in between skipped); None without one, or when that
    caller is the stack's outermost frame (a script calling the collective at top level)."""
    for i in range(len(code) - 1, -1, -1):
        if not is_collective_frame(code[i]):
            continue
        j = i - 1
        while j >= 0 and _INTERNAL_FILE_RE.search(
            (split_frame(code[j])[1] or "").replace("\\", "/")
        ):
            j -= 1
        if j <= 0:
            return None
        key = _entry_key(code[j])
        return (j, key) if key is not None else None
    return None


def sync_entry_points(windows: Iterable[SampleWindow], patterns: PhasePatterns) -> tuple[str, ...]:
    """User functions seen as the direct caller of a weight-moving collective: weight-sync
    entry points, so that their own Python time (a registry scan, bucketing, dtype casts
    between the broadcasts) counts as weight sync and not only the collective's.

    A caller is the first frame above the collective outside torch and wsprof (as a caller
    site). It is *not* an entry point when it is the outermost frame of its stack, a module
    or thread body, an ancestor of a sample that ``patterns`` classify as rollout, train or a
    user phase other than weight sync (then it drives the loop: its own time is not sync), or
    an ancestor of another caller (a loop that also calls a sync function).

    Args:
        windows: sample groups of one process.
        patterns: the process's patterns (entry points already in them are ignored).

    Returns:
        ``function (file)`` of each entry point, sorted.
    """
    base = PhasePatterns(patterns.tiers, patterns.source, patterns.framework, patterns.user)
    callers: set[str] = set()
    above: dict[str, set[str]] = {}  # caller -> functions above it
    driving: set[str] = set()  # ancestors of other-phase samples
    seen: set[tuple[str, ...]] = set()
    for w in windows:
        code = code_frames(w.frames)
        if w.count <= 0 or not code or code in seen:
            continue
        seen.add(code)
        phase = classify_stack(code, base)
        if phase not in (WEIGHT_SYNC, OTHER, IDLE):
            driving.update(k for k in map(_entry_key, code) if k is not None)
            continue
        found = _caller_of_collective(code)
        if found is not None:
            j, key = found
            callers.add(key)
            above.setdefault(key, set()).update(
                k for k in map(_entry_key, code[:j]) if k is not None and k != key
            )
    ancestors = set().union(*above.values()) if above else set()
    return tuple(sorted(c for c in callers if c not in driving and c not in ancestors))


def _entry_regex(key: str) -> str:
    function, _, rest = key.partition(" (")
    return rf"^{re.escape(function)} \({re.escape(rest[:-1])}(?::\d+)?\)$"


def with_entry_points(patterns: PhasePatterns, entry_points: Sequence[str]) -> PhasePatterns:
    """``patterns`` with ``entry_points`` (``function (file)``) as weight sync in the last tier,
    beside the collectives: a sample inside one, under no rollout or train frame, is weight
    sync."""
    if not entry_points:
        return patterns
    regex = re.compile("|".join(f"(?:{_entry_regex(k)})" for k in entry_points))
    tiers = patterns.tiers
    if patterns.entry_points:  # replace the ones inferred before
        tiers = (*tiers[:-1], tiers[-1][:-1])
    last = (*tiers[-1], (WEIGHT_SYNC, regex))
    return PhasePatterns(
        (*tiers[:-1], last), patterns.source, patterns.framework, patterns.user, tuple(entry_points)
    )


def patterns_for(
    framework: str | None,
    user: Mapping[str, str | Sequence[str]] | None = None,
    windows: Iterable[SampleWindow] = (),
) -> PhasePatterns:
    """Patterns for a process: the given framework's, else the one detected in ``windows``,
    with the weight-sync entry points inferred from ``windows`` (:func:`sync_entry_points`).

    Args:
        framework: one of :data:`wsprof.frameworks.NAMES`, or None to detect it from ``windows``.
        user: ``--phase`` patterns (phase name -> regex).
        windows: the samples to detect the framework and the entry points from.

    Raises:
        ValueError: see :func:`build_patterns`.
    """
    items = list(windows)
    if framework is None:
        framework = detect_framework(items)
    patterns = build_patterns(framework, user)
    return with_entry_points(patterns, sync_entry_points(items, patterns))


def pattern_problems(meta: Mapping[str, Any]) -> list[str]:
    """What is wrong with a trace's ``phase_patterns`` and ``framework`` meta (one line each);
    analysis leaves out what is wrong and goes on."""
    problems: list[str] = []
    fw = meta.get("framework")
    if fw is not None and fw not in BUILTIN_PATTERNS:
        problems.append(
            f"framework {fw!r} has no built-in phase patterns (one of "
            f"{', '.join(frameworks.NAMES)}); detected from the samples instead"
        )
    raw = meta.get("phase_patterns")
    if raw is None:
        return problems
    if not isinstance(raw, Mapping):
        return [*problems, "phase_patterns is not a NAME -> REGEX mapping; left out"]
    for name, value in raw.items():
        try:
            _user_tier({str(name): value if isinstance(value, (str, list)) else str(value)})
        except ValueError as e:
            problems.append(f"phase pattern {name}: {e}; left out")
    return problems


def patterns_from_meta(meta: Mapping[str, Any], windows: Iterable[SampleWindow]) -> PhasePatterns:
    """Patterns for a process trace: its ``phase_patterns`` (name -> regex) and ``framework``
    meta (as ``wsprof attach`` writes them), the framework detected from ``windows`` when the
    meta names none. Invalid entries are left out (:func:`pattern_problems` says which)."""
    fw = meta.get("framework")
    framework = fw if isinstance(fw, str) and fw in BUILTIN_PATTERNS else None
    user: dict[str, str | list[str]] = {}
    raw = meta.get("phase_patterns")
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            entry = value if isinstance(value, (str, list)) else str(value)
            try:
                _user_tier({str(name): entry})
            except ValueError:
                continue
            user[str(name)] = entry
    return patterns_for(framework, user, windows)


def phase_shares_by_window(
    windows: Iterable[SampleWindow], patterns: PhasePatterns
) -> list[WindowPhases]:
    """Phase counts per sampling window, in time order.

    Args:
        windows: sample groups; those with the same ``(t_start_ns, t_end_ns)`` form a window.
        patterns: see :func:`build_patterns`.

    Returns:
        One :class:`WindowPhases` per window with at least one sample with a code frame.
    """
    cache: dict[tuple[str, ...], str] = {}
    out: list[WindowPhases] = []
    for t0, t1, group in group_windows(windows):
        counts: Counter[str] = Counter()
        total = 0
        for w in group:
            frames = code_frames(w.frames)
            if not frames or w.count <= 0:
                continue
            phase = cache.get(frames)
            if phase is None:
                phase = cache[frames] = classify_stack(frames, patterns)
            counts[phase] += w.count
            total += w.count
        if total:
            out.append(WindowPhases(t0, t1, total, dict(counts)))
    return out


def window_summaries(
    windows: Iterable[SampleWindow], patterns: PhasePatterns
) -> list[WindowSummary]:
    """Per sampling window: samples, top leaf frame, common frame and phase shares.

    Args:
        windows: sample groups of one process.
        patterns: see :func:`build_patterns`.

    Returns:
        One :class:`~wsprof.analysis.model.WindowSummary` per window with samples, in time
        order.
    """
    items = list(windows)
    phases = {(p.t_start_ns, p.t_end_ns): p for p in phase_shares_by_window(items, patterns)}
    out: list[WindowSummary] = []
    for t0, t1, group in group_windows(items):
        ph = phases.get((t0, t1))
        if ph is None:
            continue
        top = hot_frames(group)
        out.append(
            WindowSummary(
                t_start_ns=t0,
                t_end_ns=t1,
                n_samples=ph.n_samples,
                n_active=ph.n_active,
                top_frame=top[0] if top else None,
                common_frame=common_frame(group),
                phase_shares=ph.shares,
                rollout_share=ph.rollout_share,
                weight_sync_share=ph.weight_sync_share,
                phase_samples=dict(ph.samples),
            )
        )
    return out
