"""Inside the target: what an injected ``patch`` and ``unpatch`` do.

``patch`` takes a snapshot of everything wsprof's hooks replace (the attributes of the
``torch.distributed`` modules wsprof hooks and of the ``ProcessGroup`` classes), starts the
capture session (``source: inject``), installs the presets of the frameworks already imported,
and starts a watchdog thread that unpatches by itself when the injector's process is gone.
``unpatch`` stops all of that and compares every attribute of the snapshot with what is there
now, by identity: the answer says whether the process was left exactly as it was.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import types
from typing import Any

from wsprof._version import __version__
from wsprof.capture.inject.request import read_request

#: Modules and classes whose attributes wsprof's hooks may replace (by import name and
#: attribute path); a snapshot of each is compared after unpatch.
HOOKED_OWNERS = (
    ("torch.distributed", ""),
    ("torch.distributed.distributed_c10d", ""),
    ("torch.distributed._functional_collectives", ""),
    ("torch.distributed.distributed_c10d", "ProcessGroup"),
    ("torch.distributed.distributed_c10d", "ProcessGroupGloo"),
    ("torch.distributed.distributed_c10d", "ProcessGroupNCCL"),
    ("torch._C._distributed_c10d", "ProcessGroup"),
)
#: Seconds between the watchdog's checks that the injector is alive.
WATCHDOG_PERIOD_S = 1.0


class _State:
    """What this process's injected session holds between ``patch`` and ``unpatch``."""

    snapshot: dict[str, dict[str, Any]] | None = None
    watchdog: threading.Thread | None = None
    stop = threading.Event()
    lock = threading.Lock()


def _owners() -> list[tuple[str, Any]]:
    out = []
    for module, attr in HOOKED_OWNERS:
        mod = sys.modules.get(module)
        if mod is None:
            continue
        owner = getattr(mod, attr, None) if attr else mod
        if owner is not None:
            out.append((f"{module}.{attr}" if attr else module, owner))
    return out


def snapshot() -> dict[str, dict[str, Any]]:
    """Every attribute of :data:`HOOKED_OWNERS` (those imported), by owner name."""
    snap: dict[str, dict[str, Any]] = {}
    for name, owner in _owners():
        try:
            snap[name] = dict(vars(owner))
        except TypeError:  # no __dict__
            continue
    return snap


def changed_since(snap: dict[str, dict[str, Any]]) -> list[str]:
    """``owner.attribute`` of every callable or descriptor attribute (what a hook replaces)
    that is not the same object as in ``snap``, or was added or removed since (a module
    imported since is not compared; plain values such as c10d's group counter are the job's
    own state)."""
    out: list[str] = []
    for name, owner in _owners():
        before = snap.get(name)
        if before is None:
            continue
        now = dict(vars(owner))
        for key in sorted(set(before) | set(now)):
            # type(), not isinstance(): a deprecated torch alias warns when asked its class.
            if key in ("__dict__", "__weakref__") or type(before.get(key)) is types.ModuleType:
                continue
            if not (_hookable(before.get(key)) or _hookable(now.get(key))):
                continue  # the job's own state (a counter, a registry) is the job's to change
            if before.get(key, _MISSING) is not now.get(key, _MISSING):
                out.append(f"{name}.{key}")
    return out


_MISSING = object()


def _hookable(x: Any) -> bool:
    """What a hook can be: a callable or a descriptor (a method, a property); never asked
    through the object's own ``__getattr__``."""
    return x is not _MISSING and x is not None and (callable(x) or hasattr(type(x), "__get__"))


def handle(folder: str) -> dict[str, Any]:
    """Act on the request in ``folder``; the ack's fields (``ok`` and what was done, or
    ``error`` with a ``message`` that says what to do). Never raises on a bad request."""
    try:
        req = read_request(folder)
    except FileNotFoundError:
        return {"ok": False, "error": "bad_request", "message": "no request"}
    except ValueError as e:
        return {"ok": False, "error": "bad_request", "message": f"bad request: {e}"}
    if req["version"] != __version__:
        return {
            "ok": False,
            "error": "version",
            "message": f"the target imports wsprof {__version__} from {_where()}, the "
            f"injector is wsprof {req['version']}: install the same version in both",
        }
    if req["action"] == "patch":
        return _patch(req)
    return _unpatch(reason="asked")


def _where() -> str:
    import wsprof

    return os.path.dirname(os.path.abspath(wsprof.__file__ or "?"))


def _patch(req: dict[str, Any]) -> dict[str, Any]:
    from dataclasses import replace

    from wsprof.capture import presets, session
    from wsprof.capture import settings as cfg

    t0 = time.perf_counter()
    with _State.lock:
        if _State.snapshot is not None or session.trace_path() is not None:
            return {
                "ok": False,
                "error": "already_patched",
                "message": f"wsprof already records in this process ({session.trace_path()}): "
                "nothing to inject; `wsprof attach` samples it from outside",
            }
        snap = snapshot()
        # Quiet: the injection writes nothing into the target's stderr (settings warnings are
        # kept in the trace's events; the trace's path is in the injector's ack).
        settings = replace(cfg.read(), quiet=True)
        try:
            path = session.patch(
                req["out"], layers=req["layers"], source="inject", settings=settings
            )
        except BaseException:  # a Ctrl-C of the job's own mid-patch: nothing left behind
            session.unpatch()
            raise
        if path is None:
            return {
                "ok": False,
                "error": "internal",
                "message": f"the trace could not be created in {req['out']} (see the target's "
                "stderr); the target is unchanged",
            }
        marked = presets.install(None)
        presets.flush_events()
        _State.snapshot = snap
        _State.stop.clear()
        _State.watchdog = threading.Thread(
            target=_watch,
            args=(int(req["injector_pid"]),),
            name="wsprof-inject-watchdog",
            daemon=True,
        )
        _State.watchdog.start()
    return {
        "ok": True,
        "action": "patch",
        "trace": path,
        "presets": marked,
        "in_target_s": time.perf_counter() - t0,
    }


def _unpatch(reason: str) -> dict[str, Any]:
    from wsprof.capture import presets, session

    t0 = time.perf_counter()
    with _State.lock:
        snap = _State.snapshot
        if snap is None:
            return {
                "ok": False,
                "error": "not_injected",
                "message": "no injected wsprof session in this process (already detached?)",
            }
        _State.stop.set()
        path = session.trace_path()
        session.unpatch()  # every original back, the step closed, everything written
        restored = presets.uninstall()
        _State.snapshot = None
        changed = changed_since(snap)
    return {
        "ok": True,
        "action": "unpatch",
        "reason": reason,
        "trace": path,
        "presets_restored": restored,
        "identical": not changed,
        "changed": changed[:20],
        "in_target_s": time.perf_counter() - t0,
    }


def _alive(pid: int) -> bool:
    """Whether the injector still runs (a killed one not yet reaped is a zombie: gone)."""
    from wsprof.capture.inject.mechanism import running

    return running(pid)


def _watch(injector_pid: int) -> None:
    """Unpatch when the injector is gone (killed before it could detach): the target is
    left as it was, with what was recorded written."""
    while not _State.stop.wait(WATCHDOG_PERIOD_S):
        if not _alive(injector_pid):
            with contextlib.suppress(Exception):  # never raise into the target
                _unpatch(reason="injector_gone")
            return
