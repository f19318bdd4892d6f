"""Who a process is among the job's process worlds: its default group (the WORLD it joined with
``init_process_group``), every process group it joins, and the framework modules it loaded.

RL frameworks run trainers and inference engines as separate worlds (two rank 0s), often
rendezvousing through one TCP store under different prefixes, so the store's host and port do
not tell the worlds apart. Each group therefore gets a *token*: the first process of the group
to ask puts a random token under a wsprof key in the group's own store
(``compare_set(key, "", mine)``: set when absent, else the value already there), and every
member reads the same value back. One store round trip per group, once, from the writer
thread; nothing on the collective path.

Read once per drain until known (:meth:`wsprof.capture.recorder.Recorder.flush`); every
function here is best effort and never raises.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from typing import Any

from wsprof.contracts.roles import ROLE_MODULES

#: The store key a group's token lives under (in the group's own, prefixed store).
TOKEN_KEY = "wsprof/group-token"
#: Most groups described per process (subgroups beyond are counted, not described).
MAX_GROUPS = 64
#: Launcher variables recorded with the world (torchrun / torchelastic; names are the launcher's
#: own, values are ranks, role names and addresses, never secrets).
LAUNCHER_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
)


def store_address(store: Any) -> str | None:
    """``host:port`` of the TCP store under ``store`` (prefix stores unwrapped), else None."""
    for _ in range(16):
        host, port = getattr(store, "host", None), getattr(store, "port", None)
        if isinstance(host, str) and isinstance(port, int):
            return f"{host}:{port}"
        inner = getattr(store, "underlying_store", None)
        if inner is None or inner is store:
            return None
        store = inner
    return None


def _token(store: Any) -> str | None:
    """The group's shared token from its store (see the module docstring); None when the store
    cannot be asked."""
    try:
        mine = secrets.token_hex(8)
        got = store.compare_set(TOKEN_KEY, "", mine)
        value = got.decode() if isinstance(got, bytes) else str(got)
        return value or None
    except Exception:  # noqa: BLE001 - a store without compare_set, or gone
        return None


class WorldProbe:
    """Reads the world and groups of this process; remembers each group's description (and
    token) so that a group is asked once."""

    def __init__(self) -> None:
        self._groups: dict[int, dict[str, Any]] = {}  # id(pg) -> description
        self._world: dict[str, Any] | None = None
        self._extra_groups = 0

    def modules(self) -> list[str]:
        """The :data:`~wsprof.contracts.roles.ROLE_MODULES` this process has imported."""
        return [m for m in ROLE_MODULES if m in sys.modules]

    def read(self, ask_stores: bool = True) -> dict[str, Any]:
        """``{'world': ..., 'groups': [...]}`` for the trace's meta (empty when torch.distributed
        is not initialised and nothing was read before).

        Args:
            ask_stores: take tokens of groups not yet described (False at close: a store whose
                server is gone must not be waited for).
        """
        dist = sys.modules.get("torch.distributed")
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        if dist is None or c10d is None:
            return self._result()
        try:
            if not dist.is_initialized():
                return self._result()
            world = c10d._world
            default = world.default_pg
            pg_map = dict(world.pg_map)
            names = dict(world.pg_names)
        except Exception:  # noqa: BLE001 - identity is best effort
            return self._result()
        for pg, entry in pg_map.items():
            key = id(pg)
            if key in self._groups:
                continue
            if len(self._groups) >= MAX_GROUPS:
                self._extra_groups = len(pg_map) - MAX_GROUPS
                break
            if not ask_stores:
                continue
            backend, store = entry if isinstance(entry, tuple) and len(entry) == 2 else (None, None)
            desc: dict[str, Any] = {"name": str(names.get(pg, getattr(pg, "group_name", "")))}
            with contextlib.suppress(Exception):
                desc["desc"] = str(pg.group_desc)
            with contextlib.suppress(Exception):
                desc["size"] = int(pg.size())
                desc["rank"] = int(pg.rank())
            desc["backend"] = None if backend is None else str(backend)
            with contextlib.suppress(Exception):
                ranks = world.pg_group_ranks.get(pg)
                if isinstance(ranks, dict) and pg is not default:
                    desc["global_ranks"] = sorted(int(g) for g in ranks)
            desc["store"] = store_address(store)
            desc["token"] = _token(store) if store is not None else None
            desc["default"] = pg is default
            self._groups[key] = desc
            if pg is default:
                self._world = {
                    "rank": desc.get("rank"),
                    "size": desc.get("size"),
                    "backend": desc.get("backend"),
                    "store": desc["store"],
                    "token": desc["token"],
                    "launcher": {k: os.environ[k] for k in LAUNCHER_ENV if k in os.environ},
                }
        return self._result()

    def _result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"modules": self.modules()}
        if self._world is not None:
            out["world"] = dict(self._world)
        if self._groups:
            out["groups"] = list(self._groups.values())
        if self._extra_groups:
            out["groups_not_described"] = self._extra_groups
        return out

    def state(self) -> tuple[int, int, bool]:
        """What changed since the last write is judged from this (groups, modules, world)."""
        return (len(self._groups), len(self.modules()), self._world is not None)
