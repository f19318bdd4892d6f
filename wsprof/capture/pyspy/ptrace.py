"""Why ptrace is denied: the kernel's and the container's rules, told in one line with the fix
(:func:`ptrace_problem`). Linux only; elsewhere it cannot tell."""

from __future__ import annotations

import os
import sys

import psutil

#: Bit of CAP_SYS_PTRACE in the capability masks of ``/proc/<pid>/status``.
CAP_SYS_PTRACE_BIT = 19
PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"
#: What each value of kernel.yama.ptrace_scope allows.
PTRACE_SCOPE_MEANING = {
    0: "classic: any process of the same user may attach",
    1: "restricted: a process may attach only to its own descendants",
    2: "admin-only: only processes with CAP_SYS_PTRACE may attach",
    3: "no attach: ptrace is disabled until reboot",
}
SYSCTL_FIX = "`sudo sysctl kernel.yama.ptrace_scope=0`"


def _status_fields(pid: int | str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def _cap_mask(fields: dict[str, str], key: str) -> int | None:
    try:
        return int(fields[key], 16)
    except (KeyError, ValueError):
        return None


def _ptrace_scope() -> int | None:
    try:
        with open(PTRACE_SCOPE_PATH, encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        with open("/proc/1/cgroup", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return False
    return any(k in text for k in ("docker", "kubepods", "containerd", "lxc"))


def ptrace_problem(pid: int) -> str | None:
    """Why py-spy (started by this process, with its credentials) could not read ``pid``.

    Checks, in the kernel's order: kernel.yama.ptrace_scope, then (without CAP_SYS_PTRACE in
    this process's effective set, ``/proc/self/status`` CapEff bit 19) the target's user and
    whether the target holds capabilities this process lacks (a container started without
    ``--cap-add SYS_PTRACE``). Linux only; elsewhere it cannot tell.

    Args:
        pid: the target process.

    Returns:
        One line naming the cause and the fix, or None when ptrace should be allowed (or the
        cause cannot be told). A target that called ``prctl(PR_SET_PTRACER)`` may still be
        allowed under ptrace_scope=1.
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return f"pid {pid} has exited (zombie); nothing to attach to"
    except psutil.NoSuchProcess:
        return f"no such process: pid {pid}; check the pid with `ps -p {pid}`"
    except psutil.AccessDenied:
        proc = None
    if not sys.platform.startswith("linux"):
        return None
    own = _status_fields("self")
    eff = _cap_mask(own, "CapEff")
    has_cap = eff is not None and bool(eff >> CAP_SYS_PTRACE_BIT & 1)
    container = _in_container()
    cap_fix = (
        "start the container with `--cap-add SYS_PTRACE`"
        if container
        else "run wsprof with CAP_SYS_PTRACE (e.g. as root)"
    )
    scope = _ptrace_scope()
    if scope is not None and scope >= 3:
        return (
            f"kernel.yama.ptrace_scope={scope} ({PTRACE_SCOPE_MEANING[3]}); fix: reboot with a "
            "lower kernel.yama.ptrace_scope"
        )
    if has_cap:
        return None
    where = " (this is a container)" if container else ""
    if scope in (1, 2):
        return (
            f"kernel.yama.ptrace_scope={scope} ({PTRACE_SCOPE_MEANING[scope]}) and this process "
            f"lacks CAP_SYS_PTRACE{where}; fix: {SYSCTL_FIX} on the host, or {cap_fix}"
        )
    if proc is not None:
        try:
            uids = proc.uids()
            gids = proc.gids()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            uids = gids = None
        if uids is not None and gids is not None:
            me_uid, me_gid = os.getuid(), os.getgid()
            if {uids.real, uids.effective, uids.saved} != {me_uid} or {
                gids.real,
                gids.effective,
                gids.saved,
            } != {me_gid}:
                return (
                    f"pid {pid} runs as uid {uids.effective}, this process as uid {me_uid}, "
                    f"without CAP_SYS_PTRACE; fix: run wsprof as the same user as the target, "
                    f"or {cap_fix}"
                )
    target_prm = _cap_mask(_status_fields(pid), "CapPrm")
    own_prm = _cap_mask(own, "CapPrm")
    if target_prm is not None and own_prm is not None and target_prm & ~own_prm:
        return (
            f"pid {pid} holds capabilities this process lacks and this process has no "
            f"CAP_SYS_PTRACE{where}; fix: {cap_fix}, or run wsprof with the target's privileges"
        )
    return None
