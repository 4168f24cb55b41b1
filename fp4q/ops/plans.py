"""Launch plans: what ``quantize_nvfp4`` resolves for one kind of call,
computed once and reused by every later call of that kind.

A call's kind is a tuple of primitives (see ``plan_key``): the input's shape,
strides, dtype and device, the scale layout, the tensor_sf mode and the
identity of the caller's config object. Its ``Plan`` holds the output shapes
and, per pointer alignment (which decides between TMA and SIMT), a launcher:
the resolved config, the loaded kernel, the grid and a ``LaunchTemplate``.
A launcher packs each call's pointers and tensor_sf into one argument block;
TMA launchers keep the tensor maps of recently seen pointers.

Plans are only stored after a call passed every check of the checked path
(``api._checked_call``), and a plan is only found again by a call whose key
fixes every input of those checks, so the fast path re-checks only what
varies per call (pointers, outputs, tensor_sf, stream, pdl). Whatever the
fast path does not recognise (another array type, a new kind of tensor_sf
or argument) goes to the checked path, so a feature added there works
before it is made fast.
"""

from __future__ import annotations

import ctypes
import math
import struct
import threading

from ..kernels.archs import target
from ..kernels.spec import Swizzle
from ..cuda.driver import in_context, is_current
from ..cuda.launch import LaunchTemplate
from ..cuda.tile_tickets import counter_for
from ..cuda.tma import TensorMapCache, TensorMapSpec

PLAN_CAPACITY = 1024
MAPS_PER_LAUNCHER = 64

tensor_maps = TensorMapCache()

_plans: dict[tuple, "Plan"] = {}
_plans_lock = threading.Lock()


def plan_key(x, device: int, sf_layout: str, mode: str, config, fmt) -> tuple:
    """The key of a call's plan; ``x`` is the CuPy input array, ``fmt`` the
    (hashable) output format of the public function.

    ``config`` enters by identity: the plan holds the object, so its id
    cannot be reused by another object while the plan is stored.
    """
    return (x.shape, x.strides, x.dtype, device, sf_layout, mode, id(config), fmt)


class Plan:
    """Shape facts of one kind of call and its launchers, by pointer alignment."""

    __slots__ = ("config", "q_shape", "sf_shape", "q_size", "sf_size", "x_span", "swizzled", "empty", "launchers")

    def __init__(self, config, view, q_shape, sf_shape, sf_layout: str) -> None:
        self.config = config  # the caller's object (or None): keeps its id unique while stored
        self.q_shape = tuple(q_shape)
        self.sf_shape = tuple(sf_shape)
        self.q_size = math.prod(self.q_shape)
        self.sf_size = math.prod(self.sf_shape)
        lo, hi = view.span
        self.x_span = hi - lo  # bytes from x's base address that x may touch
        self.swizzled = sf_layout == "swizzled"
        self.empty = view.rows == 0 or view.cols == 0
        self.launchers: list = [None, None]  # [pointers not all 16-byte aligned, all aligned]

    def aligned(self, x_ptr: int, q_ptr: int, sf_ptr: int) -> bool:
        """Whether every pointer the TMA kernel would address is 16-byte aligned."""
        return not ((x_ptr | q_ptr | (sf_ptr if self.swizzled else 0)) & 15)


def put_bounded(table: dict, key, value, capacity: int) -> None:
    """Store ``value`` in ``table`` under ``key``; a new key first evicts the oldest
    entries (dicts keep insertion order), so the table never holds more than
    ``capacity``. The caller holds the table's lock."""
    if key not in table:
        while len(table) >= capacity:
            del table[next(iter(table))]
    table[key] = value


def lookup(key: tuple) -> Plan | None:
    return _plans.get(key)


def remember(key: tuple, plan: Plan) -> Plan:
    """Store ``plan`` under ``key`` (or return the one another thread stored first)."""
    with _plans_lock:
        found = _plans.get(key)
        if found is not None and found.config is plan.config:
            return found
        put_bounded(_plans, key, plan, PLAN_CAPACITY)
        return plan


def clear() -> None:
    """Forget every plan (kernels and encoded maps stay in their own caches)."""
    with _plans_lock:
        _plans.clear()


def plan_count() -> int:
    return len(_plans)


# --------------------------------------------------------------------------------------------- argument blocks
# One block per launch: the void*[] the driver reads, then the scalar arguments
# it points at. Scalars are converted as the ctypes types of the kernel's
# parameters would convert them (rows and cols wrap like c_int32).
_TMA_ARGS = struct.Struct("<9Q" "Q f 4x Q i i Q")  # maps x3, sf_linear, tensor_sf, tensor_sf_ptr, rows, cols, tickets
_SIMT_ARGS = struct.Struct("<8Q" "Q q Q Q f 4x Q i i")  # x, row_stride, q, sf, tensor_sf, tensor_sf_ptr, rows, cols
_TmaBlock = ctypes.c_uint64 * (_TMA_ARGS.size // 8)
_SimtBlock = ctypes.c_uint64 * (_SIMT_ARGS.size // 8)
assert _TMA_ARGS.size == 112 and _SIMT_ARGS.size == 120


def _int32(n: int) -> int:
    return ctypes.c_int32(n).value


def launch_in_context(device, template: LaunchTemplate, stream: int, params_address: int, pdl: bool) -> None:
    """Launch in the device's primary context, pushing it only when it is not current."""
    if is_current(device):
        template.launch(stream, params_address, pdl)
        return
    with in_context(device):
        template.launch(stream, params_address, pdl)


class _Launcher:
    __slots__ = ("config", "kernel", "device", "grid", "template", "rows", "cols", "pdl")

    def __init__(self, config, kernel, grid: int, rows: int, cols: int) -> None:
        self.config = config
        self.kernel = kernel
        self.device = kernel.device
        # A kernel built without griddepcontrol must not start before its predecessor ends.
        self.pdl = target(config.arch).features.pdl
        self.grid = grid
        self.template = LaunchTemplate(kernel.function, grid, kernel.threads, kernel.smem_bytes)
        self.rows = _int32(rows)
        self.cols = _int32(cols)

    def _launch(self, stream: int, params_address: int, pdl: bool) -> None:
        launch_in_context(self.device, self.template, stream, params_address, pdl and self.pdl)


class TmaLauncher(_Launcher):
    """The TMA kernel of one plan: grid, static tensor-map shapes, maps by pointers."""

    __slots__ = ("swizzled", "dynamic", "_x_static", "_q_static", "_sf_static", "_maps", "_maps_lock")

    def __init__(self, config, kernel, rows: int, cols: int, row_stride: int, swizzled: bool) -> None:
        tiles = math.ceil(rows / config.tile_m) * math.ceil(cols / config.tile_k)
        grid = min(tiles, kernel.device.sm_count * kernel.ctas_per_sm) if config.persistent else tiles
        super().__init__(config, kernel, grid, rows, cols)
        self.swizzled = swizzled
        # CTAs with more than one tile take them from a counter (tile_tickets).
        self.dynamic = grid < tiles
        # TensorMapSpec fields after the address, as the kernel's three maps need them.
        self._x_static = (2, (cols, rows), (row_stride * 2,), (config.input_box_k, config.tile_m),
                          config.input_swizzle, 256)
        self._q_static = (1, (cols // 2, rows), (cols // 2,), (config.output_box_k, config.tile_m),
                          config.output_swizzle, 0)
        k_blocks, m_blocks = math.ceil(cols / (4 * config.sf_vec_size)), math.ceil(rows / 128)
        self._sf_static = (1, (16, 32, k_blocks, m_blocks), (16, 512, 512 * k_blocks),
                           tuple(reversed(config.scales_box)), Swizzle.NONE, 0)
        self._maps: dict[tuple, tuple] = {}
        self._maps_lock = threading.Lock()

    def _encode(self, key: tuple, x_ptr: int, q_ptr: int, sf_ptr: int) -> tuple:
        """The maps for these pointers, from the shared cache (validated and encoded on a miss).

        Encoding needs a current context, which a thread that never touched
        the CUDA runtime does not have."""
        with in_context(self.device):
            in_map = tensor_maps.get(TensorMapSpec(x_ptr, *self._x_static), "x")
            q_map = tensor_maps.get(TensorMapSpec(q_ptr, *self._q_static), "out")
            sf_map = (tensor_maps.get(TensorMapSpec(sf_ptr, *self._sf_static), "sf_out") if self.swizzled
                      else q_map)
        maps = (int(in_map.getPtr()), int(q_map.getPtr()), int(sf_map.getPtr()), in_map, q_map, sf_map)
        with self._maps_lock:
            put_bounded(self._maps, key, maps, MAPS_PER_LAUNCHER)
        return maps

    def __call__(self, x_ptr: int, q_ptr: int, sf_ptr: int, value: float, scale_ptr: int, stream: int,
                 pdl: bool) -> None:
        if self.swizzled:
            key, sf_linear = (x_ptr, q_ptr, sf_ptr), 0
        else:
            key, sf_linear = (x_ptr, q_ptr), sf_ptr
        maps = self._maps.get(key)
        if maps is None:
            maps = self._encode(key, x_ptr, q_ptr, sf_ptr)
        tickets = counter_for(self.device, stream) if self.dynamic else 0
        block = _TmaBlock()
        base = ctypes.addressof(block)
        _TMA_ARGS.pack_into(block, 0, maps[0], maps[1], maps[2], base + 72, base + 80, base + 88, base + 96,
                            base + 100, base + 104, sf_linear, value, scale_ptr, self.rows, self.cols, tickets)
        self._launch(stream, base, pdl)
        # `block` and `maps` (the maps' storage) stay alive until the driver has copied them.
        del block, maps


def simt_threads(config, rows: int, cols: int, swizzled: bool) -> int:
    """Threads that give a SIMT kernel one work item each (more are not needed, fewer loop)."""
    groups = cols // config.sf_vec_size
    domain_groups = math.ceil(groups / 4) * 4 if swizzled else groups
    if not config.vector:  # a thread per group of the padded scale domain
        return (math.ceil(rows / 128) * 128 if swizzled else rows) * domain_groups
    # A thread per 8 elements; zero-scale words of the padding rows are shared out too.
    padding_words = (math.ceil(rows / 128) * 128 - rows) * domain_groups // 4 if swizzled else 0
    return max(rows * domain_groups * (config.sf_vec_size // 8), padding_words)


class SimtLauncher(_Launcher):
    """A SIMT kernel (vector or plain) of one plan."""

    __slots__ = ("row_stride",)

    def __init__(self, config, kernel, rows: int, cols: int, row_stride: int, swizzled: bool) -> None:
        grid = max(1, min(math.ceil(simt_threads(config, rows, cols, swizzled) / config.threads),
                          kernel.device.sm_count * kernel.ctas_per_sm * 4))
        super().__init__(config, kernel, grid, rows, cols)
        self.row_stride = ctypes.c_int64(row_stride).value

    def __call__(self, x_ptr: int, q_ptr: int, sf_ptr: int, value: float, scale_ptr: int, stream: int,
                 pdl: bool) -> None:
        block = _SimtBlock()
        base = ctypes.addressof(block)
        _SIMT_ARGS.pack_into(block, 0, base + 64, base + 72, base + 80, base + 88, base + 96, base + 104, base + 112,
                             base + 116, x_ptr, self.row_stride, q_ptr, sf_ptr, value, scale_ptr, self.rows,
                             self.cols)
        self._launch(stream, base, pdl)
        del block
