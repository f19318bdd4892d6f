"""The framework registry (:mod:`wsprof.frameworks`): one entry per framework, read by presets,
sampled phases and the log importer, printed by ``wsprof frameworks``; a leaf data layer."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from wsprof import frameworks
from wsprof.analysis import phases
from wsprof.cli import main
from wsprof.contracts.phases import CANONICAL_PHASES
from wsprof.frameworks import EntryPoint, LineShape
from wsprof.importers import logs

PACKAGE = Path(frameworks.__file__).parent


def test_names_lookup_and_module_detection() -> None:
    assert frameworks.NAMES == ("slime", "verl", "openrlhf", "areal", "trl")
    assert frameworks.get("OpenRLHF").title == "OpenRLHF"
    with pytest.raises(KeyError, match="one of slime, verl"):
        frameworks.get("nemo")
    assert frameworks.find("nemo") is None and frameworks.find(None) is None
    assert frameworks.for_module("verl.workers.fsdp_workers") is frameworks.get("verl")
    assert frameworks.for_module("realhf.base") is frameworks.get("areal")
    assert frameworks.for_module("verlx") is None
    assert [f.name for f in frameworks.detect(["torch", "trl.trainer", "slime"])] == [
        "slime",
        "trl",
    ]


def test_every_entry_is_well_formed() -> None:
    for fw in frameworks.FRAMEWORKS:
        assert fw.name == fw.name.lower() and fw.modules
        assert {e.phase for e in fw.entry_points} <= set(CANONICAL_PHASES)
        for entry in fw.entry_points:
            for path in entry.paths:
                module, qualname = frameworks.split_path(path)
                assert module.split(".")[0] in fw.modules, path
                assert re.fullmatch(r"[\w.]+", qualname), path
        for pattern in fw.phase_patterns:
            assert pattern.phase in CANONICAL_PHASES
            re.compile(pattern.regex)
        if fw.log_format is not None:
            assert "{step}" in fw.log_format.step_line
            assert ("(?P<body>" in fw.log_format.step_line) is (
                fw.log_format.shape is not LineShape.TABLE
            )
    with pytest.raises(ValueError, match="not canonical"):
        EntryPoint("sync", ("a:b",))
    with pytest.raises(ValueError, match="module:qualname"):
        EntryPoint("rollout", ("a.b",))


def test_openrlhf_rollout_keeps_both_release_paths() -> None:
    rollout = frameworks.get("openrlhf").entry_point("rollout")
    assert rollout is not None and rollout.paths == (
        "openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator.generate_samples",
        "openrlhf.trainer.ppo_utils.experience_maker:SamplesGenerator.generate_samples",
    )


def test_readers_take_the_registry() -> None:
    assert {f.name: f.patterns() for f in frameworks.FRAMEWORKS} == phases.BUILTIN_PATTERNS
    assert frameworks.engine_patterns() == phases.GENERIC_PATTERNS
    assert phases.FRAMEWORK_MODULES["areal"] == ("areal", "realhf")
    assert [f.name for f in logs.FORMATS] == ["slime", "verl", "OpenRLHF", "AReaL"]
    assert logs.SERIES_KEYS["weight_sync_s"] == (
        "weight_sync_s",
        "perf/update_weights_time",
        "timing_s/update_weights",
        "timing_s/sync_rollout_weights",
        "timing_s/reshard",
        "timing/broadcast",
        "timeperf/update_weights",
    )
    assert logs.SHIFTED_KEYS == {"perf/update_weights_time": 1}
    assert frameworks.timer_prefixes() == ("timing_s/", "timing/", "timeperf/")
    assert frozenset({"perf/time_per_step"}) == logs.STEP_TIME_KEYS
    assert frameworks.is_timer_key("perf/update_weights_time")
    assert not frameworks.is_timer_key("perf/throughput")


def test_key_knowledge_is_the_registry_s() -> None:
    """Quality namespaces and per-token times are framework data, read by analysis."""
    from wsprof.analysis.kinds import SeriesKind, kind_by_name

    verl = frameworks.get("verl")
    assert frameworks.quality_namespace("actor/pg_loss") == (verl, "actor/")
    assert frameworks.quality_namespace("timing_s/gen") is None
    assert frameworks.per_token_prefix("timing_per_token_ms/gen") == (verl, "timing_per_token_ms/")
    got = kind_by_name("critic/vf_loss")
    assert got is not None and got.kind is SeriesKind.QUALITY
    assert "verl's critic/ namespace" in got.reason
    got = kind_by_name("timing_per_token_ms/gen")
    assert got is not None and got.kind is SeriesKind.RATE and "verl" in got.reason
    assert logs.metric_unit("timing_per_token_ms/gen") == "ms"
    assert logs.metric_unit("timeperf/rollout") == "s"
    assert [e.name for e in frameworks.ENGINES] == [
        "sglang",
        "vllm",
        "torch",
        "deepspeed",
        "accelerate",
        "megatron",
    ]


def test_the_registry_imports_only_the_standard_library_and_contracts() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                ok = (
                    top in sys.stdlib_module_names
                    or name == "__future__"
                    or name.startswith(("wsprof.contracts", "wsprof.frameworks"))
                )
                assert ok, f"{path.name} imports {name}"


def test_cli_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frameworks"]) == 0
    out = capsys.readouterr().out
    for fw in frameworks.FRAMEWORKS:
        assert f"{fw.title} ({fw.name})" in out
    assert "slime (slime): modules slime; not on PyPI" in out
    assert (
        "rollout      openrlhf.trainer.ppo_utils.samples_generator:SamplesGenerator."
        "generate_samples\n"
    ) in out
    assert "or openrlhf.trainer.ppo_utils.experience_maker:SamplesGenerator" in out
    assert "timing/broadcast -> weight_sync_s" in out
    assert "perf/update_weights_time -> weight_sync_s (logged 1 step late)" in out


def test_cli_json_one_framework(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frameworks", "--format", "json", "verl"]) == 0
    [verl] = json.loads(capsys.readouterr().out)["frameworks"]
    assert verl["name"] == "verl" and verl["distribution"] == "verl"
    assert {
        "phase": "weight_sync",
        "paths": ["verl.checkpoint_engine.base:CheckpointEngineManager.update_weights"],
        "note": "verl logs timing_s/update_weights",
    } in verl["entry_points"]
    assert {"key": "timing_s/gen", "series": "rollout_s", "shift_steps": 0, "note": ""} in verl[
        "log_keys"
    ]
    assert verl["log_format"]["example"].startswith("step:N - ")
    regexes = [p["regex"] for p in verl["phase_patterns"]]
    assert (
        regexes
        == frameworks.get("verl").patterns()["weight_sync"]
        + frameworks.get("verl").patterns()["rollout"]
        + frameworks.get("verl").patterns()["train"]
    )
    assert any(p["legacy"] for p in verl["phase_patterns"])


def test_cli_json_all_and_bad_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frameworks", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in doc["frameworks"]] == list(frameworks.NAMES)
    assert doc["frameworks"][-1]["log_format"] is None  # TRL writes no step line of its own
    assert main(["frameworks", "nemo"]) == 2
    assert "wsprof: error:" in capsys.readouterr().err
