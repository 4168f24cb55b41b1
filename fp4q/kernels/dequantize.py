"""Configs of the dequantization kernels: NVFP4 or MXFP4 codes and scales
back to bf16 or float32 values. Frozen and validated at construction, like
the quantization configs in ``quantize.py``; the call's fields (``fmt``,
``out_dtype``, ``sf_layout``, ``tensor_sf_mode``, ``arch``) are set from each
call by the API."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .archs import check_fits_sm
from .call import CallFields
from .spec import MAX_BOX_DIM, KernelSpec, MapSpec, StrideGrid, TileGrid, WarpSpecialized, params, simt_spec
from .rules import align_up, check_bool, check_choice, check_even_split, check_int, require
from .walk import UNIT_DIVISOR_PARAMS

OUT_BYTES = {"bfloat16": 2, "float32": 4}
WARP = 32
STORE_BYTES = 16  # one vector store per unit of output
TMA_SMEM_ALIGN = 128  # dynamic shared memory is only 16-byte aligned at entry
MAX_UNITS_PER_THREAD = 16
SIMT_WAVES = 4  # grid-stride CTAs per SM slot for the plain kernel

# The kernels' parameter lists, in the order of their extern "C" signatures.
_SCALE_AND_OUTPUT = (("sf", "ptr"), ("out", "ptr"), ("tensor_sf_value", "f32"), ("tensor_sf_ptr", "ptr"),
                     ("rows", "i32"), ("cols", "i32"))
TMA_DEQUANTIZE_PARAMS = params(("q_map", "map"), *_SCALE_AND_OUTPUT, ("tickets", "ptr"))
SIMT_DEQUANTIZE_PARAMS = (*params(("q", "ptr"), ("q_row_stride", "i64"), *_SCALE_AND_OUTPUT), *UNIT_DIVISOR_PARAMS)


def dequantize_flags(cfg) -> tuple[tuple[str, bool], ...]:
    return (
        ("FP4Q_MXFP4", cfg.fmt == "mxfp4"),
        ("FP4Q_OUT_F32", cfg.out_dtype == "float32"),
        ("FP4Q_TENSOR_SF_BY_POINTER", cfg.tensor_sf_mode == "pointer"),
        *cfg.layout_flags,
    )


@dataclass(frozen=True)
class DequantizeSmem:
    """Byte offsets of the TMA kernel's dynamic shared memory, after alignment."""

    barriers: int
    tiles: int
    total: int  # including the alignment slack requested at launch


class _Units:
    """What both dequantize kernels derive from the call's output dtype."""

    out_dtype: str

    @property
    def unit(self) -> int:
        """Output elements per 16-byte store."""
        return STORE_BYTES // OUT_BYTES[self.out_dtype]


@dataclass(frozen=True)
class DequantizeConfig(CallFields, _Units, WarpSpecialized, producer=WARP, group=WARP, groups="consumer_warps"):
    """One TMA dequantization kernel.

    A tile is ``tile_m`` rows x ``tile_k`` elements, loaded by TMA as one box
    of ``tile_m x tile_k/2`` bytes of codes into a ring of ``num_stages``
    buffers by a producer warp; ``consumer_warps`` warps turn each into
    output, 16 bytes (8 bf16 or 4 float32 values) per vector store.
    """

    tile_m: int = 128
    tile_k: int = 128
    num_stages: int = 4
    consumer_warps: int = 8
    min_ctas_per_sm: int = 2
    persistent: bool = True

    def check(self) -> None:
        check_int("tile_m", self.tile_m, 1, MAX_BOX_DIM)
        check_int("tile_k", self.tile_k, 32, 2 * MAX_BOX_DIM)
        require(
            self.tile_k % 32 == 0,
            f"tile_k must be a multiple of 32 (a tile row of codes is whole 16-byte TMA chunks and whole "
            f"MXFP4 groups), got {self.tile_k}",
        )
        check_int("num_stages", self.num_stages, 1, 16)
        check_int("consumer_warps", self.consumer_warps, 1, 31)
        check_int("min_ctas_per_sm", self.min_ctas_per_sm, 1, 8)
        check_bool("persistent", self.persistent)
        units = self.tile_m * self.tile_k // self.unit
        check_even_split(units, f"tile_m * tile_k / {self.unit}", f"output units ({self.out_dtype})",
                         self.consumer_threads, f"consumer_warps * {WARP}")
        require(
            units // self.consumer_threads <= MAX_UNITS_PER_THREAD,
            f"{units // self.consumer_threads} output units per consumer thread and tile exceed "
            f"{MAX_UNITS_PER_THREAD} (each holds its codes in a register): use a smaller tile or more consumer_warps",
        )
        check_fits_sm(self)

    @property
    def q_box(self) -> tuple[int, int]:
        """TMA box of the packed codes, outer dimension first (rows, bytes)."""
        return (self.tile_m, self.tile_k // 2)

    @property
    def smem(self) -> DequantizeSmem:
        barriers = align_up(self.num_stages * self.tile_m * self.tile_k // 2, 8)
        tiles = barriers + 2 * self.num_stages * 8  # the tile index of each stage
        return DequantizeSmem(barriers=barriers, tiles=tiles, total=tiles + 4 * self.num_stages + TMA_SMEM_ALIGN)

    @functools.cached_property
    def spec(self) -> KernelSpec[TileGrid]:
        smem = self.smem
        return KernelSpec(
            name="fp4q_dequantize_tma",
            template="kernels/dequantize_tma.cu",
            arch=self.arch,
            constants=(("TILE_M", self.tile_m), ("TILE_K", self.tile_k), ("NUM_STAGES", self.num_stages),
                       ("CONSUMER_THREADS", self.consumer_threads), ("MIN_CTAS_PER_SM", self.min_ctas_per_sm),
                       ("OFF_BARRIERS", smem.barriers), ("OFF_TILES", smem.tiles)),
            flags=dequantize_flags(self),
            params=TMA_DEQUANTIZE_PARAMS,
            threads=self.threads,
            smem_bytes=smem.total,
            grid=TileGrid(self.tile_m, self.tile_k, self.persistent),
            maps=(MapSpec("q_map", "q", 1, tuple(reversed(self.q_box)), l2_promotion=256),),
        )


@dataclass(frozen=True)
class DequantizeSimtConfig(CallFields, _Units):
    """The dequantization kernel without TMA: a thread per 16-byte unit of output.

    ``vector=True``: one load of a unit's codes and one 16-byte store, which
    needs q's base and row stride 4-byte aligned and out's base 16-byte
    aligned; the kernel for small inputs. ``vector=False``: byte loads and
    element stores, for any shape and pointer TMA cannot address."""

    threads: int = 256
    vector: bool = False

    def check(self) -> None:
        check_choice("threads", self.threads, (64, 128, 256, 512, 1024))
        check_bool("vector", self.vector)

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        flags = dequantize_flags(self) + (("FP4Q_VECTOR", self.vector),)
        return simt_spec("dequantize_simt", self.arch, (("SIMT_THREADS", self.threads),), flags,
                         SIMT_DEQUANTIZE_PARAMS, self.threads, StrideGrid(self.threads, SIMT_WAVES))

    def units_per_row(self, cols: int) -> int:
        """The units (16-byte stores) of one output row: the walk's divisor."""
        return cols // self.unit
