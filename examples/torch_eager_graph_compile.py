"""NVFP4 in PyTorch: one function run eagerly, captured in a CUDA graph and compiled with
torch.compile(fullgraph=True), each run's bytes checked against the spec's numpy reference.

    python examples/torch_eager_graph_compile.py [M K]
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import fp4q.torch as ft
from fp4q import reference


def quantize_and_back(x: torch.Tensor):
    """What a layer would run: NVFP4 with the global scale computed on the device (no host sync),
    then bf16 values back from the codes and scales."""
    q, sf, scale = ft.quantize_nvfp4(x, "dynamic")  # uint8 codes, float8_e4m3fn swizzled scales, float32 ()
    y = ft.dequantize_nvfp4(q, sf, scale, dtype=torch.bfloat16)
    return q, sf, scale, y


def compiled(backend: str = "inductor"):
    """quantize_and_back under torch.compile: fp4q's ops trace without a graph break."""
    return torch.compile(quantize_and_back, backend=backend, fullgraph=True)


def host_bytes(t: torch.Tensor) -> np.ndarray:
    """A tensor's bytes on the host, in its shape, as unsigned integers of its element size."""
    t = t.detach().cpu().contiguous()
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32}[t.element_size()]
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()]).numpy().view(unsigned)


def check(x: torch.Tensor, outputs) -> None:
    """Raise AssertionError unless every output is the reference's for input x."""
    x_bits = host_bytes(x)
    scale = reference.global_scale(x_bits)
    q, sf = reference.quantize_nvfp4(x_bits, scale)
    y = reference.dequantize_nvfp4(q, sf, scale, dtype="bfloat16")
    for name, got, want in zip(("q", "sf", "scale", "y"), outputs, (q, sf, scale, y)):
        got = host_bytes(got)
        want = np.asarray(want)
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), f"{name} differs from the reference"


def main(m: int = 1024, k: int = 4096) -> None:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)

    check(x, quantize_and_back(x))                        # eager

    static_x = x.clone()                                  # the captured input buffer
    quantize_and_back(static_x)                           # compiles and loads the kernels before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = quantize_and_back(static_x)
    new_x = torch.randn_like(x)
    static_x.copy_(new_x)
    graph.replay()                                        # reads static_x's new values
    check(new_x, static_out)

    check(x, compiled()(x))                               # torch.compile, inductor
    print(f"torch {m}x{k}: eager, CUDA graph replay and torch.compile(fullgraph=True) "
          "all equal to fp4q.reference")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
