"""The float32 prologues of the fused serving quantizers (fp4q.numerics.prologues) against NVFP4_SPEC.md,
"The project's exact sequences: fused serving quantizers": exp, SiLU·mul and (add+)RMSNorm.

Expected bytes are worked out by hand in the comments; bf16 keeps 8 significant bits, so a value
v = 1.f * 2**e rounds at the 7th fraction bit (f * 128 to the nearest integer, ties to even).
"""

import os
import struct

import ml_dtypes
import numpy as np
import pytest

from fp4q.numerics.prologues import exp_f32, rms_norm, row_sum_of_squares, silu_and_mul

# The spec's bound, measured over every float32 input (test_exp_every_float32 below).
EXP_MAX_ULP = 1.1705
EXP_WORST_INPUT = 0x40A66A5C  # 5.2004833: where that bound is reached
BF = ml_dtypes.bfloat16


def bits32(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def from_bits32(b):
    return np.asarray(b, dtype=np.uint32).view(np.float32)


def row(values, k=16, dtype=BF):
    """One row of ``values`` zero-padded to ``k``, in ``dtype`` (exactly)."""
    v = np.zeros(k, np.float64)
    v[: len(values)] = values
    out = v.astype(np.float32).astype(dtype)
    assert np.array_equal(out.astype(np.float64), v, equal_nan=True), "test value is not representable"
    return out


def random_bf16(shape, seed, scale=1.0, offset=0.0):
    """Normal random values (times ``scale``, plus ``offset``) rounded to bf16."""
    v = np.random.default_rng(seed).standard_normal(shape) * scale + offset
    return v.astype(np.float32).astype(BF)


def ulp_error(x, y):
    """|y - e**x| in float32 ulps of the exact value; a true value at or above the overflow
    threshold 2**128 - 2**103 counts as 2**128 (which +Inf rounds it to), with ulp 2**104."""
    ref = np.minimum(np.exp(x.astype(np.float64)), 2.0**128)
    _, e = np.frexp(ref)
    ulp = np.ldexp(1.0, np.maximum(np.minimum(e, 128) - 24, -149))
    y = np.where(np.isinf(y), 2.0**128, y.astype(np.float64))
    return np.abs(y - ref) / ulp


# ---------------------------------------------------------------------------- exp


def _exp_spec_scalar(x: float) -> float:
    """The spec's exp sequence for one float32, transcribed independently from the spec text:
    numpy float32 scalars for the float operations, Python ints for the bit operations."""
    f = np.float32
    c = [from_bits32(b)[()] for b in (0x3AB5121D, 0x3C091CF0, 0x3D2AAC79, 0x3E2AAA49, 0x3EFFFFFE)]
    x = f(x)
    if np.isnan(x):
        return float("nan")
    x = min(max(x, f(-104.0)), f(89.0))
    j = x * from_bits32(0x3FB8AA3B)[()] + from_bits32(0x4B400000)[()]
    k = struct.unpack("<I", struct.pack("<f", j))[0] - 0x4B400000
    kf = j - from_bits32(0x4B400000)[()]
    r = (x - kf * from_bits32(0x3F317200)[()]) - kf * from_bits32(0x35BFBE8E)[()]
    p = c[0]
    for coef in c[1:] + [f(1), f(1)]:
        p = p * r + coef
    k1 = k >> 1  # floor(k / 2)
    s1 = struct.unpack("<f", struct.pack("<I", (k1 + 127) << 23))[0]
    s2 = struct.unpack("<f", struct.pack("<I", (k - k1 + 127) << 23))[0]
    with np.errstate(over="ignore"):
        return float((p * f(s1)) * f(s2))


def test_exp_is_the_spec_sequence():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.uniform(-110, 95, 3000).astype(np.float32),
        rng.standard_normal(2000).astype(np.float32),
        from_bits32(rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32)),
        np.array([0, -0.0, 88.72283, 88.72284, -87.33655, -103.97208, -103.97209, np.inf, -np.inf], np.float32),
    ])
    x = x[~np.isnan(x)]
    expected = np.array([_exp_spec_scalar(v) for v in x], np.float32)
    np.testing.assert_array_equal(bits32(exp_f32(x)), bits32(expected))


@pytest.mark.parametrize(
    "x, expected",
    [
        (0.0, 1.0),  # k = 0, r = 0: the polynomial's constant term
        (-0.0, 1.0),
        (np.inf, np.inf),  # clamped to 89: 1.32 * 2**64 * 2**64 overflows
        (89.0, np.inf),
        (-np.inf, 0.0),  # clamped to -104: 0.97 * 2**-150 rounds to +0
        (-104.0, 0.0),
        (-103.97209, 0.0),  # e**x = 0.49999 * 2**-149, below half the smallest subnormal
        (-103.97208, 2.0**-149),  # e**x = 0.50000033 * 2**-149 rounds up to the smallest subnormal
        (-100.0, 2.0**-149 * 27),  # e**-100 = 26.547 * 2**-149, a subnormal: rounds to 27 steps
    ],
)
def test_exp_edges(x, expected):
    y = exp_f32(np.array([x], np.float32))
    assert y.dtype == np.float32 and y[0] == np.float32(expected) and not np.signbit(y[0])


def test_exp_nan_gives_nan():
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32)
    assert np.isnan(exp_f32(from_bits32(nan_bits))).all()


def test_exp_finite_range_ends():
    # Results round to +Inf from e**88.7228391 (2**128 - 2**103) on: float32(88.72283) = 88.7228317 gives
    # 3.40280e38 and float32(88.72284) = 88.7228394 overflows, in the exact value and here.
    y = exp_f32(np.array([88.72283, 88.72284], np.float32))
    assert np.isfinite(y[0]) and y[0] > 3.4e38 and np.isinf(y[1])


def test_exp_ulp_bound_on_a_dense_sample():
    # Every float32 of [4, 8) (k from 6 to 12, the binade of the worst input) and of [-1, -0.5), and
    # uniform inputs over the whole range, the subnormal results included.
    rng = np.random.default_rng(1)
    x = np.concatenate([
        from_bits32(np.arange(0x40800000, 0x41000000, dtype=np.uint32)),
        -from_bits32(np.arange(0x3F000000, 0x3F800000, 2, dtype=np.uint32)),
        rng.uniform(-104, 89, 2_000_000).astype(np.float32),
        rng.uniform(-104, -87, 500_000).astype(np.float32),
    ])
    err = ulp_error(x, exp_f32(x))
    assert err.max() <= EXP_MAX_ULP
    assert err[x == from_bits32(EXP_WORST_INPUT)].max() > 1.17
    # subnormal results (0.8172 ulp at most, of 2**-149, over every float32 input)
    assert err[x < -87.3365].max() <= 0.82
    # Errors above 1 ulp are rare: 0.02 % of this sample, 18,417 of all 2.24e9 float32 inputs.
    assert np.mean(err > 1) < 1e-3


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FP4Q_EXHAUSTIVE") != "1", reason="set FP4Q_EXHAUSTIVE=1 (about 5 minutes)")
def test_exp_every_float32():
    # Every float32 in [-104, 89], both signs: 2,239,889,410 inputs; beyond them the clamp gives the
    # values at the bounds (test_exp_edges). The spec states the result: max 1.1704 ulp at 0x40A66A5C.
    worst = 0.0
    for lo, hi in ((0, 0x42B20001), (0x80000000, 0xC2D00001)):
        for start in range(lo, hi, 1 << 24):
            x = from_bits32(np.arange(start, min(start + (1 << 24), hi), dtype=np.uint32))
            worst = max(worst, float(ulp_error(x, exp_f32(x)).max()))
    assert worst <= EXP_MAX_ULP


# ----------------------------------------------------------------------- SiLU·mul


def silu_row(gate, up, dtype=BF):
    """One row x = [gate | up] with N = 16."""
    return np.concatenate([row(gate, dtype=dtype), row(up, dtype=dtype)])


@pytest.mark.parametrize(
    "gate, up, bits",
    [
        # silu(1) = 1 / (1 + e**-1) = 0.7310586 = 1.4621 * 2**-1: 0.4621 * 128 = 59.15 -> 59 (0x3F3B)
        (1, 1, 0x3F3B),
        # silu(0) = 0 / 2 = +0, times -3 is -0
        (0, -3, 0x8000),
        # silu(2) = 2 / 1.1353 = 1.7616, times 0.5 = 0.8808 = 1.7616 * 2**-1: 0.7616 * 128 = 97.48 -> 97 (0x3F61)
        (2, 0.5, 0x3F61),
        # e**-100 is a subnormal: 1 + it is 1, so h = 100 (0x42C8)
        (100, 1, 0x42C8),
        # e**100 overflows to +Inf: -100 / Inf = -0
        (-100, 1, 0x8000),
        # e**88 = 1.65e38 is finite: -88 / 1.65e38 = -5.328e-37 = -1.4164 * 2**-121 (bf16 0x8335), a normal
        (-88, 1, 0x8335),
        # e**89 overflows: -0, where the exact silu(-89) is -3.9e-37 (the formula's result, as torch's)
        (-89, 1, 0x8000),
        (np.nan, 1, 0x7FFF),  # NaN / anything is NaN, stored as the canonical NaN
        (np.inf, 1, 0x7F80),  # e**-Inf = 0: Inf / 1 = Inf
        (-np.inf, 1, 0x7FFF),  # e**Inf = Inf: -Inf / Inf = NaN
        (1, np.inf, 0x7F80),
        (0, np.inf, 0x7FFF),  # 0 * Inf
    ],
)
def test_silu_and_mul_hand_values(gate, up, bits):
    h = silu_and_mul(silu_row([gate], [up]))
    assert h.dtype == BF and h.shape == (16,)
    assert h.view(np.uint16)[0] == bits
    assert not h.view(np.uint16)[1:].any()  # silu(0) * 0 = +0


def test_silu_and_mul_rounds_once():
    # silu(2) * 1.0234375 = 1.7615941 * 1.0234375 = 1.8028814: 0.8028814 * 128 = 102.77 -> 103 (0x3FE7).
    # Rounding silu(2) to bf16 first (97.48 -> 97, 1.7578125) would give 1.7990112: 102.27 -> 102.
    # silu(1) * 1.0078125 = 0.7367700 = 1.47354 * 2**-1: 60.61 -> 61 (0x3F3D); via bf16 silu(1) =
    # 0.73046875 it would be 0.7361755: 60.46 -> 60.
    h = silu_and_mul(silu_row([2, 1], [1.0234375, 1.0078125]))
    np.testing.assert_array_equal(h.view(np.uint16)[:2], [0x3FE7, 0x3F3D])


def test_silu_and_mul_float16_and_float32():
    # fp16 keeps 11 significant bits: 0.7310586 = 1.4621 * 2**-1, 0.4621 * 1024 = 473.2 -> 473 (0x39D9)
    h16 = silu_and_mul(silu_row([1], [1], dtype=np.float16))
    assert h16.dtype == np.float16 and h16.view(np.uint16)[0] == 0x39D9
    # float32: the intermediate is the float32 product itself (the rounding is the identity)
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    gate, up = x[:, :32], x[:, 32:]
    with np.errstate(all="ignore"):
        expected = gate / (np.float32(1) + exp_f32(-gate)) * up
    h32 = silu_and_mul(x)
    assert h32.dtype == np.float32
    np.testing.assert_array_equal(bits32(h32), bits32(expected))


def test_silu_and_mul_bits_and_leading_dims():
    x = random_bf16((2, 3, 64), seed=3, scale=4)
    h = silu_and_mul(x)
    assert h.shape == (2, 3, 32)
    np.testing.assert_array_equal(silu_and_mul(x.view(np.uint16)), h.view(np.uint16))
    np.testing.assert_array_equal(silu_and_mul(x.reshape(6, 64)).reshape(2, 3, 32), h)


def test_silu_and_mul_empty_and_validation():
    assert silu_and_mul(np.zeros((0, 32), BF)).shape == (0, 16)
    assert silu_and_mul(np.zeros((3, 0), np.float16)).shape == (3, 0)
    with pytest.raises(ValueError) as err:
        silu_and_mul(np.zeros((2, 33), BF))
    assert str(err.value) == "x.shape[-1] = 2N must be even, got 33"
    with pytest.raises(TypeError, match="x must have dtype bfloat16, uint16 \\(bf16 bits\\), float16 or float32, got int8"):
        silu_and_mul(np.zeros((2, 32), np.int8))


def test_silu_and_mul_against_torch():
    torch = pytest.importorskip("torch")
    x = random_bf16((256, 2 * 1024), seed=4, scale=3)
    h = silu_and_mul(x).view(np.uint16)
    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    gate, up = xt[:, :1024], xt[:, 1024:]
    # torch's composition rounds silu(gate) to bf16 before the product: two roundings.
    composed = (torch.nn.functional.silu(gate) * up).view(torch.int16).numpy().view(np.uint16)
    share = np.mean(composed == h)
    print(f"SiLU·mul: {share:.2%} of elements identical to torch's silu(gate) * up in bf16")
    assert share > 0.70  # 73.4 % measured (torch 2.13 CPU)
    # With one rounding and torch's float32 exp, the difference is only exp's last bit.
    gf, uf = gate.float(), up.float()
    single = (gf / (1 + torch.exp(-gf)) * uf).bfloat16().view(torch.int16).numpy().view(np.uint16)
    share_single = np.mean(single == h)
    print(f"SiLU·mul: {share_single:.4%} identical to torch's float32 composition rounded once")
    assert share_single > 0.999


# ------------------------------------------------------------------------ RMSNorm


def test_row_sum_of_squares_is_a_pairwise_tree():
    # 1 and five 2**-24 (squares of 2**-12), padded to 8: (1 + 2**-24) = 1, (2**-24 + 2**-24) = 2**-23,
    # (2**-23), (2**-24 + 0) = 2**-24; then 1 + 2**-23 and 3 * 2**-24; the sum 1 + 5 * 2**-24 is the
    # tie between 1 + 2**-22 and 1 + 3 * 2**-23: even, 1 + 2**-22. Left to right it stays 1.
    x = np.array([1] + [2.0**-12] * 5, np.float32)
    assert row_sum_of_squares(x) == np.float32(1 + 2.0**-22)
    sequential = np.float32(0)
    for v in x * x:
        sequential += v
    assert sequential == 1
    assert row_sum_of_squares(np.zeros((3, 0), np.float32)).tolist() == [0, 0, 0]
    assert row_sum_of_squares(np.array([3.0], np.float32)) == 9


def test_rms_norm_order_is_pinned():
    # float32 x = [1, 0 (x7), 2**-12 (x8)]: the tree sums the right half to 8 * 2**-24 = 2**-21 exactly
    # and ss = 1 + 2**-21; numpy's sum (8 running sums) gives 1 + 3 * 2**-23 and left to right gives 1.
    # rinv = 1 / sqrt(ss / 16): sqrt((1 + 2**-21) / 16) = 0.25 * (1 + 2**-22) exactly, so rinv =
    # 4 - 2**-20 (0x407FFFFC); 1 + 3 * 2**-23 would give 0x407FFFFE and 1 gives 4.0.
    x = np.array([1] + [0] * 7 + [2.0**-12] * 8, np.float32)
    assert np.sum(x * x) == np.float32(1 + 3 * 2.0**-23)
    h = rms_norm(x, np.ones(16, np.float32), eps=0.0)
    assert bits32(h)[0] == 0x407FFFFC


def test_rms_norm_hand_values_round_twice():
    # [3, 4, 0...]: ss = 25, 25 / 16 = 1.5625, sqrt = 1.25, rinv = float32(0.8). x * rinv = 2.4000000358
    # -> bf16 2.40625 (1.2 * 2: 0.2 * 128 = 25.6 -> 26) and 3.2000000477 -> 3.203125 (77). Times w0 =
    # 1.0234375: 2.40625 * w0 = 2.4626465 = 1.2313 * 2: 29.61 -> 30, 2.46875 (0x401E). Rounding once
    # (2.4000000358 * w0 = 2.45625: 29.2 -> 29, 0x401D) would differ.
    x = row([3, 4])
    w = row([1.0234375] + [1] * 15)
    h = rms_norm(x, w, eps=0.0)
    assert h.dtype == BF
    np.testing.assert_array_equal(h.view(np.uint16)[:3], [0x401E, 0x404D, 0])
    # eps = 1e-6: rinv = 0.79999974, x * rinv = 2.3999992 still rounds to 2.40625.
    np.testing.assert_array_equal(rms_norm(x, w).view(np.uint16)[:2], [0x401E, 0x404D])


@pytest.mark.parametrize(
    "values, eps, expected",
    [
        # NaN: ss is NaN, so is every element of the row
        ([np.nan, 1], 1e-6, [0x7FFF] * 16),
        # Inf: ss = Inf, rinv = 0: Inf * 0 is NaN, finite * 0 is a zero of x's sign
        ([np.inf, -1, 1], 1e-6, [0x7FFF, 0x8000] + [0] * 14),
        # all zero with eps = 0: 1 / sqrt(0) = Inf, 0 * Inf = NaN (the formula's result)
        ([], 0.0, [0x7FFF] * 16),
        ([], 1e-6, [0] * 16),
        # -0: -0 * rinv = -0, times w = 1 is -0
        ([-0.0, 0.0], 1e-6, [0x8000] + [0] * 15),
        # a subnormal row: its squares underflow to 0, so rinv = 1 / sqrt(eps) = 1 / 0.001 = 1000.0001:
        # 2**-130 * 1000.0001 = 1.95 * 2**-121 -> bf16 0x037A (0.953 * 128 = 122.0)
        ([2.0**-130], 1e-6, [0x037A] + [0] * 15),
    ],
)
def test_rms_norm_special_rows(values, eps, expected):
    h = rms_norm(row(values), row([1] * 16), eps=eps)
    np.testing.assert_array_equal(h.view(np.uint16), np.array(expected, np.uint16))


@pytest.mark.parametrize(
    "x, residual, expected",
    [
        # 1 + 2**-9 rounds to 1 (below the midpoint 1 + 2**-8); 1 + 2**-8 is the tie: even, 1
        ([1, 1], [2.0**-9, 2.0**-8], [0x3F80, 0x3F80]),
        # 1 + 3 * 2**-8: the tie between 1 + 2**-7 (odd) and 1 + 2**-6 (even): 1 + 2**-6 (0x3F82)
        ([1, -0.0], [3 * 2.0**-8, -0.0], [0x3F82, 0x8000]),
        ([0.0, np.inf], [-0.0, -np.inf], [0x0000, 0x7FFF]),
        # bf16's largest finite plus itself overflows to Inf
        ([2.0**127 * 1.9921875], [2.0**127 * 1.9921875], [0x7F80]),
    ],
)
def test_rms_norm_residual_is_updated_with_the_rounded_sum(x, residual, expected):
    xs, rs = row(x), row(residual)
    r_before = rs.copy()
    h = rms_norm(xs, row([1] * 16), eps=1e-6, residual=rs)
    np.testing.assert_array_equal(rs.view(np.uint16)[: len(expected)], np.array(expected, np.uint16))
    np.testing.assert_array_equal(rs.view(np.uint16)[len(expected):], r_before.view(np.uint16)[len(expected):])
    # h is RMSNorm of the updated residual's values
    np.testing.assert_array_equal(h.view(np.uint16), rms_norm(rs.copy(), row([1] * 16), eps=1e-6).view(np.uint16))


def test_rms_norm_residual_float16_and_float32():
    x = np.array([[65504, 1, 2.0**-24]], np.float16)
    res = np.array([[32, 2.0**-11, 2.0**-24]], np.float16)
    padded_x, padded_res = np.zeros((1, 16), np.float16), np.zeros((1, 16), np.float16)
    padded_x[:, :3], padded_res[:, :3] = x, res
    rms_norm(padded_x, np.ones(16, np.float16), residual=padded_res)
    # 65504 + 32 = 65536 >= 65520 overflows; 1 + 2**-11 is the tie: even, 1; the subnormals add exactly
    np.testing.assert_array_equal(padded_res.view(np.uint16)[0, :3], [0x7C00, 0x3C00, 0x0002])
    x32 = np.random.default_rng(5).standard_normal((3, 32)).astype(np.float32)
    r32 = np.random.default_rng(6).standard_normal((3, 32)).astype(np.float32)
    expected = x32 + r32
    rms_norm(x32, np.ones(32, np.float32), residual=r32)
    np.testing.assert_array_equal(bits32(r32), bits32(expected))


def test_rms_norm_bits_leading_dims_and_empty():
    x = random_bf16((2, 5, 48), seed=7)
    w = random_bf16(48, seed=17)
    h = rms_norm(x, w)
    assert h.shape == (2, 5, 48)
    np.testing.assert_array_equal(rms_norm(x.view(np.uint16), w.view(np.uint16)), h.view(np.uint16))
    np.testing.assert_array_equal(rms_norm(x.reshape(10, 48), w).reshape(2, 5, 48), h)
    assert rms_norm(np.zeros((0, 64), BF), np.zeros(64, BF)).shape == (0, 64)
    assert rms_norm(np.zeros((4, 0), np.float16), np.zeros(0, np.float16)).shape == (4, 0)


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        (dict(weight=np.ones(32, BF)), ValueError, "weight must have shape (K,) = (16,), got (32,)"),
        (dict(weight=np.ones(16, np.float16)), TypeError, "weight must have x's dtype (bfloat16), got float16"),
        (dict(weight=[1.0] * 16), TypeError, "weight must be a numpy array of bfloat16, uint16 (bf16 bits), "
                                             "float16 or float32, got builtins.list"),
        (dict(eps="1e-6"), TypeError, "eps must be a Python float, got '1e-6' of type str"),
        (dict(eps=True), TypeError, "eps must be a Python float, got True of type bool"),
        (dict(eps=-1e-6), ValueError, "eps must be finite and >= 0 in float32, got -1e-06"),
        (dict(eps=float("nan")), ValueError, "eps must be finite and >= 0 in float32, got nan"),
        (dict(eps=1e39), ValueError, "eps must be finite and >= 0 in float32, got 1e+39"),
        (dict(residual=np.zeros((2, 16), BF)), ValueError, "residual must have x's shape (1, 16), got (2, 16)"),
        (dict(residual=np.zeros((1, 16), np.float32)), TypeError,
         "residual must have x's dtype (bfloat16), got float32"),
    ],
)
def test_rms_norm_validation(kwargs, exc, message):
    args = dict(weight=np.ones(16, BF), eps=1e-6, residual=None) | kwargs
    with pytest.raises(exc) as err:
        rms_norm(np.ones((1, 16), BF), **args)
    assert str(err.value) == message


def test_rms_norm_read_only_residual_and_bf16_spellings():
    res = np.zeros((1, 16), BF)
    res.flags.writeable = False
    with pytest.raises(ValueError, match="residual must be writeable: it is updated in place with x \\+ residual"):
        rms_norm(np.ones((1, 16), BF), np.ones(16, BF), residual=res)
    # bf16 and its bits as uint16 are one dtype: either spelling for x, weight and residual
    res16 = np.full((1, 16), 0x3F80, np.uint16)
    h = rms_norm(np.ones((1, 16), BF), np.full(16, 0x3F80, np.uint16), residual=res16)
    assert h.dtype == BF and (res16 == 0x4000).all()  # 1 + 1 = 2


def test_rms_norm_against_torch():
    torch = pytest.importorskip("torch")
    x = random_bf16((256, 4096), seed=8, scale=3)
    w = random_bf16(4096, seed=18, scale=0.5, offset=1)
    h = rms_norm(x, w, eps=1e-6).view(np.uint16)
    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    wt = torch.from_numpy(w.view(np.int16)).view(torch.bfloat16)

    def as_bits(t):
        return t.view(torch.int16).numpy().view(np.uint16)

    # torch 2.13's CPU F.rms_norm rounds x * rinv * w once; the spec rounds x * rinv first (vLLM).
    share = np.mean(as_bits(torch.nn.functional.rms_norm(xt, (4096,), wt, eps=1e-6)) == h)
    print(f"RMSNorm: {share:.2%} of elements identical to torch's F.rms_norm")
    assert share > 0.70  # 74.3 % measured (torch 2.13 CPU)
    # vLLM's RMSNorm.forward_native composition in torch (its own sum order and rsqrt).
    xf = xt.float()
    native = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16() * wt
    share_native = np.mean(as_bits(native) == h)
    print(f"RMSNorm: {share_native:.4%} identical to vLLM's forward_native composition in torch")
    assert share_native > 0.999
    # The add is one rounding in both.
    residual = random_bf16((256, 4096), seed=9)
    expected = as_bits(xt + torch.from_numpy(residual.view(np.int16)).view(torch.bfloat16))
    rms_norm(x, w, eps=1e-6, residual=residual)
    np.testing.assert_array_equal(residual.view(np.uint16), expected)
