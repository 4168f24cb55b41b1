"""The training quantizers of the reference (fp4q.reference.quantize_nvfp4_training and
fake_quantize_nvfp4) against NVFP4_SPEC.md, "The project's exact sequences: training
quantizers": the columnwise layout, 2D blocks, stochastic rounding (statistically and
through the documented Philox mapping), the Hadamard transform of the columnwise
direction, 4/6, fake quantization and the argument rules.

Hand-derived bytes show their arithmetic; R6 = float32(1/6) maps an amax of 6 to
exactly 1.0, so a group with amax 6 and tensor_sf 1 has sf 0x38 and d = inv = 1.
"""

import dataclasses

import ml_dtypes
import numpy as np
import pytest
from helpers import edge_groups, mixed_groups

from fp4q.numerics.formats import (R6, e2m1_decode, e2m1_encode, e4m3_decode, e4m3_encode, input_float32,
                                   round_to, unpack_nibbles)
from fp4q.numerics import reference
from fp4q.numerics.layouts import unswizzle_sf
from fp4q.numerics.philox import group_random_words
from fp4q.numerics.reference import (
    NVFP4TrainingQuantized,
    TE_WGRAD_SIGN_MASK,
    dequantize_nvfp4,
    e2m1_encode_stochastic,
    fake_quantize_nvfp4,
    global_scale,
    hadamard16,
    quantize_nvfp4,
    quantize_nvfp4_training,
)


def bf16(values):
    """bf16 array of exactly these values (asserts none is rounded)."""
    v = np.asarray(values, dtype=np.float64)
    out = v.astype(np.float32).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out.astype(np.float64), v, equal_nan=True), "not representable in bf16"
    return out


def data(shape, seed, **kw):
    return mixed_groups(shape, np.random.default_rng(seed), **kw)


def codes_of(q):
    return unpack_nibbles(q)


def linear(x, tensor_sf, **kw):
    return quantize_nvfp4_training(x, tensor_sf, sf_layout="linear", **kw)


# ------------------------------------------------------------ columnwise


@pytest.mark.parametrize("layout", ["linear", "swizzled"])
def test_directions_equal_quantize_nvfp4_of_x_and_x_transposed(layout):
    x = data((96, 80), 1)
    r = quantize_nvfp4_training(x, 37.5, sf_layout=layout)
    q, sf = quantize_nvfp4(x, 37.5, sf_layout=layout)
    q_t, sf_t = quantize_nvfp4(np.ascontiguousarray(x.T), 37.5, sf_layout=layout)
    for got, want in ((r.q, q), (r.sf, sf), (r.q_t, q_t), (r.sf_t, sf_t)):
        assert got.dtype == np.uint8 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert r.q_t.shape == (80, 48) and r.tensor_sf == r.tensor_sf_t == np.float32(37.5)


def test_columnwise_layout_by_hand():
    # x (32, 16): column k holds the values of rows 0..31; groups of 16 rows. Column 0:
    # rows 0..15 = 6, 1, 0, ... (amax 6, sf 0x38, codes 7, 2), rows 16..31 = 3, -1.5 (amax 3,
    # s = 0.5 -> 0x30, inv 2: codes 7 (6), D (-3)).
    x = np.zeros((32, 16), np.float32)
    x[[0, 1, 16, 17], 0] = [6, 1, 3, -1.5]
    r = linear(bf16(x), 1.0)
    assert r.q_t.shape == (16, 16) and r.sf_t.shape == (16, 2)
    np.testing.assert_array_equal(r.q_t[0, [0, 8]], [0x27, 0xD7])  # element 2i low nibble
    np.testing.assert_array_equal(r.sf_t[0], [0x38, 0x30])
    assert not r.q_t[1:].any() and not r.sf_t[1:].any()


def test_columnwise_swizzle_is_over_k_rows():
    x = data((48, 160), 2)
    r = quantize_nvfp4_training(x, 10.0, rowwise=False)
    assert r.q is None and r.sf is None and r.tensor_sf is None
    assert r.sf_t.shape == (2, 1, 32, 4, 4)  # K = 160 rows, 48 // 16 = 3 groups
    np.testing.assert_array_equal(unswizzle_sf(r.sf_t, 160, 48), linear(x, 10.0).sf_t)


def test_leading_dimensions_flatten_for_both_directions():
    x = data((4 * 8, 64), 3).reshape(4, 8, 64)
    r = linear(x, 5.0)
    flat = linear(x.reshape(32, 64), 5.0)
    assert r.q.shape == (4, 8, 32) and r.sf.shape == (4, 8, 4)
    np.testing.assert_array_equal(r.q.reshape(32, 32), flat.q)
    np.testing.assert_array_equal(r.q_t, flat.q_t)


def test_columnwise_tensor_sf_is_its_own():
    x = data((32, 48), 4)
    r = linear(x, 3.0, columnwise_tensor_sf=200.0)
    np.testing.assert_array_equal(r.q, quantize_nvfp4(x, 3.0, sf_layout="linear")[0])
    np.testing.assert_array_equal(r.q_t, quantize_nvfp4(np.ascontiguousarray(x.T), 200.0, sf_layout="linear")[0])
    assert (r.tensor_sf, r.tensor_sf_t) == (np.float32(3), np.float32(200))


def test_dynamic_tensor_sf_is_global_scale_of_each_direction():
    x = data((64, 64), 5)
    r = linear(x, "dynamic")
    assert r.tensor_sf == r.tensor_sf_t == global_scale(x)
    assert isinstance(r.tensor_sf, np.float32)
    np.testing.assert_array_equal(r.q, quantize_nvfp4(x, global_scale(x), sf_layout="linear")[0])


@pytest.mark.parametrize("dtype", ["uint16", "float16"])
def test_other_input_dtypes(dtype):
    x = data((32, 32), 6)
    x = x if dtype == "uint16" else input_float32(x).astype(np.float16)
    r = linear(x, 2.0)
    np.testing.assert_array_equal(r.q_t, quantize_nvfp4(np.ascontiguousarray(x.T), 2.0, sf_layout="linear")[0])


def test_result_is_frozen():
    r = linear(data((16, 16), 7), 1.0)
    assert isinstance(r, NVFP4TrainingQuantized)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.q = None  # type: ignore[misc]


# ------------------------------------------------------------ 2D blocks


def test_2d_block_scale_by_hand():
    # Block (0, 0): amax 6 at (3, 5), so every row of it gets sf 0x38 (d = inv = 1); row 0
    # holds 1.5, which its own 1-D group (amax 1.5: s = 0.25 -> 0x28, inv 4) would quantize
    # to code 7 (6.0), but the block scale keeps it as 1.5 (code 3). Block (1, 0): amax 3,
    # s = 0.5 -> 0x30 for rows 16..31, and 3 -> 6 (code 7), 0.75 -> 1.5 (code 3).
    x = np.zeros((32, 16), np.float32)
    x[0, :] = 1.5
    x[3, 5] = 6
    x[20, 2], x[21, 9] = 3, 0.75
    r = linear(bf16(x), 1.0, block_2d=True)
    np.testing.assert_array_equal(r.sf, np.array([[0x38]] * 16 + [[0x30]] * 16, np.uint8))
    np.testing.assert_array_equal(codes_of(r.q)[0], np.full(16, 3))
    assert codes_of(r.q)[3, 5] == 7 and codes_of(r.q)[20, 2] == 7 and codes_of(r.q)[21, 9] == 3
    assert linear(bf16(x), 1.0).sf[0, 0] == 0x28 and codes_of(linear(bf16(x), 1.0).q)[0, 0] == 7
    np.testing.assert_array_equal(r.sf_t, np.tile([0x38, 0x30], (16, 1)).astype(np.uint8))


@pytest.mark.parametrize(
    "options",
    [{}, {"stochastic": True, "seed": 3, "offset": 9}, {"four_over_six": True},
     {"stochastic": True, "four_over_six": True, "seed": 2**63 + 5}],
)
def test_2d_columnwise_is_rowwise_transposed_byte_for_byte(options):
    x = data((64, 96), 8, edge_fraction=0.3)
    r = linear(x, "dynamic", block_2d=True, **options)
    np.testing.assert_array_equal(codes_of(r.q_t), codes_of(r.q).T)
    blocks = r.sf[::16]  # (M/16, K/16): one byte per block
    np.testing.assert_array_equal(r.sf, np.repeat(blocks, 16, axis=0))
    np.testing.assert_array_equal(r.sf_t, np.repeat(blocks.T, 16, axis=0))
    assert r.tensor_sf == r.tensor_sf_t
    swizzled = quantize_nvfp4_training(x, "dynamic", block_2d=True, **options)
    np.testing.assert_array_equal(unswizzle_sf(swizzled.sf_t, 96, 64), r.sf_t)
    np.testing.assert_array_equal(swizzled.q_t, r.q_t)


def test_2d_block_equals_quantizing_each_element_with_the_block_scale():
    x = data((32, 64), 9)
    xf = input_float32(x)
    tsf = np.float32(11.0)
    r = linear(x, tsf, block_2d=True)
    amax = np.fmax.reduce(np.abs(xf).reshape(2, 16, 4, 16), axis=(1, 3), initial=np.float32(0))
    with np.errstate(all="ignore"):  # groups with Inf and huge values saturate
        sf = e4m3_encode(tsf * (amax * R6))
        d = e4m3_decode(sf) * (np.float32(1) / tsf)
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
        codes = e2m1_encode(xf * np.repeat(np.repeat(inv, 16, 0), 16, 1))
    np.testing.assert_array_equal(codes_of(r.q), codes)
    np.testing.assert_array_equal(r.sf[::16], sf)


# ------------------------------------------------------- stochastic rounding

# One group, amax 6 (sf 1.0, d = inv = 1 with tensor_sf 1), every other value of the form
# sign * (lo + D / 256) * step, so that its stochastic rounding has mean exactly x:
# (value, step, D).
SR_GROUP = [(6.0, 2, 0), (0.25, 0.5, 128), (3 / 512, 0.5, 3), (-0.625, 0.5, 64), (1.375, 0.5, 192),
            (2.5, 1, 128), (-3.25, 1, 64), (4.5, 2, 64), (5.5, 2, 192), (-5.0, 2, 128), (1.0, 0.5, 0),
            (0.0, 0.5, 0), (0.75, 0.5, 128), (-1.75, 0.5, 128), (3.875, 1, 224), (1 / 128, 0.5, 4)]
SR_X = np.array([v for v, _, _ in SR_GROUP])
SR_SIGMA = np.array([s * np.sqrt(d / 256 * (1 - d / 256)) for _, s, d in SR_GROUP])
SR_ROWS = 40000


def _mean_rounding_error(mean, x, sigma, samples):
    """Largest |mean - x| in units of the 6-sigma tolerance of a sample mean (> 1 fails)."""
    tol = 6 * sigma / np.sqrt(samples) + 1e-12
    return float(np.max(np.abs(mean - x) / tol))


def test_stochastic_rounding_is_unbiased_rowwise():
    # SR_ROWS copies of the group, each row its own Philox block: SR_ROWS samples per element.
    x = np.tile(bf16(SR_X), (SR_ROWS, 1))
    r = linear(x, 1.0, columnwise=False, stochastic=True, seed=12345, offset=7)
    np.testing.assert_array_equal(r.sf, np.full((SR_ROWS, 1), 0x38, np.uint8))
    mean = e2m1_decode(codes_of(r.q)).astype(np.float64).mean(axis=0)
    assert _mean_rounding_error(mean, SR_X, SR_SIGMA, SR_ROWS) <= 1
    # The test can fail: round-to-nearest of the same group is biased far past the tolerance
    # (3/512 -> 0, 1/128 -> 0, 0.625 -> 0.5, ...).
    nearest = e2m1_decode(codes_of(linear(x[:1], 1.0, columnwise=False).q))[0]
    assert _mean_rounding_error(nearest.astype(np.float64), SR_X, SR_SIGMA, SR_ROWS) > 10


def test_stochastic_rounding_is_unbiased_columnwise_and_over_offsets():
    # Columnwise: each column of x is the group (x^T's rows), one Philox block per column.
    x = np.tile(bf16(SR_X)[:, None], (1, 4096))
    r = linear(x, 1.0, rowwise=False, stochastic=True, seed=99)
    mean = e2m1_decode(codes_of(r.q_t)).astype(np.float64).mean(axis=0)
    assert _mean_rounding_error(mean, SR_X, SR_SIGMA, 4096) <= 1
    # The same element over successive offsets: offsets give independent streams.
    one = bf16(SR_X)[None]
    samples = np.stack([codes_of(linear(one, 1.0, columnwise=False, stochastic=True, offset=o).q)[0]
                        for o in range(2000)])
    assert _mean_rounding_error(e2m1_decode(samples).astype(np.float64).mean(axis=0), SR_X, SR_SIGMA, 2000) <= 1
    nearest = e2m1_decode(codes_of(linear(one, 1.0, columnwise=False).q)[0]).astype(np.float64)
    assert _mean_rounding_error(nearest, SR_X, SR_SIGMA, 2000) > 1  # the check can fail


def test_stochastic_rounding_of_random_values_is_unbiased_up_to_eight_bits():
    # Any value: the mean is lo + step * D / 256 (D truncates the fraction to 8 bits), within
    # step / 256 below |x| in magnitude.
    rng = np.random.default_rng(11)
    group = bf16(np.concatenate([[6.0], rng.uniform(-5.9, 5.9, 15)]).astype(np.float32).astype(ml_dtypes.bfloat16))
    x = np.tile(group, (SR_ROWS, 1))
    r = linear(x, 1.0, columnwise=False, stochastic=True, seed=5)
    mean = e2m1_decode(codes_of(r.q)).astype(np.float64).mean(axis=0)
    g = input_float32(group).astype(np.float64)
    a = np.abs(g)
    step = np.where(a < 2, 0.5, np.where(a < 4, 1.0, 2.0))
    lo = np.floor(a / step)
    d = np.floor((a / step - lo) * 256)
    expected = np.sign(g) * (lo + d / 256) * step
    sigma = step * np.sqrt(d / 256 * (1 - d / 256))
    assert _mean_rounding_error(mean, expected, sigma, SR_ROWS) <= 1
    assert np.all(np.abs(expected - g) < step / 256)


def test_stochastic_rounding_is_deterministic_and_keyed():
    x = data((64, 128), 12)
    runs = [linear(x, "dynamic", stochastic=True, seed=s, offset=o) for s, o in [(1, 2), (1, 2), (2, 2), (1, 3)]]
    np.testing.assert_array_equal(runs[0].q, runs[1].q)
    np.testing.assert_array_equal(runs[0].q_t, runs[1].q_t)
    for other in runs[2:]:
        assert np.mean(other.q != runs[0].q) > 0.1 and np.mean(other.q_t != runs[0].q_t) > 0.1
        np.testing.assert_array_equal(other.sf, runs[0].sf)  # the scales do not depend on the bits


def test_rowwise_bits_depend_on_the_row_not_on_m():
    # g = m * (K / 16) + j: the first rows of a taller tensor get the same bits.
    x = data((64, 64), 13)
    full = linear(x, 40.0, columnwise=False, stochastic=True, seed=8)
    head = linear(x[:17], 40.0, columnwise=False, stochastic=True, seed=8)
    np.testing.assert_array_equal(head.q, full.q[:17])


def test_stochastic_codes_follow_the_philox_mapping():
    # Rebuild both directions from the public pieces: the spec's counter, four words per
    # group, one cvt.rs per four elements.
    x = data((32, 48), 14, edge_fraction=0.2)
    seed, offset, tsf = 2**40 + 3, 2**33 + 1, np.float32(25.0)
    r = linear(x, tsf, stochastic=True, seed=seed, offset=offset)
    for rows, q, sf, direction in ((input_float32(x), r.q, r.sf, "rowwise"),
                                   (input_float32(x).T, r.q_t, r.sf_t, "columnwise")):
        n, c = rows.shape
        d = e4m3_decode(sf) * (np.float32(1) / tsf)
        with np.errstate(all="ignore"):
            inv = np.repeat(np.where(d == 0, np.float32(0), np.float32(1) / d), 16, axis=1)
            scaled = (rows * inv).reshape(n * c // 16, 16)
        words = group_random_words(seed, offset, np.arange(n * c // 16, dtype=np.uint64), direction)
        np.testing.assert_array_equal(codes_of(q), e2m1_encode_stochastic(scaled, words).reshape(n, c))


def test_stochastic_rounding_stays_within_one_step_of_nearest():
    x = data((128, 128), 15, edge_fraction=0.2, tiny_fraction=0.2)
    sr = linear(x, "dynamic", stochastic=True, seed=21)
    rn = linear(x, "dynamic")
    np.testing.assert_array_equal(sr.sf, rn.sf)
    np.testing.assert_array_equal(sr.sf_t, rn.sf_t)
    for a, b in ((sr.q, rn.q), (sr.q_t, rn.q_t)):
        ca, cb = codes_of(a).astype(int), codes_of(b).astype(int)
        # same sign bit, magnitude codes at most one apart (adjacent e2m1 values), or the
        # signed zeros of a value that rounds to 0 either way
        both_zero = ((ca & 7) == 0) & ((cb & 7) == 0)
        assert np.all(((ca & 8) == (cb & 8)) | both_zero)
        assert np.all(np.abs((ca & 7) - (cb & 7)) <= 1)


# ---------------------------------------------------------- Hadamard (RHT)


@pytest.mark.parametrize("mask", [0, TE_WGRAD_SIGN_MASK, 0x0F0F])
def test_hadamard_applies_to_the_columnwise_direction_only(mask):
    # Integers in [-8, 8]: y = H16 (s v) / 4 are multiples of 0.25 below 32, exact in bf16,
    # so the columnwise output is quantize_nvfp4 of the transformed x^T.
    x = bf16(np.random.default_rng(mask).integers(-8, 9, (48, 32)))
    r = linear(x, "dynamic", hadamard=mask)
    yt = hadamard16(input_float32(x).T.copy(), mask)
    yt_bf16 = bf16(yt)
    np.testing.assert_array_equal(r.q_t, quantize_nvfp4(yt_bf16, global_scale(yt_bf16), sf_layout="linear")[0])
    np.testing.assert_array_equal(r.sf_t, quantize_nvfp4(yt_bf16, global_scale(yt_bf16), sf_layout="linear")[1])
    assert r.tensor_sf_t == global_scale(yt_bf16)  # post-RHT amax
    np.testing.assert_array_equal(r.q, quantize_nvfp4(x, global_scale(x), sf_layout="linear")[0])
    assert r.tensor_sf == global_scale(x)


def test_hadamard_values_are_not_rounded_to_bf16():
    # 1 + 2**-7 and 2**-9 are bf16; the transform's amax (1 + 2**-7 + 2**-9) / 4 needs 10
    # significant bits, which float32 keeps and bf16 would round to (1 + 2**-7) / 4: the
    # dynamic columnwise scale shows which one was used.
    x = np.zeros((16, 16), np.float32)
    x[0, 0], x[1, 0] = 1 + 2.0**-7, 2.0**-9
    r = linear(bf16(x), "dynamic", rowwise=False, hadamard=0)
    y_amax = np.float32((1 + 2.0**-7 + 2.0**-9) / 4)
    assert r.tensor_sf_t == np.float32(2688) / y_amax


def test_hadamard_combines_with_stochastic_rounding_and_four_over_six():
    x = data((64, 32), 16)
    base = linear(x, "dynamic", hadamard=TE_WGRAD_SIGN_MASK, stochastic=True, four_over_six=True, seed=4)
    again = linear(x, "dynamic", hadamard=TE_WGRAD_SIGN_MASK, stochastic=True, four_over_six=True, seed=4)
    np.testing.assert_array_equal(base.q_t, again.q_t)
    plain = linear(x, "dynamic", four_over_six=True, stochastic=True, seed=4)
    np.testing.assert_array_equal(base.q, plain.q)
    assert not np.array_equal(base.q_t, plain.q_t)


# ------------------------------------------------------------------ 4/6


def slow_four_over_six(block, tsf):
    """One block (rows x 16 float32, 1 row for a 1-D group) by the spec, scalar by scalar:
    the scale byte kept and the codes. Independent of the vectorized reference."""
    amax = np.float32(0)
    for v in block.ravel():
        amax = np.fmax(amax, np.abs(v))
    candidates = []
    for r in (R6, np.float32(0.25)):
        with np.errstate(all="ignore"):
            sf = e4m3_encode(np.array([tsf * (amax * r)], np.float32))[0]
            d = e4m3_decode(np.array([sf]))[0] * (np.float32(1) / tsf)
            inv = np.float32(0) if d == 0 else np.float32(1) / d
            codes = e2m1_encode((block * inv).astype(np.float32))
            total = np.float32(0)
            for row in range(block.shape[0]):
                row_sum = np.float32(0)
                for col in range(16):
                    e = np.float32(e2m1_decode(codes[row, col:col + 1])[0] * d) - block[row, col]
                    row_sum = np.float32(row_sum + np.float32(e * e))
                total = np.float32(total + row_sum)
        candidates.append((sf, codes, total))
    (sf6, codes6, err6), (sf4, codes4, err4) = candidates
    return (sf4, codes4) if err4 < err6 else (sf6, codes6)


def test_four_over_six_picks_four_when_its_error_is_smaller():
    # [6, 5]: map to 6 (sf 1.0): 5 -> 4 (tie to even), E6 = 1. Map to 4: s = 6 * 0.25 = 1.5
    # (0x3C), d = 1.5, inv = 0.6666667: 6 -> 4.0 (deq 6), 5 -> 3.33 -> 3 (deq 4.5), E4 = 0.25.
    r = linear(bf16([[6, 5] + [0] * 14]), 1.0, four_over_six=True, columnwise=False)
    assert r.sf[0, 0] == 0x3C
    np.testing.assert_array_equal(codes_of(r.q)[0, :2], [6, 5])


@pytest.mark.parametrize(
    "group, why",
    [
        ([6, 3], "tie: both exact (E4 = E6 = 0: 3 -> 2.0 under map to 4 dequantizes to 3)"),
        ([6, 1], "six wins: 1 -> 0.667 -> 0.5 under map to 4 (deq 0.75, E4 = 0.0625), E6 = 0"),
        ([0], "all zero: sf 0 for both, errors 0"),
        ([np.nan, 6, 5], "NaN: both errors NaN, compared false (without the NaN 4 wins)"),
        ([np.inf, 5], "Inf: both errors Inf"),
    ],
)
def test_four_over_six_keeps_six(group, why):
    row = bf16([list(group) + [0] * (16 - len(group))])
    r = linear(row, 1.0, four_over_six=True, columnwise=False)
    plain = linear(row, 1.0, columnwise=False)
    np.testing.assert_array_equal(r.sf, plain.sf, err_msg=why)
    np.testing.assert_array_equal(r.q, plain.q, err_msg=why)


@pytest.mark.parametrize("block_2d", [False, True])
def test_four_over_six_matches_a_scalar_implementation(block_2d):
    # Many groups and blocks, near-ties included (values on the e2m1 grid of either
    # candidate), against the spec's sequential error sums computed one scalar at a time.
    rng = np.random.default_rng(17)
    x = data((64, 64), 17, edge_fraction=0.2, tiny_fraction=0.1)
    grid = bf16(rng.choice([0, 0.5, 1, 1.5, 2, 3, 4, 6, 4.5, 0.75], (16, 64)) * rng.choice([-1, 1], (16, 64)))
    fives = np.full((16, 64), 5.0)  # with a 6 in each block: 4 wins (see the [6, 5] case)
    fives[0, ::16] = 6
    x = np.concatenate([x, grid.view(np.uint16), bf16(fives).view(np.uint16)])
    tsf = np.float32(7.0)
    r = linear(x, tsf, four_over_six=True, block_2d=block_2d)
    xf = input_float32(x)
    rows = 16 if block_2d else 1
    six = linear(x, tsf, block_2d=block_2d).sf
    for i in range(0, 96, rows):
        for j in range(0, 64, 16):
            sf, codes = slow_four_over_six(xf[i:i + rows, j:j + 16], tsf)
            assert r.sf[i, j // 16] == sf
            np.testing.assert_array_equal(codes_of(r.q)[i:i + rows, j:j + 16], codes)
    assert np.any(r.sf != six) and np.any(r.sf == six)  # both outcomes occur


# Under map to 6 (d = 1) 1.0 is exact and 2.25 -> 2 (error 0.25); under map to 4
# (d = 1.5, inv = 0.6666667) 1.0 -> 0.667 -> 0.5 (deq 0.75, error 0.25) and 2.25 -> 1.5
# (deq 2.25, exact). Both candidates see one squared error 0.0625 = 2**-4 and thirteen of
# 2**-30 (2**-15 -> 0). Added to 2**-4 one at a time (ulp 2**-27) each 2**-30 is lost;
# added first, thirteen of them make 13 * 2**-30, and 2**-4 + 13 * 2**-30 rounds to
# 2**-4 + 2**-26. So the candidate whose 0.0625 comes first has the smaller sum.


def test_four_over_six_error_is_summed_in_element_order():
    # Sequentially, map to 4 has its error at element 1 (E4 = 2**-4) and map to 6 at element
    # 15 (E6 = 2**-4 + 2**-26): 4 wins (sf 1.5, 0x3C). The same values reversed: 6 wins. A
    # pairwise tree gives both 2**-4 + 2**-27, a tie, and 6.
    group = np.zeros(16)
    group[[0, 1, 15]] = [6, 1.0, 2.25]
    group[2:15] = 2.0**-15
    forward = linear(bf16(group[None]), 1.0, four_over_six=True, columnwise=False)
    backward = linear(bf16(group[None, ::-1]), 1.0, four_over_six=True, columnwise=False)
    assert (forward.sf[0, 0], backward.sf[0, 0]) == (0x3C, 0x38)


def test_four_over_six_block_error_sums_rows_then_the_row_sums():
    # 1.0 at (0, 15), 2.25 at (15, 0), the 2**-15 at (1..13, 1). Row sums: row 0 holds map to
    # 4's error, row 15 map to 6's: E4 = 2**-4 < E6 = 2**-4 + 2**-26, 4 wins. Column by
    # column (the transposed block, row-major) the order flips and 6 wins.
    block = np.zeros((16, 16))
    block[0, 0], block[0, 15], block[15, 0] = 6, 1.0, 2.25
    block[1:14, 1] = 2.0**-15
    rows_first = linear(bf16(block), 1.0, block_2d=True, four_over_six=True)
    transposed = linear(bf16(block.T), 1.0, block_2d=True, four_over_six=True)
    assert (rows_first.sf[0, 0], transposed.sf[0, 0]) == (0x3C, 0x38)


def test_four_over_six_dynamic_tensor_sf_is_1536_over_amax():
    x = bf16([[6, 5] + [0] * 14])
    r = linear(x, "dynamic", four_over_six=True, columnwise=False)
    # amax 6: 1536 / 6 = 256; s6 = 256, s4 = 384: both below 448.
    assert r.tensor_sf == np.float32(256)
    assert e4m3_decode(r.sf)[0, 0] == 384  # map to 4 still wins, unsaturated


def test_four_over_six_with_stochastic_rounding_selects_by_nearest_error():
    x = data((64, 64), 18)
    rn = linear(x, "dynamic", four_over_six=True)
    for seed in (1, 2):
        sr = linear(x, "dynamic", four_over_six=True, stochastic=True, seed=seed)
        np.testing.assert_array_equal(sr.sf, rn.sf)  # the choice never sees the random bits
        np.testing.assert_array_equal(sr.sf_t, rn.sf_t)
        assert not np.array_equal(sr.q, rn.q)


# ------------------------------------------------------- fake quantization


def _dequantized(q, sf, tsf, like):
    y = dequantize_nvfp4(q, sf, tsf, sf_layout="linear", dtype="float32")
    out = round_to(y, "float16" if like.dtype == np.float16 else "bfloat16")
    return out.view(like.dtype) if like.dtype.name == "bfloat16" else out


@pytest.mark.parametrize("dtype", ["bfloat16", "uint16", "float16"])
@pytest.mark.parametrize(
    "options",
    [{}, {"stochastic": True, "seed": 77, "offset": 3}, {"block_2d": True}, {"four_over_six": True},
     {"block_2d": True, "four_over_six": True, "stochastic": True}],
)
def test_fake_quantize_is_dequantize_of_quantize(dtype, options):
    bits = data((32, 64), 19, edge_fraction=0.25)
    with np.errstate(over="ignore"):  # bf16 beyond fp16's range becomes Inf, itself an edge case
        x = {"bfloat16": bits.view(ml_dtypes.bfloat16), "uint16": bits,
             "float16": input_float32(bits).astype(np.float16)}[dtype]
    r = linear(x, "dynamic", columnwise=False, **options)
    y = fake_quantize_nvfp4(x, "dynamic", **options)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint16), _dequantized(r.q, r.sf, r.tensor_sf, x).view(np.uint16))


@pytest.mark.parametrize("mask", [0, TE_WGRAD_SIGN_MASK])
def test_fake_quantize_through_the_hadamard_transform(mask):
    # Rowwise along K: the columnwise output of quantize_nvfp4_training(x^T) transforms the
    # same groups; dequantized, inverted and rounded to bf16.
    x = data((32, 48), 20, edge_fraction=0.0)
    y = fake_quantize_nvfp4(x, "dynamic", hadamard=mask)
    r = linear(np.ascontiguousarray(x.T), "dynamic", rowwise=False, hadamard=mask)
    deq = dequantize_nvfp4(r.q_t, r.sf_t, r.tensor_sf_t, sf_layout="linear", dtype="float32")
    np.testing.assert_array_equal(y, round_to(hadamard16(deq, mask, inverse=True), "bfloat16"))
    # and it approximates x (NVFP4 keeps about one significant bit)
    xf = input_float32(x)
    assert np.mean(np.abs(input_float32(y) - xf)) < 0.5 * np.mean(np.abs(xf))


def test_fake_quantize_special_values_by_hand():
    # amax 6 (NaN ignored): sf 1.0, d = 1. NaN -> 0x7 (+6), -0 -> -0 (0x8000), Inf in the
    # second group: sf 448 (0x7E), d = 448: Inf -> 6 * 448 = 2688, 100 -> 0.22 -> 0 (0x0000),
    # -100 -> -0 (0x8000). Third group: bf16 subnormals, s underflows to sf 0, d = 0: +-0.
    x = np.zeros((1, 48), np.float32)
    x[0, :4] = [np.nan, -0.0, 6, 5]
    x[0, 16:19] = [np.inf, 100, -100]
    x[0, 32:34] = [2.0**-133, -(2.0**-133)]
    y = fake_quantize_nvfp4(bf16(x).view(np.uint16), 1.0)
    assert y.dtype == np.uint16
    np.testing.assert_array_equal(y[0, :4], [0x40C0, 0x8000, 0x40C0, 0x4080])  # 6, -0, 6, 4
    np.testing.assert_array_equal(y[0, 16:19], [0x4528, 0x0000, 0x8000])  # 2688, 0, -0
    np.testing.assert_array_equal(y[0, 32:34], [0x0000, 0x8000])


def test_fake_quantize_stochastic_is_unbiased():
    x = np.tile(bf16(SR_X), (SR_ROWS, 1))
    y = fake_quantize_nvfp4(x, 1.0, stochastic=True, seed=31)
    mean = input_float32(y.view(np.uint16)).astype(np.float64).mean(axis=0)
    assert _mean_rounding_error(mean, SR_X, SR_SIGMA, SR_ROWS) <= 1


# ----------------------------------------------------------- edge inputs


@pytest.mark.parametrize(
    "options",
    [{}, {"stochastic": True}, {"four_over_six": True}, {"block_2d": True, "stochastic": True},
     {"hadamard": TE_WGRAD_SIGN_MASK, "stochastic": True, "four_over_six": True}],
)
def test_edge_groups_in_both_directions(options):
    # NaN, Inf, -0, subnormals, huge and tiny groups (tests/helpers.py edge families),
    # against the composition of the rowwise and columnwise pieces checked above.
    k = 64
    x = np.concatenate([edge_groups(k), edge_groups(k)[:4]])  # 16 rows
    r = linear(x, "dynamic", **options)
    assert r.q.shape == (16, 32) and r.q_t.shape == (64, 8)
    if not options:
        np.testing.assert_array_equal(r.q_t, quantize_nvfp4(np.ascontiguousarray(x.T), global_scale(x),
                                                            sf_layout="linear")[0])
    if options.get("block_2d"):
        np.testing.assert_array_equal(codes_of(r.q_t), codes_of(r.q).T)
    again = linear(x, "dynamic", **options)
    np.testing.assert_array_equal(again.q_t, r.q_t)


@pytest.mark.parametrize("shape", [(0, 32), (32, 0), (0, 0), (2, 0, 16)])
@pytest.mark.parametrize(
    "options", [{}, {"block_2d": True, "stochastic": True, "four_over_six": True}, {"hadamard": 5}]
)
def test_empty_inputs(shape, options):
    x = np.zeros(shape, ml_dtypes.bfloat16)
    m, k = int(np.prod(shape[:-1])), shape[-1]
    r = quantize_nvfp4_training(x, "dynamic", **options)
    assert r.q.shape == shape[:-1] + (k // 2,) and r.q_t.shape == (k, m // 2)
    assert r.sf.shape == (-(-m // 128), -(-(k // 16) // 4), 32, 4, 4)
    assert r.sf_t.shape == (-(-k // 128), -(-(m // 16) // 4), 32, 4, 4)
    assert r.tensor_sf == r.tensor_sf_t == np.float32(1)
    lin = linear(x, 2.0, **options)
    assert lin.sf.shape == shape[:-1] + (k // 16,) and lin.sf_t.shape == (k, m // 16)
    assert fake_quantize_nvfp4(x, 1.0, **options).shape == shape


# --------------------------------------------------------- argument rules


@pytest.mark.parametrize(
    "shape, kwargs, error, message",
    [
        ((16, 16), {"tensor_sf": "auto"}, ValueError, "tensor_sf must be a number or 'dynamic', got 'auto'"),
        ((16, 16), {"tensor_sf": True}, TypeError, "tensor_sf must be a Python float, a numpy float32 scalar"),
        ((16, 16), {"columnwise_tensor_sf": [1.0]}, TypeError, "columnwise_tensor_sf must be a Python float"),
        ((16, 16), {"rowwise": False, "columnwise": False}, ValueError,
         "rowwise and columnwise are both False: at least one direction must be asked for"),
        ((24, 16), {}, ValueError, "columnwise=True needs M .* to be a multiple of 16, got M=24"),
        ((24, 16), {"columnwise": False, "block_2d": True}, ValueError,
         "block_2d=True needs M .* to be a multiple of 16, got M=24"),
        ((16, 16), {"columnwise": False, "hadamard": 3}, ValueError,
         "hadamard=3 needs columnwise=True: the transform applies to the columnwise direction only"),
        ((16, 16), {"block_2d": True, "hadamard": 3}, ValueError, "hadamard=3 cannot be combined with block_2d=True"),
        ((16, 16), {"hadamard": 0x10000}, ValueError,
         r"hadamard must be a 16-bit sign mask in \[0, 0xFFFF\], got 65536"),
        ((16, 16), {"hadamard": 2.0}, TypeError, "hadamard must be an int"),
        ((16, 16), {"block_2d": True, "columnwise_tensor_sf": 2.0}, ValueError,
         "columnwise_tensor_sf=2.0 cannot be combined with block_2d=True"),
        ((16, 16), {"seed": -1}, ValueError, r"seed must satisfy 0 <= seed < 2\*\*64, got -1"),
        ((16, 16), {"offset": 2**64}, ValueError, r"offset must satisfy 0 <= offset < 2\*\*64"),
        ((16, 16), {"seed": 1.5}, TypeError, "seed must be an int, got 1.5 of type float"),
        ((16, 16), {"stochastic": 1}, TypeError, "stochastic must be a bool, got 1 of type int"),
        ((16, 16), {"four_over_six": "yes"}, TypeError, "four_over_six must be a bool, got 'yes'"),
        ((16, 16), {"sf_layout": "tiled"}, ValueError, "sf_layout must be one of 'swizzled', 'linear', '8x4', got 'tiled'"),
        ((16, 24), {}, ValueError, "K must be a multiple of 16, got 24"),
    ],
)
def test_quantize_training_rejects_bad_arguments(shape, kwargs, error, message):
    kwargs = {"tensor_sf": 1.0, **kwargs}
    with pytest.raises(error, match=message):
        quantize_nvfp4_training(np.zeros(shape, ml_dtypes.bfloat16), **kwargs)


def test_quantize_training_takes_float32_input_as_quantize_nvfp4_does():
    # float32 master weights, as QAT keeps them: rowwise is quantize_nvfp4 of the same values.
    x = np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32)
    got = quantize_nvfp4_training(x, 3.0, columnwise=False)
    want_q, want_sf = reference.quantize_nvfp4(x, 3.0)
    np.testing.assert_array_equal(got.q, want_q)
    np.testing.assert_array_equal(got.sf, want_sf)
    with pytest.raises(TypeError, match="x must have dtype bfloat16, uint16 \\(bf16 bits\\), float16 or float32, got int8"):
        quantize_nvfp4_training(np.zeros((16, 16), np.int8), 1.0)


@pytest.mark.parametrize(
    "shape, kwargs, error, message",
    [
        ((16, 16), {"block_2d": True, "hadamard": 1}, ValueError, "hadamard=1 cannot be combined with block_2d=True"),
        ((8, 16), {"block_2d": True}, ValueError, "block_2d=True needs M .* got M=8"),
        ((16, 16), {"tensor_sf": "max"}, ValueError, "tensor_sf must be a number or 'dynamic', got 'max'"),
        ((16, 16), {"offset": -2}, ValueError, "offset must satisfy 0 <= offset < 2\\*\\*64, got -2"),
        ((16, 16), {"block_2d": None}, TypeError, "block_2d must be a bool, got None"),
    ],
)
def test_fake_quantize_rejects_bad_arguments(shape, kwargs, error, message):
    kwargs = {"tensor_sf": 1.0, **kwargs}
    with pytest.raises(error, match=message):
        fake_quantize_nvfp4(np.zeros(shape, ml_dtypes.bfloat16), **kwargs)


def test_fake_quantize_of_rows_without_columnwise_rules():
    # Fake quantization is rowwise: any M works without block_2d.
    y = fake_quantize_nvfp4(bf16([[6, 3] + [0] * 14] * 3), 1.0)
    np.testing.assert_array_equal(input_float32(y)[:, :2], [[6, 3]] * 3)
