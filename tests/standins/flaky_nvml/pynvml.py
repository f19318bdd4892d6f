"""A stand-in ``pynvml`` that initialises and then fails every query, as when a GPU falls off
the bus mid-run (``NVMLError_GpuIsLost``): one device, every device query raises."""


class NVMLError(Exception):
    pass


def nvmlInit() -> None:
    return None


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(i: int) -> object:
    return object()


def _lost(*_args: object) -> None:
    raise NVMLError("GPU is lost")


nvmlDeviceGetComputeRunningProcesses = _lost
nvmlDeviceGetUtilizationRates = _lost
nvmlDeviceGetMemoryInfo = _lost
