"""One clock for the processes of a run: each trace's monotonic ns mapped to *run time*.

Every trace records times as ``time.monotonic_ns()`` of its own process, and one anchor in
``meta['anchor']``: a monotonic reading and a wall-clock reading (``time.time_ns()``) taken
back to back at the process's start. ``unix_ns - monotonic_ns`` is the offset that maps the
process's monotonic times to wall-clock time; run time is wall-clock time minus the run's
origin (the earliest first record of an aligned process), in ns.

How exact that is:

- **Same host.** Processes on one machine share ``CLOCK_MONOTONIC`` (containers too, unless
  they have their own time namespace), so their offsets differ only by the time between the
  two clock reads (about a µs) and by any NTP adjustment of the wall clock between the
  processes' starts (slewing is at most 500 ppm: ≤ 30 ms over a minute, usually far less).
  :func:`align` therefore gives every process of a host the host's median offset: their times
  compare exactly, as they would on the monotonic clock itself. When the offsets of one host
  name disagree by more than :data:`SAME_CLOCK_MAX_SPREAD_NS`, its processes cannot share a
  monotonic clock (different boot times: several machines under one host name, or time
  namespaces); each is then aligned by its own anchor, with a note.
- **Across hosts** the wall clock is the only common reference, so times compare only up to
  the hosts' clock skew: typically well under a millisecond with PTP, about 0.1-10 ms with NTP
  on a LAN, and unbounded (seconds or more) on unsynchronised clocks. A note says so whenever
  the aligned processes span several hosts; differences across hosts smaller than that skew
  mean nothing.
- **No anchor** (an old or foreign trace, a malformed value): the process's times cannot be
  placed on the run clock; they are kept on its own clock, with its first record at run time 0,
  and a note names it.

Pure: numbers in, numbers out; no trace reading.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Largest spread of the anchor offsets (``unix_ns - monotonic_ns``) of processes with one host
#: name for them to be taken as sharing one monotonic clock, ns. One second: NTP slewing (at most
#: 500 ppm) moves the offset by well under that between the starts of one job's processes,
#: while two machines' monotonic clocks (time since boot) differ by far more.
SAME_CLOCK_MAX_SPREAD_NS = 1_000_000_000

#: How a process's monotonic time was mapped to run time.
BASIS_HOST = "host"  # the median anchor offset of its host (shared monotonic clock)
BASIS_PROCESS = "process"  # its own anchor (its host's anchors disagree)
BASIS_NONE = "none"  # no anchor: its own clock, first record at run time 0


@dataclass(frozen=True)
class ClockInput:
    """What alignment needs from one process.

    Attributes:
        label: how reports name the process (``rank 3``).
        host: host name from the trace's meta, None when unknown.
        anchor_monotonic_ns: the anchor's monotonic reading, None without an anchor.
        anchor_unix_ns: the anchor's wall-clock reading (ns since the epoch), None without one.
        first_ns: monotonic ns of the process's first record.
    """

    label: str
    host: str | None
    anchor_monotonic_ns: int | None
    anchor_unix_ns: int | None
    first_ns: int


@dataclass(frozen=True)
class ProcessClock:
    """How one process's monotonic ns map to run ns: ``run_ns = monotonic_ns + shift_ns``.

    Attributes:
        label: the process's label.
        host: its host, None when unknown.
        basis: :data:`BASIS_HOST`, :data:`BASIS_PROCESS` or :data:`BASIS_NONE`.
        shift_ns: added to a monotonic ns of this process to get run ns.
        offset_ns: the wall-clock offset used (``unix_ns - monotonic_ns``), None without anchor.
    """

    label: str
    host: str | None
    basis: str
    shift_ns: int
    offset_ns: int | None

    @property
    def aligned(self) -> bool:
        """True when the process is on the common run clock."""
        return self.basis != BASIS_NONE

    def run_ns(self, monotonic_ns: int) -> int:
        """This process's monotonic ns on the run clock, ns since the run's origin."""
        return monotonic_ns + self.shift_ns

    def run_s(self, monotonic_ns: int) -> float:
        """This process's monotonic ns on the run clock, seconds since the run's origin."""
        return (monotonic_ns + self.shift_ns) / 1e9


@dataclass(frozen=True)
class RunClock:
    """The run clock of a set of processes (see the module docstring).

    Attributes:
        origin_unix_ns: wall-clock ns of run time 0 (the earliest first record of an aligned
            process); None when no process has an anchor.
        clocks: one per input, same order.
        hosts: distinct host names among the aligned processes.
        notes: what the reader should know about the alignment's error.
    """

    origin_unix_ns: int | None
    clocks: tuple[ProcessClock, ...]
    hosts: tuple[str, ...]
    notes: tuple[str, ...]


def anchor_of(meta: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(monotonic_ns, unix_ns)`` of a trace's ``meta['anchor']``, None when absent or not two
    integers."""
    a = meta.get("anchor")
    if not isinstance(a, Mapping):
        return None
    mono, unix = a.get("monotonic_ns"), a.get("unix_ns")
    if isinstance(mono, bool) or isinstance(unix, bool):
        return None
    if not isinstance(mono, int) or not isinstance(unix, int):
        return None
    return mono, unix


def clock_input(label: str, meta: Mapping[str, Any], first_ns: int) -> ClockInput:
    """A process's input to :func:`align`: its trace's anchor and host (``meta``) and the
    monotonic ns of its first record."""
    anchor = anchor_of(meta)
    host = meta.get("host")
    return ClockInput(
        label,
        host if isinstance(host, str) else None,
        anchor[0] if anchor else None,
        anchor[1] if anchor else None,
        first_ns,
    )


def _median_int(values: Sequence[int]) -> int:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2


def align(inputs: Sequence[ClockInput]) -> RunClock:
    """Map every process's monotonic clock to the run clock.

    Args:
        inputs: one per process.

    Returns:
        The run clock: per process the shift from its monotonic ns to run ns, and notes.
    """
    offsets: dict[int, int] = {}
    for i, c in enumerate(inputs):
        if c.anchor_monotonic_ns is not None and c.anchor_unix_ns is not None:
            offsets[i] = c.anchor_unix_ns - c.anchor_monotonic_ns
    notes: list[str] = []
    by_host: dict[str | None, list[int]] = {}
    for i in offsets:
        by_host.setdefault(inputs[i].host, []).append(i)
    chosen: dict[int, tuple[str, int]] = {}
    for host, members in by_host.items():
        offs = [offsets[i] for i in members]
        spread = max(offs) - min(offs)
        if host is None or spread > SAME_CLOCK_MAX_SPREAD_NS:
            for i in members:
                chosen[i] = (BASIS_PROCESS, offsets[i])
            if host is not None:
                notes.append(
                    f"host {host}: the clock anchors of its {len(members)} processes disagree "
                    f"by {spread / 1e9:.3g} s, so they do not share one monotonic clock (several "
                    "machines under one host name, or time namespaces); each is aligned by its "
                    "own wall-clock anchor"
                )
        else:
            med = _median_int(offs)
            for i in members:
                chosen[i] = (BASIS_HOST, med)
    origin = min((inputs[i].first_ns + chosen[i][1] for i in chosen), default=None)
    clocks: list[ProcessClock] = []
    for i, c in enumerate(inputs):
        if i in chosen and origin is not None:
            basis, off = chosen[i]
            clocks.append(ProcessClock(c.label, c.host, basis, off - origin, off))
        else:
            clocks.append(ProcessClock(c.label, c.host, BASIS_NONE, -c.first_ns, None))
    hosts = tuple(sorted({c.host for c in clocks if c.aligned and c.host is not None}))
    if len(hosts) > 1:
        notes.append(
            f"processes on {len(hosts)} hosts are aligned by each host's wall clock: times "
            "compared across hosts are off by the hosts' clock skew (about 0.1-10 ms with NTP, "
            "under 1 ms with PTP, unbounded without clock synchronisation); within one host "
            "the shared monotonic clock is exact"
        )
    unaligned = [c.label for c in clocks if not c.aligned]
    if unaligned and len(inputs) > 1:
        names = ", ".join(unaligned[:6]) + (", ..." if len(unaligned) > 6 else "")
        notes.append(
            f"no clock anchor in the trace of {names}: its times are not aligned with the "
            "other processes (kept on its own clock, its first record at run time 0)"
        )
    return RunClock(origin, tuple(clocks), hosts, tuple(notes))
