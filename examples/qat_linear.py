"""Quantization-aware training with NVFP4 fake quantization: a Linear layer whose weight
(one scale per 16x16 block, as NVFP4 training quantizes weights) and input (groups of 16
with stochastic rounding, a new offset each step) are fake-quantized in the forward pass,
trained for a few steps with the straight-through gradient (zero where the weight
saturated). Each step's fake-quantized operands are checked byte for byte against the
spec's numpy reference.

    python examples/qat_linear.py [STEPS]
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import fp4q.torch as ft
from fp4q import reference

SEED = 1234  # the stochastic rounding's key; the step number is its offset


class QATLinear(torch.nn.Module):
    """``y = fq(x) @ fq(W)^T``: the weight fake-quantized in 16x16 blocks, the input in
    groups of 16 rounded stochastically, each under its global scale computed on the device."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        weight = torch.randn(out_features, in_features, device="cuda") / in_features**0.5
        self.weight = torch.nn.Parameter(weight.to(torch.bfloat16))

    def operands(self, x: torch.Tensor, step: int):
        """The fake-quantized input and weight, and the scales they were quantized with."""
        x_scale, w_scale = ft.global_scale(x.detach()), ft.global_scale(self.weight.detach())  # no gradient
        xq = ft.fake_quantize_nvfp4_ste(x, x_scale, stochastic=True, seed=SEED, offset=step)
        wq = ft.fake_quantize_nvfp4_ste(self.weight, w_scale, block_2d=True, mask_saturated=True)
        return xq, wq, x_scale, w_scale

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        xq, wq, _, _ = self.operands(x, step)
        return xq @ wq.t()


def host_bits(t: torch.Tensor) -> np.ndarray:
    """A bf16 tensor's bits on the host, as uint16 (what the reference takes)."""
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)


def check(x: torch.Tensor, w: torch.Tensor, step: int, got) -> None:
    """Raise AssertionError unless the fake-quantized operands ``got`` (xq, wq, x_scale,
    w_scale) are the reference's for this input, weight and step."""
    xq, wq, x_scale, w_scale = got
    x_bits, w_bits = host_bits(x), host_bits(w)
    assert float(x_scale) == float(reference.global_scale(x_bits)), "the input's scale differs from the reference"
    assert float(w_scale) == float(reference.global_scale(w_bits)), "the weight's scale differs from the reference"
    want_x = reference.fake_quantize_nvfp4(x_bits, np.float32(x_scale.item()), stochastic=True, seed=SEED,
                                           offset=step)
    want_w = reference.fake_quantize_nvfp4(w_bits, np.float32(w_scale.item()), block_2d=True)
    assert host_bits(xq).tobytes() == want_x.tobytes(), "the fake-quantized input differs from the reference"
    assert host_bits(wq).tobytes() == want_w.tobytes(), "the fake-quantized weight differs from the reference"


def main(steps: int = 20, m: int = 256, k: int = 512, n: int = 256) -> None:
    torch.manual_seed(0)
    layer = QATLinear(k, n)
    target = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    losses = []
    for step in range(steps):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        check(x, layer.weight, step, layer.operands(x, step))
        loss = (layer(x, step) - x @ target.t()).float().square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], f"training did not reduce the loss: {losses}"
    print(f"QAT Linear {m}x{k} -> {n}, {steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}; every step's "
          "fake-quantized input and weight equal to fp4q.reference")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:2]))
