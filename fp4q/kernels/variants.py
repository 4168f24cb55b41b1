"""The configs fp4q ships: the tuned defaults plus one per tuning axis, so
every swizzle mode, box shape and pipeline option is compiled in CI and
exercised on the GPU.

Each target ships these configs fitted to it (``fitted``): on sm_120f (100 KB
of shared memory per SM) a config that does not fit runs fewer CTAs per SM,
then fewer stages, and the tiles too large for two stages are left out. The
pre-Hopper target (no TMA) ships only the SIMT quantizers, the row kernels, the SIMT
dequantizer, the global-scale kernels, the one-launch dynamic quantizer and the fake
quantization kernels.
"""

from __future__ import annotations

from ..numerics.formats import FORMATS, MX_MODES
from ..numerics.reference import OUT_DTYPES
from .archs import fits, target
from .call import (ELEMENTWISE_PROLOGUES, FLOAT32_INPUT, INPUT_DTYPES, PER_EXPERT, PROLOGUES, ROW_PROLOGUES,
                   ROW_TENSOR_SF_MODES, SF_LAYOUTS, TENSOR_SF_MODES)
from .quantize import QuantizeConfig, SimtConfig, default_config, default_mx_config
from .rows import ROW_THREADS, RowConfig, row_shapes
from .spec import Swizzle
from .dequantize import DequantizeConfig, DequantizeSimtConfig
from .fake_quantize import FakeQuantizeConfig
from .global_scale import AmaxConfig, FusedDynamicConfig, GlobalScaleConfig
from .rules import ConfigError
from .training import HadamardAmaxConfig, TrainingConfig
from .tuning import FUSED_DYNAMIC_BLOCK_SIZES

S = Swizzle

SHIPPED: dict[str, QuantizeConfig] = {
    "m128_k128_s4_wg2": QuantizeConfig(),
    "m128_k64_s6_wg1": QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=6,
                                       consumer_warpgroups=1),
    "m128_k256_s2_wg2": QuantizeConfig(tile_k=256, output_box_k=128, output_swizzle=S.B128, num_stages=2),
    "m256_k128_s2_wg2": QuantizeConfig(tile_m=256, num_stages=2),
    "m128_k128_s4_wg1": QuantizeConfig(consumer_warpgroups=1),
    "m128_k192_s4_wg3": QuantizeConfig(tile_k=192, output_box_k=96, output_swizzle=S.NONE, num_stages=4,
                                       consumer_warpgroups=3),
    "m128_k128_noswizzle": QuantizeConfig(input_box_k=128, input_swizzle=S.NONE, output_box_k=64,
                                          output_swizzle=S.NONE),
    "m128_k128_in64B_out32B": QuantizeConfig(input_box_k=32, input_swizzle=S.B64, output_box_k=32,
                                             output_swizzle=S.B32),
    "m128_k128_in32B": QuantizeConfig(input_box_k=16, input_swizzle=S.B32, output_box_k=16,
                                      output_swizzle=S.NONE),
    "m128_k128_s2": QuantizeConfig(num_stages=2),
    "m128_k128_s6": QuantizeConfig(num_stages=6),
    "m128_k128_tile_per_cta": QuantizeConfig(persistent=False),
    "m128_k128_no_setmaxnreg": QuantizeConfig(setmaxnreg=False),
    "m128_k64_2cta": QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=4,
                                    consumer_warpgroups=1, min_ctas_per_sm=2),
    "m128_k128_s2_wg2_2cta": QuantizeConfig(num_stages=2, min_ctas_per_sm=2),
    "m128_k64_s3_wg1_3cta": QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=3,
                                           consumer_warpgroups=1, min_ctas_per_sm=3),
    "m128_k64_s2_wg1_3cta": QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=2,
                                           consumer_warpgroups=1, min_ctas_per_sm=3),
    "m128_k64_s2_wg1_4cta": QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=S.B32, num_stages=2,
                                           consumer_warpgroups=1, min_ctas_per_sm=4),
}

# MXFP4 (groups of 32, e8m0 scales): tile_k covers whole 128x4 scale blocks.
SHIPPED_MX: dict[str, QuantizeConfig] = {
    "mx_m128_k128_s2_wg1_2cta": QuantizeConfig(fmt="mxfp4", num_stages=2, consumer_warpgroups=1,
                                               min_ctas_per_sm=2),
    "mx_m128_k128_s4_wg2": QuantizeConfig(fmt="mxfp4"),
    "mx_m128_k128_s4_wg2_floor": QuantizeConfig(fmt="mxfp4", mx_mode="floor"),
}

SIMT: dict[str, SimtConfig] = {
    "simt_256": SimtConfig(),
    "mx_simt_256": SimtConfig(fmt="mxfp4"),
    "mx_simt_256_floor": SimtConfig(fmt="mxfp4", mx_mode="floor"),
    "vec_128": SimtConfig(threads=128, vector=True),
    "vec_256": SimtConfig(vector=True),
    "vec_128_x8": SimtConfig(threads=128, vector=True, vector_elements=8),
    "vec_128_x32": SimtConfig(threads=128, vector=True, vector_elements=32),
    "mx_vec_128": SimtConfig(threads=128, fmt="mxfp4", vector=True),
    "mx_vec_256": SimtConfig(fmt="mxfp4", vector=True),
    "mx_vec_128_x32": SimtConfig(threads=128, fmt="mxfp4", vector=True, vector_elements=32),
    "mx_vec_256_floor": SimtConfig(fmt="mxfp4", mx_mode="floor", vector=True),
}


# Dequantization: the default TMA config, one per axis (tile shape, stages,
# warps, CTAs per SM, persistence), the plain kernel and its vector form. Each is compiled for
# both formats, both output dtypes, every scale layout and every tensor_sf
# mode of its format.
DEQUANTIZE: dict[str, DequantizeConfig | DequantizeSimtConfig] = {
    "dq_m128_k128_s4_w8": DequantizeConfig(),
    "dq_m32_k256_s4_w8_3cta": DequantizeConfig(tile_m=32, tile_k=256, min_ctas_per_sm=3),
    "dq_m128_k32_s8_w4_tile_per_cta": DequantizeConfig(tile_k=32, num_stages=8, consumer_warps=4, persistent=False),
    "dq_simt_256": DequantizeSimtConfig(),
    "dq_vec_256": DequantizeSimtConfig(vector=True),
}

# The global scale's two passes (the amax pass per input dtype and load width), and the
# single-pass dynamic quantizer per block size, scale layout and input dtype.
GLOBAL_SCALE: dict[str, AmaxConfig | GlobalScaleConfig | FusedDynamicConfig] = {
    **{f"amax_512{'_scalar' if not vector else ''}{'_fp16' if dtype == 'float16' else ''}"
       f"{'' if prologue == 'none' else '_' + prologue}":
       AmaxConfig(vector_loads=vector, input_dtype=dtype, prologue=prologue)
       for prologue in ELEMENTWISE_PROLOGUES for vector in (True, False) for dtype in INPUT_DTYPES},
    "global_scale_256": GlobalScaleConfig(),
    "global_scale_256_4over6": GlobalScaleConfig(four_over_six=True),
    **{f"dynamic_{threads}_{layout}{'_fp16' if dtype == 'float16' else ''}{'' if prologue == 'none' else '_' + prologue}":
       FusedDynamicConfig(threads=threads, sf_layout=layout, input_dtype=dtype, prologue=prologue)
       for prologue in ELEMENTWISE_PROLOGUES for threads in FUSED_DYNAMIC_BLOCK_SIZES for layout in SF_LAYOUTS
       for dtype in INPUT_DTYPES},
}


MIN_FITTED_STAGES = 2  # fewer would leave the TMA load of one tile no other to overlap with


def fitted(cfg, arch: str, **changes):
    """``cfg`` for ``arch`` with ``changes`` (call fields, such as a prologue whose stages hold
    more): as it is where that fits, else with fewer CTAs per SM, then fewer stages (down to
    two), until it fits; None where nothing does."""
    for stages in range(cfg.num_stages, min(cfg.num_stages, MIN_FITTED_STAGES) - 1, -1):
        for ctas in range(cfg.min_ctas_per_sm, 0, -1):
            try:
                return cfg.replace(num_stages=stages, min_ctas_per_sm=ctas, **{**changes, "arch": arch})
            except ConfigError:  # this candidate does not fit the target: try a smaller one
                continue
    return None


def _tma_bases(configs: dict, arch: str) -> dict:
    """The TMA configs of ``configs`` fitted to ``arch`` (``fitted``): first those that fit as
    they are, then the changed ones, named ``{name}_fit_s{stages}_{ctas}cta`` (so that where
    a changed config equals an unchanged one, the unchanged name is kept); none without TMA."""
    if not target(arch).features.tma:
        return {}
    unchanged, changed = {}, {}
    for name, cfg in configs.items():
        fit = fitted(cfg, arch)
        if fit is None:
            continue
        if (fit.num_stages, fit.min_ctas_per_sm) == (cfg.num_stages, cfg.min_ctas_per_sm):
            unchanged[name] = fit
        else:
            changed[f"{name}_fit_s{fit.num_stages}_{fit.min_ctas_per_sm}cta"] = fit
    return {**unchanged, **changed}


def dequantize_variants(arch: str) -> dict[str, DequantizeConfig | DequantizeSimtConfig]:
    """Every dequantization config for ``arch``, named ``base/fmt/out_dtype/sf_layout/tensor_sf_mode``."""
    tma = {n: c for n, c in DEQUANTIZE.items() if isinstance(c, DequantizeConfig)}
    bases = {**_tma_bases(tma, arch), **{n: c for n, c in DEQUANTIZE.items() if n not in tma}}
    out = {}
    for name, cfg in bases.items():
        for fmt in FORMATS:
            for dtype in OUT_DTYPES:
                for layout in SF_LAYOUTS:
                    for mode in TENSOR_SF_MODES[fmt]:
                        out[f"{name}/{fmt}/{dtype}/{layout}/{mode}"] = cfg.replace(
                            arch=arch, fmt=fmt, out_dtype=dtype, sf_layout=layout, tensor_sf_mode=mode)
    return out


def tuned_variants(arch: str) -> dict[str, QuantizeConfig]:
    """The configs of ``arch``'s shipped tuned table (none but sm_90a's), by shape class."""
    from .tuning import tuned_table

    return {f"tuned_{arch}[{cls}]": cfg for cls, cfg in tuned_table(arch).items()}


def default_variants(arch: str) -> dict[str, QuantizeConfig]:
    """The TMA configs chosen for ``arch`` when its tuned table has no entry (none without TMA)."""
    if not target(arch).features.tma:
        return {}
    return {"default": default_config(arch), "mx_default": default_mx_config(arch)}


def _call_variants(name: str, cfg) -> dict:
    """``cfg`` in every input dtype (float32 too for the plain SIMT kernel, without a prologue),
    for MXFP4 both rounding modes, and under every prologue (a TMA config fitted to the
    prologue's larger stages): what calls choose it with."""
    out = {}
    reads_float32 = isinstance(cfg, SimtConfig) and not cfg.vector
    for prologue in ELEMENTWISE_PROLOGUES:
        for dtype in INPUT_DTYPES + ((FLOAT32_INPUT,) if reads_float32 and prologue == "none" else ()):
            for mode in MX_MODES if cfg.fmt == "mxfp4" else (cfg.mx_mode,):
                changes = dict(input_dtype=dtype, mx_mode=mode, prologue=prologue)
                variant = fitted(cfg, cfg.arch, **changes) if isinstance(cfg, QuantizeConfig) else cfg.replace(**changes)
                if variant is None:
                    continue
                suffix = (("" if prologue == "none" else f"_{prologue}")
                          + ("" if dtype == cfg.input_dtype else "_f32" if dtype == FLOAT32_INPUT else "_fp16")
                          + ("" if mode == cfg.mx_mode else f"_{mode}"))
                out[name + suffix] = variant
    return out


def _row_shape_name(threads: int, units: int) -> str:
    return f"u{units}" + ("" if threads == ROW_THREADS else f"_t{threads}")


def row_variants(arch: str) -> dict[str, RowConfig]:
    """The row kernels for ``arch``, named ``rows_prologue_fmt_uN[_t128][_fp16][_floor]/sf_layout/
    tensor_sf_mode``: each kernel ``rows.for_row`` may pick, in every CTA shape, input
    dtype, scale layout and MXFP4 rounding mode. RMSNorm and add+RMSNorm take every
    tensor-scale mode; the element-wise prologues run here only for the modes per row (the
    other kernels take the rest). Then the kernels of experts and of batches (swizzled, a scale
    per expert or batch), named ``{experts,batches}_prologue_nvfp4_uN[_t128][_fp16]/swizzled/per_expert``."""
    out = {}
    for prologue in PROLOGUES:
        row_prologue = prologue in ROW_PROLOGUES
        for fmt in FORMATS if row_prologue else ("nvfp4",):
            modes = TENSOR_SF_MODES[fmt] if row_prologue else ()
            modes += ROW_TENSOR_SF_MODES if fmt == "nvfp4" else ()
            for threads, units in row_shapes(fmt, prologue):
                for dtype in INPUT_DTYPES:
                    for mx_mode in MX_MODES if fmt == "mxfp4" else ("rceil",):
                        base = (f"rows_{prologue}_{fmt}_{_row_shape_name(threads, units)}"
                                + ("_fp16" if dtype == "float16" else "") + ("_floor" if mx_mode == "floor" else ""))
                        for layout in SF_LAYOUTS:
                            for mode in modes:
                                out[f"{base}/{layout}/{mode}"] = RowConfig(
                                    prologue=prologue, fmt=fmt, threads=threads, row_units=units, input_dtype=dtype,
                                    mx_mode=mx_mode, sf_layout=layout, tensor_sf_mode=mode, arch=arch)
    for segments in ("experts", "batches"):
        for prologue in ELEMENTWISE_PROLOGUES:
            for threads, units in row_shapes("nvfp4", prologue):
                for dtype in INPUT_DTYPES:
                    name = (f"{segments}_{prologue}_nvfp4_{_row_shape_name(threads, units)}"
                            + ("_fp16" if dtype == "float16" else ""))
                    out[f"{name}/swizzled/{PER_EXPERT}"] = RowConfig(
                        prologue=prologue, threads=threads, row_units=units, input_dtype=dtype, segments=segments,
                        tensor_sf_mode=PER_EXPERT, arch=arch)
    return out


# The training quantizer's directions (rowwise, columnwise) with and without 16x16 blocks.
TRAINING_DIRECTIONS = {"rowwise": (True, False), "columnwise": (False, True), "both": (True, True)}


def training_variants(arch: str) -> dict[str, TrainingConfig | HadamardAmaxConfig]:
    """The training quantizers for ``arch``, named ``training_{rowwise,columnwise,both}[_2d][_sr][_rht]
    [_4over6][_fp16]/sf_layout``: every direction, block shape, rounding, input dtype and scale
    layout a call may take, with the Hadamard transform where it applies (a columnwise direction,
    1D blocks) and 4/6 everywhere; and the amax pass of a dynamic columnwise scale under the
    transform, ``training_hadamard_amax[_fp16]``."""
    out: dict[str, TrainingConfig | HadamardAmaxConfig] = {
        f"training_hadamard_amax{'_fp16' if dtype == 'float16' else ''}": HadamardAmaxConfig(input_dtype=dtype,
                                                                                            arch=arch)
        for dtype in INPUT_DTYPES}
    for directions, (rowwise, columnwise) in TRAINING_DIRECTIONS.items():
        for block_2d in (False, True):
            for hadamard in (False, True) if columnwise and not block_2d else (False,):
                for four_over_six in (False, True):
                    for stochastic in (False, True):
                        for dtype in INPUT_DTYPES:
                            name = (f"training_{directions}{'_2d' if block_2d else ''}{'_sr' if stochastic else ''}"
                                    f"{'_rht' if hadamard else ''}{'_4over6' if four_over_six else ''}"
                                    f"{'_fp16' if dtype == 'float16' else ''}")
                            for layout in SF_LAYOUTS:
                                out[f"{name}/{layout}"] = TrainingConfig(
                                    rowwise=rowwise, columnwise=columnwise, block_2d=block_2d, stochastic=stochastic,
                                    hadamard=hadamard, four_over_six=four_over_six, input_dtype=dtype,
                                    sf_layout=layout, arch=arch)
    return out


def fake_quantize_variants(arch: str) -> dict[str, FakeQuantizeConfig]:
    """The fake quantization kernels for ``arch``, named ``fake_quantize[_2d][_sr][_rht][_4over6][_fp16]
    [_scalar]/tensor_sf_mode``: every combination of the options the op allows (the Hadamard
    transform not with 16x16 blocks) in every input dtype and tensor-scale mode, with 16-byte
    and element loads; and the amax passes of ``"dynamic"``, ``fake_quantize_amax[_rht][_fp16][_scalar]``."""
    out = {}
    for block_2d in (False, True):
        for hadamard in (False,) if block_2d else (False, True):
            for stochastic in (False, True):
                for four_over_six in (False, True):
                    for dtype in INPUT_DTYPES:
                        for vector in (True, False):
                            name = ("fake_quantize" + "_2d" * block_2d + "_sr" * stochastic + "_rht" * hadamard
                                    + "_4over6" * four_over_six + ("_fp16" if dtype == "float16" else "")
                                    + "_scalar" * (not vector))
                            for mode in TENSOR_SF_MODES["nvfp4"]:
                                out[f"{name}/{mode}"] = FakeQuantizeConfig(
                                    block_2d=block_2d, stochastic=stochastic, hadamard=hadamard,
                                    four_over_six=four_over_six, input_dtype=dtype, tensor_sf_mode=mode, vector=vector,
                                    arch=arch)
    for hadamard in (False, True):
        for dtype in INPUT_DTYPES:
            for vector in (True, False):
                name = ("fake_quantize_amax" + "_rht" * hadamard + ("_fp16" if dtype == "float16" else "")
                        + "_scalar" * (not vector))
                out[name] = FakeQuantizeConfig(amax_pass=True, hadamard=hadamard, input_dtype=dtype, vector=vector,
                                               arch=arch)
    return out


def all_variants(arch: str) -> dict[str, QuantizeConfig | SimtConfig | RowConfig | TrainingConfig
                                      | HadamardAmaxConfig | FakeQuantizeConfig]:
    """Every shipped config for ``arch``, duplicates dropped, each in every scale layout it
    writes and both tensor_sf modes: the named configs (bf16 input, for coverage: only an explicit
    ``config=`` runs them), then those calls choose by themselves (tuned-table entries,
    defaults, SIMT kernels) in every input dtype and MXFP4 rounding mode, so that a
    precompiled cache holds every kernel a call can pick; then the dequantization
    variants, ``GLOBAL_SCALE`` (the amax and scale kernels, the one-launch dynamic quantizer),
    the training quantizers and the fake quantization kernels."""
    target(arch)
    choosable = {**tuned_variants(arch), **default_variants(arch),
                 **{name: cfg.replace(arch=arch) for name, cfg in SIMT.items()}}
    candidates = _tma_bases({**SHIPPED, **SHIPPED_MX}, arch)
    for name, cfg in choosable.items():
        candidates.update(_call_variants(name, cfg))
    bases: dict = {}
    for name, cfg in candidates.items():
        if cfg not in bases.values():
            bases[name] = cfg
    out = {}
    for name, cfg in bases.items():
        for layout in cfg.sf_layouts:
            for mode in TENSOR_SF_MODES[cfg.fmt]:
                out[f"{name}/{layout}/{mode}"] = cfg.replace(sf_layout=layout, tensor_sf_mode=mode)
    out.update(row_variants(arch))
    out.update(dequantize_variants(arch))
    out.update({name: cfg.replace(arch=arch) for name, cfg in GLOBAL_SCALE.items()})
    out.update(training_variants(arch))
    out.update(fake_quantize_variants(arch))
    return out


# The public operations, each by the one name its function has.
OPS = ("quantize_nvfp4", "quantize_mxfp4", "silu_and_mul_quantize_nvfp4", "silu_and_mul_quantize_mxfp4",
       "rms_norm_quantize_nvfp4", "rms_norm_quantize_mxfp4", "add_rms_norm_quantize_nvfp4",
       "add_rms_norm_quantize_mxfp4", "quantize_nvfp4_experts", "silu_and_mul_quantize_nvfp4_experts",
       "quantize_nvfp4_batched", "silu_and_mul_quantize_nvfp4_batched",
       "dequantize_nvfp4", "dequantize_mxfp4", "global_scale", "quantize_nvfp4_training", "fake_quantize_nvfp4")


# The suffix of the public op's name per grouping of the row kernel's rows.
SEGMENT_OPS = {"none": "", "experts": "_experts", "batches": "_batched"}


def op_of(cfg) -> str:
    """The public operation a kernel config serves (``python -m fp4q precompile --ops``); the
    dynamic global scale's kernels serve ``global_scale`` and ``quantize_nvfp4(x, "dynamic")``,
    those with the SiLU·mul prologue the fused op's ``"dynamic"``, the 4/6 scale pass
    ``fake_quantize_nvfp4``'s (each also serves ``quantize_nvfp4_training``'s ``"dynamic"``)."""
    if isinstance(cfg, GlobalScaleConfig) and cfg.four_over_six:
        return "fake_quantize_nvfp4"
    if isinstance(cfg, (TrainingConfig, HadamardAmaxConfig)):
        return "quantize_nvfp4_training"
    if isinstance(cfg, (AmaxConfig, GlobalScaleConfig)):
        return "global_scale" if cfg.prologue == "none" else f"{cfg.prologue_op}_quantize_nvfp4"
    if isinstance(cfg, FakeQuantizeConfig):
        return "fake_quantize_nvfp4"
    family = "dequantize" if isinstance(cfg, (DequantizeConfig, DequantizeSimtConfig)) else "quantize"
    segments = SEGMENT_OPS[cfg.segments] if isinstance(cfg, RowConfig) else ""
    name = f"{family}_{cfg.fmt}{segments}"
    return name if cfg.prologue == "none" else f"{cfg.prologue_op}_{name}"
