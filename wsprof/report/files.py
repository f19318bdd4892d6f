"""Writing rendered files: one place for the folder creation and the one-line error."""

from __future__ import annotations

import os

from wsprof.errors import InputError


def write_text(path: str | os.PathLike[str], text: str, what: str) -> str:
    """Write ``text`` to ``path`` (UTF-8), creating its folder.

    Args:
        path: the output file.
        text: its content.
        what: what it is, for the error (``the report``, ``the diff``).

    Returns:
        The path written, as a string.

    Raises:
        InputError: the file or its folder cannot be written (one line: which and why).
    """
    out = os.fspath(path)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise InputError(
            f"{out}: cannot write {what} ({e.strerror or e}); choose another path with -o"
        ) from e
    return out
