"""Shared fixtures: guard global state, locate the repo and the shared cases."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


def _collective_state() -> dict[str, object]:
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return {}
    from wsprof.contracts import ops

    state: dict[str, object] = {}
    for name in ops.API_OPS:
        state[f"dist.{name}"] = dist.__dict__.get(name)
    for name in ops.BACKEND_OPS:
        state[f"pg.{name}"] = dist.ProcessGroup.__dict__.get(name)
    return state


@pytest.fixture(autouse=True)
def collectives_untouched() -> Iterator[None]:
    """Every collective is the original before and after each test (no leaked patch)."""
    before = _collective_state()
    yield
    after = _collective_state()
    changed = [k for k in before if before[k] is not after.get(k)]
    assert not changed, f"test left collectives patched: {changed[:5]}"
    imports = sys.modules.get("wsprof.capture.imports")
    if imports is not None:
        left = [f for f in sys.meta_path if isinstance(f, imports.PostImportFinder)]
        assert not left, "test left wsprof's post-import finder on sys.meta_path"


#: What the pure tier (``pytest -m pure``) must not import: it runs the analysis in seconds.
#: (``import wsprof`` loads the capture session, which imports none of these.)
HEAVY_MODULES = ("torch", "psutil", "matplotlib", "wsprof.demo.run")
#: The test modules of the selected pure tests (collection imports every test module, pure
#: or not, so what a pure run's own process holds proves nothing).
_PURE_MODULES: set[str] = set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr", "") == "pure":
        _PURE_MODULES.update(str(item.path) for item in items if item.get_closest_marker("pure"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a ``-m pure`` run whose test modules import a heavy module (a pure test that grew
    a dependency belongs in the unit tier, or the import should move out of its way): the
    modules of the pure tests are imported in a fresh interpreter, which must not load any of
    :data:`HEAVY_MODULES`."""
    if session.config.getoption("markexpr", "") != "pure" or not _PURE_MODULES:
        return
    import json
    import subprocess
    from pathlib import Path

    tests = Path(__file__).parent
    probe = (
        "import importlib.util, json, sys\n"
        f"sys.path[:0] = [{str(tests)!r}, {str(tests / 'unit')!r}]\n"
        "for i, path in enumerate(json.loads(sys.argv[1])):\n"
        "    spec = importlib.util.spec_from_file_location(f'pure_{i}', path)\n"
        "    mod = importlib.util.module_from_spec(spec)\n"
        "    sys.modules[spec.name] = mod\n"
        "    spec.loader.exec_module(mod)\n"
        f"print(json.dumps([m for m in {HEAVY_MODULES!r} if m in sys.modules]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(sorted(_PURE_MODULES))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = res.stdout.strip().splitlines()
    heavy = json.loads(lines[-1]) if res.returncode == 0 and lines else None
    if heavy is None or heavy:
        why = ", ".join(heavy) if heavy else f"the import check failed: {res.stderr[-500:]}"
        sys.stderr.write(f"\nthe pure tier imported {why}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
