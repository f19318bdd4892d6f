"""``__version__`` lives in ``wsprof/_version.py``: the package, the CLI and the build read it
from there."""

from __future__ import annotations

from pathlib import Path

import pytest

import wsprof
from wsprof import _version

REPO = Path(__file__).resolve().parents[2]


def test_package_re_exports_the_version_module() -> None:
    assert wsprof.__version__ is _version.__version__


def test_pyproject_reads_the_version_from_its_module() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in project["project"]["dynamic"]
    assert "version" not in project["project"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "wsprof._version.__version__"}
