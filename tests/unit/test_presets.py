"""Framework presets (:mod:`wsprof.capture.presets`) on throw-away modules: entry points with
alternative paths (the first found is wrapped, ``preset_missing`` once none is left), Ray actor
classes (wrapped on the class Ray keeps), and the registry's OpenRLHF rollout paths."""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from wsprof import frameworks
from wsprof.capture import presets
from wsprof.capture.markers import current_phase
from wsprof.frameworks import EntryPoint


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Presets with empty state; yields the events they record (no recorder: early events)."""
    events: list[tuple[str, str]] = []
    monkeypatch.setattr(presets, "_pending", {})
    monkeypatch.setattr(presets, "_waiting", {})
    monkeypatch.setattr(presets, "_finder", None)
    monkeypatch.setattr(presets, "_early", events)
    monkeypatch.setattr(presets, "wrapped", [])
    try:
        yield events
    finally:
        finder = presets._finder
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)


def _module(name: str, source: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(textwrap.dedent(source), mod.__dict__)
    sys.modules[name] = mod
    return mod


def _phase_in(fn: object) -> str | None:
    assert callable(fn)
    return fn()  # type: ignore[no-any-return]


SOURCE = """
from wsprof.capture.markers import current_phase

class Gen:
    def generate(self):
        return current_phase()
"""


def test_first_path_found_is_wrapped_and_no_missing_event(
    fresh: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _module("wsprof_fake_old", "class Other:\n    pass\n")
    new = _module("wsprof_fake_new", SOURCE)
    monkeypatch.setattr(
        presets,
        "PRESETS",
        {
            "fake": (
                EntryPoint(
                    "rollout", ("wsprof_fake_new:Gen.generate", "wsprof_fake_old:Gen.generate")
                ),
            )
        },
    )
    try:
        assert presets.install("fake") == ["wsprof_fake_new:Gen.generate"]
        assert new.Gen().generate() == "rollout"
        assert current_phase() is None
        assert fresh == [("preset", "fake: rollout marked on wsprof_fake_new:Gen.generate")]
        assert not hasattr(old, "Gen")
    finally:
        del sys.modules["wsprof_fake_old"], sys.modules["wsprof_fake_new"]


def test_missing_is_recorded_once_every_path_is_missing(
    fresh: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _module("wsprof_fake_a", "x = 1\n")
    _module("wsprof_fake_b", "class Gen:\n    pass\n")
    monkeypatch.setattr(
        presets,
        "PRESETS",
        {
            "fake": (
                EntryPoint("weight_sync", ("wsprof_fake_a:Gen.sync", "wsprof_fake_b:Gen.sync")),
            )
        },
    )
    try:
        assert presets.install("fake") == []
        assert fresh == [
            (
                "preset_missing",
                "fake: wsprof_fake_a:Gen.sync not found, "
                "wsprof_fake_b:Gen.sync not found; the weight_sync phase is not "
                "marked (framework version?)",
            )
        ]
    finally:
        del sys.modules["wsprof_fake_a"], sys.modules["wsprof_fake_b"]


def test_a_later_import_supplies_the_path_the_first_module_lacked(
    fresh: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """OpenRLHF >= 0.9.9: experience_maker (imported first) has no SamplesGenerator any more,
    samples_generator (imported later, through the post-import hook) has it."""
    (tmp_path / "wsprof_fake_later.py").write_text(SOURCE)
    _module("wsprof_fake_first", "x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        presets,
        "PRESETS",
        {
            "fake": (
                EntryPoint(
                    "rollout", ("wsprof_fake_later:Gen.generate", "wsprof_fake_first:Gen.generate")
                ),
            )
        },
    )
    try:
        presets.install("fake")
        assert fresh == []  # one path is still to come: nothing missing yet
        import wsprof_fake_later  # type: ignore[import-not-found]

        assert wsprof_fake_later.Gen().generate() == "rollout"
        assert [k for k, _ in fresh] == ["preset"]
    finally:
        sys.modules.pop("wsprof_fake_later", None)
        del sys.modules["wsprof_fake_first"]


def test_a_single_path_keeps_its_message(
    fresh: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _module("wsprof_fake_one", "class CheckpointEngineManager:\n    pass\n")
    monkeypatch.setattr(
        presets,
        "PRESETS",
        {
            "verl": (
                EntryPoint(
                    "weight_sync", ("wsprof_fake_one:CheckpointEngineManager.update_weights",)
                ),
            )
        },
    )
    try:
        presets.install("verl")
        [(kind, detail)] = fresh
        assert kind == "preset_missing"
        assert detail.startswith(
            "verl: wsprof_fake_one:CheckpointEngineManager.update_weights "
            "not found; the weight_sync phase"
        )
    finally:
        del sys.modules["wsprof_fake_one"]


def test_a_ray_actor_class_is_wrapped_on_the_class_ray_runs(
    fresh: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``@ray.remote class RolloutManager`` (slime; OpenRLHF's PolicyModelActor): the module
    attribute is Ray's ActorClass handle; the actor's methods come from the original class."""
    ray = pytest.importorskip("ray")
    mod = _module("wsprof_fake_ray", SOURCE)
    mod.Gen = ray.remote(mod.Gen)  # as the decorator leaves it
    monkeypatch.setattr(
        presets, "PRESETS", {"fake": (EntryPoint("rollout", ("wsprof_fake_ray:Gen.generate",)),)}
    )
    try:
        assert presets.install("fake") == ["wsprof_fake_ray:Gen.generate"]
        actor_cls = mod.Gen.__ray_metadata__.modified_class  # what a Ray worker instantiates
        assert getattr(actor_cls.generate, presets.MARK) == "rollout"
        assert _phase_in(actor_cls().generate) == "rollout"
    finally:
        del sys.modules["wsprof_fake_ray"]


def test_presets_are_the_registry_and_openrlhf_rollout_has_both_paths() -> None:
    assert list(presets.PRESETS) == list(frameworks.NAMES)
    [rollout] = [e for e in presets.PRESETS["openrlhf"] if e.phase == "rollout"]
    assert rollout.paths == (
        "openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator.generate_samples",
        "openrlhf.trainer.ppo_utils.experience_maker:SamplesGenerator.generate_samples",
    )


def test_trl_generation_without_vllm_is_rollout(
    fresh: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRL's ``GRPOTrainer._generate_single_turn`` (the stand-in has TRL 1.16.0's signature)
    generates with or without vLLM: the model's ``generate`` runs in ``rollout``."""
    standins = Path(__file__).resolve().parents[1] / "standins" / "presets"
    monkeypatch.syspath_prepend(str(standins))
    for name in [m for m in sys.modules if m == "trl" or m.startswith("trl.")]:
        monkeypatch.delitem(sys.modules, name)
    from trl.trainer import grpo_trainer  # the stand-in

    original = grpo_trainer.GRPOTrainer._generate_single_turn
    try:
        presets.install("trl")
        assert "trl.trainer.grpo_trainer:GRPOTrainer._generate_single_turn" in presets.wrapped

        class Model:
            def generate(self, prompt_ids: object) -> str | None:
                return current_phase()

        trainer = grpo_trainer.GRPOTrainer(Model())
        completion_ids, _ = trainer._generate_single_turn(
            [[1, 2]], None, {}, num_generations=2, has_tool_images=False
        )
        assert completion_ids == "rollout"
        assert current_phase() is None
        assert (
            "preset",
            "trl: rollout marked on trl.trainer.grpo_trainer:GRPOTrainer._generate_single_turn",
        ) in fresh
    finally:
        grpo_trainer.GRPOTrainer._generate_single_turn = original  # type: ignore[method-assign]
