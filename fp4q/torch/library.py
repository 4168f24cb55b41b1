"""The torch library ``fp4q``: the ops' schemas, their CUDA kernels (fp4q's one call
path with outputs from torch's caching allocator) and their fake implementations.
Importing this module registers them; ``fp4q.torch`` is the public face."""

from __future__ import annotations

import threading

import torch

from ..kernels.dequantize import GROUP_SIZE, OUT_DTYPES
from ..kernels.quantize import MX_MODES, SF_LAYOUTS
from ..ops.arrays import (
    Q_DTYPES,
    SF_DTYPES,
    VALUE_DTYPES,
    Operand,
    check_choice,
    check_operand,
    device_scale,
    tensor_scale,
    torch_operand,
)
from ..ops.dequantize import codes_view, dequantize
from ..ops.dequantize import output_shapes as dequantize_shapes
from ..ops.global_scale import global_scale as _global_scale
from ..ops.global_scale import input_view as scale_input_view
from ..ops.plans import PLAN_CAPACITY, put_bounded
from ..ops.quantize import DYNAMIC, MXFP4, NVFP4, Format, input_view, quantize
from ..ops.quantize import output_shapes as quantize_shapes
from ..ops.streams import torch_current_stream

_ROLE_DTYPES = {"q": torch.uint8, "sf16": torch.float8_e4m3fn, "sf32": torch.float8_e8m0fnu,
                "bfloat16": torch.bfloat16, "float32": torch.float32, "scale": torch.float32}
DTYPE_NAMES = {"bfloat16": "bfloat16", "float32": "float32", torch.bfloat16: "bfloat16", torch.float32: "float32"}
_devices: dict[int, torch.device] = {}


def _device(ordinal: int) -> torch.device:
    found = _devices.get(ordinal)
    if found is None:
        found = _devices[ordinal] = torch.device("cuda", ordinal)
    return found


class TorchOutputs:
    """The ops layer's ``outputs(role, shape, device, stream) -> (array, address)`` on torch's
    caching allocator: uint8 codes (``float4_e2m1fn_x2`` with ``fp4_dtype``),
    float8_e4m3fn / float8_e8m0fnu scales, bfloat16 / float32 values, float32
    global scales."""

    __slots__ = ("_dtypes", "_strides", "_lock")

    def __init__(self, fp4_dtype: bool) -> None:
        self._dtypes = dict(_ROLE_DTYPES, q=torch.float4_e2m1fn_x2) if fp4_dtype else _ROLE_DTYPES
        self._strides: dict[tuple, tuple] = {}  # C-contiguous strides by shape, as many as the plans
        self._lock = threading.Lock()

    def _contiguous_strides(self, shape: tuple) -> tuple:
        strides, step = [], 1
        for size in reversed(shape):
            strides.append(step)
            step *= max(size, 1)
        found = tuple(reversed(strides))
        with self._lock:
            put_bounded(self._strides, shape, found, PLAN_CAPACITY)
        return found

    def __call__(self, role: str, shape: tuple, device: int, stream: int) -> tuple[torch.Tensor, int]:
        dtype = self._dtypes[role]
        where = _devices.get(device) or _device(device)
        # empty_strided: torch.empty derives the same strides, at about 1 us more per call.
        strides = self._strides.get(shape)
        if strides is None:
            strides = self._contiguous_strides(shape)
        if stream == torch_current_stream(device):
            t = torch.empty_strided(shape, strides, dtype=dtype, device=where)
        else:
            # torch's caching allocator hands a freed block only to later
            # allocations on the stream it was allocated on, in that stream's
            # order. Allocated on the launch stream, an output the caller drops
            # at once is reused only by work queued behind the kernel. (Allocating
            # on the current stream plus record_stream would be safe too, but
            # costs an event per block when it is freed.) Only a call given a
            # stream= other than torch's current one takes this path.
            with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=where)):
                t = torch.empty_strided(shape, strides, dtype=dtype, device=where)
        return t, t.data_ptr()


OUTPUTS = (TorchOutputs(False), TorchOutputs(True))


# ----------------------------------------------------------------- eager kernels
# Registered for CUDA (and CPU, where the ops layer's rules name a host tensor
# as such): the op's arguments go straight into the ops layer's call path.
def _quantize_nvfp4(x, tensor_sf, sf_layout="swizzled", pdl=True, fp4_dtype=False):
    return quantize(x, tensor_sf, sf_layout, None, None, None, None, pdl, NVFP4, OUTPUTS[fp4_dtype])


def _quantize_nvfp4_dynamic(x, sf_layout="swizzled", pdl=True, fp4_dtype=False):
    return quantize(x, DYNAMIC, sf_layout, None, None, None, None, pdl, NVFP4, OUTPUTS[fp4_dtype])


def _quantize_nvfp4_out(x, tensor_sf, out, sf_out, sf_layout="swizzled", pdl=True):
    quantize(x, tensor_sf, sf_layout, out, sf_out, None, None, pdl, NVFP4, OUTPUTS[0])


def _quantize_nvfp4_dynamic_out(x, out, sf_out, sf_layout="swizzled", pdl=True):
    return quantize(x, DYNAMIC, sf_layout, out, sf_out, None, None, pdl, NVFP4, OUTPUTS[0])[2]


def _quantize_mxfp4(x, mode="rceil", sf_layout="swizzled", pdl=True, fp4_dtype=False):
    check_choice("mode", mode, MX_MODES)
    return quantize(x, None, sf_layout, None, None, None, None, pdl, MXFP4[mode], OUTPUTS[fp4_dtype])


def _quantize_mxfp4_out(x, out, sf_out, mode="rceil", sf_layout="swizzled", pdl=True):
    check_choice("mode", mode, MX_MODES)
    quantize(x, None, sf_layout, out, sf_out, None, None, pdl, MXFP4[mode], OUTPUTS[0])


def _dequantize_nvfp4(q, sf, tensor_sf, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    return dequantize("nvfp4", q, sf, tensor_sf, sf_layout, dtype, None, None, None, pdl, OUTPUTS[0])


def _dequantize_nvfp4_out(q, sf, tensor_sf, out, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    dequantize("nvfp4", q, sf, tensor_sf, sf_layout, dtype, out, None, None, pdl, OUTPUTS[0])


def _dequantize_mxfp4(q, sf, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    return dequantize("mxfp4", q, sf, None, sf_layout, dtype, None, None, None, pdl, OUTPUTS[0])


def _dequantize_mxfp4_out(q, sf, out, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    dequantize("mxfp4", q, sf, None, sf_layout, dtype, out, None, None, pdl, OUTPUTS[0])


def _global_scale_kernel(x, pdl=True):
    return _global_scale(x, stream=None, pdl=pdl, outputs=OUTPUTS[0])


# ------------------------------------------------------------ fake kernels
# The ops layer's rule functions on the fake tensors' sizes and strides (symbolic
# under dynamic shapes: a rule becomes a guard), in the eager call's order. Of a
# buffer's rules they run those on dtype, shape and device; contiguity and
# overlap, which need addresses or would specialize symbolic sizes, are checked
# when the op runs.
def _fake(t, name: str) -> Operand:
    return torch_operand(t, name, 0)


def _scale_rule(tensor_sf, device: int) -> None:
    if isinstance(tensor_sf, torch.Tensor):
        device_scale(_fake(tensor_sf, "tensor_sf"), device)
    elif type(tensor_sf) is float:  # a traced SymFloat is checked when the op runs
        tensor_scale(tensor_sf, device)


def quantize_shapes_of(x, fmt: Format, sf_layout: str):
    """The view of ``x`` and the shapes of ``q`` and the scales, by the ops layer's rules."""
    check_choice("sf_layout", sf_layout, SF_LAYOUTS)
    view = input_view(_fake(x, "x"), fmt)
    return (view, *quantize_shapes(view, fmt, sf_layout))


def q_dtype(fp4_dtype: bool) -> torch.dtype:
    return torch.float4_e2m1fn_x2 if fp4_dtype else torch.uint8


def _quantize_nvfp4_fake(x, tensor_sf, sf_layout="swizzled", pdl=True, fp4_dtype=False):
    view, q_shape, sf_shape = quantize_shapes_of(x, NVFP4, sf_layout)
    _scale_rule(tensor_sf, view.device)
    return x.new_empty(q_shape, dtype=q_dtype(fp4_dtype)), x.new_empty(sf_shape, dtype=torch.float8_e4m3fn)


def _quantize_nvfp4_dynamic_fake(x, sf_layout="swizzled", pdl=True, fp4_dtype=False):
    _, q_shape, sf_shape = quantize_shapes_of(x, NVFP4, sf_layout)
    return (x.new_empty(q_shape, dtype=q_dtype(fp4_dtype)), x.new_empty(sf_shape, dtype=torch.float8_e4m3fn),
            x.new_empty((), dtype=torch.float32))


def _check_quantize_outputs(view, q_shape, sf_shape, fmt: Format, out, sf_out) -> None:
    check_operand(_fake(out, "out"), "out", q_shape, Q_DTYPES, view.device)
    check_operand(_fake(sf_out, "sf_out"), "sf_out", sf_shape, SF_DTYPES[fmt.sf_vec_size], view.device)


def _quantize_nvfp4_out_fake(x, tensor_sf, out, sf_out, sf_layout="swizzled", pdl=True):
    view, q_shape, sf_shape = quantize_shapes_of(x, NVFP4, sf_layout)
    _scale_rule(tensor_sf, view.device)
    _check_quantize_outputs(view, q_shape, sf_shape, NVFP4, out, sf_out)


def _quantize_nvfp4_dynamic_out_fake(x, out, sf_out, sf_layout="swizzled", pdl=True):
    view, q_shape, sf_shape = quantize_shapes_of(x, NVFP4, sf_layout)
    _check_quantize_outputs(view, q_shape, sf_shape, NVFP4, out, sf_out)
    return x.new_empty((), dtype=torch.float32)


def _quantize_mxfp4_fake(x, mode="rceil", sf_layout="swizzled", pdl=True, fp4_dtype=False):
    check_choice("mode", mode, MX_MODES)
    _, q_shape, sf_shape = quantize_shapes_of(x, MXFP4[mode], sf_layout)
    return x.new_empty(q_shape, dtype=q_dtype(fp4_dtype)), x.new_empty(sf_shape, dtype=torch.float8_e8m0fnu)


def _quantize_mxfp4_out_fake(x, out, sf_out, mode="rceil", sf_layout="swizzled", pdl=True):
    check_choice("mode", mode, MX_MODES)
    view, q_shape, sf_shape = quantize_shapes_of(x, MXFP4[mode], sf_layout)
    _check_quantize_outputs(view, q_shape, sf_shape, MXFP4[mode], out, sf_out)


def _dequantize_rules(fmt: str, q, sf, tensor_sf, sf_layout: str, dtype: str):
    check_choice("sf_layout", sf_layout, SF_LAYOUTS)
    check_choice("dtype", dtype, OUT_DTYPES)
    view = codes_view(_fake(q, "q"), fmt)
    sf_shape, y_shape = dequantize_shapes(view, fmt, sf_layout)
    check_operand(_fake(sf, "sf"), "sf", sf_shape, SF_DTYPES[GROUP_SIZE[fmt]], view.device)
    if fmt == "nvfp4":
        _scale_rule(tensor_sf, view.device)
    return view, y_shape


def _dequantize_nvfp4_fake(q, sf, tensor_sf, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    _, y_shape = _dequantize_rules("nvfp4", q, sf, tensor_sf, sf_layout, dtype)
    return q.new_empty(y_shape, dtype=_ROLE_DTYPES[dtype])


def _dequantize_nvfp4_out_fake(q, sf, tensor_sf, out, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    view, y_shape = _dequantize_rules("nvfp4", q, sf, tensor_sf, sf_layout, dtype)
    check_operand(_fake(out, "out"), "out", y_shape, VALUE_DTYPES[dtype], view.device)


def _dequantize_mxfp4_fake(q, sf, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    _, y_shape = _dequantize_rules("mxfp4", q, sf, None, sf_layout, dtype)
    return q.new_empty(y_shape, dtype=_ROLE_DTYPES[dtype])


def _dequantize_mxfp4_out_fake(q, sf, out, sf_layout="swizzled", dtype="bfloat16", pdl=True):
    view, y_shape = _dequantize_rules("mxfp4", q, sf, None, sf_layout, dtype)
    check_operand(_fake(out, "out"), "out", y_shape, VALUE_DTYPES[dtype], view.device)


def _global_scale_fake(x, pdl=True):
    scale_input_view(_fake(x, "x"))
    return x.new_empty((), dtype=torch.float32)


# ------------------------------------------------------------ registration
_lib = torch.library.Library("fp4q", "DEF")
_AFTER_INPLACE_OR_VIEW = torch._C._after_ADInplaceOrView_keyset


def _mutation_kernel(op, mutated: tuple[int, ...]):
    """The ADInplaceOrView kernel of a mutating op: bump the version counters of
    what it writes (so that autograd notices a tensor saved for backward being
    overwritten, as with torch's own out= ops), then run the op."""

    def kernel(keyset, *args):
        for i in mutated:
            torch.autograd.graph.increment_version(args[i])
        return op.redispatch(keyset & _AFTER_INPLACE_OR_VIEW, *args)

    return kernel


def _register(name: str, args: str, returns: str, kernel, fake) -> None:
    _lib.define(f"{name}({args}) -> {returns}", tags=(torch.Tag.pt2_compliant_tag,))
    _lib.impl(name, kernel, "CUDA")
    _lib.impl(name, kernel, "CPU")
    torch.library.register_fake(f"fp4q::{name}", fake, lib=_lib)
    mutated = tuple(i for i, a in enumerate(args.split(", ")) if "!)" in a)
    if mutated:
        op = getattr(getattr(torch.ops.fp4q, name.split(".")[0]), name.split(".")[1] if "." in name else "default")
        _lib.impl(name, _mutation_kernel(op, mutated), "ADInplaceOrView", with_keyset=True)


_QUANTIZE_TAIL = 'str sf_layout="swizzled", bool pdl=True'
_DEQUANTIZE_TAIL = 'str sf_layout="swizzled", str dtype="bfloat16", bool pdl=True'
for _overload, _scale in ((".Tensor", "Tensor tensor_sf"), ("", "float tensor_sf")):
    _register("quantize_nvfp4" + _overload, f"Tensor x, {_scale}, {_QUANTIZE_TAIL}, bool fp4_dtype=False",
              "(Tensor, Tensor)", _quantize_nvfp4, _quantize_nvfp4_fake)
    _register("quantize_nvfp4_out" + _overload, f"Tensor x, {_scale}, Tensor(a!) out, Tensor(b!) sf_out, "
              f"{_QUANTIZE_TAIL}", "()", _quantize_nvfp4_out, _quantize_nvfp4_out_fake)
    _register("dequantize_nvfp4" + _overload, f"Tensor q, Tensor sf, {_scale}, {_DEQUANTIZE_TAIL}", "Tensor",
              _dequantize_nvfp4, _dequantize_nvfp4_fake)
    _register("dequantize_nvfp4_out" + _overload, f"Tensor q, Tensor sf, {_scale}, Tensor(a!) out, "
              f"{_DEQUANTIZE_TAIL}", "()", _dequantize_nvfp4_out, _dequantize_nvfp4_out_fake)
_register("quantize_nvfp4_dynamic", f"Tensor x, {_QUANTIZE_TAIL}, bool fp4_dtype=False", "(Tensor, Tensor, Tensor)",
          _quantize_nvfp4_dynamic, _quantize_nvfp4_dynamic_fake)
_register("quantize_nvfp4_dynamic_out", f"Tensor x, Tensor(a!) out, Tensor(b!) sf_out, {_QUANTIZE_TAIL}", "Tensor",
          _quantize_nvfp4_dynamic_out, _quantize_nvfp4_dynamic_out_fake)
_register("quantize_mxfp4", f'Tensor x, str mx_mode="rceil", {_QUANTIZE_TAIL}, bool fp4_dtype=False',
          "(Tensor, Tensor)", _quantize_mxfp4, _quantize_mxfp4_fake)
_register("quantize_mxfp4_out", f'Tensor x, Tensor(a!) out, Tensor(b!) sf_out, str mx_mode="rceil", {_QUANTIZE_TAIL}',
          "()", _quantize_mxfp4_out, _quantize_mxfp4_out_fake)
_register("dequantize_mxfp4", f"Tensor q, Tensor sf, {_DEQUANTIZE_TAIL}", "Tensor", _dequantize_mxfp4,
          _dequantize_mxfp4_fake)
_register("dequantize_mxfp4_out", f"Tensor q, Tensor sf, Tensor(a!) out, {_DEQUANTIZE_TAIL}", "()",
          _dequantize_mxfp4_out, _dequantize_mxfp4_out_fake)
_register("global_scale", "Tensor x, bool pdl=True", "Tensor", _global_scale_kernel, _global_scale_fake)
