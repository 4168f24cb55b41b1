"""silu_and_mul_quantize_nvfp4 / _mxfp4: SiLU·mul of x's two halves, quantized in one kernel.

On the GPU: byte for byte against fp4q.reference (every kernel that can serve a call: the vector
kernel in its unit sizes, the plain kernel, the TMA kernel, the one-launch dynamic kernel and the
two passes), on values that reach every branch of the spec's exp (its clamp, subnormal and
overflowing results, NaN, infinities, -0) and of the quantizer. On any machine (the fakes): the
rules on x's halves, the launch (the kernel's PROLOGUE, its columns and x's row stride)."""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal, bf16_bits, mixed_groups, random_bf16

gpu = pytest.mark.gpu


def gate_up(m: int, n: int, rng, dtype=np.uint16) -> np.ndarray:
    """x (m, 2N): the gate half spans exp's whole domain (its clamp at -104 and 89, subnormal
    and overflowing exp(-g), NaN, +-Inf, -0) and ordinary values; the up half is the
    quantizer's mix of normal, tiny and edge-case groups."""
    gate = rng.standard_normal((m, n)).astype(np.float32) * np.float32(4)
    wide = rng.random((m, n)) < 0.1
    gate[wide] = rng.uniform(-120, 120, size=int(wide.sum())).astype(np.float32)
    special = rng.random((m, n)) < 0.02
    gate[special] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 88.7228, -87.34, -103.9, 17.0],
                                        np.float32), size=int(special.sum()))
    if dtype == np.float16:
        up = mixed_groups((m, n), rng).view(np.uint16)
        up16 = ((up.astype(np.uint32) << 16).view(np.float32)).astype(np.float16)
        return np.concatenate([gate.astype(np.float16), up16], axis=1)
    return np.concatenate([bf16_bits(gate), mixed_groups((m, n), rng)], axis=1)


def check_nvfp4(cp, x_host, tensor_sf, sf_layout="swizzled", **kwargs):
    x = cp.asarray(x_host)
    got = fp4q.silu_and_mul_quantize_nvfp4(x, tensor_sf, sf_layout=sf_layout, **kwargs)
    tsf = "dynamic" if isinstance(tensor_sf, str) else np.float32(float(tensor_sf) if not hasattr(tensor_sf, "get")
                                                                 else tensor_sf.get())
    want = reference.silu_and_mul_quantize_nvfp4(x_host, tsf, sf_layout=sf_layout)
    cp.cuda.get_current_stream().synchronize()
    what = f"{x_host.shape} {x_host.dtype} {sf_layout} {tensor_sf!r}"
    assert_bytes_equal(cp.asnumpy(got[0]), want[0], f"q {what}")
    assert_bytes_equal(cp.asnumpy(got[1]), want[1], f"sf {what}")
    if isinstance(tensor_sf, str):
        assert np.float32(cp.asnumpy(got[2])) == want[2], f"tensor_sf {what}"
    return got


SHAPES = [(1, 64), (16, 4096), (127, 160), (300, 7168), (1000, 2048)]


@gpu
@pytest.mark.parametrize("m, n", SHAPES)
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_nvfp4_bit_exact(m, n, sf_layout):
    import cupy as cp

    rng = np.random.default_rng(m * 131 + n)
    x = gate_up(m, n, rng)
    h = reference.silu_and_mul(x)
    check_nvfp4(cp, x, float(reference.global_scale(h)), sf_layout)
    check_nvfp4(cp, x, cp.asarray(np.float32(0.75)).reshape(()), sf_layout)


@gpu
@pytest.mark.parametrize("m, n", [(16, 4096), (1000, 2048), (2048, 4096)])
def test_nvfp4_dynamic_one_launch_and_two_passes(m, n):
    import cupy as cp

    x = gate_up(m, n, np.random.default_rng(n))
    check_nvfp4(cp, x, "dynamic")  # one launch: the amax of h over the grid, then quantize
    check_nvfp4(cp, x, "dynamic", config=SimtConfig(threads=128, vector=True))  # the two passes


@gpu
@pytest.mark.parametrize("config", [SimtConfig(), SimtConfig(threads=128, vector=True, vector_elements=8),
                                    SimtConfig(threads=128, vector=True, vector_elements=32),
                                    QuantizeConfig(num_stages=2), QuantizeConfig(tile_k=64, output_box_k=32,
                                                                                output_swizzle=32, num_stages=2,
                                                                                consumer_warpgroups=1)],
                         ids=["plain", "vec8", "vec32", "tma_128", "tma_64"])
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_nvfp4_every_kernel(config, sf_layout):
    import cupy as cp

    x = gate_up(300, 2048, np.random.default_rng(7))
    check_nvfp4(cp, x, 11.0, sf_layout, config=config)


@gpu
def test_nvfp4_fp16_input_and_unaligned_pointers():
    import cupy as cp

    rng = np.random.default_rng(3)
    check_nvfp4(cp, gate_up(100, 256, rng, np.float16), 3.0)
    # Rows 1030 bytes apart, a stride the vector loads cannot serve: the plain kernel.
    x_host = gate_up(64, 256, rng)
    wide = np.zeros((64, 515), np.uint16)
    wide[:, :512] = x_host
    x = cp.asarray(wide)[:, :512]
    q, sf = fp4q.silu_and_mul_quantize_nvfp4(x, 2.0)
    want = reference.silu_and_mul_quantize_nvfp4(x_host, np.float32(2.0))
    assert_bytes_equal(cp.asnumpy(q), want[0], "q strided")
    assert_bytes_equal(cp.asnumpy(sf), want[1], "sf strided")


@gpu
def test_nvfp4_out_buffers_and_padding_rewritten():
    import cupy as cp

    x = gate_up(130, 96, np.random.default_rng(9))
    q = cp.full((130, 48), 0xEE, cp.uint8)
    sf = cp.full(fp4q.swizzled_sf_shape(130, 96), 0xEE, cp.uint8)
    check_nvfp4(cp, x, 5.0, out=q, sf_out=sf)


@gpu
@pytest.mark.parametrize("mode", ["rceil", "floor"])
@pytest.mark.parametrize("m, n", [(1, 64), (300, 4096), (4096, 2048)])
def test_mxfp4_bit_exact(mode, m, n):
    import cupy as cp

    x = gate_up(m, n, np.random.default_rng(n + m))
    for layout in ("swizzled", "linear"):
        q, sf = fp4q.silu_and_mul_quantize_mxfp4(cp.asarray(x), mode=mode, sf_layout=layout)
        want = reference.silu_and_mul_quantize_mxfp4(x, mode=mode, sf_layout=layout)
        assert_bytes_equal(cp.asnumpy(q), want[0], f"q {mode} {layout}")
        assert_bytes_equal(cp.asnumpy(sf), want[1], f"sf {mode} {layout}")


# ---------------------------------------------------------------- on any machine
def test_rules_on_the_halves(cp):
    with pytest.raises(ValueError, match=r"^the last dimension of x \(2N: two halves\) must be even, got 33$"):
        fp4q.silu_and_mul_quantize_nvfp4(cp.asarray(np.zeros((4, 33), np.uint16)), 1.0)
    with pytest.raises(ValueError, match=r"^N \(half the last dimension of x\) must be a multiple of 16 for "
                                         r"silu_and_mul_quantize_nvfp4, got 20$"):
        fp4q.silu_and_mul_quantize_nvfp4(cp.asarray(np.zeros((4, 40), np.uint16)), 1.0)
    with pytest.raises(ValueError, match=r"must be a multiple of 32 for silu_and_mul_quantize_mxfp4, got 48$"):
        fp4q.silu_and_mul_quantize_mxfp4(cp.asarray(np.zeros((4, 96), np.uint16)))
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("m, width", [(16, 8192), (8192, 16384)])
def test_the_launch_reads_both_halves(cp, m, width):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((m, width), np.uint16))
    q, sf = fp4q.silu_and_mul_quantize_nvfp4(x, 1.0)
    assert q.shape == (m, width // 4) and sf.shape == fp4q.swizzled_sf_shape(m, width // 2)
    launch = fakes.active.launches[-1]
    assert dict(launch["spec"].constants)["PROLOGUE"] == 1
    assert launch["args"]["cols"] == width // 2 and launch["args"]["rows"] == m
    if "x_map" in launch["args"]:  # the TMA kernel maps x's whole rows, both halves
        assert launch["args"]["x_map"].dims == (width, m)
    else:
        assert launch["args"]["x_row_stride"] == width


def test_the_reference_is_the_unfused_composition():
    x = random_bf16((7, 128), np.random.default_rng(2))
    h = reference.silu_and_mul(x)
    for got, want in zip(reference.silu_and_mul_quantize_nvfp4(x, 2.0), reference.quantize_nvfp4(h, 2.0)):
        np.testing.assert_array_equal(got, want)
