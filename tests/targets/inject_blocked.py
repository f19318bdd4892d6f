"""A target with torch loaded whose main thread blocks outside Python, for the injection's
security tests.

``python inject_blocked.py``: prints ``ready``, then its main thread waits in ``read()`` on
stdin (blocked in C, as a rank in a long NCCL wait) and echoes each line (``echo LINE``): an
echo after a call was queued means the call has run and the target runs on normally. A
helper thread reads hex-encoded programs from the pipe whose fd is in
``$INJECT_BLOCKED_FD`` (when set) and queues each with
``Py_AddPendingCall(PyRun_SimpleString, program)`` -- what ``attach --inject``'s gdb does
from outside, done from inside where gdb cannot call functions in a process -- and prints
``queued``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

import torch  # noqa: F401 - a job: torch loaded

api = ctypes.pythonapi
api.Py_AddPendingCall.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
RUN = ctypes.cast(api.PyRun_SimpleString, ctypes.c_void_p).value
_keep: list[ctypes.Array[ctypes.c_char]] = []


def _queue(fd: int) -> None:
    with os.fdopen(fd, "r") as fh:
        for line in fh:
            buf = ctypes.create_string_buffer(bytes.fromhex(line.strip()))
            _keep.append(buf)  # the pending call reads it later
            rc = api.Py_AddPendingCall(RUN, ctypes.addressof(buf))
            print(f"queued {rc}", flush=True)


if os.environ.get("INJECT_BLOCKED_FD"):
    fd = int(os.environ["INJECT_BLOCKED_FD"])
    threading.Thread(target=_queue, args=(fd,), daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:  # blocked in read(): outside Python
    print(f"echo {line.strip()}", flush=True)
