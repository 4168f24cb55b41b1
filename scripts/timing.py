"""GPU timing helpers shared by the sweep and the benchmark scripts.

Times come from CUDA events around many launches, after a warm-up, with the
L2 flushed between repetitions unless the footprint is far larger than L2.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import cupy as cp

L2_FLUSH_BYTES = 256 << 20


@dataclass
class Timing:
    median_us: float
    min_us: float
    samples: int


_flush_buf = None


def flush_l2() -> None:
    global _flush_buf
    if _flush_buf is None:
        _flush_buf = cp.empty(L2_FLUSH_BYTES, dtype=cp.uint8)
    _flush_buf.fill(0)


def time_fn(fn, *, warmup: int = 5, reps: int = 50, flush: bool = True) -> Timing:
    """Median and min of ``reps`` single-launch timings of ``fn`` on the current stream."""
    for _ in range(warmup):
        fn()
    stream = cp.cuda.get_current_stream()
    samples = []
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(reps):
        if flush:
            flush_l2()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
    return Timing(statistics.median(samples), min(samples), len(samples))


def copy_bytes(m: int, k: int) -> tuple[int, int]:
    """(read, write) bytes of NVFP4 quantization of an m x k bf16 tensor."""
    return 2 * m * k, m * k // 2 + m * k // 16


def copy_fn(m: int, k: int):
    """A device-to-device copy moving as many bytes (read + written) as the quantizer.

    A memcpy of N bytes reads N and writes N, so N = (read + write) / 2.
    """
    read, write = copy_bytes(m, k)
    total = max(16, (read + write) // 2)
    src = cp.ones(total, dtype=cp.uint8)
    dst = cp.empty(total, dtype=cp.uint8)

    def run():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, total, cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)

    return run
