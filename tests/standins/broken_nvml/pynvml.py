"""A stand-in ``pynvml`` whose driver calls fail, as on a node whose NVIDIA driver is broken or
mismatched (``NVMLError_DriverNotLoaded``, ``NVMLError_LibRmVersionMismatch``)."""


class NVMLError(Exception):
    pass


def nvmlInit() -> None:
    raise NVMLError("Driver Not Loaded")
