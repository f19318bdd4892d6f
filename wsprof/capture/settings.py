"""Every ``WSPROF_*`` environment variable, read in one place into one typed, frozen object.

:func:`read` reads them all from the environment (or a mapping a test passes) into
:class:`Settings`; each field is validated. Nothing here prints or raises:

* a bad number or flag that only tunes profiling (``WSPROF_KEEP_STEPS``,
  ``WSPROF_COUNTERS``, ...), or a ``WSPROF_PRESET`` that names no framework of
  :data:`wsprof.frameworks.NAMES`, becomes the default and one line in :attr:`Settings.warnings`,
  naming the variable, the value and what is used instead; the capture session
  (:mod:`wsprof.capture.session`) writes those lines to stderr and into the trace;
* a bad value of a variable that decides what to profile at all (``WSPROF_DISABLE``,
  ``WSPROF_LAYERS``) is one line in :attr:`Settings.errors`: ``wsprof.patch()`` raises it as a
  ``ValueError`` (:meth:`Settings.raise_for`), the ``wsprof run`` bootstrap
  (:mod:`wsprof.bootstrap`) writes it as a warning and carries on (a bad ``WSPROF_DISABLE``:
  not profiling; a bad ``WSPROF_LAYERS``: ``both``).

The variable names are the ``ENV_*`` constants; ``wsprof run`` writes its children's
environment with them (:func:`child_env`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from wsprof.capture.links import STATED_LIMIT_RULE, stated_limit

#: No-op ``wsprof.patch()`` (a yes/no flag).
ENV_DISABLE = "WSPROF_DISABLE"
#: Hook layers, ``both`` or ``api``.
ENV_LAYERS = "WSPROF_LAYERS"
#: The run folder traces are written to.
ENV_OUT = "WSPROF_OUT"
#: First and last steps kept with full call detail (an integer >= 0; 0 keeps every call).
ENV_KEEP_STEPS = "WSPROF_KEEP_STEPS"
#: Calls kept per thinned step (an integer >= 1).
ENV_THINNED_STEP_CALLS = "WSPROF_THINNED_STEP_CALLS"
#: Device time of each collective (a yes/no flag).
ENV_DEVICE_TIME = "WSPROF_DEVICE_TIME"
#: Counter sampling (a yes/no flag, default yes).
ENV_COUNTERS = "WSPROF_COUNTERS"
#: Share of wall time all counter probes may cost, percent in (0, 100].
ENV_PROBE_BUDGET_PCT = "WSPROF_PROBE_BUDGET_PCT"
#: The link limit a weight sync's bandwidth is judged against, GB/s (1e9 bytes/s) per
#: direction, a number > 0; unset: the limits read from the machine
#: (:func:`wsprof.capture.links.read_links`).
ENV_LINK_GBPS = "WSPROF_LINK_GBPS"
#: The allocator probe's interval inside sync bursts, ms (an integer >= 1).
ENV_PROBE_INTERVAL_MS = "WSPROF_PROBE_INTERVAL_MS"
#: Capacity of the capture ring, records (an integer >= 1).
ENV_RING_RECORDS = "WSPROF_RING_RECORDS"
#: The older name of :data:`ENV_RING_RECORDS` (read when that one is unset).
ENV_MAX_PENDING = "WSPROF_MAX_PENDING"
#: The compiled recording path (a yes/no flag, default yes; ``0``: pure Python).
ENV_NATIVE = "WSPROF_NATIVE"
#: More communicators to hook, comma-separated ``module:qualname[=op]``.
ENV_EXTRA = "WSPROF_EXTRA"
#: The framework preset of ``wsprof run``, one of :data:`wsprof.frameworks.NAMES`.
ENV_PRESET = "WSPROF_PRESET"
#: No "trace at ..." line at exit (a yes/no flag).
ENV_QUIET = "WSPROF_QUIET"
#: Set to ``1`` by ``wsprof run`` in its command's environment: the bootstrap patches.
ENV_RUN = "WSPROF_RUN"
#: The py-spy binary of ``wsprof attach`` (read by its ``--pyspy`` option).
ENV_PYSPY = "WSPROF_PYSPY"
#: Accept a run folder owned by another user or writable by group/others (files in it are
#: still created exclusively, never through a link: :mod:`wsprof.trace.outputs`).
ENV_ALLOW_SHARED_OUT = "WSPROF_ALLOW_SHARED_OUT"

#: Spellings of a yes/no ``WSPROF_*`` flag (compared lower case, stripped).
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
#: Which layers the collective hooks cover (:func:`wsprof.capture.collectives.install`):
#: ``both`` (names, ProcessGroup methods and Work), or ``api`` (names only).
LAYERS = ("both", "api")
#: Default share of wall time all counter probes together may cost (the counters issue:
#: <= 0.5 %); :mod:`wsprof.capture.counters` uses it when ``WSPROF_PROBE_BUDGET_PCT`` is unset.
DEFAULT_PROBE_BUDGET_FRACTION = 0.005
#: Default interval of the allocator probe inside sync bursts, ms.
DEFAULT_PROBE_INTERVAL_MS = 50


@dataclass(frozen=True)
class Settings:
    """What the ``WSPROF_*`` variables say, validated. A field that is None means "unset: the
    default of the code that uses it" (named in each field's comment).

    Attributes:
        disable: ``WSPROF_DISABLE``: ``wsprof.patch()`` is a no-op (True also when the value
            is not a flag: see :attr:`errors`).
        layers: ``WSPROF_LAYERS``, lower case (``both`` when unset or bad).
        out: ``WSPROF_OUT``, the run folder; None when unset or empty.
        keep_steps: ``WSPROF_KEEP_STEPS``, steps; None: ``retention.DEFAULT_KEEP_STEPS``.
        thinned_step_calls: ``WSPROF_THINNED_STEP_CALLS``, calls per step; None:
            ``retention.DEFAULT_THINNED_STEP_CALLS``.
        device_time: ``WSPROF_DEVICE_TIME``.
        counters: ``WSPROF_COUNTERS`` (default True).
        probe_budget_fraction: ``WSPROF_PROBE_BUDGET_PCT`` / 100, a share of wall time in
            (0, 1]; None: :data:`DEFAULT_PROBE_BUDGET_FRACTION`.
        probe_interval_ms: ``WSPROF_PROBE_INTERVAL_MS``, ms; None:
            :data:`DEFAULT_PROBE_INTERVAL_MS`.
        link_gbps: ``WSPROF_LINK_GBPS``, the link limit the user states, GB/s (1e9 bytes/s)
            per direction, > 0; None: the limits read from the machine.
        ring_records: ``WSPROF_RING_RECORDS`` (else ``WSPROF_MAX_PENDING``), records; None:
            ``ring.DEFAULT_CAPACITY``.
        native: ``WSPROF_NATIVE`` (default True).
        extra: ``WSPROF_EXTRA``, the targets, stripped, empty ones dropped.
        preset: ``WSPROF_PRESET``, lower case, one of :data:`wsprof.frameworks.NAMES`; None
            when unset, empty or not a framework (a warning: every framework's entry points
            are then waited for, as when unset).
        quiet: ``WSPROF_QUIET``.
        run: ``WSPROF_RUN``: this process was started by ``wsprof run``.
        pyspy: ``WSPROF_PYSPY``, the py-spy binary; None when unset or empty (``wsprof
            attach`` reads the variable through its ``--pyspy`` option's ``envvar``).
        allow_shared_out: ``WSPROF_ALLOW_SHARED_OUT``: a run folder another user owns or can
            write in is used anyway (default False: refused in one line).
        warnings: one line per variable whose value was replaced by its default.
        errors: (variable, one line) for a bad ``WSPROF_DISABLE`` / ``WSPROF_LAYERS``.
    """

    disable: bool = False
    layers: str = LAYERS[0]
    out: str | None = None
    keep_steps: int | None = None
    thinned_step_calls: int | None = None
    device_time: bool = False
    counters: bool = True
    probe_budget_fraction: float | None = None
    probe_interval_ms: int | None = None
    link_gbps: float | None = None
    ring_records: int | None = None
    native: bool = True
    extra: tuple[str, ...] = ()
    preset: str | None = None
    quiet: bool = False
    run: bool = False
    pyspy: str | None = None
    allow_shared_out: bool = False
    warnings: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()

    def error(self, name: str) -> str | None:
        """The one-line error of variable ``name`` (an ``ENV_*``), None when its value is
        good."""
        return next((msg for var, msg in self.errors if var == name), None)

    def raise_for(self, *names: str) -> None:
        """Raise the first error among the variables ``names``.

        Raises:
            ValueError: one line naming the variable, its value and the accepted values.
        """
        for name in names:
            msg = self.error(name)
            if msg is not None:
                raise ValueError(msg)


class _Reader:
    """Parses one environment, collecting warnings and errors."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.warnings: list[str] = []
        self.errors: list[tuple[str, str]] = []

    def raw(self, name: str) -> str:
        return str(self.env.get(name, "")).strip()

    def text(self, name: str) -> str | None:
        return self.raw(name) or None

    def flag_word(self, name: str) -> bool | None:
        """True/False for a flag spelling, None for an unset or empty value; raises
        ValueError (one line) for any other."""
        raw = self.raw(name)
        if not raw:
            return None
        word = raw.lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ValueError(
            f"{name}={raw!r} is not a yes/no flag; set it to one of "
            f"{', '.join(TRUE_WORDS + FALSE_WORDS)} or unset it"
        )

    def flag(self, name: str, default: bool) -> bool:
        """A flag that only tunes profiling: a bad value is a warning and ``default``."""
        try:
            value = self.flag_word(name)
        except ValueError as e:
            self.warnings.append(f"{e}; using {'yes' if default else 'no'}")
            return default
        return default if value is None else value

    def integer(self, name: str, minimum: int) -> int | None:
        """An integer >= ``minimum``; None when unset, empty or bad (a warning)."""
        raw = self.raw(name)
        if not raw:
            return None
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            self.warnings.append(
                f"ignoring {name}={raw!r}: not an integer >= {minimum}; using the default"
            )
            return None
        return value


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """Read every ``WSPROF_*`` variable into :class:`Settings`. Never raises, never prints.

    Args:
        environ: the environment; default ``os.environ``.

    Returns:
        The settings, with one line in ``warnings`` per value replaced by its default and one
        in ``errors`` per bad ``WSPROF_DISABLE`` / ``WSPROF_LAYERS``.
    """
    r = _Reader(os.environ if environ is None else environ)
    try:
        disable = bool(r.flag_word(ENV_DISABLE))
    except ValueError as e:
        disable = True  # the user asked something about disabling: not profiling
        r.errors.append((ENV_DISABLE, str(e)))
    layers = r.raw(ENV_LAYERS).lower() or LAYERS[0]
    if layers not in LAYERS:
        r.errors.append(
            (
                ENV_LAYERS,
                f"{ENV_LAYERS}={r.raw(ENV_LAYERS)!r} is not one of "
                f"{', '.join(LAYERS)}; set it to one of them or unset it",
            )
        )
        layers = LAYERS[0]
    fraction: float | None = None
    pct = r.raw(ENV_PROBE_BUDGET_PCT)
    if pct:
        try:
            fraction = float(pct) / 100
        except ValueError:
            fraction = None
        if fraction is None or not math.isfinite(fraction) or not 0 < fraction <= 1:
            fraction = None
            r.warnings.append(
                f"ignoring {ENV_PROBE_BUDGET_PCT}={pct!r}: not a percent in (0, 100]; "
                f"using {DEFAULT_PROBE_BUDGET_FRACTION * 100:g}"
            )
    link_gbps, link_error = stated_limit(r.raw(ENV_LINK_GBPS))
    if link_error is not None:
        r.warnings.append(
            f"ignoring {ENV_LINK_GBPS}={r.raw(ENV_LINK_GBPS)!r}: not {STATED_LIMIT_RULE}; "
            "using the limits read from the machine"
        )
    preset = r.text(ENV_PRESET)
    if preset is not None:
        from wsprof.frameworks import NAMES  # data only; imported when a preset is named

        if preset.lower() not in NAMES:
            r.warnings.append(
                f"{ENV_PRESET}={preset!r} is not one of {', '.join(NAMES)}; using every "
                "framework's entry points (the default)"
            )
            preset = None
        else:
            preset = preset.lower()
    ring = r.integer(ENV_RING_RECORDS, 1)
    if ring is None:
        ring = r.integer(ENV_MAX_PENDING, 1)
    return Settings(
        disable=disable,
        layers=layers,
        out=r.text(ENV_OUT),
        keep_steps=r.integer(ENV_KEEP_STEPS, 0),
        thinned_step_calls=r.integer(ENV_THINNED_STEP_CALLS, 1),
        device_time=r.flag(ENV_DEVICE_TIME, False),
        counters=r.flag(ENV_COUNTERS, True),
        probe_budget_fraction=fraction,
        probe_interval_ms=r.integer(ENV_PROBE_INTERVAL_MS, 1),
        link_gbps=link_gbps,
        ring_records=ring,
        native=r.flag(ENV_NATIVE, True),
        extra=tuple(t.strip() for t in r.raw(ENV_EXTRA).split(",") if t.strip()),
        preset=preset,
        quiet=r.flag(ENV_QUIET, False),
        run=r.flag(ENV_RUN, False),
        pyspy=r.text(ENV_PYSPY),
        allow_shared_out=r.flag(ENV_ALLOW_SHARED_OUT, False),
        warnings=tuple(r.warnings),
        errors=tuple(r.errors),
    )


def child_env(
    out: str, preset: str | None = None, allow_shared_out: bool = False
) -> dict[str, str]:
    """The variables ``wsprof run`` sets in its command's environment.

    Args:
        out: the run folder (absolute).
        preset: the framework preset, or None to leave ``WSPROF_PRESET`` as it is.
        allow_shared_out: the user allowed a shared run folder (``--allow-shared-out``):
            its processes may write their traces in it (:data:`ENV_ALLOW_SHARED_OUT`).

    Returns:
        ``{name: value}`` to merge into the child's environment.
    """
    env = {ENV_RUN: "1", ENV_OUT: out}
    if allow_shared_out:
        env[ENV_ALLOW_SHARED_OUT] = "1"
    if preset:
        env[ENV_PRESET] = preset
    return env
