"""Kernel launch through ``cuLaunchKernelEx``, with programmatic dependent launch.

Every launch passes one argument block, packed by ``ArgPacker`` from the
kernel's parameter list: the ``void*[]`` the driver reads, then the scalar
arguments it points at. cuda.bindings has no type for a ``__grid_constant__
CUtensorMap`` parameter, so a map is passed by the address of its 128-byte
storage, which the driver copies at launch.

``LaunchTemplate`` holds the ``CUlaunchConfig`` of a fixed kernel, grid,
block and shared memory, built once per thread and per PDL setting, so that
a launch only sets its stream.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Sequence

from ..kernels.spec import PARAM_FORMATS, Param
from .driver import check, driver_api


class ArgPacker:
    """The argument block of one parameter list.

    Tensor-map parameters come first (the templates' convention): their
    slots hold the maps' own addresses; every other slot points at its
    value, stored after the slots with its natural alignment. Values are
    converted by ``struct`` as the C parameter types would take them
    (``f32`` rounds a Python float to nearest, as a C double-to-float cast).

    Each thread packs into a block of its own, whose value slots are written
    once: the driver copies the arguments during the launch, so the block
    is free again when the launch returns, and a launch only writes the map
    addresses and the values.
    """

    __slots__ = ("params", "map_names", "value_names", "_maps", "_values", "_values_at", "_offsets", "_size",
                 "_local")

    def __init__(self, params: Sequence[Param]) -> None:
        self.params = tuple(params)
        kinds = [p.kind for p in self.params]
        maps = kinds.count("map")
        if kinds[:maps] != ["map"] * maps:
            raise ValueError(f"tensor-map parameters must come first, got {[p.name for p in self.params]}")
        self.map_names = tuple(p.name for p in self.params[:maps])
        self.value_names = tuple(p.name for p in self.params[maps:])
        self._values_at = 8 * len(self.params)
        fmt, offset, offsets = "<", self._values_at, []
        for kind in kinds[maps:]:
            code = PARAM_FORMATS[kind]
            size = struct.calcsize(code)
            pad = -offset % size
            fmt += "x" * pad + code
            offset += pad
            offsets.append(offset)
            offset += size
        self._maps = struct.Struct(f"<{maps}Q")
        self._values = struct.Struct(fmt)
        self._offsets = tuple(offsets)
        self._size = -(-offset // 8)
        self._local = threading.local()

    def order(self, names: Sequence[str]) -> tuple[int, ...] | None:
        """How values given in the order ``names`` map to the parameters' order:
        ``None`` when they already match; an error naming what differs otherwise."""
        if sorted(names) != sorted(self.value_names):
            raise ValueError(f"the arguments {sorted(names)} are not the kernel's parameters "
                             f"{sorted(self.value_names)} (tensor maps apart)")
        index = tuple(names.index(name) for name in self.value_names)
        return None if index == tuple(range(len(index))) else index

    def _block(self):
        block = (ctypes.c_uint64 * self._size)()
        base = ctypes.addressof(block)
        struct.pack_into(f"<{len(self._offsets)}Q", block, 8 * len(self.map_names), *[base + o for o in self._offsets])
        self._local.block, self._local.address = block, base
        return block

    def pack(self, maps: Sequence[int], values: Sequence) -> int:
        """This thread's block holding the maps' addresses and ``values`` (in the
        parameters' order); returns its address. The maps' storage must stay
        alive until the launch returns."""
        try:
            block = self._local.block
        except AttributeError:
            block = self._block()
        if maps:
            self._maps.pack_into(block, 0, *maps)
        self._values.pack_into(block, self._values_at, *values)
        return self._local.address


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

    __slots__ = ("function", "grid", "block", "smem_bytes", "_local", "_cu")

    def __init__(self, function, grid: int, block: int, smem_bytes: int) -> None:
        self.function = function
        self.grid = grid
        self.block = block
        self.smem_bytes = smem_bytes
        self._local = threading.local()
        self._cu = driver_api()

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
        cu = self._cu
        config = configs[pdl]  # pdl is a bool: False -> 0, True -> 1
        config.hStream = cu.CUstream(stream)
        result = cu.cuLaunchKernelEx(config, self.function, params_address, 0)
        if result[0]:  # not CUDA_SUCCESS (0)
            check(result, "cuLaunchKernelEx")
