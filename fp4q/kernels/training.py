"""The training quantizer's config: NVFP4 rowwise and columnwise in one pass
(``ptx_templates/kernels/quantize_fp4_training.cu``).

One CTA of ``TRAINING_THREADS`` threads per ``TRAINING_TILE x TRAINING_TILE``
tile of x, which it reads once (16-byte loads, staged in shared memory for
the columns): the directions it writes, the 16x16 blocks and the numerics
options (stochastic rounding, the Hadamard transform, 4/6) are the call's
fields; the layout, input dtype and target as for every kernel. Each direction's
tensor scale is a by-value argument or a device float32 (its pointer not null),
so one kernel serves every tensor-scale mode (``tensor_sf_mode`` stays
``"value"``). A dynamic columnwise scale under the Hadamard transform is taken over the
transformed values by a pass of its own (``HadamardAmaxConfig``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .call import CallFields
from .global_scale import AMAX_CTAS_PER_SM
from .quantize import quantize_flags
from .rules import check_bool, check_choice, check_int, require
from .spec import KernelSpec, StrideGrid, TileGrid, params, simt_spec
from .walk import UNIT_DIVISOR_PARAMS

TRAINING_THREADS = 256
# Rows and columns of x per CTA: a multiple of 16 both ways, so that 16x16 blocks and the columnwise
# groups are whole, and wide enough that a CTA writes 64 contiguous bytes of each q and q_t row.
TRAINING_TILE = 128
# The most CTAs per SM the launch bounds ask for: 4 x 32 KB tiles of shared memory.
MAX_TRAINING_CTAS = 4

TRAINING_PARAMS = params(
    ("x", "ptr"), ("out", "ptr"), ("sf_out", "ptr"), ("out_t", "ptr"), ("sf_t_out", "ptr"), ("x_row_stride", "i64"),
    ("rows", "i32"), ("cols", "i32"), ("tensor_sf_value", "f32"), ("tensor_sf_ptr", "ptr"),
    ("columnwise_tensor_sf_value", "f32"), ("columnwise_tensor_sf_ptr", "ptr"), ("seed", "u64"), ("offset", "u64"),
    ("hadamard", "u32"),
)
HADAMARD_AMAX_PARAMS = (*params(("x", "ptr"), ("x_row_stride", "i64"), ("rows", "i32"), ("cols", "i32"),
                                ("hadamard", "u32")),
                        *UNIT_DIVISOR_PARAMS, *params(("partial", "ptr"), ("partial_x", "ptr")))


@dataclass(frozen=True)
class TrainingConfig(CallFields):
    """The one-pass training quantizer: ``rowwise`` and ``columnwise`` say which outputs it
    writes, ``block_2d`` one scale per 16x16 block for both, ``stochastic`` the rounding,
    ``hadamard`` the random Hadamard transform of the columnwise groups (its sign mask is a
    launch parameter), ``four_over_six`` the 4/6 choice of each group's (block's) scale (set
    from each call); ``min_ctas_per_sm`` the launch bounds' CTAs per SM (0:
    ``default_min_ctas``)."""

    rowwise: bool = True
    columnwise: bool = True
    block_2d: bool = False
    stochastic: bool = False
    hadamard: bool = False
    four_over_six: bool = False
    min_ctas_per_sm: int = 0

    def check(self) -> None:
        self.check_prologue(("none",))
        for name in ("rowwise", "columnwise", "block_2d", "stochastic", "hadamard", "four_over_six"):
            check_bool(name, getattr(self, name))
        require(not self.hadamard or (self.columnwise and not self.block_2d),
                "hadamard=True needs columnwise=True and block_2d=False: the transform is the 1D columnwise "
                "direction's")
        require(self.fmt == "nvfp4", f"fmt must be 'nvfp4' for a TrainingConfig, got {self.fmt!r}")
        require(self.tensor_sf_mode == "value",
                f"tensor_sf_mode must be 'value' for a TrainingConfig (each direction's scale pointer, where "
                f"not null, is read instead), got {self.tensor_sf_mode!r}")
        require(self.rowwise or self.columnwise, "rowwise and columnwise are both False: a TrainingConfig writes "
                                                 "at least one direction")
        check_int("min_ctas_per_sm", self.min_ctas_per_sm, 0, MAX_TRAINING_CTAS)

    @property
    def default_min_ctas(self) -> int:
        """Four CTAs per SM (64 registers, 128 KB of x in flight per SM) with 1D blocks rounded
        to nearest; two (up to 128 registers: ptxas takes about 80, so three fit) with 16x16
        blocks, stochastic rounding, the Hadamard transform or 4/6, whose float32 groups spill
        at 64, and on some targets at 80."""
        heavy = self.block_2d or self.stochastic or self.hadamard or self.four_over_six
        return 2 if heavy else MAX_TRAINING_CTAS

    @functools.cached_property
    def spec(self) -> KernelSpec[TileGrid]:
        constants = (("SIMT_THREADS", TRAINING_THREADS), ("TILE", TRAINING_TILE), ("SF_VEC", 16),
                     ("WRITES_ROWWISE", int(self.rowwise)), ("WRITES_COLUMNWISE", int(self.columnwise)),
                     ("BLOCK_2D", int(self.block_2d)), ("STOCHASTIC", int(self.stochastic)),
                     ("HADAMARD", int(self.hadamard)), ("FOUR_OVER_SIX", int(self.four_over_six)),
                     ("MIN_CTAS", self.min_ctas_per_sm or self.default_min_ctas))
        return KernelSpec("fp4q_quantize_fp4_training", "kernels/quantize_fp4_training.cu", self.arch, constants,
                          quantize_flags(self), TRAINING_PARAMS, TRAINING_THREADS, 0,
                          TileGrid(TRAINING_TILE, TRAINING_TILE, persistent=False))


@dataclass(frozen=True)
class HadamardAmaxConfig(CallFields):
    """The amax pass of a dynamic columnwise scale under the Hadamard transform
    (``kernels/hadamard_amax.cu``): per CTA, the maximum of the transformed column groups'
    magnitudes and, where asked, of x's (the rowwise direction's dynamic scale), a thread
    taking two columns of 16 rows at a time; ``threads`` per CTA. The sign mask is a launch
    parameter; the input dtype and target as for every kernel."""

    threads: int = 256

    def check(self) -> None:
        self.check_prologue(("none",))
        check_choice("threads", self.threads, (128, 256, 512))
        require(self.fmt == "nvfp4", f"fmt must be 'nvfp4' for a HadamardAmaxConfig, got {self.fmt!r}")

    @staticmethod
    def units_per_row(cols: int) -> int:
        """The walk's divisor: a unit is a column pair of 16 rows."""
        return cols // 2

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        return simt_spec("hadamard_amax", self.arch, (("SIMT_THREADS", self.threads),), self.input_flags,
                         HADAMARD_AMAX_PARAMS, self.threads,
                         StrideGrid(self.threads, max_ctas_per_sm=AMAX_CTAS_PER_SM))
