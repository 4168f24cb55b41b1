"""From config to a kernel loaded on a device: render, compile, load, once.

Modules are loaded per device (each device's primary context holds its
own), and the loaded kernel remembers its launch facts (threads, dynamic
shared memory, CTAs per SM) so a launch needs no driver queries.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

from .render import render
from .compiler import CompiledKernel, compile_source
from ..kernels.quantize import QuantizeConfig, SimtConfig
from ..cuda.driver import Device, _cu, check, device, in_context


@dataclass(frozen=True)
class LoadedKernel:
    config: QuantizeConfig | SimtConfig
    compiled: CompiledKernel
    device: Device
    function: object
    threads: int
    smem_bytes: int
    ctas_per_sm: int
    module: object


@functools.lru_cache(maxsize=None)
def compiled(config) -> CompiledKernel:
    """The cubin for ``config`` (rendered and compiled once per process)."""
    return compile_source(render(config), variant=config)


def _launch_shape(config) -> tuple[int, int]:
    # The TMA kernels' configs describe their dynamic shared memory; the others use none.
    smem = getattr(config, "smem", None)
    return config.threads, 0 if smem is None else smem.total


_loaded: dict[tuple[object, int], LoadedKernel] = {}
_lock = threading.Lock()


def get_kernel(config, ordinal: int) -> LoadedKernel:
    found = _loaded.get((config, ordinal))
    if found is not None:
        return found
    with _lock:
        found = _loaded.get((config, ordinal))
        if found is None:
            found = _load(config, device(ordinal))
            _loaded[(config, ordinal)] = found
        return found


def _load(config, dev: Device) -> LoadedKernel:
    if config.arch != dev.arch:
        raise ValueError(
            f"config.arch is {config.arch!r} but device {dev.ordinal} ({dev.name}) needs {dev.arch!r}"
        )
    cu = _cu()
    kernel = compiled(config)
    threads, smem = _launch_shape(config)
    with in_context(dev):
        module = check(cu.cuModuleLoadData(kernel.cubin), "cuModuleLoadData")
        function = check(cu.cuModuleGetFunction(module, kernel.kernel_name.encode()), "cuModuleGetFunction")
        check(
            cu.cuFuncSetAttribute(
                function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem
            ),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )
        per_sm = check(
            cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, threads, smem),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
    if per_sm < 1:
        raise ValueError(f"{type(config).__name__} cannot run on {dev.name}: no CTA fits on one SM")
    return LoadedKernel(config, kernel, dev, function, threads, smem, per_sm, module)
