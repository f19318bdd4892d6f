"""The link limits read for the trace's meta (:mod:`wsprof.capture.links`): RDMA ports parsed
from a folder laid out as the kernel lays out ``/sys/class/infiniband``, NVLink and PCIe read
through a stand-in ``pynvml`` module and through the real one, and a stated limit parsed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from wsprof.capture import links
from wsprof.capture import settings as cfg

pytestmark = pytest.mark.pure

#: A machine with an NVIDIA driver (the CUDA test runs there, the no-GPU test does not).
HAS_NVIDIA_DRIVER = os.path.exists("/dev/nvidiactl")


# ----------------------------------------------------------------------------- sysfs


def _port(root: Path, device: str, port: int, **files: str) -> None:
    """``class/infiniband/<device>/ports/<port>/<file>`` under ``root``, as the kernel writes
    them (one line, a newline at the end)."""
    folder = root / "class" / "infiniband" / device / "ports" / str(port)
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n", encoding="ascii")


@pytest.fixture
def sys_root(tmp_path: Path) -> Path:
    """Two HCAs as a DGX H100 shows them, plus a RoCE port, a garbage rate and a missing
    file. The devices are links into ``devices/``, as in the kernel's ``/sys/class``."""
    devices = tmp_path / "devices" / "pci0000:00"
    ib = tmp_path / "class" / "infiniband"
    ib.mkdir(parents=True)
    staging = tmp_path / "staging"
    ports = {
        ("mlx5_0", 1): {
            "rate": "400 Gb/sec (4X NDR)",
            "state": "4: ACTIVE",
            "link_layer": "InfiniBand",
        },
        ("mlx5_0", 2): {
            "rate": "100 Gb/sec (4X EDR)",
            "state": "1: DOWN",
            "link_layer": "InfiniBand",
        },
        ("mlx5_1", 1): {
            "rate": "25 Gb/sec (1X EDR)",
            "state": "4: ACTIVE",
            "link_layer": "Ethernet",
        },
        ("mlx5_1", 2): {"rate": "fast", "state": "4: ACTIVE", "link_layer": "InfiniBand"},
        ("mlx5_1", 3): {"rate": "2.5 Gb/sec (1X SDR)", "state": "4: ACTIVE"},  # no link_layer
    }
    for (device, port), files in ports.items():
        _port(staging, device, port, **files)
    for device in ("mlx5_0", "mlx5_1"):
        target = devices / device
        target.parent.mkdir(parents=True, exist_ok=True)
        (staging / "class" / "infiniband" / device).rename(target)
        (ib / device).symlink_to(os.path.relpath(target, ib))
    (ib / "mlx5_1" / "ports" / "not_a_port").mkdir()  # ignored: not a number
    return tmp_path


def test_nic_ports_are_parsed_exactly(sys_root: Path) -> None:
    got = links.read_links(str(sys_root), nvml=False)
    assert got["nics"] == [
        {
            "device": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "link_layer": "InfiniBand",
            "rate_text": "400 Gb/sec (4X NDR)",
            "gbit_per_s": 400.0,
            "gbytes_per_s": 50.0,
        },
        {
            "device": "mlx5_0",
            "port": 2,
            "state": "DOWN",
            "link_layer": "InfiniBand",
            "rate_text": "100 Gb/sec (4X EDR)",
            "gbit_per_s": None,
            "gbytes_per_s": None,
            "why": "rate: the port is DOWN, not ACTIVE",
        },
        {
            "device": "mlx5_1",
            "port": 1,
            "state": "ACTIVE",
            "link_layer": "Ethernet",
            "rate_text": "25 Gb/sec (1X EDR)",
            "gbit_per_s": 25.0,
            "gbytes_per_s": 3.125,
        },
        {
            "device": "mlx5_1",
            "port": 2,
            "state": "ACTIVE",
            "link_layer": "InfiniBand",
            "rate_text": "fast",
            "gbit_per_s": None,
            "gbytes_per_s": None,
            "why": "rate: not parsed 'fast'",
        },
        {
            "device": "mlx5_1",
            "port": 3,
            "state": "ACTIVE",
            "link_layer": None,
            "rate_text": "2.5 Gb/sec (1X SDR)",
            "gbit_per_s": 2.5,
            "gbytes_per_s": 0.312,
            "why": "link_layer: missing",
        },
    ]
    assert "nics" not in got["why"]
    json.dumps(got)  # JSON-able as it is


def test_nvml_false_says_so_and_no_nics_folder_says_why(tmp_path: Path) -> None:
    got = links.read_links(str(tmp_path), nvml=False)
    base = tmp_path / "class" / "infiniband"
    assert got == {
        "nvlink": [],
        "pcie": [],
        "nics": [],
        "why": {
            "nvml": "not read (nvml=False)",
            "nics": f"no {base} (no RDMA NIC, or its driver is not loaded)",
        },
    }


def test_odd_sysfs_is_a_why_line_not_a_crash(tmp_path: Path) -> None:
    ib = tmp_path / "class" / "infiniband"
    (ib / "mlx5_2").mkdir(parents=True)  # a device without ports/
    _port(tmp_path, "mlx5_3", 1, state="garbage", link_layer="", rate="0 Gb/sec (4X NDR)")
    (ib / "mlx5_3" / "ports" / "1" / "rate").unlink()
    (ib / "mlx5_3" / "ports" / "1" / "rate").mkdir()  # not a regular file
    got = links.read_links(str(tmp_path), nvml=False)
    assert got["nics"] == [
        {
            "device": "mlx5_3",
            "port": 1,
            "state": None,
            "link_layer": None,
            "rate_text": None,
            "gbit_per_s": None,
            "gbytes_per_s": None,
            "why": "state: not parsed 'garbage'; link_layer: empty; rate: not a regular file",
        }
    ]
    assert got["why"]["nics"] == "mlx5_2: ports not read (No such file or directory)"


def test_nic_ports_are_bounded(tmp_path: Path) -> None:
    for i in range(links.MAX_NIC_PORTS + 3):
        _port(tmp_path, f"mlx5_{i:03}", 1, rate="200 Gb/sec (4X HDR)", state="4: ACTIVE")
    got = links.read_links(str(tmp_path), nvml=False)
    assert len(got["nics"]) == links.MAX_NIC_PORTS
    assert got["why"]["nics"].endswith(f"more than {links.MAX_NIC_PORTS} ports: the rest not read")


def test_a_fifo_in_place_of_a_file_does_not_block(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, state="4: ACTIVE", link_layer="InfiniBand")
    os.mkfifo(tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "rate")
    (nic,) = links.read_links(str(tmp_path), nvml=False)["nics"]
    assert (nic["gbit_per_s"], nic["why"]) == (None, "rate: not a regular file")


# ----------------------------------------------------------------------------- NVML


class _NvmlError(Exception):
    pass


class FakeNvml:
    """What :mod:`wsprof.capture.links` asks of ``pynvml``, answering from ``gpus``: per GPU
    its link states, NVML version enum, per-link speed (MB/s, or None: not answered) and
    PCIe (gen, width, max gen, max width); None for a call that raises NotSupported."""

    NVML_NVLINK_MAX_LINKS = 36
    NVML_FI_DEV_NVLINK_LINK_COUNT = 91
    NVML_FI_DEV_NVLINK_GET_SPEED = 164

    def __init__(self, gpus: list[dict[str, Any]], init_error: str | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise _NvmlError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.gpus[i]

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(busId=h["bus_id"])

    @staticmethod
    def _answer(value: Any) -> Any:
        if value is None:
            raise _NvmlError("Not Supported")
        return value

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: dict[str, Any]) -> int:
        return int(self._answer(h["pcie"][0]))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: dict[str, Any]) -> int:
        return int(self._answer(h["pcie"][1]))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: dict[str, Any]) -> int:
        return int(self._answer(h["pcie"][2]))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: dict[str, Any]) -> int:
        return int(self._answer(h["pcie"][3]))

    def nvmlDeviceGetNvLinkState(self, h: dict[str, Any], link: int) -> int:
        states = self._answer(h.get("states"))
        if link >= len(states):
            raise _NvmlError("Invalid Argument")
        return int(states[link])

    def nvmlDeviceGetNvLinkVersion(self, h: dict[str, Any], link: int) -> int:
        return int(self._answer(h.get("version")))

    def nvmlDeviceGetFieldValues(self, h: dict[str, Any], fields: list[Any]) -> list[Any]:
        out = []
        for f in fields:
            field, link = f if isinstance(f, tuple) else (f, 0)
            if field == self.NVML_FI_DEV_NVLINK_LINK_COUNT:
                value = h.get("link_count")
            else:
                assert field == self.NVML_FI_DEV_NVLINK_GET_SPEED
                value = (h.get("speeds") or {}).get(link)
            out.append(
                SimpleNamespace(
                    nvmlReturn=0 if value is not None else 3,  # NVML_ERROR_NOT_SUPPORTED
                    valueType=1,  # NVML_VALUE_TYPE_UNSIGNED_INT
                    value=SimpleNamespace(uiVal=value or 0),
                )
            )
        return out


def _with_nvml(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml, tmp_path: Path) -> dict[str, Any]:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return links.read_links(str(tmp_path))


H200_PCIE = (5, 16, 5, 16)


def test_nvlink_and_pcie_from_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An H200 whose driver answers the link speed (18 links of 26,562 MB/s), one whose
    driver does not (the table's 25 GB/s a link), and a PCIe-only card idling at gen 1."""
    fake = FakeNvml(
        [
            {
                "bus_id": b"00000000:18:00.0",
                "states": [1] * 18,
                "link_count": 18,
                "version": 6,  # NVML_NVLINK_VERSION_4_0
                "speeds": dict.fromkeys(range(18), 26562),
                "pcie": H200_PCIE,
            },
            {
                "bus_id": "00000000:2A:00.0",
                "states": [1] * 16 + [0, 0],  # no link count: tried until Invalid Argument
                "version": 6,
                "pcie": H200_PCIE,
            },
            {"bus_id": b"00000000:3B:00.0", "pcie": (1, 16, 4, 16)},  # no NVLink
        ]
    )
    got = _with_nvml(monkeypatch, fake, tmp_path)
    assert got["nvlink"] == [
        {
            "gpu": 0,
            "bus_id": "00000000:18:00.0",
            "links_up": 18,
            "version": 4,
            "nvml_version": 6,
            "gbit_per_s_per_link": 212.496,
            "gbytes_per_s": 478.116,
            "rate_source": "nvml",
        },
        {
            "gpu": 1,
            "bus_id": "00000000:2A:00.0",
            "links_up": 16,
            "version": 4,
            "nvml_version": 6,
            "gbit_per_s_per_link": 200.0,
            "gbytes_per_s": 400.0,
            "rate_source": "version table",
        },
    ]
    assert got["pcie"] == [
        {
            "gpu": 0,
            "bus_id": "00000000:18:00.0",
            "gen": 5,
            "width": 16,
            "gbytes_per_s": 63.008,
            "max_gen": 5,
            "max_width": 16,
            "max_gbytes_per_s": 63.008,
        },
        {
            "gpu": 1,
            "bus_id": "00000000:2A:00.0",
            "gen": 5,
            "width": 16,
            "gbytes_per_s": 63.008,
            "max_gen": 5,
            "max_width": 16,
            "max_gbytes_per_s": 63.008,
        },
        {
            "gpu": 2,
            "bus_id": "00000000:3B:00.0",
            "gen": 1,
            "width": 16,
            "gbytes_per_s": 4.0,
            "max_gen": 4,
            "max_width": 16,
            "max_gbytes_per_s": 31.504,
        },
    ]
    assert got["why"]["nvlink"] == "GPU 2: no NVLink (_NvmlError: Not Supported)"
    assert "nvml" not in got["why"] and "pcie" not in got["why"]
    assert fake.shutdowns == 1
    json.dumps(got)


def test_nvml_unknowns_stay_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A version NVML names past the table, links all down, PCIe calls not supported."""
    fake = FakeNvml(
        [
            {"bus_id": b"", "states": [1, 1], "version": 8, "pcie": (None, None, 6, 16)},
            {"bus_id": b"00000000:2A:00.0", "states": [0, 0], "version": 6, "pcie": H200_PCIE},
            {"bus_id": b"x", "states": [1], "version": 42, "speeds": {0: 0}, "pcie": H200_PCIE},
        ]
    )
    got = _with_nvml(monkeypatch, fake, tmp_path)
    unknown = {"version": None, "gbit_per_s_per_link": None, "gbytes_per_s": None}
    assert got["nvlink"] == [
        {
            "gpu": 0,
            "bus_id": None,
            "links_up": 2,
            **unknown,
            "version": 6,
            "nvml_version": 8,
            "rate_source": None,
            "why": "no NVML link speed, and no table rate for NVLink 6",
        },
        {
            "gpu": 1,
            "bus_id": "00000000:2A:00.0",
            "links_up": 0,
            **unknown,
            "nvml_version": None,
            "rate_source": None,
            "why": "none of 2 links is up",
        },
        {
            "gpu": 2,
            "bus_id": "x",
            "links_up": 1,
            **unknown,
            "nvml_version": 42,
            "rate_source": None,
            "why": "version: unknown NVML value 42; no NVML link speed, and no version",
        },
    ]
    assert got["pcie"][0] == {
        "gpu": 0,
        "bus_id": None,
        "gen": None,
        "width": None,
        "gbytes_per_s": None,
        "max_gen": 6,
        "max_width": 16,
        "max_gbytes_per_s": 121.008,
        "why": "gen: _NvmlError: Not Supported; width: _NvmlError: Not Supported",
    }


def test_nvml_that_cannot_start_is_one_why_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeNvml([], init_error="Driver Not Loaded")
    got = _with_nvml(monkeypatch, fake, tmp_path)
    assert (got["nvlink"], got["pcie"]) == ([], [])
    assert got["why"]["nvml"] == "_NvmlError: Driver Not Loaded"
    assert fake.shutdowns == 0
    got = _with_nvml(monkeypatch, FakeNvml([]), tmp_path)
    assert got["why"]["nvml"] == "NVML sees no GPU"


def test_nvml_that_breaks_midway_is_a_why_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeNvml([])
    monkeypatch.setattr(fake, "nvmlDeviceGetCount", None)
    got = _with_nvml(monkeypatch, fake, tmp_path)
    assert got["why"]["nvml"] == "TypeError: 'NoneType' object is not callable"
    assert fake.shutdowns == 1


def test_gpus_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gpu = {"bus_id": b"b", "pcie": H200_PCIE}
    got = _with_nvml(monkeypatch, FakeNvml([gpu] * (links.MAX_GPUS + 1)), tmp_path)
    assert len(got["pcie"]) == links.MAX_GPUS
    assert got["why"]["pcie"] == f"{links.MAX_GPUS + 1} GPUs, the first {links.MAX_GPUS} read"


@pytest.mark.skipif(HAS_NVIDIA_DRIVER, reason="this machine has an NVIDIA driver")
def test_real_nvml_without_a_gpu_is_a_why_line(tmp_path: Path) -> None:
    got = links.read_links(str(tmp_path))
    assert (got["nvlink"], got["pcie"]) == ([], [])
    assert got["why"]["nvml"]
    assert "\n" not in got["why"]["nvml"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_NVIDIA_DRIVER, reason="needs an NVIDIA driver (/dev/nvidiactl)")
def test_real_nvml_has_pcie_for_every_gpu() -> None:
    """Every GPU NVML counts has its PCIe link; an idle GPU may have trained down to gen 1, so
    gen 3 or more is asked of the link's maximum."""
    import pynvml

    pynvml.nvmlInit()
    try:
        count = min(pynvml.nvmlDeviceGetCount(), links.MAX_GPUS)
    finally:
        pynvml.nvmlShutdown()
    got = links.read_links()
    assert "nvml" not in got["why"], got["why"]
    assert [p["gpu"] for p in got["pcie"]] == list(range(count))
    for p in got["pcie"]:
        assert p["max_gen"] >= 3 and 1 <= p["gen"] <= p["max_gen"], p
        assert p["width"] >= 1 and p["gbytes_per_s"] > 0, p
    for n in got["nvlink"]:
        assert n["links_up"] == 0 or n["gbytes_per_s"] > 0, n


# ----------------------------------------------------------------------------- stated limit


@pytest.mark.parametrize(
    ("value", "expected"), [("450", 450.0), (" 50.5 ", 50.5), ("1e3", 1000.0), ("0.1", 0.1)]
)
def test_stated_limit_good(value: str, expected: float) -> None:
    assert links.stated_limit(value) == (expected, None)


@pytest.mark.parametrize("value", [None, "", "   "])
def test_stated_limit_unset(value: str | None) -> None:
    assert links.stated_limit(value) == (None, None)


@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "-inf", "fast", "400Gb/s", "0x10"])
def test_stated_limit_bad(bad: str) -> None:
    assert links.stated_limit(f" {bad} ") == (
        None,
        f"{bad!r} is not a link limit in GB/s (a finite number > 0)",
    )


def test_link_gbps_setting() -> None:
    assert cfg.read({cfg.ENV_LINK_GBPS: " 450 "}).link_gbps == 450.0
    assert cfg.read({}).link_gbps is None
    s = cfg.read({cfg.ENV_LINK_GBPS: "-1"})
    assert (s.link_gbps, s.errors) == (None, ())
    assert s.warnings == (
        "ignoring WSPROF_LINK_GBPS='-1': not a link limit in GB/s (a finite number > 0); "
        "using the limits read from the machine",
    )
