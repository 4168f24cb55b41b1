"""Kernel launch through ``cuLaunchKernelEx``, with programmatic dependent launch.

Arguments are packed by hand into a ``void*[]``: cuda.bindings has no type
for a ``__grid_constant__ CUtensorMap`` parameter, so each map is passed by
the address of its 128-byte storage, which the driver copies at launch.
"""

from __future__ import annotations

import ctypes
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


def launch(function, grid: int, block: int, smem_bytes: int, stream: int, args: Sequence, pdl: bool) -> None:
    cu = _cu()
    slots = [_slot(a) for a in args]
    params = (ctypes.c_void_p * len(slots))(*[address for _, address in slots])
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
    else:
        config.numAttrs = 0
    check(cu.cuLaunchKernelEx(config, function, ctypes.addressof(params), 0), "cuLaunchKernelEx")
    # `slots` and `params` stay alive until here: the driver has copied them.
    del slots, params
