"""Writing rendered files: one place for the folder creation and the one-line error."""

from __future__ import annotations

import errno
import os

from wsprof.errors import InputError
from wsprof.trace.outputs import make_private_dir


def write_text(path: str | os.PathLike[str], text: str, what: str) -> str:
    """Write ``text`` to ``path`` (UTF-8), creating its missing folders user-only (0700).

    ``path`` is the user's choice (``-o``) and a regular file there is replaced, but a
    symbolic link is never written through (``O_NOFOLLOW``): a link planted at a predictable
    report name (``wsprof-<host>-<run>-<time>.html`` in a run folder) cannot redirect it.

    Args:
        path: the output file.
        text: its content.
        what: what it is, for the error (``the report``, ``the diff``).

    Returns:
        The path written, as a string.

    Raises:
        InputError: the file or its folder cannot be written, or the file is a symbolic link
            (one line: which and why).
    """
    out = os.fspath(path)
    try:
        # the user's own choice of folder: created private, not refused when shared
        make_private_dir(os.path.dirname(os.path.abspath(out)), allow_shared=True, option="-o")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(out, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(
                f"{out}: is a symbolic link; not written through it: choose another path with -o"
            ) from e
        raise InputError(
            f"{out}: cannot write {what} ({e.strerror or e}); choose another path with -o"
        ) from e
    return out
