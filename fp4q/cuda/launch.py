"""Kernel launch through ``cuLaunchKernelEx``, with programmatic dependent launch.

Every launch passes one argument block, packed by ``ArgPacker`` from the
kernel's parameter list: the ``void*[]`` the driver reads, then the scalar
arguments it points at. cuda.bindings has no type for a ``__grid_constant__
CUtensorMap`` parameter, so a map is passed by the address of its 128-byte
storage, which the driver copies at launch.

``LaunchTemplate`` holds the ``CUlaunchConfig`` of a fixed kernel, grid,
block and shared memory, built once per thread and per PDL setting, so that
a launch only sets its stream; ``Launcher`` binds a template to its packer
and its device's context.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Sequence

from ..kernels.spec import PARAM_FORMATS, Param
from .driver import Device, check, driver_api, in_context, is_current


class ArgPacker:
    """The argument block of one parameter list.

    Tensor-map parameters come first (the templates' convention): their
    slots hold the maps' own addresses; every other slot points at its
    value, stored after the slots with its natural alignment. Values are
    converted by ``struct`` as the C parameter types would take them
    (``f32`` rounds a Python float to nearest, as a C double-to-float cast).
    """

    __slots__ = ("params", "map_names", "value_names", "_struct", "_offsets", "_block_type")

    def __init__(self, params: Sequence[Param]) -> None:
        self.params = tuple(params)
        kinds = [p.kind for p in self.params]
        maps = kinds.count("map")
        if kinds[:maps] != ["map"] * maps:
            raise ValueError(f"tensor-map parameters must come first, got {[p.name for p in self.params]}")
        self.map_names = tuple(p.name for p in self.params[:maps])
        self.value_names = tuple(p.name for p in self.params[maps:])
        count = len(self.params)
        fmt, offset, offsets = f"<{count}Q", 8 * count, []
        for kind in kinds[maps:]:
            code = PARAM_FORMATS[kind]
            size = struct.calcsize(code)
            pad = -offset % size
            fmt += "x" * pad + code
            offset += pad
            offsets.append(offset)
            offset += size
        fmt += "x" * (-offset % 8)
        self._struct = struct.Struct(fmt)
        self._offsets = tuple(offsets)
        self._block_type = ctypes.c_uint64 * (self._struct.size // 8)

    def pack(self, args: dict):
        """A new block holding ``args`` (by parameter name; a map's value is the
        address of its storage). The block, and the maps' storage, must stay alive
        until the launch returns."""
        block = self._block_type()
        base = ctypes.addressof(block)
        self._struct.pack_into(block, 0, *[args[n] for n in self.map_names], *[base + o for o in self._offsets],
                               *[args[n] for n in self.value_names])
        return block


def _launch_config(grid: int, block: int, smem_bytes: int, pdl: bool):
    """A ``CUlaunchConfig`` and the attribute it points into (kept alive with it)."""
    cu = driver_api()
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = smem_bytes
    if pdl:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config.attrs = [attr]
        config.numAttrs = 1
        return config, attr
    config.numAttrs = 0
    return config, None


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
        without, with_pdl = (_launch_config(self.grid, self.block, self.smem_bytes, pdl) for pdl in (False, True))
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
        cu = driver_api()
        config = configs[pdl]  # pdl is a bool: False -> 0, True -> 1
        config.hStream = cu.CUstream(stream)
        result = cu.cuLaunchKernelEx(config, self.function, params_address, 0)
        if result[0]:  # not CUDA_SUCCESS (0)
            check(result, "cuLaunchKernelEx")


class Launcher:
    """One kernel with one grid on one device: pack, then launch in the device's
    primary context (pushed only when another context is current)."""

    __slots__ = ("device", "grid", "packer", "template")

    def __init__(self, device: Device, function, params: Sequence[Param], grid: int, threads: int,
                 smem_bytes: int) -> None:
        self.device = device
        self.grid = grid
        self.packer = ArgPacker(params)
        self.template = LaunchTemplate(function, grid, threads, smem_bytes)

    def __call__(self, stream: int, pdl: bool, args: dict) -> None:
        block = self.packer.pack(args)
        address = ctypes.addressof(block)
        if is_current(self.device):
            self.template.launch(stream, address, pdl)
        else:
            with in_context(self.device):
                self.template.launch(stream, address, pdl)
        del block  # alive until the driver has copied it
