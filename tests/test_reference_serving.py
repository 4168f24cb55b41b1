"""The serving quantizers of the numpy reference (fp4q.reference) against NVFP4_SPEC.md, "The project's exact
sequences: fused serving quantizers": fused SiLU·mul and (add+)RMSNorm quantizers, per-row tensor scales, the 8x4
layout, padded outputs and float32 input.

Expected bytes are worked out by hand in the comments, as in test_reference.py: R6 = float32(1/6), and
for the amax values used here amax * R6 rounds to amax / 6 (6 * R6 = 1.0).
"""

import math

import ml_dtypes
import numpy as np
import pytest

from fp4q.numerics.layouts import (
    block_shape,
    sf_8x4_offset,
    sf_8x4_shape,
    swizzle_sf_8x4,
    unswizzle_groups,
    unswizzle_groups_8x4,
    unswizzle_sf_8x4,
)
from fp4q.numerics.reference import (
    dequantize_mxfp4,
    dequantize_nvfp4,
    global_scale,
    quantize_mxfp4,
    quantize_nvfp4,
    rms_norm,
    rms_norm_quantize_mxfp4,
    rms_norm_quantize_nvfp4,
    silu_and_mul,
    silu_and_mul_quantize_mxfp4,
    silu_and_mul_quantize_nvfp4,
)

BF = ml_dtypes.bfloat16
LAYOUTS = ("swizzled", "linear", "8x4")
GROUP = {"nvfp4": 16, "mxfp4": 32}


def as_bytes(values):
    return np.array(values, dtype=np.uint8)


def row(values, k=16, dtype=BF):
    """One row of ``values`` zero-padded to ``k``, in ``dtype`` (exactly)."""
    v = np.zeros(k, np.float64)
    v[: len(values)] = values
    out = v.astype(np.float32).astype(dtype)
    assert np.array_equal(out.astype(np.float64), v, equal_nan=True), "test value is not representable"
    return out


def heavy_tailed(shape, seed, dtype=BF, inf=False):
    """Student-t values over many binades with NaN, -0 and subnormals (and +-Inf if ``inf``) sprinkled in."""
    rng = np.random.default_rng(seed)
    v = rng.standard_t(2, shape) * np.exp2(rng.integers(-8, 8, shape))
    flat = v.reshape(-1)
    specials = [np.nan, -0.0, 2.0**-130, -(2.0**-140), 0.0] + ([np.inf, -np.inf] if inf else [])
    picks = rng.choice(flat.size, size=min(flat.size, 3 * len(specials)), replace=False)
    for i, pick in enumerate(picks):
        flat[pick] = specials[i % len(specials)]
    return v.astype(np.float32).astype(dtype)


def to_linear(sf, m, groups, sf_layout):
    """Scale bytes of any layout as ``(m, groups)``."""
    if sf_layout == "linear":
        return sf.reshape(m, groups)
    if sf_layout == "8x4":
        return unswizzle_groups_8x4(sf, m, groups)
    return unswizzle_groups(sf, m, groups)


def assert_outputs_equal(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_array_equal(np.atleast_1d(g).view(np.uint8), np.atleast_1d(e).view(np.uint8))


# ----------------------------------------------------------- fused == unfused, then quantize

TENSOR_SFS = [
    pytest.param(lambda m: 20.0, id="scalar"),
    pytest.param(lambda m: np.geomspace(0.5, 900, m).astype(np.float32), id="per_row"),
    pytest.param(lambda m: "dynamic", id="dynamic"),
    pytest.param(lambda m: "dynamic_per_row", id="dynamic_per_row"),
]
DTYPES = [pytest.param(BF, id="bf16"), pytest.param(np.float16, id="fp16"), pytest.param(np.float32, id="fp32")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sf_layout", LAYOUTS)
@pytest.mark.parametrize("tensor_sf", TENSOR_SFS)
@pytest.mark.parametrize("padded_with_inf", [False, True])
def test_silu_and_mul_quantize_nvfp4_is_silu_and_mul_then_quantize(dtype, sf_layout, tensor_sf, padded_with_inf):
    x = heavy_tailed((37, 2 * 48), seed=1, dtype=dtype, inf=padded_with_inf)
    padded_k = 80 if padded_with_inf else None
    fused = silu_and_mul_quantize_nvfp4(x, tensor_sf(37), sf_layout, padded_k=padded_k)
    unfused = quantize_nvfp4(silu_and_mul(x), tensor_sf(37), sf_layout, padded_k=padded_k)
    assert_outputs_equal(fused, unfused)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sf_layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_silu_and_mul_quantize_mxfp4_is_silu_and_mul_then_quantize(dtype, sf_layout, mode):
    x = heavy_tailed((2, 9, 2 * 64), seed=2, dtype=dtype, inf=True)
    fused = silu_and_mul_quantize_mxfp4(x, mode, sf_layout, padded_k=96)
    unfused = quantize_mxfp4(silu_and_mul(x), mode, sf_layout, padded_k=96)
    assert_outputs_equal(fused, unfused)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sf_layout", LAYOUTS)
@pytest.mark.parametrize("tensor_sf", TENSOR_SFS)
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_quantize_nvfp4_is_rms_norm_then_quantize(dtype, sf_layout, tensor_sf, with_residual):
    # Inf in a row makes it all NaN or zero; the residual brings Inf into other rows.
    x = heavy_tailed((33, 80), seed=3, dtype=dtype, inf=not with_residual)
    w = heavy_tailed((80,), seed=4, dtype=dtype)
    res_fused = heavy_tailed((33, 80), seed=5, dtype=dtype, inf=True) if with_residual else None
    res_unfused = None if res_fused is None else res_fused.copy()
    fused = rms_norm_quantize_nvfp4(x, w, tensor_sf(33), 1e-5, res_fused, sf_layout, padded_k=96)
    unfused = quantize_nvfp4(rms_norm(x, w, 1e-5, res_unfused), tensor_sf(33), sf_layout, padded_k=96)
    assert_outputs_equal(fused, unfused)
    if with_residual:
        np.testing.assert_array_equal(res_fused.view(np.uint8), res_unfused.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sf_layout", LAYOUTS)
def test_rms_norm_quantize_mxfp4_is_rms_norm_then_quantize(dtype, sf_layout):
    x = heavy_tailed((3, 5, 96), seed=6, dtype=dtype, inf=True)
    w = heavy_tailed((96,), seed=7, dtype=dtype)
    res_fused = heavy_tailed((3, 5, 96), seed=8, dtype=dtype)
    res_unfused = res_fused.copy()
    fused = rms_norm_quantize_mxfp4(x, w, 1e-6, res_fused, "floor", sf_layout)
    unfused = quantize_mxfp4(rms_norm(x, w, 1e-6, res_unfused), "floor", sf_layout)
    assert_outputs_equal(fused, unfused)
    np.testing.assert_array_equal(res_fused.view(np.uint8), res_unfused.view(np.uint8))


# ------------------------------------------------------------------------ hand-derived bytes


def silu_input():
    # gate 24: e**-24 < 2**-24, so 1 + e**-24 = 1 and silu(24) = 24 exactly; h = 24 * up =
    # [6, 3, -1.5, 0.75, 0.375, 0...].
    return np.concatenate([row([24] * 5), row([0.25, 0.125, -0.0625, 2.0**-5, 2.0**-6])])[None]


def test_silu_and_mul_quantize_nvfp4_hand_bytes():
    # tsf 1, amax 6: s = 6 * R6 = 1.0 (0x38), d = inv = 1: codes 6 -> 7, 3 -> 5, -1.5 -> B,
    # 0.75 tie -> 1.0 (2), 0.375 -> 0.5 (1): bytes 0x57, 0x2B, 0x01.
    q, sf = silu_and_mul_quantize_nvfp4(silu_input(), 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x38]]))
    np.testing.assert_array_equal(q, as_bytes([[0x57, 0x2B, 0x01, 0, 0, 0, 0, 0]]))
    # dynamic: amax(h) = 6, tensor_sf = 2688 / 6 = 448; s = 448 * 1.0 = 448 (0x7E), d = 448 *
    # float32(1/448) = 1 + 2**-24 * ..., inv ~ 1: the same codes.
    q, sf, tsf = silu_and_mul_quantize_nvfp4(silu_input(), "dynamic", sf_layout="linear")
    assert isinstance(tsf, np.float32) and tsf == 448
    np.testing.assert_array_equal(sf, as_bytes([[0x7E]]))
    np.testing.assert_array_equal(q[0, :3], as_bytes([0x57, 0x2B, 0x01]))


def test_silu_and_mul_quantize_mxfp4_hand_bytes():
    # amax 6 in the first group of 32: rceil t = 6 * R6 = 1.0 -> e = 0 (0x7F); the same codes.
    x = np.concatenate([row([24] * 5, k=32), row([0.25, 0.125, -0.0625, 2.0**-5, 2.0**-6], k=32)])[None]
    q, sf = silu_and_mul_quantize_mxfp4(x, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x7F]]))
    np.testing.assert_array_equal(q[0, :4], as_bytes([0x57, 0x2B, 0x01, 0]))


def test_silu_and_mul_quantize_nan_gate():
    # A NaN gate makes h NaN: NaN is ignored in the amax (0 here), so sf = 0, d = 0, inv = 0 and
    # NaN * 0 = NaN encodes as 0x7 in both nibbles.
    x = np.concatenate([np.full(16, np.nan, BF), row([1] * 16)])[None]
    q, sf = silu_and_mul_quantize_nvfp4(x, 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0]]))
    assert (q == 0x77).all()


def test_rms_norm_quantize_nvfp4_hand_bytes():
    # [3, 4, 0...], w0 = 1.0234375, eps 0: h = [2.46875, 3.203125, 0...] (test_reference_prologues).
    # amax 3.203125: s = 0.53385 = 1.0677 * 2**-1 -> 1.125 * 2**-1 (0x31), inv = 1 / 0.5625 = 1.7778:
    # 2.46875 -> 4.389 (4, code 6), 3.203125 -> 5.694 (6, code 7): byte 0x76.
    q, sf = rms_norm_quantize_nvfp4(row([3, 4])[None], row([1.0234375] + [1] * 15), 1.0, eps=0.0,
                                    sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x31]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes([0x76, 0]))


def test_rms_norm_quantize_mxfp4_hand_bytes():
    # K = 32, [3, 4, 0...]: rinv = 1 / sqrt(25 / 32) = 1.1313709; 3 * rinv = 3.394 -> bf16 3.390625 (89.2
    # -> 89), times 1.0234375 = 3.4701 -> 3.46875 (94.09 -> 94); 4 * rinv = 4.5255 -> 4.53125 (16.8 -> 17).
    # rceil: t = 4.53125 * R6 = 0.755 -> e = 0 (0x7F): 3.46875 -> 3 (5), 4.53125 -> 4 (6): byte 0x65.
    q, sf = rms_norm_quantize_mxfp4(row([3, 4], k=32)[None], row([1.0234375] + [1] * 31, k=32), eps=0.0,
                                    sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x7F]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes([0x65, 0]))


def test_rms_norm_quantize_updates_the_residual():
    # x + residual = [2 + 1, 4 + 0] = [3, 4]: the hand case above, and residual now holds [3, 4, 0...].
    residual = row([1, 0])[None]
    q, sf = rms_norm_quantize_nvfp4(row([2, 4])[None], row([1.0234375] + [1] * 15), 1.0, eps=0.0,
                                    residual=residual, sf_layout="linear")
    np.testing.assert_array_equal(residual, row([3, 4])[None])
    np.testing.assert_array_equal(sf, as_bytes([[0x31]]))
    assert q[0, 0] == 0x76


# ---------------------------------------------------------------------- per-row tensor scale


def test_per_row_tensor_sf_hand_bytes():
    # Both rows amax 6: row 0 with tsf 1 -> s = 1.0 (0x38), d = 1; row 1 with tsf 2 -> s = 2.0 (0x40),
    # d = 2 * 0.5 = 1: the same codes, 6 -> 7 and -3 -> D.
    x = np.stack([row([6, -3]), row([6, -3])])
    q, sf = quantize_nvfp4(x, np.array([1, 2], np.float32), sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x38], [0x40]]))
    np.testing.assert_array_equal(q[:, 0], as_bytes([0xD7, 0xD7]))


@pytest.mark.parametrize("shape", [(5, 64), (2, 3, 64), (64,)])
def test_per_row_tensor_sf_equals_each_row_alone(shape):
    x = heavy_tailed(shape, seed=9)
    lead = shape[:-1]
    m = math.prod(lead)
    scales = np.geomspace(2.0**-20, 2.0**20, m).astype(np.float32)
    for tsf in (scales, scales.reshape(lead)):
        q, sf = quantize_nvfp4(x, tsf, sf_layout="linear")
        rows_q, rows_sf = q.reshape(m, -1), sf.reshape(m, -1)
        for i, xi in enumerate(x.reshape(m, shape[-1])):
            qi, sfi = quantize_nvfp4(xi, scales[i], sf_layout="linear")
            np.testing.assert_array_equal(rows_q[i], qi)
            np.testing.assert_array_equal(rows_sf[i], sfi)


def test_dynamic_per_row_is_each_rows_global_scale():
    x = heavy_tailed((6, 64), seed=10)
    x[2] = 0  # amax 0: scale 1
    x[3, 5] = np.inf  # amax Inf: scale 1
    q, sf, scales = quantize_nvfp4(x, "dynamic_per_row")
    assert scales.dtype == np.float32 and scales.shape == (6,)
    np.testing.assert_array_equal(scales, [global_scale(xi) for xi in x])
    assert scales[2] == 1 and scales[3] == 1
    assert_outputs_equal((q, sf), quantize_nvfp4(x, scales))
    x3 = x.reshape(2, 3, 64)
    q3, sf3, scales3 = quantize_nvfp4(x3, "dynamic_per_row", "linear")
    assert scales3.shape == (2, 3)
    np.testing.assert_array_equal(scales3.reshape(6), scales)
    # the rows of the fused ops' h
    xs = heavy_tailed((4, 128), seed=11)
    _, _, silu_scales = silu_and_mul_quantize_nvfp4(xs, "dynamic_per_row")
    np.testing.assert_array_equal(silu_scales, [global_scale(hi) for hi in silu_and_mul(xs)])
    w = heavy_tailed((128,), seed=12)
    _, _, rms_scales = rms_norm_quantize_nvfp4(xs, w, "dynamic_per_row")
    np.testing.assert_array_equal(rms_scales, [global_scale(hi) for hi in rms_norm(xs, w)])


def test_dynamic_is_the_global_scale_of_h():
    x = heavy_tailed((7, 96), seed=13)
    q, sf, tsf = silu_and_mul_quantize_nvfp4(x, "dynamic")
    h = silu_and_mul(x)
    assert isinstance(tsf, np.float32) and tsf == global_scale(h)
    assert_outputs_equal((q, sf), quantize_nvfp4(h, tsf))


# ------------------------------------------------------------------------------ 8x4 layout


def flashinfer_8x4_offset(row_idx, col_idx, num_cols):
    """TensorRT-LLM/FlashInfer get_sf_out_offset_8x4 (csrc/nv_internal/tensorrt_llm/kernels/quantization.cuh),
    transcribed: SF layout [numMTiles, numKTiles, 8 (mTile), 4 (kTile)]."""
    inner_k, inner_m = col_idx % 4, row_idx % 8
    k_tile, m_tile = col_idx // 4, row_idx // 8
    num_k_tiles = (num_cols + 3) // 4
    return m_tile * (num_k_tiles * 32) + k_tile * 32 + inner_m * 4 + inner_k


@pytest.mark.parametrize("m", [1, 7, 8, 9, 17, 130])
@pytest.mark.parametrize("groups", [1, 3, 4, 5, 9])
def test_8x4_layout_matches_flashinfer_and_pads_zero(m, groups):
    linear = np.random.default_rng(m * 31 + groups).integers(1, 256, (m, groups), dtype=np.uint8)
    tiled = swizzle_sf_8x4(linear)
    assert tiled.shape == (-(-m // 8), -(-groups // 4), 8, 4) and tiled.dtype == np.uint8
    # FlashInfer's buffer is (round_up(M, 8), round_up(G, 4)) bytes: the same bytes, another shape.
    assert tiled.size == (-(-m // 8) * 8) * (-(-groups // 4) * 4)
    flat = tiled.reshape(-1)
    mm, jj = np.meshgrid(np.arange(m), np.arange(groups), indexing="ij")
    offsets = flashinfer_8x4_offset(mm, jj, groups)
    np.testing.assert_array_equal(sf_8x4_offset(mm, jj, groups), offsets)
    np.testing.assert_array_equal(flat[offsets.ravel()], linear.ravel())
    padding = np.ones(flat.size, bool)
    padding[offsets.ravel()] = False
    assert not flat[padding].any()
    np.testing.assert_array_equal(unswizzle_groups_8x4(tiled, m, groups), linear)


@pytest.mark.parametrize(
    "m, j, groups, expected",
    [
        (0, 0, 1, 0),
        (0, 3, 5, 3),
        (1, 0, 5, 4),  # the next row of a tile is 4 bytes on
        (7, 3, 5, 31),  # last byte of the first tile
        (0, 4, 5, 32),  # the next 4-group tile of the same 8 rows
        (8, 0, 5, 64),  # the next 8 rows start after ceil(5/4) = 2 tiles
        (9, 4, 5, 100),  # (1 * 2 + 1) * 32 + 4
    ],
)
def test_8x4_offset_hand_values(m, j, groups, expected):
    assert sf_8x4_offset(m, j, groups) == expected


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_8x4_quantize_and_dequantize(fmt):
    x = heavy_tailed((3, 4, 160), seed=14)
    quantize = quantize_nvfp4 if fmt == "nvfp4" else quantize_mxfp4
    dequantize = dequantize_nvfp4 if fmt == "nvfp4" else dequantize_mxfp4
    args = (3.0,) if fmt == "nvfp4" else ()
    q, sf = quantize(x, *args, sf_layout="8x4")
    q_lin, sf_lin = quantize(x, *args, sf_layout="linear")
    assert sf.shape == sf_8x4_shape(12, 160, fmt)
    np.testing.assert_array_equal(q, q_lin)
    np.testing.assert_array_equal(unswizzle_sf_8x4(sf, 12, 160, fmt), sf_lin.reshape(12, -1))
    y = dequantize(q, sf, *args, sf_layout="8x4", dtype="float32")
    y_lin = dequantize(q_lin, sf_lin, *args, sf_layout="linear", dtype="float32")
    np.testing.assert_array_equal(y.view(np.uint32), y_lin.view(np.uint32))


def test_8x4_validation():
    with pytest.raises(ValueError, match=r"tiled must have shape \(1, 1, 8, 4\) for m=3, groups=2, got \(1, 1, 32, 4, 4\)"):
        unswizzle_groups_8x4(np.zeros((1, 1, 32, 4, 4), np.uint8), 3, 2)
    with pytest.raises(ValueError, match="j must satisfy 0 <= j < groups=4, got 4"):
        sf_8x4_offset(0, 4, 4)
    with pytest.raises(TypeError, match="linear must have dtype uint8"):
        swizzle_sf_8x4(np.zeros((2, 2), np.int8))


# ---------------------------------------------------------------------------- padded outputs


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("sf_layout", LAYOUTS)
def test_padded_outputs_are_zero_beyond_k(fmt, sf_layout):
    group = GROUP[fmt]
    x = heavy_tailed((9, 2 * group), seed=15)
    padded_k = 2 * group + 3 * group
    if fmt == "nvfp4":
        # a negative tensor scale gives 0x80 for a zero group by the formulas: padding is 0x00 anyway
        q, sf = quantize_nvfp4(x, -7.0, sf_layout, padded_k=padded_k)
        q0, sf0 = quantize_nvfp4(x, -7.0, "linear")
    else:
        q, sf = quantize_mxfp4(x, "rceil", sf_layout, padded_k=padded_k)
        q0, sf0 = quantize_mxfp4(x, "rceil", "linear")
    assert q.shape == (9, padded_k // 2)
    np.testing.assert_array_equal(q[:, : group], q0)
    assert not q[:, group:].any()
    sf_lin = to_linear(sf, 9, 5, sf_layout)
    np.testing.assert_array_equal(sf_lin[:, :2], sf0)
    assert not sf_lin[:, 2:].any()
    if sf_layout == "swizzled":
        assert sf.shape == block_shape(9, 5)
        assert np.count_nonzero(sf) == np.count_nonzero(sf0)  # every other byte is padding


def test_padded_hand_shapes_and_fused_ops():
    x = row([6, -3])[None]
    q, sf = quantize_nvfp4(x, 1.0, "linear", padded_k=48)
    np.testing.assert_array_equal(q, as_bytes([[0xD7] + [0] * 23]))
    np.testing.assert_array_equal(sf, as_bytes([[0x38, 0, 0]]))
    q, sf = quantize_nvfp4(x, 1.0, padded_k=16)  # padded_k == K changes nothing
    assert q.shape == (1, 8) and sf.shape == (1, 1, 32, 4, 4)
    xs = heavy_tailed((5, 64), seed=16)
    q, sf = silu_and_mul_quantize_nvfp4(xs, 1.0, "8x4", padded_k=64)
    assert q.shape == (5, 32) and not q[:, 16:].any() and sf.shape == (1, 1, 8, 4)


# ----------------------------------------------------------------------------- float32 input


def test_float32_input_is_quantized_exactly():
    # d = 1 (amax 6). 1.25 + 2**-20 is just above the 1/1.5 tie (code 3) and 1.75 - 2**-20 just below the
    # 1.5/2 tie (code 3, negative B); bf16 would round both onto the ties (codes 2 and C).
    x = row([6, 1.25 + 2.0**-20, -(1.75 - 2.0**-20), 2.0**-140], dtype=np.float32)[None]
    q, sf = quantize_nvfp4(x, 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x38]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes([0x37, 0x0B]))
    q, sf = quantize_mxfp4(np.tile(x, 2), sf_layout="linear")
    np.testing.assert_array_equal(q[0, :2], as_bytes([0x37, 0x0B]))
    assert global_scale(x) == np.float32(448)


def test_float32_fused_intermediate_is_not_rounded():
    x = np.random.default_rng(17).standard_normal((3, 128)).astype(np.float32)
    w = np.random.default_rng(18).standard_normal(64).astype(np.float32)
    h = silu_and_mul(x)
    assert h.dtype == np.float32
    assert_outputs_equal(silu_and_mul_quantize_nvfp4(x, 5.0), quantize_nvfp4(h, 5.0))
    assert_outputs_equal(rms_norm_quantize_nvfp4(x[:, :64], w, 5.0), quantize_nvfp4(rms_norm(x[:, :64], w), 5.0))


# -------------------------------------------------------------------------------- empty inputs


@pytest.mark.parametrize("shape", [(0, 64), (3, 0), (0, 0)])
@pytest.mark.parametrize("sf_layout", LAYOUTS)
def test_empty_inputs(shape, sf_layout):
    m, k = shape
    x = np.zeros(shape, BF)
    w = np.zeros(k, BF)
    layout_shape = {"linear": (m, k // 16), "swizzled": block_shape(m, k // 16), "8x4": (-(-m // 8), -(-k // 64), 8, 4)}
    for out in (quantize_nvfp4(x, 1.0, sf_layout), rms_norm_quantize_nvfp4(x, w, 1.0, sf_layout=sf_layout),
                silu_and_mul_quantize_nvfp4(np.zeros((m, 2 * k), BF), 1.0, sf_layout)):
        q, sf = out
        assert q.shape == (m, k // 2) and q.dtype == np.uint8
        assert sf.shape == layout_shape[sf_layout] and not sf.any()
    _, _, tsf = quantize_nvfp4(x, "dynamic", sf_layout)
    assert tsf == 1
    _, _, scales = silu_and_mul_quantize_nvfp4(np.zeros((m, 2 * k), BF), "dynamic_per_row", sf_layout)
    assert scales.shape == (m,) and (scales == 1).all()
    q, sf = rms_norm_quantize_mxfp4(np.zeros((m, 2 * k), BF), np.zeros(2 * k, BF), sf_layout=sf_layout)
    assert q.shape == (m, k)


# ------------------------------------------------------------------------------ bad arguments


@pytest.mark.parametrize(
    "tensor_sf, exc, message",
    [
        (np.ones(4, np.float64), TypeError,
         "tensor_sf must have dtype float32 as an array of one value per row, got float64"),
        (np.ones(3, np.float32), ValueError,
         "tensor_sf must have shape (M,) = (4,) or x.shape[:-1] = (2, 2) as an array of one value per row, got (3,)"),
        ("static", ValueError,
         "tensor_sf must be a Python float or a numpy float32 scalar, a float32 array of one value per row "
         "(shape (M,) or x.shape[:-1]), 'dynamic' or 'dynamic_per_row', got 'static'"),
        (None, TypeError,
         "tensor_sf must be a Python float or a numpy float32 scalar, a float32 array of one value per row "
         "(shape (M,) or x.shape[:-1]), 'dynamic' or 'dynamic_per_row', got None of type NoneType"),
    ],
)
def test_tensor_sf_validation(tensor_sf, exc, message):
    with pytest.raises(exc) as err:
        quantize_nvfp4(np.zeros((2, 2, 16), BF), tensor_sf)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "padded_k, exc, message",
    [
        (16.0, TypeError, "padded_k must be an int or None, got 16.0 of type float"),
        (True, TypeError, "padded_k must be an int or None, got True of type bool"),
        (16, ValueError, "padded_k must be >= K = 32, got 16"),
        (40, ValueError, "padded_k must be a multiple of 16, got 40"),
    ],
)
def test_padded_k_validation(padded_k, exc, message):
    with pytest.raises(exc) as err:
        quantize_nvfp4(np.zeros((2, 32), BF), 1.0, padded_k=padded_k)
    assert str(err.value) == message


def test_fused_shape_rules():
    with pytest.raises(ValueError) as err:
        silu_and_mul_quantize_nvfp4(np.zeros((2, 48), BF), 1.0)
    assert str(err.value) == "N = x.shape[-1] // 2 must be a multiple of 16, got 24"
    with pytest.raises(ValueError) as err:
        silu_and_mul_quantize_mxfp4(np.zeros((2, 96), BF))
    assert str(err.value) == "N = x.shape[-1] // 2 must be a multiple of 32, got 48"
    with pytest.raises(ValueError, match="x.shape\\[-1\\] = 2N must be even, got 65"):
        silu_and_mul_quantize_nvfp4(np.zeros((2, 65), BF), 1.0)
    with pytest.raises(ValueError) as err:
        rms_norm_quantize_mxfp4(np.zeros((2, 48), BF), np.zeros(48, BF))
    assert str(err.value) == "K must be a multiple of 32, got 48"
    with pytest.raises(ValueError, match="padded_k must be >= N = x.shape\\[-1\\] // 2 = 32, got 16"):
        silu_and_mul_quantize_nvfp4(np.zeros((2, 64), BF), 1.0, padded_k=16)
    with pytest.raises(ValueError, match="mode must be 'rceil' or 'floor', got 'ceil'"):
        rms_norm_quantize_mxfp4(np.zeros((2, 32), BF), np.zeros(32, BF), mode="ceil")


@pytest.mark.parametrize(
    "kwargs",
    [dict(tensor_sf="static"), dict(sf_layout="8x8"), dict(padded_k=8), dict(eps=-1.0),
     dict(weight=np.zeros(16, np.float16)), dict(tensor_sf=np.ones(5, np.float32))],
)
def test_bad_arguments_leave_the_residual_untouched(kwargs):
    residual = row([1, 2])[None]
    args = dict(weight=row([1] * 16), tensor_sf=1.0, eps=1e-6, sf_layout="linear", padded_k=None) | kwargs
    with pytest.raises((TypeError, ValueError)):
        rms_norm_quantize_nvfp4(row([3, 4])[None], args["weight"], args["tensor_sf"], args["eps"], residual,
                                args["sf_layout"], padded_k=args["padded_k"])
    np.testing.assert_array_equal(residual, row([1, 2])[None])
