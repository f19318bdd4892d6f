"""The types of the framework registry (:mod:`wsprof.frameworks`): frozen dataclasses, pure
data. Standard library and :mod:`wsprof.contracts` only."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from wsprof.contracts.phases import CANONICAL_PHASES

#: Regex of any function name (for "every function of this file").
ANY = r"[^ ()]+"


def frame_regex(function: str, file: str | None = None) -> str:
    """Regex of a py-spy frame ``function (file:line)``.

    Args:
        function: regex of the function name; it must end the qualified name and start it or
            follow a dot, so ``update_weights`` matches ``update_weights`` and
            ``Actor.update_weights`` but not ``pre_update_weights``; ``Actor\\.f`` needs the
            class (Python >= 3.11 only).
        file: regex of the end of the file path, matched at its start or after a ``/``
            (``actor\\.py`` matches ``actor.py`` and ``slime/backends/actor.py``); None: any.

    Returns:
        The regex, to be searched in one frame.
    """
    head = rf"^(?:[^ ()]*\.)?(?:{function}) \("
    if file is None:
        return head
    return head + rf"(?:[^()]*/)?(?:{file})(?::\d+)?\)$"


@dataclass(frozen=True)
class EntryPoint:
    """A function a preset wraps in ``wsprof.phase(phase)``.

    Attributes:
        phase: the canonical phase it marks (:data:`wsprof.contracts.phases.CANONICAL_PHASES`).
        paths: ``module:qualname`` alternatives, newest release first (where a release moved
            the function, every place it has been); the first found in the process is wrapped.
        note: where it lives and what the framework logs for it.
    """

    phase: str
    paths: tuple[str, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if self.phase not in CANONICAL_PHASES:
            raise ValueError(f"entry point phase {self.phase!r} is not canonical")
        for path in self.paths:
            module, sep, qualname = path.partition(":")
            if not (module and sep and qualname):
                raise ValueError(f"entry point path {path!r} is not module:qualname")


def split_path(path: str) -> tuple[str, str]:
    """``module:qualname`` -> ``(module, qualname)``."""
    module, _, qualname = path.partition(":")
    return module, qualname


@dataclass(frozen=True)
class PhasePattern:
    """A sampled-phase pattern: py-spy frames of ``function`` in ``file`` are ``phase``.

    Attributes:
        phase: the canonical phase.
        function: regex of the function name (see :func:`frame_regex`).
        file: regex of the end of the file path; None: any file.
        note: the framework's functions it is meant to match (repository paths).
        legacy: True when it matches older releases only: the release check does not require
            it in the latest one.
    """

    phase: str
    function: str
    file: str | None = None
    note: str = ""
    legacy: bool = False

    @property
    def regex(self) -> str:
        """The frame regex (:func:`frame_regex`)."""
        return frame_regex(self.function, self.file)


def patterns_by_phase(patterns: Iterable[PhasePattern]) -> dict[str, list[str]]:
    """Phase -> frame regexes of ``patterns`` (in their order), phases in
    :data:`CANONICAL_PHASES` order; phases without a pattern left out."""
    items = tuple(patterns)
    out: dict[str, list[str]] = {}
    for phase in CANONICAL_PHASES:
        regexes = [p.regex for p in items if p.phase == phase]
        if regexes:
            out[phase] = regexes
    return out


class LineShape(Enum):
    """How a log's step line holds its metrics."""

    #: ``<step line> {'key': value, ...}``: a Python dict repr or JSON in the ``body`` group.
    DICT = "dict"
    #: ``<step line> key:value - key:value``: pairs split by `` - `` in the ``body`` group.
    DASH_PAIRS = "dash_pairs"
    #: a step line alone, then table rows of key/value pairs up to the next step line.
    TABLE = "table"


@dataclass(frozen=True)
class LogFormat:
    """The step line of a framework's text log.

    Attributes:
        name: the format's name in notes and messages (``OpenRLHF``).
        marker: text every step line holds (spares most lines the regex).
        step_line: regex of a step line; ``{step}`` stands for the step number's group (the
            importer fills it in) and, except for :attr:`LineShape.TABLE`, a group ``body``
            holds the metrics.
        shape: how the metrics are written.
        example: what a step line looks like, for messages.
        source: the framework file that writes it.
    """

    name: str
    marker: str
    step_line: str
    shape: LineShape
    example: str
    source: str = ""


@dataclass(frozen=True)
class MetricKey:
    """A framework metric that becomes one of wsprof's headline series.

    Attributes:
        key: the framework's key (``timing_s/update_weights``).
        series: the wsprof series it is read as (``weight_sync_s``).
        note: which versions or modes log it.
        shift_steps: how many steps late the framework logs it (its values move back).
    """

    key: str
    series: str
    note: str = ""
    shift_steps: int = 0


@dataclass(frozen=True)
class TensorBoardLayout:
    """How a framework writes its scalars into TensorBoard event files (read by
    :mod:`wsprof.importers.tensorboard`): which step axis each tag is logged against.

    Attributes:
        step_axis: the framework's name for the step its per-step scalars are logged
            against (slime: ``rollout/step``, the rollout id); every tag not in ``apart``.
        axis_tags: tags that are step counters, never metrics (not read when a writer logs
            them as scalars).
        apart: ``(tag prefix, axis)`` of tags logged against another step axis (slime's
            ``train/`` per optimizer step, ``train/step``): kept out of the per-step series.
        source: the framework files that write the event files.
    """

    step_axis: str
    axis_tags: tuple[str, ...] = ()
    apart: tuple[tuple[str, str], ...] = ()
    source: str = ""

    def apart_axis(self, tag: str) -> str | None:
        """The other axis ``tag`` is logged against, or None when it is a per-step tag."""
        return next((axis for prefix, axis in self.apart if tag.startswith(prefix)), None)


@dataclass(frozen=True)
class Framework:
    """Everything wsprof knows about one framework.

    Attributes:
        name: the ``--framework`` / ``--preset`` name (lower case).
        title: how the framework spells itself (``OpenRLHF``).
        modules: its top-level import packages (as py-spy shows installed files' folders).
        distribution: its PyPI name, None when it is not on PyPI.
        repository: its source repository (``owner/name``).
        entry_points: what presets mark as phases.
        phase_patterns: sampled-phase patterns, tried before the generic ones.
        log_format: the step line of its text log, None when it writes none wsprof reads.
        metric_keys: its keys of wsprof's headline series, first present wins per series.
        timer_keys: ``(prefix, suffix)`` of its metric keys that are times in seconds.
        step_time_keys: keys that are step times in seconds though their name has no unit.
        per_token_prefixes: key prefixes of its per-token times, ms (a phase's time divided by
            the batch's tokens: a rate that moves with the batch, not a duration).
        quality_namespaces: key prefixes (``actor/``) of namespaces holding only
            training-quality and data statistics (a learning rate among them is its schedule).
        tensorboard: the step axes of its TensorBoard scalars, None when wsprof does not know
            them (every scalar is then read on its event's step).
        timeline_env: the environment variable that makes it write its own communication
            timeline (a path template), which ``wsprof run`` sets into the run folder; None
            when it writes none wsprof reads.
        timeline_template: the file name ``wsprof run`` gives that variable (its placeholders
            are the framework's).
    """

    name: str
    title: str
    modules: tuple[str, ...]
    distribution: str | None
    repository: str
    entry_points: tuple[EntryPoint, ...]
    phase_patterns: tuple[PhasePattern, ...]
    log_format: LogFormat | None = None
    metric_keys: tuple[MetricKey, ...] = ()
    timer_keys: tuple[tuple[str, str], ...] = ()
    step_time_keys: tuple[str, ...] = ()
    per_token_prefixes: tuple[str, ...] = ()
    quality_namespaces: tuple[str, ...] = ()
    tensorboard: TensorBoardLayout | None = None
    timeline_env: str | None = None
    timeline_template: str = ""

    def patterns(self) -> dict[str, list[str]]:
        """Phase -> frame regexes, phases in :data:`CANONICAL_PHASES` order."""
        return patterns_by_phase(self.phase_patterns)

    def entry_point(self, phase: str) -> EntryPoint | None:
        """The first entry point marking ``phase``, if any."""
        return next((e for e in self.entry_points if e.phase == phase), None)


@dataclass(frozen=True)
class Engine:
    """An inference or training engine any framework may run on (vLLM, SGLang, DeepSpeed, ...):
    its sampled-phase patterns, tried after the framework's own.

    Attributes:
        name: lower-case name (``vllm``).
        title: how it spells itself (``vLLM``).
        phase_patterns: its sampled-phase patterns.
    """

    name: str
    title: str
    phase_patterns: tuple[PhasePattern, ...]

    def patterns(self) -> dict[str, list[str]]:
        """Phase -> frame regexes, phases in :data:`CANONICAL_PHASES` order."""
        return patterns_by_phase(self.phase_patterns)
