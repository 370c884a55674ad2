"""Is there a CUDA device here? Asked of the driver through ctypes: no torch, no cuda-python."""

import ctypes


def cuda_device_count() -> int:
    """Number of CUDA devices the driver reports; 0 when there is no driver or no device."""
    for name in ('libcuda.so.1', 'libcuda.so'):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if lib.cuInit(0) != 0:
            return 0
        count = ctypes.c_int(0)
        return count.value if lib.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0
    return 0
