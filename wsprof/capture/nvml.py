"""NVML (nvidia-ml-py, imported as ``pynvml``): GPU utilization and memory, per process and per
GPU. Used by the in-process counter sampler (10 Hz) and by ``wsprof attach``.

Without a driver, a GPU or the library, :attr:`Nvml.ok` is False and :attr:`Nvml.why` says why;
nothing raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wsprof.contracts.counters import (
    NVML_MEM_USED_BYTES,
    NVML_PROCESS_GPU_BYTES,
    NVML_UTIL_PCT,
    nvml_gpu_counter,
)

Reading = list[tuple[str, float]]


class Nvml:
    """NVML handles for every GPU, when NVML initialises."""

    def __init__(self) -> None:
        self.ok = False
        self.why = ""
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv: Any = pynvml
            self._handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            self.ok = True
        except Exception as e:  # noqa: BLE001 - no driver, no GPU, no library
            self.why = f"{type(e).__name__}: {e}"

    def total_bytes(self) -> dict[int, int]:
        """Memory of each GPU, bytes, by NVML index."""
        out: dict[int, int] = {}
        for i, h in enumerate(self._handles):
            try:
                out[i] = int(self._nv.nvmlDeviceGetMemoryInfo(h).total)
            except Exception:  # noqa: BLE001 - a GPU that cannot tell is skipped
                continue
        return out

    def sample(self, pids: Sequence[int]) -> dict[int, Reading]:
        """Counters per pid: ``nvml.process_gpu_bytes`` (its GPU memory summed over GPUs), and
        ``nvml.gpu<i>.util_pct`` of the GPUs it uses."""
        out: dict[int, Reading] = {p: [] for p in pids}
        if not self.ok:
            return out
        nv = self._nv
        used: dict[int, float] = {}
        for i, h in enumerate(self._handles):
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:  # noqa: BLE001 - a GPU that cannot tell is skipped
                continue
            for p in procs:
                if p.pid in out:
                    used[p.pid] = used.get(p.pid, 0.0) + float(p.usedGpuMemory or 0)
                    out[p.pid].append((nvml_gpu_counter(i, NVML_UTIL_PCT), util))
        for pid, nbytes in used.items():
            out[pid].append((NVML_PROCESS_GPU_BYTES, nbytes))
        return out

    def reading_for(self, pid: int) -> Reading:
        """In-process: this pid's GPU memory, and utilization and used memory of the GPUs it
        uses (of every GPU when NVML lists it on none, as in a container's PID namespace).

        Raises:
            RuntimeError: NVML is not available.
        """
        if not self.ok:
            raise RuntimeError(f"NVML unavailable ({self.why})")
        nv = self._nv
        mine: list[int] = []
        used = 0.0
        for i, h in enumerate(self._handles):
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            for p in procs:
                if p.pid == pid:
                    mine.append(i)
                    used += float(p.usedGpuMemory or 0)
        out: Reading = [(NVML_PROCESS_GPU_BYTES, used)] if mine else []
        for i in mine or range(len(self._handles)):
            h = self._handles[i]
            util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            out.append((nvml_gpu_counter(i, NVML_UTIL_PCT), util))
            used_i = float(nv.nvmlDeviceGetMemoryInfo(h).used)
            out.append((nvml_gpu_counter(i, NVML_MEM_USED_BYTES), used_i))
        return out
