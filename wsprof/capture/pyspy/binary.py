"""Finding py-spy and checking its version (:func:`find_pyspy`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

from wsprof.errors import InputError

#: Oldest py-spy whose ``record --format raw --nonblocking`` output this package understands.
MIN_PYSPY_VERSION = (0, 3, 14)
#: What to run when py-spy is missing or too old.
PYSPY_INSTALL_HINT = "pip install py-spy"
PYSPY_EXE = "py-spy.exe" if os.name == "nt" else "py-spy"
#: Seconds allowed for ``py-spy --version``.
VERSION_TIMEOUT_S = 10.0

_VERSION_RE = re.compile(r"py-spy (\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class PySpyBinary:
    """A py-spy executable and its version."""

    path: str
    version: tuple[int, int, int]

    @property
    def version_str(self) -> str:
        """``major.minor.patch``."""
        return ".".join(str(v) for v in self.version)


def _script_dirs() -> list[str]:
    dirs = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    return [d for i, d in enumerate(dirs) if d and d not in dirs[:i]]


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_pyspy(path: str | None = None) -> PySpyBinary:
    """Find py-spy and check its version.

    Args:
        path: an explicit py-spy binary; default: the one installed with the ``py-spy`` Python
            package (this interpreter's scripts folder), else ``py-spy`` on ``PATH``.

    Returns:
        The binary and its version.

    Raises:
        InputError: not found, not runnable, not py-spy, or older than
            :data:`MIN_PYSPY_VERSION`.
    """
    if path is not None:
        if not _is_executable(path):
            raise InputError(
                f"py-spy not found at {path} (no such executable); install it with "
                f"`{PYSPY_INSTALL_HINT}` or give the path of a py-spy binary"
            )
        chosen = path
    else:
        candidates = [os.path.join(d, PYSPY_EXE) for d in _script_dirs()]
        on_path = shutil.which("py-spy")
        if on_path:
            candidates.append(on_path)
        found = [c for c in candidates if _is_executable(c)]
        if not found:
            raise InputError(
                f"py-spy not found (looked in {', '.join(_script_dirs())} and PATH); install it "
                f"with `{PYSPY_INSTALL_HINT}`"
            )
        chosen = found[0]
    version = _pyspy_version(chosen)
    if version < MIN_PYSPY_VERSION:
        minimum = ".".join(str(v) for v in MIN_PYSPY_VERSION)
        have = ".".join(str(v) for v in version)
        raise InputError(
            f"{chosen} is py-spy {have}, wsprof needs {minimum} or newer; upgrade with "
            f"`{PYSPY_INSTALL_HINT} --upgrade`"
        )
    return PySpyBinary(chosen, version)


def _pyspy_version(path: str) -> tuple[int, int, int]:
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(
            f"cannot run {path} --version ({e}); reinstall with `{PYSPY_INSTALL_HINT}`"
        ) from e
    m = _VERSION_RE.search(done.stdout)
    if m is None:
        said = (done.stdout or done.stderr).strip().splitlines()[:1]
        raise InputError(
            f"{path} is not py-spy (--version printed {said[0] if said else 'nothing'!r}); "
            f"install it with `{PYSPY_INSTALL_HINT}`"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))
