"""``scripts/check_frameworks.py``'s checks on a tiny source tree (no download): an entry point
passes by any of its paths (inherited methods too), a pattern must match a function unless it
is legacy, and each problem is one line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import REPO

from wsprof.frameworks import EntryPoint, Framework, PhasePattern


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_frameworks", REPO / "scripts" / "check_frameworks.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["check_frameworks"] = mod
    spec.loader.exec_module(mod)
    return mod


def _tree(root: Path) -> None:
    pkg = root / "fakefw"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "base.py").write_text(
        "class Base:\n    def sync(self):\n        def inner():\n            pass\n"
    )
    (pkg / "sub" / "gen.py").write_text(
        "import ray\nfrom fakefw.sub.base import Base\n\n\n@ray.remote\nclass Actor(Base):\n"
        "    async def generate(self):\n        pass\n"
    )


def test_checks_on_a_fake_release(tmp_path: Path) -> None:
    check = _script()
    _tree(tmp_path)
    fw = Framework(
        name="fakefw",
        title="FakeFW",
        modules=("fakefw",),
        distribution=None,
        repository="x/y",
        entry_points=(
            EntryPoint("weight_sync", ("fakefw.sub.gen:Actor.sync",)),  # inherited
            EntryPoint(
                "rollout", ("fakefw.sub.new:Actor.generate", "fakefw.sub.gen:Actor.generate")
            ),
            EntryPoint("train", ("fakefw.sub.gen:Actor.train", "fakefw.gone:Trainer.train")),
        ),
        phase_patterns=(
            PhasePattern("weight_sync", r"inner", r"sub/base\.py"),  # a nested function
            PhasePattern("rollout", r"Actor\.generate"),
            PhasePattern("train", r"fit_\w+", note="gone"),
            PhasePattern("train", r"old_fit", legacy=True),
        ),
    )
    res = check.check_release(fw, check.Release(tmp_path, fw.modules), "fakefw 1.0")
    text = "\n".join(res.lines)
    assert (
        "ok  entry point weight_sync: fakefw.sub.gen:Actor.sync: found, inherited from "
        "fakefw.sub.base:Base" in text
    )
    assert "a Ray actor class" in text
    assert (
        "--  entry point rollout: fakefw.sub.new:Actor.generate: no module fakefw.sub.new" in text
    )
    assert "ok  entry point rollout passes by fakefw.sub.gen:Actor.generate" in text
    assert "older releases only (legacy)" in text
    assert res.problems == [
        "PROBLEM fakefw 1.0: entry point train (fakefw.sub.gen:Actor.train | fakefw.gone:"
        "Trainer.train) exists at none of its paths",
        "PROBLEM fakefw 1.0: pattern train `fit_\\w+` matches no function of the release (gone)",
    ]


def test_a_bad_source_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    check = _script()
    with pytest.raises(SystemExit) as e:
        check.main(["--source", "nemo=/nowhere"])
    assert e.value.code == 2
    assert "NAME one of slime, verl" in capsys.readouterr().err
