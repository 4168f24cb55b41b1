"""Soak test (issue "Reliability"): many quantize_nvfp4 calls of mixed shapes,
configs, layouts and tensor_sf modes on several streams from two threads.

Measures device memory (CuPy pool bytes in use and held, cudaMemGetInfo's
free bytes) and host RSS after a warm-up and at the end, spot-checks an
output against the reference every ``--check-every`` calls, and prints
calls/s, minutes, memory before/after and the error count. Exits 1 on any
mismatch or exception, or when device memory grew by more than
``--max-device-growth-mib`` (default 64) or host RSS by more than
``--max-host-growth-mib`` (default 256).

    python scripts/gpu/soak.py [--calls 100000] [--threads 2] [--streams 4]

Each thread makes every call inside ``with stream:`` so that the outputs fp4q
allocates come from the pool of the stream that writes them: outputs are
dropped right after the call, as asynchronous code does.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time

import cupy as cp
import numpy as np

import fp4q
from fp4q.numerics import reference
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.variants import SHIPPED

MIB = 1 << 20
MAX_LISTED = 20
# Small and medium shapes: the run is about the host path and resource lifetimes, not bandwidth.
SHAPES = [(1, 16), (7, 64), (33, 80), (128, 128), (129, 2176), (300, 512), (64, 4096), (512, 1024), (1000, 256)]
CONFIGS = {
    "auto": None,
    "simt": SimtConfig(),
    "simt_128": SimtConfig(threads=128),
    "m128_k128_s4_wg2": SHIPPED["m128_k128_s4_wg2"],
    "m128_k64_s6_wg1": SHIPPED["m128_k64_s6_wg1"],
    "m256_k128_s2_wg2": SHIPPED["m256_k128_s2_wg2"],
    "m128_k128_tile_per_cta": SHIPPED["m128_k128_tile_per_cta"],
}
HOST_TSF = [1.0, 0.37, 2.0**-20, 448.0 * 6 / 3.0]


def host_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_snapshot() -> dict:
    cp.cuda.Device().synchronize()
    gc.collect()
    pool = cp.get_default_memory_pool()
    free, total = cp.cuda.runtime.memGetInfo()
    return {
        "pool_used": pool.used_bytes(),
        "pool_held": pool.total_bytes(),
        "device_free": free,
        "device_total": total,
        "host_rss": host_rss_bytes(),
    }


def fmt(snap: dict) -> str:
    return (f"pool used {snap['pool_used'] / MIB:.1f} MiB, pool held {snap['pool_held'] / MIB:.1f} MiB, "
            f"device free {snap['device_free'] / MIB:.0f} MiB, host RSS {snap['host_rss'] / MIB:.1f} MiB")


class Inputs:
    """Device inputs shared read-only by the threads, and lazily computed references."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.bits, self.x = [], []
        for m, k in SHAPES:
            bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
            specials = rng.random((m, k)) < 0.01
            bits[specials] = rng.choice(np.array([0x7FC0, 0xFF80, 0x8000, 0x0001], np.uint16), int(specials.sum()))
            self.bits.append(bits)
            self.x.append(cp.asarray(bits))
        self.tsf = [np.float32(v) for v in HOST_TSF]
        self.tsf_dev = [cp.asarray(np.full((), v, np.float32)) for v in self.tsf]
        self._refs: dict = {}
        self._lock = threading.Lock()
        cp.cuda.Device().synchronize()

    def reference(self, shape_i: int, tsf_i: int, layout: str):
        key = (shape_i, tsf_i, layout)
        with self._lock:
            found = self._refs.get(key)
        if found is None:
            found = reference.quantize_nvfp4(self.bits[shape_i], self.tsf[tsf_i], sf_layout=layout)
            with self._lock:
                self._refs[key] = found
        return found


class Worker(threading.Thread):
    def __init__(self, index: int, calls: int, inputs: Inputs, streams, check_every: int, barrier,
                 buffers: dict) -> None:
        super().__init__(name=f"soak-{index}", daemon=True)
        self.index, self.calls, self.inputs, self.streams = index, calls, inputs, streams
        self.check_every, self.barrier = check_every, barrier
        self.rng = np.random.default_rng(100 + index)
        self.errors: list[str] = []  # the first MAX_LISTED messages
        self.error_count = 0
        self.init_context = False
        self.checks = 0
        self.done = 0
        # Reused output buffers per (stream, shape, layout): written only in that stream's order; kept
        # from one phase to the next so that they do not count as growth.
        self.buffers = buffers

    def _buffers(self, s: int, shape_i: int, layout: str):
        key = (s, shape_i, layout)
        if key not in self.buffers:
            m, k = SHAPES[shape_i]
            sf_shape = fp4q.swizzled_sf_shape(m, k) if layout == "swizzled" else (m, k // 16)
            with self.streams[s]:
                self.buffers[key] = (cp.empty((m, k // 2), cp.uint8), cp.empty(sf_shape, cp.uint8))
        return self.buffers[key]

    def one_call(self, check: bool) -> None:
        rng = self.rng
        shape_i = int(rng.integers(len(SHAPES)))
        m, k = SHAPES[shape_i]
        names = [n for n, c in CONFIGS.items() if not (isinstance(c, QuantizeConfig) and k % 32)]
        name = names[int(rng.integers(len(names)))]
        layout = "swizzled" if rng.integers(2) else "linear"
        tsf_i = int(rng.integers(len(self.inputs.tsf)))
        device_sf = bool(rng.integers(2))
        s = int(rng.integers(len(self.streams)))
        stream = self.streams[s]
        kwargs = dict(sf_layout=layout, config=CONFIGS[name], pdl=bool(rng.integers(2)))
        if rng.integers(2):  # pass the stream explicitly, or let fp4q take the current one
            kwargs["stream"] = stream
        if rng.integers(2):
            kwargs["out"], kwargs["sf_out"] = self._buffers(s, shape_i, layout)
        tsf = self.inputs.tsf_dev[tsf_i] if device_sf else float(self.inputs.tsf[tsf_i])
        with stream:
            q, sf = fp4q.quantize_nvfp4(self.inputs.x[shape_i], tsf, **kwargs)
        if check:
            stream.synchronize()
            q_ref, sf_ref = self.inputs.reference(shape_i, tsf_i, layout)
            self.checks += 1
            if not (np.array_equal(cp.asnumpy(q), q_ref) and np.array_equal(cp.asnumpy(sf), sf_ref)):
                self._error(f"MISMATCH {name} {m}x{k} {layout} device_sf={device_sf} stream={s}")

    def _error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_LISTED:
            self.errors.append(message)

    def run(self) -> None:
        try:
            if self.init_context:  # make the primary context current in this thread, as CUDA runtime calls do
                cp.cuda.runtime.setDevice(cp.cuda.Device().id)
                cp.cuda.runtime.free(0)
            self.barrier.wait()
            for i in range(self.calls):
                try:
                    self.one_call(check=(i % self.check_every == self.check_every - 1))
                except Exception as exc:  # noqa: BLE001 - counted and reported; the soak goes on
                    self._error(f"call {i}: {type(exc).__name__}: {exc}")
                self.done = i + 1
            for s in self.streams:
                s.synchronize()
        except Exception as exc:  # noqa: BLE001
            self._error(f"worker: {type(exc).__name__}: {exc}")


def run_phase(calls: int, threads: int, inputs: Inputs, streams, check_every: int, buffers, init_context: bool):
    barrier = threading.Barrier(threads)
    per = [calls // threads + (1 if i < calls % threads else 0) for i in range(threads)]
    workers = [Worker(i, per[i], inputs, streams[i], check_every, barrier, buffers[i]) for i in range(threads)]
    for w in workers:
        w.init_context = init_context
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    cp.cuda.Device().synchronize()
    return workers, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--streams", type=int, default=4, help="streams per thread")
    parser.add_argument("--check-every", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=2000, help="calls before the baseline is measured")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-device-growth-mib", type=float, default=64)
    parser.add_argument("--max-host-growth-mib", type=float, default=256)
    parser.add_argument("--init-threads", action="store_true",
                        help="make the CUDA context current in each worker thread before its first call "
                        "(by default the threads start cold, as threads that only use arrays made elsewhere do)")
    args = parser.parse_args()

    start_snap = memory_snapshot()
    print(f"start:        {fmt(start_snap)}", flush=True)
    inputs = Inputs(args.seed)
    streams = [[cp.cuda.Stream(non_blocking=bool(j % 2)) for j in range(args.streams)] for _ in range(args.threads)]
    buffers = [{} for _ in range(args.threads)]

    # Warm-up: compiles, module loads, descriptor and pool caches; it is checked too.
    warm_workers, warm_seconds = run_phase(args.warmup, args.threads, inputs, streams, max(1, args.check_every // 10),
                                          buffers, args.init_threads)
    before = memory_snapshot()
    print(f"after warm-up ({args.warmup} calls, {warm_seconds:.1f} s): {fmt(before)}", flush=True)

    workers, seconds = run_phase(args.calls, args.threads, inputs, streams, args.check_every, buffers,
                                 args.init_threads)
    after = memory_snapshot()
    print(f"after soak:   {fmt(after)}", flush=True)

    errors = [f"warm-up {e}" for w in warm_workers for e in w.errors] + [e for w in workers for e in w.errors]
    error_count = sum(w.error_count for w in warm_workers + workers)
    calls = sum(w.done for w in workers)
    checks = sum(w.checks for w in warm_workers + workers)
    device_growth = max(after["pool_used"] - before["pool_used"], after["pool_held"] - before["pool_held"],
                        before["device_free"] - after["device_free"])
    host_growth = after["host_rss"] - before["host_rss"]
    print(f"calls: {calls} in {seconds:.1f} s ({seconds / 60:.2f} min), {calls / max(seconds, 1e-9):.0f} calls/s, "
          f"{args.threads} threads x {args.streams} streams", flush=True)
    print(f"spot checks: {checks}; errors: {error_count}", flush=True)
    print(f"device growth: {device_growth / MIB:.1f} MiB (limit {args.max_device_growth_mib}); "
          f"host RSS growth: {host_growth / MIB:.1f} MiB (limit {args.max_host_growth_mib})", flush=True)
    for e in errors[:MAX_LISTED]:
        print("  " + e, flush=True)

    failed = False
    if error_count:
        failed = True
    if calls != args.calls:
        print(f"FAIL: only {calls} of {args.calls} calls completed", flush=True)
        failed = True
    if device_growth > args.max_device_growth_mib * MIB:
        print("FAIL: device memory grew beyond the limit", flush=True)
        failed = True
    if host_growth > args.max_host_growth_mib * MIB:
        print("FAIL: host RSS grew beyond the limit", flush=True)
        failed = True
    print("soak: FAIL" if failed else "soak: OK", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
