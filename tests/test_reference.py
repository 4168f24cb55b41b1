"""The numpy reference (fp4q.reference) against NVFP4_SPEC.md, with hand-derived bytes.

Expected bytes below are worked out by hand from the spec; the comments show
the arithmetic. R6 = float32(1/6) = 0.16666667163..., so for the amax values
used here amax * R6 rounds to exactly amax / 6 in float32 (6*R6 -> 1.0,
3*R6 -> 0.5, 12*R6 -> 2.0, 9*R6 -> 1.5).
"""


import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4q.numerics.layouts import swizzled_sf_offset, unswizzle_sf
from fp4q.numerics.reference import (
    dequantize_mxfp4,
    dequantize_nvfp4,
    e2m1_decode,
    e2m1_encode,
    e4m3_decode,
    e4m3_encode,
    global_scale,
    quantize_mxfp4,
    quantize_nvfp4,
)

NAN_NEG = np.array(0xFFC00000, dtype=np.uint32).view(np.float32)[()]
NAN_PAYLOAD = np.array(0x7F800001, dtype=np.uint32).view(np.float32)[()]
E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def f32(*values):
    return np.array(values, dtype=np.float32)


def bf16(values, group=None):
    """bf16 array of exactly these values (asserts none is rounded), zero-padded to ``group``."""
    v = np.asarray(values, dtype=np.float64)
    if group is not None:
        v = np.concatenate([v, np.zeros(group - v.size)])
    out = v.astype(np.float32).astype(ml_dtypes.bfloat16)
    same = (out.astype(np.float64) == v) | (np.isnan(v) & np.isnan(out.astype(np.float64)))
    assert same.all(), "test value is not representable in bf16"
    return out


def as_bytes(values):
    return np.array(values, dtype=np.uint8)


def float_bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


# --------------------------------------------------------------------- e2m1


@pytest.mark.parametrize(
    "value, code",
    [(0.25, 0x0), (0.75, 0x2), (1.25, 0x2), (1.75, 0x4), (2.5, 0x4), (3.5, 0x6), (5.0, 0x6)],
)
def test_e2m1_ties_round_to_even(value, code):
    assert e2m1_encode(f32(value))[0] == code
    assert e2m1_encode(f32(-value))[0] == code | 0x8


# (tie, code just below it, code just above it)
TIES = [(0.25, 0, 1), (0.75, 1, 2), (1.25, 2, 3), (1.75, 3, 4), (2.5, 4, 5), (3.5, 5, 6), (5.0, 6, 7)]


@pytest.mark.parametrize("tie, below, above", TIES)
def test_e2m1_neighbours_of_ties(tie, below, above):
    t = np.float32(tie)
    lo = np.nextafter(t, np.float32(0))
    hi = np.nextafter(t, np.float32(np.inf))
    np.testing.assert_array_equal(e2m1_encode(f32(lo, hi)), as_bytes([below, above]))
    np.testing.assert_array_equal(e2m1_encode(f32(-lo, -hi)), as_bytes([below | 8, above | 8]))


def test_e2m1_grid_points():
    grid = f32(*E2M1_GRID)
    np.testing.assert_array_equal(e2m1_encode(grid), np.arange(8, dtype=np.uint8))
    np.testing.assert_array_equal(e2m1_encode(-grid), np.arange(8, 16, dtype=np.uint8))


def test_e2m1_saturates_above_six_and_inf():
    big = f32(np.nextafter(np.float32(6), np.float32(np.inf)), 6.5, 7, 1e30, np.finfo(np.float32).max, np.inf)
    np.testing.assert_array_equal(e2m1_encode(big), np.full(6, 0x7, np.uint8))
    np.testing.assert_array_equal(e2m1_encode(-big), np.full(6, 0xF, np.uint8))


def test_e2m1_negative_zero_is_0x8():
    np.testing.assert_array_equal(e2m1_encode(f32(0.0, -0.0)), as_bytes([0x0, 0x8]))


def test_e2m1_small_negative_rounds_to_0x8():
    small = f32(-0.25, -0.1, -1e-30, -(2.0**-149))
    np.testing.assert_array_equal(e2m1_encode(small), np.full(4, 0x8, np.uint8))


def test_e2m1_nan_is_0x7_for_either_sign_bit():
    np.testing.assert_array_equal(e2m1_encode(f32(np.nan, NAN_NEG, NAN_PAYLOAD)), np.full(3, 0x7, np.uint8))


def test_e2m1_decode():
    values = e2m1_decode(np.arange(16, dtype=np.uint8))
    assert values.dtype == np.float32
    np.testing.assert_array_equal(values[:8], f32(*E2M1_GRID))
    np.testing.assert_array_equal(values[8:], -f32(*E2M1_GRID))
    assert np.signbit(values[8])


def test_e2m1_rejects_bad_input():
    with pytest.raises(TypeError, match="v must have dtype float32, got float64"):
        e2m1_encode(np.array([1.0]))
    with pytest.raises(ValueError, match="codes must be E2M1 codes in 0..15, got 16"):
        e2m1_decode(as_bytes([16]))


# --------------------------------------------------------------------- e4m3


@pytest.mark.parametrize("value", [448, 449, 464, 479, 480, 1e30, np.finfo(np.float32).max, np.inf])
def test_e4m3_saturates_to_448(value):
    np.testing.assert_array_equal(e4m3_encode(f32(value, -value)), as_bytes([0x7E, 0xFE]))


def test_e4m3_nan_is_0x7f():
    np.testing.assert_array_equal(e4m3_encode(f32(np.nan, NAN_NEG, NAN_PAYLOAD)), np.full(3, 0x7F, np.uint8))


@pytest.mark.parametrize(
    "value, byte",
    [
        (2.0**-9, 0x01),  # smallest subnormal
        (2.0**-10, 0x00),  # tie between 0 and 2**-9: even is 0
        (np.nextafter(np.float32(2.0**-10), np.float32(1)), 0x01),
        (1.5 * 2.0**-10, 0x01),
        (3 * 2.0**-10, 0x02),  # 1.5 steps: tie between 1 and 2, even is 2
        (5 * 2.0**-10, 0x02),  # 2.5 steps: tie between 2 and 3
        (7 * 2.0**-9, 0x07),  # largest subnormal
        (7.5 * 2.0**-9, 0x08),  # tie between 0x07 and 2**-6 (0x08)
        (2.0**-6, 0x08),  # smallest normal
        (2.0**-149, 0x00),  # float32 subnormal input
    ],
)
def test_e4m3_subnormals(value, byte):
    np.testing.assert_array_equal(e4m3_encode(f32(value, -value)), as_bytes([byte, byte | 0x80]))


@pytest.mark.parametrize(
    "value, byte",
    [
        (1.0, 0x38),  # exponent field 7, mantissa 0
        (1.0625, 0x38),  # tie between 1 (mantissa 0) and 1.125 (mantissa 1)
        (np.nextafter(np.float32(1.0625), np.float32(2)), 0x39),
        (1.1875, 0x3A),  # tie between 1.125 (1) and 1.25 (2)
        (1.9375, 0x40),  # tie between 1.875 (7) and 2.0: carries into the exponent
        (0.5, 0x30),
        (240, 0x77),
        (400, 0x7C),  # tie between 384 (4) and 416 (5)
        (432, 0x7E),  # tie between 416 (5) and 448 (6)
        (447.9, 0x7E),
    ],
)
def test_e4m3_normals_and_ties(value, byte):
    np.testing.assert_array_equal(e4m3_encode(f32(value, -value)), as_bytes([byte, byte | 0x80]))


def test_e4m3_signed_zero_and_negative():
    np.testing.assert_array_equal(
        e4m3_encode(f32(0.0, -0.0, -(2.0**-11), -1.0, -np.inf)), as_bytes([0x00, 0x80, 0x80, 0xB8, 0xFE])
    )


def test_e4m3_decode():
    values = e4m3_decode(as_bytes([0x00, 0x01, 0x07, 0x08, 0x38, 0x39, 0x7E, 0x80, 0xB8, 0xFE]))
    assert values.dtype == np.float32
    np.testing.assert_array_equal(
        values, f32(0, 2.0**-9, 7 * 2.0**-9, 2.0**-6, 1, 1.125, 448, -0.0, -1, -448)
    )
    assert np.signbit(values[7])
    assert np.isnan(e4m3_decode(as_bytes([0x7F, 0xFF]))).all()


def test_e4m3_rejects_non_float32():
    with pytest.raises(TypeError, match="s must have dtype float32, got float64"):
        e4m3_encode(np.array([1.0]))


def _nearest_even_code(a, grid):
    """Index into sorted ``grid`` nearest to each ``a`` (all within range), ties to the even index."""
    hi = np.clip(np.searchsorted(grid, a), 1, len(grid) - 1)
    lo = hi - 1
    d_lo = a - grid[lo]
    d_hi = grid[hi] - a
    return np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))


def _all_bf16_patterns():
    return (np.arange(2**16, dtype=np.uint32) << 16).view(np.float32)


def test_e4m3_encode_matches_brute_force_on_every_bf16_value():
    normals = np.random.default_rng(0).standard_normal(50000).astype(np.float32)
    s = np.concatenate([_all_bf16_patterns(), normals])
    codes = np.arange(127)
    grid = np.where(codes < 8, codes * 2.0**-9, (8 + (codes & 7)) * 2.0 ** ((codes >> 3) - 10))
    with np.errstate(invalid="ignore"):  # the signaling NaNs among the patterns
        a = np.abs(s.astype(np.float64))
    finite = np.isfinite(a) & (a < 448)
    expected = np.full(s.shape, 0x7E)
    expected[finite] = _nearest_even_code(a[finite], grid)
    expected = expected | np.where(np.signbit(s), 0x80, 0)
    expected[np.isnan(s)] = 0x7F
    np.testing.assert_array_equal(e4m3_encode(s), expected.astype(np.uint8))


def test_e2m1_encode_matches_brute_force_on_every_bf16_value():
    uniform = np.random.default_rng(1).uniform(-8, 8, 50000).astype(np.float32)
    v = np.concatenate([_all_bf16_patterns(), uniform])
    with np.errstate(invalid="ignore"):
        a = np.abs(v.astype(np.float64))
    in_range = a <= 6
    expected = np.full(v.shape, 0x7)
    expected[in_range] = _nearest_even_code(a[in_range], np.array(E2M1_GRID))
    expected = expected | np.where(np.signbit(v), 0x8, 0)
    expected[np.isnan(v)] = 0x7
    np.testing.assert_array_equal(e2m1_encode(v), expected.astype(np.uint8))


# ------------------------------------------------------------ quantize_nvfp4


def quantize_linear(values, tensor_sf, group=16):
    return quantize_nvfp4(bf16(values, group)[None], tensor_sf, sf_layout="linear")


def test_scale_rounding_down_saturates_elements():
    # amax 6.25: s = 6.25 * R6 = 1.0416667 rounds down to e4m3 1.0 (0x38), so
    # d = inv = 1 and 6.25 itself lies above 6 and saturates.
    x = [6.25, -6.25, 5.0, 0.75, 1.0, -0.25]
    q, sf = quantize_linear(x, 1.0)
    np.testing.assert_array_equal(sf, as_bytes([[0x38]]))
    # codes 7, F, 6, 2, 2, 8, then zeros; low nibble first
    np.testing.assert_array_equal(q, as_bytes([[0xF7, 0x26, 0x82, 0, 0, 0, 0, 0]]))
    y = dequantize_nvfp4(q, sf, 1.0, sf_layout="linear", dtype="float32")
    assert y[0, 0] == 6.0 and y[0, 1] == -6.0


def test_scale_rounds_amax_times_r6_before_tensor_sf():
    # tsf 3, amax 6.25: amax * R6 = 1.04166669771 rounds up to 1.0416667461 (0x3F855556),
    # times 3 is 3.1250002384 = 3.125 + 2**-22 exactly, just above the 3.0/3.25
    # tie -> 3.25 (0x45). The other order, (3 * 6.25) * R6 = 3.1250000931,
    # rounds to 3.125 and would give 0x44.
    q, sf = quantize_linear([6.25, 2], 3.0)
    np.testing.assert_array_equal(sf, as_bytes([[0x45]]))
    # d = 3.25 * float32(1/3) ~ 1.0833, so 6.25 -> 5.77 (7) and 2 -> 1.85 (2.0, code 4)
    assert q[0, 0] == 0x47


@pytest.mark.parametrize(
    "x, tensor_sf, q0",
    [
        # s = 1000 * 1.0 saturates; d = 448 * float32(1/1000) ~ 0.448, inv ~ 2.232:
        # 6 -> 13.4 (7), 1 -> 2.23 (2.0, code 4), 0.5 -> 1.12 (1.0, code 2), 2 -> 4.46 (4.0, code 6), -6 -> F
        ([6, 1, 0.5, 2, -6], 1000.0, [0x47, 0x62, 0x0F, 0]),
        # s = 3072 / 6 = 512 saturates; d = 448, inv = 1/448:
        # 3072 -> 6.86 (7), 2048 -> 4.57 (code 6), 896 -> 2.0 (code 4), -1 -> -0.002 (8)
        ([3072, 2048, 896, -1], 1.0, [0x67, 0x84, 0, 0]),
    ],
)
def test_scale_saturates_at_448(x, tensor_sf, q0):
    q, sf = quantize_linear(x, tensor_sf)
    np.testing.assert_array_equal(sf, as_bytes([[0x7E]]))
    np.testing.assert_array_equal(q[0, :4], as_bytes(q0))


@pytest.mark.parametrize(
    "x, sf_byte, q0",
    [
        # amax 5*2**-9: s = 0.833 * 2**-9 -> 1 subnormal step (0x01), d = 2**-9, inv = 512:
        # 5 is the 4/6 tie (code 6), 1 (code 2), -1.5 (B), 0.25 tie (0), 0.75 tie (2)
        ([5 * 2.0**-9, 2.0**-9, -3 * 2.0**-10, 2.0**-11, 3 * 2.0**-11], 0x01, [0x26, 0x0B, 0x02]),
        # amax 9*2**-9: s = 1.5 * 2**-9 exactly, the 1/2 tie -> 0x02, d = 2**-8, inv = 256:
        # 9*2**-9 -> 4.5 (code 6), -2**-8 -> -1 (A), 2**-10 -> 0.25 tie (0)
        ([9 * 2.0**-9, -(2.0**-8), 2.0**-10], 0x02, [0xA6, 0x00, 0x00]),
    ],
)
def test_subnormal_e4m3_scale(x, sf_byte, q0):
    q, sf = quantize_linear(x, 1.0)
    np.testing.assert_array_equal(sf, as_bytes([[sf_byte]]))
    np.testing.assert_array_equal(q[0, :3], as_bytes(q0))


def test_all_zero_group():
    q, sf = quantize_linear([0.0], 1.0)
    np.testing.assert_array_equal(sf, as_bytes([[0]]))
    np.testing.assert_array_equal(q, np.zeros((1, 8), np.uint8))


def test_all_nan_group_has_zero_amax():
    # amax 0 -> sf 0 -> d 0 -> inv 0; NaN * 0 is NaN -> 0x7 in every nibble.
    x = np.full((1, 16), np.nan, dtype=ml_dtypes.bfloat16)
    q, sf = quantize_nvfp4(x, 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0]]))
    np.testing.assert_array_equal(q, np.full((1, 8), 0x77, np.uint8))


def test_nan_is_ignored_in_amax_and_encodes_as_0x7():
    # amax 3 -> s = 0.5 (0x30), inv = 2: NaN -> 7, 3 -> 6 (7), -1.5 -> -3 (D), 0.5 -> 1 (2)
    q, sf = quantize_linear([np.nan, 3, -1.5, 0.5], 1.0)
    np.testing.assert_array_equal(sf, as_bytes([[0x30]]))
    np.testing.assert_array_equal(q[0, :3], as_bytes([0x77, 0x2D, 0x00]))


def test_negative_nan_bits_encode_as_0x7():
    bits = np.zeros((1, 16), np.uint16)
    bits[0, :2] = [0xFFC0, 0x4040]  # -NaN, 3.0
    q, sf = quantize_nvfp4(bits, 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x30]]))
    assert q[0, 0] == 0x77


def test_inf_in_group_saturates_scale():
    # amax Inf -> s Inf -> 448 (0x7E), inv = 1/448: +-Inf -> 7/F, +-100 -> +-0.22 (0/8), 1 -> 0.
    # The second group (amax 6, sf 0x38) is unaffected.
    x = np.concatenate([bf16([np.inf, -np.inf, 100, -100, 1], 16), bf16([6, -3], 16)])[None]
    q, sf = quantize_nvfp4(x, 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x7E, 0x38]]))
    np.testing.assert_array_equal(q[0, :3], as_bytes([0xF7, 0x80, 0x00]))
    np.testing.assert_array_equal(q[0, 8], 0xD7)


def test_nibble_packing_order():
    # amax 6 -> d = 1; the values are codes 0..15 in order.
    x = E2M1_GRID + [-v for v in E2M1_GRID]
    q, sf = quantize_linear(x, 1.0)
    np.testing.assert_array_equal(sf, as_bytes([[0x38]]))
    np.testing.assert_array_equal(q, as_bytes([[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]]))


def test_swizzled_padding_is_zero():
    # all ones: s = R6 = 1.333 * 2**-3 -> 1.375 * 2**-3 = 0x23 for every real scale.
    m, groups = 129, 5
    x = np.ones((m, groups * 16), dtype=ml_dtypes.bfloat16)
    _, sf = quantize_nvfp4(x, 1.0)
    assert sf.shape == (2, 2, 32, 4, 4)
    flat = sf.reshape(-1)
    mm, jj = np.meshgrid(np.arange(m), np.arange(groups), indexing="ij")
    used = np.zeros(flat.size, bool)
    used[swizzled_sf_offset(mm, jj, groups).ravel()] = True
    assert np.all(flat[used] == 0x23)
    assert np.all(flat[~used] == 0)


def random_bf16(shape, seed, scale=1.0):
    x = np.random.default_rng(seed).standard_normal(shape) * scale
    return x.astype(np.float32).astype(ml_dtypes.bfloat16)


def test_linear_and_swizzled_agree():
    x = random_bf16((300, 7 * 16), seed=3)
    q_lin, sf_lin = quantize_nvfp4(x, 100.0, sf_layout="linear")
    q_sw, sf_sw = quantize_nvfp4(x, 100.0)
    np.testing.assert_array_equal(q_lin, q_sw)
    np.testing.assert_array_equal(unswizzle_sf(sf_sw, 300, 7 * 16), sf_lin)


def test_leading_dims_flatten_to_rows():
    x = random_bf16((2, 3, 70, 64), seed=4)
    q, sf = quantize_nvfp4(x, 50.0, sf_layout="linear")
    q2, sf2 = quantize_nvfp4(x.reshape(420, 64), 50.0, sf_layout="linear")
    assert q.shape == (2, 3, 70, 32) and sf.shape == (2, 3, 70, 4)
    np.testing.assert_array_equal(q.reshape(420, 32), q2)
    np.testing.assert_array_equal(sf.reshape(420, 4), sf2)
    _, sf_sw = quantize_nvfp4(x, 50.0)
    assert sf_sw.shape == (4, 1, 32, 4, 4)
    np.testing.assert_array_equal(unswizzle_sf(sf_sw, 420, 64), sf2)


def test_rank_one_input_is_one_row():
    q, sf = quantize_nvfp4(bf16([6, 1], 32), 1.0, sf_layout="linear")
    assert q.shape == (16,) and sf.shape == (2,)
    _, sf_sw = quantize_nvfp4(bf16([6, 1], 32), 1.0)
    assert sf_sw.shape == (1, 1, 32, 4, 4) and sf_sw[0, 0, 0, 0, 0] == 0x38


@pytest.mark.parametrize(
    "shape, q_shape, lin_shape, sw_shape",
    [
        ((0, 32), (0, 16), (0, 2), (0, 1, 32, 4, 4)),
        ((2, 0, 32), (2, 0, 16), (2, 0, 2), (0, 1, 32, 4, 4)),
        ((5, 0), (5, 0), (5, 0), (1, 0, 32, 4, 4)),
        ((0, 0), (0, 0), (0, 0), (0, 0, 32, 4, 4)),
    ],
)
def test_empty_inputs(shape, q_shape, lin_shape, sw_shape):
    x = np.zeros(shape, dtype=ml_dtypes.bfloat16)
    q, sf = quantize_nvfp4(x, 1.0, sf_layout="linear")
    assert q.shape == q_shape and q.dtype == np.uint8
    assert sf.shape == lin_shape and sf.dtype == np.uint8
    _, sf_sw = quantize_nvfp4(x, 1.0)
    assert sf_sw.shape == sw_shape
    y = dequantize_nvfp4(q, sf, 1.0, sf_layout="linear", dtype="float32")
    assert y.shape == shape


def test_fp16_input_is_converted_exactly():
    # d = 1 (amax 6). 1.25 + 2**-10 is just above the 1/1.5 tie (code 3) and
    # 1.75 - 2**-10 just below the 1.5/2 tie (code 3, negative B); bf16 would
    # have rounded them onto the ties. 2**-24 is an fp16 subnormal (code 0).
    x = np.zeros((1, 16), np.float16)
    x[0, :4] = [6, 1.25 + 2**-10, 2**-24, -(1.75 - 2**-10)]
    assert x[0, 1] == 1.25 + 2**-10 and x[0, 2] == 2**-24
    q, sf = quantize_nvfp4(x, 1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x38]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes([0x37, 0xB0]))


@pytest.mark.parametrize("tensor_sf", [1.0, 2.0**-20, 448.0])
def test_uint16_bits_equal_bfloat16(tensor_sf):
    bits = np.arange(2**16, dtype=np.uint16).reshape(4096, 16)
    q_bits, sf_bits = quantize_nvfp4(bits, tensor_sf)
    q_bf, sf_bf = quantize_nvfp4(bits.view(ml_dtypes.bfloat16), tensor_sf)
    np.testing.assert_array_equal(q_bits, q_bf)
    np.testing.assert_array_equal(sf_bits, sf_bf)


DTYPE_RULE = "bfloat16, uint16 (bf16 bits), float16 or float32"


@pytest.mark.parametrize(
    "x, exc, message",
    [
        (np.zeros((2, 16), np.float64), TypeError, f"x must have dtype {DTYPE_RULE}, got float64"),
        (np.zeros((2, 16), np.int16), TypeError, f"x must have dtype {DTYPE_RULE}, got int16"),
        ([[0.0] * 16], TypeError, f"x must be a numpy array of {DTYPE_RULE}, got builtins.list"),
        (
            np.zeros((), ml_dtypes.bfloat16),
            ValueError,
            "x must have rank >= 1 (shape (..., K)), got shape ()",
        ),
        (np.zeros((2, 1000), ml_dtypes.bfloat16), ValueError, "K must be a multiple of 16, got 1000"),
    ],
)
def test_quantize_validation(x, exc, message):
    with pytest.raises(exc) as err:
        quantize_nvfp4(x, 1.0)
    assert str(err.value) == message


def test_quantize_argument_validation():
    x = np.zeros((2, 16), ml_dtypes.bfloat16)
    with pytest.raises(ValueError) as err:
        quantize_nvfp4(x, 1.0, sf_layout="foo")
    assert str(err.value) == "sf_layout must be one of 'swizzled', 'linear', '8x4', got 'foo'"
    with pytest.raises(ValueError, match="tensor_sf must be a Python float or a numpy float32 scalar"):
        quantize_nvfp4(x, "1.0")
    with pytest.raises(TypeError, match="tensor_sf must be"):
        quantize_nvfp4(x, True)


def test_tensor_sf_is_rounded_to_float32_first():
    x = random_bf16((4, 64), seed=5, scale=3)
    expected = quantize_nvfp4(x, np.float32(1 / 3))
    for tsf in (1 / 3, np.float64(1 / 3), np.array(1 / 3, np.float32)):
        got = quantize_nvfp4(x, tsf)
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])


def test_negative_tensor_sf_follows_the_formulas():
    # s = -1 * 1.0 -> 0xB8; r = -1, d = -1 * -1 = 1: codes as for tsf 1.
    # Zero group: s = -1 * 0 = -0 -> 0x80, d = -0 * -1 = +0, inv 0, q 0.
    x = np.concatenate([bf16([6, -3, 1], 16), bf16([], 16)])[None]
    q, sf = quantize_nvfp4(x, -1.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0xB8, 0x80]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes([0xD7, 0x02]))
    assert not q[0, 2:].any()
    y = dequantize_nvfp4(q, sf, -1.0, sf_layout="linear", dtype="float32")
    np.testing.assert_array_equal(y[0, :3], f32(6, -3, 1))


def test_nan_tensor_sf_gives_nan_scales_and_codes():
    q, sf = quantize_nvfp4(random_bf16((3, 32), seed=6), np.nan, sf_layout="linear")
    assert (sf == 0x7F).all() and (q == 0x77).all()


def test_zero_tensor_sf_follows_the_formulas():
    # s = 0 * amax/6 = 0 -> 0x00, r = 1/0 = Inf, d = 0 * Inf = NaN, so every code is 0x7.
    # With amax Inf, s = 0 * Inf = NaN -> 0x7F.
    x = np.concatenate([bf16([6, -1], 16), bf16([np.inf], 16)])[None]
    q, sf = quantize_nvfp4(x, 0.0, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x00, 0x7F]]))
    assert (q == 0x77).all()


def test_inf_tensor_sf_follows_the_formulas():
    # amax 6: s = Inf -> 0x7E, r = 0, d = 0, inv = 0: q = x * 0 keeps the sign (0 / 8).
    # Zero group: s = Inf * 0 = NaN -> 0x7F, d NaN, q 0x7.
    x = np.concatenate([bf16([6, -1], 16), bf16([], 16)])[None]
    q, sf = quantize_nvfp4(x, np.inf, sf_layout="linear")
    np.testing.assert_array_equal(sf, as_bytes([[0x7E, 0x7F]]))
    np.testing.assert_array_equal(q[0, :8], as_bytes([0x80] + [0] * 7))
    assert (q[0, 8:] == 0x77).all()


def test_subnormal_tensor_sf_follows_the_formulas():
    # tsf 2**-140: s = 2**-140 -> 0x00, r = 2**140 overflows to Inf, d = 0 * Inf = NaN.
    q, sf = quantize_linear([6, 1], np.float32(2.0**-140))
    np.testing.assert_array_equal(sf, as_bytes([[0x00]]))
    assert (q == 0x77).all()


# ---------------------------------------------------------- dequantize_nvfp4

# e2m1 values 0..6 times d = float32(1/3), rounded to float32 (see the test).
THIRDS_F32 = [0x00000000, 0x3E2AAAAB, 0x3EAAAAAB, 0x3F000000, 0x3F2AAAAB, 0x3F800000, 0x3FAAAAAB, 0x40000000]
THIRDS_BF16 = [0x0000, 0x3E2B, 0x3EAB, 0x3F00, 0x3F2B, 0x3F80, 0x3FAB, 0x4000]


def test_dequantize_float32_and_bfloat16():
    # sf 0x38 (1.0), tensor_sf 3: d = 1.0 * float32(1/3) = 11184811 * 2**-25.
    # 1.5 d = 16777216.5 * 2**-25 -> 0.5 (tie to even); 3 d = 33554433 * 2**-25 -> 1.0;
    # 6 d = 67108866 * 2**-25 -> 2.0; 0.5 d, d, 2 d, 4 d are exact.
    # bf16: 0x3EAAAAAB -> 0x3EAB (low half 0xAAAB > 0x8000 rounds up).
    q = as_bytes([[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]])
    sf = as_bytes([[0x38]])
    y = dequantize_nvfp4(q, sf, 3.0, sf_layout="linear", dtype="float32")
    assert y.dtype == np.float32 and y.shape == (1, 16)
    expected = np.array(THIRDS_F32 + [b | 0x80000000 for b in THIRDS_F32], np.uint32)
    np.testing.assert_array_equal(float_bits(y)[0], expected)
    yb = dequantize_nvfp4(q, sf, 3.0, sf_layout="linear", dtype="bfloat16")
    assert yb.dtype == np.uint16  # bf16 bits, as the kernels return them
    expected_b = np.array(THIRDS_BF16 + [b | 0x8000 for b in THIRDS_BF16], np.uint16)
    np.testing.assert_array_equal(yb[0], expected_b)
    # bfloat16 is the default, as for the device functions.
    import inspect

    import fp4q

    np.testing.assert_array_equal(dequantize_nvfp4(q, sf, 3.0, sf_layout="linear"), yb)
    q32 = np.zeros((1, 16), np.uint8)
    for dequantize, args in ((dequantize_nvfp4, (q, sf, 3.0)), (dequantize_mxfp4, (q32, as_bytes([[0x7F]])))):
        assert dequantize(*args, sf_layout="linear").dtype == np.uint16
        device_default = inspect.signature(getattr(fp4q, dequantize.__name__)).parameters["dtype"].default
        assert inspect.signature(dequantize).parameters["dtype"].default == device_default == "bfloat16"


def test_dequantize_swizzled_matches_linear():
    x = random_bf16((2, 130, 96), seed=7)
    q, sf_lin = quantize_nvfp4(x, 20.0, sf_layout="linear")
    _, sf_sw = quantize_nvfp4(x, 20.0)
    y_lin = dequantize_nvfp4(q, sf_lin, 20.0, sf_layout="linear", dtype="float32")
    y_sw = dequantize_nvfp4(q, sf_sw, 20.0, dtype="float32")
    assert y_sw.shape == (2, 130, 96)
    np.testing.assert_array_equal(float_bits(y_lin), float_bits(y_sw))


@pytest.mark.parametrize("exponent", [-100, -30, 0, 30, 100])
@pytest.mark.parametrize("use_global_scale", [True, False])
def test_quantize_dequantize_quantize_is_stable(exponent, use_global_scale):
    # With normal e4m3 scales, amax/d lies in [5.65, 6.4], so every group's
    # largest code is 6.0 and y = 6 d (1 +- 2**-9 in bf16) maps back to the same
    # scale; every other y/d is a grid value within 2**-8 relative, far from a tie.
    x = random_bf16((64, 256), seed=8, scale=2.0**exponent)
    tsf = global_scale(x) if use_global_scale else np.float32(2.0**-exponent)
    q, sf = quantize_nvfp4(x, tsf)
    y = dequantize_nvfp4(q, sf, tsf, dtype="bfloat16")
    q2, sf2 = quantize_nvfp4(y, tsf)
    np.testing.assert_array_equal(sf2, sf)
    np.testing.assert_array_equal(q2, q)


def test_dequantize_validation():
    q = np.zeros((2, 8), np.uint8)
    with pytest.raises(ValueError) as err:
        dequantize_nvfp4(np.zeros((2, 12), np.uint8), np.zeros((2, 1), np.uint8), 1.0, sf_layout="linear")
    assert str(err.value) == "K = 2 * q.shape[-1] must be a multiple of 16, got 24"
    with pytest.raises(ValueError) as err:
        dequantize_nvfp4(q, np.zeros((2, 2), np.uint8), 1.0, sf_layout="linear")
    assert str(err.value) == (
        "sf must have shape q.shape[:-1] + (G,) = (2, 1) for sf_layout='linear', got (2, 2)"
    )
    with pytest.raises(ValueError, match=r"swizzled must have shape \(1, 1, 32, 4, 4\) for m=2, groups=1"):
        dequantize_nvfp4(q, np.zeros((2, 1, 32, 4, 4), np.uint8), 1.0)
    with pytest.raises(ValueError, match="dtype must be 'bfloat16' or 'float32', got 'float16'"):
        dequantize_nvfp4(q, np.zeros((1, 1, 32, 4, 4), np.uint8), 1.0, dtype="float16")
    with pytest.raises(TypeError, match="q must have dtype uint8, got int8"):
        dequantize_nvfp4(q.astype(np.int8), np.zeros((1, 1, 32, 4, 4), np.uint8), 1.0)
    with pytest.raises(TypeError, match="sf must have dtype uint8, got float32"):
        dequantize_nvfp4(q, np.zeros((2, 1), np.float32), 1.0, sf_layout="linear")


# -------------------------------------------------------------- global_scale


@pytest.mark.parametrize(
    "values, expected",
    [
        ([6, -1], np.float32(448)),
        ([-7, 1], np.float32(384)),
        ([3, np.nan], np.float32(896)),
        # 2688 / 5 = 537.6: 10 integer bits leave 14 fraction bits, 0.6 * 2**14 = 9830.4 -> 9830
        ([5], np.float32(537 + 9830 / 2**14)),
        ([0, -0.0], np.float32(1)),
        ([np.nan, np.nan], np.float32(1)),
        ([np.inf, 1], np.float32(1)),
        ([-np.inf], np.float32(1)),
        ([2.0**-133], np.float32(2.0**100)),  # 2688 / amax overflows to Inf
        ([2.0**-100], np.float32(2.0**100)),  # 2688 * 2**100 > 2**100
    ],
)
def test_global_scale(values, expected):
    result = global_scale(bf16(values))
    assert isinstance(result, np.float32)
    assert float_bits(result) == float_bits(expected)


def test_global_scale_of_empty_is_one():
    assert global_scale(np.zeros((0, 16), ml_dtypes.bfloat16)) == np.float32(1)


# -------------------------------------------------------------------- MXFP4


def mx_linear(values, mode):
    return quantize_mxfp4(bf16(values, 32)[None], mode=mode, sf_layout="linear")


@pytest.mark.parametrize(
    "values, mode, sf_byte, q0",
    [
        # amax 6: floor(log2 6) - 2 = 0; t = 6 * R6 = 1.0 -> e = 0. Scale 1: 6 (7), 1 (2), -0.5 (9).
        ([6, 1, -0.5], "floor", 0x7F, [0x27, 0x09]),
        ([6, 1, -0.5], "rceil", 0x7F, [0x27, 0x09]),
        # amax 7: floor e = 0, 7 saturates (7), 1.5 (3), 0.25 tie (0);
        # rceil t = 1.167 -> e = 1, scale 0.5: 3.5 tie -> 4 (6), 0.75 tie -> 1 (2), 0.125 (0).
        ([7, 1.5, 0.25], "floor", 0x7F, [0x37, 0x00]),
        ([7, 1.5, 0.25], "rceil", 0x80, [0x26, 0x00]),
        # amax 12: floor(log2 12) - 2 = 1; t = 12 * R6 = 2.0 exactly -> e = 1. 12 * 0.5 = 6 (7).
        ([12], "floor", 0x80, [0x07, 0x00]),
        ([12], "rceil", 0x80, [0x07, 0x00]),
        # amax 12.0625: floor e = 1 (12.0625 * 0.5 = 6.03 saturates to 7);
        # rceil t = 2.0104 -> e = 2 (12.0625 * 0.25 = 3.02 -> 3, code 5).
        ([12.0625], "floor", 0x80, [0x07, 0x00]),
        ([12.0625], "rceil", 0x81, [0x05, 0x00]),
        # amax 0 -> 0x00 (e = -127), zeros stay zero.
        ([0.0], "floor", 0x00, [0x00, 0x00]),
        ([0.0], "rceil", 0x00, [0x00, 0x00]),
        # amax Inf -> e = 127 (0xFE), scale 2**-127: Inf (7), -Inf (F), 1 (0), -1 (8).
        ([np.inf, -np.inf, 1, -1], "floor", 0xFE, [0xF7, 0x80]),
        ([np.inf, -np.inf, 1, -1], "rceil", 0xFE, [0xF7, 0x80]),
        # subnormal amax 2**-130: both e far below -127, clamped (0x00); x * 2**127 = 0.125 (0).
        ([2.0**-130], "floor", 0x00, [0x00, 0x00]),
        ([2.0**-130], "rceil", 0x00, [0x00, 0x00]),
        # amax 5 * 2**-126: floor(log2) = -124 -> e = -126; t = 0.833 * 2**-126 is a float32
        # subnormal and 2**-126 is the smallest power >= t -> e = -126. x * 2**126 = 5: tie -> 4 (6).
        ([5 * 2.0**-126], "floor", 0x01, [0x06, 0x00]),
        ([5 * 2.0**-126], "rceil", 0x01, [0x06, 0x00]),
    ],
)
def test_mxfp4_scale_and_codes(values, mode, sf_byte, q0):
    q, sf = mx_linear(values, mode)
    np.testing.assert_array_equal(sf, as_bytes([[sf_byte]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes(q0))
    assert not q[0, 2:].any()


def test_mxfp4_nan_is_ignored_in_amax():
    q, sf = mx_linear([np.nan, 6, 1], "rceil")
    np.testing.assert_array_equal(sf, as_bytes([[0x7F]]))
    np.testing.assert_array_equal(q[0, :2], as_bytes([0x77, 0x02]))


def test_mxfp4_validation():
    x = np.zeros((2, 48), ml_dtypes.bfloat16)
    with pytest.raises(ValueError) as err:
        quantize_mxfp4(x)
    assert str(err.value) == "K must be a multiple of 32, got 48"
    with pytest.raises(ValueError) as err:
        quantize_mxfp4(np.zeros((2, 32), ml_dtypes.bfloat16), mode="ceil")
    assert str(err.value) == "mode must be 'rceil' or 'floor', got 'ceil'"
    with pytest.raises(ValueError, match="sf_layout must be one of 'swizzled', 'linear', '8x4', got 'row'"):
        quantize_mxfp4(np.zeros((2, 32), ml_dtypes.bfloat16), sf_layout="row")
    with pytest.raises(ValueError, match="K = 2 \\* q.shape\\[-1\\] must be a multiple of 32, got 16"):
        dequantize_mxfp4(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), sf_layout="linear")


def test_dequantize_mxfp4_hand_values():
    # codes 7 (6) and 1 (0.5) under e = 1, -127, 127 and the e8m0 NaN byte.
    q = np.zeros((4, 16), np.uint8)
    q[:, 0] = 0x17
    sf = as_bytes([[0x80], [0x00], [0xFE], [0xFF]])
    y = dequantize_mxfp4(q, sf, sf_layout="linear", dtype="float32")
    np.testing.assert_array_equal(y[0, :2], f32(12, 1))
    np.testing.assert_array_equal(y[1, :2], f32(1.5 * 2.0**-125, 2.0**-128))  # the latter a float32 subnormal
    np.testing.assert_array_equal(y[2, :2], f32(np.inf, 2.0**126))  # 6 * 2**127 overflows
    assert np.isnan(y[3, :2]).all()
    assert not y[:3, 2:].any()


@pytest.mark.parametrize("mode", ["floor", "rceil"])
def test_mxfp4_swizzled_matches_linear_and_round_trips(mode):
    x = random_bf16((3, 50, 160), seed=9, scale=100)
    q, sf_lin = quantize_mxfp4(x, mode=mode, sf_layout="linear")
    q_sw, sf_sw = quantize_mxfp4(x, mode=mode)
    assert q.shape == (3, 50, 80) and sf_lin.shape == (3, 50, 5) and sf_sw.shape == (2, 2, 32, 4, 4)
    np.testing.assert_array_equal(q, q_sw)
    np.testing.assert_array_equal(unswizzle_sf(sf_sw, 150, 160, "mxfp4"), sf_lin.reshape(150, 5))
    y = dequantize_mxfp4(q_sw, sf_sw, dtype="float32")
    np.testing.assert_array_equal(float_bits(y), float_bits(dequantize_mxfp4(q, sf_lin, sf_layout="linear", dtype="float32")))
    # a power-of-two scale makes dequantization exact: y / 2**e is the e2m1 value
    e = sf_lin.astype(np.int64) - 127
    grid = np.ldexp(1.0, -np.repeat(e, 32, axis=-1)) * y
    assert np.isin(np.abs(grid), E2M1_GRID).all()
    if mode == "floor":
        # floor scales put amax / 2**e in [4, 8), whose codes are 4 or 6, so
        # the largest element of each group maps back to the same e.
        q2, sf2 = quantize_mxfp4(y.astype(ml_dtypes.bfloat16), mode=mode, sf_layout="linear")
        np.testing.assert_array_equal(sf2, sf_lin)
        np.testing.assert_array_equal(q2, q)


# ------------------------------------------------------------------ large input


@pytest.mark.slow
def test_quantize_4096x7168_shapes():
    # Its time is reported by scripts/dev/compile_times.py.
    x = random_bf16((4096, 7168), seed=10, scale=3)
    q, sf = quantize_nvfp4(x, global_scale(x))
    assert q.shape == (4096, 3584) and sf.shape == (32, 112, 32, 4, 4)


# ---------------------------------------------------------------- properties


def _half_step(t):
    """Largest distance from |t| <= 6 to the nearest e2m1 grid value."""
    return np.where(t <= 2, 0.25, np.where(t <= 4, 0.5, 1.0))


@settings(derandomize=True, max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    exponent=st.integers(-60, 60),
    tsf_shift=st.integers(-14, 3),
)
def test_dequantize_error_bound(seed, exponent, tsf_shift):
    # Per-group magnitudes spread over 2**-6..2**6 so that one tensor has groups
    # with normal, subnormal and (tsf_shift > 0) saturated e4m3 scales.
    rng = np.random.default_rng(seed)
    spread = np.ldexp(1.0, rng.integers(-6, 7, size=(8, 4, 1)))
    x = (rng.standard_normal((8, 4, 16)) * spread * 2.0**exponent).reshape(8, 64)
    x = x.astype(np.float32).astype(ml_dtypes.bfloat16)
    tsf = np.float32(global_scale(x) * np.float32(2.0**tsf_shift))
    q, sf = quantize_nvfp4(x, tsf, sf_layout="linear")
    y = dequantize_nvfp4(q, sf, tsf, sf_layout="linear", dtype="float32").astype(np.float64).reshape(8, 4, 16)
    xf = x.astype(np.float64).reshape(8, 4, 16)
    d = (e4m3_decode(sf) * (np.float32(1) / tsf)).astype(np.float64)[..., None]

    zero = d == 0
    # d == 0 only when s <= 2**-10 (e4m3 zero); then inv = 0 and y = 0.
    assert np.all(np.where(zero, y, 0) == 0)
    amax = np.abs(xf).max(axis=-1, keepdims=True)
    assert np.all(~zero | (amax * tsf / 6 <= 2.0**-10 * (1 + 2.0**-20)))

    # Otherwise q = e2m1(t) with t = x * inv = (x / d)(1 + e), |e| <= 2**-23
    # (inv = 1/d and the product each round once). For |t| <= 6 rounding to
    # the grid moves t by at most half the grid step around it; above 6
    # (a scale that rounded down, or saturated at 448) it moves by |t| - 6.
    # So |y/d - x/d| <= half_step + max(|x/d| - 6, 0), each evaluated at
    # |x/d| (1 + 2**-20) to cover e, plus y's own float32 rounding (2**-24 |y|).
    u = np.where(zero, 0, np.abs(xf) / np.where(zero, 1, d))
    u_hi = u * (1 + 2.0**-20)
    grid_error = _half_step(np.minimum(u_hi, 6)) + np.maximum(u_hi - 6, 0)
    bound = d * grid_error + 2.0**-22 * (np.abs(xf) + np.abs(y))
    assert np.all(zero | (np.abs(y - xf) <= bound))

    # A normal, unsaturated e4m3 scale is within 2**-4 of s = tsf amax / 6,
    # so the largest |t| is at most 6 / (1 - 2**-4) = 6.4: saturation is mild.
    normal = (sf >= 0x08) & (sf < 0x7E)
    assert np.all(~normal[..., None] | (u <= 6.4 * (1 + 2.0**-20)))


bf16_magnitudes = st.floats(0, float(np.finfo(np.float32).max), width=32).map(
    lambda v: float(np.float32(v).astype(ml_dtypes.bfloat16))
)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(
    amaxes=st.lists(bf16_magnitudes | st.just(float("inf")), min_size=2, max_size=20),
    tsf=st.floats(2.0**-126, 2.0**100, width=32),
)
def test_scale_is_monotonic_in_amax(amaxes, tsf):
    amaxes = np.sort(np.array(amaxes, dtype=np.float64))
    x = np.zeros((len(amaxes), 32), np.float32)
    x[:, 0] = amaxes
    x = x.astype(ml_dtypes.bfloat16)
    _, sf = quantize_nvfp4(x, np.float32(tsf), sf_layout="linear")
    scales = e4m3_decode(sf[:, 0])
    assert np.all(np.diff(scales) >= 0)
    for mode in ("floor", "rceil"):
        _, sf_mx = quantize_mxfp4(x, mode=mode, sf_layout="linear")
        assert np.all(np.diff(sf_mx[:, 0].astype(np.int64)) >= 0)
