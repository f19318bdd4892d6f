"""Opening an input file as the importers do: read-only, never blocking on a FIFO, regular
files only. Pure; stdlib."""

from __future__ import annotations

import os
import stat
from typing import IO

from wsprof.errors import InputError


def open_regular(path: str, give: str) -> IO[bytes]:
    """``path`` opened for reading (binary), without blocking on a FIFO; a file that is not
    regular (a FIFO, a device, a folder) is refused in one line ending in ``give`` (what to
    give instead). The caller's with-block closes it.

    Raises:
        OSError: it cannot be opened.
        InputError: it is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{path}: not a regular file; {give}")
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
