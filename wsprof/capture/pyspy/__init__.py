"""The py-spy driver, by concern: :mod:`~wsprof.capture.pyspy.binary` (finding py-spy, its
version), :mod:`~wsprof.capture.pyspy.ptrace` (why ptrace is denied, and the fix),
:mod:`~wsprof.capture.pyspy.parse` (py-spy's raw collapsed stacks and stderr) and
:mod:`~wsprof.capture.pyspy.sampler` (:class:`PySpySampler`: windows of samples of live
processes into a trace). The public names of each are re-exported here.
"""

from __future__ import annotations

from wsprof.capture.pyspy.binary import MIN_PYSPY_VERSION, PySpyBinary, find_pyspy
from wsprof.capture.pyspy.parse import parse_raw
from wsprof.capture.pyspy.ptrace import ptrace_problem
from wsprof.capture.pyspy.sampler import (
    DEFAULT_RATE_HZ,
    DEFAULT_WINDOW_S,
    STOP_CALLER,
    STOP_DURATION,
    STOP_PTRACE_DENIED,
    STOP_PYSPY_FAILED,
    STOP_SAMPLER_FAILED,
    STOP_TARGET_EXITED,
    TRACE_TAG,
    PySpySampler,
    SamplerState,
)

__all__ = [
    "DEFAULT_RATE_HZ",
    "DEFAULT_WINDOW_S",
    "MIN_PYSPY_VERSION",
    "STOP_CALLER",
    "STOP_DURATION",
    "STOP_PTRACE_DENIED",
    "STOP_PYSPY_FAILED",
    "STOP_SAMPLER_FAILED",
    "STOP_TARGET_EXITED",
    "TRACE_TAG",
    "PySpyBinary",
    "PySpySampler",
    "SamplerState",
    "find_pyspy",
    "parse_raw",
    "ptrace_problem",
]
