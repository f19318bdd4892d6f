"""The phase vocabulary: canonical phase names and the other spellings that mean them.

One vocabulary for every source of phases: markers (``wsprof.phase("sync")``), framework
presets (:mod:`wsprof.capture.presets`), sampled phases (``wsprof attach --phase NAME=REGEX``,
:mod:`wsprof.analysis.phases`) and the framework registry (:mod:`wsprof.frameworks`). A name
is compared after :func:`phase_key` (lower case, runs of ``-`` and spaces as ``_``); an alias
(:data:`PHASE_ALIASES`) then becomes its canonical phase. Names that are neither stay as given:
any name is a phase.

A trace keeps a marker's name as the user gave it (``wsprof.phase("Rollout")`` is recorded as
``Rollout``); analysis canonicalises when it reads (:func:`canonical_phase`,
:func:`resolve_phase`), so a trace recorded before an alias was added reads as a new one.

Pure data; standard library only.
"""

from __future__ import annotations

import functools
import re
from typing import Final

#: Generation by the inference engines.
ROLLOUT: Final = "rollout"
#: Pushing the trained weights to the inference engines.
WEIGHT_SYNC: Final = "weight_sync"
#: Forward, backward and optimizer.
TRAIN: Final = "train"
#: A sampled stack whose leaf is a blocking call (assigned by classification only).
IDLE: Final = "idle"
#: A sampled stack no pattern matched (assigned by classification only).
OTHER: Final = "other"

#: Phases with a meaning of their own, in the order sampled phases try them on one frame.
CANONICAL_PHASES: Final = (WEIGHT_SYNC, ROLLOUT, TRAIN)
#: Names only sampled-phase classification assigns; a user pattern cannot take them.
RESERVED_PHASES: Final = frozenset({IDLE, OTHER})

#: Other spellings (as :func:`phase_key` writes them) -> canonical phase.
PHASE_ALIASES: Final[dict[str, str]] = {
    "sync": WEIGHT_SYNC,
    "weight_update": WEIGHT_SYNC,
    "weights_sync": WEIGHT_SYNC,
    "update_weights": WEIGHT_SYNC,
    "sync_weights": WEIGHT_SYNC,
    "refit": WEIGHT_SYNC,
    "broadcast": WEIGHT_SYNC,
    "generate": ROLLOUT,
    "generation": ROLLOUT,
    "gen": ROLLOUT,
    "training": TRAIN,
    "update_actor": TRAIN,
    "actor_update": TRAIN,
}

_SEPARATORS = re.compile(r"[\s-]+")


def phase_key(name: str) -> str:
    """A phase name as compared: stripped, lower case, runs of ``-`` and white space as ``_``.

    Args:
        name: a phase name as a user or a framework wrote it (``Weight Sync``).

    Returns:
        The key (``weight_sync``); ``""`` for a blank name.
    """
    return _SEPARATORS.sub("_", name.strip().lower())


@functools.lru_cache(maxsize=4096)  # analysis asks once per span; a trace has few names
def canonical_phase(name: str) -> str | None:
    """The canonical phase a name means, or None when it is no canonical phase nor alias.

    Args:
        name: any spelling (``sync``, ``Weight-Sync``, ``generation``).

    Returns:
        One of :data:`CANONICAL_PHASES`, or None.
    """
    key = phase_key(name)
    key = PHASE_ALIASES.get(key, key)
    return key if key in CANONICAL_PHASES else None


def resolve_phase(name: str) -> str:
    """The name analysis groups a phase under: its canonical phase when it has one, else the
    name as given (a phase of the user's own, ``"checkpoint"``, keeps its spelling).

    Args:
        name: a phase name.

    Returns:
        :func:`canonical_phase` of ``name``, else ``name`` unchanged.
    """
    return canonical_phase(name) or name


def phase_of_series(name: str) -> str | None:
    """The canonical phase a per-step time's name means: ``update_weights_time_s`` and
    ``timing_s/update_weights`` are ``weight_sync``, ``generation_s`` is ``rollout``; None
    when the name means no phase."""
    key = name.rsplit("/", 1)[-1]
    for suffix in ("_time_s", "_seconds", "_sec", "_s", "_time"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    return canonical_phase(key)


#: Name endings of a logged weight-sync size (``update_weights_bytes``, ``sync_gb``): the stem
#: before them names the phase (:func:`sync_size_series`).
_SIZE_ENDINGS = ("_size_bytes", "_bytes", "_size", "_gib", "_gb", "_mib", "_mb")
#: ... and of a logged weight-sync bandwidth (``update_weights_bandwidth``).
_RATE_ENDINGS = ("_bandwidth", "_throughput", "_bw")


def sync_size_series(name: str) -> str | None:
    """Whether a logged series is the weight sync's size or bandwidth: ``size`` for a name
    whose stem is the weight-sync phase and whose ending is a size (``perf/update_weights_gb``,
    ``weight_sync_bytes``), ``rate`` for a bandwidth or throughput ending; None otherwise.
    The series' unit says the scale (an unknown unit is not read as bytes)."""
    key = phase_key(name.rsplit("/", 1)[-1])
    for endings, kind in ((_SIZE_ENDINGS, "size"), (_RATE_ENDINGS, "rate")):
        for end in endings:
            if key.endswith(end) and canonical_phase(key[: -len(end)]) == WEIGHT_SYNC:
                return kind
    return None
