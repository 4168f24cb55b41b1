"""Arrays as the kernels see them: what users pass (CuPy arrays, torch tensors,
DLPack / CUDA-array-interface objects) becomes an operand (object, pointer,
shape, dtype, device) without copying. The rules on operands are in
``checks``."""

from __future__ import annotations

import sys

import numpy as np

from ..cuda.driver import require_gpu

TENSOR_SF_MIN = 2.0**-126
TENSOR_SF_MAX = 2.0**100

# Element dtypes each argument may hold, by the name numpy / CuPy / torch give them.
BF16_DTYPES = ("uint16", "bfloat16")  # uint16: bf16 bits
INPUT_DTYPES = {"uint16": "bfloat16", "bfloat16": "bfloat16", "float16": "float16"}
# The spellings of one input dtype: an array that must match x's dtype may spell bf16 either way.
SAME_DTYPES = {"uint16": BF16_DTYPES, "bfloat16": BF16_DTYPES, "float16": ("float16",)}
Q_DTYPES = ("uint8", "float4_e2m1fn_x2")
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


def tensor_scale(tensor_sf, device: int) -> tuple[str, float, int]:
    """``(mode, value, ptr)``: ``("value", v, 0)`` for a host tensor_sf ``v`` (range-checked;
    the launch packs it as a C float, i.e. rounds it to float32) or ``("pointer", 0.0, p)``
    for a device float32 scalar at ``p``. A plain tuple: a call builds one every time."""
    kind = type(tensor_sf)
    if kind is float and TENSOR_SF_MIN <= tensor_sf <= TENSOR_SF_MAX:
        # Passed as is: the launch packs it as a C float (the float32 rounding of
        # np.float32), and the bounds are float32 values, so it rounds between them.
        return ("value", tensor_sf, 0)
    if _cupy_module is not None and kind is _cupy_module.ndarray:  # the common device scalar, before the type tests
        return device_scale(as_operand(tensor_sf, "tensor_sf"), device)
    if kind is float or kind is int or (isinstance(tensor_sf, (int, float, np.floating, np.integer))
                                        and not isinstance(tensor_sf, (bool, np.bool_))):
        rule = f"tensor_sf must be a float32 in [2**-126, 2**100] (normal, positive, finite), got {tensor_sf!r}"
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
    if isinstance(tensor_sf, np.ndarray):
        raise TypeError("tensor_sf must be a Python float or a device (CuPy or torch) float32 scalar, got a host "
                        "numpy array")
    if isinstance(tensor_sf, (bool, np.bool_)) or tensor_sf is None:
        raise TypeError(f"tensor_sf must be a float or a device float32 scalar (CuPy or torch), got "
                        f"{tensor_sf!r} ({type(tensor_sf).__name__})")
    return device_scale(as_operand(tensor_sf, "tensor_sf"), device)


def device_scale(a: Operand, device: int) -> tuple[str, float, int]:
    """The rules of a device tensor_sf (also run on torch's fake tensors, whose ``ptr`` is 0)."""
    _, ptr, shape, dtype, a_device, _ = a
    if dtype != "float32" or shape not in ((), (1,)):
        raise ValueError(f"a device tensor_sf must be a float32 array of shape () or (1,), got dtype {dtype} "
                         f"shape {tuple(shape)}")
    if a_device != device:
        raise ValueError(f"tensor_sf is on device {a_device} but x is on device {device}")
    if ptr & 3:
        raise ValueError(f"a device tensor_sf must be 4-byte aligned (the kernel loads it as a float32), got "
                         f"address {ptr:#x}")
    return ("pointer", 0.0, ptr)


NO_TENSOR_SCALE = ("value", 0.0, 0)  # the formats without a tensor scale
