"""Every op with its inputs on the second GPU: outputs there, bytes equal to fp4q.reference, the
kernels loaded per device, and each GPU called from its own thread at once. Marked gpu; skipped
(with that reason) on a machine with fewer than two GPUs.

The CuPy API follows the input's device whatever device is current; fp4q.torch runs on the
current torch stream of the input's device."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fp4q
from fp4q.jit import loader
from fp4q.numerics import reference

from helpers import assert_bytes_equal, mixed_groups

gpu = pytest.mark.gpu
M, K = 300, 512  # M not a multiple of 128: the swizzled scales have padding rows


@pytest.fixture
def cp2():
    """CuPy, on a machine with two GPUs."""
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    return cupy


def on(cp, device: int, host: np.ndarray):
    with cp.cuda.Device(device):
        return cp.asarray(host)


def assert_on(arrays, device: int) -> None:
    for a in arrays:
        assert a.device.id == device, (a.shape, a.device.id)


@gpu
@pytest.mark.parametrize("current", [0, 1])
def test_every_op_on_the_second_gpu(cp2, current):
    bits = mixed_groups((M, K), np.random.default_rng(1))
    with cp2.cuda.Device(current):  # the current device must not matter
        x = on(cp2, 1, bits)
        t = on(cp2, 1, np.float32(0.5)).reshape(())
        results = {
            "value": fp4q.quantize_nvfp4(x, 0.5),
            "device scale": fp4q.quantize_nvfp4(x, t),
            "dynamic": fp4q.quantize_nvfp4(x, "dynamic"),
            "linear": fp4q.quantize_nvfp4(x, 0.5, sf_layout="linear"),
            "mxfp4": fp4q.quantize_mxfp4(x),
            "silu": fp4q.silu_and_mul_quantize_nvfp4(x, 0.5),
            "silu mxfp4": fp4q.silu_and_mul_quantize_mxfp4(x),
        }
        scale = fp4q.global_scale(x)
        q, sf = results["value"]
        y = fp4q.dequantize_nvfp4(q, sf, 0.5)
        qm, sfm = results["mxfp4"]
        ym = fp4q.dequantize_mxfp4(qm, sfm, dtype="float32")
        with cp2.cuda.Device(1):
            cp2.cuda.Device().synchronize()
    for got in (*results.values(), (scale, y, ym)):
        assert_on(got, 1)
    want = {
        "value": reference.quantize_nvfp4(bits, np.float32(0.5)),
        "device scale": reference.quantize_nvfp4(bits, np.float32(0.5)),
        "dynamic": reference.quantize_nvfp4(bits, "dynamic"),
        "linear": reference.quantize_nvfp4(bits, np.float32(0.5), sf_layout="linear"),
        "mxfp4": reference.quantize_mxfp4(bits),
        "silu": reference.silu_and_mul_quantize_nvfp4(bits, np.float32(0.5)),
        "silu mxfp4": reference.silu_and_mul_quantize_mxfp4(bits),
    }
    for name, got in results.items():
        for i, (g, w) in enumerate(zip(got, want[name])):
            assert_bytes_equal(cp2.asnumpy(g), np.asarray(w), f"{name} output {i}")
    assert np.float32(cp2.asnumpy(scale)) == reference.global_scale(bits)
    q_ref, sf_ref = want["value"]
    assert_bytes_equal(cp2.asnumpy(y), reference.dequantize_nvfp4(q_ref, sf_ref, np.float32(0.5)), "dequantize")
    qm_ref, sfm_ref = want["mxfp4"]
    assert_bytes_equal(cp2.asnumpy(ym), reference.dequantize_mxfp4(qm_ref, sfm_ref, dtype="float32"), "mx dequantize")


@gpu
def test_kernels_are_loaded_per_device(cp2):
    bits = mixed_groups((M, K), np.random.default_rng(2))
    for device in (0, 1):
        fp4q.quantize_nvfp4(on(cp2, device, bits), 1.0)
    specs = {}
    for (spec, ordinal) in list(loader._loaded):
        specs.setdefault(spec, set()).add(ordinal)
    assert any(ordinals == {0, 1} for ordinals in specs.values()), "no kernel loaded on both devices"


@gpu
def test_a_thread_per_gpu_at_once(cp2):
    """Two threads, each quantizing on its own GPU 50 times with its own inputs, started together:
    every result equals the reference of its input."""
    inputs = [mixed_groups((M, K), np.random.default_rng(10 + d)) for d in (0, 1)]
    wants = [reference.quantize_nvfp4(b, np.float32(0.5)) for b in inputs]
    barrier, errors = threading.Barrier(2), []

    def work(device: int) -> None:
        try:
            with cp2.cuda.Device(device):
                x = cp2.asarray(inputs[device])
                barrier.wait()
                outs = [fp4q.quantize_nvfp4(x, 0.5) for _ in range(50)]
                cp2.cuda.Device().synchronize()
            for q, sf in outs:
                assert_bytes_equal(cp2.asnumpy(q), wants[device][0], f"q on device {device}")
                assert_bytes_equal(cp2.asnumpy(sf), wants[device][1], f"sf on device {device}")
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append((device, exc))

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@gpu
def test_torch_on_the_second_gpu(cp2):
    torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)
    import fp4q.torch as ft

    bits = mixed_groups((M, K), np.random.default_rng(3))
    x = torch.from_numpy(bits.view(np.int16)).to("cuda:1").view(torch.bfloat16)
    t = torch.tensor(0.5, device="cuda:1")
    q, sf = ft.quantize_nvfp4(x, t)
    q2, sf2, scale = ft.quantize_nvfp4(x, "dynamic")
    hq, hsf = ft.silu_and_mul_quantize_nvfp4(x, 0.5)
    torch.cuda.synchronize(1)
    for a in (q, sf, q2, sf2, scale, hq, hsf):
        assert a.device == torch.device("cuda:1")
    want = reference.quantize_nvfp4(bits, np.float32(0.5))
    assert_bytes_equal(q.cpu().numpy(), want[0], "torch q")
    assert_bytes_equal(sf.view(torch.uint8).cpu().numpy(), want[1], "torch sf")
    want = reference.quantize_nvfp4(bits, "dynamic")
    assert_bytes_equal(q2.cpu().numpy(), want[0], "torch dynamic q")
    assert np.float32(scale.cpu().numpy()) == want[2]
    want = reference.silu_and_mul_quantize_nvfp4(bits, np.float32(0.5))
    assert_bytes_equal(hq.cpu().numpy(), want[0], "torch silu q")


@gpu
def test_rms_norm_on_the_second_gpu(cp2):
    rng = np.random.default_rng(4)
    bits, res = mixed_groups((M, K), rng), mixed_groups((M, K), rng)
    w = (0x3F80 + rng.integers(0, 64, K)).astype(np.uint16)
    x, weight, residual = on(cp2, 1, bits), on(cp2, 1, w), on(cp2, 1, res)
    q, sf = fp4q.rms_norm_quantize_nvfp4(x, weight, 0.5, residual=residual)
    qm, sfm = fp4q.rms_norm_quantize_mxfp4(x, weight)
    with cp2.cuda.Device(1):
        cp2.cuda.Device().synchronize()
    assert_on((q, sf, qm, sfm), 1)
    want_res = res.copy()
    want = reference.rms_norm_quantize_nvfp4(bits, w, np.float32(0.5), residual=want_res)
    assert_bytes_equal(cp2.asnumpy(residual), want_res, "residual")
    assert_bytes_equal(cp2.asnumpy(q), want[0], "q")
    assert_bytes_equal(cp2.asnumpy(sf), want[1], "sf")
    want = reference.rms_norm_quantize_mxfp4(bits, w)
    assert_bytes_equal(cp2.asnumpy(qm), want[0], "mx q")
    assert_bytes_equal(cp2.asnumpy(sfm), want[1], "mx sf")
