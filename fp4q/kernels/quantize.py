"""Configs of the quantization kernels: frozen, validated descriptions of one kernel binary.

A config holds the tuning knobs that change the generated source (tile and
TMA box shapes, swizzle modes, pipeline depth, thread roles, load widths) on
top of the call's fields (``call.CallFields``: format, scale layout, tensor
scale mode, input dtype, target). Construction validates it, so code further
down the pipeline (rendering, compiling, launching) trusts it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import ClassVar

from .archs import ARCHS, check_arch, check_fits_sm, max_ctas_per_sm
from ..numerics.layouts import SF_TILE
from .call import ELEMENTWISE_PROLOGUES, FLOAT32_INPUT, TMA_SF_LAYOUTS, CallFields
from .rules import ConfigError, align_up, check_bool, check_choice, check_even_split, check_int, require
from .spec import (MAX_BOX_DIM, KernelSpec, MapSpec, StrideGrid, Swizzle, TileGrid, WarpSpecialized, params,
                   simt_spec)
from .walk import UNIT_DIVISOR_PARAMS

WARPGROUP = 128
SF_BLOCK_ROWS = 128  # rows of one 128x4 scale block
CHUNK_K = 64  # elements per 4-group chunk, the unit of one consumer step
ALIGN_SLACK = 1024  # dynamic shared memory is only 16-byte aligned at entry

SIMT_WAVES = 4  # grid-stride CTAs per SM slot for the SIMT kernels

# The kernels' parameter lists, in the order of their extern "C" signatures.
TMA_QUANTIZE_PARAMS = params(
    ("x_map", "map"), ("out_map", "map"), ("sf_out_map", "map"), ("sf_out", "ptr"), ("tensor_sf_value", "f32"),
    ("tensor_sf_ptr", "ptr"), ("rows", "i32"), ("cols", "i32"), ("tickets", "ptr"),
)
# What the first loads need comes first: on the H200 the kernel then starts with one
# constant-cache miss fewer (ncu, caches flushed, 256x2048: 4.06 -> 3.78 us).
SIMT_QUANTIZE_PARAMS = (
    *params(("x", "ptr"), ("out", "ptr"), ("sf_out", "ptr"), ("x_row_stride", "i64"), ("rows", "i32"),
            ("cols", "i32"), ("out_cols", "i32")),
    *UNIT_DIVISOR_PARAMS,
    *params(("tensor_sf_value", "f32"), ("tensor_sf_ptr", "ptr")),
)


def quantize_flags(cfg) -> tuple[tuple[str, bool], ...]:
    """The feature flags every quantize kernel takes from its call: all of them for
    every config, since both branches of an ``if constexpr`` are compiled."""
    return (
        *cfg.input_flags,
        ("FP4Q_TENSOR_SF_BY_POINTER", cfg.tensor_sf_mode == "pointer"),
        *cfg.layout_flags,
        ("FP4Q_MX_RCEIL", cfg.fmt == "mxfp4" and cfg.mx_mode == "rceil"),
    )


def _check_box(prefix: str, box_bytes: int, swizzle: Swizzle, tile_bytes: int) -> None:
    """The TMA rules for a box's inner dimension (shared by input and output)."""
    box = f"{prefix}_box_k"
    require(box_bytes % 16 == 0, f"{box} must span a multiple of 16 bytes (TMA), got {box_bytes} bytes")
    if swizzle != Swizzle.NONE:
        require(
            box_bytes == swizzle.value,
            f"{box} must fill the {prefix}_swizzle span of {swizzle.value} bytes, got {box_bytes} bytes",
        )
    require(
        tile_bytes % box_bytes == 0,
        f"{box} ({box_bytes} bytes) must divide the {prefix} tile row ({tile_bytes} bytes)",
    )


@dataclass(frozen=True)
class SmemLayout:
    """Byte offsets of the kernel's dynamic shared memory, after alignment."""

    input: int
    q: int
    sf: int
    barriers: int
    tiles: int
    total: int  # including the alignment slack requested at launch


@dataclass(frozen=True)
class QuantizeConfig(CallFields, WarpSpecialized, producer=WARPGROUP, group=WARPGROUP, groups="consumer_warpgroups"):
    """One TMA quantization kernel.

    The input tile is ``tile_m x tile_k`` bf16 elements, loaded as boxes of
    ``tile_m x input_box_k``; the packed output tile ``tile_m x tile_k/2``
    bytes is stored as boxes of ``tile_m x output_box_k`` bytes; the scale
    tile is the ``(tile_m/128, tile_k/(4*sf_vec_size))`` slice of 512-byte
    blocks of the 128x4 layout, ``sf_vec_size`` 16 for NVFP4 (e4m3 scales and
    a tensor scale) and 32 for MXFP4 (e8m0 scales, rounded by ``mx_mode``).
    The call's fields (``CallFields``) are set from each call by the API.
    """

    tile_m: int = 128
    tile_k: int = 128
    input_box_k: int = 64
    input_swizzle: Swizzle = Swizzle.B128
    output_box_k: int = 64
    output_swizzle: Swizzle = Swizzle.B64
    num_stages: int = 4
    consumer_warpgroups: int = 2
    out_buffers: int = 2
    persistent: bool = True
    min_ctas_per_sm: int = 1
    setmaxnreg: bool = True
    sf_layouts: ClassVar[tuple[str, ...]] = TMA_SF_LAYOUTS

    def __post_init__(self) -> None:
        for name in ("input_swizzle", "output_swizzle"):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, Swizzle(value))
            except ValueError:
                raise ConfigError(
                    f"{name} must be one of {[s.value for s in Swizzle]} (bytes), got {value!r}"
                ) from None
        super().__post_init__()

    def check(self) -> None:
        self.check_prologue(ELEMENTWISE_PROLOGUES)
        if self.fmt == "mxfp4":
            require(
                self.tile_k % 128 == 0,
                f"tile_k must be a multiple of 128 for fmt='mxfp4' (one 128x4 block of MXFP4 scales), "
                f"got {self.tile_k}",
            )
        check_choice("tile_m", self.tile_m, (128, 256))
        check_int("tile_k", self.tile_k, CHUNK_K, 1024)
        require(self.tile_k % CHUNK_K == 0, f"tile_k must be a multiple of {CHUNK_K} (one 128x4 scale block), got {self.tile_k}")
        check_int("input_box_k", self.input_box_k, 1, MAX_BOX_DIM)
        check_int("output_box_k", self.output_box_k, 1, MAX_BOX_DIM)
        _check_box("input", self.input_box_k * 2, self.input_swizzle, self.tile_k * 2)
        _check_box("output", self.output_box_k, self.output_swizzle, self.tile_k // 2)
        check_int("num_stages", self.num_stages, 1, 16)
        check_int("consumer_warpgroups", self.consumer_warpgroups, 1, 3)
        check_int("out_buffers", self.out_buffers, 2, 4)
        check_int("min_ctas_per_sm", self.min_ctas_per_sm, 1, 4)
        check_bool("persistent", self.persistent)
        check_bool("setmaxnreg", self.setmaxnreg)
        check_even_split(self.tile_m * self.tile_k // CHUNK_K, f"tile_m * tile_k / {CHUNK_K}", "chunks",
                         self.consumer_threads, f"consumer_warpgroups * {WARPGROUP}")
        check_fits_sm(self)

    # ------------------------------------------------------------ derived
    @property
    def scales_box(self) -> tuple[int, int, int, int]:
        """TMA box of the swizzled scales, outer dimension first: the tile's whole slice of them
        (128-row blocks, 4-group blocks, 32, 16)."""
        return (self.tile_m // SF_BLOCK_ROWS, self.tile_k // (4 * self.sf_vec_size), 32, 16)

    @property
    def smem(self) -> SmemLayout:
        stage = self.tile_m * self.tile_k * 2 * self.reads
        q_tile = self.tile_m * self.tile_k // 2
        sf_tile = self.tile_m * self.tile_k // self.sf_vec_size if self.sf_layout == "swizzled" else 0
        q = align_up(self.num_stages * stage, 1024)
        sf = align_up(q + self.out_buffers * q_tile, 128)
        barriers = align_up(sf + self.out_buffers * sf_tile, 8)
        tiles = barriers + 2 * self.num_stages * 8  # the tile index of each stage
        end = tiles + 4 * self.num_stages
        return SmemLayout(input=0, q=q, sf=sf, barriers=barriers, tiles=tiles, total=end + ALIGN_SLACK)

    @property
    def register_split(self) -> tuple[int, int]:
        """(producer, consumer) registers per thread after setmaxnreg."""
        limits = ARCHS[self.arch]
        entry = min(255, limits.regs_per_sm // (self.threads * self.min_ctas_per_sm)) // 8 * 8
        producer = 40
        consumer = (entry * self.threads - producer * WARPGROUP) // self.consumer_threads // 8 * 8
        return producer, min(256, consumer)

    @functools.cached_property
    def spec(self) -> KernelSpec[TileGrid]:
        smem = self.smem
        constants = [
            ("TILE_M", self.tile_m), ("TILE_K", self.tile_k), ("IN_BOX_K", self.input_box_k),
            ("IN_SWIZZLE", int(self.input_swizzle)), ("OUT_BOX_K", self.output_box_k),
            ("OUT_SWIZZLE", int(self.output_swizzle)), ("NUM_STAGES", self.num_stages),
            ("NUM_OUT_BUFFERS", self.out_buffers), ("CONSUMER_THREADS", self.consumer_threads),
            ("MIN_CTAS_PER_SM", self.min_ctas_per_sm), ("SF_VEC", self.sf_vec_size), ("OFF_IN", smem.input),
            ("OFF_Q", smem.q), ("OFF_SF", smem.sf), ("OFF_BARRIERS", smem.barriers), ("OFF_TILES", smem.tiles),
            self.prologue_constant,
        ]
        if self.setmaxnreg:
            producer_regs, consumer_regs = self.register_split
            constants += [("PRODUCER_REGS", producer_regs), ("CONSUMER_REGS", consumer_regs)]
        return KernelSpec(
            name="fp4q_quantize_fp4_tma",
            template="kernels/quantize_fp4_tma.cu",
            arch=self.arch,
            constants=tuple(constants),
            flags=quantize_flags(self) + (("FP4Q_SETMAXNREG", self.setmaxnreg),),
            params=TMA_QUANTIZE_PARAMS,
            threads=self.threads,
            smem_bytes=smem.total,
            grid=TileGrid(self.tile_m, self.tile_k, self.persistent),
            maps=(
                MapSpec("x_map", "x", 2, (self.input_box_k, self.tile_m), self.input_swizzle, 256),
                MapSpec("out_map", "out", 1, (self.output_box_k, self.tile_m), self.output_swizzle),
                MapSpec("sf_out_map", "sf_out", 1, tuple(reversed(self.scales_box)),
                        geometry="sf_blocks" if self.sf_layout == "swizzled" else "unused"),
            ),
        )


@dataclass(frozen=True)
class SimtConfig(CallFields):
    """The kernels without TMA or shared memory.

    ``vector=True``: ``vector_elements`` (16, the default, 8 or 32) elements
    per thread and step, in two, one or four 16-byte loads; the threads of a
    group combine their amax by warp shuffles, or a thread quantizes two
    whole NVFP4 groups (32 elements, where K must be a multiple of 32). The
    fastest kernel for small and serving inputs; it needs x's rows, ``out``
    and a swizzled ``sf_out`` 16-byte aligned. ``vector=False``: one thread per group with 2-byte
    loads, for any pointer alignment and row stride (``vector_elements``
    is 8 there, the element count of its loads' unit); the one kernel that reads float32 x
    (``input_dtype="float32"``, no prologue).
    """

    threads: int = 256
    vector: bool = False
    vector_elements: int | None = None  # None: 16 for the vector kernel, 8 otherwise
    float32_input: ClassVar[bool] = True

    def check(self) -> None:
        self.check_prologue(ELEMENTWISE_PROLOGUES)
        if self.input_dtype == FLOAT32_INPUT:
            require(not self.vector and self.prologue == "none",
                    f"input_dtype='float32' is read by the plain SIMT kernel alone (vector=False, prologue='none'), "
                    f"got vector={self.vector!r}, prologue={self.prologue!r}")
        check_choice("threads", self.threads, (64, 128, 256, 512, 1024))
        check_bool("vector", self.vector)
        if self.vector_elements is None:  # stored resolved, so that equal kernels are equal configs
            object.__setattr__(self, "vector_elements", 16 if self.vector else 8)
        if self.vector:
            check_choice("vector_elements", self.vector_elements, (8, 16, 32))
        else:
            require(self.vector_elements == 8 and type(self.vector_elements) is int,
                    f"vector_elements is the vector kernel's (vector=True); with vector=False it must be 8, "
                    f"got {self.vector_elements!r}")

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        constants: tuple[tuple[str, int], ...] = (("SIMT_THREADS", self.threads), ("SF_VEC", self.sf_vec_size),
                                                  self.prologue_constant)
        if self.vector:
            constants += (("VEC_ELEMS", self.elements_per_unit),)
        return simt_spec(f"quantize_fp4_{'vector' if self.vector else 'simt'}", self.arch, constants,
                         quantize_flags(self), SIMT_QUANTIZE_PARAMS, self.threads, StrideGrid(self.threads, SIMT_WAVES))

    @property
    def elements_per_unit(self) -> int:
        """The elements of one unit of the kernel's walk: vector_elements for the vector
        kernel, a group for the other."""
        if not self.vector:
            return self.sf_vec_size
        assert self.vector_elements is not None  # resolved by __post_init__
        return self.vector_elements

    def units_per_row(self, cols: int) -> int:
        """The work units of one row that the kernel's walk visits (its divisor): one per
        elements_per_unit elements of the scale domain."""
        return self.domain_groups(cols) * self.sf_vec_size // self.elements_per_unit

    def work_items(self, rows: int, cols: int) -> int:
        """Threads that give this kernel one work item each (more are not needed, fewer loop)."""
        tile_rows = SF_TILE[self.sf_layout][0]
        padded_rows = align_up(rows, tile_rows)
        per_row = self.units_per_row(cols)
        if not self.vector:  # a thread per group of the padded scale domain
            return padded_rows * per_row
        # The words of the last row of scale tiles, where the padding rows are, are shared out too.
        padding_words = self.domain_groups(cols) // 4 * tile_rows
        return max(rows * per_row, padding_words if padded_rows > rows else 0)


def default_config(arch: str = "sm_90a") -> QuantizeConfig:
    """The TMA config for NVFP4 when no tuned entry applies, whatever the shape.

    128x64 tiles, two stages, one consumer warpgroup and three CTAs per SM
    was the best or within 2% of the best for every shape class of the
    H200 sweep (docs/data/sweep_h200.csv): many small CTAs hide latency better
    than a few deep pipelines. Where three do not fit one SM (sm_120f's
    100 KB of shared memory) it runs as many as fit.
    """
    check_arch(arch)
    cfg = QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=Swizzle.B32, num_stages=2,
                         consumer_warpgroups=1, min_ctas_per_sm=1, arch=arch)
    return _most_ctas(cfg, 3)


def _most_ctas(cfg: QuantizeConfig, most: int) -> QuantizeConfig:
    """``cfg`` with ``most`` CTAs per SM, or as many as its target's SM holds."""
    return cfg.replace(min_ctas_per_sm=min(most, max_ctas_per_sm(cfg.smem.total, cfg.threads, cfg.arch)))


def default_mx_config(arch: str = "sm_90a") -> QuantizeConfig:
    """The MXFP4 config when none is given: 128x128 tiles (whole 128x4 scale
    blocks of 32-element groups), two stages, one consumer warpgroup, two
    CTAs per SM, the NVFP4 sweep's all-round shape scaled to the MXFP4 block
    (one CTA where two do not fit, as on sm_120f)."""
    check_arch(arch)
    return _most_ctas(QuantizeConfig(fmt="mxfp4", num_stages=2, consumer_warpgroups=1, min_ctas_per_sm=1,
                                     arch=arch), 2)

