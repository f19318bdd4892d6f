"""Writing the files a user names with ``-o`` (report, diff, export): one place for the folder
creation, the private temporary file, the final mode and the one-line errors."""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import TextIO

from wsprof.errors import InputError
from wsprof.trace.outputs import make_private_dir

#: What a file type is called in the error for an ``-o`` that is not a regular file.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@functools.cache
def new_file_mode() -> int:
    """The permission bits a new file gets from this process's umask (``0o666 & ~umask``), as
    any tool writing ``-o`` gives it. Read once a process: ``os.umask`` can only be read by
    setting it, so it is set and put back at once."""
    mask = os.umask(0o077)
    os.umask(mask)
    return 0o666 & ~mask


def _refuse_existing(out: str) -> None:
    """Raise the one-line error when ``out`` exists and is not a regular file: a symbolic link
    (never written through), a FIFO (opening it would hang), a device, a folder, a socket."""
    try:
        st = os.lstat(out)
    except OSError:
        return  # nothing there, or its folder cannot be reached: writing it says why
    if stat.S_ISLNK(st.st_mode):
        raise InputError(
            f"{out}: is a symbolic link; not written through it: choose another path with -o"
        )
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise InputError(f"{out}: is {kind}, not a regular file; choose another path with -o")


@contextlib.contextmanager
def output_file(
    path: str | os.PathLike[str], what: str, make_folders: bool = True
) -> Iterator[TextIO]:
    """A text file (UTF-8, no newline translation) to write ``path`` through; on a clean exit
    it becomes ``path`` in one rename.

    ``path`` is the user's choice (``-o``): its missing folders are created user-only (0700)
    when ``make_folders`` and a regular file there is replaced. What is written goes first to a
    private temporary file beside it (``mkstemp``: a random name, ``O_EXCL``, 0600), given the
    mode the umask gives a new file (:func:`new_file_mode`) once complete, then renamed over
    ``path`` (``os.replace``): a symbolic link or a hard link at ``path`` is never written
    through (its target keeps its bytes), a reader never sees half a file, and a failure leaves
    nothing behind. An existing ``path`` that is a link, a FIFO, a device or a folder is refused
    before anything is written.

    Args:
        path: the output file.
        what: what it is, for the error (``the report``, ``the diff``, ``the export``).
        make_folders: create missing folders (``report``, ``diff``); else a missing folder is
            the one-line error (``export``).

    Yields:
        The open temporary file.

    Raises:
        InputError: ``path`` is not a regular file, or it or its folder cannot be written (one
            line: which, why, what to do). Errors raised while writing pass through, and the
            temporary file is removed.
    """
    out = os.fspath(path)
    _refuse_existing(out)
    tmp: str | None = None
    try:
        # the user's own choice of folder: created private, not refused when shared
        folder = os.path.dirname(os.path.abspath(out))
        if make_folders:
            make_private_dir(folder, allow_shared=True, option="-o")
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(out)}.", suffix=".part")
        with open(fd, "w", encoding="utf-8", newline="") as fh:
            yield fh
            os.fchmod(fh.fileno(), new_file_mode())
        os.replace(tmp, out)
        tmp = None
    except OSError as e:
        raise InputError(
            f"{out}: cannot write {what} ({e.strerror or e}); choose another path with -o"
        ) from e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(tmp)


def write_text(path: str | os.PathLike[str], text: str, what: str) -> str:
    """Write ``text`` to ``path`` (UTF-8) through :func:`output_file`.

    Args:
        path: the output file.
        text: its content.
        what: what it is, for the error (``the report``, ``the diff``).

    Returns:
        The path written, as a string.

    Raises:
        InputError: as :func:`output_file` (one line).
    """
    with output_file(path, what) as fh:
        fh.write(text)
    return os.fspath(path)
