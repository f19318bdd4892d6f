"""The script a target runs for ``wsprof attach --inject`` (written into the injection's
private folder; the 1-line program of :func:`wsprof.capture.inject.mechanism.program` checks
that folder and this file -- owner, mode, no symlink -- and runs the bytes it checked, in the
target's main thread, with ``__name__ == "__wsprof_inject__"``).

Standard library only until it has checked what the target needs; every exception is caught
and answered in ``ack.json`` beside it, never printed into the target's output. It first
claims the request (renames ``request.json`` to ``claimed.json``): an injector that gave up
has renamed it away first (withdrawn), and then this script only removes its folder and
returns. ``wsprof`` is imported from the folder the request names (the injector's own
installation), after checking that nobody but the injector's user or root can write there,
and never from the target's ``sys.path`` (a ``wsprof/`` in a shared working folder).

Imported as a module (by the injector and the tests) it only defines the trust checks.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection

#: Names in the injection's folder (the same as :mod:`~wsprof.capture.inject.request`, which
#: this stdlib-only script cannot import before it has checked where wsprof is).
_REQUEST, _CLAIMED, _ACK = "request.json", "claimed.json", "ack.json"
#: Mode bits that let someone other than the owner change a file or folder.
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: Entries of a package tree checked before it is imported into a target (a real package has
#: a few hundred; more is not a wsprof installation).
MAX_TREE_ENTRIES = 20_000


def untrusted(
    path: str, owners: Collection[int], is_kind: Callable[[int], bool] = stat.S_ISDIR
) -> str | None:
    """Why ``path`` must not be run or imported from, or None when it may.

    It may when it is not a symlink, is of the kind asked (``stat.S_ISDIR``, ``S_ISREG``),
    its owner is one of ``owners`` (the injector's uid, root), and neither group nor others
    may write it. Read with ``lstat`` (a symlink is refused, never followed).
    """
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not is_kind(st.st_mode):
        return f"{path} is not a {'folder' if is_kind is stat.S_ISDIR else 'regular file'}"
    if st.st_uid not in owners:
        return f"{path} is owned by uid {st.st_uid}, not by uid {' or '.join(map(str, owners))}"
    if st.st_mode & OTHERS_WRITE:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted_tree(root: str, owners: Collection[int]) -> str | None:
    """Why the package folder ``root`` (and everything in it) must not be imported, or None:
    :func:`untrusted` of the folder and of every folder and file under it. A symlink inside
    (a source checkout's ``wsprof/_hooks -> ../hooks``) cannot be changed (its folder is
    checked); what it points at is checked in its place and not walked."""
    problem = untrusted(root, owners)
    seen = 0
    for top, dirs, files in os.walk(root, onerror=None, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > MAX_TREE_ENTRIES:
                return f"{root} holds over {MAX_TREE_ENTRIES} entries"
            path = os.path.join(top, name)
            if os.path.islink(path):
                path = os.path.realpath(path)
                kind = stat.S_ISDIR if os.path.isdir(path) else stat.S_ISREG
            else:
                kind = stat.S_ISDIR if name in dirs else stat.S_ISREG
            problem = problem or untrusted(path, owners, kind)
        if problem:
            return problem
    return problem


def _main(here: str) -> None:
    import json
    import sys
    import time

    def ack(**fields: object) -> None:
        fields.setdefault("pid", os.getpid())
        fields.setdefault("python", sys.executable)
        path = os.path.join(here, _ACK)
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(fields, fh)
        os.replace(path + ".tmp", path)

    try:  # claim the request; an injector that gave up renamed it away before us
        os.rename(os.path.join(here, _REQUEST), os.path.join(here, _CLAIMED))
    except OSError:
        for name in os.listdir(here):  # withdrawn: nothing runs from this folder any more
            os.unlink(os.path.join(here, name))
        os.rmdir(here)
        return
    try:
        fd = os.open(os.path.join(here, _CLAIMED), os.O_RDONLY | os.O_NOFOLLOW)
        with open(fd, encoding="utf-8") as fh:
            request = json.load(fh)
    except (OSError, ValueError) as e:
        ack(ok=False, error="bad_request", message=f"the request is not JSON ({e})")
        return
    deadline = request.get("deadline_unix") if isinstance(request, dict) else None
    if not isinstance(deadline, (int, float)) or time.time() > deadline:
        ack(
            ok=False,
            error="expired",
            message="the target's main thread ran the injected call after the injector gave "
            "up (it was busy outside Python); nothing was done",
        )
        return
    if "torch" not in sys.modules:
        ack(
            ok=False,
            error="no_torch",
            message="torch is not loaded in this process: there is no collective to hook; "
            "inject into the processes that train or serve (the ranks)",
        )
        return
    root = request.get("wsprof_root")
    if not isinstance(root, str) or not os.path.isabs(root) or "\0" in root:
        ack(ok=False, error="bad_request", message="the request names no wsprof folder")
        return
    package = os.path.join(root, "wsprof")
    owners = (0, os.stat(here).st_uid)  # the injector's user (this folder is checked) or root
    problem = untrusted(root, owners) or untrusted_tree(package, owners)
    if problem:
        ack(
            ok=False,
            error="untrusted_wsprof",
            message=f"wsprof is not imported from a folder another user can change: {problem}; "
            "install wsprof where only its user (or root) can write",
        )
        return
    loaded = sys.modules.get("wsprof")
    if loaded is not None and not _under(getattr(loaded, "__file__", None), package):
        ack(
            ok=False,
            error="foreign_wsprof",
            message=f"the target already imported wsprof from {getattr(loaded, '__file__', '?')}"
            f", not the injector's {package}: inject with the wsprof of the target's own "
            "environment",
        )
        return
    sys.path.insert(0, root)  # only for this import: the target's path cannot shadow it
    try:
        from wsprof.capture.inject import target  # type: ignore[import-not-found,unused-ignore]
    except BaseException as e:  # noqa: BLE001 - answered, never raised into the target
        ack(
            ok=False,
            error="no_wsprof",
            message=f"the target cannot import wsprof from {root} ({type(e).__name__}: {e}); "
            f"install wsprof into its environment ({sys.executable} -m pip install wsprof)",
        )
        return
    finally:
        if root in sys.path:
            sys.path.remove(root)
    if not _under(getattr(sys.modules.get("wsprof"), "__file__", None), package):
        ack(
            ok=False,
            error="foreign_wsprof",
            message=f"wsprof was not imported from {package}; nothing was done",
        )
        return
    try:
        ack(**target.handle(here))
    except KeyboardInterrupt:  # the job's own Ctrl-C landed in here: its patch was undone
        ack(ok=False, error="internal", message="interrupted by the job's own Ctrl-C")
        __import__("_thread").interrupt_main()  # the job gets its KeyboardInterrupt back
    except BaseException as e:  # noqa: BLE001 - answered, never raised into the target
        ack(ok=False, error="internal", message=f"{type(e).__name__}: {e}")


def _under(path: object, folder: str) -> bool:
    """Whether the file ``path`` lies in ``folder`` (both resolved)."""
    if not isinstance(path, str):
        return False
    real = os.path.realpath(folder)
    return os.path.commonpath([os.path.realpath(path), real]) == real


if __name__ == "__wsprof_inject__":  # run by the 1-line program, never on import
    with __import__("contextlib").suppress(BaseException):  # nothing escapes into the target
        _main(os.path.dirname(os.path.abspath(__file__)))
