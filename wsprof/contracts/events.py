"""Events a trace records (the ``events`` table: ``t_ns, kind, detail``), as types.

:class:`EventKind` holds every kind capture writes; its values are exactly the strings on disk
(a str Enum: ``EventKind.WRAPPER == "wrapper"``). :func:`parse_event` turns a raw row into one
frozen dataclass per event that carries data (a wrapper found, the patch summary, a sampler
window lost, a sampler stopped with its reason, a preset entry point missing, ...), parsed once
where the trace is read. Every event is an :class:`Event` (``t_ns``, ``kind``, raw
``detail``); a kind this wsprof does not know, or a detail that does not parse, stays a plain
:class:`Event`, never an error. Analysis matches on the enum or with ``isinstance``, never on
substrings of ``detail``. Pure; stdlib only.

The detail text has one definition, here: capture builds the typed event and writes
:meth:`Event.encode` (``SamplerStopped(reason=..., samples=...).encode()``); :func:`parse_event`
is its inverse (``parse_event(t, kind, ev.encode())`` equals ``ev`` with that ``detail``), and
still reads every detail older wsprof wrote. (The method is ``encode``, not ``detail``:
``detail`` is the field holding the raw text as stored.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class EventKind(str, Enum):
    """Every event kind capture writes; the values are the on-disk ``kind`` strings."""

    #: A foreign wrapper on a collective name, or a ProcessGroup subclass (JSON detail).
    WRAPPER = "wrapper"
    #: ``wsprof.patch()`` installed its hooks (JSON detail: layers and counts).
    PATCHED = "patched"
    #: A hooked name was re-wrapped after the patch and hooked again (``owner.name``).
    REWRAPPED = "rewrapped"
    #: Device (CUDA) timing is off or partial (``off: <why>``, ``no NCCL completion hook ...``).
    DEVICE_TIME = "device_time"
    #: An extra target (``WSPROF_EXTRA``) could not be hooked (``<target>: <why>``).
    EXTRA_MISSING = "extra_missing"
    #: An extra target was hooked (``<target>``).
    EXTRA_HOOKED = "extra_hooked"
    #: A preset marked a phase on an entry point (``<preset>: <phase> marked on <path>``).
    PRESET = "preset"
    #: A preset's entry point is missing in the installed framework (``<preset>: <what>``).
    PRESET_MISSING = "preset_missing"
    #: A counter probe failed for the first time (``<probe>: <error>``).
    PROBE_ERROR = "probe_error"
    #: A counter probe was turned off after repeated errors (``<probe>: off after ...``).
    PROBE_OFF = "probe_off"
    #: A summary of ``torch.cuda.memory_snapshot()`` (JSON detail).
    MEMORY_SNAPSHOT = "memory_snapshot"
    #: A setting was not understood or was adjusted (one line).
    SETTINGS = "settings"
    #: A counter source is unavailable (``no NVML counters: <why>``).
    COUNTERS = "counters"
    #: An internal error of wsprof, caught (``<where>: <type>: <message>``).
    INTERNAL_ERROR = "internal_error"
    #: Signal handling could not be installed (``no SIGTERM flush: <why>``).
    SIGNALS = "signals"
    #: ``wsprof attach``: a target process exited (``pid <n> exited``).
    TARGET_EXITED = "target_exited"
    #: ``wsprof attach``: polling a target failed (``<type>: <message>``).
    POLL_ERROR = "poll_error"
    #: The py-spy sampler's status (``started: ...``, ``window failed: ...``, ``stopped: ...``).
    SAMPLER = "sampler"
    #: A new place that shares tensors with other processes (JSON: :class:`ShareSite`).
    SHARE_SITE = "share_site"
    #: What holds shared tensors that outlive their sync (JSON: :class:`ShareHolder`).
    SHARE_HOLDER = "share_holder"

    def __str__(self) -> str:
        """The on-disk text (``wrapper``), also in f-strings."""
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass(frozen=True)
class Event:
    """A recorded event: the raw row. Typed events below add what their detail carries.

    Attributes:
        t_ns: monotonic ns of the writing process (0 in an event being written: the writer
            stamps the time).
        kind: an :class:`EventKind`, or the raw text of a kind this wsprof does not know; each
            typed event defaults to its own kind.
        detail: the raw detail text, as stored (empty in an event being written:
            :meth:`encode` gives it).
    """

    t_ns: int = 0
    kind: EventKind | str = ""
    detail: str = ""

    def encode(self) -> str:
        """The detail text to write for this event (a typed event: from its fields; a plain
        one: its raw ``detail``). :func:`parse_event` reads it back."""
        return self.detail


@dataclass(frozen=True)
class WrapperFound(Event):
    """A foreign wrapper on a collective name (``wrapper_kind`` ``name``) or a ProcessGroup
    subclass in use (``group_class``).

    Attributes:
        api: the name it sits on (``dist.broadcast``) or ``ProcessGroup``.
        wrapper_kind: ``name`` or ``group_class``.
        qualname: the wrapper's (or subclass's) qualified name.
        module: its module, if known.
        file: the file it is defined in, if known.
        line: its first line there, if known.
        wraps: what it wraps, outermost first.
        after_patch: found on a re-wrap after ``wsprof.patch()`` (else at patch time).
    """

    kind: EventKind | str = EventKind.WRAPPER
    api: str = "?"
    wrapper_kind: str = "name"
    qualname: str = "?"
    module: str | None = None
    file: str | None = None
    line: int | None = None
    wraps: tuple[str, ...] = ()
    after_patch: bool = False

    @classmethod
    def of(cls, api: str, fact: Mapping[str, Any], after_patch: bool = False) -> WrapperFound:
        """The event of a wrapper described by ``fact`` (the JSON keys: ``qualname``,
        ``module``, ``file``, ``line``, ``wraps``, ``kind``), found on ``api``."""
        return _wrapper_fields(0, "", {**fact, "api": api, "after_patch": after_patch})

    def encode(self) -> str:
        """JSON: ``api``, ``after_patch`` (when true), ``kind`` (when not ``name``),
        ``qualname``, ``module``, ``file``, ``line``, ``wraps``."""
        d: dict[str, Any] = {"api": self.api}
        if self.after_patch:
            d["after_patch"] = True
        if self.wrapper_kind != "name":
            d["kind"] = self.wrapper_kind
        d.update(
            qualname=self.qualname,
            module=self.module,
            file=self.file,
            line=self.line,
            wraps=list(self.wraps),
        )
        return json.dumps(d)


@dataclass(frozen=True)
class Patched(Event):
    """``wsprof.patch()`` installed its hooks.

    Attributes:
        layers: ``api``, ``backend`` or ``both`` (``both`` when not recorded).
        api_names: collective names hooked, or None when not recorded.
        backend_methods: ProcessGroup methods hooked, or None.
        backend_class_methods: methods hooked on ProcessGroup subclasses, or None.
        functional_ops: functional collective ops hooked, or None.
    """

    kind: EventKind | str = EventKind.PATCHED
    layers: str = "both"
    api_names: int | None = None
    backend_methods: int | None = None
    backend_class_methods: int | None = None
    functional_ops: int | None = None

    def encode(self) -> str:
        """JSON: ``layers`` and each count that is recorded."""
        d: dict[str, Any] = {"layers": self.layers}
        for key in _PATCHED_COUNTS:
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        return json.dumps(d)


@dataclass(frozen=True)
class SamplerStarted(Event):
    """The py-spy sampler started, with its settings (a setting the detail lacks is None).

    Attributes:
        targets: the pids sampled.
        rate_hz: samples per second per thread.
        window_s: one window's length, s.
        every_s: seconds from one window's start to the next.
        blocking: the targets are paused while sampled.
        native: native frames are sampled.
        pyspy_version: py-spy's version.
    """

    kind: EventKind | str = EventKind.SAMPLER
    targets: tuple[int, ...] = ()
    rate_hz: int | None = None
    window_s: int | None = None
    every_s: float | None = None
    blocking: bool | None = None
    native: bool | None = None
    pyspy_version: str | None = None

    def encode(self) -> str:
        """``started: targets=[1, 2] rate_hz=100 window_s=5 every_s=5 blocking=True
        native=False py-spy 0.4.0``."""
        return (
            f"started: targets={list(self.targets)} rate_hz={self.rate_hz} "
            f"window_s={self.window_s} every_s={_number(self.every_s)} "
            f"blocking={self.blocking} native={self.native} py-spy {self.pyspy_version}"
        )


@dataclass(frozen=True)
class SamplerTargetExited(Event):
    """A process the sampler sampled exited.

    Attributes:
        pid: its pid.
    """

    kind: EventKind | str = EventKind.SAMPLER
    pid: int = -1

    def encode(self) -> str:
        """``target exited: pid <pid>``."""
        return f"target exited: pid {self.pid}"


@dataclass(frozen=True)
class SamplerWindowLost(Event):
    """A sampling window was lost: py-spy was killed while sampling.

    Attributes:
        signal: the signal that killed py-spy, or None when the detail does not say.
        pid: the pid it was sampling, or None.
    """

    kind: EventKind | str = EventKind.SAMPLER
    signal: int | None = None
    pid: int | None = None

    def encode(self) -> str:
        """``py-spy killed by signal <signal> while sampling pid <pid>; window lost``."""
        return f"py-spy killed by signal {self.signal} while sampling pid {self.pid}; window lost"


@dataclass(frozen=True)
class SamplerWindowFailed(Event):
    """A sampling window failed.

    Attributes:
        reason: why (py-spy's message or the stop reason).
    """

    kind: EventKind | str = EventKind.SAMPLER
    reason: str = ""

    def encode(self) -> str:
        """``window failed: <reason>``."""
        return f"window failed: {self.reason}"


@dataclass(frozen=True)
class SamplerStopped(Event):
    """The sampler stopped.

    Attributes:
        reason: why (``duration reached``, ``stopped by caller``, ``target exited``, ...).
        samples: samples taken, or None when not recorded.
        windows: sampling windows run, or None.
        errors: py-spy errors, or None.
    """

    kind: EventKind | str = EventKind.SAMPLER
    reason: str = ""
    samples: int | None = None
    windows: int | None = None
    errors: int | None = None

    def encode(self) -> str:
        """``stopped: <reason>; samples=<n> windows=<n> errors=<n>`` (``stopped: <reason>``
        when the counts are not recorded)."""
        if self.samples is None or self.windows is None or self.errors is None:
            return f"stopped: {self.reason}"
        return (
            f"stopped: {self.reason}; samples={self.samples} windows={self.windows} "
            f"errors={self.errors}"
        )


@dataclass(frozen=True)
class PresetMarked(Event):
    """A preset marked a phase on a framework entry point.

    Attributes:
        preset: the preset (``verl``).
        phase: the phase marked (``weight_sync``).
        path: the entry point, ``module:qualname``.
    """

    kind: EventKind | str = EventKind.PRESET
    preset: str = ""
    phase: str = ""
    path: str = ""

    def encode(self) -> str:
        """``<preset>: <phase> marked on <path>``."""
        return f"{self.preset}: {self.phase} marked on {self.path}"


@dataclass(frozen=True)
class PresetMissing(Event):
    """A preset's entry point is missing (or the preset is unknown).

    Attributes:
        preset: the preset, or None when the detail names none (an unknown ``WSPROF_PRESET``).
        what: what is missing and its consequence.
    """

    kind: EventKind | str = EventKind.PRESET_MISSING
    preset: str | None = None
    what: str = ""

    def encode(self) -> str:
        """``<preset>: <what>``, or ``<what>`` when no preset is named."""
        return self.what if self.preset is None else f"{self.preset}: {self.what}"


@dataclass(frozen=True)
class ProbeTrouble(Event):
    """A counter probe failed (``probe_error``) or was turned off (``probe_off``).

    Attributes:
        probe: the probe's name (``nvml``, ``cuda``).
        message: the error, or why it was turned off.
    """

    kind: EventKind | str = EventKind.PROBE_ERROR
    probe: str = ""
    message: str = ""

    def encode(self) -> str:
        """``<probe>: <message>``."""
        return f"{self.probe}: {self.message}"

    @property
    def off(self) -> bool:
        """Whether the probe was turned off (else: its first error)."""
        return self.kind == EventKind.PROBE_OFF


@dataclass(frozen=True)
class MemorySnapshot(Event):
    """A summary of ``torch.cuda.memory_snapshot()``.

    Attributes:
        summary: the summary as recorded (segments, bytes, reason, ...).
    """

    kind: EventKind | str = EventKind.MEMORY_SNAPSHOT
    summary: dict[str, Any] = field(default_factory=dict, hash=False)

    def encode(self) -> str:
        """The summary as JSON."""
        return json.dumps(self.summary)


@dataclass(frozen=True)
class TargetExited(Event):
    """``wsprof attach``: a target process exited.

    Attributes:
        pid: its pid.
    """

    kind: EventKind | str = EventKind.TARGET_EXITED
    pid: int = -1

    def encode(self) -> str:
        """``pid <pid> exited``."""
        return f"pid {self.pid} exited"


#: Every typed event class of a ``sampler`` event (for ``isinstance``).
SAMPLER_EVENTS = (
    SamplerStarted,
    SamplerTargetExited,
    SamplerWindowLost,
    SamplerWindowFailed,
    SamplerStopped,
)

_STOPPED_RE = re.compile(
    r"stopped: (?P<reason>.*?); samples=(?P<samples>-?\d+) "
    r"windows=(?P<windows>-?\d+) errors=(?P<errors>-?\d+)\s*$",
    re.S,
)
_LOST_RE = re.compile(
    r"py-spy killed by signal (?P<signal>-?\d+) while sampling pid (?P<pid>-?\d+); window lost\s*$"
)
#: The ``key=value`` settings of a ``started:`` detail (each value runs to the next space).
_STARTED_KEYS = ("rate_hz", "window_s", "every_s", "blocking", "native")
_STARTED_TARGETS_RE = re.compile(r"targets=\[(?P<targets>[^\]]*)\]")
_STARTED_VERSION_RE = re.compile(r" py-spy (?P<version>.*)$", re.S)
#: The counts of a ``patched`` detail, in their on-disk order.
_PATCHED_COUNTS = ("api_names", "backend_methods", "backend_class_methods", "functional_ops")
_PID_RE = re.compile(r"(?:target exited: )?pid (?P<pid>\d+)(?: exited)?\s*$")
_PRESET_MARKED_RE = re.compile(r"(?P<preset>[^:\s]+): (?P<phase>\S+) marked on (?P<path>.+)$", re.S)
#: A preset name as it starts a ``preset_missing`` detail (not ``WSPROF_PRESET=...``).
_PRESET_NAME_RE = re.compile(r"[A-Za-z0-9_\-]+$")


#: The sides of tensor sharing: the producer exports a storage, the consumer imports (opens) it.
SHARE_SIDES = ("export", "import")


@dataclass(frozen=True)
class ShareSite(Event):
    """The first export (or import) of tensors from a new place in the code.

    Attributes:
        side: ``export`` or ``import`` (:data:`SHARE_SIDES`).
        api: the torch call that shared or opened the storage (``_share_fd_cpu_``).
        device: the storage's device type (``cuda``, ``cpu``).
        nbytes: that first storage's size, bytes.
        site: the first frame outside torch and the pickler, ``function (file:line)``: the
            serializer (SGLang's ``MultiprocessingSerializer.serialize``) or the code itself.
        caller: the frame that called ``site``, same form, or None.
    """

    kind: EventKind | str = EventKind.SHARE_SITE
    side: str = "export"
    api: str = ""
    device: str = ""
    nbytes: int = 0
    site: str = "?"
    caller: str | None = None

    def encode(self) -> str:
        """JSON of the fields."""
        return json.dumps(
            {
                "side": self.side,
                "api": self.api,
                "device": self.device,
                "nbytes": self.nbytes,
                "site": self.site,
                "caller": self.caller,
            }
        )


@dataclass(frozen=True)
class ShareHolder(Event):
    """What holds the oldest shared storage still alive long after it was sent (the leak's
    holder), found by a bounded walk of the garbage collector's referrers.

    Attributes:
        side: ``export`` or ``import``.
        path: the path from a named root to the tensor
            (``UpdateWeightFromTensor.long_lived_tensors[62]['flattened_tensor']``); None when
            nothing in Python holds it (torch's CUDA IPC cache, C++, a frame's local).
        nbytes: that storage's size, bytes.
        alive: shared storages of this side alive then; ``alive_bytes``: their bytes.
        site: where that storage was shared (:class:`ShareSite`'s ``site``), or None.
        search_ms: what the walk cost, ms.
    """

    kind: EventKind | str = EventKind.SHARE_HOLDER
    side: str = "export"
    path: str | None = None
    nbytes: int = 0
    alive: int = 0
    alive_bytes: int = 0
    site: str | None = None
    search_ms: float = 0.0

    def encode(self) -> str:
        """JSON of the fields."""
        return json.dumps(
            {
                "side": self.side,
                "path": self.path,
                "nbytes": self.nbytes,
                "alive": self.alive,
                "alive_bytes": self.alive_bytes,
                "site": self.site,
                "search_ms": round(self.search_ms, 3),
            }
        )


#: Longest text a share event keeps of a field (a site, a holder path): a crafted trace's
#: megabyte of text is cut, never carried into titles.
SHARE_TEXT_MAX = 400


def _short(v: Any) -> str | None:
    return None if v is None else str(v)[:SHARE_TEXT_MAX]


def _share_event(t_ns: int, k: EventKind, detail: str) -> Event:
    d = _json_dict(detail)
    if d is None or d.get("side") not in SHARE_SIDES:
        return Event(t_ns, k, detail)
    side = str(d["side"])
    nbytes = d.get("nbytes")
    nb = int(nbytes) if isinstance(nbytes, int) and not isinstance(nbytes, bool) else 0
    if k is EventKind.SHARE_SITE:
        return ShareSite(
            t_ns,
            k,
            detail,
            side,
            _short(d.get("api")) or "",
            _short(d.get("device")) or "",
            nb,
            _short(d.get("site")) or "?",
            _short(d.get("caller")),
        )
    ms = d.get("search_ms")
    return ShareHolder(
        t_ns,
        k,
        detail,
        side,
        _short(d.get("path")),
        nb,
        _opt_int(d.get("alive")) or 0,
        _opt_int(d.get("alive_bytes")) or 0,
        _short(d.get("site")),
        float(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else 0.0,
    )


def _number(v: float | None) -> str:
    """A number as a detail writes it: the shortest text that reads back equal, without a
    trailing ``.0`` (``5``, ``2.5``)."""
    if v is None:
        return "None"
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def _started_value(detail: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){key}=(?P<v>\S+)", detail)
    return None if m is None else m["v"]


def _started(t_ns: int, detail: str) -> SamplerStarted:
    m = _STARTED_TARGETS_RE.search(detail)
    targets: tuple[int, ...] = ()
    if m:
        try:
            targets = tuple(int(p) for p in m["targets"].split(",") if p.strip())
        except ValueError:
            targets = ()
    raw = {key: _started_value(detail, key) for key in _STARTED_KEYS}

    def integer(v: str | None) -> int | None:
        return int(v) if v is not None and re.fullmatch(r"-?\d+", v) else None

    def number(v: str | None) -> float | None:
        try:
            return None if v is None else float(v)
        except ValueError:
            return None

    def flag(v: str | None) -> bool | None:
        return {"True": True, "False": False}.get(v or "")

    version = _STARTED_VERSION_RE.search(detail)
    return SamplerStarted(
        t_ns,
        EventKind.SAMPLER,
        detail,
        targets=targets,
        rate_hz=integer(raw["rate_hz"]),
        window_s=integer(raw["window_s"]),
        every_s=number(raw["every_s"]),
        blocking=flag(raw["blocking"]),
        native=flag(raw["native"]),
        pyspy_version=None if version is None else version["version"],
    )


def _kind(raw: str) -> EventKind | str:
    try:
        return EventKind(raw)
    except ValueError:
        return raw


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _json_dict(detail: str) -> dict[str, Any] | None:
    try:
        d = json.loads(detail)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def _sampler(t_ns: int, detail: str) -> Event:
    kind = EventKind.SAMPLER
    if detail.startswith("stopped:"):
        m = _STOPPED_RE.match(detail)
        if m:
            return SamplerStopped(
                t_ns,
                kind,
                detail,
                m["reason"],
                int(m["samples"]),
                int(m["windows"]),
                int(m["errors"]),
            )
        return SamplerStopped(t_ns, kind, detail, detail[len("stopped:") :].strip())
    if detail.startswith("started:"):
        return _started(t_ns, detail)
    if detail.startswith("window failed:"):
        return SamplerWindowFailed(t_ns, kind, detail, detail[len("window failed:") :].strip())
    if detail.startswith("target exited:"):
        m = _PID_RE.match(detail)
        return SamplerTargetExited(t_ns, kind, detail, int(m["pid"]) if m else -1)
    if detail.rstrip().endswith("window lost"):
        m = _LOST_RE.match(detail)
        if m:
            return SamplerWindowLost(t_ns, kind, detail, int(m["signal"]), int(m["pid"]))
        return SamplerWindowLost(t_ns, kind, detail)
    return Event(t_ns, kind, detail)


def _wrapper_fields(t_ns: int, detail: str, d: Mapping[str, Any]) -> WrapperFound:
    wraps = d.get("wraps")
    return WrapperFound(
        t_ns,
        EventKind.WRAPPER,
        detail,
        api=str(d.get("api", "?")),
        wrapper_kind=str(d.get("kind", "name")),
        qualname=str(d.get("qualname", "?")),
        module=_opt_str(d.get("module")),
        file=_opt_str(d.get("file")),
        line=_opt_int(d.get("line")),
        wraps=tuple(str(w) for w in wraps) if isinstance(wraps, (list, tuple)) else (),
        after_patch=bool(d.get("after_patch", False)),
    )


def _wrapper(t_ns: int, detail: str) -> Event:
    d = _json_dict(detail)
    if d is None:
        return Event(t_ns, EventKind.WRAPPER, detail)
    return _wrapper_fields(t_ns, detail, d)


def _patched(t_ns: int, detail: str) -> Event:
    d = _json_dict(detail) or {}
    return Patched(
        t_ns,
        EventKind.PATCHED,
        detail,
        str(d.get("layers", "both")),
        *(_opt_int(d.get(key)) for key in _PATCHED_COUNTS),
    )


def _preset_missing(t_ns: int, detail: str) -> Event:
    head, sep, rest = detail.partition(": ")
    if sep and _PRESET_NAME_RE.match(head):
        return PresetMissing(t_ns, EventKind.PRESET_MISSING, detail, head, rest)
    return PresetMissing(t_ns, EventKind.PRESET_MISSING, detail, None, detail)


def parse_event(t_ns: int, kind: str, detail: str) -> Event:
    """The typed event of a raw ``events`` row.

    Args:
        t_ns: the row's time, monotonic ns of the writing process.
        kind: the row's kind text.
        detail: the row's detail text.

    Returns:
        The typed event of a known kind whose detail parses; else an :class:`Event` (with
        the :class:`EventKind` when the kind is known, the raw text when not). Never raises.
    """
    k = _kind(kind)
    if k is EventKind.SAMPLER:
        return _sampler(t_ns, detail)
    if k is EventKind.WRAPPER:
        return _wrapper(t_ns, detail)
    if k is EventKind.PATCHED:
        return _patched(t_ns, detail)
    if k is EventKind.PRESET:
        m = _PRESET_MARKED_RE.match(detail)
        if m:
            return PresetMarked(t_ns, k, detail, m["preset"], m["phase"], m["path"])
    elif k is EventKind.PRESET_MISSING:
        return _preset_missing(t_ns, detail)
    elif k in (EventKind.PROBE_ERROR, EventKind.PROBE_OFF):
        probe, _, message = detail.partition(": ")
        return ProbeTrouble(t_ns, k, detail, probe, message)
    elif k is EventKind.MEMORY_SNAPSHOT:
        d = _json_dict(detail)
        if d is not None:
            return MemorySnapshot(t_ns, k, detail, d)
    elif k is EventKind.SHARE_SITE or k is EventKind.SHARE_HOLDER:
        return _share_event(t_ns, k, detail)
    elif k is EventKind.TARGET_EXITED:
        m = _PID_RE.match(detail)
        if m:
            return TargetExited(t_ns, k, detail, int(m["pid"]))
    return Event(t_ns, k, detail)
