"""What a kernel is to everything after its config: the kernel spec.

A config (``quantize.py``, ``dequantize.py``, ``global_scale.py``) validates
the parameters a user may choose; its ``spec`` says what those parameters
make of the kernel: the template to render, the constants and feature flags
written ahead of it, the ordered kernel parameters (from which one builder
packs every launch's argument block), the threads, the dynamic shared memory
and the rule that sizes the grid. Rendering, loading and launching read the
spec, never the config class.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

MAX_BOX_DIM = 256  # TMA: elements per box dimension


class Swizzle(enum.IntEnum):
    """TMA shared-memory swizzle modes, valued by the span in bytes."""

    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128


# Kernel parameter kinds and how a launch stores them: a tensor map is passed by
# the address of its 128-byte storage (the driver copies it); every other kind is
# a scalar in the argument block, in the struct format given here.
PARAM_FORMATS = {"ptr": "Q", "i32": "i", "u32": "I", "i64": "q", "u64": "Q", "f32": "f"}
PARAM_KINDS = ("map", *PARAM_FORMATS)

# The C type each kind is declared with in the templates' extern "C" signatures.
PARAM_C_TYPES = {
    "map": ("TensorMap",),
    "ptr": ("u8*", "u16*", "u32*", "i32*", "float*"),
    "i32": ("i32",),
    "u32": ("u32",),
    "i64": ("i64",),
    "u64": ("u64",),
    "f32": ("float",),
}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"Param kind must be one of {PARAM_KINDS}, got {self.kind!r}")


def params(*pairs: tuple[str, str]) -> tuple[Param, ...]:
    return tuple(Param(name, kind) for name, kind in pairs)


@dataclass(frozen=True)
class TileGrid:
    """One CTA per ``tile_m x tile_k`` tile. A persistent kernel launches no more
    CTAs than fit on the device at once, and those take the remaining tiles from
    a counter (the dynamic tile order)."""

    tile_m: int
    tile_k: int
    persistent: bool

    def size(self, rows: int, cols: int, sm_count: int, ctas_per_sm: int) -> tuple[int, bool]:
        """``(grid, dynamic)``: the CTAs to launch and whether they share tiles out."""
        tiles = math.ceil(rows / self.tile_m) * math.ceil(cols / self.tile_k)
        grid = min(tiles, sm_count * ctas_per_sm) if self.persistent else tiles
        return grid, grid < tiles


@dataclass(frozen=True)
class StrideGrid:
    """A grid-stride loop over work items: enough CTAs for ``items_per_cta`` items
    each, at most ``waves`` rounds of the CTAs that fit on the device (counting at
    most ``max_ctas_per_sm`` per SM when given)."""

    items_per_cta: int
    waves: int = 1
    max_ctas_per_sm: int | None = None

    def size(self, items: int, sm_count: int, ctas_per_sm: int) -> int:
        resident = ctas_per_sm if self.max_ctas_per_sm is None else min(ctas_per_sm, self.max_ctas_per_sm)
        return max(1, min(math.ceil(items / self.items_per_cta), sm_count * resident * self.waves))


@dataclass(frozen=True)
class Extent:
    """What a call knows of an array a tensor map covers: ``rows`` rows of ``width``
    elements, ``row_bytes`` apart (for scales: ``width`` is the groups per row)."""

    rows: int
    width: int
    row_bytes: int


# How a map's dims and strides (innermost first, strides in bytes) follow from its array's extent.
MAP_GEOMETRIES = ("rows", "sf_blocks", "unused")


@dataclass(frozen=True)
class MapSpec:
    """A tensor-map parameter, whole: the array it maps (``operand``, by the call's name
    for it), element size, box (innermost first), swizzle, L2 promotion, and its
    geometry: ``"rows"`` (a row-major matrix: dims (width, rows), stride row_bytes),
    ``"sf_blocks"`` (the 128x4 scale layout as 512-byte blocks: dims (16, 32, k_blocks,
    m_blocks)), or ``"unused"`` (the kernel's flags leave the map unread: the launch
    passes the first map again)."""

    param: str
    operand: str
    element_bytes: int
    box: tuple[int, ...]
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: int = 0
    geometry: str = "rows"

    def __post_init__(self) -> None:
        if self.geometry not in MAP_GEOMETRIES:
            raise ValueError(f"MapSpec geometry must be one of {MAP_GEOMETRIES}, got {self.geometry!r}")

    def dims_strides(self, extent: Extent) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The map's dims and byte strides over an array of this extent."""
        if self.geometry == "sf_blocks":
            k_blocks, m_blocks = -(-extent.width // 4), -(-extent.rows // 128)
            return (16, 32, k_blocks, m_blocks), (16, 512, 512 * k_blocks)
        return (extent.width, extent.rows), (extent.row_bytes,)


class WarpSpecialized:
    """The threads of a warp-specialized (TMA) kernel's config: a producer of
    ``producer`` threads that issues the loads, then consumer groups of
    ``group`` threads each, as many as the config field ``groups`` says. A
    config class names the three in its class statement:
    ``class C(WarpSpecialized, producer=128, group=128, groups="consumer_warpgroups")``."""

    PRODUCER_THREADS: ClassVar[int]
    CONSUMER_GROUP_THREADS: ClassVar[int]
    CONSUMER_GROUPS: ClassVar[str]

    def __init_subclass__(cls, producer: int | None = None, group: int | None = None, groups: str | None = None,
                          **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if producer is None and group is None and groups is None:
            return  # inherited
        if producer is None or group is None or groups is None:
            raise TypeError(f"{cls.__name__} must name producer, group and groups together, got producer={producer}, "
                            f"group={group}, groups={groups!r}")
        cls.PRODUCER_THREADS, cls.CONSUMER_GROUP_THREADS, cls.CONSUMER_GROUPS = producer, group, groups

    @property
    def consumer_threads(self) -> int:
        return getattr(self, self.CONSUMER_GROUPS) * self.CONSUMER_GROUP_THREADS

    @property
    def threads(self) -> int:
        return self.PRODUCER_THREADS + self.consumer_threads


GridT = TypeVar("GridT", TileGrid, StrideGrid)


@dataclass(frozen=True)
class KernelSpec(Generic[GridT]):
    """One kernel binary and how to launch it.

    ``constants`` are written as ``constexpr int`` and ``flags`` as feature
    flags ahead of ``template``; ``params`` is the kernel's parameter list in
    order, which must match the template's ``extern "C"`` signature;
    ``grid`` is the rule that sizes the launch, a TileGrid or a StrideGrid
    (``KernelSpec[StrideGrid]`` says which to a type checker).
    """

    name: str
    template: str
    arch: str
    constants: tuple[tuple[str, int], ...]
    flags: tuple[tuple[str, bool], ...]
    params: tuple[Param, ...]
    threads: int
    smem_bytes: int
    grid: GridT
    maps: tuple[MapSpec, ...] = ()


class KernelConfig(Protocol):
    """What the JIT needs of a config: its spec."""

    @property
    def spec(self) -> KernelSpec: ...


def simt_spec(kernel: str, arch: str, constants, flags, params: tuple[Param, ...], threads: int,
              grid: StrideGrid) -> KernelSpec[StrideGrid]:
    """The spec of a kernel without shared memory or tensor maps: ``fp4q_<kernel>``,
    rendered from ``kernels/<kernel>.cu``."""
    return KernelSpec(f"fp4q_{kernel}", f"kernels/{kernel}.cu", arch, tuple(constants), tuple(flags), params,
                      threads, 0, grid)
