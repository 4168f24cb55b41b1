"""The 8x4 scale layout (FlashInfer's ``SfLayout.layout_8x4``): every quantize op and kernel
that writes it, the dequantizers that read it, torch's ops and the FlashInfer drop-ins.

On the GPU: byte for byte against fp4q.reference with ``sf_layout="8x4"``, into buffers
filled with 0xFF first (so that each padding byte, rows up to a multiple of 8 and groups up
to a multiple of 4, must be written as 0x00), for row counts on both sides of a tile of 8,
group counts on both sides of 4, both formats and input dtypes, every SIMT and vector
kernel, the row kernel (each prologue, each tensor-scale mode) and both dynamic paths. On
any machine (the fakes): the shapes, which kernel a call takes (the TMA kernel writes only
the 128x4 and linear layouts) and the messages.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.rows import RowConfig
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.variants import SIMT
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal, assert_outputs_equal, random_bf16
from test_per_row import inputs, row_scales

gpu = pytest.mark.gpu

# Rows: one, a tile of 8 and either side of it, and many; K: 1, 3, 4, 5 and 136 groups of 16.
ROWS = [1, 7, 8, 9, 300]
KS = [16, 48, 64, 80, 2176]


def filled(cp, shape, dtype=np.uint8):
    return cp.full(shape, 0xFF, dtype)


# ---------------------------------------------------------------- on the GPU
@gpu
@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("config", [None, *sorted(n for n, c in SIMT.items() if c.fmt == "nvfp4")])
def test_quantize_nvfp4_every_kernel(m, k, config):
    import cupy as cp

    cfg = None if config is None else SIMT[config]
    if cfg is not None and cfg.vector and cfg.elements_per_unit > 16 and k % cfg.elements_per_unit:
        pytest.skip(f"{config} quantizes whole pairs of groups: K={k} is not a multiple of 32 (a rule)")
    rng = np.random.default_rng(m * 31 + k)
    x = random_bf16((m, k), rng, specials=0.02)
    tsf = reference.global_scale(x)
    q, sf = filled(cp, (m, k // 2)), filled(cp, fp4q.sf_8x4_shape(m, k))
    got = fp4q.quantize_nvfp4(cp.asarray(x), float(tsf), sf_layout="8x4", out=q, sf_out=sf, config=cfg)
    assert_outputs_equal(cp, got, reference.quantize_nvfp4(x, tsf, sf_layout="8x4"), f"{m}x{k} {config}")


@gpu
@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("config", [None, *sorted(n for n, c in SIMT.items() if c.fmt == "mxfp4")])
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_quantize_mxfp4_every_kernel(m, config, mode):
    import cupy as cp

    rng = np.random.default_rng(m)
    for k in (32, 96, 128, 160, 2176):
        x = random_bf16((m, k), rng, specials=0.02)
        q, sf = filled(cp, (m, k // 2)), filled(cp, fp4q.sf_8x4_shape(m, k, "mxfp4"))
        got = fp4q.quantize_mxfp4(cp.asarray(x), mode=mode, sf_layout="8x4", out=q, sf_out=sf,
                                  config=None if config is None else SIMT[config])
        assert_outputs_equal(cp, got, reference.quantize_mxfp4(x, mode, sf_layout="8x4"), f"{m}x{k} {config} {mode}")


@gpu
@pytest.mark.parametrize("m", ROWS)
def test_dynamic_tensor_scale_both_paths(m):
    import cupy as cp

    rng = np.random.default_rng(m + 5)
    x = random_bf16((m, 2176), rng, specials=0.02)
    want = reference.quantize_nvfp4(x, reference.global_scale(x), sf_layout="8x4")
    # One launch (no config), and global_scale's two passes before the vector kernel (a config).
    for config in (None, SimtConfig(vector=True)):
        got = fp4q.quantize_nvfp4(cp.asarray(x), "dynamic", sf_layout="8x4",
                                  sf_out=filled(cp, fp4q.sf_8x4_shape(m, 2176)), config=config)
        assert_outputs_equal(cp, got[:2], want, f"dynamic {m} rows, config {config}")
        assert_bytes_equal(cp.asnumpy(got[2]), np.float32(reference.global_scale(x)), "the dynamic scale")


@gpu
@pytest.mark.parametrize("op", ["quantize", "silu_and_mul", "rms_norm", "add_rms_norm"])
@pytest.mark.parametrize("dtype", [np.uint16, np.float16])
@pytest.mark.parametrize("m", [1, 9, 300])
def test_fused_ops_and_scales_per_row(op, dtype, m):
    import cupy as cp

    rng = np.random.default_rng(m)
    k = 1040  # 65 groups: the last group tile holds one
    x, w, res = inputs(op, m, k, rng, dtype)
    tsf_values = [row_scales(m, rng), "dynamic_per_row"] + ([] if op == "quantize" else [np.float32(0.7)])
    for tsf in tsf_values:
        dev_tsf = cp.asarray(tsf) if isinstance(tsf, np.ndarray) and tsf.ndim else tsf
        dev_tsf = float(dev_tsf) if isinstance(tsf, np.float32) else dev_tsf
        out = dict(out=filled(cp, (m, k // 2)), sf_out=filled(cp, fp4q.sf_8x4_shape(m, k)), sf_layout="8x4")
        residual = None if res is None else cp.asarray(res)
        want_res = None if res is None else res.copy()
        if op == "quantize":
            got = fp4q.quantize_nvfp4(cp.asarray(x), dev_tsf, **out)
            want = reference.quantize_nvfp4(x, tsf, sf_layout="8x4")
        elif op == "silu_and_mul":
            got = fp4q.silu_and_mul_quantize_nvfp4(cp.asarray(x), dev_tsf, **out)
            want = reference.silu_and_mul_quantize_nvfp4(x, tsf, sf_layout="8x4")
        else:
            got = fp4q.rms_norm_quantize_nvfp4(cp.asarray(x), cp.asarray(w), dev_tsf, residual=residual, **out)
            want = reference.rms_norm_quantize_nvfp4(x, w, tsf, residual=want_res, sf_layout="8x4")
        what = f"{op} {m}x{k} {np.dtype(dtype)} {tsf if isinstance(tsf, str) else type(tsf).__name__}"
        assert_outputs_equal(cp, got, want, what)
        if residual is not None:
            assert_bytes_equal(cp.asnumpy(residual), want_res, f"residual {what}")


@gpu
@pytest.mark.parametrize("m", [1, 9, 300])
def test_mxfp4_fused_ops(m):
    import cupy as cp

    rng = np.random.default_rng(m)
    x = random_bf16((m, 2 * 1056), rng, specials=0.02)
    w = random_bf16((1056,), rng)
    shape = fp4q.sf_8x4_shape(m, 1056, "mxfp4")
    got = fp4q.silu_and_mul_quantize_mxfp4(cp.asarray(x), sf_layout="8x4", sf_out=filled(cp, shape))
    assert_outputs_equal(cp, got, reference.silu_and_mul_quantize_mxfp4(x, sf_layout="8x4"), f"silu_and_mul mxfp4 {m}")
    got = fp4q.rms_norm_quantize_mxfp4(cp.asarray(x[:, :1056]), cp.asarray(w), sf_layout="8x4",
                                       sf_out=filled(cp, shape))
    want = reference.rms_norm_quantize_mxfp4(x[:, :1056], w, sf_layout="8x4")
    assert_outputs_equal(cp, got, want, f"rms_norm mxfp4 {m}")


@gpu
@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_dequantize_reads_8x4(m, fmt):
    import cupy as cp

    rng = np.random.default_rng(m)
    k = 2176 if fmt == "nvfp4" else 2240
    q = rng.integers(0, 256, (m, k // 2), dtype=np.uint8)
    groups = k // (16 if fmt == "nvfp4" else 32)
    linear = rng.integers(0, 0x7F if fmt == "nvfp4" else 0xFF, (m, groups), dtype=np.uint8)
    sf = fp4q.swizzle_sf_8x4(linear)
    for config in (None, fp4q.DequantizeSimtConfig(), fp4q.DequantizeSimtConfig(vector=True)):
        if fmt == "nvfp4":
            got = fp4q.dequantize_nvfp4(cp.asarray(q), cp.asarray(sf), 0.37, sf_layout="8x4", config=config)
            want = reference.dequantize_nvfp4(q, sf, np.float32(0.37), sf_layout="8x4")
        else:
            got = fp4q.dequantize_mxfp4(cp.asarray(q), cp.asarray(sf), sf_layout="8x4", config=config)
            want = reference.dequantize_mxfp4(q, sf, sf_layout="8x4")
        cp.cuda.get_current_stream().synchronize()
        assert_bytes_equal(cp.asnumpy(got).view(np.uint16), want, f"dequantize {fmt} {m} rows {config}")


@gpu
def test_torch_ops_and_flashinfer_drop_ins():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft
    from fp4q.torch import peers

    rng = np.random.default_rng(2)
    m, k = 13, 1024
    x_host = random_bf16((m, k), rng, specials=0.01)
    x = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)
    tsf = torch.tensor([0.5], dtype=torch.float32, device="cuda")
    q_ref, sf_ref = reference.quantize_nvfp4(x_host, np.float32(0.5), sf_layout="8x4")

    q, sf = ft.quantize_nvfp4(x, tsf, sf_layout="8x4")
    assert tuple(sf.shape) == fp4q.sf_8x4_shape(m, k)
    assert_bytes_equal(q.cpu().numpy(), q_ref, "torch q")
    assert_bytes_equal(sf.cpu().view(torch.uint8).numpy(), sf_ref, "torch sf")

    two_d = sf_ref.reshape(16, 64)  # FlashInfer's (round_up(M, 8), round_up(K / 16, 4))
    for q, sf in (peers.fp4_quantize(x, tsf, is_sf_swizzled_layout=True, is_sf_8x4_layout=True),
                  peers.nvfp4_quantize(x, tsf, sfLayout=peers.SfLayout.layout_8x4)):
        assert sf.dtype == torch.uint8 and tuple(sf.shape) == (16, 64)
        assert_bytes_equal(q.cpu().numpy(), q_ref, "drop-in q")
        assert_bytes_equal(sf.cpu().numpy(), two_d, "drop-in sf")
    # The 8x4 flag picks between the two tiled layouts: without the swizzled flag, linear.
    _, sf = peers.fp4_quantize(x, tsf, is_sf_swizzled_layout=False, is_sf_8x4_layout=True)
    assert tuple(sf.shape) == (m, k // 16)
    gate_up = torch.cat([x, x], dim=1)
    _, sf = peers.silu_and_mul_nvfp4_quantize(gate_up, tsf, is_sf_8x4_layout=True)
    want = reference.silu_and_mul_quantize_nvfp4(np.concatenate([x_host, x_host], 1), np.float32(0.5),
                                                 sf_layout="8x4")[1]
    assert_bytes_equal(sf.cpu().numpy(), want.reshape(16, 64), "silu_and_mul drop-in sf")


# ---------------------------------------------------------------- on any machine
def test_the_tma_kernel_writes_no_8x4():
    with pytest.raises(ConfigError, match=r"^sf_layout='8x4' is not written by a QuantizeConfig, which writes "
                                          r"'swizzled' or 'linear'$"):
        QuantizeConfig(sf_layout="8x4")
    for cfg in (SimtConfig(sf_layout="8x4"), SimtConfig(vector=True, sf_layout="8x4"),
                RowConfig(sf_layout="8x4"), fp4q.DequantizeConfig(sf_layout="8x4")):
        assert cfg.sf_layout == "8x4"


def test_calls_take_the_vector_kernel_and_name_what_tma_cannot(cp):
    if fakes.active is None:
        pytest.skip("the fake device's architecture")
    x = cp.zeros((8192, 8192), cp.uint16)
    assert isinstance(fp4q.config_for(x, 1.0), QuantizeConfig)  # the same call in 128x4 takes TMA
    cfg = fp4q.config_for(x, 1.0, sf_layout="8x4")
    assert isinstance(cfg, SimtConfig) and cfg.vector and cfg.sf_layout == "8x4"
    with pytest.raises(ValueError, match=r"^config is a TMA QuantizeConfig, but TMA cannot serve this call: it stores "
                                         r"its scales as 128x4 blocks or rows, not in sf_layout='8x4'$"):
        fp4q.quantize_nvfp4(x, 1.0, sf_layout="8x4", config=QuantizeConfig())
    assert fakes.active.launches == []


@pytest.mark.parametrize("m, k", [(1, 16), (8, 64), (9, 80), (300, 2176)])
def test_shapes_and_the_launch(cp, m, k):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((m, k), np.uint16))
    q, sf = fp4q.quantize_nvfp4(x, 1.0, sf_layout="8x4")
    assert sf.shape == (-(-m // 8), -(-k // 64), 8, 4) == fp4q.sf_8x4_shape(m, k)
    launch = fakes.active.launches[-1]
    flags = dict(launch["spec"].flags)
    assert flags["FP4Q_SF_8X4"] and not flags["FP4Q_SF_SWIZZLED"]
    # The vector kernel's walk covers the groups up to a multiple of 4.
    groups = -(-k // 64) * 4
    assert launch["args"]["cols"] == k and launch["grid"][0] >= 1
    cfg = fp4q.config_for(x, 1.0, sf_layout="8x4")
    assert cfg.units_per_row(k) == groups * 16 // cfg.elements_per_unit
    with pytest.raises(ValueError, match=r"^sf_out must have shape \(" + f"{-(-m // 8)}, {-(-k // 64)}, 8, 4"):
        fp4q.quantize_nvfp4(x, 1.0, sf_layout="8x4", sf_out=cp.asarray(np.zeros(fp4q.swizzled_sf_shape(m, k),
                                                                                  np.uint8)))


def test_torch_fakes():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fp4q.torch as ft
    from torch_fakes import fake_cuda

    with FakeTensorMode():
        x = fake_cuda((13, 1024))
        q, sf = ft.quantize_nvfp4(x, 1.0, sf_layout="8x4")
        assert tuple(sf.shape) == (2, 16, 8, 4) and sf.dtype == torch.float8_e4m3fn
        _, sf_mx = ft.quantize_mxfp4(x, sf_layout="8x4")
        assert tuple(sf_mx.shape) == (2, 8, 8, 4)
        y = ft.dequantize_nvfp4(q, sf, 1.0, sf_layout="8x4")
        assert tuple(y.shape) == (13, 1024)
