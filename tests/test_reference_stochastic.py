"""Philox4x32-10 and the cvt.rs.satfinite.e2m1x4 stochastic rounding of the reference
(fp4q.numerics.philox, fp4q.numerics.stochastic) against published answers and
hand-derived cases.

The rounding cases follow NVFP4_SPEC.md, "Stochastic rounding": for |v| < 6 with
neighbours lo and lo + step, D = floor((|v| - lo) / step * 256), and v rounds away from
zero exactly when D + r >= 256.
"""

import numpy as np
import pytest

from fp4q.numerics.formats import e2m1_decode, e2m1_encode
from fp4q.numerics.philox import group_random_words
from fp4q.numerics.reference import e2m1_encode_stochastic, philox4x32_10
from fp4q.numerics.stochastic import cvt_rs_random_bytes, e2m1_round_stochastic

# Random123's tests/kat_vectors (DEShawResearch/random123), the three philox4x32 10 lines:
# counter words, key words, expected output words.
PHILOX_KAT = [
    ([0x00000000, 0x00000000, 0x00000000, 0x00000000], [0x00000000, 0x00000000],
     [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], [0xFFFFFFFF, 0xFFFFFFFF],
     [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]


def sr(v, r):
    """Code of one float32 value rounded with random byte r."""
    return int(e2m1_round_stochastic(np.array([v], np.float32), np.array([r], np.uint8))[0])


# ------------------------------------------------------------------- Philox


@pytest.mark.parametrize("counter, key, expected", PHILOX_KAT)
def test_philox_known_answers(counter, key, expected):
    out = philox4x32_10(np.array(counter, np.uint32), np.array(key, np.uint32))
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out, np.array(expected, np.uint32))


def test_philox_is_vectorized_and_broadcasts_the_key():
    counters = np.array([c for c, _, _ in PHILOX_KAT] * 2, np.uint32).reshape(2, 3, 4)
    out = philox4x32_10(counters, np.array(PHILOX_KAT[2][1], np.uint32))
    assert out.shape == (2, 3, 4)
    for i in range(3):
        one = philox4x32_10(counters[0, i], np.array(PHILOX_KAT[2][1], np.uint32))
        np.testing.assert_array_equal(out[0, i], one)
        np.testing.assert_array_equal(out[1, i], one)
    np.testing.assert_array_equal(out[0, 2], PHILOX_KAT[2][2])


def test_group_words_are_philox_of_the_documented_counter_and_key():
    # key (seed lo, seed hi); counter (offset lo, offset hi, g lo, g hi | dir << 31)
    seed, offset, g = 0x0123456789ABCDEF, 0xFEDCBA9876543210, (5 << 32) + 7
    rows = group_random_words(seed, offset, np.array([g], np.uint64), "rowwise")
    cols = group_random_words(seed, offset, np.array([g], np.uint64), "columnwise")
    key = np.array([0x89ABCDEF, 0x01234567], np.uint32)
    np.testing.assert_array_equal(rows[0], philox4x32_10(np.array([0x76543210, 0xFEDCBA98, 7, 5], np.uint32), key))
    np.testing.assert_array_equal(cols[0], philox4x32_10(np.array([0x76543210, 0xFEDCBA98, 7, 5 | 1 << 31],
                                                                  np.uint32), key))


def test_group_words_depend_on_every_input():
    g = np.arange(4, dtype=np.uint64)
    base = group_random_words(1, 2, g, "rowwise")
    for other in (group_random_words(3, 2, g, "rowwise"), group_random_words(1, 3, g, "rowwise"),
                  group_random_words(1, 2, g + 4, "rowwise"), group_random_words(1, 2, g, "columnwise")):
        assert not np.any(np.all(other == base, axis=-1))
    assert len({tuple(w) for w in base}) == 4


@pytest.mark.parametrize(
    "counter, key, error, message",
    [
        (np.zeros(4), np.zeros(2, np.uint32), TypeError, "counter must be an integer array"),
        (np.zeros(3, np.uint32), np.zeros(2, np.uint32), ValueError, r"counter must have shape \(\.\.\., 4\)"),
        (np.zeros(4, np.uint32), np.zeros(4, np.uint32), ValueError, r"key must have shape \(\.\.\., 2\)"),
        (np.array([0, 0, 0, 2**32], np.int64), np.zeros(2, np.uint32), ValueError,
         r"counter words must lie in \[0, 2\*\*32\), got 4294967296"),
        (np.zeros(4, np.uint32), np.array([-1, 0]), ValueError, r"key words must lie in \[0, 2\*\*32\), got -1"),
    ],
)
def test_philox_rejects_bad_words(counter, key, error, message):
    with pytest.raises(error, match=message):
        philox4x32_10(counter, key)


@pytest.mark.parametrize(
    "seed, offset, direction, error, message",
    [
        (-1, 0, "rowwise", ValueError, r"seed must satisfy 0 <= seed < 2\*\*64, got -1"),
        (2**64, 0, "rowwise", ValueError, r"seed must satisfy 0 <= seed < 2\*\*64, got 18446744073709551616"),
        (0, 1.0, "rowwise", TypeError, "offset must be an int, got 1.0 of type float"),
        (True, 0, "rowwise", TypeError, "seed must be an int, got True of type bool"),
        (0, 0, "diagonal", ValueError, "direction must be 'rowwise' or 'columnwise', got 'diagonal'"),
    ],
)
def test_group_words_reject_bad_arguments(seed, offset, direction, error, message):
    with pytest.raises(error, match=message):
        group_random_words(seed, offset, np.zeros(1, np.uint64), direction)


# ------------------------------------------------------- cvt.rs byte mapping


def test_random_bytes_of_one_word():
    # 0x12345678: bytes 0x78, 0x56, 0x34, 0x12 from the bottom. x0 <- rbits[23:16] = 0x34,
    # x1 <- bitrev(0x78 = 01111000) = 00011110, x2 <- rbits[31:24] = 0x12,
    # x3 <- bitrev(0x56 = 01010110) = 01101010.
    np.testing.assert_array_equal(cvt_rs_random_bytes(np.array(0x12345678, np.uint32)), [0x34, 0x1E, 0x12, 0x6A])


def test_quad_rounding_follows_the_byte_mapping():
    # Four values 0.25 (D = 128): each rounds up to 0.5 (code 1) iff its byte is >= 128.
    v = np.full(4, 0.25, np.float32)
    # byte2 0x80 -> x0 up; byte0 0x01 -> bitrev 0x80 -> x1 up; byte3 0x7F -> x2 down;
    # byte1 0xFE -> bitrev 0x7F -> x3 down.
    np.testing.assert_array_equal(e2m1_encode_stochastic(v, np.array([0x7F80FE01], np.uint32)), [1, 1, 0, 0])
    # byte0 0x80 reads as bitrev 0x01 for x1: without the reversal x1 would round up.
    np.testing.assert_array_equal(e2m1_encode_stochastic(v, np.array([0x7F80FE80], np.uint32)), [1, 0, 0, 0])
    # byte1 0x01 -> bitrev 0x80 rounds x3 up; byte3 0x80 rounds x2 up.
    np.testing.assert_array_equal(e2m1_encode_stochastic(v, np.array([0x80000100], np.uint32)), [0, 0, 1, 1])


def test_words_feed_consecutive_quads():
    v = np.full((2, 8), 0.25, np.float32)
    words = np.array([[0x00800000, 0], [0, 0x00800000]], np.uint32)  # only x0 of one quad up
    np.testing.assert_array_equal(e2m1_encode_stochastic(v, words), [[1, 0, 0, 0, 0, 0, 0, 0],
                                                                      [0, 0, 0, 0, 1, 0, 0, 0]])


# ------------------------------------------------------- one value, by hand


@pytest.mark.parametrize(
    "v, r, code",
    [
        (0.25, 127, 0x0), (0.25, 128, 0x1),  # step 0.5: u = 0.5, D = 128
        (0.75, 127, 0x1), (0.75, 128, 0x2),  # 0.5 -> 1.0 across the subnormal/normal edge
        (1.25, 127, 0x2), (1.25, 128, 0x3),  # u = 2.5, lo 1.0, D = 128
        (3.5, 127, 0x5), (3.5, 128, 0x6),  # step 1: lo 3, D = 128
        (5.0, 127, 0x6), (5.0, 128, 0x7),  # step 2: u = 2.5, lo 4, D = 128
        (1.999, 0, 0x3), (1.999, 1, 0x4),  # u = 3.998 -> D = floor(0.998 * 256) = 255
        (float(np.nextafter(np.float32(6), np.float32(0))), 0, 0x6),  # D = 255, from 4
        (float(np.nextafter(np.float32(6), np.float32(0))), 1, 0x7),
        (2.0, 255, 0x4), (0.5, 255, 0x1), (4.0, 255, 0x6),  # grid values: D = 0 never moves
        (0.0, 255, 0x0),
        (1.0 / 512, 255, 0x1), (1.0 / 512, 254, 0x0),  # u = 2**-8: D = 1
        (2.0**-149, 255, 0x0),  # D = 0 below 2**-9
        (-0.1, 204, 0x8), (-0.1, 205, 0x9),  # D = floor(0.2f * 256) = 51; 51 + 205 = 256
        (-0.0, 255, 0x8), (-(2.0**-149), 255, 0x8),  # sign kept on zero results
        (-5.0, 128, 0xF), (-1.25, 127, 0xA),
    ],
)
def test_one_value_by_hand(v, r, code):
    assert sr(v, r) == code


@pytest.mark.parametrize("v", [6.0, 6.5, 7.99, 8.0, 1e30, float(np.finfo(np.float32).max), np.inf])
def test_saturates_to_six_for_any_random_byte(v):
    for r in (0, 128, 255):
        assert sr(v, r) == 0x7 and sr(-v, r) == 0xF


def test_nan_is_plus_six_for_any_sign_and_byte():
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    for r in (0, 255):
        np.testing.assert_array_equal(e2m1_round_stochastic(nans, np.full(4, r, np.uint8)), np.full(4, 0x7))


def _in_range_values():
    """Values v = (lo + D / 256) * step for every D, over every interval of the grid, and
    their negatives: (v, D, code of lo) for each."""
    intervals = [(0.5, lo) for lo in range(4)] + [(1.0, 2), (1.0, 3), (2.0, 2)]
    v, d, lo_codes = [], [], []
    for step, lo in intervals:
        for dd in range(256):
            for sign in (1.0, -1.0):
                v.append(sign * (lo + dd / 256) * step)
                d.append(dd)
                lo_codes.append(e2m1_encode(np.array([sign * lo * step], np.float32))[0])
    return np.array(v, np.float32), np.array(d), np.array(lo_codes)


def test_round_up_count_over_all_bytes_equals_d():
    # The exact unbiasedness of the rule: of the 256 random bytes, exactly D round away
    # from zero (to the next code), the others keep lo.
    v, d, lo_codes = _in_range_values()
    r = np.broadcast_to(np.arange(256, dtype=np.uint8), (v.size, 256))
    codes = e2m1_round_stochastic(np.repeat(v[:, None], 256, axis=1), r.copy())
    up = codes != lo_codes[:, None]
    np.testing.assert_array_equal(up.sum(axis=1), d)
    # the other candidate is the next magnitude code, same sign
    np.testing.assert_array_equal(codes[up], np.repeat(lo_codes + 1, d))


def test_stays_within_one_step_of_round_to_nearest():
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.uniform(-7, 7, 200000), rng.standard_normal(50000) * 1e-3]).astype(np.float32)
    r = rng.integers(0, 256, v.size, dtype=np.uint8)
    got = e2m1_decode(e2m1_round_stochastic(v, r))
    nearest = e2m1_decode(e2m1_encode(v))
    a = np.minimum(np.abs(v), np.float32(6))
    step = np.where(a < 2, 0.5, np.where(a < 4, 1.0, 2.0))
    lo = np.copysign(np.floor(a / step) * step, v)
    hi = np.copysign(np.minimum(np.floor(a / step) * step + step, 6), v)
    assert np.all((got == lo) | (got == hi))  # one of the two neighbours
    assert np.all(np.abs(got - nearest) <= step)
    assert np.all(np.abs(got - v) <= np.abs(nearest - v) + step)


@pytest.mark.parametrize(
    "v, r, error, message",
    [
        (np.zeros(2), np.zeros(2, np.uint8), TypeError, "v must have dtype float32, got float64"),
        (np.zeros(2, np.float32), np.zeros(2, np.int32), TypeError, "r must have dtype uint8"),
        (np.zeros(2, np.float32), np.zeros(3, np.uint8), ValueError, r"r must have the shape of v, \(2,\), got \(3,\)"),
    ],
)
def test_round_stochastic_rejects_bad_arguments(v, r, error, message):
    with pytest.raises(error, match=message):
        e2m1_round_stochastic(v, r)


@pytest.mark.parametrize(
    "v, words, error, message",
    [
        (np.zeros(6, np.float32), np.zeros(1, np.uint32), ValueError, r"v must have shape \(\.\.\., 4n\)"),
        (np.zeros(8, np.float32), np.zeros(1, np.uint32), ValueError,
         r"rbits must have shape v.shape\[:-1\] \+ \(v.shape\[-1\] // 4,\) = \(2,\), got \(1,\)"),
        (np.zeros(4, np.float32), np.zeros(1, np.int64), TypeError, "rbits must have dtype uint32, got int64"),
    ],
)
def test_encode_stochastic_rejects_bad_arguments(v, words, error, message):
    with pytest.raises(error, match=message):
        e2m1_encode_stochastic(v, words)
