"""Which stream a call runs on.

Without ``stream=``, a call runs on the current stream of the library its
input comes from: torch's current stream for a torch tensor (torch orders
its own work on it, and its side streams are non-blocking, so any other
stream would race with the producer of ``x`` and the consumer of the
outputs), CuPy's current stream for anything else. ``stream=`` takes a
CuPy stream, a torch stream, any object with ``__cuda_stream__``, or a raw
``CUstream`` handle as an int.
"""

from __future__ import annotations

from .arrays import cupy, torch_module


_torch_raw_stream = None


def torch_current_stream(device: int) -> int:
    """The raw handle of torch's current stream on ``device``.

    torch's private ``_cuda_getCurrentRawStream`` returns the handle without
    building a ``torch.cuda.Stream`` (about 1 us less per call); builds that
    lack it take the public way."""
    global _torch_raw_stream
    if _torch_raw_stream is None:
        torch = torch_module()
        _torch_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _torch_raw_stream(device)


_cupy_current_stream = None


def _cupy_stream_getter():
    global _cupy_current_stream
    _cupy_current_stream = cupy().cuda.get_current_stream
    return _cupy_current_stream


def stream_handle(stream, device: int, is_torch: bool) -> int:
    """The raw CUstream for ``stream`` on the input's ``device`` (``None``: the current
    stream of the input's library, torch's when ``is_torch``).
    The two current-stream getters are bound on first use, so the default costs no
    further Python call."""
    if stream is None:
        if is_torch:
            return (_torch_raw_stream or torch_current_stream)(device)
        return (_cupy_current_stream or _cupy_stream_getter())(device).ptr
    cp = cupy()
    if isinstance(stream, (cp.cuda.Stream, cp.cuda.ExternalStream)):
        stream_device = getattr(stream, "device_id", device)
        if stream_device not in (-1, device):
            raise ValueError(f"stream belongs to device {stream_device} but the input is on device {device}")
        return stream.ptr
    torch = torch_module()
    if torch is not None and isinstance(stream, torch.cuda.Stream):
        if stream.device.index != device:
            raise ValueError(f"stream belongs to device {stream.device.index} but the input is on device {device}")
        return int(stream.cuda_stream)
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (cuda.core and others)
        return int(stream.__cuda_stream__()[1])
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    raise TypeError(
        f"stream must be a cupy.cuda.Stream, a torch stream, an object with __cuda_stream__ "
        f"or a raw handle (int), got {stream!r} ({type(stream).__name__})"
    )
