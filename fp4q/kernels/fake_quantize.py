"""The fake quantization kernel's config (``ptx_templates/kernels/fake_quantize_nvfp4.cu``):
NVFP4 quantization and dequantization in one pass, with the training quantizer's
options as compile-time flags (NVFP4_SPEC.md, "Fake quantization"). A thread takes a
group of 16 values, or a 16x16 block with ``block_2d``; the seed, the offset and the
Hadamard sign mask are launch parameters."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .call import CallFields
from .rules import check_bool, check_choice, require
from .spec import KernelSpec, StrideGrid, params, simt_spec
from .walk import UNIT_DIVISOR_PARAMS

FAKE_QUANTIZE_PARAMS = (*params(("x", "ptr"), ("out", "ptr"), ("tensor_sf_value", "f32"), ("tensor_sf_ptr", "ptr"),
                                ("x_row_stride", "i64"), ("rows", "i32"), ("cols", "i32"), ("seed", "u64"),
                                ("offset", "u64"), ("hadamard", "u32")),
                        *UNIT_DIVISOR_PARAMS, *params(("partial", "ptr")))
FAKE_QUANTIZE_WAVES = 4  # grid-stride CTAs per SM slot
# The options that are compile-time flags: (config field, template flag).
OPTION_FLAGS = (("block_2d", "FP4Q_BLOCK_2D"), ("stochastic", "FP4Q_STOCHASTIC"), ("hadamard", "FP4Q_HADAMARD"),
                ("four_over_six", "FP4Q_FOUR_OVER_SIX"))


@dataclass(frozen=True)
class FakeQuantizeConfig(CallFields):
    """One fake quantization kernel: ``threads`` per CTA, and the options it compiles in
    (set from each call, as the call's fields are). ``amax_pass``: the first pass of
    ``tensor_sf="dynamic"`` instead, each CTA's maximum of the values it would quantize
    (post-Hadamard) written to ``partial``, over groups of 16 (2D blocks and 4/6 change the
    scales, not the values). ``vector``: a group is two 16-byte loads and stores, which needs
    x's base and row stride and out's base 16-byte aligned; else a value at a time."""

    threads: int = 256
    block_2d: bool = False
    stochastic: bool = False
    hadamard: bool = False
    four_over_six: bool = False
    amax_pass: bool = False
    vector: bool = False

    def check(self) -> None:
        check_choice("threads", self.threads, (128, 256))
        for name, _ in OPTION_FLAGS:
            check_bool(name, getattr(self, name))
        check_bool("amax_pass", self.amax_pass)
        check_bool("vector", self.vector)
        require(self.fmt == "nvfp4", f"fake quantization is NVFP4's, got fmt={self.fmt!r}")
        require(not self.amax_pass or not (self.block_2d or self.stochastic or self.four_over_six),
                "the amax pass reads the values only: block_2d, stochastic and four_over_six must be False")

    def units_per_row(self, cols: int) -> int:
        """The walk's divisor: the groups of a row (a block row's blocks with ``block_2d``)."""
        return cols // 16

    @functools.cached_property
    def spec(self) -> KernelSpec[StrideGrid]:
        flags = (*self.input_flags, ("FP4Q_TENSOR_SF_BY_POINTER", self.tensor_sf_mode == "pointer"),
                 *((flag, getattr(self, name)) for name, flag in OPTION_FLAGS), ("FP4Q_AMAX_PASS", self.amax_pass),
                 ("FP4Q_VECTOR", self.vector))
        return simt_spec("fake_quantize_nvfp4", self.arch, (("SIMT_THREADS", self.threads),), flags,
                         FAKE_QUANTIZE_PARAMS, self.threads, StrideGrid(self.threads, FAKE_QUANTIZE_WAVES))
