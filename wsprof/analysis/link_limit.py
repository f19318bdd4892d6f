"""The link a weight sync's transfers cross, and its limit (issue 31).

Capture stores what the machine has (``meta['links']``, :mod:`wsprof.capture.links`: NVLink
and PCIe from NVML, InfiniBand/RoCE ports from sysfs, and a limit the user stated with
``WSPROF_LINK_GBPS``). Which of them a sync crosses is decided here:

1. a limit stated for this analysis (``--link-gbps``), else one stated at capture;
2. transfers on gloo groups go over TCP sockets: no link limit is known;
3. NCCL on one host: NVLink when links are up (the slowest GPU's aggregate), else PCIe (the
   slowest GPU's current link);
4. NCCL across hosts: one NIC, the fastest active port (NCCL gives a rank its nearest NIC;
   rails differ between clusters, so one port's rate is the bound stated).

Where nothing is known the limit is unknown (``bytes_per_s`` None) with the reason: never a
guessed number. Rates are per direction, in bytes per second (GB/s = 1e9 bytes/s). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from wsprof.contracts.units import fmt_rate


@dataclass(frozen=True)
class LinkLimit:
    """The limit a weight sync's bandwidth is held against.

    Attributes:
        bytes_per_s: the link's rate per direction, bytes/s; None when unknown.
        name: what it is (``NVLink 4 x18``, ``NIC mlx5_0 port 1 (400 Gb/s InfiniBand)``,
            ``stated (--link-gbps)``); ``unknown: <short reason>`` when unknown.
        why: how it was chosen, or why it is unknown (one line).
    """

    bytes_per_s: float | None
    name: str
    why: str


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if f > 0 and f == f and f != float("inf") else None


def _entries(links: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    v = links.get(key)
    return [e for e in v if isinstance(e, Mapping)] if isinstance(v, list) else []


def _one_host(meta: Mapping[str, Any], hosts: Collection[str]) -> bool:
    """Whether the job runs on one host: the run's traces name at most one host and the
    launcher (torchrun's ``LOCAL_WORLD_SIZE`` and ``WORLD_SIZE``, when recorded) agrees."""
    if len(set(hosts)) > 1:
        return False
    world = meta.get("world")
    launcher = world.get("launcher") if isinstance(world, Mapping) else None
    size = world.get("size") if isinstance(world, Mapping) else None
    local = launcher.get("LOCAL_WORLD_SIZE") if isinstance(launcher, Mapping) else None
    try:
        return local is None or size is None or int(local) >= int(size)
    except (TypeError, ValueError):
        return True


def _intra_host(links: Mapping[str, Any]) -> LinkLimit | None:
    nvlink = [
        (rate, e)
        for e in _entries(links, "nvlink")
        if (rate := _num(e.get("gbytes_per_s"))) is not None
    ]
    if nvlink:
        rate, e = min(nvlink, key=lambda x: x[0])
        ver = e.get("version")
        name = f"NVLink {ver} x{e.get('links_up')}" if ver is not None else "NVLink"
        return LinkLimit(
            rate * 1e9,
            name,
            f"NCCL on one host with NVLink up: {name}, {fmt_rate(rate * 1e9)} per direction "
            "(the slowest GPU's)",
        )
    # An idle GPU drops its PCIe link to a lower generation (read at patch time): the link's
    # maximum is what a transfer gets.
    pcie = [
        (rate, e)
        for e in _entries(links, "pcie")
        if (rate := _num(e.get("max_gbytes_per_s")) or _num(e.get("gbytes_per_s"))) is not None
    ]
    if pcie:
        rate, e = min(pcie, key=lambda x: x[0])
        gen, width = e.get("max_gen") or e.get("gen"), e.get("max_width") or e.get("width")
        name = f"PCIe gen{gen} x{width}"
        return LinkLimit(
            rate * 1e9,
            name,
            f"NCCL on one host without NVLink: {name}, {fmt_rate(rate * 1e9)} per direction",
        )
    return None


def _nic(links: Mapping[str, Any]) -> LinkLimit | None:
    ports = [
        (rate, e)
        for e in _entries(links, "nics")
        if str(e.get("state", "")).upper().endswith("ACTIVE")
        and (rate := _num(e.get("gbytes_per_s"))) is not None
    ]
    if not ports:
        return None
    rate, e = max(ports, key=lambda x: x[0])
    gbit = _num(e.get("gbit_per_s"))
    layer = e.get("link_layer") or "network"
    name = f"NIC {e.get('device')} port {e.get('port')}"
    if gbit is not None:
        name += f" ({gbit:g} Gb/s {layer})"
    return LinkLimit(
        rate * 1e9,
        name,
        f"NCCL across hosts: one NIC, the fastest active port: {name}",
    )


def link_limit(
    meta: Mapping[str, Any],
    backends: Collection[str],
    hosts: Collection[str] = (),
    stated_gbps: float | None = None,
) -> LinkLimit:
    """The limit of the link a process's weight sync crosses (see the module docstring).

    Args:
        meta: the process's trace meta (``links``, ``world``).
        backends: the backends of the groups its sync's transfers ran on (``gloo``,
            ``nccl``); empty when unknown.
        hosts: the hosts of the run's traces.
        stated_gbps: a limit stated for this analysis, GB/s (``--link-gbps``).

    Returns:
        The limit, or an unknown one with the reason.
    """
    if stated_gbps is not None and stated_gbps > 0:
        return LinkLimit(stated_gbps * 1e9, "stated (--link-gbps)", "stated with --link-gbps")
    raw = meta.get("links")
    links: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    at_capture = _num(links.get("stated_gbytes_per_s"))
    if at_capture is not None:
        return LinkLimit(at_capture * 1e9, "stated (WSPROF_LINK_GBPS)", "stated at capture")
    kinds = {str(b).lower() for b in backends}
    if not kinds:
        return LinkLimit(
            None, "unknown: groups not known", "the sync's process groups are not known"
        )
    if kinds <= {"gloo", "cpu:gloo"} or not any("nccl" in k for k in kinds):
        return LinkLimit(
            None,
            "unknown: gloo over TCP",
            f"{', '.join(sorted(kinds))} moves tensors over TCP sockets: no link limit is "
            "known; state one with --link-gbps",
        )
    if not links:
        return LinkLimit(
            None,
            "unknown: not recorded",
            "the trace has no link description (written by a wsprof without link detection)",
        )
    found = _intra_host(links) if _one_host(meta, hosts) else _nic(links)
    if found is not None:
        return found
    why = links.get("why")
    reasons = "; ".join(str(v) for v in why.values()) if isinstance(why, Mapping) else ""
    return LinkLimit(
        None,
        "unknown: no link rate read",
        "no link rate could be read"
        + (f" ({reasons})" if reasons else "")
        + "; state one with --link-gbps",
    )
