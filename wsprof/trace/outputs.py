"""Files and folders wsprof writes, made so that no other user can redirect or read them.

A run folder may be shared (``/tmp``, a team's scratch folder) and the names wsprof writes in
it are predictable (``<host>-<pid>.wsprof`` and its ``.ring`` / ``.journal``), so:

* every output file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (:func:`create_file`):
  a name that exists, a symbolic link above all, is never opened, truncated or written
  through; the caller picks another name (:func:`unique_path`) or reports the failure;
* folders wsprof creates are user-only, mode 0700 (:func:`make_private_dir`), so that nothing
  can be planted in them afterwards (SQLite's ``-wal`` / ``-shm`` / ``-journal`` side files
  included);
* a run folder owned by another user, or writable by group or others, is refused
  (:class:`SharedFolderError`, one line) -- group write is not sharing when the group is the
  user's own private group (:func:`is_private_group`: umask 002 on Debian/Ubuntu/Fedora, whose
  users each have a group of their own, makes project folders 0775) -- unless the caller
  says it is fine (the user's ``wsprof run --allow-shared-out`` or
  ``WSPROF_ALLOW_SHARED_OUT=1``, read with every other variable in
  :mod:`wsprof.capture.settings`; :data:`ALLOW_HINT`). Even then files are only
  ever created exclusively, never written through a link.

This is the standard of py-spy's and memray's outputs: nothing another user can write is
written through. Nothing here imports torch or :mod:`wsprof.capture`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat

from wsprof.errors import InputError

#: How to use a shared run folder anyway (``--allow-shared-out`` on ``wsprof run``, or
#: ``WSPROF_ALLOW_SHARED_OUT``, read in :mod:`wsprof.capture.settings`); files in it are still
#: created exclusively, never through a link.
ALLOW_HINT = "pass --allow-shared-out / set WSPROF_ALLOW_SHARED_OUT=1 to use it anyway"
#: Group and other write bits: anyone but the owner can add, rename or remove entries.
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: The files SQLite makes beside a database ``<name>`` (``<name>-wal`` and ``<name>-shm`` in WAL
#: mode, ``<name>-journal`` in rollback mode): opened by name, so a name whose side file is
#: taken (another user's file or link) is never chosen for a trace (:func:`unique_path`).
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
#: Most suffixes :func:`unique_path` tries before giving up.
MAX_UNIQUE_TRIES = 1000


class SharedFolderError(InputError):
    """A run folder another user can write in (or owns): one line, naming the way out."""


def _uid_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


@functools.cache
def is_private_group(gid: int, uid: int) -> bool:
    """True when group ``gid`` is user ``uid``'s own private group (the user-private-group
    convention of Debian, Ubuntu and Fedora): ``uid``'s primary group, named like the user,
    listing no member but the user, and no other account's primary group. Its write bit lets
    nobody else in. Read from the passwd and group databases once per (gid, uid) a process.

    Returns:
        False when any of this is not so, or the databases do not say (no ``pwd``/``grp``, no
        entry for ``uid`` or ``gid``).
    """
    try:
        import grp
        import pwd

        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
        if user.pw_gid != gid or group.gr_name != user.pw_name:
            return False
        if any(m != user.pw_name for m in group.gr_mem):
            return False
        return not any(p.pw_gid == gid and p.pw_uid != uid for p in pwd.getpwall())
    except (ImportError, KeyError, OSError):
        return False


def _group_name(gid: int) -> str:
    try:
        import grp

        return f"group {grp.getgrgid(gid).gr_name} (gid {gid})"
    except (ImportError, KeyError):
        return f"gid {gid}"


def _problem(st: os.stat_result, ok_owners: tuple[int, ...], sticky_ok: bool) -> str | None:
    """Why a folder with status ``st`` is not private to this user, or None when it is.

    Group write alone is fine when the folder's group is this user's private group
    (:func:`is_private_group`); other write never is (unless ``sticky_ok`` and sticky).
    """
    if st.st_uid not in ok_owners:
        return f"is owned by {_uid_name(st.st_uid)}"
    if not st.st_mode & _SHARED_WRITE or (sticky_ok and st.st_mode & stat.S_ISVTX):
        return None
    if not st.st_mode & stat.S_IWOTH and is_private_group(st.st_gid, os.geteuid()):
        return None
    mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
    if not st.st_mode & stat.S_IWOTH:
        mode += f", {_group_name(st.st_gid)} not your private group"
    return f"is writable by group or others ({mode})"


def check_private_dir(path: str, allow_shared: bool = False, option: str = "--out") -> None:
    """Check that the run folder ``path`` is this user's own: owned by the effective user
    and not writable by group (unless it is the user's private group) or others (a sticky
    bit does not help: files in it keep predictable names), and not reached through a link
    another user owns.

    Args:
        path: an existing folder.
        allow_shared: accept a shared folder anyway.
        option: the option or variable that named the folder, for the error.

    Raises:
        SharedFolderError: it is not private (one line: why, and what to do).
        OSError: it is not a folder (``NotADirectoryError``) or cannot be examined.
    """
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    if allow_shared:
        return
    euid = os.geteuid()
    why = _problem(st, (euid,), sticky_ok=False)
    lst = os.lstat(path)
    if why is None and stat.S_ISLNK(lst.st_mode) and lst.st_uid not in (euid, 0):
        why = f"is a link owned by {_uid_name(lst.st_uid)}"
    if why is not None:
        raise SharedFolderError(
            f"{path}: run folder {why}: another user could read the traces or plant files "
            f"in it; choose a folder of your own (mode 0700) with {option}, or {ALLOW_HINT}"
        )


def make_private_dir(path: str, allow_shared: bool = False, option: str = "--out") -> list[str]:
    """Create the run folder ``path`` and its missing parents user-only (mode 0700), then
    check it with :func:`check_private_dir`.

    A missing folder is only created under one that another user cannot rename it out of:
    the deepest existing parent must be owned by this user or root and either not writable
    by group/others or sticky (``/tmp``).

    Args:
        path: the run folder.
        allow_shared: accept shared folders.
        option: the option or variable that named the folder, for the error.

    Returns:
        The folders created, deepest first (empty when ``path`` existed).

    Raises:
        SharedFolderError: the folder or the parent it goes in is not private (one line).
        OSError: a folder cannot be created or examined, or ``path`` is not a folder.
    """
    allow = allow_shared
    here = os.path.abspath(path)
    missing: list[str] = []
    while not os.path.lexists(here):
        missing.append(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    if missing and not allow:
        why = _problem(os.stat(here), (os.geteuid(), 0), sticky_ok=True)
        if why is not None:
            raise SharedFolderError(
                f"{here}: {why}: a run folder made in it could be swapped by another user; "
                f"choose a folder of your own with {option}, or {ALLOW_HINT}"
            )
    created: list[str] = []
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                continue  # made meanwhile (another rank): checked below like any folder
            created.insert(0, d)
            os.chmod(d, 0o700)  # the umask may have taken bits the mode needs; never adds any
        check_private_dir(path, allow, option)
    except BaseException:
        for d in created:
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise
    return created


def create_file(path: str, flags: int = os.O_RDWR, mode: int = 0o600) -> int:
    """Create ``path`` exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``), user-only.

    Args:
        path: a name that must not exist yet (not even as a dangling link).
        flags: access flags to add (``os.O_RDWR``, ``os.O_WRONLY | os.O_APPEND``).
        mode: permission bits (default 0600).

    Returns:
        An open file descriptor (close-on-exec) of a new, empty, regular file.

    Raises:
        FileExistsError: the name exists (a file or a link, planted or not).
        OSError: the file cannot be created.
    """
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    return os.open(
        path, flags | os.O_CREAT | os.O_EXCL | nofollow | getattr(os, "O_CLOEXEC", 0), mode
    )


def unique_path(base: str, suffix: str, siblings: tuple[str, ...] = ()) -> str:
    """``base + suffix``, or ``base-2 + suffix``, ``base-3 + suffix``, ... : the first name
    that exists neither itself nor with any of ``siblings`` or :data:`SQLITE_SIDE_FILES`
    appended (a link counts as existing; the names are traces, and SQLite opens its side
    files by name, so one planted there must not be chosen). The caller still creates it
    with :func:`create_file` (a name taken meanwhile fails there, it is never written
    through).

    Raises:
        FileExistsError: :data:`MAX_UNIQUE_TRIES` names are all taken.
    """
    extra = ("", *SQLITE_SIDE_FILES, *siblings)
    for k in range(1, MAX_UNIQUE_TRIES + 1):
        path = f"{base}{suffix}" if k == 1 else f"{base}-{k}{suffix}"
        if not any(os.path.lexists(path + s) for s in extra):
            return path
    raise FileExistsError(f"{base}{suffix}: {MAX_UNIQUE_TRIES} names like it are all taken")
