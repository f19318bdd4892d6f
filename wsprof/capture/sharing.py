"""Tensors shared with other processes: weight buckets sent by CUDA IPC or shared memory.

Colocated weight sync (slime ``--colocate``'s ``UpdateWeightFromTensor``, verl's naive checkpoint
engine, OpenRLHF colocate, SGLang's ``update_weights_from_tensor``, vLLM's IPC weight transfer)
moves no tensor through a collective: the trainer pickles its buckets with torch's
``ForkingPickler``, which hands out a handle to each storage (a CUDA IPC handle, a shared-memory
fd or file), and the engine opens the handles. A sent bucket that stays alive (a list that
keeps it, torch's CUDA IPC cache before ``torch.cuda.ipc_collect()``, a handle opened twice and
closed once) is the leak class five projects fixed by hand (slime #1731, SGLang #4446 and
#17870, vLLM #51258, TensorRT-LLM #16144, miles #3147).

Hooked, where every path ends (each original kept, put back by :func:`uninstall`):

* exports: ``torch.UntypedStorage._share_cuda_``, ``_share_fd_cpu_``, ``_share_filename_cpu_``:
  torch's ``reduce_tensor`` / ``reduce_storage``, SGLang's replaced reducers and code that
  captured the reducers early all end there. ``share_memory_()`` (a storage moved to shared
  memory in place, nothing sent) is not an export;
* which tensor: ``torch.multiprocessing.reductions.reduce_tensor``, as module attribute and as
  registered in ``ForkingPickler._extra_reducers``: a weak reference to the tensor, for the
  holder search;
* imports: ``torch.UntypedStorage._new_shared_cuda``, ``_new_shared_fd_cpu``,
  ``_new_shared_filename_cpu``: a handle opened (torch's ``rebuild_*`` functions return a
  storage still open from its cache without opening again); ``rebuild_tensor`` /
  ``rebuild_cuda_tensor`` (module attributes, looked up by name when unpickling) give the
  tensor;
* ``torch.cuda.ipc_collect``.

A hook only adds to the :class:`Ledger` (tens of µs go into sharing a storage; the ledger's
bookkeeping is a few µs, counted as ``wsprof.share_hook_us``): it never changes what is
pickled, what a call returns or raises. The ``sharing`` counter probe
(:func:`reading`, on the sampler thread, on its budget) sweeps the storages that died (C-level
weak references, :class:`torch.multiprocessing.reductions.StorageWeakRef`), records the
``share.*`` counters and ``proc.rss_shmem_bytes`` / ``proc.shm_files``, and when a storage
outlives many later exports looks for what holds it (:func:`holder_path`, a bounded walk of
``gc.get_referrers``, at most :data:`MAX_HOLDER_SEARCHES` times per side and process).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wsprof.contracts.counters import proc_counter, share_counter, share_side_counters
from wsprof.contracts.events import EventKind, ShareHolder, ShareSite

if TYPE_CHECKING:
    from wsprof.capture.recorder import Recorder

Reading = list[tuple[str, float]]

#: UntypedStorage methods that hand out a storage's handle (an export), and their device.
EXPORT_METHODS = ("_share_cuda_", "_share_fd_cpu_", "_share_filename_cpu_")
#: UntypedStorage class methods that open a handle (an import).
IMPORT_METHODS = ("_new_shared_cuda", "_new_shared_fd_cpu", "_new_shared_filename_cpu")
#: The UntypedStorage class method torch's ``rebuild_*`` functions take an open storage from
#: their cache with: a handle rebuilt while an earlier open of it is alive (opened twice).
REOPEN_METHOD = "_new_with_weak_ptr"
#: Live exports or imports tracked at most; beyond, they are counted but not tracked (a leak
#: is named long before: a bucket a step).
MAX_TRACKED = 100_000
#: Distinct sites reported as :class:`ShareSite` events at most, per process.
MAX_SITES = 64
#: A storage is looked at for a holder once this many later storages were shared (or
#: opened) while it stayed alive: a sync sends a few buckets and drops them; a kept bucket
#: outlives every later one.
HOLD_AFTER = 16
#: ...and once it is this old, s.
HOLD_AFTER_S = 2.0
#: A share starts a new update (a weight version's buckets) after a pause this many times the
#: usual gap between the shares of one update (its moving average), and at least
#: :data:`BURST_MIN_GAP_S`: buckets of one update follow each other within the engine's load
#: time; updates are a rollout and a training step apart.
BURST_GAP_RATIO = 5.0
BURST_MIN_GAP_S = 0.05
#: The gap average's start and weight.
BURST_GAP_START_S = 0.02
BURST_GAP_EMA = 0.2
#: Holder searches per side and process at most (each walks the heap a few times).
MAX_HOLDER_SEARCHES = 3
#: Least seconds between two holder searches of one side.
HOLDER_SEARCH_EVERY_S = 5.0
#: Deepest referrer chain walked, and most referrers looked at per level.
HOLDER_MAX_DEPTH = 10
HOLDER_MAX_REFERRERS = 64
#: Most passes over the collector's objects one holder search makes.
HOLDER_MAX_WALKS = 24

_now = time.monotonic_ns
_STDLIB_SKIP = ("pickle.py", "copyreg.py", os.sep + "multiprocessing" + os.sep)
_WSPROF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class _Entry:
    """One live exported or imported storage."""

    seq: int
    nbytes: int
    t_ns: int
    weak: Any  # StorageWeakRef
    site: str | None
    tensor: Any = None  # weakref.ref to a tensor on the storage, when known


class _Side:
    """Exports or imports of one process: totals and the storages still alive."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.n = 0
        self.bytes = 0
        self.ns = 0
        self.live: dict[tuple[str, int, int], _Entry] = {}  # storage key -> entry
        self.untracked = 0
        self.searches = 0
        self.last_search_ns = 0
        self.searched: set[tuple[str, int, int]] = set()  # keys already searched
        # the update (burst of shares) in progress: its last share, count and bytes
        self.last_ns = 0
        self.gap_ema_ns = float(BURST_GAP_START_S * 1e9)
        self.burst_n = 0
        self.burst_bytes = 0
        self.burst_first_ns = 0
        self.burst_ns = 0  # time inside this update's share (open) calls
        self.names = share_side_counters(name)

    def new_share(self, t_ns: int, nbytes: int, took_ns: int) -> list[tuple[int, str, float]]:
        """Book one share (or open) at ``t_ns`` that took ``took_ns``; when it starts a new
        update (a gap of :data:`BURST_GAP_RATIO` times the usual gap between shares of one
        update, and at least :data:`BURST_MIN_GAP_S`), the counters of the update that ended,
        stamped at its last share: what of every earlier update is still alive now
        (``kept_bytes``), its shares, bytes, time in the calls and span."""
        out: list[tuple[int, str, float]] = []
        gap = t_ns - self.last_ns
        if self.burst_n and gap > max(BURST_MIN_GAP_S * 1e9, BURST_GAP_RATIO * self.gap_ema_ns):
            _, kept = self.sweep()
            out = [(self.last_ns, self.names.kept, float(kept)), *self.update_rows()]
            self.burst_n = self.burst_bytes = self.burst_ns = 0
        elif self.burst_n:
            self.gap_ema_ns += BURST_GAP_EMA * (gap - self.gap_ema_ns)
        if not self.burst_n:
            self.burst_first_ns = t_ns
        self.last_ns = t_ns
        self.burst_n += 1
        self.burst_bytes += nbytes
        self.burst_ns += took_ns
        self.n += 1
        self.bytes += nbytes
        self.ns += took_ns
        return out

    def update_rows(self) -> list[tuple[int, str, float]]:
        """The update in progress's counters (shares, bytes, µs in the calls, span µs),
        stamped at its last share; empty when none is."""
        if not self.burst_n:
            return []
        c, t = self.names, self.last_ns
        return [
            (t, c.update_count, float(self.burst_n)),
            (t, c.update_bytes, float(self.burst_bytes)),
            (t, c.update_us, self.burst_ns / 1e3),
            (t, c.update_span_us, (self.last_ns - self.burst_first_ns) / 1e3),
        ]

    def add(self, cdata: tuple[str, int, int], entry: _Entry) -> bool:
        """Track a storage; False when it was already tracked (shared again)."""
        old = self.live.get(cdata)
        if old is not None and not old.weak.expired():
            return False
        if len(self.live) >= MAX_TRACKED:
            self.untracked += 1
            return True
        self.live[cdata] = entry
        return True

    def sweep(self) -> tuple[int, int]:
        """Drop the storages that died; ``(alive, alive_bytes)``."""
        dead = [k for k, e in self.live.items() if e.weak.expired()]
        for k in dead:
            del self.live[k]
            self.searched.discard(k)
        return len(self.live), sum(e.nbytes for e in self.live.values())


class Ledger:
    """Every export, import and ``ipc_collect`` of this process (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.exports = _Side("export")
        self.imports = _Side("import")
        self.seq = 0
        self.reopens = 0
        self.ipc_collects = 0
        self.since_collect = 0
        self.hook_ns = 0
        self.sites: dict[str, str] = {}  # site -> side, for the events
        #: handle -> the live storage its last open made (a second mapping of a handle still
        #: open is a double open torch's cache did not catch)
        self.handles: dict[Any, tuple[str, int, int]] = {}
        self.active = False
        self.shm_total_sent = False


@dataclass
class _State:
    recorder: Recorder | None = None
    ledger: Ledger | None = None


_STATE = _State()
_TLS = threading.local()
#: What install replaced: (owner, attribute, what was in its own __dict__ or _ABSENT, the
#: hook put there).
_replaced: list[tuple[Any, Any, Any, Any]] = []
_ABSENT = object()


def _storage_weak(storage: Any) -> Any:
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(storage)  # type: ignore[no-untyped-call]


def _key(storage: Any) -> tuple[str, int, int]:
    """What identifies a live storage: its device and data pointer (a new weak reference
    is a new number each time)."""
    d = storage.device
    return (str(d.type), d.index if d.index is not None else -1, int(storage.data_ptr()))


def _fmt(code: types.CodeType, line: int | None) -> str:
    name = getattr(code, "co_qualname", code.co_name)  # 3.11+
    return f"{name} ({os.path.basename(code.co_filename)}:{line})"


#: Where torch's DataLoader lives: a batch a worker sends to the training process travels by
#: shared memory like a weight bucket, and is no weight sync (never recorded).
_DATA_DIR = os.sep + os.path.join("torch", "utils", "data") + os.sep


def _in_data_worker() -> bool:
    """Whether this process is a DataLoader worker (its batches go by shared memory)."""
    worker = sys.modules.get("torch.utils.data._utils.worker")
    return getattr(worker, "_worker_info", None) is not None


def _sites(depth: int) -> tuple[str | None, str | None, bool]:
    """The first two frames outside torch, wsprof and the pickler, ``function (file:line)``,
    and whether the share is a DataLoader's (a frame of ``torch/utils/data`` below them)."""
    torch_mod = sys.modules.get("torch")
    torch_dir = os.path.dirname(getattr(torch_mod, "__file__", "") or "") or "\0"
    out: list[str] = []
    data = False
    f: types.FrameType | None = sys._getframe(depth)
    while f is not None and len(out) < 2:
        fn = f.f_code.co_filename
        if fn.startswith(torch_dir):
            data = data or (not out and _DATA_DIR in fn)
        elif not (fn.startswith(_WSPROF_DIR) or fn.endswith(_STDLIB_SKIP)) and not any(
            s in fn for s in _STDLIB_SKIP[2:]
        ):
            out.append(_fmt(f.f_code, f.f_lineno))
        f = f.f_back
    return (out[0] if out else None), (out[1] if len(out) > 1 else None), data


def _pending_tensor(key: tuple[str, int, int]) -> Any:
    """A weak reference to the tensor ``reduce_tensor`` last took in this thread when its
    storage is ``key`` now (sharing to a file moves a CPU storage: compared after), else
    None."""
    ref = getattr(_TLS, "tensor", None)
    t = ref() if ref is not None else None
    if t is None:
        return None
    try:
        return ref if _key(t.untyped_storage()) == key else None
    finally:
        del t


def _note_site(
    led: Ledger, side: str, api: str, device: str, nbytes: int, where: tuple[str | None, str | None]
) -> str | None:
    """Record a :class:`ShareSite` event the first time a site shares (opens); its site."""
    site, caller = where
    if site is None or site in led.sites or len(led.sites) >= MAX_SITES:
        return site
    led.sites[site] = side
    rec = _STATE.recorder
    if rec is not None:
        ev = ShareSite(side=side, api=api, device=device, nbytes=nbytes, site=site, caller=caller)
        rec.event(EventKind.SHARE_SITE, ev.encode())
    return site


def _handle_key(api: str, args: tuple[Any, ...]) -> Any:
    """What identifies the handle an open maps: the CUDA IPC handle and the storage's offset
    in its allocation, the shared-memory file's name, the fd's file (inode); None if unknown."""
    if api == "_new_shared_cuda" and len(args) > 3:
        return ("cuda", args[1], args[3])
    if api == "_new_shared_filename_cpu" and len(args) > 1:
        return ("file", args[1])
    if api == "_new_shared_fd_cpu" and args and type(args[0]) is int:
        st = os.fstat(args[0])
        return ("fd", st.st_ino, st.st_dev)
    return None


def _record(
    side_name: str, storage: Any, api: str, took_ns: int, args: tuple[Any, ...] = ()
) -> None:
    """Book one export (``side_name`` ``export``: ``storage`` shared) or import (``import``:
    ``storage`` opened, ``args`` the open's): its update, site, live entry, and for an
    import a handle mapped again while its first open is alive (``reopens``). Called from
    the hooks only (the site is their caller's caller). Never raises."""
    t0 = _now()
    led = _STATE.ledger
    export = side_name == "export"
    if led is None or (export and getattr(_TLS, "in_share_memory", False)):
        return
    try:
        site, caller, data = _sites(3)
        if data or _in_data_worker():
            return  # a DataLoader's batch, not a weight bucket
        nbytes = int(storage.nbytes())
        device = str(storage.device.type)
        weak = _storage_weak(storage)
        cdata = _key(storage)
        tensor = _pending_tensor(cdata) if export else None
        hkey = None if export else _handle_key(api, args)
        with led.lock:
            led.active = True
            led.seq += 1
            side = led.exports if export else led.imports
            if hkey is not None:
                prev = led.handles.get(hkey)
                e = side.live.get(prev) if prev is not None else None
                if prev != cdata and e is not None and not e.weak.expired():
                    led.reopens += 1  # a second mapping while the first is open
                if len(led.handles) < MAX_TRACKED:
                    led.handles[hkey] = cdata
            burst = side.new_share(t0, nbytes, took_ns)
            site = _note_site(led, side_name, api, device, nbytes, (site, caller))
            side.add(cdata, _Entry(led.seq, nbytes, t0, weak, site, tensor))
            if export and device == "cuda":
                led.since_collect += 1
            _emit(burst)
            led.hook_ns += _now() - t0
    except Exception as e:  # noqa: BLE001 - never raise into training
        _internal(f"sharing.{side_name}", e)


def _emit(rows: list[tuple[int, str, float]]) -> None:
    """Queue counter rows on the recorder (an update's counters, at its end)."""
    rec = _STATE.recorder
    if rows and rec is not None:
        for row in rows:
            rec.counters.append(row)


def _internal(where: str, e: BaseException) -> None:
    rec = _STATE.recorder
    if rec is not None:
        with contextlib.suppress(Exception):
            rec.internal_error(where, e)


def _export_hook(orig: Callable[..., Any], api: str) -> Callable[..., Any]:
    @functools.wraps(orig)
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = _now()
        out = orig(self, *args, **kwargs)
        _record("export", self, api, _now() - t0)
        return out

    return hook


def _import_hook(orig: Callable[..., Any], api: str) -> Any:
    def hook(cls: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = _now()
        out = orig(*args, **kwargs)
        _record("import", out, api, _now() - t0, args)
        return out

    functools.update_wrapper(hook, orig)
    return classmethod(hook)


def _share_memory_hook(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
        was = getattr(_TLS, "in_share_memory", False)
        _TLS.in_share_memory = True
        try:
            return orig(self, *args, **kwargs)
        finally:
            _TLS.in_share_memory = was

    return hook


def _reduce_tensor_hook(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def reduce_tensor(tensor: Any) -> Any:
        if _STATE.ledger is not None:
            try:
                _TLS.tensor = weakref.ref(tensor)
            except Exception:  # noqa: BLE001 - a tensor without storage or weakref support
                _TLS.tensor = None
        return orig(tensor)

    return reduce_tensor


def _reopen_hook(orig: Callable[..., Any]) -> Any:
    """A hook on ``UntypedStorage._new_with_weak_ptr``: a storage this process opened, taken
    again from torch's cache while still alive, is a handle opened twice (``reopens``)."""

    def hook(cls: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        led = _STATE.ledger
        if led is not None and led.imports.live:
            try:
                e = led.imports.live.get(_key(out))
                if e is not None and not e.weak.expired():
                    with led.lock:
                        led.reopens += 1
            except Exception as err:  # noqa: BLE001 - never raise into training
                _internal("sharing.reopen", err)
        return out

    functools.update_wrapper(hook, orig)
    return classmethod(hook)


def _ipc_collect_hook(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def ipc_collect(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        led = _STATE.ledger
        if led is not None:
            with led.lock:
                led.active = True
                led.ipc_collects += 1
                led.since_collect = 0
        return out

    return ipc_collect


def _replace(owner: Any, name: str, new: Any) -> None:
    _replaced.append((owner, name, owner.__dict__.get(name, _ABSENT), new))
    setattr(owner, name, new)


def _current(owner: Any, name: str) -> Any:
    if isinstance(owner, dict):
        return owner.get(name, _ABSENT)
    return owner.__dict__.get(name, _ABSENT)


def install(recorder: Recorder) -> list[str]:
    """Hook tensor sharing (see the module docstring) and record into ``recorder``'s ledger.
    Installing again first uninstalls. Never raises: what cannot be hooked is skipped (and
    an internal error in the trace).

    Returns:
        The names hooked (``UntypedStorage._share_fd_cpu_``, ...).
    """
    uninstall()
    _STATE.recorder = recorder
    _STATE.ledger = Ledger()
    hooked: list[str] = []
    try:
        from multiprocessing.reduction import ForkingPickler

        import torch
        from torch.multiprocessing import reductions
    except Exception as e:  # noqa: BLE001 - no torch: nothing to share
        _internal("sharing.install", e)
        return hooked
    storage_cls = torch.UntypedStorage
    for name in EXPORT_METHODS:
        orig = getattr(storage_cls, name, None)
        if orig is not None:
            _replace(storage_cls, name, _export_hook(orig, name))
            hooked.append(f"UntypedStorage.{name}")
    sm = getattr(storage_cls, "share_memory_", None)
    if sm is not None:
        _replace(storage_cls, "share_memory_", _share_memory_hook(sm))
    for name in IMPORT_METHODS:
        orig = getattr(storage_cls, name, None)  # bound to the class
        if orig is not None:
            _replace(storage_cls, name, _import_hook(orig, name))
            hooked.append(f"UntypedStorage.{name}")
    rt = getattr(reductions, "reduce_tensor", None)
    if callable(rt):
        new_rt = _reduce_tensor_hook(rt)
        _replace(reductions, "reduce_tensor", new_rt)
        reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
        for cls, fn in list(reducers.items()):
            if fn is rt:
                _replaced.append((reducers, cls, fn, new_rt))
                reducers[cls] = new_rt
        hooked.append("reductions.reduce_tensor")
    reopen = getattr(storage_cls, REOPEN_METHOD, None)
    if reopen is not None:
        _replace(storage_cls, REOPEN_METHOD, _reopen_hook(reopen))
        hooked.append(f"UntypedStorage.{REOPEN_METHOD}")
    cuda = getattr(torch, "cuda", None)
    orig_collect = getattr(cuda, "ipc_collect", None)
    if callable(orig_collect):
        _replace(cuda, "ipc_collect", _ipc_collect_hook(orig_collect))
        hooked.append("torch.cuda.ipc_collect")
    return hooked


def record_update_in_progress() -> None:
    """Record the update in progress (its shares, bytes and times: the last weight
    version's), at the end of the session (its next update would have recorded it). Never
    raises."""
    led = _STATE.ledger
    if led is not None and _STATE.recorder is not None:
        with contextlib.suppress(Exception), led.lock:
            _emit(led.exports.update_rows() + led.imports.update_rows())
            led.exports.burst_n = led.imports.burst_n = 0


def uninstall(record: bool = True) -> None:
    """Put every original back where wsprof's hook still is (a framework that patched the
    same name after wsprof, as SGLang's ``monkey_patch_torch_reductions`` does, keeps its
    patch: it calls wsprof's hook, which records nothing once uninstalled); the ledger is
    dropped, after recording the update in progress (:func:`record_update_in_progress`) when
    ``record`` (a forked child forgetting its parent's recorder passes False). Never raises."""
    if record:
        record_update_in_progress()
    while _replaced:
        owner, name, was, ours = _replaced.pop()
        with contextlib.suppress(Exception):
            if _current(owner, name) is not ours:
                continue
            if isinstance(owner, dict):
                owner[name] = was
            elif was is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, was)
    _STATE.recorder = None
    _STATE.ledger = None


# ----------------------------------------------------------------------------- the probe


def _rss_shmem() -> Reading:
    """``proc.rss_shmem_bytes`` (``RssShmem`` of /proc/self/status); empty where /proc does
    not tell."""
    out: Reading = []
    with (
        contextlib.suppress(OSError, ValueError),
        open("/proc/self/status", encoding="ascii", errors="replace") as f,
    ):
        for line in f:
            if line.startswith("RssShmem:"):
                out.append((proc_counter("rss_shmem_bytes"), float(int(line.split()[1]) * 1024)))
                break
    return out


def shm_files() -> Reading:
    """The ``shm_files`` probe: ``proc.shm_files``, the distinct /dev/shm files the process
    maps or holds open (its cost grows with the mappings and fds: a probe of its own, on its
    budget); nothing until the process shared or opened a tensor."""
    led = _STATE.ledger
    if led is None or not led.active:
        return []
    out: Reading = []
    files: set[str] = set()
    with contextlib.suppress(OSError):
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                i = line.find("/dev/shm/")
                if i >= 0:
                    files.add(line[i:].strip())
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    files.add(target)
        out.append((proc_counter("shm_files"), float(len(files))))
    return out


def reading() -> Reading:
    """The ``sharing`` probe: the ``share.*`` counters now (nothing until this process
    shared or opened a tensor), shared memory in the RSS and the /dev/shm files."""
    led = _STATE.ledger
    if led is None or not led.active:
        return []
    with led.lock:
        ex_alive, ex_bytes = led.exports.sweep()
        im_alive, im_bytes = led.imports.sweep()
        if len(led.handles) > 2 * im_alive + 64:  # forget handles whose open was closed
            live = led.imports.live
            led.handles = {h: k for h, k in led.handles.items() if k in live}
        out: Reading = [
            (share_counter("exports"), float(led.exports.n)),
            (share_counter("exported_bytes"), float(led.exports.bytes)),
            (share_counter("alive_exports"), float(ex_alive)),
            (share_counter("alive_bytes"), float(ex_bytes)),
            (share_counter("export_us"), led.exports.ns / 1e3),
            (share_counter("imports"), float(led.imports.n)),
            (share_counter("imported_bytes"), float(led.imports.bytes)),
            (share_counter("imported_alive_bytes"), float(im_bytes)),
            (share_counter("import_us"), led.imports.ns / 1e3),
            (share_counter("reopens"), float(led.reopens)),
            (share_counter("ipc_collects"), float(led.ipc_collects)),
            (share_counter("exports_since_collect"), float(led.since_collect)),
            ("wsprof.share_hook_us", led.hook_ns / 1e3),
        ]
        sent = led.shm_total_sent
        led.shm_total_sent = True
    out += _rss_shmem()
    if not sent:
        with contextlib.suppress(OSError):
            st = os.statvfs("/dev/shm")
            out.append((proc_counter("shm_total_bytes"), float(st.f_blocks * st.f_frsize)))
    return out


def search_holders() -> Reading:
    """The ``share_holders`` probe: for each side whose oldest live storage outlived
    :data:`HOLD_AFTER` later ones, name its holder (:func:`holder_path`) in a
    :class:`ShareHolder` event. A probe of its own, so that a costly walk throttles itself
    (its budget), never the ``share.*`` counters. Records no counter."""
    led = _STATE.ledger
    if led is None or not led.active:
        return []
    with led.lock:
        todo = [s for s in (led.exports, led.imports) if _due(s, led.seq)]
    for side in todo:
        _search(led, side)
    return []


def _due(side: _Side, seq: int) -> bool:
    if side.searches >= MAX_HOLDER_SEARCHES or not side.live:
        return False
    if _now() - side.last_search_ns < HOLDER_SEARCH_EVERY_S * 1e9 and side.searches:
        return False
    oldest = min(side.live.values(), key=lambda e: e.seq)
    return seq - oldest.seq >= HOLD_AFTER and _now() - oldest.t_ns >= HOLD_AFTER_S * 1e9


def _search(led: Ledger, side: _Side) -> None:
    """Name what holds the oldest storage of ``side`` still alive, as a :class:`ShareHolder`
    event (once the entry is picked, outside the ledger's lock: the walk takes ms)."""
    with led.lock:
        entries = sorted(
            (e for k, e in side.live.items() if k not in side.searched and not e.weak.expired()),
            key=lambda e: e.seq,
        )
        if not entries:
            return
        entry = entries[0]
        key = next(k for k, e in side.live.items() if e is entry)
        side.searched.add(key)
        side.searches += 1
        side.last_search_ns = _now()
        alive = len(side.live)
        alive_bytes = sum(e.nbytes for e in side.live.values())
    t0 = time.perf_counter()
    tensor = entry.tensor() if entry.tensor is not None else None
    if tensor is None:
        tensor = _tensor_on(key)
    path = holder_path(tensor) if tensor is not None else None
    del tensor
    rec = _STATE.recorder
    if rec is not None:
        ev = ShareHolder(
            side=side.name,
            path=path,
            nbytes=entry.nbytes,
            alive=alive,
            alive_bytes=alive_bytes,
            site=entry.site,
            search_ms=(time.perf_counter() - t0) * 1e3,
        )
        rec.event(EventKind.SHARE_HOLDER, ev.encode())


def _tensor_on(key: tuple[str, int, int]) -> Any:
    """A tensor on the storage ``key`` among the collector's objects, or None: where no hook
    saw the tensor (an engine's rebuilt tensors; a reducer a framework registered itself).
    One pass over the collector's objects (a holder search makes several anyway)."""
    torch_mod = sys.modules.get("torch")
    tensor_cls = getattr(torch_mod, "Tensor", None)
    if tensor_cls is None:
        return None
    for o in gc.get_objects():
        if issubclass(type(o), tensor_cls):
            with contextlib.suppress(Exception):
                if _key(o.untyped_storage()) == key:
                    return o
    return None


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _is(obj: Any, kinds: Any) -> bool:
    """``isinstance`` by the object's real type: never a user ``__class__`` or
    ``__getattribute__``."""
    return issubclass(type(obj), kinds)


def _attr_of(child: Any, parent: Any) -> str | None:
    """The attribute of ``parent`` (an instance: its ``__dict__``, its slots) that is
    ``child``; reads them as ``object`` does, never through a user ``__getattr__``."""
    with contextlib.suppress(Exception):
        d = object.__getattribute__(parent, "__dict__")
        if _is(d, dict):
            for k, v in dict.items(d):
                if v is child:
                    return k if _is(k, str) else _label(k)
    for cls in type(parent).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for k in (slots,) if _is(slots, str) else slots:
            desc = cls.__dict__.get(k)
            with contextlib.suppress(Exception):
                if desc is not None and desc.__get__(parent, cls) is child:
                    return str(k)
    return None


def _module_name(module: Any) -> str:
    return str(dict.get(object.__getattribute__(module, "__dict__"), "__name__", "?"))


def _label(key: Any) -> str:
    """A dict key as the path shows it: the value of a str, int or bool key, else its type
    (a tensor key would print the tensor, a user key's ``__repr__`` may raise)."""
    if type(key) in (str, int, bool, float) or key is None:
        return repr(key)
    return f"<{type(key).__qualname__}>"


def _key_of(child: Any, parent: Any) -> str | None:
    """How the container ``parent`` holds ``child``: ``[3]``, ``['key']``, ``{…}``; by the
    built-in types' own methods (a subclass's ``items`` or ``__iter__`` is never called)."""
    if _is(parent, dict):
        for k, v in dict.items(parent):
            if v is child:
                return f"[{_label(k)}]"
        return None
    if _is(parent, (list, tuple)):
        seq = list.__iter__(parent) if _is(parent, list) else tuple.__iter__(parent)
        for i, v in enumerate(seq):
            if v is child:
                return f"[{i}]"
        return None
    return "{…}"


def holder_path(target: Any) -> str | None:
    """The path from a named root to ``target``: an attribute chain from the first instance
    of a class that is not a container (``UpdateWeightFromTensor.long_lived_tensors[62]
    ['flattened_tensor']``), or a module global (``mymod.CACHE[3]``). Walks
    ``gc.get_referrers`` upwards, depth first (:data:`HOLDER_MAX_DEPTH` levels,
    :data:`HOLDER_MAX_WALKS` passes over the collector's objects at most); frames, cells and
    the walk's own lists are not holders.

    Returns:
        The path, or None when nothing in Python holds ``target`` within those bounds (only
        C++, a frame's local or torch's caches do).
    """
    keep: list[Any] = []  # the walk's own lists, alive till the end so that no id is reused
    walk = _Walk(keep, {id(keep)})
    try:
        found = walk.up(target, 0)
        return None if found is None else found[0] + "".join(found[1])
    finally:
        del keep[:]


class _Walk:
    """One holder search's state: its own lists (``keep``, ``own``), what it visited."""

    def __init__(self, keep: list[Any], own: set[int]) -> None:
        self.keep = keep
        self.own = own
        self.seen: set[int] = set()
        self.walks = 0

    def referrers(self, obj: Any) -> list[Any]:
        self.walks += 1
        refs = gc.get_referrers(obj)
        self.keep.append(refs)
        self.own.add(id(refs))
        return refs

    def up(self, child: Any, depth: int) -> tuple[str, list[str]] | None:
        """(root name, parts from ``child`` up) of a path to a named root, or None."""
        if depth >= HOLDER_MAX_DEPTH or self.walks >= HOLDER_MAX_WALKS:
            return None
        self.seen.add(id(child))
        for parent in self.referrers(child)[:HOLDER_MAX_REFERRERS]:
            if (
                id(parent) in self.own
                or id(parent) in self.seen
                or _is(parent, (types.FrameType, types.CellType))
            ):
                continue
            root: Any = None
            if _is(parent, dict):
                part = _key_of(child, parent)
                if part is None:
                    continue
                owner = self.dict_owner(parent)
                if owner is not None:
                    root = owner
                    name = next((k for k, v in dict.items(parent) if v is child), "?")
                    part = "." + (name if _is(name, str) else _label(name))
            elif _is(parent, _CONTAINERS):
                part = _key_of(child, parent)
                if part is None:
                    continue
            else:
                attr = _attr_of(child, parent)
                if attr is None:
                    continue
                root, part = parent, "." + attr
            if root is not None:
                name = (
                    _module_name(root) if _is(root, types.ModuleType) else type(root).__qualname__
                )
                return name, [part]
            found = self.up(parent, depth + 1)
            if found is not None:
                found[1].append(part)
                return found
            if self.walks >= HOLDER_MAX_WALKS:
                return None
        return None

    def dict_owner(self, d: dict[Any, Any]) -> Any:
        """The module or instance whose ``__dict__`` is ``d``, else None."""
        for o in self.referrers(d):
            if id(o) in self.own or _is(o, (types.FrameType, dict, list, tuple)):
                continue
            with contextlib.suppress(Exception):
                if object.__getattribute__(o, "__dict__") is d:
                    return o
        return None
