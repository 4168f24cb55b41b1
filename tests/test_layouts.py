"""Scale-factor layouts (fp4q.layouts) against NVFP4_SPEC.md, on the CPU, and on cupy where a GPU is."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4q.numerics.layouts import (block_shape, swizzle_sf, swizzled_sf_offset, swizzled_sf_shape, unswizzle_groups,
                                   unswizzle_sf)

ROWS = [0, 1, 2, 31, 32, 33, 127, 128, 129, 255, 256, 300]
GROUPS = list(range(0, 10))


def random_scales(m, g, seed=0):
    # 1..255 so that a real scale is never mistaken for a padding byte.
    return np.random.default_rng(seed).integers(1, 256, size=(m, g), dtype=np.uint8)


def spec_offset(m, j, g):
    """The byte offset formula, transcribed from NVFP4_SPEC.md."""
    return ((m // 128) * -(-g // 4) + j // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + j % 4


@pytest.mark.parametrize(
    "m, g, expected",
    [
        (0, 0, (0, 0, 32, 4, 4)),
        (1, 1, (1, 1, 32, 4, 4)),
        (128, 4, (1, 1, 32, 4, 4)),
        (129, 4, (2, 1, 32, 4, 4)),
        (129, 5, (2, 2, 32, 4, 4)),
        (4096, 448, (32, 112, 32, 4, 4)),
    ],
)
def test_block_shape(m, g, expected):
    assert block_shape(m, g) == expected
    assert swizzled_sf_shape(m, 16 * g) == swizzled_sf_shape(m, 32 * g, "mxfp4") == expected


def test_public_functions_take_k():
    linear = np.arange(3 * 8, dtype=np.uint8).reshape(3, 8)
    swizzled = swizzle_sf(linear)
    assert swizzled.shape == swizzled_sf_shape(3, 128) == swizzled_sf_shape(3, 256, "mxfp4")
    np.testing.assert_array_equal(unswizzle_sf(swizzled, 3, 128), linear)
    np.testing.assert_array_equal(unswizzle_sf(swizzled, 3, 256, "mxfp4"), linear)
    np.testing.assert_array_equal(unswizzle_sf(swizzled, 3, 128, fmt="nvfp4"), linear)


@pytest.mark.parametrize(
    "m, j, g, expected",
    [
        (0, 0, 1, 0),
        (0, 1, 5, 1),
        (0, 3, 5, 3),
        (0, 4, 5, 512),  # next 4-group tile of the same 128-row block
        (1, 0, 5, 16),  # next row of a 32-row slab is 16 bytes on
        (31, 0, 5, 496),
        (32, 0, 5, 4),  # rows 32..63 interleave at byte 4 of each 16-byte line
        (96, 2, 5, 14),
        (127, 3, 4, 511),  # last byte of the first tile
        (128, 0, 5, 1024),  # next 128-row block starts after ceil(5/4) = 2 tiles
        (129, 4, 5, 1552),  # (1 * 2 + 1) * 512 + 16
    ],
)
def test_swizzled_sf_offset_hand_values(m, j, g, expected):
    assert swizzled_sf_offset(m, j, g) == expected


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("g", GROUPS)
def test_swizzle_matches_spec_index_and_offset(m, g):
    linear = random_scales(m, g)
    swizzled = swizzle_sf(linear)
    assert swizzled.shape == block_shape(m, g)
    assert swizzled.dtype == np.uint8 and swizzled.flags.c_contiguous
    mm, jj = np.meshgrid(np.arange(m), np.arange(g), indexing="ij")
    offsets = swizzled_sf_offset(mm, jj, g)
    np.testing.assert_array_equal(offsets, spec_offset(mm, jj, g))
    np.testing.assert_array_equal(swizzled.reshape(-1)[offsets], linear)
    np.testing.assert_array_equal(
        swizzled[mm // 128, jj // 4, mm % 32, (mm % 128) // 32, jj % 4], linear
    )


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("g", GROUPS)
def test_swizzle_padding_is_zero(m, g):
    swizzled = swizzle_sf(random_scales(m, g, seed=1)).reshape(-1)
    used = np.zeros(swizzled.size, dtype=bool)
    mm, jj = np.meshgrid(np.arange(m), np.arange(g), indexing="ij")
    used[spec_offset(mm, jj, g).ravel()] = True
    assert np.all(swizzled[~used] == 0)
    assert np.all(swizzled[used] != 0)


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("g", GROUPS)
def test_unswizzle_round_trip(m, g):
    linear = random_scales(m, g, seed=2)
    back = unswizzle_groups(swizzle_sf(linear), m, g)
    assert back.shape == (m, g) and back.dtype == np.uint8 and back.flags.c_contiguous
    np.testing.assert_array_equal(back, linear)


def test_swizzle_flattens_leading_dims():
    linear = random_scales(2 * 3 * 50, 6, seed=3)
    swizzled = swizzle_sf(linear.reshape(2, 3, 50, 6))
    np.testing.assert_array_equal(swizzled, swizzle_sf(linear))
    assert swizzled.shape == (3, 2, 32, 4, 4)


def test_swizzle_rank_one_is_one_row():
    linear = np.array([7, 8, 9], dtype=np.uint8)
    np.testing.assert_array_equal(unswizzle_groups(swizzle_sf(linear), 1, 3), linear[None])


def test_swizzle_accepts_non_contiguous_input():
    linear = random_scales(130, 10, seed=4)[:, ::2]
    np.testing.assert_array_equal(unswizzle_groups(swizzle_sf(linear), 130, 5), linear)


def test_swizzled_sf_offset_widens_small_integer_dtypes():
    m = np.array([255], dtype=np.uint8)
    j = np.array([3], dtype=np.uint8)
    assert swizzled_sf_offset(m, j, 4)[0] == spec_offset(255, 3, 4) == 1023


def test_unswizzle_shape_message():
    swizzled = np.zeros((1, 1, 32, 4, 4), dtype=np.uint8)
    with pytest.raises(ValueError) as err:
        unswizzle_groups(swizzled, 129, 4)
    assert str(err.value) == (
        "swizzled must have shape (2, 1, 32, 4, 4) for m=129, groups=4, got (1, 1, 32, 4, 4)"
    )


ONE_TILE = np.zeros((1, 1, 32, 4, 4), np.uint8)


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda: swizzle_sf(np.zeros((4, 4), np.int8)), TypeError, "linear must have dtype uint8"),
        (lambda: swizzle_sf(np.uint8(3)), TypeError, "linear must be a numpy or cupy array"),
        (lambda: swizzle_sf(np.array(3, np.uint8)), ValueError, "linear must have rank >= 1"),
        (lambda: swizzle_sf([[1, 2]]), TypeError, "linear must be a numpy or cupy array, got builtins.list"),
        (lambda: unswizzle_groups(ONE_TILE[0], 1, 1), ValueError, "swizzled must have shape (1, 1, 32, 4, 4)"),
        (
            lambda: unswizzle_groups(np.zeros((1, 1, 32, 4, 4), np.float32), 1, 1),
            TypeError,
            "swizzled must have dtype uint8",
        ),
        (lambda: unswizzle_sf(ONE_TILE, -1, 16), ValueError, "m must be >= 0, got -1"),
        (lambda: unswizzle_sf(ONE_TILE, 1.0, 16), TypeError, "m must be an int, got 1.0 of type float"),
        (lambda: block_shape(1, True), TypeError, "groups must be an int"),
        (lambda: swizzled_sf_shape(1, True), TypeError, "k must be an int"),
        (lambda: swizzled_sf_shape(1, 24), ValueError, "k must be a multiple of 16 for fmt='nvfp4', got 24"),
        (lambda: swizzled_sf_shape(1, 48, "mxfp4"), ValueError, "k must be a multiple of 32 for fmt='mxfp4', got 48"),
        (lambda: unswizzle_sf(ONE_TILE, 1, 16, "fp8"), ValueError, "fmt must be 'nvfp4' or 'mxfp4', got 'fp8'"),
        (lambda: swizzled_sf_offset(0, 4, 4), ValueError, "j must satisfy 0 <= j < groups=4, got 4"),
        (lambda: swizzled_sf_offset(-3, 0, 4), ValueError, "m must be >= 0, got -3"),
        (
            lambda: swizzled_sf_offset(np.array([0.5]), 0, 4),
            TypeError,
            "m must be an int or an integer array, got dtype float64",
        ),
    ],
)
def test_validation_messages(call, exc, message):
    with pytest.raises(exc) as err:
        call()
    assert message in str(err.value)


def test_numpy_path_does_not_import_cupy():
    # Import fp4q with cupy made unimportable: the layouts and the reference work on numpy alone.
    script = """
import sys
sys.modules["cupy"] = None
from fp4q import layouts
import numpy as np
lin = np.arange(1, 11, dtype=np.uint8).reshape(2, 5)
assert (layouts.unswizzle_sf(layouts.swizzle_sf(lin), 2, 80) == lin).all()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    leading=st.lists(st.integers(0, 70), min_size=0, max_size=3),
    g=st.integers(0, 13),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_property(leading, g, seed):
    linear = np.random.default_rng(seed).integers(0, 256, size=(*leading, g), dtype=np.uint8)
    m = int(np.prod(leading))
    swizzled = swizzle_sf(linear)
    assert swizzled.shape == block_shape(m, g)
    assert int(swizzled.astype(np.int64).sum()) == int(linear.astype(np.int64).sum())
    np.testing.assert_array_equal(unswizzle_groups(swizzled, m, g), linear.reshape(m, g))


@pytest.mark.gpu
@pytest.mark.parametrize("m, g", [(1, 1), (129, 5), (256, 8), (300, 9)])
def test_cupy_matches_numpy(m, g):
    cp = pytest.importorskip("cupy")
    linear = random_scales(m, g, seed=5)
    swizzled = swizzle_sf(cp.asarray(linear))
    assert isinstance(swizzled, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(swizzled), swizzle_sf(linear))
    back = unswizzle_groups(swizzled, m, g)
    assert isinstance(back, cp.ndarray) and back.flags.c_contiguous
    np.testing.assert_array_equal(cp.asnumpy(back), linear)


@pytest.mark.gpu
def test_cupy_offsets():
    cp = pytest.importorskip("cupy")
    mm, jj = np.meshgrid(np.arange(300), np.arange(9), indexing="ij")
    offsets = swizzled_sf_offset(cp.asarray(mm), cp.asarray(jj), 9)
    assert isinstance(offsets, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(offsets), spec_offset(mm, jj, 9))
