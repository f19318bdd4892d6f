"""Options and helpers shared by commands."""

from __future__ import annotations

import os
import socket
import time

from wsprof.analysis.model import SEVERITIES, Analysis


def default_report_path(source: str) -> str:
    """``reports/wsprof-<host>-<run name>-<time>.html`` under the current folder."""
    name = os.path.basename(os.path.normpath(source)).replace(".wsprof", "") or "run"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("reports", f"wsprof-{socket.gethostname()}-{name}-{stamp}.html")


#: ``--fail-on`` values: a finding severity, or ``inconclusive`` (fails on a warning or worse
#: and on a verdict the data cannot support).
FAIL_ON = ("warning", "critical", "inconclusive")


def fails(analysis: Analysis, fail_on: str | None) -> bool:
    """True when a finding is at or above ``fail_on`` severity; for ``inconclusive``, also when
    the verdict is inconclusive (:class:`~wsprof.analysis.model.Verdict`)."""
    if not fail_on:
        return False
    if fail_on == "inconclusive":
        return analysis.verdict.status == "inconclusive" or fails(analysis, "warning")
    level = SEVERITIES.index(fail_on)
    return any(SEVERITIES.index(f.severity) >= level for f in analysis.findings)
