"""wsprof's version, in one place: the package, the trace metadata, the reports, the CLI and
the build (``pyproject.toml``: ``dynamic = ["version"]``, read from here by setuptools) all
take it from here."""

from __future__ import annotations

__version__ = "0.1.0"
