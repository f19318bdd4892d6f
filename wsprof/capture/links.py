"""The link limits of the machine a traced process runs on: each GPU's NVLink and PCIe link
(NVML, nvidia-ml-py imported as ``pynvml``) and each RDMA NIC port (sysfs), as plain JSON-able
data for the trace's meta. A weight sync's achieved bandwidth is judged against them.

Only what the machine says is written; a rate that cannot be read stays None (JSON null) and
a ``why`` line says why, never a guessed number. Every rate is per direction, in
``gbytes_per_s`` (GB/s, 1e9 bytes/s) or ``gbit_per_s`` (1e9 bits/s). Nothing here raises or
writes; each failure is a ``why`` line. Time is bounded: at most :data:`MAX_GPUS` GPUs and
:data:`MAX_NIC_PORTS` NIC ports are read, each sysfs file up to :data:`MAX_FILE_BYTES`.

Sources of the tables below:

* NVLink per link per direction by version (:data:`NVLINK_GBYTES_PER_S_PER_LINK`): NVIDIA's
  published per-GPU figures divided by the link count: P100 4 links of NVLink 1 = 80 GB/s
  (160 GB/s both directions), V100 6 links of NVLink 2 = 150 GB/s, A100 12 links of NVLink 3 =
  300 GB/s, H100/H200 18 links of NVLink 4 = 450 GB/s, B200 18 links of NVLink 5 = 900 GB/s
  (nvidia.com/en-us/data-center/nvlink/; the same reading in hwloc issue #574). NVLink 3.1 is
  also the bridge of the GA102 boards (RTX 3090, RTX A6000: 4 links, 56.25 GB/s), about half
  of the A100's per-link rate, which is why NVML's own speed is preferred to this table.
* NVML's ``nvmlDeviceGetNvLinkVersion`` answers an ``nvmlNvlinkVersion_t``, not a version
  number (A100 answers 5, NVLink 3.1; hwloc issue #658, NVML API reference, "Device Enums"):
  :data:`NVML_NVLINK_VERSIONS`.
* NVML's link speed, field ``NVML_FI_DEV_NVLINK_GET_SPEED`` with the link as scope, is in
  MB/s (1e6 bytes/s) per direction and counts the line coding: an H100 link reads about
  26,562 MB/s where NVIDIA's figure is 25 GB/s (``nvml.h``: "NVLink Speed in MBps"; NCCL's
  topology detection reads the same field).
* PCIe per lane per direction after the line coding (:data:`PCIE_GBYTES_PER_S_PER_LANE`):
  gen 1-2 8b/10b at 2.5 / 5 GT/s, gen 3-5 128b/130b at 8 / 16 / 32 GT/s, gen 6 FLIT mode
  (242 of 256 bytes) at 64 GT/s (PCI-SIG specifications; the table in Wikipedia's "PCI
  Express" article).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
from typing import Any

#: Most GPUs read through NVML.
MAX_GPUS = 64
#: Most NIC ports read from sysfs, over all devices.
MAX_NIC_PORTS = 64
#: Most bytes read of one sysfs file.
MAX_FILE_BYTES = 4096

#: NVML's ``nvmlNvlinkVersion_t`` -> (major, minor).
NVML_NVLINK_VERSIONS: dict[int, tuple[int, int]] = {
    1: (1, 0),
    2: (2, 0),
    3: (2, 2),
    4: (3, 0),
    5: (3, 1),
    6: (4, 0),
    7: (5, 0),
    8: (6, 0),
}
#: NVLink major version -> GB/s per link per direction (NVIDIA's figures, see the module
#: docstring). A version not here has no table rate.
NVLINK_GBYTES_PER_S_PER_LINK: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
#: PCIe generation -> GB/s per lane per direction, after the line coding.
PCIE_GBYTES_PER_S_PER_LANE: dict[int, float] = {
    1: 0.25,
    2: 0.5,
    3: 0.985,
    4: 1.969,
    5: 3.938,
    6: 7.563,
}
#: Where an NVLink rate came from (``rate_source``).
RATE_FROM_NVML = "nvml"
RATE_FROM_TABLE = "version table"
#: What :func:`stated_limit` accepts, for messages that name the setting.
STATED_LIMIT_RULE = "a link limit in GB/s (a finite number > 0)"

#: NVML field ids, used when the installed ``pynvml`` does not name them.
_FI_NVLINK_LINK_COUNT = 91
_FI_NVLINK_GET_SPEED = 164
#: NVML's value union members, by ``nvmlValueType_t``.
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
#: ``nvmlEnableState_t`` of an active link.
_LINK_ACTIVE = 1
#: Links tried when NVML does not say how many a GPU has (``NVML_NVLINK_MAX_LINKS`` of
#: nvidia-ml-py 12).
_DEFAULT_MAX_LINKS = 18

_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec\b")
_STATE = re.compile(r"\s*[0-9]+\s*:\s*([A-Za-z_]+)\s*$")
_PORT = re.compile(r"[0-9]{1,4}")


def read_links(sys_root: str = "/sys", nvml: bool = True) -> dict[str, Any]:
    """The link limits of this machine. Never raises; bounded time; writes nothing.

    Args:
        sys_root: where sysfs is mounted (a test passes a folder laid out like it).
        nvml: read the GPUs through NVML (False: ``why["nvml"]`` says it was not asked).

    Returns:
        ``{"nvlink": [...], "pcie": [...], "nics": [...], "why": {...}}``, JSON-able:

        * ``nvlink``, one per GPU with NVLink: ``gpu`` (NVML index), ``bus_id``,
          ``links_up``, ``version`` (major, e.g. 4) and ``nvml_version`` (NVML's enum value),
          ``gbit_per_s_per_link`` (mean over the links up), ``gbytes_per_s`` (all links up
          together), ``rate_source`` (:data:`RATE_FROM_NVML` or :data:`RATE_FROM_TABLE`).
        * ``pcie``, one per GPU: ``gpu``, ``bus_id``, ``gen`` and ``width`` (the link's
          current state: an idle GPU often trains down to gen 1), ``gbytes_per_s`` of them;
          ``max_gen``, ``max_width``, ``max_gbytes_per_s``. Behind a PCIe switch this is the
          GPU's own link, not the switch's uplink.
        * ``nics``, one per RDMA port: ``device``, ``port``, ``state`` (``ACTIVE``, ``DOWN``,
          ...), ``link_layer`` (``InfiniBand``, or ``Ethernet`` for RoCE), ``rate_text``
          (the kernel's words), ``gbit_per_s`` and ``gbytes_per_s`` (None unless the port
          is ``ACTIVE`` and its rate parses).

        An entry with a None value has a ``why`` line. ``why`` (top level) has ``nvml``
        when NVML gave nothing, ``nvlink`` / ``pcie`` when it gave less than every GPU, and
        ``nics`` when no NIC port was read or some could not be.
    """
    out: dict[str, Any] = {"nvlink": [], "pcie": [], "nics": [], "why": {}}
    why: dict[str, str] = out["why"]
    if nvml:
        try:
            _read_nvml(out, why)
        except Exception as e:  # noqa: BLE001 - best effort: a why line, never a crash
            why["nvml"] = _error(e)
    else:
        why["nvml"] = "not read (nvml=False)"
    try:
        _read_nics(sys_root, out["nics"], why)
    except Exception as e:  # noqa: BLE001 - best effort: a why line, never a crash
        why["nics"] = _error(e)
    return out


def stated_limit(value: str | None) -> tuple[float | None, str | None]:
    """Parse a link limit the user states, in GB/s (1e9 bytes/s, per direction).

    Args:
        value: the text, e.g. ``"450"``; None or blank means not stated.

    Returns:
        ``(gbytes_per_s, None)``, ``(None, None)`` when not stated, or ``(None, one line)``
        when the text is not :data:`STATED_LIMIT_RULE`.
    """
    text = (value or "").strip()
    if not text:
        return None, None
    try:
        gbytes_per_s = float(text)
    except ValueError:
        gbytes_per_s = math.nan
    if not math.isfinite(gbytes_per_s) or gbytes_per_s <= 0:
        return None, f"{text!r} is not {STATED_LIMIT_RULE}"
    return gbytes_per_s, None


# ----------------------------------------------------------------------------- NVML


def _error(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())


def _read_nvml(out: dict[str, Any], why: dict[str, str]) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - no library, no driver, no GPU
        why["nvml"] = _error(e)
        return
    nv: Any = pynvml
    try:
        count = int(nv.nvmlDeviceGetCount())
        if count == 0:
            why["nvml"] = "NVML sees no GPU"
            return
        nvlink_why: list[str] = []
        pcie_why: list[str] = []
        if count > MAX_GPUS:
            pcie_why.append(f"{count} GPUs, the first {MAX_GPUS} read")
        for gpu in range(min(count, MAX_GPUS)):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(gpu)
            except Exception as e:  # noqa: BLE001 - a GPU NVML cannot open is skipped
                pcie_why.append(f"GPU {gpu}: {_error(e)}")
                continue
            bus_id = _bus_id(nv, h)
            out["pcie"].append(_pcie(nv, h, gpu, bus_id))
            entry, line = _nvlink(nv, h, gpu, bus_id)
            if entry is not None:
                out["nvlink"].append(entry)
            if line is not None:
                nvlink_why.append(line)
        if nvlink_why:
            why["nvlink"] = "; ".join(nvlink_why)
        if pcie_why:
            why["pcie"] = "; ".join(pcie_why)
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


def _call(fn: Any, *args: Any) -> tuple[int | None, str | None]:
    """``int(fn(*args))``, or None and why."""
    try:
        return int(fn(*args)), None
    except Exception as e:  # noqa: BLE001 - NVML's NotSupported and friends
        return None, _error(e)


def _bus_id(nv: Any, h: Any) -> str | None:
    try:
        raw = nv.nvmlDeviceGetPciInfo(h).busId
    except Exception:  # noqa: BLE001 - the bus id only helps to match GPUs
        return None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
    return text.strip("\0 ") or None


def _pcie_gbytes(gen: int | None, width: int | None) -> float | None:
    per_lane = PCIE_GBYTES_PER_S_PER_LANE.get(gen) if gen is not None else None
    if per_lane is None or width is None or width <= 0:
        return None
    return round(per_lane * width, 3)


def _pcie(nv: Any, h: Any, gpu: int, bus_id: str | None) -> dict[str, Any]:
    gen, gen_why = _call(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    width, width_why = _call(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    max_gen, max_gen_why = _call(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    max_width, max_width_why = _call(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    entry: dict[str, Any] = {
        "gpu": gpu,
        "bus_id": bus_id,
        "gen": gen,
        "width": width,
        "gbytes_per_s": _pcie_gbytes(gen, width),
        "max_gen": max_gen,
        "max_width": max_width,
        "max_gbytes_per_s": _pcie_gbytes(max_gen, max_width),
    }
    lines = [
        f"{what}: {line}"
        for what, line in (
            ("gen", gen_why),
            ("width", width_why),
            ("max gen", max_gen_why),
            ("max width", max_width_why),
        )
        if line is not None
    ]
    for g in (gen, max_gen):
        if g is not None and g not in PCIE_GBYTES_PER_S_PER_LANE:
            lines.append(f"no per-lane rate for PCIe gen {g}")
    if lines:
        entry["why"] = "; ".join(lines)
    return entry


def _field_number(fv: Any) -> float | None:
    """The number in an ``nvmlFieldValue_t``, None when NVML did not answer it."""
    if int(fv.nvmlReturn) != 0:
        return None
    kind = int(fv.valueType)
    if not 0 <= kind < len(_VALUE_MEMBERS):
        return None
    return float(getattr(fv.value, _VALUE_MEMBERS[kind]))


def _link_count(nv: Any, h: Any) -> int:
    """How many NVLink links to try: NVML's count for this GPU, else the most NVML names."""
    most = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", _DEFAULT_MAX_LINKS))
    with contextlib.suppress(Exception):
        field = int(getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", _FI_NVLINK_LINK_COUNT))
        n = _field_number(nv.nvmlDeviceGetFieldValues(h, [field])[0])
        if n is not None and 0 <= n <= most:
            return int(n)
    return most


def _nvml_speeds_mbytes(nv: Any, h: Any, links: list[int]) -> list[float] | None:
    """NVML's speed of each link, MB/s per direction; None unless every link answers."""
    field = int(getattr(nv, "NVML_FI_DEV_NVLINK_GET_SPEED", _FI_NVLINK_GET_SPEED))
    try:
        values = nv.nvmlDeviceGetFieldValues(h, [(field, link) for link in links])
        speeds = [_field_number(values[i]) for i in range(len(links))]
    except Exception:  # noqa: BLE001 - an older driver: the version table is used
        return None
    if any(s is None or not math.isfinite(s) or s <= 0 for s in speeds):
        return None
    return [float(s) for s in speeds if s is not None]


def _nvlink(
    nv: Any, h: Any, gpu: int, bus_id: str | None
) -> tuple[dict[str, Any] | None, str | None]:
    """This GPU's NVLink entry (None without NVLink) and a why line."""
    up: list[int] = []
    answered = 0
    last_why = "no link to ask"
    for link in range(_link_count(nv, h)):
        try:
            state = int(nv.nvmlDeviceGetNvLinkState(h, link))
        except Exception as e:  # noqa: BLE001 - not supported, or past this GPU's links
            last_why = _error(e)
            continue
        answered += 1
        if state == _LINK_ACTIVE:
            up.append(link)
    if answered == 0:
        return None, f"GPU {gpu}: no NVLink ({last_why})"
    entry: dict[str, Any] = {
        "gpu": gpu,
        "bus_id": bus_id,
        "links_up": len(up),
        "version": None,
        "nvml_version": None,
        "gbit_per_s_per_link": None,
        "gbytes_per_s": None,
        "rate_source": None,
    }
    if not up:
        entry["why"] = f"none of {answered} links is up"
        return entry, None
    lines: list[str] = []
    enum, enum_why = _call(nv.nvmlDeviceGetNvLinkVersion, h, up[0])
    entry["nvml_version"] = enum
    major_minor = NVML_NVLINK_VERSIONS.get(enum) if enum is not None else None
    if major_minor is not None:
        entry["version"] = major_minor[0]
    else:
        lines.append(f"version: {enum_why or f'unknown NVML value {enum}'}")
    speeds = _nvml_speeds_mbytes(nv, h, up)
    if speeds is not None:
        total = sum(speeds) / 1000  # MB/s -> GB/s
        entry["rate_source"] = RATE_FROM_NVML
    elif entry["version"] in NVLINK_GBYTES_PER_S_PER_LINK:
        total = NVLINK_GBYTES_PER_S_PER_LINK[entry["version"]] * len(up)
        entry["rate_source"] = RATE_FROM_TABLE
    else:
        total = None
        known = entry["version"] is not None
        lines.append(
            "no NVML link speed, and "
            + (f"no table rate for NVLink {entry['version']}" if known else "no version")
        )
    if total is not None:
        entry["gbytes_per_s"] = round(total, 3)
        entry["gbit_per_s_per_link"] = round(total * 8 / len(up), 3)
    if lines:
        entry["why"] = "; ".join(lines)
    return entry, None


# ----------------------------------------------------------------------------- sysfs


def _read_text(path: str) -> tuple[str | None, str | None]:
    """The first line of a small regular file, stripped; or None and why."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, e.strerror or type(e).__name__
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "not a regular file"
        data = os.read(fd, MAX_FILE_BYTES)
    except OSError as e:  # sysfs answers EINVAL for a rate it cannot tell
        return None, e.strerror or type(e).__name__
    finally:
        os.close(fd)
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return (lines[0].strip() if lines else ""), None


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _nic_port(ports_dir: str, device: str, port: int) -> dict[str, Any]:
    folder = os.path.join(ports_dir, str(port))
    rate_text, rate_why = _read_text(os.path.join(folder, "rate"))
    state_text, state_why = _read_text(os.path.join(folder, "state"))
    layer, layer_why = _read_text(os.path.join(folder, "link_layer"))
    lines: list[str] = []
    state = None
    if state_text is not None:
        m = _STATE.match(state_text)
        if m:
            state = m.group(1).upper()
        else:
            lines.append(f"state: not parsed {_short(state_text)}")
    else:
        lines.append(f"state: {state_why}")
    if layer is None:
        lines.append(f"link_layer: {layer_why}")
    elif not layer:
        layer = None
        lines.append("link_layer: empty")
    gbit: float | None = None
    if rate_text is None:
        lines.append(f"rate: {rate_why}")
    else:
        m = _RATE.match(rate_text)
        value = float(m.group(1)) if m else math.nan
        if not math.isfinite(value) or value <= 0:
            lines.append(f"rate: not parsed {_short(rate_text)}")
        elif state != "ACTIVE":
            lines.append(f"rate: the port is {state or 'in an unknown state'}, not ACTIVE")
        else:
            gbit = value
    entry: dict[str, Any] = {
        "device": device,
        "port": port,
        "state": state,
        "link_layer": layer,
        "rate_text": rate_text[:200] if rate_text is not None else None,
        "gbit_per_s": gbit,
        "gbytes_per_s": round(gbit / 8, 3) if gbit is not None else None,
    }
    if lines:
        entry["why"] = "; ".join(lines)
    return entry


def _read_nics(sys_root: str, out: list[dict[str, Any]], why: dict[str, str]) -> None:
    base = os.path.join(sys_root, "class", "infiniband")
    try:
        devices = sorted(os.listdir(base))
    except FileNotFoundError:
        why["nics"] = f"no {base} (no RDMA NIC, or its driver is not loaded)"
        return
    except OSError as e:
        why["nics"] = f"{base}: {e.strerror or _error(e)}"
        return
    lines: list[str] = []
    if not devices:
        lines.append(f"{base} is empty")
    for device in devices:
        ports_dir = os.path.join(base, device, "ports")
        try:
            ports = sorted(int(p) for p in os.listdir(ports_dir) if _PORT.fullmatch(p))
        except OSError as e:
            lines.append(f"{device}: ports not read ({e.strerror or _error(e)})")
            continue
        if not ports:
            lines.append(f"{device}: no ports")
        for port in ports:
            if len(out) >= MAX_NIC_PORTS:
                lines.append(f"more than {MAX_NIC_PORTS} ports: the rest not read")
                why["nics"] = "; ".join(lines)
                return
            out.append(_nic_port(ports_dir, device, port))
    if lines:
        why["nics"] = "; ".join(lines)
