"""rms_norm_quantize_nvfp4 / _mxfp4, with and without residual: RMSNorm (after the residual
add) quantized in one kernel, the row kernel.

On the GPU: byte for byte against fp4q.reference (q, sf and the updated residual), for every
unit count of the row kernel, both input dtypes, both layouts, both tensor-scale modes, rows
with NaN, Inf, zeros (eps 0 and not), subnormals and heavy tails, strided and 1-D x, reused
buffers. On any machine (the fakes): the rules on weight, residual, eps and K, and the launch
(the kernel's PROLOGUE and ROW_UNITS, eps, the residual pointer)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fp4q
from fp4q.kernels.rows import ROW_UNITS, RowConfig
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal, bf16_bits

gpu = pytest.mark.gpu


def rows_of(m: int, k: int, rng, dtype=np.uint16) -> np.ndarray:
    """x (m, k): normal rows at scales from 2**-60 to 2**40, heavy tails, and rows with a
    NaN, an Inf, all zeros and subnormals only."""
    scale = np.exp2(rng.integers(-60, 40, size=(m, 1))).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32) * scale
    tails = rng.random((m, k)) < 0.01
    x[tails] *= np.float32(1000)
    specials = [np.nan, np.inf, 0.0, 1e-40]
    for i, value in enumerate(specials):
        if m > 4 * (i + 1):
            row = 4 * (i + 1)
            if value in (0.0, 1e-40):
                x[row] = np.float32(value) * np.sign(rng.standard_normal(k)).astype(np.float32)
            else:
                x[row, rng.integers(k)] = value
    if dtype == np.float16:
        with np.errstate(over="ignore"):  # the heavy tails overflow fp16 to Inf, which the rows should have
            return x.astype(np.float16)
    return bf16_bits(x)


def weight_of(k: int, rng, dtype=np.uint16) -> np.ndarray:
    w = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
    return w.astype(np.float16) if dtype == np.float16 else bf16_bits(w)


def check(cp, fmt: str, x_host, w_host, res_host=None, *, tensor_sf=None, eps=1e-6, config=None, x=None,
          **options):
    """The op on the device against the reference: q, sf and the updated residual."""
    x = cp.asarray(x_host) if x is None else x
    residual = None if res_host is None else cp.asarray(res_host)
    if fmt == "nvfp4":
        got = fp4q.rms_norm_quantize_nvfp4(x, cp.asarray(w_host), tensor_sf, eps=eps, residual=residual,
                                           config=config, **options)
        ref_scale = np.float32(tensor_sf if not hasattr(tensor_sf, "get") else tensor_sf.get())
        want_res = None if res_host is None else res_host.copy()
        want = reference.rms_norm_quantize_nvfp4(x_host, w_host, ref_scale, eps=eps, residual=want_res,
                                                 sf_layout=options.get("sf_layout", "swizzled"))
    else:
        got = fp4q.rms_norm_quantize_mxfp4(x, cp.asarray(w_host), eps=eps, residual=residual, config=config,
                                           **options)
        want_res = None if res_host is None else res_host.copy()
        want = reference.rms_norm_quantize_mxfp4(x_host, w_host, eps=eps, residual=want_res,
                                                 mode=options.get("mode", "rceil"),
                                                 sf_layout=options.get("sf_layout", "swizzled"))
    cp.cuda.get_current_stream().synchronize()
    what = f"{fmt} {x_host.shape} {x_host.dtype} {options} residual={res_host is not None}"
    assert_bytes_equal(cp.asnumpy(got[0]), want[0], f"q {what}")
    assert_bytes_equal(cp.asnumpy(got[1]), want[1], f"sf {what}")
    if res_host is not None:
        assert_bytes_equal(cp.asnumpy(residual), want_res, f"residual {what}")
    return got


# K per unit count of the row kernel (one CTA of 256 threads): the largest K of each, and one between.
NVFP4_KS = [16, 4096, 8192, 16384, 32768, 7168, 14336]
MXFP4_KS = [32, 8192, 16384, 32768, 2880]


@gpu
@pytest.mark.parametrize("k", NVFP4_KS)
@pytest.mark.parametrize("with_residual", [False, True])
def test_nvfp4_bit_exact(k, with_residual):
    import cupy as cp

    rng = np.random.default_rng(k + with_residual)
    m = 37 if k <= 8192 else 21
    x, w = rows_of(m, k, rng), weight_of(k, rng)
    res = rows_of(m, k, rng) if with_residual else None
    for layout in ("swizzled", "linear"):
        check(cp, "nvfp4", x, w, res, tensor_sf=3.0, sf_layout=layout)
        check(cp, "nvfp4", x, w, res, tensor_sf=cp.asarray(np.float32(0.5)).reshape(()), sf_layout=layout)


@gpu
@pytest.mark.parametrize("k", MXFP4_KS)
@pytest.mark.parametrize("mode", ["rceil", "floor"])
@pytest.mark.parametrize("with_residual", [False, True])
def test_mxfp4_bit_exact(k, mode, with_residual):
    import cupy as cp

    rng = np.random.default_rng(k * 3 + with_residual)
    x, w = rows_of(19, k, rng), weight_of(k, rng)
    res = rows_of(19, k, rng) if with_residual else None
    for layout in ("swizzled", "linear"):
        check(cp, "mxfp4", x, w, res, mode=mode, sf_layout=layout)


@gpu
@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("units", [1, 2, 4, 8])
def test_every_unit_count(fmt, units):
    import cupy as cp

    if units not in ROW_UNITS[fmt]:
        pytest.skip(f"{fmt} has no row kernel of {units} units")
    rng = np.random.default_rng(units)
    x, w = rows_of(9, 2048, rng), weight_of(2048, rng)
    scale = 1.0 if fmt == "nvfp4" else None
    check(cp, fmt, x, w, rows_of(9, 2048, rng), tensor_sf=scale, config=RowConfig(fmt=fmt, row_units=units))


@gpu
def test_fp16_eps_and_many_rows():
    import cupy as cp

    rng = np.random.default_rng(5)
    x, w = rows_of(3000, 1024, rng, np.float16), weight_of(1024, rng, np.float16)
    check(cp, "nvfp4", x, w, rows_of(3000, 1024, rng, np.float16), tensor_sf=7.0, eps=0.0)
    check(cp, "nvfp4", x, w, tensor_sf=7.0, eps=1e-2)


@gpu
def test_strided_and_1d_x_and_reused_buffers():
    import cupy as cp

    rng = np.random.default_rng(11)
    x_host, w = rows_of(130, 512, rng), weight_of(512, rng)
    wide = cp.zeros((130, 520), cp.uint16)
    wide[:, :512] = cp.asarray(x_host)
    check(cp, "nvfp4", x_host, w, tensor_sf=2.0, x=wide[:, :512])
    q = cp.full((130, 256), 0xEE, cp.uint8)
    sf = cp.full(fp4q.swizzled_sf_shape(130, 512), 0xEE, cp.uint8)
    check(cp, "nvfp4", x_host, w, rows_of(130, 512, rng), tensor_sf=2.0, out=q, sf_out=sf)
    check(cp, "nvfp4", x_host[5], w, tensor_sf=2.0)


@gpu
def test_empty_input():
    import cupy as cp

    q, sf = fp4q.rms_norm_quantize_nvfp4(cp.zeros((0, 64), cp.uint16), cp.zeros(64, cp.uint16), 1.0)
    assert q.shape == (0, 32)


# ---------------------------------------------------------------- on any machine
def test_rules_on_weight_residual_eps_and_k(cp):
    x = cp.asarray(np.zeros((4, 64), np.uint16))
    w = cp.asarray(np.zeros(64, np.uint16))
    with pytest.raises(ValueError, match=r"^weight must have shape \(64,\), got \(32,\)$"):
        fp4q.rms_norm_quantize_nvfp4(x, cp.asarray(np.zeros(32, np.uint16)), 1.0)
    with pytest.raises(TypeError, match=r"^weight must have dtype float16, got uint16$"):
        fp4q.rms_norm_quantize_nvfp4(cp.asarray(np.zeros((4, 64), np.float16)), w, 1.0)
    with pytest.raises(ValueError, match=r"^residual must have shape \(4, 64\), got \(4, 32\)$"):
        fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, residual=cp.asarray(np.zeros((4, 32), np.uint16)))
    with pytest.raises(ValueError, match=r"^residual overlaps x "):
        fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, residual=x)
    with pytest.raises(ValueError, match=r"^eps must be finite and >= 0 once rounded to float32, got -1.0$"):
        fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, eps=-1.0)
    with pytest.raises(ValueError, match=r"^eps must be finite and >= 0 once rounded to float32, got 1e\+39$"):
        fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, eps=1e39)
    with pytest.raises(TypeError, match=r"^eps must be a real number, got True \(bool\)$"):
        fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, eps=True)
    with pytest.raises(ValueError, match=r"^K \(the last dimension of x\) must be a multiple of 32 for "
                                         r"rms_norm_quantize_mxfp4, got 48$"):
        fp4q.rms_norm_quantize_mxfp4(cp.asarray(np.zeros((4, 48), np.uint16)), cp.asarray(np.zeros(48, np.uint16)))
    with pytest.raises(ValueError, match=r"^tensor_sf must be a float, a device float32 scalar, a device float32 "
                                         r"array of one value per row or 'dynamic_per_row', got 'dynamic'$"):
        fp4q.rms_norm_quantize_nvfp4(x, w, "dynamic")
    with pytest.raises(TypeError, match=r"^config must be None or a RowConfig, got SimtConfig$"):
        fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, config=fp4q.SimtConfig())
    if fakes.active is not None:
        assert fakes.active.launches == []


def test_rows_longer_than_one_cta_and_unaligned_pointers_are_refused(cp):
    big = cp.asarray(np.zeros((2, 32768 + 16), np.uint16))
    with pytest.raises(ValueError, match=r"^K must be at most 32768 for rms_norm_quantize_nvfp4 \(a row is "
                                         r"normalized in one CTA\), got 32784$"):
        fp4q.rms_norm_quantize_nvfp4(big, cp.asarray(np.zeros(32768 + 16, np.uint16)), 1.0)
    x = cp.asarray(np.zeros((4, 68), np.uint16))[:, :64]
    with pytest.raises(ValueError, match=r"^rms_norm_quantize_nvfp4 loads and stores 16 bytes at a time: x's row "
                                         r"stride of 136 bytes is not a multiple of 16$"):
        fp4q.rms_norm_quantize_nvfp4(x, cp.asarray(np.zeros(64, np.uint16)), 1.0)
    with pytest.raises(ValueError, match=r"^config.row_units=1 holds rows of up to 4096 elements, got K=8192$"):
        fp4q.rms_norm_quantize_nvfp4(cp.asarray(np.zeros((1, 8192), np.uint16)),
                                     cp.asarray(np.zeros(8192, np.uint16)), 1.0, config=RowConfig())
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("k, units", [(64, 1), (4096, 1), (4112, 2), (16384, 4), (32768, 8)])
def test_the_launch(cp, k, units):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((3, k), np.uint16))
    w = cp.asarray(np.zeros(k, np.uint16))
    res = cp.asarray(np.zeros((3, k), np.uint16))
    q, sf = fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, eps=1e-5)
    assert q.shape == (3, k // 2) and sf.shape == fp4q.swizzled_sf_shape(3, k)
    launch = fakes.active.launches[-1]
    constants = dict(launch["spec"].constants)
    assert (constants["PROLOGUE"], constants["ROW_UNITS"]) == (2, units)
    args = launch["args"]
    assert args["eps"] == float(np.float32(1e-5)) and args["residual"] == 0 and args["cols"] == k
    fp4q.rms_norm_quantize_nvfp4(x, w, 1.0, residual=res)
    launch = fakes.active.launches[-1]
    assert dict(launch["spec"].constants)["PROLOGUE"] == 3
    assert launch["args"]["residual"] == res.data.ptr and launch["args"]["weight"] == w.data.ptr


def test_the_reference_is_vllms_composition():
    # h = dtype(dtype(x * rinv) * w), with the sum of squares in the spec's tree; the residual
    # add rounds to x's dtype and is written back.
    rng = np.random.default_rng(4)
    x, w, res = rows_of(3, 64, rng), weight_of(64, rng), rows_of(3, 64, rng)
    updated = res.copy()
    h = reference.rms_norm(x, w, 1e-6, residual=updated)
    xf = (x.astype(np.uint32) << 16).view(np.float32)
    rf = (res.astype(np.uint32) << 16).view(np.float32)
    # Finite sums: ml_dtypes rounds them to nearest even, as the spec's dtype() does.
    r = (xf + rf).astype(ml_dtypes.bfloat16)
    assert_bytes_equal(updated, r.view(np.uint16), "the residual is dtype(x + residual)")
    rf32 = r.astype(np.float32)
    tree = (rf32 * rf32).astype(np.float32)
    while tree.shape[-1] > 1:
        tree = tree[..., 0::2] + tree[..., 1::2]
    ss = tree[..., 0]
    rinv = np.float32(1) / np.sqrt(ss / np.float32(64) + np.float32(1e-6))
    n = (rf32 * rinv[:, None]).astype(ml_dtypes.bfloat16).astype(np.float32)
    wf = (w.astype(np.uint32) << 16).view(np.float32)
    assert_bytes_equal(h, (n * wf).astype(ml_dtypes.bfloat16).view(np.uint16), "h")
