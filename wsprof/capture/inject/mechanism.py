"""How the bootstrap gets run inside a target: ``sys.remote_exec`` or gdb.

**gdb** (any CPython 3 the target runs): attach with shared-library symbols off (only libc and
libpython are read, so a process with torch's 1 GB of libraries is not paused while gdb reads
them), map one anonymous page in the target (``mmap``: no allocator lock is taken, so a thread
stopped inside ``malloc`` cannot deadlock it), poke the 1-line program into it byte by byte,
and queue ``PyRun_SimpleString`` on it with ``Py_AddPendingCall``, which may be called without
the GIL from any thread. gdb detaches; the target's main thread runs the call at its next
safe point, holding the GIL, as it runs a signal handler. The page (4 KiB) stays mapped.

**sys.remote_exec** (Python >= 3.14 on both sides, PEP 768): the interpreter's own safe-point
hook runs the bootstrap file; no debugger, no pause.

The 1-line program (:func:`program`) checks the injector's private folder and the bootstrap
file in it (owner, mode, no symlink) and runs the bytes it checked; nothing else is ever
written into the target.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

#: mmap's arguments for one private anonymous read-write page (Linux: PROT_READ|PROT_WRITE,
#: MAP_PRIVATE|MAP_ANONYMOUS on x86-64 and aarch64).
PAGE_BYTES = 4096
PROT_RW = 0x3
MAP_PRIVATE_ANON = 0x22
#: The longest program written into the target (the page holds it with its NUL).
MAX_PROGRAM_BYTES = 1024
#: Seconds between two reads of the target's state while gdb holds it (pause measurement).
STATE_POLL_S = 0.0005
#: A path the 1-line program may name: no quote, backslash or control character can end up
#: in the target (the folder is the injector's own, made by tempfile in its 0700 parent).
SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+-]+$")


class InjectFailed(Exception):
    """The mechanism could not queue the bootstrap; the message says why and what to do."""


@dataclass(frozen=True)
class Queued:
    """The bootstrap was queued in the target.

    Attributes:
        mechanism: ``gdb`` or ``remote_exec``.
        pause_s: how long the target was stopped (``/proc/<pid>/stat`` state ``t``, polled
            every :data:`STATE_POLL_S`), s; 0 for ``remote_exec``.
        wall_s: the mechanism's own time (gdb's start to its exit), s.
    """

    mechanism: str
    pause_s: float
    wall_s: float


#: What the 1-line program runs (in a namespace of its own: nothing is bound in the target's
#: ``__main__``): open the parent folder, the injection's folder and the bootstrap each with
#: ``O_NOFOLLOW`` relative to the one before (no symlink, no path swapped between check and
#: use; each descriptor closed once the next is open), ``fstat`` each (a folder, a regular
#: file; owner the injector's uid or root; neither group nor others may write), read the
#: bootstrap from the descriptor it checked (at most 1 MiB) and run those bytes. Any
#: failure raises inside and is swallowed: nothing runs.
_CHECKER = (
    "import os,stat as S\n"
    "F=os.O_RDONLY|os.O_NOFOLLOW|os.O_CLOEXEC|os.O_NONBLOCK\n"
    "def o(p,d,k):\n"
    " try:f=os.open(p,F,dir_fd=d)\n"
    " finally:\n"
    "  if d is not None:os.close(d)\n"
    " s=os.fstat(f)\n"
    " if k(s.st_mode) and s.st_uid in(0,{uid}) and not s.st_mode&18:return f\n"
    " os.close(f);raise OSError\n"
    "a=o('{parent}',None,S.S_ISDIR)\n"
    "b=o('{name}',a,S.S_ISDIR)\n"
    "c=o('{boot}',b,S.S_ISREG)\n"
    "with open(c,'rb') as h:t=h.read(1<<20)\n"
    "p='{parent}/{name}/{boot}'\n"
    "exec(compile(t,p,'exec'),{{'__name__':'__wsprof_inject__','__file__':p}})\n"
)


def program(folder: str, uid: int, boot_name: str = "bootstrap.py") -> str:
    """The 1-line program run in the target: checks the injection's ``folder``, its parent
    and the bootstrap file in it (owner ``uid`` or root, no group/other write, no symlink:
    :data:`_CHECKER`) and runs the bytes it checked; nothing escapes into the target.

    Args:
        folder: the injection's private folder (absolute; in the injector's 0700 parent).
        uid: the injector's effective uid (besides root, the only owner trusted).
        boot_name: the bootstrap's file name in ``folder``.

    Raises:
        InjectFailed: the path is not one this module writes into a target, or the program
            would not fit in :data:`MAX_PROGRAM_BYTES`.
    """
    parent, name = os.path.split(folder.rstrip("/"))
    if (
        not SAFE_PATH.fullmatch(folder)
        or not (parent and name)
        or "/" in boot_name
        or ".." in folder
    ):
        raise InjectFailed(f"unsafe injection folder {folder!r}")
    if not SAFE_PATH.fullmatch("/" + boot_name) or not isinstance(uid, int) or uid < 0:
        raise InjectFailed(f"unsafe bootstrap name {boot_name!r} or uid {uid!r}")
    inner = _CHECKER.format(parent=parent, name=name, boot=boot_name, uid=int(uid))
    # A try without ``as`` binds no name in the target's __main__, and nothing escapes: an
    # exception out of a pending call would make the job's next bytecode raise SystemError
    # (a withdrawn request, or a folder that fails a check, must be a no-op).
    text = f"try:\n exec({inner!r},{{}})\nexcept BaseException:\n pass\n"
    if len(text) + 1 > MAX_PROGRAM_BYTES:
        raise InjectFailed(
            "the injection folder's path is too long; set XDG_RUNTIME_DIR or TMPDIR to a "
            "shorter folder"
        )
    return text


def gdb_commands(text: str, addrs: dict[str, int] | None = None) -> list[str]:
    """gdb's commands that map a page in the target, write ``text`` into it and queue it.

    Args:
        text: the program (:func:`program`).
        addrs: the addresses of ``mmap``, ``Py_AddPendingCall`` and ``PyRun_SimpleString`` in
            the target (:func:`wsprof.capture.inject.elf.addresses`): called through typed
            pointers, with no symbol read; None: by name (gdb reads libc's and libpython's
            symbols while the target is stopped).
    """
    data = text.encode("ascii") + b"\0"
    if addrs is not None:
        mmap = f"((void *(*)(void *, unsigned long, int, int, int, long)) {addrs['mmap']:#x})"
        pending = f"((int (*)(void *, void *)) {addrs['Py_AddPendingCall']:#x})"
        run = f"((void *) {addrs['PyRun_SimpleString']:#x})"
    else:
        mmap, pending, run = (
            "(char *) mmap",
            "(int) Py_AddPendingCall",
            "(void *) PyRun_SimpleString",
        )
    cmds = [
        "set confirm off",
        "set pagination off",
        # A signal that reaches the target while gdb holds it is passed on, never stops the
        # call; only the thread gdb calls on runs during the call; a signal inside it
        # unwinds the call instead of leaving the thread in it.
        "handle all nostop noprint pass",
        "set scheduler-locking on",
        "set unwindonsignal on",
        f"set $wsprof_page = {mmap}(0, {PAGE_BYTES}, {PROT_RW}, {MAP_PRIVATE_ANON}, -1, 0)",
        'printf "wsprof-page %lu\\n", (unsigned long) $wsprof_page',
    ]
    cmds += [f"set {{char}}($wsprof_page + {i}) = {b}" for i, b in enumerate(data)]
    cmds += [
        f'printf "wsprof-queued %d\\n", (int) {pending}({run}, $wsprof_page)',
        "detach",
        "quit",
    ]
    return cmds


def find_gdb() -> str | None:
    """gdb on PATH (``$WSPROF_GDB`` is read by the settings, not here)."""
    return shutil.which("gdb")


def state_of(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``R``, ``S``, ``T``, ``Z``...), None when gone."""
    return _state(pid)


def running(pid: int) -> bool:
    """Whether ``pid`` exists and has not exited (a zombie waiting to be reaped has)."""
    return _state(pid) not in (None, "Z", "X")


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    # The state follows the command name, which is in parentheses and may hold spaces.
    return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3].decode("ascii", "replace")


class _PauseWatch:
    """Polls the target's state while gdb runs: first and last time it was seen stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.first: float | None = None
        self.last: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="wsprof-pause")

    def _run(self) -> None:
        while not self._stop.is_set():
            if _state(self.pid) in ("t", "T"):
                now = time.perf_counter()
                self.first = now if self.first is None else self.first
                self.last = now
            time.sleep(STATE_POLL_S)

    def __enter__(self) -> _PauseWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def pause_s(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first + STATE_POLL_S


def tracer_of(pid: int) -> int:
    """The pid tracing ``pid`` (``TracerPid`` of its status), 0 when none."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _release(pid: int) -> None:
    """Never leave the target stopped: gdb killed while attached leaves the tracee to the
    kernel, which resumes it unless a stop signal is pending; SIGCONT settles that, but only
    once no tracer holds it (another injector's gdb may, and must be left alone)."""
    for _ in range(20):
        if _state(pid) not in ("t", "T") or tracer_of(pid) != 0:
            return
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            return
        time.sleep(0.01)


def queue_with_gdb(pid: int, text: str, gdb: str, timeout_s: float) -> Queued:
    """Queue the bootstrap in ``pid`` with gdb (module docstring).

    Args:
        pid: the target.
        text: the 1-line program (:func:`program`).
        gdb: the gdb binary.
        timeout_s: gdb is killed after this many seconds (the target is then resumed).

    Raises:
        InjectFailed: gdb could not attach, found no Python C API in the target, or timed out.
    """
    from wsprof.capture.inject.elf import addresses

    addrs = addresses(pid)
    cmds = gdb_commands(text, addrs)
    argv = [gdb, "-batch", "-nx", "-q", "-iex", "set auto-solib-add off"]
    if addrs is not None:  # no symbol file is read while the target is stopped
        argv += ["--readnever", "-p", str(pid)]
    else:
        argv += ["-p", str(pid), "-ex", "sharedlibrary libc\\.so", "-ex", "sharedlibrary libpython"]
    for c in cmds:
        argv += ["-ex", c]
    t0 = time.perf_counter()
    with _PauseWatch(pid) as watch:
        try:
            res = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            _release(pid)
            raise InjectFailed(
                f"gdb did not finish within {timeout_s:g} s; the target was resumed and "
                "nothing was queued"
            ) from e
        finally:
            _release(pid)
    wall = time.perf_counter() - t0
    out = res.stdout + res.stderr
    queued = re.search(r"wsprof-queued (-?\d+)", out)
    if queued is not None and queued.group(1) == "0":
        return Queued("gdb", watch.pause_s, wall)
    if "ptrace" in out and ("not permitted" in out or "Operation not permitted" in out):
        raise InjectFailed(
            f"gdb may not attach to pid {pid} (ptrace not permitted): run as its user with "
            "kernel.yama.ptrace_scope=0, or give the container CAP_SYS_PTRACE"
        )
    if "No symbol" in out and ("Py_AddPendingCall" in out or "PyRun_SimpleString" in out):
        raise InjectFailed(
            f"pid {pid} exports no Python C API (Py_AddPendingCall): not a CPython process, "
            "or a build without its symbols; inject into the Python processes of the job"
        )
    if "No symbol" in out and "mmap" in out:
        raise InjectFailed(f"gdb found no libc in pid {pid} (mmap); this target is unsupported")
    last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), "no output")
    raise InjectFailed(f"gdb could not queue the call in pid {pid}: {last.strip()}")


#: The probe's own target: a Python that lets any process of its user trace it (Yama's
#: ``PR_SET_PTRACER_ANY``: gdb is its sibling, not its parent), says ``ready`` and sleeps.
_PROBE_CHILD = (
    "import ctypes, time\n"
    "ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(2**64 - 1), 0, 0, 0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
#: What gdb says when it cannot restore a stopped thread's registers after a call.
_CALL_BROKEN = re.compile(r"Couldn't (?:write|get) (?:extended state status|registers)[^\n]*")


@functools.lru_cache(maxsize=4)
def gdb_call_problem(gdb: str, timeout_s: float = 20.0) -> str | None:
    """Why ``gdb`` cannot call a function in a process on this machine, or None when it can.

    Some gdb, kernel and CPU combinations cannot: gdb 13 on a kernel that exposes the CPU's
    AMX tile state (Sapphire Rapids and later hosts, Linux >= 5.16) sizes the extended register
    state it writes back from CPUID and the kernel refuses it ("Couldn't write extended state
    status: Bad address"); the call fails after the target was stopped, and a system call the
    target was blocked in can come back with an error it never expected. So before any
    target is touched, gdb calls ``getpid()`` in a throwaway Python process of our own
    (about 0.2-0.5 s, once per gdb binary and process).

    Args:
        gdb: the gdb binary.
        timeout_s: the probe's limit, s.

    Returns:
        One line (what failed and what to do), or None.
    """
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _PROBE_CHILD],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        if child.stdout is None or child.stdout.readline().strip() != "ready":
            return None  # the probe itself could not start: let the real attempt speak
        try:
            res = subprocess.run(
                [gdb, "-nx", "-batch", "-q", "-p", str(child.pid), "-ex", "call (int) getpid()"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        out = res.stdout + res.stderr
        if re.search(rf"= {child.pid}\b", out):
            return None
        broken = _CALL_BROKEN.search(out)
        if broken is None:
            return None  # another failure (ptrace, symbols): the real attempt names it
        version = subprocess.run(
            [gdb, "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
        ).stdout.split("\n", 1)[0]
        return (
            f"{version or gdb} cannot call functions in processes on this machine "
            f"({broken.group(0).rstrip('.')}: this gdb does not handle the CPU's AMX register "
            "state): install a newer gdb (15 or later), or start the job under `wsprof run`; "
            "nothing was injected"
        )
    finally:
        child.kill()
        child.wait()


def can_remote_exec(target_version: tuple[int, int] | None) -> bool:
    """Whether ``sys.remote_exec`` can run the bootstrap: this interpreter has it (Python
    >= 3.14) and the target runs the same major.minor."""
    return hasattr(sys, "remote_exec") and target_version == sys.version_info[:2]


def queue_with_remote_exec(pid: int, folder: str, text: str) -> Queued:
    """Queue the bootstrap with ``sys.remote_exec`` (PEP 768). The interpreter runs the file
    it is given with no ``__file__``: the launcher written beside the bootstrap (created new,
    never through a symlink) is the same 1-line program gdb writes, with the same checks.

    Raises:
        InjectFailed: the interpreter refused (remote debugging disabled in the target with
            ``PYTHON_DISABLE_REMOTE_DEBUG``, no permission, another build).
    """
    launcher = os.path.join(folder, "launch.py")
    fd = os.open(launcher, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "w", encoding="ascii") as fh:
        fh.write(text)
    t0 = time.perf_counter()
    try:
        sys.remote_exec(pid, launcher)  # type: ignore[attr-defined]
    except (OSError, RuntimeError, ValueError) as e:
        raise InjectFailed(f"sys.remote_exec({pid}) failed: {e}") from e
    return Queued("remote_exec", 0.0, time.perf_counter() - t0)
