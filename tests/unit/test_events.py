"""Event details have one definition (:mod:`wsprof.contracts.events`): capture writes
``Event.encode()``, :func:`~wsprof.contracts.events.parse_event` is its inverse, and the detail
strings traces already hold on disk still parse to the same typed events."""

from __future__ import annotations

import dataclasses
import json

import pytest

from wsprof.contracts import events as ev
from wsprof.contracts.events import (
    Event,
    EventKind,
    MemorySnapshot,
    Patched,
    PresetMarked,
    PresetMissing,
    ProbeTrouble,
    SamplerStarted,
    SamplerStopped,
    SamplerTargetExited,
    SamplerWindowFailed,
    SamplerWindowLost,
    ShareHolder,
    ShareSite,
    TargetExited,
    WrapperFound,
    parse_event,
)

#: At least one event of every typed event class, with every field set the way capture sets it.
EXAMPLES: list[Event] = [
    WrapperFound(
        api="dist.broadcast",
        qualname="push_weights.<locals>.wrapper",
        module="verl.utils",
        file="/site/verl/utils.py",
        line=12,
        wraps=("torch.distributed.distributed_c10d.broadcast",),
    ),
    WrapperFound(api="dist.all_reduce", qualname="<function f>", after_patch=True),
    WrapperFound(
        api="ProcessGroup",
        wrapper_kind="group_class",
        qualname="ReloadableGroup",
        module="fw.groups",
        wraps=("torch._C._distributed_c10d.ProcessGroup", "pybind11_builtins.pybind11_object"),
    ),
    WrapperFound.of("dist.x", {"qualname": "g", "line": 4, "wraps": ["a.b"]}, after_patch=True),
    Patched(layers="api", api_names=41, backend_methods=0, backend_class_methods=0),
    Patched(
        layers="both", api_names=41, backend_methods=19, backend_class_methods=3, functional_ops=8
    ),
    SamplerStarted(
        targets=(101, 202),
        rate_hz=100,
        window_s=5,
        every_s=7.5,
        blocking=True,
        native=False,
        pyspy_version="0.4.0",
    ),
    SamplerTargetExited(pid=4242),
    SamplerWindowLost(signal=9, pid=77),
    SamplerWindowFailed(reason="py-spy failed: Error: Failed to find python version"),
    SamplerStopped(reason="duration reached", samples=1200, windows=3, errors=0),
    SamplerStopped(reason="target exited; window failed: x", samples=12, windows=3, errors=1),
    SamplerStopped(reason="stopped by caller"),
    PresetMarked(preset="slime", phase="rollout", path="slime.ray.rollout:RolloutManager.g"),
    PresetMissing(
        preset="verl",
        what="a.b:C.f not found; the weight_sync phase is not marked (framework version?)",
    ),
    PresetMissing(what="preset 'nemo' is not one of slime, verl; no phases are marked"),
    ProbeTrouble(probe="nvml", message="NVMLError: Not Supported"),
    ProbeTrouble(
        kind=EventKind.PROBE_OFF, probe="cuda", message="off after 3 errors in a row (OSError: x)"
    ),
    MemorySnapshot(summary={"segments": 3, "reserved_bytes": 1 << 30, "reason": "growth: x"}),
    TargetExited(pid=9),
    ShareSite(
        side="export",
        api="_share_cuda_",
        device="cuda",
        nbytes=64 << 20,
        site="MultiprocessingSerializer.serialize (utils.py:12)",
        caller="_send_to_colocated_engine (update_weight_from_tensor.py:301)",
    ),
    ShareHolder(
        side="import",
        path="ModelRunner.kept[3]",
        nbytes=1 << 20,
        alive=12,
        alive_bytes=12 << 20,
        site="deserialize (utils.py:40)",
        search_ms=12.5,
    ),
]


def _typed_classes() -> set[type[Event]]:
    return {
        c
        for c in vars(ev).values()
        if isinstance(c, type) and issubclass(c, Event) and c is not Event
    }


def test_every_typed_event_has_an_example_and_its_own_encode_and_kind() -> None:
    assert {type(e) for e in EXAMPLES} == _typed_classes()
    for cls in _typed_classes():
        assert cls.encode is not Event.encode, cls
        assert isinstance(cls().kind, EventKind), cls


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: f"{type(e).__name__}")
def test_encode_then_parse_gives_the_same_event(event: Event) -> None:
    detail = event.encode()
    parsed = parse_event(123, str(event.kind), detail)
    assert parsed == dataclasses.replace(event, t_ns=123, detail=detail)
    assert type(parsed) is type(event)
    assert parsed.encode() == detail  # and back


#: Detail strings as wsprof wrote them before ``encode`` existed (the f-strings and JSON of
#: capture), with the typed event each must still parse to.
ON_DISK: list[tuple[str, str, Event]] = [
    (
        "sampler",
        "started: targets=[3101] rate_hz=100 window_s=5 every_s=5 blocking=True native=False "
        "py-spy 0.4.0",
        SamplerStarted(
            targets=(3101,),
            rate_hz=100,
            window_s=5,
            every_s=5.0,
            blocking=True,
            native=False,
            pyspy_version="0.4.0",
        ),
    ),
    ("sampler", "started: targets=[1] rate_hz=100", SamplerStarted(targets=(1,), rate_hz=100)),
    ("sampler", "target exited: pid 4242", SamplerTargetExited(pid=4242)),
    (
        "sampler",
        "py-spy killed by signal 9 while sampling pid 7; window lost",
        SamplerWindowLost(signal=9, pid=7),
    ),
    ("sampler", "window failed: ptrace denied", SamplerWindowFailed(reason="ptrace denied")),
    (
        "sampler",
        "stopped: duration reached; samples=10 windows=2 errors=0",
        SamplerStopped(reason="duration reached", samples=10, windows=2, errors=0),
    ),
    ("sampler", "stopped: duration reached", SamplerStopped(reason="duration reached")),
    (
        "wrapper",
        json.dumps(
            {
                "api": "dist.broadcast",
                "qualname": "w",
                "module": "m",
                "file": "/m.py",
                "line": 3,
                "wraps": ["a.b"],
            }
        ),
        WrapperFound(
            api="dist.broadcast", qualname="w", module="m", file="/m.py", line=3, wraps=("a.b",)
        ),
    ),
    (
        "wrapper",
        json.dumps({"api": "dist.broadcast", "after_patch": True, "qualname": "<function f>"}),
        WrapperFound(api="dist.broadcast", qualname="<function f>", after_patch=True),
    ),
    (
        "wrapper",
        json.dumps(
            {
                "api": "ProcessGroup",
                "kind": "group_class",
                "qualname": "G",
                "module": "fw",
                "file": None,
                "line": None,
                "wraps": ["x.Y"],
            }
        ),
        WrapperFound(
            api="ProcessGroup",
            wrapper_kind="group_class",
            qualname="G",
            module="fw",
            wraps=("x.Y",),
        ),
    ),
    (
        "patched",
        json.dumps(
            {
                "layers": "both",
                "api_names": 41,
                "backend_methods": 19,
                "backend_class_methods": 3,
                "functional_ops": 8,
            }
        ),
        Patched(
            layers="both",
            api_names=41,
            backend_methods=19,
            backend_class_methods=3,
            functional_ops=8,
        ),
    ),
    ("patched", "hooks", Patched()),
    (
        "preset",
        "slime: rollout marked on slime.ray.rollout:RolloutManager.g",
        PresetMarked(preset="slime", phase="rollout", path="slime.ray.rollout:RolloutManager.g"),
    ),
    (
        "preset_missing",
        "verl: a.b:C.f not found; the weight_sync phase is not marked (framework version?)",
        PresetMissing(
            preset="verl",
            what="a.b:C.f not found; the weight_sync phase is not marked (framework version?)",
        ),
    ),
    (
        "preset_missing",
        "WSPROF_PRESET='x' is not one of slime, verl; no phases are marked by a preset",
        PresetMissing(
            what="WSPROF_PRESET='x' is not one of slime, verl; no phases are marked by a preset"
        ),
    ),
    (
        "probe_error",
        "nvml: NVMLError: Not Supported",
        ProbeTrouble(probe="nvml", message="NVMLError: Not Supported"),
    ),
    (
        "probe_off",
        "nvml: off after 3 errors in a row (OSError: x)",
        ProbeTrouble(
            kind=EventKind.PROBE_OFF,
            probe="nvml",
            message="off after 3 errors in a row (OSError: x)",
        ),
    ),
    (
        "memory_snapshot",
        json.dumps({"segments": 2, "reason": "requested", "cost_ns": 5}),
        MemorySnapshot(summary={"segments": 2, "reason": "requested", "cost_ns": 5}),
    ),
    ("target_exited", "pid 9 exited", TargetExited(pid=9)),
]


@pytest.mark.parametrize(("kind", "detail", "expected"), ON_DISK, ids=lambda x: str(x)[:40])
def test_todays_on_disk_details_still_parse(kind: str, detail: str, expected: Event) -> None:
    assert parse_event(5, kind, detail) == dataclasses.replace(expected, t_ns=5, detail=detail)


def test_encode_writes_todays_text() -> None:
    """The text capture writes is the text it wrote before (old readers read new traces)."""
    for kind, detail, expected in ON_DISK:
        if kind in ("wrapper", "patched", "memory_snapshot"):  # JSON: same keys and values
            if isinstance(expected, Patched) and expected.api_names is None:
                continue  # a pre-JSON detail, never written again
            if not (isinstance(expected, WrapperFound) and expected.module is None):
                assert json.loads(expected.encode()) == json.loads(detail), detail
        elif isinstance(expected, SamplerStarted) and expected.window_s is None:
            continue  # a partial detail, never written
        else:
            assert expected.encode() == detail


def test_a_detail_that_does_not_parse_stays_raw() -> None:
    assert parse_event(1, "memory_snapshot", "not json") == Event(
        1, EventKind.MEMORY_SNAPSHOT, "not json"
    )
    assert parse_event(1, "mystery", "x") == Event(1, "mystery", "x")
    assert Event(1, "mystery", "x").encode() == "x"
