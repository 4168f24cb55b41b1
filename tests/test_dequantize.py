"""Dequantization: the configs' rules, rendering and NVRTC compilation of
every shipped variant (CPU), the reference round trip (CPU), and the
kernels bit-exact against fp4q.reference (GPU)."""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

from fp4q.jit import render as codegen
from fp4q.numerics import reference
from fp4q.jit.compiler import compile_source
from fp4q.kernels.archs import ARCHS
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
from fp4q.numerics.layouts import swizzle_sf
from fp4q.kernels.variants import DEQUANTIZE, all_variants, dequantize_variants

import fakes
from helpers import (BIG_K, BIG_M, BIG_ROWS, assert_bytes_equal, device_random_bits, random_bf16,
                     require_free_device_memory)

gpu = pytest.mark.gpu
ARCH_LIST = tuple(ARCHS)


def raises_config(*fragments):
    """pytest.raises(ConfigError) whose message holds each fragment literally, in order."""
    return pytest.raises(ConfigError, match=".*".join(re.escape(f) for f in fragments))


# --- config rules: the message names the field, the value and the rule ------------------------------------------


def test_defaults():
    cfg = DequantizeConfig()
    assert (cfg.tile_m, cfg.tile_k, cfg.num_stages, cfg.consumer_warps, cfg.min_ctas_per_sm) == (128, 128, 4, 8, 2)
    assert (cfg.fmt, cfg.out_dtype, cfg.sf_layout, cfg.tensor_sf_mode, cfg.arch) == (
        "nvfp4", "bfloat16", "swizzled", "value", "sm_90a")
    assert cfg.threads == 32 + 8 * 32
    assert cfg.q_box == (128, 64)
    assert (cfg.sf_vec_size, cfg.unit) == (16, 8)
    assert cfg.replace(fmt="mxfp4", out_dtype="float32").unit == 4
    assert DequantizeSimtConfig().threads == 256


@pytest.mark.parametrize("cls", [DequantizeConfig, DequantizeSimtConfig])
@pytest.mark.parametrize("field, value, message", [
    ("arch", "sm_89", "arch must be one of 'sm_80', 'sm_90a', 'sm_100f', 'sm_110f', 'sm_120f', 'sm_80_on_sm_90a', got 'sm_89'"),
    ("fmt", "fp8", "fmt must be 'nvfp4' or 'mxfp4', got 'fp8'"),
    ("out_dtype", "float16", "out_dtype must be 'bfloat16' or 'float32', got 'float16'"),
    ("sf_layout", "tiled", "sf_layout must be one of 'swizzled', 'linear', '8x4', got 'tiled'"),
    ("tensor_sf_mode", "none", "tensor_sf_mode must be one of 'value', 'pointer' for fmt='nvfp4', got 'none'"),
])
def test_call_field_rules(cls, field, value, message):
    with raises_config(message):
        cls(**{field: value})


@pytest.mark.parametrize("cls", [DequantizeConfig, DequantizeSimtConfig])
@pytest.mark.parametrize("mode", ["pointer", "none"])
def test_mxfp4_has_no_tensor_sf(cls, mode):
    # MXFP4 has no tensor scale: its kernels take the by-value argument ("value") and never read it.
    with raises_config("tensor_sf_mode must be one of 'value' for fmt='mxfp4', got", repr(mode)):
        cls(fmt="mxfp4", tensor_sf_mode=mode)
    assert cls(fmt="mxfp4", tensor_sf_mode="value").sf_vec_size == 32
    assert cls(fmt="mxfp4").tensor_sf_mode == "value"


@pytest.mark.parametrize("field, value, message", [
    ("tile_m", 0, "tile_m must be an integer in [1, 256], got 0"),
    ("tile_m", 512, "tile_m must be an integer in [1, 256], got 512"),
    ("tile_m", 128.0, "tile_m must be an integer in [1, 256], got 128.0"),
    ("tile_k", 16, "tile_k must be an integer in [32, 512], got 16"),
    ("tile_k", 544, "tile_k must be an integer in [32, 512], got 544"),
    ("tile_k", 48, "tile_k must be a multiple of 32 (a tile row of codes is whole 16-byte TMA chunks"),
    ("num_stages", 0, "num_stages must be an integer in [1, 16], got 0"),
    ("consumer_warps", 32, "consumer_warps must be an integer in [1, 31], got 32"),
    ("min_ctas_per_sm", 0, "min_ctas_per_sm must be an integer in [1, 8], got 0"),
    ("persistent", 1, "persistent must be a bool, got 1"),
])
def test_tma_field_rules(field, value, message):
    with raises_config(message):
        DequantizeConfig(**{field: value})


def test_units_must_split_evenly():
    with raises_config("tile_m * tile_k / 8 = 120 output units (bfloat16) must split evenly over",
                       "consumer_warps * 32 = 64 threads"):
        DequantizeConfig(tile_m=30, tile_k=32, consumer_warps=2)


def test_units_per_thread_are_bounded():
    with raises_config("32 output units per consumer thread and tile exceed 16"):
        DequantizeConfig(tile_m=128, tile_k=256, consumer_warps=8, out_dtype="float32")
    assert DequantizeConfig(tile_m=128, tile_k=256, consumer_warps=8, out_dtype="bfloat16")


def test_shared_memory_limits():
    with raises_config("shared memory of", "(num_stages=16, tile 128x512) exceeds the sm_90a limit of 232448"):
        DequantizeConfig(tile_m=128, tile_k=512, num_stages=16, consumer_warps=16)
    with raises_config("min_ctas_per_sm=4 CTAs of", "bytes of shared memory do not fit"):
        DequantizeConfig(tile_m=256, tile_k=256, num_stages=4, consumer_warps=16, min_ctas_per_sm=4)
    with raises_config("min_ctas_per_sm=8 CTAs of 288 threads exceed 2048 threads per sm_90a SM"):
        DequantizeConfig(tile_m=32, min_ctas_per_sm=8)


def test_smem_layout():
    cfg = DequantizeConfig(tile_m=64, tile_k=256, num_stages=3)
    assert cfg.smem.barriers == 3 * 64 * 128
    assert cfg.smem.tiles == 3 * 64 * 128 + 2 * 3 * 8  # one int per stage naming its tile
    assert cfg.smem.total == 3 * 64 * 128 + 2 * 3 * 8 + 3 * 4 + 128


def test_simt_threads_rule():
    with raises_config("threads must be one of 64, 128, 256, 512, 1024, got 100"):
        DequantizeSimtConfig(threads=100)


# --- rendering ---------------------------------------------------------------------------------------------------


def defines(source: str) -> dict[str, str]:
    """The rendered flags as "0"/"1"."""
    return {k: str(int(v == "true")) for k, v in re.findall(r"^constexpr bool (\w+) = (true|false);$", source, re.M)}


def prelude_constants(source: str) -> dict[str, int]:
    """The constants rendered from the config (the templates define their own further down)."""
    prelude = source[:source.index("typedef unsigned char u8;")]
    return {k: int(v) for k, v in re.findall(r"^constexpr int (\w+) = (-?\d+);$", prelude, re.M)}


@pytest.mark.parametrize("fmt, mode", [("nvfp4", "value"), ("nvfp4", "pointer"), ("mxfp4", "value")])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_render_flags_and_constants(fmt, mode, dtype, layout):
    tma = DequantizeConfig(tile_m=64, tile_k=256, num_stages=3, fmt=fmt, tensor_sf_mode=mode, out_dtype=dtype,
                           sf_layout=layout)
    simt = DequantizeSimtConfig(threads=128, fmt=fmt, tensor_sf_mode=mode, out_dtype=dtype, sf_layout=layout)
    for cfg, name in ((tma, "fp4q_dequantize_tma"), (simt, "fp4q_dequantize_simt")):
        src = codegen.render(cfg.spec)
        assert src.kernel_name == name and src.arch == cfg.arch
        assert not re.search(r"^\s*#\s*(include|pragma\s+once)", src.source, re.M)
        assert f"{name}(" in src.source
        d = defines(src.source)
        assert d["FP4Q_MXFP4"] == str(int(fmt == "mxfp4"))
        assert d["FP4Q_OUT_F32"] == str(int(dtype == "float32"))
        assert d["FP4Q_SF_SWIZZLED"] == str(int(layout == "swizzled"))
        assert d["FP4Q_TENSOR_SF_BY_POINTER"] == str(int(mode == "pointer"))
    assert prelude_constants(codegen.render(tma.spec).source) == {
        "TILE_M": 64, "TILE_K": 256, "NUM_STAGES": 3, "CONSUMER_THREADS": 256, "MIN_CTAS_PER_SM": 2,
        "OFF_BARRIERS": 3 * 64 * 128, "OFF_TILES": 3 * 64 * 128 + 2 * 3 * 8}
    assert prelude_constants(codegen.render(simt.spec).source) == {"SIMT_THREADS": 128}


def test_every_code_affecting_field_changes_the_source():
    base = codegen.render(DequantizeConfig().spec).source
    for changes in [dict(tile_m=64), dict(tile_k=256), dict(num_stages=2), dict(consumer_warps=4),
                    dict(min_ctas_per_sm=1), dict(out_dtype="float32"), dict(sf_layout="linear"),
                    dict(tensor_sf_mode="pointer"), dict(fmt="mxfp4"), dict(arch="sm_100f")]:
        assert codegen.render(DequantizeConfig(**changes).spec).source != base, changes


# --- the shipped variants ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEQUANTIZE))
def test_shipped_configs_are_valid_defaults(name):
    cfg = DEQUANTIZE[name]
    assert type(cfg)(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}) == cfg
    # the call decides these
    assert (cfg.fmt, cfg.out_dtype, cfg.sf_layout, cfg.tensor_sf_mode, cfg.arch) == (
        "nvfp4", "bfloat16", "swizzled", "value", "sm_90a")


@pytest.mark.parametrize("arch", ARCH_LIST)
def test_dequantize_variants_are_in_all_variants(arch):
    variants = dequantize_variants(arch)
    # every config on a target with TMA (all fit), only the plain kernel and its vector form without
    simt = sum(isinstance(cfg, DequantizeSimtConfig) for cfg in DEQUANTIZE.values())
    bases = len(DEQUANTIZE) if ARCHS[arch].features.tma else simt
    assert len(variants) == bases * (12 + 6)  # nvfp4: 2 dtypes x 3 layouts x 2 modes; mxfp4: its one mode
    everything = all_variants(arch)
    for name, cfg in variants.items():
        assert everything[name] == cfg and cfg.arch == arch
    assert len(set(variants.values())) == len(variants)
    assert DequantizeSimtConfig(arch=arch) in variants.values()
    assert DequantizeSimtConfig(arch=arch, vector=True) in variants.values()
    if ARCHS[arch].features.tma:
        assert DequantizeConfig(arch=arch) in variants.values()


VARIANTS = [(arch, name, cfg) for arch in ARCH_LIST for name, cfg in dequantize_variants(arch).items()]


@pytest.mark.parametrize("arch, name, cfg", VARIANTS, ids=[f"{a}-{n}" for a, n, _ in VARIANTS])
def test_variant_compiles_without_spills(arch, name, cfg, variants_cache):
    kernel = compile_source(codegen.render(cfg.spec), cache=variants_cache)
    assert kernel.cubin[:4] == b"\x7fELF"
    assert f"Compiling entry function '{kernel.kernel_name}' for '{arch}'" in kernel.log
    res = kernel.resources
    assert res.spill_bytes == 0 and res.stack_bytes == 0, kernel.log
    assert "warning" not in kernel.log.lower(), kernel.log
    if isinstance(cfg, DequantizeConfig):
        # launch bounds: min_ctas_per_sm CTAs fit in the register file
        allocated = -(-res.registers // 8) * 8
        assert allocated * cfg.threads * cfg.min_ctas_per_sm <= ARCHS[arch].regs_per_sm


# --- the reference round trip (CPU) ------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e-20, 1e-3, 1.0, 1e20])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_reference_round_trip_nvfp4(scale, layout):
    # Finite data: the group maximum dequantizes to 6 * d, which quantizes back to the same scale and codes.
    x = random_bf16((257, 2176), np.random.default_rng(1), scale=scale)
    tsf = reference.global_scale(x)
    q, sf = reference.quantize_nvfp4(x, tsf, layout)
    y = reference.dequantize_nvfp4(q, sf, tsf, layout, "bfloat16")
    q2, sf2 = reference.quantize_nvfp4(y, tsf, layout)
    assert_bytes_equal(q2, q, "q")
    assert_bytes_equal(sf2, sf, "sf")


@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_reference_round_trip_mxfp4_floor(layout):
    # floor mode keeps the group maximum's code at 4 or 6, so the exponent comes back; rceil
    # can leave it at 3 (amax * 2**-e in (3, 3.5)) and then picks a smaller exponent.
    x = random_bf16((257, 2176), np.random.default_rng(2))
    q, sf = reference.quantize_mxfp4(x, "floor", layout)
    y = reference.dequantize_mxfp4(q, sf, layout, "bfloat16")
    q2, sf2 = reference.quantize_mxfp4(y, "floor", layout)
    assert_bytes_equal(q2, q, "q")
    assert_bytes_equal(sf2, sf, "sf")


# --- GPU: bit-exact against the reference ------------------------------------------------------------------------


def _cp():
    return pytest.importorskip("cupy")


def assert_values_equal(got, want, what: str) -> None:
    """Bit-exact, except that any NaN matches any NaN (the kernels write the canonical one)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype in (ml_dtypes.bfloat16, np.uint16):  # bf16, or its bits as the kernels return them
        want_bits, got_bits = want.view(np.uint16), got.view(np.uint16)
        want_nan, got_nan = (want_bits & 0x7FFF) > 0x7F80, (got_bits & 0x7FFF) > 0x7F80
    else:
        want_bits, got_bits = want.view(np.uint32), got.view(np.uint32)
        want_nan, got_nan = np.isnan(want), np.isnan(got.view(np.float32))
    bad = (want_nan != got_nan) | (~want_nan & (want_bits != got_bits))
    if bad.any():
        idx = [tuple(int(i) for i in p) for p in np.argwhere(bad)[:8]]
        details = ", ".join(f"{i}: got {int(got_bits[i]):#x} want {int(want_bits[i]):#x}" for i in idx)
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values differ; first {details}")


def random_codes(rows, k, rng):
    """Every byte value: all 16 codes in both nibbles, -0 (0x8) included."""
    return rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8)


def random_scales(rows, groups, layout, rng):
    """Every scale byte: e4m3 NaN (0x7F, 0xFF), negatives, subnormals; e8m0 0 (2**-127) and 0xFF (NaN)."""
    sf = rng.integers(0, 256, size=(rows, groups), dtype=np.uint8)
    return swizzle_sf(sf) if layout == "swizzled" else sf


def _dequantize(fmt, q, sf, tsf, layout, dtype, device_sf=False, **kwargs):
    import fp4q

    cp = _cp()
    if fmt == "nvfp4":
        # From a 1-element array: CuPy fills a 0-d array from a scalar, and fills with 0 by memset, losing -0's sign.
        arg = cp.asarray(np.full(1, tsf, dtype=np.float32)).reshape(()) if device_sf else float(tsf)
        y = fp4q.dequantize_nvfp4(cp.asarray(q), cp.asarray(sf), arg, sf_layout=layout, dtype=dtype, **kwargs)
        want = reference.dequantize_nvfp4(q, sf, np.float32(tsf), layout, dtype)
    else:
        y = fp4q.dequantize_mxfp4(cp.asarray(q), cp.asarray(sf), sf_layout=layout, dtype=dtype, **kwargs)
        want = reference.dequantize_mxfp4(q, sf, layout, dtype)
    cp.cuda.get_current_stream().synchronize()
    assert y.dtype == (np.uint16 if dtype == "bfloat16" else np.float32)
    got = cp.asnumpy(y)
    if dtype == "bfloat16":  # both hold bf16 bits as uint16
        got, want = got.view(ml_dtypes.bfloat16), want.view(ml_dtypes.bfloat16)
    assert_values_equal(got, want, f"{fmt} {q.shape} {layout} {dtype}")
    return y


FMT_K = [("nvfp4", k) for k in (16, 48, 64, 80, 2176, 7168)] + [("mxfp4", k) for k in (32, 96, 160, 2176, 7168)]


@gpu
@pytest.mark.parametrize("fmt, k", FMT_K)
@pytest.mark.parametrize("m", [1, 31, 128, 129, 1000])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_shapes_bit_exact(fmt, k, m, layout, dtype):
    rng = np.random.default_rng(m * 7919 + k)
    group = 16 if fmt == "nvfp4" else 32
    q = random_codes(m, k, rng)
    sf = random_scales(m, k // group, layout, rng)
    _dequantize(fmt, q, sf, 0.37, layout, dtype)


@gpu
@pytest.mark.parametrize("tsf", [1.0, 0.37, 2.0**-126, 2.0**-20, 2.0**40, 2.0**100])
@pytest.mark.parametrize("device_sf", [False, True])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_tensor_scales_bit_exact(tsf, device_sf, dtype):
    # extreme tensor scales push d into float32 (and bf16) subnormals and overflow
    rng = np.random.default_rng(3)
    q, sf = random_codes(300, 1024, rng), random_scales(300, 64, "swizzled", rng)
    _dequantize("nvfp4", q, sf, tsf, "swizzled", dtype, device_sf)


@gpu
@pytest.mark.parametrize("tsf", [-1.5, np.nan, np.inf, 0.0, 1e-45, -0.0])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_device_tensor_sf_outside_range_follows_formulas(tsf, dtype):
    rng = np.random.default_rng(4)
    q, sf = random_codes(130, 256, rng), random_scales(130, 16, "linear", rng)
    _dequantize("nvfp4", q, sf, tsf, "linear", dtype, device_sf=True)
    _dequantize("nvfp4", q, sf, tsf, "linear", dtype, device_sf=True, config=DequantizeSimtConfig())


@gpu
@pytest.mark.parametrize("name", sorted(DEQUANTIZE))
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_shipped_config(name, fmt, layout, dtype):
    rng = np.random.default_rng(11)
    group = 16 if fmt == "nvfp4" else 32
    for m, k in [(129, 2176), (1000, 512), (5, 64), (300, 7168), (1, 32 * group)]:
        q, sf = random_codes(m, k, rng), random_scales(m, k // group, layout, rng)
        _dequantize(fmt, q, sf, 1.5, layout, dtype, config=DEQUANTIZE[name])
        if fmt == "nvfp4":
            _dequantize(fmt, q, sf, 1.5, layout, dtype, device_sf=True, config=DEQUANTIZE[name])


@gpu
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_strided_and_misaligned_codes(fmt, dtype):
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(5)
    group = 16 if fmt == "nvfp4" else 32
    wide = random_codes(200, 4096, rng)
    sf = random_scales(200, 1024 // group, "linear", rng)
    for offset in (0, 16, 1, 3):  # 16-byte aligned slices take TMA, the others the plain kernel
        q = wide[:, offset:offset + 512]
        qd = cp.asarray(wide)[:, offset:offset + 512]
        if fmt == "nvfp4":
            y = fp4q.dequantize_nvfp4(qd, cp.asarray(sf), 2.0, sf_layout="linear", dtype=dtype)
            want = reference.dequantize_nvfp4(np.ascontiguousarray(q), sf, 2.0, "linear", dtype)
        else:
            y = fp4q.dequantize_mxfp4(qd, cp.asarray(sf), sf_layout="linear", dtype=dtype)
            want = reference.dequantize_mxfp4(np.ascontiguousarray(q), sf, "linear", dtype)
        got = cp.asnumpy(y)
        assert_values_equal(got.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else got, want, f"offset {offset}")


@gpu
def test_leading_dimensions_flatten():
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(6)
    q = rng.integers(0, 256, size=(3, 70, 128), dtype=np.uint8)
    sf = rng.integers(0, 256, size=(3, 70, 16), dtype=np.uint8)
    y = fp4q.dequantize_nvfp4(cp.asarray(q), cp.asarray(sf), 1.0, sf_layout="linear", dtype="float32")
    assert y.shape == (3, 70, 256)
    assert_values_equal(cp.asnumpy(y), reference.dequantize_nvfp4(q, sf, 1.0, "linear", "float32"), "3d")


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_out_buffer_is_used_and_fully_written(dtype):
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(7)
    for m, k in [(129, 2176), (33, 80)]:
        q, sf = random_codes(m, k, rng), random_scales(m, k // 16, "swizzled", rng)
        out = cp.full((m, k), 0x7F, dtype=np.uint16 if dtype == "bfloat16" else np.float32)
        y = fp4q.dequantize_nvfp4(cp.asarray(q), cp.asarray(sf), 0.5, dtype=dtype, out=out)
        assert y is out
        want = reference.dequantize_nvfp4(q, sf, 0.5, "swizzled", dtype)
        got = cp.asnumpy(out)
        assert_values_equal(got.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else got, want, "out")


def test_empty_inputs_launch_nothing(cp):
    import fp4q

    y = fp4q.dequantize_nvfp4(cp.zeros((0, 32), dtype=cp.uint8), cp.zeros((0, 1, 32, 4, 4), dtype=cp.uint8), 1.0)
    assert y.shape == (0, 64) and y.dtype == np.uint16
    y = fp4q.dequantize_mxfp4(cp.zeros((5, 0), dtype=cp.uint8), cp.zeros((5, 0), dtype=cp.uint8),
                              sf_layout="linear", dtype="float32")
    assert y.shape == (5, 0) and y.dtype == np.float32
    assert fakes.active is None or fakes.active.launches == []


@gpu
@pytest.mark.parametrize("pdl", [True, False])
def test_non_default_stream(pdl):
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(8)
    q, sf = random_codes(1000, 4096, rng), random_scales(1000, 256, "swizzled", rng)
    stream = cp.cuda.Stream(non_blocking=True)
    qd, sfd = cp.asarray(q), cp.asarray(sf)
    cp.cuda.get_current_stream().synchronize()
    y = fp4q.dequantize_nvfp4(qd, sfd, 3.0, dtype="float32", stream=stream, pdl=pdl)
    stream.synchronize()
    assert_values_equal(cp.asnumpy(y), reference.dequantize_nvfp4(q, sf, 3.0, "swizzled", "float32"), "stream")


# --- GPU: argument rules -----------------------------------------------------------------------------------------


def test_argument_errors_name_argument_value_and_rule(cp):
    import fp4q

    q = cp.zeros((4, 32), dtype=cp.uint8)
    sf = cp.zeros((1, 1, 32, 4, 4), dtype=cp.uint8)
    with pytest.raises(ValueError, match="sf_layout must be one of 'swizzled', 'linear', '8x4', got 'rows'"):
        fp4q.dequantize_nvfp4(q, sf, 1.0, sf_layout="rows")
    with pytest.raises(ValueError, match="dtype must be 'bfloat16' or 'float32', got 'float16'"):
        fp4q.dequantize_nvfp4(q, sf, 1.0, dtype="float16")
    with pytest.raises(TypeError, match="q must hold uint8 bytes .*got dtype uint16"):
        fp4q.dequantize_nvfp4(q.view(cp.uint16), sf, 1.0)
    with pytest.raises(ValueError, match=r"K \(2 \* the last dimension of q\) must be a multiple of 32 for "
                                         r"dequantize_mxfp4, got 48"):
        fp4q.dequantize_mxfp4(cp.zeros((4, 24), dtype=cp.uint8), sf)
    with pytest.raises(ValueError, match=r"sf must have shape \(1, 1, 32, 4, 4\), got \(4, 4\)"):
        fp4q.dequantize_nvfp4(q, cp.zeros((4, 4), dtype=cp.uint8), 1.0)
    with pytest.raises(ValueError, match=r"tensor_sf must be a float32 in \[2\*\*-126, 2\*\*100\]"):
        fp4q.dequantize_nvfp4(q, sf, 0.0)
    with pytest.raises(TypeError, match="out must have dtype uint16 or bfloat16, got float32"):
        fp4q.dequantize_nvfp4(q, sf, 1.0, out=cp.zeros((4, 64), dtype=cp.float32))
    with pytest.raises(ValueError, match=r"out must have shape \(4, 64\), got \(4, 32\)"):
        fp4q.dequantize_nvfp4(q, sf, 1.0, out=cp.zeros((4, 32), dtype=cp.uint16))
    with pytest.raises(TypeError, match="pdl must be a bool, got 1"):
        fp4q.dequantize_nvfp4(q, sf, 1.0, pdl=1)
    with pytest.raises(TypeError, match="config must be None, a DequantizeConfig or a DequantizeSimtConfig"):
        fp4q.dequantize_nvfp4(q, sf, 1.0, config=fp4q.QuantizeConfig())
    with pytest.raises(ValueError, match="TMA cannot serve this call: K=48 is not a multiple of 32"):
        fp4q.dequantize_nvfp4(cp.zeros((4, 24), dtype=cp.uint8), sf, 1.0, config=DequantizeConfig())


# --- GPU: round trip quantize -> dequantize -> quantize ----------------------------------------------------------


@gpu
@pytest.mark.parametrize("scale", [1e-20, 1.0, 1e20])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_round_trip_nvfp4(scale, layout):
    import fp4q

    cp = _cp()
    x = random_bf16((257, 2176), np.random.default_rng(1), scale=scale)
    tsf = float(reference.global_scale(x))
    q, sf = fp4q.quantize_nvfp4(cp.asarray(x), tsf, sf_layout=layout)
    y = fp4q.dequantize_nvfp4(q, sf, tsf, sf_layout=layout)
    q2, sf2 = fp4q.quantize_nvfp4(y, tsf, sf_layout=layout)
    assert_bytes_equal(cp.asnumpy(q2), cp.asnumpy(q), "q")
    assert_bytes_equal(cp.asnumpy(sf2), cp.asnumpy(sf), "sf")
    assert_bytes_equal(cp.asnumpy(q), reference.quantize_nvfp4(x, tsf, layout)[0], "q vs reference")


@gpu
def test_round_trip_dynamic_scale():
    import fp4q

    cp = _cp()
    x = cp.asarray(random_bf16((300, 1024), np.random.default_rng(9), scale=3.0))
    q, sf, tsf = fp4q.quantize_nvfp4(x, "dynamic")
    y = fp4q.dequantize_nvfp4(q, sf, tsf)
    q2, sf2 = fp4q.quantize_nvfp4(y, tsf)
    assert_bytes_equal(cp.asnumpy(q2), cp.asnumpy(q), "q")
    assert_bytes_equal(cp.asnumpy(sf2), cp.asnumpy(sf), "sf")


@gpu
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_round_trip_mxfp4_floor(layout):
    import fp4q

    cp = _cp()
    x = random_bf16((257, 2176), np.random.default_rng(2))
    q, sf = reference.quantize_mxfp4(x, "floor", layout)
    y = cp.asnumpy(fp4q.dequantize_mxfp4(cp.asarray(q), cp.asarray(sf), sf_layout=layout))
    q2, sf2 = reference.quantize_mxfp4(y, "floor", layout)
    assert_bytes_equal(q2, q, "q")
    assert_bytes_equal(sf2, sf, "sf")


@gpu
@pytest.mark.parametrize("kernel", ["default", "vector", "plain"])
def test_offsets_beyond_32_bits(kernel):
    """A training-sized output (2**32 + 1.5 * 2**20 bf16 values, 8 GB) from random codes and
    scales: every address past 2**31 and 2**32 bytes is computed in 64 bits. Sampled rows
    against the reference."""
    import fp4q

    cp = _cp()
    require_free_device_memory(cp, 11 << 30)
    q = device_random_bits(cp, (BIG_M, BIG_K // 2), np.uint8)
    sf = device_random_bits(cp, (BIG_M, BIG_K // 16), np.uint8)
    config = {"default": None, "vector": DequantizeSimtConfig(vector=True), "plain": DequantizeSimtConfig()}[kernel]
    y = fp4q.dequantize_nvfp4(q, sf, 0.75, sf_layout="linear", config=config)
    cp.cuda.Device().synchronize()
    q_rows, sf_rows = cp.asnumpy(q[BIG_ROWS]), cp.asnumpy(sf[BIG_ROWS])
    want = reference.dequantize_nvfp4(q_rows, sf_rows, np.float32(0.75), "linear", "bfloat16")
    assert_values_equal(cp.asnumpy(y[BIG_ROWS]).view(ml_dtypes.bfloat16), want.view(ml_dtypes.bfloat16),
                        f"rows {BIG_ROWS}")
