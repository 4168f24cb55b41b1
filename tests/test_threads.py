"""Concurrency (issue "Reliability"): module loading, TMA descriptor reuse and
launches from 8 threads at once, each on its own inputs, configs and
streams, all bit-exact; the kernel cache hands racing threads one
LoadedKernel; outputs handed back while the launch stream still runs."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fp4q
from fp4q.numerics import reference
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.variants import SHIPPED

from helpers import assert_bytes_equal, random_bf16

pytestmark = pytest.mark.gpu

THREADS = 8
ITERATIONS = 3
SHAPES = [(129, 2176), (5, 64), (300, 512), (33, 80), (1, 16)]
# Used nowhere else in the tests, so their modules are first loaded by the racing threads below.
FRESH_TMA = QuantizeConfig(num_stages=3, out_buffers=3)
FRESH_TMA_2 = QuantizeConfig(num_stages=5, out_buffers=4, consumer_warpgroups=1)
FRESH_SIMT = SimtConfig(threads=512)
FRESH_SIMT_2 = SimtConfig(threads=64)
CONFIGS = [FRESH_TMA, FRESH_SIMT, None, SHIPPED["m128_k64_s6_wg1"], SHIPPED["m256_k128_s2_wg2"], SimtConfig()]


def _cp():
    return pytest.importorskip("cupy")


def run_together(n, prepare, work):
    """``prepare(i)`` in each of ``n`` threads, then all meet at a barrier and run ``work(i, prepared)``."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, [None] * n

    def body(i):
        try:
            state = prepare(i)
            barrier.wait(timeout=120)
            results[i] = work(i, state)
        except BaseException as exc:  # re-raised in the main thread
            errors[i] = exc
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,), name=f"fp4q-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
        assert not t.is_alive(), f"{t.name} did not finish"
    for i, exc in enumerate(errors):
        if exc is not None and not isinstance(exc, threading.BrokenBarrierError):
            exc.add_note(f"(raised in thread {i} of {n})")
            raise exc
    assert not any(errors), errors
    return results


def _tma_ok(k):
    return k % 32 == 0


def test_eight_threads_quantize_bit_exact():
    cp = _cp()
    from fp4q.cuda.launch import tensor_maps

    hits_before = tensor_maps.hits

    def prepare(i):
        rng = np.random.default_rng(1000 + i)
        streams = [cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=bool(i % 2))]
        inputs = []
        for m, k in SHAPES:
            bits = random_bf16((m, k), rng, scale=2.0 ** int(rng.integers(-20, 20)), specials=0.02)
            tsf = np.float32(reference.global_scale(bits) * np.float32(1 + i / 16))
            inputs.append((bits, cp.asarray(bits), tsf, cp.asarray(np.full((), tsf, np.float32))))
        # Reused output buffers per (shape, layout, stream): the same pointers come back every iteration.
        buffers = {}
        for s in range(len(streams)):
            for j, (bits, _, _, _) in enumerate(inputs):
                m, k = bits.shape
                for layout in ("swizzled", "linear"):
                    sf_shape = fp4q.swizzled_sf_shape(m, k) if layout == "swizzled" else (m, k // 16)
                    buffers[s, j, layout] = (cp.full((m, k // 2), 0xEE, cp.uint8), cp.full(sf_shape, 0xEE, cp.uint8))
        cp.cuda.Device().synchronize()
        return rng, streams, inputs, buffers

    def work(i, state):
        rng, streams, inputs, buffers = state
        outputs = {}
        for it in range(ITERATIONS):
            for cfg in CONFIGS:
                for j, (bits, x, tsf, tsf_dev) in enumerate(inputs):
                    if isinstance(cfg, QuantizeConfig) and not _tma_ok(bits.shape[1]):
                        continue
                    for layout in ("swizzled", "linear"):
                        for device_sf in (False, True):
                            s = int(rng.integers(len(streams)))
                            kwargs = dict(sf_layout=layout, config=cfg, stream=streams[s], pdl=bool(rng.integers(2)))
                            reuse = bool(rng.integers(2))
                            if reuse:
                                kwargs["out"], kwargs["sf_out"] = buffers[s, j, layout]
                            # The reused buffers of one stream are only written in that stream's order.
                            q, sf = fp4q.quantize_nvfp4(x, tsf_dev if device_sf else float(tsf), **kwargs)
                            outputs[it, id(cfg), j, layout, device_sf, reuse] = (j, layout, streams[s], q, sf)
        for s in streams:
            s.synchronize()
        return {key: (j, layout, cp.asnumpy(q), cp.asnumpy(sf)) for key, (j, layout, _, q, sf) in outputs.items()}

    states = {}

    def prepare_and_keep(i):
        states[i] = prepare(i)
        return states[i]

    results = run_together(THREADS, prepare_and_keep, work)
    checked = 0
    for i, outputs in enumerate(results):
        refs = {}
        for key, (j, layout, q, sf) in outputs.items():
            bits, _, tsf, _ = states[i][2][j]
            if (j, layout) not in refs:
                refs[j, layout] = reference.quantize_nvfp4(bits, tsf, sf_layout=layout)
            q_ref, sf_ref = refs[j, layout]
            assert_bytes_equal(q, q_ref, f"thread {i} q {key}")
            assert_bytes_equal(sf, sf_ref, f"thread {i} sf {key}")
            checked += 1
    assert checked >= THREADS * len(SHAPES) * 2 * 2
    assert tensor_maps.hits > hits_before, "TMA descriptors were never reused"


@pytest.mark.parametrize("base", [FRESH_TMA_2, FRESH_SIMT_2], ids=["tma", "simt"])
def test_kernel_cache_hands_racing_threads_one_loaded_kernel(base):
    cp = _cp()
    from fp4q.cuda import driver
    from fp4q.jit.loader import get_kernel

    arch = driver.device(0).arch
    cfg = base.replace(sf_layout="linear", tensor_sf_mode="pointer", input_dtype="bfloat16", arch=arch)
    kernels = run_together(THREADS, lambda i: None, lambda i, _: get_kernel(cfg.spec, 0))
    assert all(k is kernels[0] for k in kernels), "racing threads got different LoadedKernel objects"
    assert get_kernel(cfg.spec, 0) is kernels[0]
    # ... and the kernel they share works.
    rng = np.random.default_rng(3)
    bits = random_bf16((257, 1024), rng, specials=0.01)
    tsf = cp.asarray(np.float32(0.75))
    q, sf = fp4q.quantize_nvfp4(cp.asarray(bits), tsf, sf_layout="linear", config=base)
    cp.cuda.Device().synchronize()
    q_ref, sf_ref = reference.quantize_nvfp4(bits, np.float32(0.75), sf_layout="linear")
    assert_bytes_equal(cp.asnumpy(q), q_ref, "q")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, "sf")


def test_fresh_outputs_can_be_dropped_while_the_launch_stream_runs():
    """quantize_nvfp4(..., stream=s) allocates q/sf; CuPy's pool hands a freed block out again on the
    stream it was allocated for, in that stream's order. If the outputs are allocated for the current stream
    but written on ``s``, dropping them (normal asynchronous code) lets the current stream reuse the
    memory while the kernel on ``s`` still writes into it."""
    cp = _cp()
    s1 = cp.cuda.Stream(non_blocking=True)
    bits = random_bf16((1024, 4096), np.random.default_rng(5))
    x = cp.asarray(bits)
    busy = cp.ones(2**26, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    with s1:  # keep s1 busy (tens of ms) so the quantize kernel queued behind this runs late
        for _ in range(200):
            busy *= np.float32(1.0000001)
    q, sf = fp4q.quantize_nvfp4(x, 1.0, stream=s1)
    ptr, nbytes = q.data.ptr, q.nbytes
    del q, sf
    mine = cp.zeros(nbytes, dtype=cp.uint8)  # on the current stream, which does not wait for s1
    # CuPy's pool hands a freed block out again only on the stream it was allocated for, so outputs
    # allocated for s1 never come back here; outputs allocated for the current stream would.
    reused = mine.data.ptr == ptr
    cp.cuda.Device().synchronize()
    assert not reused, (
        "the pool handed the output's memory out again on the current stream while the kernel on the launch "
        f"stream could still write it (and it wrote: {bool(mine.any())}): outputs must be allocated for the "
        "launch stream"
    )


def _context_is_current() -> bool:
    from cuda.bindings import driver as cu

    err, ctx = cu.cuCtxGetCurrent()
    return err == cu.CUresult.CUDA_SUCCESS and ctx is not None and int(ctx) != 0


def test_first_cuda_work_of_a_thread_is_a_quantize_call():
    cp = _cp()
    rng = np.random.default_rng(21)
    bits = random_bf16((256, 1024), rng)
    x = cp.asarray(bits)
    stream = cp.cuda.Stream(non_blocking=True)
    jobs = [(cp.full((256, 512), 0xEE, cp.uint8), cp.full(fp4q.swizzled_sf_shape(256, 1024), 0xEE, cp.uint8))
            for _ in range(THREADS)]  # new pointers for every thread: every call encodes new tensor maps
    cp.cuda.Device().synchronize()
    preconditions = []

    def work(i, _):
        preconditions.append(_context_is_current())
        out, sf_out = jobs[i]
        fp4q.quantize_nvfp4(x, 0.5, out=out, sf_out=sf_out, stream=stream, config=QuantizeConfig())

    run_together(THREADS, lambda i: None, work)
    stream.synchronize()
    assert not any(preconditions), "the threads already had a current context: this test proves nothing"
    q_ref, sf_ref = reference.quantize_nvfp4(bits, 0.5)
    for i, (out, sf_out) in enumerate(jobs):
        assert_bytes_equal(cp.asnumpy(out), q_ref, f"thread {i} q")
        assert_bytes_equal(cp.asnumpy(sf_out), sf_ref, f"thread {i} sf")
