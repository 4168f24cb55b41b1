"""Where a call's outputs come from when the caller passes none.

The CuPy API allocates from CuPy's memory pool, on the pool of the stream
the kernel runs on: the pool is stream-ordered, so an output that the
caller drops while the kernel still runs must go back to that stream's
pool, not to one that could reuse it at once. (``fp4q.torch`` allocates
from torch's caching allocator instead, with the same interface.)

An allocator takes a role, which fixes the element type: ``q`` (packed
e2m1 pairs), ``sf_nvfp4`` / ``sf_mxfp4`` (e4m3 / e8m0 scale bytes),
``bfloat16``, ``float16``, ``uint16`` (bf16 bits) and ``float32`` (dequantized or
fake-quantized values), ``scale`` (float32 global
scale and its partial maxima), and returns ``(array, address)``.
"""

from __future__ import annotations

import numpy as np

from .arrays import cupy

# Per role, the CuPy element type.
_CUPY_DTYPES = {"q": np.uint8, "sf_nvfp4": np.uint8, "sf_mxfp4": np.uint8, "bfloat16": np.uint16,
                "float16": np.float16, "uint16": np.uint16, "float32": np.float32, "scale": np.float32}


class _RawStream:
    """A raw CUstream handle in the CUDA stream protocol."""

    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _cupy_stream(cp, handle: int, device: int):
    # ExternalStream is deprecated from CuPy 14 on, which has Stream.from_external instead.
    if hasattr(cp.cuda.Stream, "from_external"):
        return cp.cuda.Stream.from_external(_RawStream(handle))
    return cp.cuda.ExternalStream(handle, device)


def cupy_empty(shape: tuple, dtype, device: int, stream: int):
    """A new CuPy array on ``device`` from the memory pool of ``stream``."""
    cp = cupy()
    if stream != cp.cuda.get_current_stream(device).ptr:
        with cp.cuda.Device(device), _cupy_stream(cp, stream, device):
            return cp.empty(shape, dtype=dtype)
    if cp.cuda.runtime.getDevice() == device:
        return cp.empty(shape, dtype=dtype)
    with cp.cuda.Device(device):
        return cp.empty(shape, dtype=dtype)


def cupy_outputs(role: str, shape: tuple, device: int, stream: int) -> tuple[object, int]:
    """A new array for ``role``, and its address."""
    a = cupy_empty(shape, _CUPY_DTYPES[role], device, stream)
    return a, a.data.ptr
