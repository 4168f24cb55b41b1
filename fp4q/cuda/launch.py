"""Kernel launch through ``cuLaunchKernelEx``, with programmatic dependent launch.

Arguments are packed by hand into a ``void*[]``: cuda.bindings has no type
for a ``__grid_constant__ CUtensorMap`` parameter, so each map is passed by
the address of its 128-byte storage, which the driver copies at launch.

``launch`` builds everything for one call; ``LaunchTemplate`` is the hot
path's version: the ``CUlaunchConfig`` of a fixed kernel, grid, block and
shared memory, built once per thread and per PDL setting, so that a call
only sets its stream and passes its packed argument block.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Sequence

from .driver import _cu, check


class TensorMapArg:
    __slots__ = ("tensor_map",)

    def __init__(self, tensor_map) -> None:
        self.tensor_map = tensor_map


def _slot(arg):
    """ctypes storage for one argument: the driver reads it through a pointer."""
    if isinstance(arg, TensorMapArg):
        return None, int(arg.tensor_map.getPtr())
    if isinstance(arg, ctypes._SimpleCData):
        return arg, ctypes.addressof(arg)
    raise TypeError(f"kernel argument must be a TensorMapArg or a ctypes scalar, got {type(arg).__name__}")


def _launch_config(grid: int, block: int, smem_bytes: int, stream: int, pdl: bool):
    """A ``CUlaunchConfig`` and the objects it points into (kept alive with it)."""
    cu = _cu()
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = smem_bytes
    config.hStream = cu.CUstream(stream)
    if pdl:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config.attrs = [attr]
        config.numAttrs = 1
        return config, attr
    config.numAttrs = 0
    return config, None


def launch(function, grid: int, block: int, smem_bytes: int, stream: int, args: Sequence, pdl: bool) -> None:
    cu = _cu()
    slots = [_slot(a) for a in args]
    params = (ctypes.c_void_p * len(slots))(*[address for _, address in slots])
    config, attr = _launch_config(grid, block, smem_bytes, stream, pdl)
    check(cu.cuLaunchKernelEx(config, function, ctypes.addressof(params), 0), "cuLaunchKernelEx")
    # `slots`, `params` and `attr` stay alive until here: the driver has copied them.
    del slots, params, attr


class LaunchTemplate:
    """Launches of one kernel with one grid, block and dynamic shared memory size.

    Each thread gets its own pair of ``CUlaunchConfig`` objects (without and
    with PDL), so concurrent launches from several threads never share a
    mutable config; a launch only sets the stream on its thread's config.
    """

    __slots__ = ("function", "grid", "block", "smem_bytes", "_local")

    def __init__(self, function, grid: int, block: int, smem_bytes: int) -> None:
        self.function = function
        self.grid = grid
        self.block = block
        self.smem_bytes = smem_bytes
        self._local = threading.local()

    def _configs(self) -> tuple:
        without, with_pdl = (_launch_config(self.grid, self.block, self.smem_bytes, 0, pdl) for pdl in (False, True))
        self._local.keep = (without, with_pdl)  # the PDL attribute the config points into
        configs = self._local.configs = (without[0], with_pdl[0])
        return configs

    def launch(self, stream: int, params_address: int, pdl: bool) -> None:
        """Launch on ``stream`` with the ``void*[]`` at ``params_address``.

        Everything the array points at must stay alive until this returns:
        the driver copies the arguments during the call.
        """
        try:
            configs = self._local.configs
        except AttributeError:
            configs = self._configs()
        cu = _cu()
        config = configs[pdl]  # pdl is a bool: False -> 0, True -> 1
        config.hStream = cu.CUstream(stream)
        result = cu.cuLaunchKernelEx(config, self.function, params_address, 0)
        if result[0]:  # not CUDA_SUCCESS (0)
            check(result, "cuLaunchKernelEx")
