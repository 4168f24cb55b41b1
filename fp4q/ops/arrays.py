"""Arrays as the kernels see them: what users pass (CuPy arrays, torch tensors,
DLPack / CUDA-array-interface objects) becomes an operand (object, pointer,
shape, dtype, device) without copying. The rules on operands are in
``checks``."""

from __future__ import annotations

import sys

import numpy as np

from ..cuda.driver import require_gpu
from ..kernels.call import PER_EXPERT, ROW_TENSOR_SF_MODES
from ..kernels.rows import MAX_EXPERTS

PER_ROW = ROW_TENSOR_SF_MODES[0]  # the launch mode of a device tensor_sf per row
TENSOR_SF_MIN = 2.0**-126
TENSOR_SF_MAX = 2.0**100

# Element dtypes each argument may hold, by the name numpy / CuPy / torch give them.
BF16_DTYPES = ("uint16", "bfloat16")  # uint16: bf16 bits
INPUT_DTYPES = {"uint16": "bfloat16", "bfloat16": "bfloat16", "float16": "float16"}
# The quantizers without a prologue read float32 x too.
QUANTIZE_INPUT_DTYPES = {**INPUT_DTYPES, "float32": "float32"}
# The spellings of one input dtype: an array that must match x's dtype may spell bf16 either way.
SAME_DTYPES = {"uint16": BF16_DTYPES, "bfloat16": BF16_DTYPES, "float16": ("float16",)}
Q_DTYPES = ("uint8", "float4_e2m1fn_x2")
OFFSET_DTYPES = ("int32",)
SF_DTYPES = {"nvfp4": ("uint8", "float8_e4m3fn"), "mxfp4": ("uint8", "float8_e8m0fnu")}
VALUE_DTYPES = {"bfloat16": BF16_DTYPES, "float32": ("float32",)}
ITEMSIZE = {"uint8": 1, "float4_e2m1fn_x2": 1, "float8_e4m3fn": 1, "float8_e8m0fnu": 1, "uint16": 2,
             "bfloat16": 2, "float16": 2, "int16": 2, "float32": 4, "int32": 4, "uint32": 4, "float64": 8,
             "int64": 8, "uint64": 8}
# dtype -> itemsize - 1, for the dtypes whose elements span more than one byte.
ALIGN_MASK = {dtype: size - 1 for dtype, size in ITEMSIZE.items() if size > 1}

_cupy_module = None


def cupy():
    global _cupy_module
    if _cupy_module is None:
        import cupy as module

        _cupy_module = module
    return _cupy_module


def torch_module():
    """torch, if the process has imported it (fp4q never imports it for the CuPy API)."""
    return sys.modules.get("torch")


# An operand: a CUDA array as the kernels see it, the plain tuple
#     (obj, ptr, shape, dtype, device, is_torch)
# obj is what the caller passed (or a zero-copy CuPy view of it), dtype its
# element type's name as numpy or torch spells it, device its ordinal. Plain,
# and unpacked where it is used: a call builds three, and a tuple subclass
# with named fields cost three times as much to build (0.15 against 0.05 us
# on an H200 host). OBJ ... IS_TORCH index it where one field is wanted.
Operand = tuple
OBJ, PTR, SHAPE, DTYPE, DEVICE, IS_TORCH = range(6)


def as_operand(x, name: str) -> Operand:
    """``x`` as an operand: a CuPy array or a torch CUDA tensor directly, anything
    else through DLPack or the CUDA array interface (as a zero-copy CuPy array)."""
    cp = _cupy_module or cupy()
    if isinstance(x, cp.ndarray):  # the common case first
        data, dtype = x.data, x.dtype
        dtype_name = _DTYPE_NAMES.get(dtype.num) or _dtype_name(dtype)
        return (x, data.ptr, x.shape, dtype_name, data.device_id, False)
    torch = torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        return torch_operand(x, name)
    # Without a usable GPU no array can be a CUDA array: say that first.
    require_gpu()
    if isinstance(x, np.ndarray) or np.isscalar(x):
        raise TypeError(f"{name} must be a CUDA array (CuPy, torch, or any __dlpack__/__cuda_array_interface__ "
                        f"object), got a host {type(x).__name__}")
    errors = []
    # DLPack first: it names bfloat16, where the array interface has only an anonymous "<V2".
    if _has(x, "__dlpack__"):
        try:
            view = cp.from_dlpack(x)
        except Exception as exc:  # noqa: BLE001 - fall back to the array interface
            errors.append(f"__dlpack__: {exc}")
        else:
            return as_operand(view, name)
    if _has(x, "__cuda_array_interface__"):
        try:
            view = cp.asarray(x)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"__cuda_array_interface__: {exc}")
        else:
            return as_operand(view, name)
    detail = "; ".join(errors) if errors else "it has neither __dlpack__ nor __cuda_array_interface__"
    raise TypeError(f"{name} must be a CUDA array, got {type(x).__name__} ({detail})")


def c_contiguous(a) -> bool:
    """Whether CuPy array ``a`` is C-contiguous. CuPy keeps the answer as ``_c_contiguous``,
    which ``flags.c_contiguous`` reads too after building a Flags object (about 0.2 us of
    a 10 us call on an H200 host); a CuPy without that attribute is asked through ``flags``."""
    try:
        return a._c_contiguous
    except AttributeError:
        return a.flags.c_contiguous


_DTYPE_NAMES: dict[int, str] = {}


def _dtype_name(dtype) -> str:
    """numpy's name of ``dtype``, by its type number: building ``dtype.name`` costs
    more than the rest of an operand."""
    name = _DTYPE_NAMES.get(dtype.num)
    if name is None:
        name = _DTYPE_NAMES[dtype.num] = dtype.name
    return name


def torch_operand(x, name: str, ptr: int | None = None) -> Operand:
    """A torch tensor as an operand; ``ptr`` stands in for the address of a tensor
    without memory (torch's fake tensors, whose rules and shapes fp4q.torch derives)."""
    if not x.is_cuda:
        require_gpu()
        raise TypeError(f"{name} must be a CUDA array, got a torch Tensor on {x.device}")
    dtype = _TORCH_DTYPE_NAMES.get(x.dtype)
    if dtype is None:
        dtype = _TORCH_DTYPE_NAMES[x.dtype] = str(x.dtype).removeprefix("torch.")
    return (x, x.data_ptr() if ptr is None else ptr, x.shape, dtype, x.get_device(), True)


_TORCH_DTYPE_NAMES: dict = {}


def _has(x, attr: str) -> bool:
    # hasattr lets anything but AttributeError through, and torch raises other
    # errors from __cuda_array_interface__ for dtypes it cannot describe (bf16).
    try:
        return hasattr(x, attr)
    except Exception:  # noqa: BLE001
        return True


def tensor_scale(tensor_sf, device: int, row_shapes: tuple = (), name: str = "tensor_sf") -> tuple[str, float, int]:
    """``(mode, value, ptr)``: ``("value", v, 0)`` for a host tensor_sf ``v`` (range-checked;
    the launch packs it as a C float, i.e. rounds it to float32), ``("pointer", 0.0, p)``
    for a device float32 scalar at ``p``, or, where the op takes a tensor scale per row,
    ``("per_row", 0.0, p)`` for a device float32 array of one of ``row_shapes`` at ``p``.
    A plain tuple: a call builds one every time. ``name``: the argument's, in messages."""
    kind = type(tensor_sf)
    if kind is float and TENSOR_SF_MIN <= tensor_sf <= TENSOR_SF_MAX:
        # Passed as is: the launch packs it as a C float (the float32 rounding of
        # np.float32), and the bounds are float32 values, so it rounds between them.
        return ("value", tensor_sf, 0)
    if _cupy_module is not None and kind is _cupy_module.ndarray:  # the common device scalar, before the type tests
        return device_scale(as_operand(tensor_sf, name), device, row_shapes, name)
    if kind is float or kind is int or (isinstance(tensor_sf, (int, float, np.floating, np.integer))
                                        and not isinstance(tensor_sf, (bool, np.bool_))):
        rule = f"{name} must be a float32 in [2**-126, 2**100] (normal, positive, finite), got {tensor_sf!r}"
        try:
            wide = float(tensor_sf)
        except OverflowError:  # an int beyond any float
            raise ValueError(rule) from None
        # Compared before the float32 rounding, so that nothing overflows there;
        # the bounds are float32 values, so the rounded value stays in range.
        if not TENSOR_SF_MIN / 2 < wide < TENSOR_SF_MAX * 2:
            raise ValueError(rule)
        value = float(np.float32(wide))
        if not TENSOR_SF_MIN <= value <= TENSOR_SF_MAX:
            raise ValueError(rule)
        return ("value", value, 0)
    per_row = " or array of one value per row" if row_shapes else ""
    if isinstance(tensor_sf, np.ndarray):
        raise TypeError(f"{name} must be a Python float or a device (CuPy or torch) float32 scalar{per_row}, got a "
                        f"host numpy array")
    if isinstance(tensor_sf, (bool, np.bool_)) or tensor_sf is None:
        raise TypeError(f"{name} must be a float or a device float32 scalar{per_row} (CuPy or torch), got "
                        f"{tensor_sf!r} ({type(tensor_sf).__name__})")
    return device_scale(as_operand(tensor_sf, name), device, row_shapes, name)


def device_scale(a: Operand, device: int, row_shapes: tuple = (), name: str = "tensor_sf") -> tuple[str, float, int]:
    """The rules of a device tensor_sf: a float32 scalar, or one float32 per row of one of
    ``row_shapes`` (``((M,), x.shape[:-1])`` where the op takes it, else none), C-contiguous.
    Also run on torch's fake tensors, whose ``ptr`` is 0: nothing there to be contiguous."""
    obj, ptr, shape, dtype, a_device, is_torch = a
    mode = "pointer" if shape in ((), (1,)) else PER_ROW if shape in row_shapes else None
    if dtype != "float32" or mode is None:
        rows = (f", or one value per row: (M,) = {tuple(row_shapes[0])} or x.shape[:-1] = {tuple(row_shapes[1])}"
                if row_shapes else "")
        raise ValueError(f"a device {name} must be a float32 array of shape () or (1,){rows}, got dtype {dtype} "
                         f"shape {tuple(shape)}")
    if a_device != device:
        raise ValueError(f"{name} is on device {a_device} but x is on device {device}")
    if ptr & 3:
        raise ValueError(f"a device {name} must be 4-byte aligned (the kernel loads it as a float32), got "
                         f"address {ptr:#x}")
    if mode is PER_ROW and ptr and not (obj.is_contiguous() if is_torch else c_contiguous(obj)):
        raise ValueError("a per-row tensor_sf must be C-contiguous (the kernel reads row m's value at element m)")
    return (mode, 0.0, ptr)


def expert_count(a: Operand, name: str) -> int:
    """E, the experts of offsets operand ``a`` (``(E + 1,)``, ``1 <= E <= MAX_EXPERTS``): the
    one rule read before a call's plan, whose shapes it fixes. Its other rules (dtype,
    device, contiguity) are a buffer's, checked with the other inputs."""
    shape = tuple(a[SHAPE])
    if len(shape) != 1 or not 2 <= shape[0] <= MAX_EXPERTS + 1:
        raise ValueError(f"{name} must have shape (E + 1,) with 1 <= E <= {MAX_EXPERTS} (one first row per expert, "
                         f"then the end), got shape {shape}")
    return int(shape[0]) - 1


def _expert_scales_rule(experts: int, unit: str) -> str:
    return (f"tensor_sf must be a device float32 array of shape ({'E' if unit == 'expert' else 'B'},) = "
            f"({experts},), one scale per {unit}")


def expert_scales(tensor_sf, device: int, experts: int, unit: str = "expert") -> tuple[str, float, int]:
    """``(PER_EXPERT, 0.0, ptr)`` for a tensor scale per expert (or per batch: ``unit``): a
    device float32 array of shape ``(experts,)``, C-contiguous, on ``device``
    (``device_expert_scales``)."""
    if isinstance(tensor_sf, (str, bool, int, float, np.ndarray, np.generic)) or tensor_sf is None:
        raise TypeError(f"{_expert_scales_rule(experts, unit)}, got {tensor_sf!r} ({type(tensor_sf).__name__})")
    return device_expert_scales(as_operand(tensor_sf, "tensor_sf"), device, experts, unit)


def device_expert_scales(a: Operand, device: int, experts: int, unit: str = "expert") -> tuple[str, float, int]:
    """The rules of a device tensor scale per expert or batch (``expert_scales``). Also run
    on torch's fake tensors, whose ``ptr`` is 0."""
    obj, ptr, shape, dtype, a_device, is_torch = a
    if dtype != "float32" or tuple(shape) != (experts,):
        rule = _expert_scales_rule(experts, unit)
        raise ValueError(f"{rule}, got dtype {dtype} shape {tuple(shape)}")
    if a_device != device:
        raise ValueError(f"tensor_sf is on device {a_device} but x is on device {device}")
    if ptr & 3:
        raise ValueError(f"tensor_sf must be 4-byte aligned (the kernel loads float32 values), got address {ptr:#x}")
    if ptr and not (obj.is_contiguous() if is_torch else c_contiguous(obj)):
        raise ValueError(f"tensor_sf must be C-contiguous (the kernel reads {unit} e's scale at element e)")
    return (PER_EXPERT, 0.0, ptr)


NO_TENSOR_SCALE = ("value", 0.0, 0)  # the formats without a tensor scale
