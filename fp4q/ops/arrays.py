"""The boundary rules of every op, written once.

What users pass (CuPy arrays, torch tensors, DLPack / CUDA-array-interface
objects, Python or device scalars, streams) becomes an operand (object,
pointer, shape, dtype, device) without copying; row-major
inputs (bf16 values or packed codes) become a ``RowsView``; outputs are
checked (dtype, shape, device, contiguity, aliasing) or allocated. Each
error names the argument, the value and the rule. The first call of a kind
and every later call run the same functions; a stored plan only skips the
rules its key already fixes.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

TENSOR_SF_MIN = 2.0**-126
TENSOR_SF_MAX = 2.0**100
MAX_ROWS = 2**31 - 1  # the kernels index rows with 32-bit integers
MAX_K = 2**31 - 1  # and the elements of a row (a launch passes K as a 32-bit integer)

# Element dtypes each argument may hold, by the name numpy / CuPy / torch give them.
BF16_DTYPES = ("uint16", "bfloat16")  # uint16: bf16 bits
INPUT_DTYPES = {"uint16": "bfloat16", "bfloat16": "bfloat16", "float16": "float16"}
Q_DTYPES = ("uint8", "float4_e2m1fn_x2")
SF_DTYPES = {16: ("uint8", "float8_e4m3fn"), 32: ("uint8", "float8_e8m0fnu")}
VALUE_DTYPES = {"bfloat16": BF16_DTYPES, "float32": ("float32",)}
_ITEMSIZE = {"uint8": 1, "float4_e2m1fn_x2": 1, "float8_e4m3fn": 1, "float8_e8m0fnu": 1, "uint16": 2,
             "bfloat16": 2, "float16": 2, "int16": 2, "float32": 4, "int32": 4, "uint32": 4, "float64": 8,
             "int64": 8, "uint64": 8}
# dtype -> itemsize - 1, for the dtypes whose elements span more than one byte.
_ALIGN_MASK = {dtype: size - 1 for dtype, size in _ITEMSIZE.items() if size > 1}

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


def byte_strides(a: Operand) -> tuple:
    """The strides of operand ``a`` in bytes; read only where a rule needs them
    (outputs need only their shape)."""
    obj, is_torch = a[OBJ], a[IS_TORCH]
    if is_torch:
        size = obj.element_size()
        return tuple(s * size for s in obj.stride())
    return obj.strides


def stride_key(obj, is_torch: bool) -> tuple:
    """The strides of an operand's ``obj`` as its library keeps them (torch: elements,
    CuPy: bytes): cheaper than ``byte_strides``, and exact in a plan key beside the
    dtype and ``is_torch``."""
    return obj.stride() if is_torch else obj.strides


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


@dataclass(frozen=True)
class RowsView:
    """A row-major input as rows of ``width`` elements: the leading dimensions
    flattened with one stride, the last one contiguous. ``row_stride`` and
    ``itemsize`` are in elements and bytes."""

    lead_shape: tuple[int, ...]
    rows: int
    width: int
    row_stride: int
    itemsize: int
    dtype: str
    device: int

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.width == 0

    def span(self, ptr: int) -> tuple[int, int]:
        """[start, end) bytes the rows at ``ptr`` may touch."""
        if self.empty:
            return (ptr, ptr)
        return (ptr, ptr + self.itemsize * ((self.rows - 1) * self.row_stride + self.width))


def rows_view(a: Operand, name: str, dtypes, what: str, k_per_element: int, group: int, rule: str) -> RowsView:
    """The rules of every row-major input, in the order of their messages: dtype,
    ``K = k_per_element * shape[-1]`` a multiple of ``group`` (``rule`` says for
    what), the row count, the last dimension contiguous, rows not overlapping,
    the leading dimensions flattening with one stride. A 1-D input is one row."""
    _, _, shape, dtype, device, _ = a
    if dtype not in dtypes:
        raise TypeError(f"{name} must hold {what}, got dtype {dtype}")
    shape, strides = tuple(shape), tuple(byte_strides(a))
    if not shape:
        raise ValueError(f"{name} must have at least 1 dimension (..., K), got shape ()")
    itemsize = _ITEMSIZE[dtype]
    width = shape[-1]
    k = k_per_element * width
    k_is = f"K ({'the last dimension' if k_per_element == 1 else '2 * the last dimension'} of {name})"
    if k % group:
        raise ValueError(f"{k_is} must be a multiple of {group}{rule}, got {k}")
    if k > MAX_K:
        raise ValueError(f"{k_is} must be at most {MAX_K}, got {k}")
    rows = math.prod(shape[:-1])
    if rows > MAX_ROWS:
        raise ValueError(f"{name} has {rows} rows; at most {MAX_ROWS} are supported")
    if rows == 0 or width == 0:
        # Nothing is read, so strides do not matter (CuPy reports 0 for empty arrays).
        return RowsView(shape[:-1], rows, width, width, itemsize, dtype, device)
    if width > 1 and strides[-1] != itemsize:
        raise ValueError(f"the last dimension of {name} must be contiguous (stride {itemsize} bytes), "
                         f"got stride {strides[-1]}")
    if len(shape) == 1 or shape[-2] == 1:
        return _flattened(name, shape, strides, width, itemsize, dtype, device)
    if strides[-2] % itemsize or strides[-2] < width * itemsize:
        raise ValueError(f"the rows of {name} must not overlap: row stride {strides[-2]} bytes for rows of "
                         f"{width * itemsize} bytes")
    return _flattened(name, shape, strides, strides[-2] // itemsize, itemsize, dtype, device)


def _flattened(name, shape, strides, row_stride: int, itemsize: int, dtype: str, device: int) -> RowsView:
    expected = row_stride * itemsize * (shape[-2] if len(shape) > 1 else 1)
    for dim in range(len(shape) - 3, -1, -1):
        if shape[dim] > 1 and strides[dim] != expected:
            raise ValueError(
                f"the leading dimensions of {name} must flatten to rows with one stride; "
                f"dimension {dim} has stride {strides[dim]} bytes, expected {expected}"
            )
        expected *= shape[dim]
    return RowsView(shape[:-1], math.prod(shape[:-1]), shape[-1], row_stride, itemsize, dtype, device)


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


def sf_shape(lead_shape: tuple[int, ...], rows: int, groups: int, sf_layout: str) -> tuple[int, ...]:
    if sf_layout == "swizzled":
        return (-(-rows // 128), -(-groups // 4), 32, 4, 4)
    return tuple(lead_shape) + (groups,)


def check_element_aligned(ptr: int, dtype: str, name: str) -> None:
    """A buffer's base must be a multiple of its element size: the kernels load and
    store whole elements (CuPy builds an array at any address it is given)."""
    mask = _ALIGN_MASK.get(dtype)
    if mask and ptr & mask:
        raise ValueError(f"{name}'s base address {ptr:#x} is not a multiple of its element size ({mask + 1} bytes)")


def check_operand(a: Operand, name: str, shape: tuple, dtypes, device: int, nbytes: int | None = None,
                  others=()) -> tuple[object, int]:
    """``(obj, ptr)`` of buffer operand ``a`` (``as_operand`` of the caller's array), after
    a buffer's rules in the order of their messages: dtype, shape, device; then, for a
    real buffer (``nbytes`` given: ``dtypes`` are all of one size, so ``shape`` holds
    ``nbytes`` bytes), C-contiguity and no overlap with any of ``others`` ((name,
    [start, end)) pairs). Torch's fake tensors are checked without ``nbytes``: they
    have no addresses, and the contiguity rule would specialize their symbolic sizes."""
    obj, ptr, a_shape, dtype, a_device, is_torch = a
    if dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(dtypes)}, got {dtype}")
    if a_shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(a_shape)}")
    if a_device != device:
        raise ValueError(f"{name} is on device {a_device} but the input is on device {device}")
    if nbytes is None:
        return obj, ptr
    if not (obj.is_contiguous() if is_torch else c_contiguous(obj)):
        raise ValueError(f"{name} must be C-contiguous, got strides {tuple(byte_strides(a))}")
    if nbytes:
        end = ptr + nbytes
        for other, (other_start, other_end) in others:
            if other_start < end and ptr < other_end and other_start != other_end:
                raise ValueError(
                    f"{name} overlaps {other} (outputs must not alias their inputs or each other): {name} spans "
                    f"[{ptr:#x}, {end:#x}), {other} spans [{other_start:#x}, {other_end:#x})"
                )
    return obj, ptr


def c_contiguous(a) -> bool:
    """Whether CuPy array ``a`` is C-contiguous. CuPy keeps the answer as ``_c_contiguous``,
    which ``flags.c_contiguous`` reads too after building a Flags object (about 0.2 us of
    a 10 us call on an H200 host); a CuPy without that attribute is asked through ``flags``."""
    try:
        return a._c_contiguous
    except AttributeError:
        return a.flags.c_contiguous


def check_pdl(pdl) -> None:
    if pdl is not True and pdl is not False:
        raise TypeError(f"pdl must be a bool, got {pdl!r}")


def check_choice(name: str, value, choices) -> None:
    if type(value) is not str or value not in choices:
        raise ValueError(f"{name} must be {' or '.join(map(repr, choices))}, got {value!r}")
