"""The 16-point random Hadamard transform of the reference (fp4q.numerics.hadamard):
y = H16 · (s ⊙ v) / 4 by the butterfly of NVFP4_SPEC.md (sign flips, stages h = 1, 2,
4, 8, then * 0.25), checked against the matrix, hand-derived outputs and its inverse."""

import numpy as np
import pytest

from fp4q.numerics.reference import TE_WGRAD_SIGN_MASK, hadamard16

INDEX = np.arange(16)
# Sylvester order: H[i][j] = (-1)**popcount(i & j)
H16 = np.array([[(-1) ** bin(i & j).count("1") for j in INDEX] for i in INDEX], dtype=np.float64)
MASKS = [0, 1, 0x8000, 0x5555, TE_WGRAD_SIGN_MASK, 0xFFFF]


def signs(mask):
    return np.where((mask >> INDEX) & 1, -1.0, 1.0)


def test_te_sign_mask_is_te_wgrad_sign_vector():
    # transformer_engine/pytorch/tensor/nvfp4_tensor.py get_wgrad_sign_vector, bit i set where -1
    te = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
    np.testing.assert_array_equal(signs(TE_WGRAD_SIGN_MASK), te)
    assert TE_WGRAD_SIGN_MASK == 0xD7E8


@pytest.mark.parametrize("mask", MASKS)
def test_matches_the_matrix_where_every_sum_is_exact(mask):
    # Integers below 2**16: every partial sum is an integer below 2**20, exact in float32,
    # so the butterfly must equal the exact product computed in float64.
    v = np.random.default_rng(mask).integers(-(2**15), 2**15, (50, 3, 16)).astype(np.float32)
    expected = np.einsum("ij,...j->...i", H16, v.astype(np.float64) * signs(mask)) / 4
    got = hadamard16(v.reshape(50, 48), mask)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected.reshape(50, 48).astype(np.float32))


@pytest.mark.parametrize("i", [0, 1, 5, 10, 15])
def test_unit_vectors_give_rows_of_h_over_4(i):
    v = np.zeros(16, np.float32)
    v[i] = 1
    np.testing.assert_array_equal(hadamard16(v), H16[i] / 4)
    np.testing.assert_array_equal(hadamard16(v, 1 << i), -H16[i] / 4)  # its sign flipped
    np.testing.assert_array_equal(hadamard16(v, 0xFFFF ^ (1 << i)), H16[i] / 4)  # others flipped


def test_ramp_by_hand():
    # v = 1..16: y0 = 136/4 = 34; y1 = (1+3+..+15) - (2+4+..+16) = 64 - 72 -> -2;
    # y2 = 60 - 76 -> -4; y4 = 52 - 84 -> -8; y8 = 36 - 100 -> -16; every other row of H16
    # is orthogonal to both the constant and the ramp, so 0.
    y = hadamard16(np.arange(1, 17, dtype=np.float32))
    expected = np.zeros(16)
    expected[[0, 1, 2, 4, 8]] = [34, -2, -4, -8, -16]
    np.testing.assert_array_equal(y, expected)


def test_butterfly_order_by_hand():
    # v = (2**24, 1, 2, 1, 0, ...): float32 near 2**24 has spacing 2, so order matters.
    # Stage h=1: (2**24 + 1 -> 2**24 (tie to even), 2**24 - 1, 2 + 1 = 3, 2 - 1 = 1).
    # Stage h=2: 2**24 + 3 -> 2**24 + 4 (tie, even), (2**24 - 1) + 1 = 2**24,
    #            2**24 - 3 (exact), (2**24 - 1) - 1 = 2**24 - 2.
    # Stages 4 and 8 pair with zeros (exact), repeating the four values. The exact transform
    # has 2**24 - 2 at index 2: the h=2-first order would give it, this order must not.
    v = np.zeros(16, np.float32)
    v[:4] = [2**24, 1, 2, 1]
    expected = np.tile(np.array([2**24 + 4, 2**24, 2**24 - 3, 2**24 - 2], np.float64) / 4, 4)
    np.testing.assert_array_equal(hadamard16(v), expected)


def test_scaling_by_a_quarter_is_exact_for_bf16_subnormals():
    v = np.zeros(16, np.float32)
    v[3] = 2.0**-133  # the smallest bf16 subnormal
    y = hadamard16(v)
    np.testing.assert_array_equal(np.abs(y), np.full(16, 2.0**-135))
    np.testing.assert_array_equal(np.signbit(y), H16[3] < 0)


def _exact_inputs(seed, e):
    """Multiples of 2**e below 2**(e + 16) in magnitude: no sum of either pass rounds."""
    v = np.random.default_rng(seed).integers(-(2**16) + 1, 2**16, (40, 32)).astype(np.float64)
    return (v * 2.0**e).astype(np.float32)


@pytest.mark.parametrize("e", [-40, 0, 30])
def test_transform_is_its_own_inverse_without_signs(e):
    v = _exact_inputs(e + 100, e)
    np.testing.assert_array_equal(hadamard16(hadamard16(v)), v)


@pytest.mark.parametrize("mask", MASKS)
def test_inverse_undoes_any_mask(mask):
    v = _exact_inputs(mask, -3)
    y = hadamard16(v, mask)
    np.testing.assert_array_equal(hadamard16(y, mask, inverse=True), v)
    if mask not in (0, 0xFFFF):
        # Applied twice, the forward transform keeps s in the middle: the identity only
        # when s is constant.
        assert not np.array_equal(hadamard16(y, mask), v)


def test_not_its_own_inverse_when_a_sum_rounds():
    # v = (2**24, 1, 0, ...). First pass: 2**24 + 1 rounds to 2**24, so y alternates
    # a = 2**22 and b = (2**24 - 1) / 4 = 2**22 - 0.25. Second pass, stage h=1: a + b =
    # 2**23 - 0.25, a tie between 2**23 - 0.5 and 2**23 (spacing 0.5), rounds to the even
    # 2**23; a - b = 0.25. The later stages are exact: 2**26 and 2 before the * 0.25.
    v = np.zeros(16, np.float32)
    v[:2] = [2**24, 1]
    expected = np.zeros(16, np.float32)
    expected[:2] = [2**24, 0.5]
    np.testing.assert_array_equal(hadamard16(hadamard16(v)), expected)


def test_nan_spreads_over_its_group_only():
    v = np.ones((2, 16), np.float32)
    v[0, 7] = np.nan
    y = hadamard16(v.reshape(32))
    assert np.isnan(y[:16]).all()
    np.testing.assert_array_equal(y[16:], np.where(INDEX == 0, 4.0, 0.0))  # H16 · 1 / 4


def test_leading_dimensions_are_kept():
    v = _exact_inputs(1, 0).reshape(2, 20, 32)
    np.testing.assert_array_equal(hadamard16(v, 3), hadamard16(v.reshape(40, 32), 3).reshape(2, 20, 32))


@pytest.mark.parametrize(
    "v, kwargs, error, message",
    [
        (np.zeros(16), {}, TypeError, "v must have dtype float32, got float64"),
        (np.zeros(24, np.float32), {}, ValueError, r"v must have shape \(\.\.\., 16n\)"),
        (np.zeros(16, np.float32), {"sign_mask": 0x10000}, ValueError,
         r"sign_mask must be a 16-bit sign mask in \[0, 0xFFFF\], got 65536"),
        (np.zeros(16, np.float32), {"sign_mask": -1}, ValueError, "got -1"),
        (np.zeros(16, np.float32), {"sign_mask": 1.0}, TypeError, "sign_mask must be an int"),
        (np.zeros(16, np.float32), {"sign_mask": True}, TypeError, "sign_mask must be an int"),
        (np.zeros(16, np.float32), {"inverse": 1}, TypeError, "inverse must be a bool, got 1"),
    ],
)
def test_rejects_bad_arguments(v, kwargs, error, message):
    with pytest.raises(error, match=message):
        hadamard16(v, **kwargs)
