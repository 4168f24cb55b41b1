"""Kernel launch through ``cuLaunchKernelEx``, with programmatic dependent launch.

A ``Launcher`` holds everything fixed about the launches of one loaded
kernel on one kind of call: the layout of its argument block (from the
kernel's parameter list and the call's slots), its grid, block and dynamic
shared memory, its device, the extents its tensor maps cover and the maps of
recently seen pointers. cuda.bindings has no type for a ``__grid_constant__
CUtensorMap`` parameter, so a map is passed by the address of its 128-byte
storage, which the driver copies at launch.
"""

from __future__ import annotations

import ctypes
import functools
import operator
import struct
import threading
from typing import Callable, Mapping, Sequence

from ..kernels.spec import PARAM_FORMATS, Extent, KernelSpec
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

    A call passes the values of its ``slots`` (``(name, kind)`` pairs, the same for
    every kernel of an op) in their order; a kernel parameter of a slot's name takes
    that value, and the others come from ``fixed`` (values that are the same for
    every launch of this kind of call: shapes, strides, divisors), from ``tickets``
    (the tile counter of the launch's stream with ``dynamic``, else 0) or, for a
    tensor map, from the slot its ``MapSpec`` names as its operand, over the extent
    ``extents`` gives for it.

    The argument block of a thread holds, in this order: the slots' values (each
    with its natural alignment), the tickets word, the ``void*[]`` the driver reads
    (tensor maps first, as the templates declare them: each the address of a map's
    storage; every other entry the address of its value), then the fixed values.
    A launch writes the first three parts with one ``pack_into``; the pointers to
    values and the fixed values are written once. Values are converted by
    ``struct`` as the C parameter types would take them (``f32`` rounds a Python
    float to nearest, as a C double-to-float cast).

    Each thread gets its own argument block and its own pair of ``CUlaunchConfig``
    objects (without and with PDL, each set to a new stream only when the stream
    changes), so concurrent launches never share mutable state. The driver copies
    the arguments during ``cuLaunchKernelEx``, so the block is free again when it
    returns. A kernel built without ``griddepcontrol`` (``pdl`` False) always
    launches without PDL: it must not start before its predecessor ends.
    """

    __slots__ = ("function", "device", "grid", "block", "smem_bytes", "pdl", "dynamic", "takes_tickets", "fixed", "map_names",
                 "_map_operands", "_map_statics", "_maps", "_maps_lock", "_pack", "_fixed_pack", "_table",
                 "_values_bytes", "_block_words", "_local", "_cu")

    def __init__(self, spec: KernelSpec, function, device: Device, grid: int, slots: Sequence[tuple[str, str]],
                 fixed: Mapping[str, object] | None = None, dynamic: bool = False,
                 extents: Mapping[str, Extent] | None = None, pdl: bool = True) -> None:
        self.function, self.device, self.grid, self.dynamic, self.pdl = function, device, grid, dynamic, pdl
        self.block, self.smem_bytes = spec.threads, spec.smem_bytes
        fixed, extents = dict(fixed or {}), dict(extents or {})
        self.fixed = fixed
        kinds = [p.kind for p in spec.params]
        maps = kinds.count("map")
        if kinds[:maps] != ["map"] * maps:
            raise ValueError(f"tensor-map parameters must come first, got {[p.name for p in spec.params]}")
        self.map_names = tuple(p.name for p in spec.params[:maps])
        slot_index = {name: i for i, (name, _) in enumerate(slots)}
        slot_kinds = dict(slots)
        values = spec.params[maps:]
        self.takes_tickets = any(p.name == "tickets" for p in values)
        for p in values:
            if p.name in slot_kinds:
                if slot_kinds[p.name] != p.kind:
                    raise ValueError(f"parameter {p.name!r} is a {p.kind}, but the call's slot of that name is a "
                                     f"{slot_kinds[p.name]}")
            elif p.name not in fixed and p.name != "tickets":
                raise ValueError(f"parameter {p.name!r} of {spec.name} is neither a slot of the call "
                                 f"{[name for name, _ in slots]}, nor a fixed value {sorted(fixed)}, nor tickets")
        if len(spec.maps) != maps or [m.param for m in spec.maps] != list(self.map_names):
            raise ValueError(f"the map parameters {self.map_names} are not the spec's maps "
                             f"{[m.param for m in spec.maps]}")
        operands = [slot_index[m.operand] for m in spec.maps if m.geometry != "unused"]
        # The mapped values among a call's values, as a tuple (itemgetter of one index returns the value alone).
        self._map_operands: Callable[[Sequence], tuple]
        if len(operands) > 1:
            self._map_operands = operator.itemgetter(*operands)
        else:
            self._map_operands = lambda values: tuple([values[i] for i in operands])
        self._map_statics = tuple(
            (m.operand, m.element_bytes, *m.dims_strides(extents[m.operand]), m.box, m.swizzle, m.l2_promotion)
            for m in spec.maps if m.geometry != "unused")
        # One struct: the slots' values, the tickets word, the map entries of the table.
        fmt, offset, where = "<", 0, {}
        for name, kind in slots:
            fmt, offset = _field(fmt, offset, kind)
            where[name] = offset - struct.calcsize(PARAM_FORMATS[kind])
        if self.takes_tickets:
            fmt, offset = _field(fmt, offset, "ptr")
            where["tickets"] = offset - 8
        pad = -offset % 8
        table = offset + pad
        self._values_bytes = table
        self._pack = struct.Struct(fmt + "x" * pad + "Q" * maps)
        # The fixed values after the table, and the table's entries for values.
        fixed_fmt, fixed_at, fixed_values = "<", table + 8 * len(spec.params), []
        fixed_offset = fixed_at
        for p in values:
            if p.name in where:
                continue
            if p.name in fixed:
                fixed_fmt, fixed_offset = _field(fixed_fmt, fixed_offset, p.kind)
                where[p.name] = fixed_offset - struct.calcsize(PARAM_FORMATS[p.kind])
                fixed_values.append(fixed[p.name])
        self._fixed_pack = (struct.Struct(fixed_fmt), fixed_at, tuple(fixed_values))
        self._table = tuple(where[p.name] for p in values)  # offsets the value entries point to
        self._block_words = -(-fixed_offset // 8)
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
                what, element_bytes, dims, strides, box, swizzle, l2 = static
                objects.append(tensor_maps.get(TensorMapSpec(ptr, element_bytes, dims, strides, box, swizzle, l2),
                                               what))
        # A map the kernel's flags leave unread gets the first map again.
        objects += [objects[0]] * (len(self.map_names) - len(objects))
        found = (tuple(int(m.getPtr()) for m in objects), objects)
        with self._maps_lock:
            put_bounded(self._maps, pointers, found, MAPS_PER_LAUNCHER)
        return found

    def tickets(self, stream: int) -> int:
        """The tile counter of a launch on ``stream`` (0: the static tile order)."""
        return counter_for(self.device, stream) if self.dynamic else 0

    def _thread_state(self) -> tuple:
        block = (ctypes.c_uint64 * self._block_words)()
        base = ctypes.addressof(block)
        maps = len(self.map_names)
        struct.pack_into(f"<{len(self._table)}Q", block, self._values_bytes + 8 * maps,
                         *[base + offset for offset in self._table])
        fixed, at, values = self._fixed_pack
        fixed.pack_into(block, at, *values)
        without = _launch_config(self.grid, self.block, self.smem_bytes, False)
        # Two objects even without PDL: each remembers the stream it was last set to.
        with_pdl = _launch_config(self.grid, self.block, self.smem_bytes, self.pdl)
        self._local.keep = (block, without, with_pdl)  # the PDL attribute the configs point into
        # pack(*values): the block and offset bound once (a call with both spelled out costs
        # a tuple per launch); streams: the stream each config was last set to (None: never).
        pack = functools.partial(self._pack.pack_into, block, 0)
        state = self._local.state = (pack, base + self._values_bytes, (without[0], with_pdl[0]), [None, None])
        return state

    def __call__(self, stream: int, pdl: bool, values: Sequence, tickets: int | None = None) -> None:
        """Launch on ``stream`` with the slots' ``values`` (in the order of the slots), in the
        device's primary context (pushed only when another context is current); ``tickets``:
        the counter a caller already took (``tickets(stream)``), else taken here."""
        try:
            pack, address, configs, streams = self._local.state
        except AttributeError:
            pack, address, configs, streams = self._thread_state()
        if self.map_names:
            # objects: held until the driver has copied the maps, should another thread evict the entry.
            pointers = self._map_operands(values)
            addresses, objects = self._maps.get(pointers) or self.maps(pointers)
            if self.takes_tickets:
                pack(*values, self.tickets(stream) if tickets is None else tickets, *addresses)
            else:
                pack(*values, *addresses)
        elif self.takes_tickets:
            pack(*values, self.tickets(stream) if tickets is None else tickets)
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


def _field(fmt: str, offset: int, kind: str) -> tuple[str, int]:
    """``fmt`` and ``offset`` after one more value of ``kind`` at its natural alignment."""
    code = PARAM_FORMATS[kind]
    size = struct.calcsize(code)
    pad = -offset % size
    return fmt + "x" * pad + code, offset + pad + size
