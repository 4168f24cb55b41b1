"""The CUDA driver API as fp4q uses it: checked calls, devices, contexts.

fp4q runs inside CuPy's world, which uses each device's primary context, so
every driver call here works in that context and restores whatever context
the calling thread had before.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass

from ..kernels.archs import target_for


@functools.lru_cache(maxsize=1)
def gpu_status() -> tuple[bool, str]:
    """Whether this process can use an NVIDIA GPU: ``(available, reason)``.

    Without a driver, cuda.bindings raises while loading libcuda instead of
    returning an error code, so every failure is caught and becomes the reason.
    """
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


class CudaError(RuntimeError):
    """A CUDA driver call failed."""


class NoGpuError(CudaError):
    """No usable CUDA driver or device in this process."""


_driver_module = None


def driver_api():
    """``cuda.bindings.driver``, imported on first use (it loads no library until a call)."""
    global _driver_module
    if _driver_module is None:
        from cuda.bindings import driver

        _driver_module = driver
    return _driver_module


def check(result, what: str):
    """Unwrap a cuda.bindings result tuple, raising CudaError on failure."""
    cu = driver_api()
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        name = name.decode() if name else str(err)
        text = text.decode() if text else ""
        raise CudaError(f"{what} failed: {name}: {text}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def require_gpu() -> None:
    available, reason = gpu_status()
    if not available:
        raise NoGpuError(f"fp4q needs an NVIDIA GPU and driver: {reason}")


@dataclass(frozen=True)
class Device:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_smem_optin: int
    context: object  # the primary CUcontext
    context_handle: int

    @property
    def arch(self) -> str:
        """The compile target of this device; ``UnsupportedDeviceError`` where fp4q has none."""
        return target_for(self.compute_capability, f"{self.name} [device {self.ordinal}]")


_device_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _device(ordinal: int) -> Device:
    cu = driver_api()
    require_gpu()
    dev = check(cu.cuDeviceGet(ordinal), f"cuDeviceGet({ordinal})")
    attr = cu.CUdevice_attribute

    def get(a):
        return check(cu.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({a.name})")

    name = check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    return Device(
        ordinal=ordinal,
        name=name.split(b"\x00", 1)[0].decode(),
        compute_capability=(
            get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ),
        sm_count=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        max_smem_optin=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        context=ctx,
        context_handle=int(ctx),
    )


def device(ordinal: int) -> Device:
    with _device_lock:
        return _device(ordinal)


def is_current(dev: Device) -> bool:
    """Whether ``dev``'s primary context is the calling thread's current context.

    Asked of the driver on every call: CuPy, torch or the caller may switch
    contexts between two calls, so the answer is never cached.
    """
    result = (_driver_module or driver_api()).cuCtxGetCurrent()
    if result[0]:  # not CUDA_SUCCESS (0)
        check(result, "cuCtxGetCurrent")
    return result[1] == dev.context  # CUcontext compares its handle; no context is a null handle or None


@contextlib.contextmanager
def in_context(dev: Device):
    """Make ``dev``'s primary context current for the block, then restore."""
    cu = driver_api()
    if is_current(dev):
        yield
        return
    check(cu.cuCtxPushCurrent(dev.context), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(cu.cuCtxPopCurrent(), "cuCtxPopCurrent")


def driver_version() -> tuple[int, int]:
    v = check(driver_api().cuDriverGetVersion(), "cuDriverGetVersion")
    return (v // 1000, (v % 1000) // 10)
