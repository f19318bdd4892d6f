"""The exchange between the injector and its target: a request and an ack, JSON files.

Both are plain dicts of JSON types, validated on both sides; the target never evaluates any
of their values (paths are used as paths, the action picks one of two functions).

The request changes hands by renaming, so that exactly one side has it: the target claims it
(``request.json`` -> ``claimed.json``) when its queued call runs; an injector that gives up
withdraws it (``request.json`` -> ``withdrawn.json``). Whoever renames first wins; the folder
itself stays until the call has run (:mod:`~wsprof.capture.inject.injector`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

#: What the injector can ask.
ACTIONS = ("patch", "unpatch")
#: The hook layers a request may name (``wsprof.patch(layers=...)``).
LAYERS = ("both", "api")
#: File names in the private folder of one injection.
BOOTSTRAP_NAME = "bootstrap.py"
REQUEST_NAME = "request.json"
CLAIMED_NAME = "claimed.json"
WITHDRAWN_NAME = "withdrawn.json"
ACK_NAME = "ack.json"
#: Errors the target can answer (``Ack.error``), each with what to do in ``Ack.message``.
ERRORS = (
    "bad_request",  # the request file is not what this wsprof writes
    "expired",  # the target's main thread ran the call after the injector gave up
    "no_torch",  # torch is not loaded: nothing to hook
    "no_wsprof",  # the target cannot import wsprof from the injector's installation
    "untrusted_wsprof",  # that installation is writable by another user (or a symlink)
    "foreign_wsprof",  # the target already imported wsprof from elsewhere
    "version",  # the target imports another wsprof version than the injector's
    "already_patched",  # wsprof already records in the target (wsprof.patch() or wsprof run)
    "not_injected",  # unpatch asked, but this injector's patch is not there
    "internal",  # anything else, with its exception
)


@dataclass(frozen=True)
class Request:
    """What one injection asks the target.

    Attributes:
        action: ``patch`` or ``unpatch``.
        version: the injector's wsprof version (the target's must be the same).
        out: absolute run folder for the trace (``patch``).
        layers: ``both`` or ``api`` (``patch``).
        injector_pid: the injector's pid: the target unpatches itself when it is gone.
        deadline_unix: wall-clock time (s) after which the target must not act on it.
        wsprof_root: the folder that holds the injector's ``wsprof`` package (a ``sys.path``
            entry): the target imports wsprof from there, checked, never from its own path.
    """

    action: str
    version: str
    out: str
    layers: str
    injector_pid: int
    deadline_unix: float
    wsprof_root: str

    def __post_init__(self) -> None:
        problems = validate(asdict(self))
        if problems:
            raise ValueError(f"bad inject request: {problems}")

    def write(self, folder: str) -> str:
        """Write the request into ``folder`` (the injection's private folder; created new,
        never through a symlink, mode 0600); its path."""
        path = os.path.join(folder, REQUEST_NAME)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh)
        return path


def validate(doc: Any) -> str | None:
    """What is wrong with a request document, or None: every field of :class:`Request`, of its
    type; ``action`` and ``layers`` from their lists; ``out`` and ``wsprof_root`` absolute paths
    without NUL."""
    if not isinstance(doc, dict):
        return "not an object"
    want: dict[str, type | tuple[type, ...]] = {
        "action": str,
        "version": str,
        "out": str,
        "layers": str,
        "injector_pid": int,
        "deadline_unix": (int, float),
        "wsprof_root": str,
    }
    for key, kind in want.items():
        if not isinstance(doc.get(key), kind) or isinstance(doc.get(key), bool):
            return f"{key} missing or not {kind}"
    if set(doc) != set(want):
        return f"unexpected fields {sorted(set(doc) - set(want))}"
    if doc["action"] not in ACTIONS:
        return f"action {doc['action']!r} not in {ACTIONS}"
    if doc["layers"] not in LAYERS:
        return f"layers {doc['layers']!r} not in {LAYERS}"
    for key in ("out", "wsprof_root"):
        path = doc[key]
        if not path or "\0" in path or not os.path.isabs(path):
            return f"{key} is not an absolute path"
    if doc["injector_pid"] <= 0:
        return "injector_pid is not a pid"
    return None


def read_request(folder: str, name: str = CLAIMED_NAME) -> dict[str, Any]:
    """The request in ``folder`` (the one the target claimed), as a validated dict.

    Raises:
        FileNotFoundError: no request (the injector withdrew it).
        ValueError: not a valid request (message says why).
    """
    fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW)
    with open(fd, encoding="utf-8") as fh:
        doc = json.load(fh)
    problem = validate(doc)
    if problem is not None:
        raise ValueError(problem)
    return dict(doc)


def withdraw(folder: str) -> bool:
    """Take the request back (``request.json`` -> ``withdrawn.json``): True when it was
    withdrawn, False when the target had claimed it already (its call runs, an ack follows)
    or it was gone."""
    try:
        os.rename(os.path.join(folder, REQUEST_NAME), os.path.join(folder, WITHDRAWN_NAME))
    except OSError:
        return False
    return True


def write_ack(folder: str, ack: dict[str, Any]) -> None:
    """Write the target's answer atomically (a reader never sees half of it)."""
    path = os.path.join(folder, ACK_NAME)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(ack, fh)
    os.replace(tmp, path)


def read_ack(folder: str) -> dict[str, Any] | None:
    """The target's answer, or None while there is none."""
    try:
        with open(os.path.join(folder, ACK_NAME), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
