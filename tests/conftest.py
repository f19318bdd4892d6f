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
HEAVY_MODULES = ("torch", "psutil", "matplotlib", "wsprof.demo.run", "wsprof.capture.session")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a ``-m pure`` run that imported a heavy module (a pure test that grew a
    dependency belongs in the unit tier, or the import should move out of its way)."""
    if session.config.getoption("markexpr", "") != "pure":
        return
    heavy = [m for m in HEAVY_MODULES if m in sys.modules]
    if heavy:
        sys.stderr.write(f"\nthe pure tier imported {', '.join(heavy)}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
