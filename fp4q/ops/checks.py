"""The boundary rules of every op, written once.

Row-major inputs (values or packed codes) become a ``RowsView``; a tensor
scale becomes its launch mode, value and pointer; buffers are checked
(dtype, shape, device, contiguity, aliasing). Each error names the
argument, the value and the rule. The first call of a kind and every later
call run the same functions; a stored plan only skips the rules its key
already fixes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .arrays import ALIGN_MASK, IS_TORCH, ITEMSIZE, OBJ, Operand, c_contiguous

MAX_ROWS = 2**31 - 1  # the kernels index rows with 32-bit integers
MAX_K = 2**31 - 1  # and the elements of a row (a launch passes K as a 32-bit integer)


def byte_strides(a: Operand) -> tuple:
    """The strides of operand ``a`` in bytes; read only where a rule needs them
    (outputs need only their shape)."""
    obj, is_torch = a[OBJ], a[IS_TORCH]
    if is_torch:
        size = obj.element_size()
        return tuple(s * size for s in obj.stride())
    return obj.strides


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


def rows_view(a: Operand, name: str, dtypes, what: str, k_per_element: int, group: int, rule: str,
              halves: bool = False) -> RowsView:
    """The rules of every row-major input, in the order of their messages: dtype,
    ``K = k_per_element * shape[-1]`` (``shape[-1] // 2`` with ``halves``: the row holds
    two halves of K values each) a multiple of ``group`` (``rule`` says for what), the
    row count, the last dimension contiguous, rows not overlapping, the leading
    dimensions flattening with one stride. A 1-D input is one row."""
    _, _, shape, dtype, device, _ = a
    if dtype not in dtypes:
        raise TypeError(f"{name} must hold {what}, got dtype {dtype}")
    shape, strides = tuple(shape), tuple(byte_strides(a))
    if not shape:
        raise ValueError(f"{name} must have at least 1 dimension (..., K), got shape ()")
    itemsize = ITEMSIZE[dtype]
    width = shape[-1]
    k = k_per_element * width
    k_is = f"K ({'the last dimension' if k_per_element == 1 else '2 * the last dimension'} of {name})"
    if halves:
        if width % 2:
            raise ValueError(f"the last dimension of {name} (2N: two halves) must be even, got {width}")
        k, k_is = width // 2, f"N (half the last dimension of {name})"
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


def check_element_aligned(ptr: int, dtype: str, name: str) -> None:
    """A buffer's base must be a multiple of its element size: the kernels load and
    store whole elements (CuPy builds an array at any address it is given)."""
    mask = ALIGN_MASK.get(dtype)
    if mask and ptr & mask:
        raise ValueError(f"{name}'s base address {ptr:#x} is not a multiple of its element size ({mask + 1} bytes)")


def check_operand(a: Operand, name: str, shape: tuple, dtypes, device: int, nbytes: int | None = None,
                  others=()) -> tuple[object, int]:
    """``(obj, ptr)`` of buffer operand ``a`` (``as_operand`` of the caller's array), after
    a buffer's rules in the order of their messages: dtype, shape, device; then, for a
    real buffer (``nbytes`` given: ``dtypes`` are all of one size, so ``shape`` holds
    ``nbytes`` bytes), C-contiguity, no overlap with any of ``others`` ((name,
    [start, end)) pairs) and a base address that is a multiple of the element size.
    Torch's fake tensors are checked without ``nbytes``: they have no addresses, and
    the contiguity rule would specialize their symbolic sizes."""
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
    if ptr & 7:  # no element is wider than 8 bytes; the test is inline, the rule and its message are not
        check_element_aligned(ptr, dtype, name)
    return obj, ptr


def check_pdl(pdl) -> None:
    if pdl is not True and pdl is not False:
        raise TypeError(f"pdl must be a bool, got {pdl!r}")
