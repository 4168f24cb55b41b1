"""GPU timing helpers shared by the sweep and the benchmark scripts.

Times come from CUDA events around many launches, after a warm-up, with the
L2 flushed between repetitions unless the footprint is far larger than L2.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import cupy as cp

L2_FLUSH_BYTES = 256 << 20


# Entries a repetition may leave in the launch queue before the host could
# block on a full queue (which would let host time leak into device time).
QUEUE_BUDGET = 384
# Spin per queued repetition: at least this, and twice the measured host time of a call plus 100 us.
MIN_SPIN_PER_REP_US = 300.0


@dataclass
class Timing:
    median_us: float
    min_us: float
    samples: int
    host_bound: bool = False  # the spin ended before a chunk was queued: host time may show as device time


FLUSH_PASSES = 2

_flush = None


def flush_l2() -> None:
    """Evict L2 by reading a buffer far larger than it, FLUSH_PASSES times.

    Reads leave L2 holding clean lines, so the timed kernel never pays for
    writing back the flush's own data. Two passes, not one: after a single
    pass (of reads or of writes) consecutive repetitions alternated between
    two L2 states about 0.3 us apart on an H200 (a 5 us kernel), so a
    contender's median depended on the parity of the repetitions measured
    before it; with two passes per repetition the alternation is gone.
    """
    global _flush
    if _flush is None:
        kernel = cp.RawKernel(
            r"""
            extern "C" __global__ void fp4q_read_flush(const uint4* p, unsigned long long n, unsigned* sink) {
                unsigned acc = 0;
                for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
                     i += (unsigned long long)gridDim.x * blockDim.x) {
                    const uint4 v = p[i];
                    acc ^= v.x ^ v.y ^ v.z ^ v.w;
                }
                if (acc == 0x9E3779B9u) *sink = acc;  // a use of every load, never true for zeros
            }""",
            "fp4q_read_flush",
        )
        buf = cp.zeros(L2_FLUSH_BYTES, dtype=cp.uint8)
        sink = cp.zeros(1, dtype=cp.uint32)
        blocks = 4 * cp.cuda.Device().attributes["MultiProcessorCount"]
        _flush = (kernel, (blocks,), (512,), (buf, cp.uint64(buf.size // 16), sink))
    kernel, grid, block, args = _flush
    for _ in range(FLUSH_PASSES):
        kernel(grid, block, args)


_SPIN = None


def spin(microseconds: float) -> None:
    """Occupy the stream for a while so that everything enqueued after it
    runs back to back on the GPU, whatever the host's launch overhead."""
    global _SPIN
    if _SPIN is None:
        _SPIN = cp.RawKernel(
            r"""
            extern "C" __global__ void fp4q_spin(long long ns) {
                long long start, now;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
                do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
            }""",
            "fp4q_spin",
        )
    _SPIN((1,), (1,), (cp.int64(int(microseconds * 1000)),))


def chunk_size(reps: int, entries: int) -> int:
    """Repetitions queued behind one spin: as many as fit the queue budget (a repetition is ``entries``
    launches of fn, two events and the flush's launches)."""
    return max(1, min(reps, QUEUE_BUDGET // (entries + 2 + FLUSH_PASSES)))


def spin_us(n: int, host_us: float) -> float:
    """How long the spin must last for n repetitions of a call whose host time is ``host_us``."""
    return n * max(MIN_SPIN_PER_REP_US, 2.0 * host_us + 100.0) + 2000.0


def time_fn(fn, *, warmup: int = 5, reps: int = 50, flush: bool = True, entries: int = 1) -> Timing:
    """Median and min device time of ``fn`` (``entries`` launches or fewer, on the current stream).

    Each repetition is bracketed by its own events and, with ``flush``,
    preceded by an L2 flush; the repetitions are queued behind a spin kernel
    sized from the measured host time of one call, so host overhead never
    shows as device time, in chunks small enough that the launch queue never
    fills. ``host_bound`` in the result says whether a spin ran out before
    its chunk was queued anyway.
    """
    stream = cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    start = time.perf_counter()
    fn()
    host_us = (time.perf_counter() - start) * 1e6
    stream.synchronize()
    chunk = chunk_size(reps, entries)
    samples: list[float] = []
    host_bound = False
    while len(samples) < reps:
        n = min(chunk, reps - len(samples))
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(n)]
        spin(spin_us(n, host_us))
        spin_done = cp.cuda.Event()
        spin_done.record(stream)
        for begin, end in events:
            if flush:
                flush_l2()
            begin.record(stream)
            fn()
            end.record(stream)
        host_bound |= spin_done.done
        events[-1][1].synchronize()
        samples.extend(cp.cuda.get_elapsed_time(b, e) * 1e3 for b, e in events)
    return Timing(statistics.median(samples), min(samples), len(samples), host_bound)


def host_us_per_call(fn, calls: int = 2000) -> float:
    """Host (Python) time per call of ``fn`` with warm caches, in microseconds."""
    for _ in range(50):
        fn()
    cp.cuda.get_current_stream().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    cp.cuda.get_current_stream().synchronize()
    return elapsed / calls * 1e6


def copy_bytes(m: int, k: int) -> tuple[int, int]:
    """(read, write) bytes of NVFP4 quantization of an m x k bf16 tensor."""
    return 2 * m * k, m * k // 2 + m * k // 16


def copy_fn(m: int, k: int):
    """A device-to-device copy moving as many bytes (read + written) as the quantizer."""
    return copy_fn_bytes(*copy_bytes(m, k))


def copy_fn_bytes(read: int, write: int):
    """A device-to-device copy moving ``read + write`` bytes.

    A memcpy of N bytes reads N and writes N, so N = (read + write) / 2.
    """
    total = max(16, (read + write) // 2)
    src = cp.ones(total, dtype=cp.uint8)
    dst = cp.empty(total, dtype=cp.uint8)

    def run():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, total, cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)

    return run
