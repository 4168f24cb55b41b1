"""Launch plans: what one kind of call resolved, kept for the calls after it.

A call's kind is a tuple of primitives that fixes everything its input
rules depend on (the op, the input's shape, byte strides, dtype and device,
the layout and format arguments, the identity of the caller's config
object). Its plan holds what those rules derived (shapes, views) and, per
pointer alignment and tensor-scale mode, a ``KernelLaunch``: the resolved
config, the loaded kernel, its grid, the tensor maps of recently seen
pointers. One bounded cache holds the plans of every op; a repeated call
runs the same rule functions as the first one, minus the ones the key
already fixes.
"""

from __future__ import annotations

import threading

from ..cuda.driver import in_context, is_current
from ..cuda.launch import ArgPacker, LaunchTemplate
from ..cuda.tile_tickets import counter_for
from ..cuda.tma import TensorMapCache, TensorMapSpec
from ..jit.loader import LoadedKernel
from ..kernels.archs import target

PLAN_CAPACITY = 1024
MAPS_PER_LAUNCH = 64

tensor_maps = TensorMapCache()


def put_bounded(table: dict, key, value, capacity: int) -> None:
    """Store ``value`` under ``key``; a new key first evicts the oldest entries (dicts
    keep insertion order), so the table never holds more than ``capacity``. The
    caller holds the table's lock."""
    if key not in table:
        while len(table) >= capacity:
            del table[next(iter(table))]
    table[key] = value


class PlanCache:
    """The bounded, thread-safe store of plans, by kind of call."""

    def __init__(self, capacity: int = PLAN_CAPACITY) -> None:
        self.capacity = capacity
        self._plans: dict = {}
        self._lock = threading.Lock()
        self.get = self._plans.get  # the plan stored under a key, or None: a lookup without a Python frame

    def put(self, key, plan):
        """Store ``plan`` (or return the one another thread stored first)."""
        with self._lock:
            found = self._plans.get(key)
            if found is not None:
                return found
            put_bounded(self._plans, key, plan, self.capacity)
            return plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


plans = PlanCache()


class KernelLaunch:
    """A loaded kernel, its grid and its tensor-map geometry for one kind of call.

    ``map_shapes`` gives, per tensor-map parameter of the spec, the argument
    it maps (for messages), its dims and byte strides, or the index of an earlier map
    parameter to pass again (for a map the kernel's flags leave unread); the
    spec gives box, swizzle and element size. Maps are encoded per set of
    pointers and kept (bounded).
    """

    __slots__ = ("config", "kernel", "device", "packer", "order", "template", "dynamic", "pdl", "maps_from",
                 "_map_statics", "_maps", "_maps_lock")

    def __init__(self, config, kernel: LoadedKernel, grid: int, arg_names: tuple[str, ...], dynamic: bool = False,
                 map_shapes=()) -> None:
        spec = kernel.spec
        self.config = config
        self.kernel = kernel
        self.device = kernel.device
        self.packer = ArgPacker(spec.params)
        self.order = self.packer.order(arg_names)  # the call's values, by these names, in the kernel's order
        self.template = LaunchTemplate(kernel.function, grid, spec.threads, spec.smem_bytes)
        self.dynamic = dynamic  # CTAs take tiles from the stream's counter (tile_tickets)
        # A kernel built without griddepcontrol must not start before its predecessor ends.
        self.pdl = target(spec.arch).features.pdl
        self._map_statics = tuple(
            shape if isinstance(shape, int) else (shape[0], box.element_bytes, shape[1], shape[2], box.box,
                                                  box.swizzle, box.l2_promotion)
            for box, shape in zip(spec.maps, map_shapes)
        )
        self.maps_from = bool(spec.maps)  # whether a launch takes its pointers' tensor maps
        self._maps: dict[tuple, tuple] = {}
        self._maps_lock = threading.Lock()

    def maps(self, pointers: tuple) -> tuple:
        """The addresses of the maps for ``pointers`` (one per map parameter, in
        order), then the map objects, which must outlive the launch."""
        found = self._maps.get(pointers)
        if found is not None:
            return found
        # Encoding needs a current context, which a thread that never touched the CUDA runtime lacks.
        objects: list = []
        with in_context(self.kernel.device):
            for ptr, static in zip(pointers, self._map_statics):
                if isinstance(static, int):
                    objects.append(objects[static])
                else:
                    what, element_bytes, dims, strides, box, swizzle, l2 = static
                    objects.append(tensor_maps.get(TensorMapSpec(ptr, element_bytes, dims, strides, box, swizzle,
                                                                 l2), what))
        found = (tuple(int(m.getPtr()) for m in objects), objects)
        with self._maps_lock:
            put_bounded(self._maps, pointers, found, MAPS_PER_LAUNCH)
        return found

    def tickets(self, stream: int) -> int:
        """The tile counter of a launch on ``stream`` (0: the static tile order)."""
        return counter_for(self.kernel.device, stream) if self.dynamic else 0

    def __call__(self, stream: int, pdl: bool, values: tuple, map_pointers: tuple = ()) -> None:
        """Pack ``values`` (in the order of the ``arg_names`` given at construction) and
        the maps of ``map_pointers``, and launch in the device's primary context
        (pushed only when another context is current)."""
        if self.maps_from:
            addresses, objects = self._maps.get(map_pointers) or self.maps(map_pointers)
        else:
            addresses, objects = (), ()
        if self.order is not None:
            values = [values[i] for i in self.order]
        address = self.packer.pack(addresses, values)
        if is_current(self.device):
            self.template.launch(stream, address, pdl and self.pdl)
        else:
            with in_context(self.device):
                self.template.launch(stream, address, pdl and self.pdl)
        del objects  # the maps' storage, alive until the driver has copied it
