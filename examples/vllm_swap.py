"""A serving engine's NVFP4 activation quantization served by fp4q.

Engines such as vLLM quantize a linear layer's input with
``scaled_fp4_quant(input, input_global_scale, is_sf_swizzled_layout=True)``;
``fp4q.torch.scaled_fp4_quant`` takes the same arguments and returns the same
shapes and dtypes, so the swap is one name: wherever the engine calls its
``scaled_fp4_quant``, call fp4q's. Here a stand-in for the engine's ops module
makes that call, and the bytes are checked against the spec's numpy reference.

    python examples/vllm_swap.py [TOKENS HIDDEN]
"""

from __future__ import annotations

import sys
import types

import numpy as np
import torch

import fp4q.torch
from fp4q import reference

# The engine's ops module (vLLM: vllm._custom_ops), with fp4q's function in the place of its own.
ops = types.SimpleNamespace(scaled_fp4_quant=fp4q.torch.scaled_fp4_quant)


def quantize_layer_input(x: torch.Tensor, input_global_scale: torch.Tensor, swizzled: bool = True):
    """The activation side of an NVFP4 linear layer, as the engine writes it."""
    return ops.scaled_fp4_quant(x, input_global_scale, is_sf_swizzled_layout=swizzled)


def expected_shapes(tokens: int, hidden: int, swizzled: bool):
    """The contract: uint8 codes [m, n // 2]; e4m3 scales [round_up(m, 128), round_up(n // 16, 4)]
    in the 128x4 swizzled layout a block-scaled GEMM reads, or [m, n // 16] linear."""
    round_up = lambda v, to: -(-v // to) * to  # noqa: E731
    sf = (round_up(tokens, 128), round_up(hidden // 16, 4)) if swizzled else (tokens, hidden // 16)
    return ((tokens, hidden // 2), torch.uint8), (sf, torch.float8_e4m3fn)


def check(x: torch.Tensor, input_global_scale: torch.Tensor, q: torch.Tensor, sf: torch.Tensor,
          swizzled: bool) -> None:
    """Raise AssertionError unless q and sf are the reference's bytes, in the contract's shapes."""
    (q_shape, q_dtype), (sf_shape, sf_dtype) = expected_shapes(*x.shape, swizzled)
    assert (tuple(q.shape), q.dtype, tuple(sf.shape), sf.dtype) == (q_shape, q_dtype, sf_shape, sf_dtype)
    x_bits = x.cpu().view(torch.int16).numpy().view(np.uint16)
    want_q, want_sf = reference.quantize_nvfp4(x_bits, float(input_global_scale),
                                               sf_layout="swizzled" if swizzled else "linear")
    assert np.array_equal(q.cpu().numpy(), want_q), "codes differ from the reference"
    # The engine's 2-D swizzled scales hold the same bytes, in the same order, as the spec's 5-D layout.
    got_sf = sf.cpu().view(torch.uint8).numpy().reshape(-1)
    assert np.array_equal(got_sf, want_sf.reshape(-1)), "scales differ from the reference"


def main(tokens: int = 300, hidden: int = 4096) -> None:
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    # An engine takes the scale from calibration; 448 * 6 / amax is what calibration computes.
    input_global_scale = (448 * 6 / x.abs().amax().float()).reshape(1)
    for swizzled in (True, False):
        q, sf = quantize_layer_input(x, input_global_scale, swizzled)
        check(x, input_global_scale, q, sf, swizzled)
    print(f"engine swap {tokens}x{hidden}: scaled_fp4_quant's codes and scales (swizzled and linear) "
          "equal to fp4q.reference")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
