"""Whether this process can use an NVIDIA GPU through the driver API.

Without a driver, ``cuda.bindings`` raises while loading libcuda instead of
returning an error code, so the probe catches every failure and reports a
reason that tests and scripts can print.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """Return ``(available, reason)``; ``reason`` says why not when unavailable."""
    try:
        from cuda.bindings import driver
    except Exception as exc:  # noqa: BLE001 - any import failure means no GPU path
        return False, f"cuda.bindings is not importable: {exc}"
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # noqa: BLE001 - missing libcuda raises here
        return False, f"no CUDA driver library: {type(exc).__name__}: {exc}"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"cuInit failed: {err.name}"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "the CUDA driver reports no device"
    return True, f"{count} CUDA device(s)"


def gpu_available() -> bool:
    return gpu_status()[0]
