"""Process worlds and their roles, from what each trace recorded about its groups.

RL post-training frameworks (slime, verl, AReaL) run trainers and inference engines as
separate worlds, each with its own ``init_process_group`` (two rank 0s), joined by a
weight-update group made outside both. Capture records per process its default group
(``meta['world']``: rank, size, backend, store address, a token shared by the group's members),
every group it joined (``meta['groups']``) and the framework modules it loaded
(``meta['modules']``). Here:

- **Worlds.** Processes whose default groups share a token are one world; without tokens,
  processes with the same store address and world size, split where a rank repeats (the k-th
  process of each rank in the k-th world, by pid); a trace without a world record joins the
  run's one legacy world.
- **Roles**, from evidence, strongest first: a group that spans two worlds (the weight-update
  group) has its source (group rank 0) on the trainer side and the receivers on the engine
  side; training modules (Megatron, DeepSpeed, FSDP) against engine modules (SGLang, vLLM);
  words in the command line or the launcher's role name. A run of one world without engine
  evidence is training.

Pure: trace metadata in, :class:`~wsprof.analysis.model.World` records out.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wsprof.analysis.model import World
from wsprof.contracts.roles import ENGINE_MODULES, TRAINER_MODULES, Role

#: Weight of each kind of evidence in a world's trainer-versus-engine score: who sends on a
#: group spanning worlds decides over modules, modules over words in a command line.
W_CROSS_GROUP = 4
W_MODULES = 2
W_WORDS = 1
#: Words of a command line or launcher role name that suggest a trainer / an engine.
TRAINER_WORDS = re.compile(r"train|actor|learner|megatron|fsdp|deepspeed", re.IGNORECASE)
ENGINE_WORDS = re.compile(r"sglang|vllm|engine|rollout|infer|generat|server", re.IGNORECASE)
#: Order of roles when choosing the primary process: trainers first.
ROLE_ORDER = {Role.TRAINER.value: 0, Role.OTHER.value: 1, Role.ENGINE.value: 2}


@dataclass
class _Draft:
    members: list[int]  # indexes into the metas
    trainer: int = 0
    engine: int = 0
    why: list[tuple[int, str]] = field(default_factory=list)  # (weight, phrase)

    def add(self, role: Role, weight: int, phrase: str) -> None:
        if role is Role.TRAINER:
            self.trainer += weight
        else:
            self.engine += weight
        if phrase not in [p for _, p in self.why]:
            self.why.append((weight, phrase))


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _world_of(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    w = meta.get("world")
    return w if isinstance(w, Mapping) else {}


def _groups_of(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    g = meta.get("groups")
    return [x for x in g if isinstance(x, Mapping)] if isinstance(g, list) else []


def _rank(meta: Mapping[str, Any]) -> int | None:
    r = _int(_world_of(meta).get("rank"))
    return r if r is not None else _int(meta.get("rank"))


def _bucket_key(meta: Mapping[str, Any]) -> tuple[Any, ...]:
    w = _world_of(meta)
    token = w.get("token")
    if isinstance(token, str) and token:
        return ("token", token)
    store, size = w.get("store"), _int(w.get("size"))
    if isinstance(store, str) and size is not None:
        return ("store", store, size)
    return ("legacy",)


def _split_repeated_ranks(
    members: list[int], metas: Sequence[Mapping[str, Any]]
) -> list[list[int]]:
    """Members as worlds in which no rank repeats: the k-th process of each rank (by pid) goes
    to the k-th world."""
    seen: dict[int | None, int] = defaultdict(int)
    out: list[list[int]] = []

    def pid(i: int) -> int:
        return _int(metas[i].get("pid")) or 0

    for i in sorted(members, key=pid):
        r = _rank(metas[i])
        k = seen[r] if r is not None else 0
        seen[r] += 1
        while len(out) <= k:
            out.append([])
        out[k].append(i)
    return out


def _group_key(g: Mapping[str, Any]) -> tuple[Any, ...] | None:
    token = g.get("token")
    if isinstance(token, str) and token:
        return ("token", token)
    name, store, size = g.get("name"), g.get("store"), _int(g.get("size"))
    if isinstance(name, str) and isinstance(store, str) and size is not None:
        return ("name", name, store, size)
    return None


def _cmd_words(meta: Mapping[str, Any]) -> str:
    argv = meta.get("argv")
    words = " ".join(str(a) for a in argv) if isinstance(argv, list) else ""
    role = _world_of(meta).get("launcher")
    name = role.get("ROLE_NAME") if isinstance(role, Mapping) else None
    if isinstance(name, str) and name != "default":
        words += " " + name
    return words


def find_worlds(
    metas: Sequence[Mapping[str, Any]], shares: Sequence[str | None] = ()
) -> tuple[tuple[World, ...], list[int | None]]:
    """The run's worlds and each process's world.

    Args:
        metas: each process's trace meta (samplers' traces left out by the caller).
        shares: per process, what its tensor sharing says it is
            (:attr:`wsprof.analysis.sharing.Sharing.role`: ``trainer`` sends weight buckets by
            handle, ``engine`` only opens them, ``both``), None where it shared nothing.

    Returns:
        The worlds (trainers first, then others, then engines; within a role by lowest pid),
        and per input the index of its world in that tuple (None for none: no input).
    """
    buckets: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for i, m in enumerate(metas):
        buckets[_bucket_key(m)].append(i)
    drafts: list[_Draft] = []
    for key, members in buckets.items():
        parts = _split_repeated_ranks(members, metas) if key[0] == "store" else [members]
        drafts += [_Draft(p) for p in parts if p]
    world_of = [0] * len(metas)
    for w, d in enumerate(drafts):
        for i in d.members:
            world_of[i] = w
    _cross_group_evidence(drafts, metas, world_of)
    _share_evidence(drafts, shares)
    for d in drafts:
        _module_evidence(d, metas)
        _word_evidence(d, metas)
    roles = [_role(d, len(drafts)) for d in drafts]

    def order(w: int) -> tuple[int, int]:
        pids = [_int(metas[i].get("pid")) or 0 for i in drafts[w].members]
        return (ROLE_ORDER[roles[w][0].value], min(pids, default=0))

    ranked = sorted(range(len(drafts)), key=order)
    new_index = {w: k for k, w in enumerate(ranked)}
    worlds: list[World] = []
    for k, w in enumerate(ranked):
        d = drafts[w]
        members = sorted(d.members, key=lambda i: (_rank(metas[i]) is None, _rank(metas[i]) or 0))
        first = _world_of(metas[members[0]]) if members else {}
        sizes = {_int(_world_of(metas[i]).get("size")) for i in members} - {None}
        if not sizes:
            sizes = {_int(metas[i].get("world_size")) for i in members} - {None}
        store = first.get("store")
        worlds.append(
            World(
                label=f"world {k + 1}",
                role=roles[w][0].value,
                size=next(iter(sizes)) if len(sizes) == 1 else None,
                pids=tuple(_int(metas[i].get("pid")) for i in members),
                ranks=tuple(_rank(metas[i]) for i in members),
                store=store if isinstance(store, str) else None,
                evidence=roles[w][1],
            )
        )
    return tuple(worlds), [new_index[w] for w in world_of]


def _cross_group_evidence(
    drafts: list[_Draft], metas: Sequence[Mapping[str, Any]], world_of: list[int]
) -> None:
    """A non-default group whose members span two or more worlds: its rank 0 (the broadcast
    source of a weight push) is on the trainer side, the others receive."""
    members: dict[tuple[Any, ...], list[tuple[int, int | None, str]]] = defaultdict(list)
    for i, m in enumerate(metas):
        for g in _groups_of(m):
            if g.get("default") is True:
                continue
            key = _group_key(g)
            if key is not None:
                members[key].append((i, _int(g.get("rank")), str(g.get("name", "?"))))
    for entries in members.values():
        worlds = {world_of[i] for i, _, _ in entries}
        if len(worlds) < 2:
            continue
        src = {world_of[i] for i, r, _ in entries if r == 0}
        if len(src) != 1:
            continue
        name = entries[0][2]
        (sender,) = src
        drafts[sender].add(
            Role.TRAINER, W_CROSS_GROUP, f"sends on '{name}' (its rank 0), a group spanning worlds"
        )
        for w in worlds - src:
            drafts[w].add(
                Role.ENGINE, W_CROSS_GROUP, f"receives on '{name}', a group spanning worlds"
            )


def _share_evidence(drafts: list[_Draft], shares: Sequence[str | None]) -> None:
    """Colocated weight sync: a world whose processes send weight buckets by handle (CUDA IPC,
    shared memory) is the trainers'; one whose processes only open them, the engine's (as
    strong as a push group: the buckets are the weights). Only in a run with both: a
    process that opens what no recorded process sent reads data, not weights."""
    present = set(shares) - {None}
    if not {"trainer", "engine"} <= present:
        return
    for d in drafts:
        roles = {shares[i] for i in d.members if i < len(shares) and shares[i] is not None}
        if roles == {"trainer"}:
            d.add(Role.TRAINER, W_CROSS_GROUP, "sends weight buckets by handle to another process")
        elif roles == {"engine"}:
            d.add(Role.ENGINE, W_CROSS_GROUP, "opens weight buckets another process shares")


def _module_evidence(d: _Draft, metas: Sequence[Mapping[str, Any]]) -> None:
    loaded: set[str] = set()
    for i in d.members:
        mods = metas[i].get("modules")
        if isinstance(mods, list):
            loaded |= {m for m in mods if isinstance(m, str)}
    train = sorted(loaded & set(TRAINER_MODULES))
    engine = sorted(loaded & set(ENGINE_MODULES))
    if train:
        d.add(Role.TRAINER, W_MODULES, "loaded " + ", ".join(train))
    if engine:
        d.add(Role.ENGINE, W_MODULES, "loaded " + ", ".join(engine))


def _word_evidence(d: _Draft, metas: Sequence[Mapping[str, Any]]) -> None:
    words = " ".join(_cmd_words(metas[i]) for i in d.members)
    t, e = TRAINER_WORDS.search(words), ENGINE_WORDS.search(words)
    if t and not e:
        d.add(Role.TRAINER, W_WORDS, f"'{t.group(0)}' in its command line")
    if e and not t:
        d.add(Role.ENGINE, W_WORDS, f"'{e.group(0)}' in its command line")


def _role(d: _Draft, n_worlds: int) -> tuple[Role, tuple[str, ...]]:
    why = tuple(p for _, p in sorted(d.why, key=lambda x: -x[0]))
    if d.trainer > d.engine:
        return Role.TRAINER, why
    if d.engine > d.trainer:
        return Role.ENGINE, why
    if n_worlds == 1 and not d.engine:
        return Role.TRAINER, (*why, "the run's only world")
    return Role.OTHER, why
