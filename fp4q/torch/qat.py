"""Quantization-aware training: ``fake_quantize_nvfp4`` with a straight-through gradient.

``fake_quantize_nvfp4_ste(x, tensor_sf, ...)`` returns ``fp4q.torch.fake_quantize_nvfp4(x,
tensor_sf, ...)`` (the NVFP4 value each element of ``x`` stands for, in ``x``'s dtype) and
passes the gradient through unchanged: ``dL/dx = dL/dy``, as if the quantizer were the
identity (the straight-through estimator). With ``mask_saturated=True`` the gradient is
zero where the input saturated, which this module defines as: ``|x|`` (in float32) is
larger than the largest magnitude of the output ``y`` (as returned, in ``x``'s dtype) over
the element's scale group, its 16 values along K, or its 16x16 block with ``block_2d``.

With round-to-nearest and the map-to-6 scale this is exactly the e2m1 clamp,
``|x * inv| > 6``, wherever the scale byte is a normal e4m3 number or saturates at 448: the
group's amax times ``inv`` then lies within an e4m3 rounding (``1 +- 2**-4``) of 6 or above
it, so it always rounds to 6 and the group's largest output is ``6 * d`` (in ``x``'s
dtype). Where the scale is an e4m3 subnormal (``amax * tensor_sf / 6 < 2**-6``), where 4/6
keeps the map-to-4 scale, or where stochastic rounding takes the largest value down, the
group's largest output may be below ``6 * d``, and the values above it are masked too: the
output holds them at the group's top level. NaN compares false and
keeps its gradient. The mask is not defined with ``hadamard``, whose groups are mixed by
the transform: that combination is refused.
"""

from __future__ import annotations

import torch

from ..numerics.training import GROUP


def saturated(x: torch.Tensor, y: torch.Tensor, block_2d: bool) -> torch.Tensor:
    """The elements of ``x`` whose magnitude is larger than that of every output of their
    scale group in ``y`` (``fake_quantize_nvfp4(x, ...)``): bool, ``x``'s shape."""
    k = x.shape[-1]
    ax = x.detach().float().abs().reshape(-1, k // GROUP, GROUP)
    ay = y.detach().float().abs().reshape(-1, k // GROUP, GROUP)
    if block_2d:
        blocks = ay.reshape(-1, GROUP, k // GROUP, GROUP)
        top = blocks.amax(dim=(1, 3), keepdim=True).expand_as(blocks).reshape(ay.shape)
    else:
        top = ay.amax(dim=-1, keepdim=True)
    return (ax > top).reshape(x.shape)


class FakeQuantizeNVFP4STE(torch.autograd.Function):
    """``fake_quantize_nvfp4`` forward, the straight-through gradient backward (masked where
    ``mask_saturated``); the tensor scale and the options get no gradient."""

    @staticmethod
    def forward(ctx, x, tensor_sf, block_2d, stochastic, seed, offset, hadamard, four_over_six, mask_saturated):
        from . import fake_quantize_nvfp4  # fp4q.torch writes its wrappers after importing this module

        y = fake_quantize_nvfp4(x, tensor_sf, block_2d=block_2d, stochastic=stochastic, seed=seed, offset=offset,
                                hadamard=hadamard, four_over_six=four_over_six)
        ctx.mask_saturated = mask_saturated
        if mask_saturated:
            ctx.save_for_backward(saturated(x, y, block_2d))
        return y

    @staticmethod
    def backward(ctx, grad):
        if ctx.mask_saturated:
            (mask,) = ctx.saved_tensors
            grad = grad.masked_fill(mask, 0)
        return grad, None, None, None, None, None, None, None, None


def fake_quantize_nvfp4_ste(x: torch.Tensor, tensor_sf, *, block_2d: bool = False, stochastic: bool = False,
                            seed: int = 0, offset: int = 0, hadamard: int | None = None, four_over_six: bool = False,
                            mask_saturated: bool = False) -> torch.Tensor:
    """``fake_quantize_nvfp4(x, tensor_sf, ...)`` (bf16 or fp16 ``x``, a float or a float32 CUDA
    tensor scale, the same options) with the straight-through gradient; ``mask_saturated``: zero
    where the input saturated (this module's docstring defines it; not with ``hadamard``)."""
    if not isinstance(mask_saturated, bool):
        raise TypeError(f"mask_saturated must be a bool, got {mask_saturated!r} ({type(mask_saturated).__name__})")
    if mask_saturated and hadamard is not None:
        raise ValueError(f"mask_saturated=True cannot be combined with hadamard={hadamard!r}: the transform mixes "
                         "the values of a group, so no input value saturates on its own")
    if not x.is_floating_point():
        raise TypeError(f"x must be a bfloat16 or float16 tensor (its gradient flows back), got {x.dtype}")
    return FakeQuantizeNVFP4STE.apply(x, tensor_sf, block_2d, stochastic, seed, offset, hadamard, four_over_six,
                                      mask_saturated)
