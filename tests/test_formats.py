"""fp4q.numerics.formats: rounding float32 to the storage dtypes, and what importing fp4q loads."""

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from fp4q.numerics.formats import input_float32, round_to


def _float32_patterns(count: int, seed: int) -> np.ndarray:
    """Random float32 bit patterns plus the boundaries of the bf16 and fp16 roundings."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, size=count, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0x00000000, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x3F808000,
                      0x3F818000, 0x3F807FFF, 0x00008000, 0x00018000, 0x7F800000, 0xFF800000, 0x477FF000,
                      0x477FEFFF, 0x33800000, 0x33800001, 0xB3000000], dtype=np.uint32)
    return np.concatenate([bits, edges]).view(np.float32)


def test_round_to_bfloat16_is_round_to_nearest_even():
    y = _float32_patterns(200_000, 1)
    got = round_to(y, "bfloat16")
    with np.errstate(all="ignore"):
        want = y.astype(ml_dtypes.bfloat16).view(np.uint16)
    finite = ~np.isnan(y)
    np.testing.assert_array_equal(got[finite], want[finite])
    assert (got[~finite] == 0x7FFF).all() and (~finite).any()


def test_round_to_float16_is_round_to_nearest_even():
    y = _float32_patterns(200_000, 2)
    got = round_to(y, "float16").view(np.uint16)
    with np.errstate(all="ignore"):
        want = y.astype(np.float16).view(np.uint16)
    finite = ~np.isnan(y)
    np.testing.assert_array_equal(got[finite], want[finite])
    assert (got[~finite] == 0x7FFF).all()


def test_round_to_float32_is_the_identity():
    y = _float32_patterns(1000, 3)
    assert round_to(y, "float32") is y


def test_round_to_rejects_other_dtypes():
    with pytest.raises(TypeError, match="y must have dtype float32, got float64"):
        round_to(np.zeros(2), "bfloat16")


def test_input_float32_reads_bfloat16_by_name_and_its_bits():
    bits = np.array([0x3F80, 0xC040, 0x7F80, 0x0001], np.uint16)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(input_float32(bits), want)
    np.testing.assert_array_equal(input_float32(bits.view(ml_dtypes.bfloat16)), want)
    with pytest.raises(TypeError, match="x must have dtype bfloat16, uint16 \\(bf16 bits\\), float16 or float32, got int16"):
        input_float32(bits.view(np.int16))


def test_importing_fp4q_loads_neither_ml_dtypes_nor_cupy_nor_torch():
    script = "import sys, fp4q; print(sorted(m for m in ('ml_dtypes', 'cupy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
