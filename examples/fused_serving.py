"""The fused serving quantizers with CuPy: a decoder layer's two quantized activations, each in one
kernel, checked against the spec's numpy reference byte for byte.

    python examples/fused_serving.py [M D F]

- before attention: add+RMSNorm (``residual += x``, then RMSNorm of it) into NVFP4;
- before the down projection: SiLU·mul of the gate and up projections into NVFP4.
"""

from __future__ import annotations

import sys

import numpy as np

import fp4q
from fp4q import reference


def bf16(rng, shape, scale: float = 1.0, mean: float = 0.0) -> np.ndarray:
    """Random normal values as bf16 bits (uint16): bf16 is the top half of a float32."""
    x = np.float32(mean) + rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def inputs(m: int, d: int, f: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A layer's tensors as bf16 bits: the attention output x and the residual stream (m, d), the
    norm's weight (d,), the gate and up projections side by side (m, 2f)."""
    rng = np.random.default_rng(seed)
    return {"x": bf16(rng, (m, d)), "residual": bf16(rng, (m, d), 4.0), "weight": bf16(rng, (d,), 0.1, 1.0),
            "gate_up": bf16(rng, (m, 2 * f))}


def layer(cp, host: dict[str, np.ndarray], eps: float = 1e-6):
    """What an engine runs: both fused quantizers, each with a tensor scale of 1.0 (an engine
    passes its calibrated one). The residual is updated in place on the device."""
    x, weight, gate_up = (cp.asarray(host[k]) for k in ("x", "weight", "gate_up"))
    residual = cp.asarray(host["residual"])
    q_norm, sf_norm = fp4q.rms_norm_quantize_nvfp4(x, weight, 1.0, eps=eps, residual=residual)
    q_mlp, sf_mlp = fp4q.silu_and_mul_quantize_nvfp4(gate_up, 1.0)
    return residual, q_norm, sf_norm, q_mlp, sf_mlp


def check(host: dict[str, np.ndarray], residual, q_norm, sf_norm, q_mlp, sf_mlp, eps: float = 1e-6) -> None:
    """Raise AssertionError unless every output is the reference's (numpy arrays in)."""
    want_residual = host["residual"].copy()
    want_q, want_sf = reference.rms_norm_quantize_nvfp4(host["x"], host["weight"], np.float32(1.0), eps=eps,
                                                        residual=want_residual)
    assert np.array_equal(residual, want_residual), "the updated residual differs"
    assert np.array_equal(q_norm, want_q), f"norm codes differ in {np.count_nonzero(q_norm != want_q)} bytes"
    assert np.array_equal(sf_norm, want_sf), f"norm scales differ in {np.count_nonzero(sf_norm != want_sf)} bytes"
    want_q, want_sf = reference.silu_and_mul_quantize_nvfp4(host["gate_up"], np.float32(1.0))
    assert np.array_equal(q_mlp, want_q), f"SiLU·mul codes differ in {np.count_nonzero(q_mlp != want_q)} bytes"
    assert np.array_equal(sf_mlp, want_sf), f"SiLU·mul scales differ in {np.count_nonzero(sf_mlp != want_sf)} bytes"


def main(m: int = 512, d: int = 4096, f: int = 14336) -> None:
    import cupy as cp

    host = inputs(m, d, f)
    outputs = layer(cp, host)
    check(host, *(cp.asnumpy(o) for o in outputs))
    print(f"fused serving {m} tokens, d={d}, f={f}: add+RMSNorm codes {outputs[1].shape}, SiLU·mul codes "
          f"{outputs[3].shape}, the residual and all codes and scales equal to fp4q.reference")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
