"""Turning what users pass (CuPy arrays, DLPack / CUDA-array-interface
objects such as torch tensors, Python or device scalars) into validated,
zero-copy views, and preparing output buffers.

Every check happens here, before anything is launched, and each error names
the argument, the value and the rule.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from ..numerics.layouts import swizzled_sf_shape

TENSOR_SF_MIN = 2.0**-126
TENSOR_SF_MAX = 2.0**100
_INPUT_DTYPES = {"uint16": "bfloat16", "bfloat16": "bfloat16", "float16": "float16"}


_cupy_module = None


def _cupy():
    global _cupy_module
    if _cupy_module is None:
        import cupy

        _cupy_module = cupy
    return _cupy_module


@dataclass(frozen=True)
class InputView:
    array: object  # cupy.ndarray sharing memory with what the caller passed
    lead_shape: tuple[int, ...]
    rows: int
    cols: int
    row_stride: int  # elements between consecutive rows
    dtype: str  # "bfloat16" or "float16"
    device: int

    @property
    def ptr(self) -> int:
        return self.array.data.ptr

    @property
    def span(self) -> tuple[int, int]:
        """[start, end) bytes the input may touch."""
        if self.rows == 0 or self.cols == 0:
            return (self.ptr, self.ptr)
        return (self.ptr, self.ptr + 2 * ((self.rows - 1) * self.row_stride + self.cols))


def _as_cupy(x, name: str):
    cupy = _cupy()
    if isinstance(x, cupy.ndarray):
        return x
    if isinstance(x, np.ndarray) or np.isscalar(x):
        raise TypeError(f"{name} must be a CUDA array (CuPy, or any __dlpack__/__cuda_array_interface__ object), got a host {type(x).__name__}")
    errors = []
    bits = _torch_bf16_bits(cupy, x, errors)
    if bits is not None:
        return bits
    # DLPack first: it names bfloat16, where the array interface has only an
    # anonymous two-byte type ("<V2").
    if _has(x, "__dlpack__"):
        try:
            return cupy.from_dlpack(x)
        except Exception as exc:  # noqa: BLE001 - fall back to the array interface
            errors.append(f"__dlpack__: {exc}")
    if _has(x, "__cuda_array_interface__"):
        try:
            return cupy.asarray(x)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"__cuda_array_interface__: {exc}")
    detail = "; ".join(errors) if errors else "it has neither __dlpack__ nor __cuda_array_interface__"
    raise TypeError(f"{name} must be a CUDA array, got {type(x).__name__} ({detail})")


def _has(x, attr: str) -> bool:
    # hasattr lets anything but AttributeError through, and torch raises other
    # errors from __cuda_array_interface__ for dtypes it cannot describe (bf16).
    try:
        return hasattr(x, attr)
    except Exception:  # noqa: BLE001
        return True


def _torch_bf16_bits(cupy, x, errors: list):
    """A torch bf16 CUDA tensor as a CuPy uint16 view of the same memory.

    Not every CuPy build takes bfloat16 through DLPack, but every one takes
    int16, and a bf16 tensor reinterpreted as int16 is the same bits with
    no copy.
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or not x.is_cuda:
        return None
    try:
        return cupy.from_dlpack(x.view(torch.int16)).view(np.uint16)
    except Exception as exc:  # noqa: BLE001 - the generic paths below may still work
        errors.append(f"int16 view of the bf16 tensor: {exc}")
        return None


def check_rows_flatten(name: str, shape: tuple, strides: tuple, row_stride_bytes: int) -> None:
    """The leading dimensions must collapse into one row index with a single stride."""
    expected = row_stride_bytes * shape[-2]
    for dim in range(len(shape) - 3, -1, -1):
        if shape[dim] > 1 and strides[dim] != expected:
            raise ValueError(
                f"the leading dimensions of {name} must flatten to rows with one stride; "
                f"dimension {dim} has stride {strides[dim]} bytes, expected {expected}"
            )
        expected *= shape[dim]


def as_input(x, name: str = "x", allowed=("bfloat16", "float16")) -> InputView:
    arr = _as_cupy(x, name)
    dtype = _INPUT_DTYPES.get(arr.dtype.name)
    if dtype is None or dtype not in allowed:
        raise TypeError(
            f"{name} must hold {' or '.join(allowed)} values (uint16 holds bf16 bits), got dtype {arr.dtype.name}"
        )
    if arr.ndim < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (..., K), got shape {tuple(arr.shape)}")
    itemsize = arr.dtype.itemsize
    shape, strides = tuple(arr.shape), tuple(arr.strides)
    cols = shape[-1]
    if cols % 16:
        raise ValueError(f"K (the last dimension of {name}) must be a multiple of 16, got {cols}")
    rows = math.prod(shape[:-1])
    if rows == 0 or cols == 0:
        # Nothing is read, so strides do not matter (CuPy reports 0 for empty arrays).
        return InputView(arr, shape[:-1], rows, cols, cols, dtype, arr.device.id)
    if cols > 1 and strides[-1] != itemsize:
        raise ValueError(
            f"the last dimension of {name} must be contiguous (stride {itemsize} bytes), got stride {strides[-1]}"
        )
    row_stride = strides[-2] // itemsize if shape[-2] > 1 else cols
    if strides[-2] % itemsize or (shape[-2] > 1 and row_stride < cols):
        raise ValueError(f"the rows of {name} must not overlap: row stride {strides[-2]} bytes for K={cols}")
    check_rows_flatten(name, shape, strides, row_stride * itemsize)
    return InputView(arr, shape[:-1], rows, cols, row_stride, dtype, arr.device.id)


@dataclass(frozen=True)
class TensorScale:
    mode: str  # "value" or "pointer"
    value: float
    ptr: int
    array: object | None


def as_tensor_sf(tensor_sf, device: int) -> TensorScale:
    cupy = _cupy()
    if isinstance(tensor_sf, (bool, np.bool_)):
        raise TypeError(f"tensor_sf must be a float or a device float32 scalar, got {tensor_sf!r}")
    if isinstance(tensor_sf, (int, float, np.floating, np.integer)):
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
        return TensorScale("value", value, 0, None)
    if isinstance(tensor_sf, np.ndarray):
        raise TypeError("tensor_sf must be a Python float or a device (CuPy) float32 scalar, got a host numpy array")
    arr = _as_cupy(tensor_sf, "tensor_sf") if not isinstance(tensor_sf, cupy.ndarray) else tensor_sf
    if arr.dtype != np.float32 or arr.size != 1 or arr.ndim > 1:
        raise ValueError(
            f"a device tensor_sf must be a float32 array of shape () or (1,), got dtype {arr.dtype.name} "
            f"shape {tuple(arr.shape)}"
        )
    if arr.device.id != device:
        raise ValueError(f"tensor_sf is on device {arr.device.id} but x is on device {device}")
    return TensorScale("pointer", 0.0, arr.data.ptr, arr)


def sf_shape(lead_shape: tuple[int, ...], rows: int, groups: int, sf_layout: str) -> tuple[int, ...]:
    if sf_layout == "swizzled":
        return swizzled_sf_shape(rows, groups)
    return tuple(lead_shape) + (groups,)


def empty_on(shape: tuple[int, ...], dtype, device: int, stream: int | None = None):
    """A new CuPy array on ``device``, from the memory pool of ``stream``.

    The pool is stream-ordered: an output that the caller drops while the
    kernel still runs on ``stream`` must go back to that stream's pool, not
    to another stream that could reuse it at once. ``None`` means CuPy's
    current stream (no switch needed).
    """
    cupy = _cupy()
    if stream is not None and stream != cupy.cuda.get_current_stream(device).ptr:
        with cupy.cuda.Device(device), _cupy_stream(cupy, stream, device):
            return cupy.empty(shape, dtype=dtype)
    if cupy.cuda.runtime.getDevice() == device:
        return cupy.empty(shape, dtype=dtype)
    with cupy.cuda.Device(device):
        return cupy.empty(shape, dtype=dtype)


class _RawStream:
    """A raw CUstream handle in the CUDA stream protocol."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _cupy_stream(cupy, handle: int, device: int):
    # ExternalStream is deprecated from CuPy 14 on, which has Stream.from_external instead.
    if hasattr(cupy.cuda.Stream, "from_external"):
        return cupy.cuda.Stream.from_external(_RawStream(handle))
    return cupy.cuda.ExternalStream(handle, device)


def _span(arr) -> tuple[int, int]:
    return (arr.data.ptr, arr.data.ptr + arr.nbytes)


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def output(buf, name: str, shape: tuple[int, ...], view: InputView, others=(), stream: int | None = None):
    """Allocate an output (for ``stream``), or validate a caller's buffer (shape, dtype, device, layout, aliasing)."""
    cupy = _cupy()
    if buf is None:
        return empty_on(shape, np.uint8, view.device, stream)
    if not isinstance(buf, cupy.ndarray):
        raise TypeError(f"{name} must be a CuPy uint8 array, got {type(buf).__name__}")
    if buf.dtype != np.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {buf.dtype.name}")
    if tuple(buf.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(buf.shape)}")
    if buf.device.id != view.device:
        raise ValueError(f"{name} is on device {buf.device.id} but x is on device {view.device}")
    if not buf.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous, got strides {tuple(buf.strides)}")
    span = _span(buf)
    if buf.size and _overlaps(span, view.span):
        raise ValueError(
            f"{name} overlaps the input x (outputs must not alias it): {name} spans "
            f"[{span[0]:#x}, {span[1]:#x}), x spans [{view.span[0]:#x}, {view.span[1]:#x})"
        )
    for other_name, other in others:
        if buf.size and other.size and _overlaps(span, _span(other)):
            o = _span(other)
            raise ValueError(
                f"{name} overlaps {other_name} (outputs must not alias each other): {name} spans "
                f"[{span[0]:#x}, {span[1]:#x}), {other_name} spans [{o[0]:#x}, {o[1]:#x})"
            )
    return buf


def stream_handle(stream, device: int) -> int:
    """The raw CUstream for ``stream`` (default: CuPy's current stream), checked against the device."""
    cupy = _cupy()
    if stream is None:
        # The same stream as `with cupy.cuda.Device(device): get_current_stream()`,
        # without switching devices.
        return cupy.cuda.get_current_stream(device).ptr
    if isinstance(stream, (cupy.cuda.Stream, cupy.cuda.ExternalStream)):
        stream_device = getattr(stream, "device_id", device)
        if stream_device not in (-1, device):
            raise ValueError(f"stream belongs to device {stream_device} but x is on device {device}")
        return stream.ptr
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (cuda.core and others)
        return int(stream.__cuda_stream__()[1])
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    raise TypeError(
        f"stream must be a cupy.cuda.Stream, a torch stream, an object with __cuda_stream__ "
        f"or a raw handle (int), got {stream!r} ({type(stream).__name__})"
    )
