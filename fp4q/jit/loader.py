"""From kernel spec to a kernel loaded on a device: render, compile, load, once.

Modules are loaded per device (each device's primary context holds its
own), and the loaded kernel remembers its launch facts (threads, dynamic
shared memory, CTAs per SM) so a launch needs no driver queries.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..cuda.driver import Device, check, device, driver_api, in_context
from ..kernels.archs import target
from ..kernels.spec import KernelSpec
from .compiler import CompiledKernel, compile_source, default_cache
from .render import render


@dataclass(frozen=True)
class LoadedKernel:
    spec: KernelSpec
    compiled: CompiledKernel
    device: Device
    function: object
    ctas_per_sm: int
    module: object


_compiled: dict[KernelSpec, CompiledKernel] = {}
_loaded: dict[tuple[KernelSpec, int], LoadedKernel] = {}
_lock = threading.Lock()


def compiled(spec: KernelSpec) -> CompiledKernel:
    """The cubin of ``spec`` (rendered and compiled, or read from the cache, once per process)."""
    found = _compiled.get(spec)
    if found is None:
        # No lock: get_kernel calls this while holding _lock, and two threads that
        # compile one spec at once get the same bytes (setdefault keeps the first).
        found = _compiled.setdefault(spec, compile_source(render(spec), variant=spec))
    return found


def get_kernel(spec: KernelSpec, ordinal: int) -> LoadedKernel:
    found = _loaded.get((spec, ordinal))
    if found is not None:
        return found
    with _lock:
        found = _loaded.get((spec, ordinal))
        if found is None:
            found = _load(spec, device(ordinal))
            _loaded[(spec, ordinal)] = found
        return found


def kernel_cache_stats() -> dict:
    """What this process compiled and loaded, and how the binary cache answered.

    ``compiled``: kernels compiled or read from the cache; ``loaded``: kernels
    loaded on a device; ``memory_hits``, ``disk_hits``, ``misses``: the default
    binary cache's lookups; ``all_cache_hits``: every kernel came from the cache
    (no NVRTC run); ``directory``: the cache directory.
    """
    cache = default_cache()
    kernels = list(_compiled.values())
    return {
        "compiled": len(kernels),
        "loaded": len(_loaded),
        "memory_hits": cache.hits_memory,
        "disk_hits": cache.hits_disk,
        "misses": cache.misses,
        "all_cache_hits": all(k.cache_hit for k in kernels),
        "directory": str(cache.directory),
    }


def _load(spec: KernelSpec, dev: Device) -> LoadedKernel:
    if target(spec.arch).gpu_architecture != target(dev.arch).gpu_architecture:
        raise ValueError(f"the kernel is built for {spec.arch!r} but device {dev.ordinal} ({dev.name}) needs "
                         f"{dev.arch!r}")
    kernel = compiled(spec)
    driver = driver_api()
    with in_context(dev):
        module = check(driver.cuModuleLoadData(kernel.cubin), "cuModuleLoadData")
        function = check(driver.cuModuleGetFunction(module, spec.name.encode()), "cuModuleGetFunction")
        check(
            driver.cuFuncSetAttribute(
                function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                spec.smem_bytes,
            ),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )
        per_sm = check(
            driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, spec.threads, spec.smem_bytes),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
    if per_sm < 1:
        raise ValueError(
            f"{spec.name} cannot run on {dev.name}: no CTA of {spec.threads} threads and {spec.smem_bytes} bytes "
            f"of dynamic shared memory fits on one SM ({dev.max_smem_optin} bytes of shared memory per block)"
        )
    return LoadedKernel(spec, kernel, dev, function, per_sm, module)
