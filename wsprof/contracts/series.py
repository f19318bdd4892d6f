"""Per-step series and their names: the one place a series key is built or taken apart.

A trace's analysis names its series by constants (:data:`WEIGHT_SYNC_S`, :data:`STEP_S`, ...)
and by prefixed keys built here: ``median_us:<op>`` (:func:`op_median_key`) and
``counter:<name>`` (:func:`counter_key`); :func:`parse_series_key` takes any key apart. No
other module splits a key by hand. Importers make :class:`Series` with the unit of their
column. Pure; stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# re-exported: a counter's unit (wsprof.contracts.counters decides it)
from wsprof.contracts.counters import counter_unit as counter_unit
from wsprof.contracts.units import Unit

# ----------------------------------------------------------------------------- headline keys

#: Weight-sync time of each step (the rank's own, less waiting for peers), s.
WEIGHT_SYNC_S = "weight_sync_s"
#: Part of the weight sync spent waiting for the last rank to start it, s.
SYNC_WAIT_S = "sync_wait_s"
#: Step time, s.
STEP_S = "step_s"
#: Rollout time of each step, s.
ROLLOUT_S = "rollout_s"
#: Training time of each step, s.
TRAIN_S = "train_s"
#: rollout_s / step_s, a share.
ROLLOUT_SHARE = "rollout_share"
#: Time between the API name called and the backend, per step, s.
BETWEEN_LAYERS_S = "between_layers_s"
#: Collective calls per step, a count.
COLLECTIVE_CALLS = "collective_calls"
#: Time in weight-sync phases covered by no collective call, per step, s.
SYNC_GAP_S = "sync_gap_s"
#: Bytes the weight sync moved per step (NCCL tests' sizes, :mod:`wsprof.analysis.wire`).
SYNC_BYTES = "weight_sync_bytes"
#: Time the weight sync spent in transfers of known size per step, s.
SYNC_WIRE_S = "weight_sync_wire_s"
#: The weight sync's bus bandwidth per step (NCCL tests' busbw), bytes/s.
SYNC_BUSBW = "weight_sync_busbw"
#: The weight sync's algorithm bandwidth per step (bytes over wire time), bytes/s.
SYNC_ALGBW = "weight_sync_algbw"
#: The parts of a framework's own weight sync, per step, s (slime's communication timeline,
#: :mod:`wsprof.importers.slime_timeline`): producing the buckets (``weight_convert``), sending
#: them (``weight_bucket_send``), waiting for the engines to load them (``engine_load_weights``),
#: and the sync's time in none of those.
SYNC_CONVERT_S = "weight_sync_convert_s"
SYNC_SEND_S = "weight_sync_send_s"
SYNC_LOAD_S = "weight_sync_engine_load_s"
SYNC_REST_S = "weight_sync_rest_s"
#: The parts above, with the name a reader is shown (``send``), in the sync's order.
SYNC_PARTS = (
    (SYNC_CONVERT_S, "convert"),
    (SYNC_SEND_S, "send"),
    (SYNC_LOAD_S, "engine load"),
    (SYNC_REST_S, "the rest of the sync"),
)
#: Prefix of one bucket's send time per step, s (``bucket_send_s:3``).
BUCKET_SEND_PREFIX = "bucket_send_s:"
#: Prefixes of what the recorded collectives inside one bucket's send do per step (a run
#: joined with the timeline): their count, and their time between the API name and the
#: backend, s.
BUCKET_CALLS_PREFIX = "bucket_calls:"
BUCKET_BETWEEN_PREFIX = "bucket_between_s:"


def is_sync_part(key: str) -> bool:
    """Whether ``key`` is a part of the weight sync (:data:`SYNC_PARTS`, a bucket's send): it
    is judged with the sync it is part of (:mod:`wsprof.analysis.rules.timeline`), never as a
    slowdown of its own."""
    return key.startswith((BUCKET_SEND_PREFIX, BUCKET_CALLS_PREFIX, BUCKET_BETWEEN_PREFIX)) or (
        key in {name for name, _ in SYNC_PARTS}
    )


#: Weight syncs that failed at a step (a count; ``weight_sync_failed:<error type>``).
SYNC_FAILED = "weight_sync_failed"
#: Time of a step outside the trainer's own spans (training, weight sync), s: rollout and
#: waiting, when the framework's timeline has no rollout span to say which.
OUTSIDE_TRAINER_S = "outside_trainer_s"
#: Weight-sync share of each sampling window's active samples (no steps: ``wsprof attach``).
WINDOW_WEIGHT_SYNC_SHARE = "window_weight_sync_share"
#: Rollout share of each sampling window's active samples.
WINDOW_ROLLOUT_SHARE = "window_rollout_share"

#: Prefix of an op's median per-call host latency per step, µs (``median_us:broadcast``).
OP_MEDIAN_PREFIX = "median_us:"
#: Prefix of a counter's value at each step's end (``counter:proc.rss_bytes``).
COUNTER_PREFIX = "counter:"


class KeyFamily(Enum):
    """What a series key names: a plain series, an op's median latency, or a counter."""

    PLAIN = "plain"
    OP_MEDIAN = "op_median"
    COUNTER = "counter"


@dataclass(frozen=True)
class SeriesKey:
    """A series key taken apart: ``family`` and the name after the prefix (the whole key for
    :attr:`KeyFamily.PLAIN`)."""

    family: KeyFamily
    name: str


def op_median_key(op: str) -> str:
    """The key of op ``op``'s median per-call latency per step (µs): ``median_us:<op>``."""
    return OP_MEDIAN_PREFIX + op


def counter_key(counter: str) -> str:
    """The key of counter ``counter``'s value at each step's end: ``counter:<name>``."""
    return COUNTER_PREFIX + counter


def parse_series_key(key: str) -> SeriesKey:
    """A key taken apart (the inverse of :func:`op_median_key` and :func:`counter_key`).

    Args:
        key: a series name.

    Returns:
        Its family and the name after the prefix; any other key is :attr:`KeyFamily.PLAIN`
        with the whole key.
    """
    if key.startswith(OP_MEDIAN_PREFIX):
        return SeriesKey(KeyFamily.OP_MEDIAN, key[len(OP_MEDIAN_PREFIX) :])
    if key.startswith(COUNTER_PREFIX):
        return SeriesKey(KeyFamily.COUNTER, key[len(COUNTER_PREFIX) :])
    return SeriesKey(KeyFamily.PLAIN, key)


def counter_of(key: str) -> str | None:
    """The counter a ``counter:<name>`` key names, else None."""
    k = parse_series_key(key)
    return k.name if k.family is KeyFamily.COUNTER else None


def op_of(key: str) -> str | None:
    """The op a ``median_us:<op>`` key names, else None."""
    k = parse_series_key(key)
    return k.name if k.family is KeyFamily.OP_MEDIAN else None


def implied_unit(key: str) -> Unit | None:
    """The unit a key itself implies, for an imported column without a unit suffix: a share
    for :data:`ROLLOUT_SHARE`, the counter's unit for ``counter:<name>`` (an exported trace's
    columns); None when the key implies nothing."""
    if key == ROLLOUT_SHARE:
        return Unit.SHARE
    counter = counter_of(key)
    if counter is not None and counter_unit(counter) is not Unit.OTHER:
        return counter_unit(counter)
    return None


# ----------------------------------------------------------------------------- the series


class SeriesKind(str, Enum):
    """What a per-step series measures (judged by :func:`wsprof.analysis.kinds.series_kind`).

    Only the first three (duration, bytes, resource count) can accumulate and get findings.
    The values are the text of JSON output (``"kind": "resource_count"``).
    """

    DURATION = "duration"
    BYTES = "bytes"
    RESOURCE = "resource_count"
    COUNTER = "monotonic_counter"
    QUALITY = "quality"
    LR_SCHEDULE = "lr_schedule"
    RATE = "rate"
    OTHER = "other"

    def __str__(self) -> str:
        """Its text (``duration``) wherever it is formatted, as in JSON."""
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass(frozen=True)
class Series:
    """A per-step series: ``values[i]`` was measured at step ``steps[i]``, in ``unit``.

    Attributes:
        name: its key (a constant or built key of this module, a CSV column, a log metric).
        unit: what the values measure; :attr:`Unit.OTHER` with ``unit_text`` for a unit wsprof
            does not interpret (an imported ``tokens/s`` or ``GiB`` column).
        steps: step numbers.
        values: one value per step, in ``unit``.
        config: (optional, same length) the configuration each step ran with; a change of
            config splits the series before fitting.
        kind: what it measures (a :class:`SeriesKind`); None until
            :func:`wsprof.analysis.kinds.series_kind` judged it (or an importer that knows gave
            it).
        unit_text: the free unit text of a :attr:`Unit.OTHER` series (``""`` when unknown);
            empty for every other unit.
    """

    name: str
    unit: Unit
    steps: tuple[int, ...]
    values: tuple[float, ...]
    config: tuple[str, ...] | None = None
    kind: SeriesKind | None = None
    unit_text: str = ""

    @property
    def unit_label(self) -> str:
        """The unit as text (``s``, ``bytes``, ``share``, an imported ``GiB``; ``""`` unknown)."""
        return self.unit.label(self.unit_text)

    def fmt(self, x: float | None) -> str:
        """A value of this series (a level, a projection) in its unit: ``1.5 GiB``."""
        return self.unit.fmt(x, self.unit_text)

    def fmt_slope(self, x: float | None, per: str = "step") -> str:
        """A change of this series per ``per`` in its unit: ``+1.2 MiB/step``."""
        return self.unit.fmt_slope(x, self.unit_text, per)


def unit_from_text(text: str) -> tuple[Unit, str]:
    """A unit text as ``(unit, unit_text)`` for :class:`Series`: the text kept only for
    :attr:`Unit.OTHER` (``"GiB"`` -> ``(OTHER, "GiB")``, ``"s"`` -> ``(SECONDS, "")``)."""
    unit = Unit.parse(text)
    return unit, (text if unit is Unit.OTHER else "")


def imported_series(
    name: str,
    unit_text: str,
    steps: tuple[int, ...],
    values: tuple[float, ...],
    config: tuple[str, ...] | None = None,
) -> Series:
    """A series of an importer whose unit is a text (a column suffix, a log key).

    Args:
        name: the series name.
        unit_text: the importer's unit (``s``, ``GiB``, ``%``, ``""``).
        steps: step numbers.
        values: one value per step.
        config: the configuration of each step, or None.

    Returns:
        The series, with ``unit`` parsed from the text (kept as ``unit_text`` when OTHER); with
        no unit text, the unit its name implies (:func:`implied_unit`).
    """
    unit, text = unit_from_text(unit_text)
    if unit is Unit.OTHER and not text:
        unit = implied_unit(name) or unit
    return Series(name, unit, steps, values, config=config, unit_text=text)
