"""float32 x (weights, as torchao quantizes them): quantize_nvfp4 and quantize_mxfp4 read it
with the plain SIMT kernel, spec step 1 being the identity.

On the GPU: byte for byte against fp4q.reference for float32 values over the whole range
(every special: NaN, Inf, -0, float32 subnormals, values that overflow the scales), both
formats and rounding modes, every layout, padded outputs, a device scale, strided and 3-D
x, torch tensors. On any machine (the fakes): which kernel a call takes and the rules.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.numerics import reference

import fakes
from helpers import assert_outputs_equal

gpu = pytest.mark.gpu

LAYOUTS = ["swizzled", "linear", "8x4"]


def float32_values(shape, rng) -> np.ndarray:
    """Normal values over many binades, with every float32 special sprinkled in, and groups
    of one magnitude (zeros, subnormals only, huge only)."""
    x = (rng.standard_normal(shape) * 2.0 ** rng.uniform(-30, 30, shape)).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, -3e-39, 3.4e38, -3.4e38, 6.0, 0.5], np.float32)
    flat = x.reshape(-1)
    where = rng.random(flat.size) < 0.02
    flat[where] = specials[rng.integers(0, len(specials), int(where.sum()))]
    rows = x.reshape(-1, shape[-1])
    if rows.shape[0] > 3 and shape[-1] >= 32:
        rows[0, :32] = 0.0
        rows[1, :32] = np.float32(1e-42)
        rows[2, :32] = np.float32(1e37)
    return x


# ---------------------------------------------------------------- on the GPU
@gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m, k", [(1, 32), (9, 96), (130, 2176), (300, 7168)])
def test_quantize_nvfp4_bit_exact(layout, m, k):
    import cupy as cp

    rng = np.random.default_rng(m + k)
    x = float32_values((m, k), rng)
    for tsf in (np.float32(1.0), np.float32(2688.0 / 3e5), np.float32(2.0**-20)):
        got = fp4q.quantize_nvfp4(cp.asarray(x), float(tsf), sf_layout=layout)
        assert_outputs_equal(cp, got, reference.quantize_nvfp4(x, tsf, sf_layout=layout), f"{m}x{k} {layout} {tsf}")
    # A device scale, any value: the formulas define the bits.
    for tsf in (np.float32(-1.5), np.float32(np.nan), np.float32(0.37)):
        got = fp4q.quantize_nvfp4(cp.asarray(x), cp.asarray(tsf), sf_layout=layout)
        assert_outputs_equal(cp, got, reference.quantize_nvfp4(x, tsf, sf_layout=layout), f"device {tsf}")


@gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_quantize_mxfp4_bit_exact(layout, mode):
    import cupy as cp

    rng = np.random.default_rng(5)
    for m, k in ((1, 32), (9, 96), (130, 2176)):
        x = float32_values((m, k), rng)
        got = fp4q.quantize_mxfp4(cp.asarray(x), mode=mode, sf_layout=layout)
        assert_outputs_equal(cp, got, reference.quantize_mxfp4(x, mode, sf_layout=layout), f"{m}x{k} {layout}")


@gpu
def test_padding_strides_shapes_and_buffers():
    import cupy as cp

    rng = np.random.default_rng(6)
    x = float32_values((40, 80), rng)
    want = reference.quantize_nvfp4(x, np.float32(0.5), sf_layout="8x4", padded_k=128)
    out = dict(out=cp.full((40, 64), 0xFF, cp.uint8), sf_out=cp.full(fp4q.sf_8x4_shape(40, 128), 0xFF, cp.uint8))
    got = fp4q.quantize_nvfp4(cp.asarray(x), 0.5, sf_layout="8x4", padded_k=128, **out)
    assert_outputs_equal(cp, got, want, "padded 8x4 into 0xFF buffers")
    wide = cp.zeros((40, 83), cp.float32)  # rows 332 bytes apart: no alignment but the element's
    wide[:, :80] = cp.asarray(x)
    got = fp4q.quantize_nvfp4(wide[:, :80], 0.5)
    assert_outputs_equal(cp, got, reference.quantize_nvfp4(x, np.float32(0.5)), "strided rows")
    x3 = x.reshape(2, 20, 80)
    got = fp4q.quantize_nvfp4(cp.asarray(x3), 0.5, sf_layout="linear")
    assert got[0].shape == (2, 20, 40) and got[1].shape == (2, 20, 5)
    assert_outputs_equal(cp, got, reference.quantize_nvfp4(x3, np.float32(0.5), sf_layout="linear"), "3-D")
    got = fp4q.quantize_nvfp4(cp.asarray(x[0]), 0.5, config=SimtConfig(threads=64))
    assert_outputs_equal(cp, got, reference.quantize_nvfp4(x[0], np.float32(0.5)), "1-D, a config")


@gpu
def test_torch():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft

    x_host = float32_values((64, 256), np.random.default_rng(7))
    x = torch.from_numpy(x_host).cuda()
    q, sf = ft.quantize_nvfp4(x, torch.tensor(0.25, device="cuda"))
    q_ref, sf_ref = reference.quantize_nvfp4(x_host, np.float32(0.25))
    assert (q.cpu().numpy() == q_ref).all() and (sf.cpu().view(torch.uint8).numpy() == sf_ref).all()
    q, sf = ft.quantize_mxfp4(x, fp4_dtype=True)
    q_ref, sf_ref = reference.quantize_mxfp4(x_host)
    assert (q.cpu().view(torch.uint8).numpy() == q_ref).all()
    assert (sf.cpu().view(torch.uint8).numpy() == sf_ref).all()


# ---------------------------------------------------------------- on any machine
def test_the_plain_simt_kernel_reads_it(cp):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    for shape in ((8192, 8192), (5, 64)):  # a TMA-sized call and a vector-sized one
        x = cp.zeros(shape, cp.float32)
        cfg = fp4q.config_for(x, 1.0)
        assert type(cfg) is SimtConfig and not cfg.vector and cfg.input_dtype == "float32"
    x = cp.zeros((5, 64), cp.float32)
    q, sf = fp4q.quantize_nvfp4(x, 1.0, sf_layout="8x4", padded_k=96)
    launch = fakes.active.launches[-1]
    assert dict(launch["spec"].flags)["FP4Q_INPUT_F32"] and launch["spec"].name == "fp4q_quantize_fp4_simt"
    assert (launch["args"]["cols"], launch["args"]["out_cols"], launch["args"]["x_row_stride"]) == (64, 96, 64)
    fp4q.quantize_mxfp4(x, mode="floor")
    assert dict(fakes.active.launches[-1]["spec"].flags)["FP4Q_INPUT_F32"]


def test_rules(cp):
    x = cp.zeros((4, 64), cp.float32)
    launched = len(fakes.active.launches) if fakes.active is not None else 0
    with pytest.raises(ValueError, match=r'^tensor_sf="dynamic" needs bf16 or fp16 x \(float32 x is read by the '
                                         r"plain SIMT kernel alone, which takes a float or a device float32 scalar "
                                         r"as tensor_sf\)$"):
        fp4q.quantize_nvfp4(x, "dynamic")
    with pytest.raises(ValueError, match=r"^a tensor scale per row needs bf16 or fp16 x"):
        fp4q.quantize_nvfp4(x, "dynamic_per_row")
    with pytest.raises(ValueError, match=r"^a tensor scale per row needs bf16 or fp16 x"):
        fp4q.quantize_nvfp4(x, cp.asarray(np.ones(4, np.float32)))
    for config in (SimtConfig(vector=True), QuantizeConfig()):
        with pytest.raises(ValueError, match=r"^config must be None or a SimtConfig with vector=False for float32 x "
                                             r"\(the plain SIMT kernel alone reads it\), got "):
            fp4q.quantize_nvfp4(x, 1.0, config=config)
    with pytest.raises(TypeError, match=r"^x must hold bfloat16 or float16 values \(uint16 holds bf16 bits\), got "
                                        r"dtype float32"):
        fp4q.silu_and_mul_quantize_nvfp4(cp.zeros((4, 128), cp.float32), 1.0)
    with pytest.raises(TypeError, match=r"^x must hold bfloat16 or float16 values"):
        fp4q.global_scale(x)
    if fakes.active is not None:
        assert len(fakes.active.launches) == launched
