"""Counters for the dynamic tile order of the TMA kernels (quantize and dequantize).

A persistent launch hands out its tiles from a counter of two 32-bit words
in device memory, {next ticket, CTAs finished}: zero when the launch starts,
and zero again when it ends, because the kernel's last CTA resets it. So
two launches that share a counter must never overlap, and each counter
belongs to one stream: launches on a stream run in order, and the next one
takes its first ticket only after the previous grid has completed (with PDL
too, its producer first waits for that grid). The default stream handles
(0 legacy, 1 legacy, 2 per-thread) get a counter per calling thread as well:
the per-thread default stream is a different stream in every thread under
the same handle.

A launch that is being captured into a CUDA graph gets no counter and runs
the static tile order, which gives the same bytes: a graph can be replayed
on any stream, next to launches on the stream it was captured from, so no
counter could be kept to one stream.

Counters live as long as the process, ``SLOTS_PER_BLOCK`` to a block of
device memory per device, zeroed when the block is allocated.
"""

from __future__ import annotations

import threading

from .driver import Device, check, driver_api, in_context

SLOTS_PER_BLOCK = 256
SLOT_BYTES = 8  # two uint32 words
_DEFAULT_STREAMS = (0, 1, 2)
_NEVER_CAPTURED = (0, 1)  # the legacy stream cannot be captured

_counters: dict[tuple, int] = {}
_free: dict[int, list[int]] = {}  # device ordinal -> counter addresses not handed out yet
_lock = threading.Lock()


def counter_for(dev: Device, stream: int) -> int:
    """The counter for a launch on ``stream`` of ``dev``; 0 (the static tile order)
    while ``stream`` is being captured into a graph."""
    if stream not in _NEVER_CAPTURED and _capturing(stream):
        return 0
    key = (dev.ordinal, stream, threading.get_ident() if stream in _DEFAULT_STREAMS else 0)
    found = _counters.get(key)
    if found is None:
        with _lock:
            found = _counters.get(key)
            if found is None:
                found = _counters[key] = _take(dev)
    return found


def _capturing(stream: int) -> bool:
    """Whether ``stream`` is capturing; a stream the driver cannot answer for
    (an invalidated capture, say) is treated as capturing: the static order is
    right on every stream."""
    cu = driver_api()
    err, status = cu.cuStreamIsCapturing(cu.CUstream(stream))
    return err != cu.CUresult.CUDA_SUCCESS or status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _take(dev: Device) -> int:
    free = _free.setdefault(dev.ordinal, [])
    if not free:
        cu = driver_api()
        nbytes = SLOTS_PER_BLOCK * SLOT_BYTES
        with in_context(dev):
            base = int(check(cu.cuMemAlloc(nbytes), "cuMemAlloc(tile counters)"))
            # Zeroed on a stream of its own and waited for: a plain memset runs on the
            # legacy stream, which a non-blocking stream's next launch would not wait for.
            stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            try:
                check(cu.cuMemsetD8Async(base, 0, nbytes, stream), "cuMemsetD8Async(tile counters)")
                check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
            finally:
                check(cu.cuStreamDestroy(stream), "cuStreamDestroy")
        free.extend(base + SLOT_BYTES * i for i in reversed(range(SLOTS_PER_BLOCK)))
    return free.pop()


def counters_in_use() -> int:
    """How many streams (and threads, for the default streams) hold a counter."""
    return len(_counters)
