"""tile_tickets: which counter a launch gets, with the driver faked (no GPU needed);
the GPU tests check the counters the kernel leaves behind."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from cuda.bindings import driver as cu

from fp4q.cuda import driver
from fp4q.numerics import reference
from fp4q.cuda import tile_tickets
from helpers import assert_bytes_equal, random_bf16

SUCCESS = cu.CUresult.CUDA_SUCCESS
NONE = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
ACTIVE = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE


class FakeDriver:
    CUresult = cu.CUresult
    CUstreamCaptureStatus = cu.CUstreamCaptureStatus
    CUstream_flags = cu.CUstream_flags
    CUstream = staticmethod(cu.CUstream)

    def __init__(self):
        self.capturing = {}  # stream -> status, or a CUresult error
        self.calls = []
        self.next_base = 0x10000

    def cuStreamIsCapturing(self, stream):
        status = self.capturing.get(int(stream), NONE)
        self.calls.append(("capturing?", int(stream)))
        if isinstance(status, cu.CUresult):
            return (status, NONE)
        return (SUCCESS, status)

    def cuMemAlloc(self, nbytes):
        base, self.next_base = self.next_base, self.next_base + 0x10000
        self.calls.append(("alloc", nbytes))
        return (SUCCESS, cu.CUdeviceptr(base))

    def cuStreamCreate(self, flags):
        self.calls.append(("stream", flags))
        return (SUCCESS, cu.CUstream(0x77))

    def cuMemsetD8Async(self, base, value, nbytes, stream):
        self.calls.append(("memset", int(base), value, nbytes, int(stream)))
        return (SUCCESS,)

    def cuStreamSynchronize(self, stream):
        self.calls.append(("sync", int(stream)))
        return (SUCCESS,)

    def cuStreamDestroy(self, stream):
        self.calls.append(("destroy", int(stream)))
        return (SUCCESS,)


@pytest.fixture
def fake(monkeypatch):
    fake = FakeDriver()
    monkeypatch.setattr(tile_tickets, "driver_api", lambda: fake)
    monkeypatch.setattr(tile_tickets, "in_context", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(tile_tickets, "_counters", {})
    monkeypatch.setattr(tile_tickets, "_free", {})
    return fake


def dev(ordinal=0):
    return driver.Device(ordinal, "Fake H200", (9, 0), 132, 232448, None, 0)


def test_one_counter_per_stream_and_device(fake):
    a = tile_tickets.counter_for(dev(), 0x100)
    b = tile_tickets.counter_for(dev(), 0x200)
    c = tile_tickets.counter_for(dev(1), 0x100)
    assert len({a, b, c}) == 3
    assert tile_tickets.counter_for(dev(), 0x100) == a
    assert all(x % 8 == 0 for x in (a, b, c))
    assert tile_tickets.counters_in_use() == 3


def test_counters_come_zeroed_and_waited_for(fake):
    tile_tickets.counter_for(dev(), 0x100)
    nbytes = tile_tickets.SLOTS_PER_BLOCK * tile_tickets.SLOT_BYTES
    made = [c for c in fake.calls if c[0] != "capturing?"]
    assert made == [("alloc", nbytes), ("stream", cu.CUstream_flags.CU_STREAM_NON_BLOCKING),
                    ("memset", 0x10000, 0, nbytes, 0x77), ("sync", 0x77), ("destroy", 0x77)]


def test_a_block_serves_its_slots_then_another_is_allocated(fake):
    n = tile_tickets.SLOTS_PER_BLOCK
    got = [tile_tickets.counter_for(dev(), 0x1000 + i) for i in range(n + 1)]
    assert len(set(got)) == n + 1
    assert sorted(got[:n]) == [0x10000 + 8 * i for i in range(n)]
    assert got[n] == 0x20000
    assert [c[0] for c in fake.calls].count("alloc") == 2


def test_a_capturing_stream_gets_no_counter(fake):
    fake.capturing[0x300] = ACTIVE
    assert tile_tickets.counter_for(dev(), 0x300) == 0
    fake.capturing[0x300] = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    assert tile_tickets.counter_for(dev(), 0x300) == 0
    fake.capturing[0x300] = NONE
    assert tile_tickets.counter_for(dev(), 0x300) != 0  # after the capture: the stream's own counter


def test_a_stream_the_driver_cannot_answer_for_gets_no_counter(fake):
    fake.capturing[0x400] = cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    assert tile_tickets.counter_for(dev(), 0x400) == 0
    assert tile_tickets.counters_in_use() == 0


def test_the_legacy_stream_is_never_asked_about_capture(fake):
    tile_tickets.counter_for(dev(), 0)
    tile_tickets.counter_for(dev(), 1)
    tile_tickets.counter_for(dev(), 2)  # the per-thread default stream can be captured
    assert [c for c in fake.calls if c[0] == "capturing?"] == [("capturing?", 2)]


@pytest.mark.parametrize("handle", [0, 1, 2])
def test_default_streams_get_a_counter_per_thread(fake, handle):
    mine = tile_tickets.counter_for(dev(), handle)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(tile_tickets.counter_for(dev(), handle)))
    worker.start()
    worker.join()
    assert theirs[0] != mine
    assert tile_tickets.counter_for(dev(), handle) == mine


def test_other_streams_share_their_counter_across_threads(fake):
    mine = tile_tickets.counter_for(dev(), 0x500)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(tile_tickets.counter_for(dev(), 0x500)))
    worker.start()
    worker.join()
    assert theirs == [mine]


def test_threads_asking_at_once_get_one_counter_per_stream(fake):
    barrier = threading.Barrier(8)
    got = [None] * 8

    def ask(i):
        barrier.wait()
        got[i] = tile_tickets.counter_for(dev(), 0x600 + i % 2)

    workers = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(set(got[0::2])) == 1 and len(set(got[1::2])) == 1 and got[0] != got[1]
    assert tile_tickets.counters_in_use() == 2


# ------------------------------------------------------------------------------------------------------- GPU
# 2048 x 8192 through the default TMA configs, given explicitly (a default call takes the vector
# kernels at this size): 2048 quantize tiles of 128x64, more than one per CTA, and the same for
# dequantization.
M, K = 2048, 8192


def _tma_configs():
    import fp4q

    arch = driver.device(0).arch
    return fp4q.default_config(arch), fp4q.DequantizeConfig(arch=arch)


def _counter_words(cp, stream):
    words = np.zeros(2, np.uint32)
    address = tile_tickets.counter_for(driver.device(0), stream.ptr)
    cp.cuda.runtime.memcpy(words.ctypes.data, address, 8, cp.cuda.runtime.memcpyDeviceToHost)
    return words.tolist()


def _expected(x_host):
    return reference.quantize_nvfp4(x_host, 1.0, sf_layout="linear")


@pytest.mark.gpu
def test_launches_on_several_streams_are_exact_and_leave_their_counters_zero():
    import cupy as cp

    import fp4q

    x_host = random_bf16((M, K), np.random.default_rng(7))
    x = cp.asarray(x_host)
    config, _ = _tma_configs()
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(3)]
    outs = []
    for i in range(12):
        stream = streams[i % 3]
        with stream:
            outs.append(fp4q.quantize_nvfp4(x, 1.0, sf_layout="linear", stream=stream, pdl=bool(i % 2),
                                            config=config))
    for stream in streams:
        stream.synchronize()
        assert _counter_words(cp, stream) == [0, 0]
    q_ref, sf_ref = _expected(x_host)
    for i, (q, sf) in enumerate(outs):
        assert_bytes_equal(cp.asnumpy(q), q_ref, f"q of launch {i}")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"sf of launch {i}")


@pytest.mark.gpu
def test_a_captured_launch_replays_exactly_beside_launches_on_its_capture_stream():
    import cupy as cp

    import fp4q

    x_host = random_bf16((M, K), np.random.default_rng(8))
    x = cp.asarray(x_host)
    q_ref, sf_ref = _expected(x_host)
    config, _ = _tma_configs()
    capture, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    q_graph = cp.empty((M, K // 2), cp.uint8)
    sf_graph = cp.empty((M, K // 16), cp.uint8)
    with capture:
        fp4q.quantize_nvfp4(x, 1.0, sf_layout="linear", out=q_graph, sf_out=sf_graph, config=config)  # compile outside
        capture.synchronize()
        capture.begin_capture()
        fp4q.quantize_nvfp4(x, 1.0, sf_layout="linear", out=q_graph, sf_out=sf_graph, stream=capture, config=config)
        graph = capture.end_capture()
    direct = []
    for _ in range(4):
        q_graph.fill(0xFF)
        sf_graph.fill(0xFF)
        cp.cuda.Device().synchronize()
        graph.launch(other)  # the graph's kernel runs the static order: no counter to share
        with capture:
            direct.append(fp4q.quantize_nvfp4(x, 1.0, sf_layout="linear", stream=capture, config=config))
        other.synchronize()
        capture.synchronize()
        assert_bytes_equal(cp.asnumpy(q_graph), q_ref, "graph q")
        assert_bytes_equal(cp.asnumpy(sf_graph), sf_ref, "graph sf")
    assert _counter_words(cp, capture) == [0, 0]
    for q, sf in direct:
        assert_bytes_equal(cp.asnumpy(q), q_ref, "direct q")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, "direct sf")


@pytest.mark.gpu
def test_dequantize_launches_on_several_streams_are_exact_and_leave_their_counters_zero():
    import cupy as cp

    import fp4q

    x_host = random_bf16((M, K), np.random.default_rng(9))
    q_host, sf_host = _expected(x_host)
    y_ref = reference.dequantize_nvfp4(q_host, sf_host, 1.0, sf_layout="linear", dtype="float32")
    q, sf = cp.asarray(q_host), cp.asarray(sf_host)
    _, config = _tma_configs()
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    outs = []
    for i in range(6):
        stream = streams[i % 2]
        with stream:
            outs.append(fp4q.dequantize_nvfp4(q, sf, 1.0, sf_layout="linear", dtype="float32", stream=stream,
                                              pdl=bool(i % 2), config=config))
    for stream in streams:
        stream.synchronize()
        assert _counter_words(cp, stream) == [0, 0]
    for i, y in enumerate(outs):
        assert_bytes_equal(cp.asnumpy(y), y_ref, f"dequantized launch {i}")
