"""fp4q in PyTorch: the ops as ``torch.ops.fp4q.*``, Python wrappers that return
torch tensors, and a vLLM-compatible ``scaled_fp4_quant``.

``import fp4q.torch`` registers the ops (``import fp4q`` never imports
torch). Every op runs fp4q's one call path (``fp4q.ops``: the same rules,
plans and kernels as the CuPy API) with outputs from torch's caching
allocator, on torch's current stream of the input's device. Each op has a
fake implementation that derives exact shapes and dtypes (symbolic sizes
too) from the same rule functions, so ``torch.compile(fullgraph=True,
dynamic=True)`` traces calls without a graph break, and CUDA graphs
(``torch.cuda.graph``, ``mode="reduce-overhead"``) capture them.

Schemas. A tensor scale is a float or a float32 device tensor; a schema
cannot take either, so each NVFP4 op has two overloads, ``.Tensor``
(defined first, so that ``torch.ops.fp4q.quantize_nvfp4(x, t)`` resolves a
tensor to it instead of converting it to a float with a host sync) and
``.default`` (a float, passed by value)::

    quantize_nvfp4.Tensor(Tensor x, Tensor tensor_sf, str sf_layout="swizzled", bool pdl=True,
                          bool fp4_dtype=False) -> (Tensor, Tensor)
    quantize_nvfp4(Tensor x, float tensor_sf, ...same...) -> (Tensor, Tensor)
    quantize_nvfp4_out.Tensor(Tensor x, Tensor tensor_sf, Tensor(a!) out, Tensor(b!) sf_out,
                              str sf_layout="swizzled", bool pdl=True) -> ()
    quantize_nvfp4_out(Tensor x, float tensor_sf, ...same...) -> ()
    quantize_nvfp4_dynamic(Tensor x, str sf_layout="swizzled", bool pdl=True,
                           bool fp4_dtype=False) -> (Tensor, Tensor, Tensor)
    quantize_nvfp4_dynamic_out(Tensor x, Tensor(a!) out, Tensor(b!) sf_out,
                               str sf_layout="swizzled", bool pdl=True) -> Tensor
    quantize_mxfp4(Tensor x, str mx_mode="rceil", str sf_layout="swizzled", bool pdl=True,
                   bool fp4_dtype=False) -> (Tensor, Tensor)
    quantize_mxfp4_out(Tensor x, Tensor(a!) out, Tensor(b!) sf_out, str mx_mode="rceil",
                       str sf_layout="swizzled", bool pdl=True) -> ()
    dequantize_nvfp4.Tensor(Tensor q, Tensor sf, Tensor tensor_sf, str sf_layout="swizzled",
                            str dtype="bfloat16", bool pdl=True) -> Tensor
    dequantize_nvfp4(Tensor q, Tensor sf, float tensor_sf, ...same...) -> Tensor
    dequantize_nvfp4_out.Tensor(Tensor q, Tensor sf, Tensor tensor_sf, Tensor(a!) out,
                                str sf_layout="swizzled", str dtype="bfloat16", bool pdl=True) -> ()
    dequantize_nvfp4_out(Tensor q, Tensor sf, float tensor_sf, ...same...) -> ()
    dequantize_mxfp4(Tensor q, Tensor sf, str sf_layout="swizzled", str dtype="bfloat16",
                     bool pdl=True) -> Tensor
    dequantize_mxfp4_out(Tensor q, Tensor sf, Tensor(a!) out, str sf_layout="swizzled",
                         str dtype="bfloat16", bool pdl=True) -> ()
    global_scale(Tensor x, bool pdl=True) -> Tensor

``quantize_nvfp4_dynamic`` computes the tensor scale on the device and
returns it third, ``quantize_nvfp4_dynamic_out`` writes ``out`` /
``sf_out`` and returns it (one launch where the call path can, as
``fp4q.quantize_nvfp4(x, "dynamic")``, with every rule checked first).
``config=`` (a Python object)
and ``stream=`` have no place in a schema: wrappers given either call the
ops layer directly, eagerly, and under ``torch.compile`` that call is a
graph break (``torch.compiler.disable``).
"""

from __future__ import annotations

import torch

from ..kernels.quantize import MX_MODES
from ..ops.arrays import check_choice
from ..ops.dequantize import dequantize
from ..ops.global_scale import global_scale as _global_scale
from ..ops.quantize import DYNAMIC, MXFP4, NVFP4, Format, check_dynamic, quantize
from .library import DTYPE_NAMES, OUTPUTS, q_dtype, quantize_shapes_of

ops = torch.ops.fp4q


def _is_tensor(tensor_sf) -> bool:
    return isinstance(tensor_sf, torch.Tensor)


def _missing_outputs(fmt: Format, x, sf_layout, out, sf_out, fp4_dtype, sf_dtype):
    """``out`` and ``sf_out``, whichever is None allocated on torch's current stream (shapes
    by the ops layer's rules), for an out= op."""
    _, q_shape, sf_shape = quantize_shapes_of(x, fmt, sf_layout)
    if out is None:
        out = torch.empty(q_shape, dtype=q_dtype(fp4_dtype), device=x.device)
    if sf_out is None:
        sf_out = torch.empty(sf_shape, dtype=sf_dtype, device=x.device)
    return out, sf_out


@torch.compiler.disable
def _eager_quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt: Format, fp4_dtype):
    """The ops layer called directly, for what a schema cannot carry (config=, stream=)."""
    outputs = OUTPUTS[fp4_dtype]
    if type(tensor_sf) is str:
        check_dynamic(tensor_sf)
        return quantize(x, DYNAMIC, sf_layout, out, sf_out, stream, config, pdl, fmt, outputs)
    return quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, fmt, outputs)


@torch.compiler.disable
def _eager_dequantize(fmt, q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl):
    return dequantize(fmt, q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl, OUTPUTS[0])


def quantize_nvfp4(x, tensor_sf, *, sf_layout="swizzled", out=None, sf_out=None, stream=None, config=None,
                   pdl=True, fp4_dtype=False):
    """``fp4q.quantize_nvfp4`` for torch tensors: returns ``(q, sf)`` as torch tensors.

    ``q`` is uint8 ``(..., K // 2)`` (``torch.float4_e2m1fn_x2`` with
    ``fp4_dtype=True``), ``sf`` float8_e4m3fn, ``(ceil(M/128), ceil(K/64),
    32, 4, 4)`` swizzled or ``(..., K // 16)`` linear. ``tensor_sf`` is a
    float, a float32 CUDA tensor of shape ``()`` or ``(1,)``, or
    ``"dynamic"`` (then ``(q, sf, tensor_sf_device)``). ``out`` / ``sf_out``
    may be uint8 or the fp4 / fp8 dtypes. Runs on torch's current stream;
    ``stream=`` and ``config=`` call the ops layer directly (eager only: a
    graph break under torch.compile).
    """
    if stream is not None or config is not None:
        return _eager_quantize(x, tensor_sf, sf_layout, out, sf_out, stream, config, pdl, NVFP4, fp4_dtype)
    if type(tensor_sf) is str:
        check_dynamic(tensor_sf)
        # One op either way: a single launch where the ops layer can (its docstring).
        if out is None and sf_out is None:
            return ops.quantize_nvfp4_dynamic.default(x, sf_layout, pdl, fp4_dtype)
        if out is None or sf_out is None:
            out, sf_out = _missing_outputs(NVFP4, x, sf_layout, out, sf_out, fp4_dtype, torch.float8_e4m3fn)
        return out, sf_out, ops.quantize_nvfp4_dynamic_out.default(x, out, sf_out, sf_layout, pdl)
    device = _is_tensor(tensor_sf)
    if out is None and sf_out is None:
        op = ops.quantize_nvfp4.Tensor if device else ops.quantize_nvfp4.default
        return op(x, tensor_sf, sf_layout, pdl, fp4_dtype)
    if out is None or sf_out is None:
        out, sf_out = _missing_outputs(NVFP4, x, sf_layout, out, sf_out, fp4_dtype, torch.float8_e4m3fn)
    (ops.quantize_nvfp4_out.Tensor if device else ops.quantize_nvfp4_out.default)(
        x, tensor_sf, out, sf_out, sf_layout, pdl)
    return out, sf_out


def quantize_mxfp4(x, *, mode="rceil", sf_layout="swizzled", out=None, sf_out=None, stream=None, config=None,
                   pdl=True, fp4_dtype=False):
    """``fp4q.quantize_mxfp4`` for torch tensors: ``(q, sf)``, ``sf`` float8_e8m0fnu
    ``(ceil(M/128), ceil(K/128), 32, 4, 4)`` swizzled or ``(..., K // 32)``
    linear; everything else as ``quantize_nvfp4``."""
    if stream is not None or config is not None:
        check_choice("mode", mode, MX_MODES)
        return _eager_quantize(x, None, sf_layout, out, sf_out, stream, config, pdl, MXFP4[mode], fp4_dtype)
    if out is None and sf_out is None:
        return ops.quantize_mxfp4.default(x, mode, sf_layout, pdl, fp4_dtype)
    if out is None or sf_out is None:
        check_choice("mode", mode, MX_MODES)
        out, sf_out = _missing_outputs(MXFP4[mode], x, sf_layout, out, sf_out, fp4_dtype, torch.float8_e8m0fnu)
    ops.quantize_mxfp4_out.default(x, out, sf_out, mode, sf_layout, pdl)
    return out, sf_out


def _dtype_name(dtype) -> str:
    name = DTYPE_NAMES.get(dtype) if isinstance(dtype, (str, torch.dtype)) else None
    if name is None:
        raise ValueError(f"dtype must be 'bfloat16', 'float32', torch.bfloat16 or torch.float32, got {dtype!r}")
    return name


def dequantize_nvfp4(q, sf, tensor_sf, *, sf_layout="swizzled", dtype="bfloat16", out=None, stream=None,
                     config=None, pdl=True):
    """``fp4q.dequantize_nvfp4`` for torch tensors: a bfloat16 (or float32) tensor of
    shape ``(..., K)``. ``dtype`` is ``"bfloat16"`` / ``"float32"`` or the torch
    dtype; ``tensor_sf`` a float or a float32 CUDA tensor."""
    dtype = _dtype_name(dtype)
    if stream is not None or config is not None:
        return _eager_dequantize("nvfp4", q, sf, tensor_sf, sf_layout, dtype, out, stream, config, pdl)
    device = _is_tensor(tensor_sf)
    if out is None:
        op = ops.dequantize_nvfp4.Tensor if device else ops.dequantize_nvfp4.default
        return op(q, sf, tensor_sf, sf_layout, dtype, pdl)
    (ops.dequantize_nvfp4_out.Tensor if device else ops.dequantize_nvfp4_out.default)(
        q, sf, tensor_sf, out, sf_layout, dtype, pdl)
    return out


def dequantize_mxfp4(q, sf, *, sf_layout="swizzled", dtype="bfloat16", out=None, stream=None, config=None,
                     pdl=True):
    """``fp4q.dequantize_mxfp4`` for torch tensors; as ``dequantize_nvfp4``, without a tensor scale."""
    dtype = _dtype_name(dtype)
    if stream is not None or config is not None:
        return _eager_dequantize("mxfp4", q, sf, None, sf_layout, dtype, out, stream, config, pdl)
    if out is None:
        return ops.dequantize_mxfp4.default(q, sf, sf_layout, dtype, pdl)
    ops.dequantize_mxfp4_out.default(q, sf, out, sf_layout, dtype, pdl)
    return out


@torch.compiler.disable
def _eager_global_scale(x, stream, pdl):
    return _global_scale(x, stream=stream, pdl=pdl, outputs=OUTPUTS[0])


def global_scale(x, *, stream=None, pdl=True):
    """``fp4q.global_scale`` for torch tensors: a float32 CUDA tensor of shape ``()``."""
    if stream is not None:
        return _eager_global_scale(x, stream, pdl)
    return ops.global_scale.default(x, pdl)


def scaled_fp4_quant(input, input_global_scale, is_sf_swizzled_layout=True):
    """vLLM's ``scaled_fp4_quant`` contract on fp4q's kernels.

    ``input`` (bf16 or fp16, last dimension ``n`` a multiple of 16, any
    leading dimensions; 1-D is one row) is flattened to ``[m, n]``;
    ``input_global_scale`` is the float32 CUDA tensor ``448 * 6 / amax``.
    Returns ``(q, scale)``: ``q`` uint8 ``[m, n // 2]``; ``scale``
    float8_e4m3fn, ``[round_up(m, 128), round_up(n // 16, 4)]`` holding the
    swizzled 128x4 layout (the same bytes as fp4q's 5-D swizzled scales) or
    ``[m, n // 16]`` linear. The bits are the spec's, which can differ from
    vLLM's CUDA kernel (see README).
    """
    if input.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"input must be bfloat16 or float16, got {input.dtype}")
    if input.dim() == 0:
        raise ValueError("input must have at least 1 dimension, got shape ()")
    rows = input.reshape(-1, input.shape[-1])
    layout = "swizzled" if is_sf_swizzled_layout else "linear"
    op = ops.quantize_nvfp4.Tensor if _is_tensor(input_global_scale) else ops.quantize_nvfp4.default
    q, sf = op(rows, input_global_scale, layout, True, False)
    if is_sf_swizzled_layout:
        sf = sf.view(sf.shape[0] * 128, sf.shape[1] * 4)
    return q, sf
