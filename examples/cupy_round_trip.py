"""NVFP4 with CuPy: quantize bf16 activations, dequantize them back, and check both against the
spec's numpy reference, byte for byte.

    python examples/cupy_round_trip.py [M K]
"""

from __future__ import annotations

import sys

import numpy as np

import fp4q
from fp4q import reference


def bf16_activations(m: int, k: int, seed: int = 0) -> np.ndarray:
    """Random normal activations as bf16 bits (uint16): bf16 is the top half of a float32."""
    x = np.random.default_rng(seed).standard_normal((m, k), dtype=np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def round_trip(cp, x_bits: np.ndarray):
    """What an application runs: the scale, the codes and scales, and bf16 values back."""
    x = cp.asarray(x_bits)                        # on the GPU: (M, K) bf16 bits
    scale = fp4q.global_scale(x)                  # device float32 scalar, 448 * 6 / amax(|x|)
    q, sf = fp4q.quantize_nvfp4(x, scale)         # (M, K/2) uint8 codes, swizzled e4m3 scales
    y = fp4q.dequantize_nvfp4(q, sf, scale, dtype="bfloat16")  # (M, K) bf16 bits
    return scale, q, sf, y


def check(x_bits, scale, q, sf, y) -> None:
    """Raise AssertionError unless every output is the reference's (numpy arrays in)."""
    want_scale = reference.global_scale(x_bits)
    assert scale.tobytes() == want_scale.tobytes(), f"global scale {scale} != {want_scale}"
    want_q, want_sf = reference.quantize_nvfp4(x_bits, want_scale)
    assert np.array_equal(q, want_q), f"codes differ in {np.count_nonzero(q != want_q)} bytes"
    assert np.array_equal(sf, want_sf), f"scales differ in {np.count_nonzero(sf != want_sf)} bytes"
    want_y = reference.dequantize_nvfp4(want_q, want_sf, want_scale, dtype="bfloat16")
    assert np.array_equal(y, want_y), f"dequantized values differ in {np.count_nonzero(y != want_y)} elements"


def main(m: int = 4096, k: int = 7168) -> None:
    import cupy as cp

    x_bits = bf16_activations(m, k)
    scale, q, sf, y = round_trip(cp, x_bits)
    check(x_bits, cp.asnumpy(scale).reshape(()), cp.asnumpy(q), cp.asnumpy(sf), cp.asnumpy(y))
    print(f"cupy round trip {m}x{k}: global scale {float(scale):.4g}, codes {q.shape}, scales {sf.shape}, "
          "dequantized bf16: all equal to fp4q.reference")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
