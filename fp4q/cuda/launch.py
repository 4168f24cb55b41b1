"""Kernel launch through ``cuLaunchKernelEx``, with programmatic dependent launch.

A ``Launcher`` holds everything fixed about the launches of one loaded
kernel on one kind of call: the layout of its argument block (from the
kernel's parameter list), its grid, block and dynamic shared memory, its
device, the geometry of its tensor maps and the maps of recently seen
pointers. Every launch passes one argument block: the scalar arguments,
then the ``void*[]`` the driver reads. cuda.bindings has no type for a
``__grid_constant__ CUtensorMap`` parameter, so a map is passed by the
address of its 128-byte storage, which the driver copies at launch.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from typing import Sequence

from ..kernels.spec import PARAM_FORMATS, KernelSpec
from .driver import Device, check, driver_api, in_context, is_current
from .tile_tickets import counter_for
from .tma import TensorMapCache, TensorMapSpec

MAPS_PER_LAUNCHER = 64

tensor_maps = TensorMapCache()


def put_bounded(table: dict, key, value, capacity: int) -> None:
    """Store ``value`` under ``key``; a new key first evicts the oldest entries (dicts
    keep insertion order), so the table never holds more than ``capacity``. The
    caller holds the table's lock."""
    if key not in table:
        while len(table) >= capacity:
            del table[next(iter(table))]
    table[key] = value


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


class Launcher:
    """Launches of one kernel with one grid, its parameters given by name.

    The argument block: the scalar values first, each with its natural
    alignment, then the slots the driver reads, tensor-map parameters
    first (the templates' convention). A map's slot holds the map's own
    address, every other slot the address of its value. Values are
    converted by ``struct`` as the C parameter types would take them
    (``f32`` rounds a Python float to nearest, as a C double-to-float cast);
    the values and the map addresses are written by one ``pack_into``.

    ``fixed`` holds ``(name, value)`` pairs of parameters whose values are the
    same for every launch of this kind of call (appended to each call's).

    ``map_shapes`` gives, per tensor-map parameter of the spec, the argument
    it maps (for messages), its dims and byte strides, or the index of an
    earlier map parameter to pass again (for a map the kernel's flags leave
    unread); the spec gives box, swizzle and element size. Maps are encoded
    per set of pointers and kept (bounded). With ``dynamic``, CTAs take
    tiles from a counter of the launch's stream (``tickets``).

    Each thread gets its own argument block, whose slots are written once,
    and its own pair of ``CUlaunchConfig`` objects (without and with PDL,
    each set to a new stream only when the stream changes), so concurrent
    launches never share mutable state. The driver copies
    the arguments during ``cuLaunchKernelEx``, so the block is free again
    when it returns. A kernel built without ``griddepcontrol`` (``pdl``
    False) always launches without PDL: it must not start before its
    predecessor ends.
    """

    __slots__ = ("function", "device", "grid", "block", "smem_bytes", "pdl", "dynamic", "map_names", "value_names",
                 "order", "_map_statics", "_maps", "_maps_lock", "_pack", "_values_bytes", "_offsets", "_local",
                 "_cu", "_fixed")

    def __init__(self, spec: KernelSpec, function, device: Device, grid: int, arg_names: Sequence[str],
                 dynamic: bool = False, map_shapes=(), pdl: bool = True, fixed: Sequence[tuple] = ()) -> None:
        self.function, self.device, self.grid, self.dynamic, self.pdl = function, device, grid, dynamic, pdl
        self.block, self.smem_bytes = spec.threads, spec.smem_bytes
        kinds = [p.kind for p in spec.params]
        maps = kinds.count("map")
        if kinds[:maps] != ["map"] * maps:
            raise ValueError(f"tensor-map parameters must come first, got {[p.name for p in spec.params]}")
        self.map_names = tuple(p.name for p in spec.params[:maps])
        self.value_names = tuple(p.name for p in spec.params[maps:])
        names = tuple(arg_names) + tuple(name for name, _ in fixed)
        self._fixed = tuple(value for _, value in fixed)
        if sorted(names) != sorted(self.value_names):
            raise ValueError(f"the arguments {sorted(names)} are not the kernel's parameters "
                             f"{sorted(self.value_names)} (tensor maps apart)")
        index = tuple(names.index(name) for name in self.value_names)
        # How the call's values (in the order of arg_names) map to the parameters' order; None: as given.
        self.order = None if index == tuple(range(len(index))) else index
        fmt, offset, offsets = "<", 0, []
        for kind in kinds[maps:]:
            code = PARAM_FORMATS[kind]
            size = struct.calcsize(code)
            pad = -offset % size
            fmt += "x" * pad + code
            offset += pad
            offsets.append(offset)
            offset += size
        self._values_bytes = offset + -offset % 8
        self._pack = struct.Struct(fmt + "x" * (self._values_bytes - offset) + "Q" * maps)
        self._offsets = tuple(offsets)
        self._map_statics = tuple(
            shape if isinstance(shape, int) else (shape[0], box.element_bytes, shape[1], shape[2], box.box,
                                                  box.swizzle, box.l2_promotion)
            for box, shape in zip(spec.maps, map_shapes)
        )
        self._maps: dict[tuple, tuple] = {}
        self._maps_lock = threading.Lock()
        self._local = threading.local()
        self._cu = driver_api()

    def maps(self, pointers: tuple) -> tuple:
        """The addresses of the maps for ``pointers`` (one per map parameter, in
        order), then the map objects, which must outlive the launch."""
        found = self._maps.get(pointers)
        if found is not None:
            return found
        # Encoding needs a current context, which a thread that never touched the CUDA runtime lacks.
        objects: list = []
        with in_context(self.device):
            for ptr, static in zip(pointers, self._map_statics):
                if isinstance(static, int):
                    objects.append(objects[static])
                else:
                    what, element_bytes, dims, strides, box, swizzle, l2 = static
                    objects.append(tensor_maps.get(TensorMapSpec(ptr, element_bytes, dims, strides, box, swizzle,
                                                                 l2), what))
        found = (tuple(int(m.getPtr()) for m in objects), objects)
        with self._maps_lock:
            put_bounded(self._maps, pointers, found, MAPS_PER_LAUNCHER)
        return found

    def tickets(self, stream: int) -> int:
        """The tile counter of a launch on ``stream`` (0: the static tile order)."""
        return counter_for(self.device, stream) if self.dynamic else 0

    def _thread_state(self) -> tuple:
        maps, values = len(self.map_names), len(self._offsets)
        block = (ctypes.c_uint64 * (self._values_bytes // 8 + maps + values))()
        base = ctypes.addressof(block)
        address = base + self._values_bytes  # the slots
        struct.pack_into(f"<{values}Q", block, self._values_bytes + 8 * maps, *[base + o for o in self._offsets])
        without = _launch_config(self.grid, self.block, self.smem_bytes, False)
        # Two objects even without PDL: each remembers the stream it was last set to.
        with_pdl = _launch_config(self.grid, self.block, self.smem_bytes, self.pdl)
        self._local.keep = (without, with_pdl)  # the PDL attribute the config points into
        # pack(*values): the block and offset bound once (a call with both spelled out costs
        # a tuple per launch); streams: the stream each config was last set to (None: never).
        pack = functools.partial(self._pack.pack_into, block, 0)
        state = self._local.state = (pack, address, (without[0], with_pdl[0]), [None, None])
        return state

    def __call__(self, stream: int, pdl: bool, values: Sequence, map_pointers: tuple = ()) -> None:
        """Launch on ``stream`` with ``values`` (in the order of ``arg_names``) and the maps
        of ``map_pointers``, in the device's primary context (pushed only when another
        context is current)."""
        try:
            pack, address, configs, streams = self._local.state
        except AttributeError:
            pack, address, configs, streams = self._thread_state()
        if self._fixed:
            values = (*values, *self._fixed)
        if self.order is not None:
            values = [values[i] for i in self.order]
        if map_pointers:
            # objects: held until the driver has copied the maps, should another thread evict the entry.
            addresses, objects = self._maps.get(map_pointers) or self.maps(map_pointers)
            pack(*values, *addresses)
        else:
            pack(*values)
        cu = self._cu
        config = configs[pdl]  # pdl is a bool: False -> 0, True -> 1
        if streams[pdl] != stream:
            config.hStream = cu.CUstream(stream)
            streams[pdl] = stream
        if is_current(self.device):
            result = cu.cuLaunchKernelEx(config, self.function, address, 0)
        else:
            with in_context(self.device):
                result = cu.cuLaunchKernelEx(config, self.function, address, 0)
        if result[0]:  # not CUDA_SUCCESS (0)
            check(result, "cuLaunchKernelEx")
