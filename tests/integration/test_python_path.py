"""The pure-Python recording path (no compiler at install, or ``WSPROF_NATIVE=0``) passes the
same hook tests as the compiled one: the test files below run again, in a fresh interpreter
with ``WSPROF_NATIVE=0`` (the choice is made once per process). Skipped where the compiled path
was not built: then the whole suite already ran on the Python path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

from wsprof.capture import buffer

#: The hook behaviour both paths must share: names and layers, every collective shape,
#: errors and async handles, functional collectives, killed processes, asyncio phases.
FILES = (
    "tests/integration/test_hooks_gloo.py",
    "tests/integration/test_hook_cases.py",
    "tests/integration/test_coverage_paths.py",
    "tests/integration/test_killed_for_real.py",
    "tests/integration/test_asyncio_phases.py",
    "tests/integration/test_inprocess.py",
    "tests/unit/test_capture_buffer.py",
)


@pytest.mark.skipif(
    buffer.compiled_module() is None,
    reason="the compiled path is not built: the suite ran on the Python path",
)
def test_the_python_path_passes_the_hook_tests() -> None:
    env = {**os.environ, "WSPROF_NATIVE": "0"}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from wsprof.capture import buffer, settings; "
            "print(buffer.native_module(settings.read()) is None)",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert probe.stdout.strip() == "True", probe.stderr
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *FILES],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1200,
    )
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail
