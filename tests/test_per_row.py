"""Tensor scales per row: a device float32 array of one scale per row, and
``tensor_sf="dynamic_per_row"`` (each row's global scale, computed in the same pass and
returned), for quantize_nvfp4, silu_and_mul_quantize_nvfp4 and (add+)rms_norm_quantize_nvfp4,
all run by the row kernel.

On the GPU: byte for byte against fp4q.reference (q, sf, the returned scales and the updated
residual), every unit count of the row kernel, both input dtypes and layouts, rows with NaN,
Inf, zeros and subnormals, scale values that are 0, negative, subnormal, Inf or NaN, 1-D, 3-D
and strided x, reused buffers, rows of no elements; torch's ops, graph capture. On any
machine (the fakes): the rules on the per-row array and the launch (PROLOGUE, ROW_SCALE, the
scale pointer); torch's fakes and a torch.compile trace.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.kernels.rows import RowConfig
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal
from test_rms_norm import rows_of, weight_of

gpu = pytest.mark.gpu

# K per CTA shape of the row kernel (128 threads of one unit up to 2048, then 256 threads of 1 to 8
# units): the largest of each, and ones between.
KS = [16, 4096, 7168, 8192, 14336, 16384, 32768]


def row_scales(m: int, rng) -> np.ndarray:
    """One float32 scale per row: 448 * 6 / amax-like values over many binades, and every
    special the formulas must define (0, -0, negative, subnormal, Inf, NaN)."""
    s = (2.0 ** rng.uniform(-20, 20, m)).astype(np.float32)
    specials = np.array([0.0, -0.0, -3.0, 1e-40, np.inf, np.nan], np.float32)
    s[: min(m, len(specials))] = specials[: min(m, len(specials))]
    return s


def run_op(cp, op: str, x_host, tensor_sf, w_host=None, res_host=None, *, x=None, **options):
    """The op on the device and the reference's result, and the reference's residual."""
    x = cp.asarray(x_host) if x is None else x
    dev_sf = cp.asarray(tensor_sf) if isinstance(tensor_sf, np.ndarray) else tensor_sf
    layout = options.get("sf_layout", "swizzled")
    if op == "quantize":
        got = fp4q.quantize_nvfp4(x, dev_sf, **options)
        want = reference.quantize_nvfp4(x_host, tensor_sf, sf_layout=layout)
        return got, want, None, None
    if op == "silu_and_mul":
        got = fp4q.silu_and_mul_quantize_nvfp4(x, dev_sf, **options)
        want = reference.silu_and_mul_quantize_nvfp4(x_host, tensor_sf, sf_layout=layout)
        return got, want, None, None
    residual = None if res_host is None else cp.asarray(res_host)
    want_res = None if res_host is None else res_host.copy()
    got = fp4q.rms_norm_quantize_nvfp4(x, cp.asarray(w_host), dev_sf, eps=1e-6, residual=residual, **options)
    want = reference.rms_norm_quantize_nvfp4(x_host, w_host, tensor_sf, eps=1e-6, residual=want_res, sf_layout=layout)
    return got, want, residual, want_res


def check(cp, op: str, x_host, tensor_sf, w_host=None, res_host=None, **kwargs):
    got, want, residual, want_res = run_op(cp, op, x_host, tensor_sf, w_host, res_host, **kwargs)
    cp.cuda.get_current_stream().synchronize()
    what = f"{op} {x_host.shape} {x_host.dtype} {kwargs.get('sf_layout', 'swizzled')} " \
           f"{tensor_sf if isinstance(tensor_sf, str) else 'per-row array'}"
    assert len(got) == len(want), what
    assert_bytes_equal(cp.asnumpy(got[0]), want[0], f"q {what}")
    assert_bytes_equal(cp.asnumpy(got[1]), want[1], f"sf {what}")
    if isinstance(tensor_sf, str) and tensor_sf == "dynamic_per_row":
        assert got[2].dtype == np.float32
        assert_bytes_equal(cp.asnumpy(got[2]), want[2], f"scales {what}")
    if residual is not None:
        assert_bytes_equal(cp.asnumpy(residual), want_res, f"residual {what}")
    return got


def inputs(op: str, m: int, k: int, rng, dtype=np.uint16):
    """x (and weight, residual) for an op whose quantized rows have k elements."""
    if op == "silu_and_mul":
        return rows_of(m, 2 * k, rng, dtype), None, None
    res = rows_of(m, k, rng, dtype) if op == "add_rms_norm" else None
    return rows_of(m, k, rng, dtype), (weight_of(k, rng, dtype) if op != "quantize" else None), res


OPS = ["quantize", "silu_and_mul", "rms_norm", "add_rms_norm"]


# ---------------------------------------------------------------- on the GPU
@gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("mode", ["array", "dynamic_per_row"])
def test_bit_exact(op, k, mode):
    import cupy as cp

    rng = np.random.default_rng(k)
    m = 37
    x, w, res = inputs(op, m, k, rng)
    tensor_sf = row_scales(m, rng) if mode == "array" else mode
    check(cp, op if op != "add_rms_norm" else "rms_norm", x, tensor_sf, w, res)


@gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
@pytest.mark.parametrize("dtype", [np.uint16, np.float16])
def test_layouts_and_dtypes(op, layout, dtype):
    import cupy as cp

    rng = np.random.default_rng(3)
    x, w, res = inputs(op, 300, 2048, rng, dtype)
    for tensor_sf in (row_scales(300, rng), "dynamic_per_row"):
        check(cp, op if op != "add_rms_norm" else "rms_norm", x, tensor_sf, w,
              None if res is None else res.copy(), sf_layout=layout)


@gpu
@pytest.mark.parametrize("units", [1, 2, 4, 8])
def test_every_unit_count_of_a_config(units):
    # quantize_nvfp4 takes no config; the RMSNorm ops run a given RowConfig with scales per row too.
    import cupy as cp

    rng = np.random.default_rng(units)
    x, w = rows_of(9, 2048, rng), weight_of(2048, rng)
    for tensor_sf in (row_scales(9, rng), "dynamic_per_row"):
        got = fp4q.rms_norm_quantize_nvfp4(cp.asarray(x), cp.asarray(w),
                                           cp.asarray(tensor_sf) if not isinstance(tensor_sf, str) else tensor_sf,
                                           config=RowConfig(row_units=units))
        want = reference.rms_norm_quantize_nvfp4(x, w, tensor_sf)
        for g, want_part, name in zip(got, want, ("q", "sf", "scales")):
            assert_bytes_equal(cp.asnumpy(g), want_part, f"{name} u{units}")


@gpu
def test_shapes_strides_and_reused_buffers():
    import cupy as cp

    rng = np.random.default_rng(11)
    # 3-D x: the scales as (M,) or x.shape[:-1], and returned of x.shape[:-1].
    x3 = rows_of(24, 512, rng).reshape(2, 12, 512)
    lead = row_scales(24, rng).reshape(2, 12)
    check(cp, "quantize", x3, lead)
    check(cp, "quantize", x3, lead.reshape(24))
    got = check(cp, "quantize", x3, "dynamic_per_row")
    assert got[2].shape == (2, 12)
    # 1-D x: one row, its scale a scalar of shape ().
    got = check(cp, "quantize", x3[0, 0], "dynamic_per_row")
    assert got[2].shape == ()
    # Strided rows.
    x_host = rows_of(130, 512, rng)
    wide = cp.zeros((130, 520), cp.uint16)
    wide[:, :512] = cp.asarray(x_host)
    check(cp, "quantize", x_host, "dynamic_per_row", x=wide[:, :512])
    check(cp, "quantize", x_host, row_scales(130, rng), x=wide[:, :512])
    # Reused buffers: every byte written again, padding included.
    q = cp.full((130, 256), 0xEE, cp.uint8)
    sf = cp.full(fp4q.swizzled_sf_shape(130, 512), 0xEE, cp.uint8)
    check(cp, "quantize", x_host, "dynamic_per_row", out=q, sf_out=sf)
    check(cp, "silu_and_mul", rows_of(130, 1024, rng), row_scales(130, rng), out=q, sf_out=sf)


@gpu
def test_rows_of_no_elements_and_no_rows():
    import cupy as cp

    q, sf, scales = fp4q.quantize_nvfp4(cp.zeros((3, 0), cp.uint16), "dynamic_per_row")
    assert q.shape == (3, 0) and scales.shape == (3,)
    assert cp.asnumpy(scales).tolist() == [1.0, 1.0, 1.0]  # global_scale of an empty row
    q, sf, scales = fp4q.quantize_nvfp4(cp.zeros((0, 64), cp.uint16), "dynamic_per_row")
    assert q.shape == (0, 32) and scales.shape == (0,)
    q, sf = fp4q.quantize_nvfp4(cp.zeros((0, 64), cp.uint16), cp.zeros(0, cp.float32))
    assert q.shape == (0, 32)


@gpu
def test_torch_ops_and_graph_capture():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft

    rng = np.random.default_rng(5)
    x_host, w_host = rows_of(64, 1024, rng), weight_of(1024, rng)
    scales_host = row_scales(64, rng)
    x = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)
    w = torch.from_numpy(w_host.view(np.int16)).cuda().view(torch.bfloat16)
    scales = torch.from_numpy(scales_host).cuda()

    def every_form():
        return (*ft.quantize_nvfp4(x, scales), *ft.quantize_nvfp4(x, "dynamic_per_row", fp4_dtype=True),
                *ft.rms_norm_quantize_nvfp4(x, w, "dynamic_per_row", sf_layout="linear"),
                *ft.silu_and_mul_quantize_nvfp4(x, scales))

    def check_all(got):
        want = (*reference.quantize_nvfp4(x_host, scales_host), *reference.quantize_nvfp4(x_host, "dynamic_per_row"),
                *reference.rms_norm_quantize_nvfp4(x_host, w_host, "dynamic_per_row", sf_layout="linear"),
                *reference.silu_and_mul_quantize_nvfp4(x_host, scales_host))
        assert len(got) == len(want)
        for i, (g, wanted) in enumerate(zip(got, want)):
            g = g.cpu()
            g = g.view(torch.uint8) if g.dtype != torch.float32 else g
            assert_bytes_equal(g.numpy(), wanted, f"output {i}")

    check_all(every_form())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = every_form()
    graph.replay()
    torch.cuda.synchronize()
    check_all(captured)


# ---------------------------------------------------------------- on any machine
def test_rules_on_the_per_row_array(cp):
    x = cp.asarray(np.zeros((6, 64), np.uint16))
    with pytest.raises(ValueError, match=r"^a device tensor_sf must be a float32 array of shape \(\) or \(1,\), or one "
                                         r"value per row: \(M,\) = \(6,\) or x.shape\[:-1\] = \(6,\), got dtype "
                                         r"float32 shape \(5,\)$"):
        fp4q.quantize_nvfp4(x, cp.asarray(np.ones(5, np.float32)))
    with pytest.raises(ValueError, match=r"got dtype float64 shape \(6,\)$"):
        fp4q.quantize_nvfp4(x, cp.asarray(np.ones(6, np.float64)))
    with pytest.raises(ValueError, match=r"^a per-row tensor_sf must be C-contiguous"):
        fp4q.quantize_nvfp4(x, cp.asarray(np.ones(12, np.float32))[::2])
    x3 = cp.asarray(np.zeros((2, 3, 64), np.uint16))
    with pytest.raises(ValueError, match=r"\(M,\) = \(6,\) or x.shape\[:-1\] = \(2, 3\), got dtype float32 "
                                         r"shape \(3, 2\)$"):
        fp4q.quantize_nvfp4(x3, cp.asarray(np.ones((3, 2), np.float32)))
    # The ops without a tensor scale per row.
    with pytest.raises(ValueError, match=r"^a device tensor_sf must be a float32 array of shape \(\) or \(1,\), got "
                                         r"dtype float32 shape \(6,\)$"):
        fp4q.dequantize_nvfp4(cp.asarray(np.zeros((6, 32), np.uint8)), cp.asarray(np.zeros((6, 4), np.uint8)),
                              cp.asarray(np.ones(6, np.float32)), sf_layout="linear")
    with pytest.raises(ValueError, match=r"^tensor_sf must be a float or a device float32 scalar, got "
                                         r"'dynamic_per_row'$"):
        fp4q.dequantize_nvfp4(cp.asarray(np.zeros((6, 32), np.uint8)), cp.asarray(np.zeros((6, 4), np.uint8)),
                              "dynamic_per_row", sf_layout="linear")
    # What the row kernel cannot take.
    big = cp.asarray(np.zeros((2, 32768 + 16), np.uint16))
    with pytest.raises(ValueError, match=r"^K must be at most 32768 for quantize_nvfp4 \(a tensor scale per row is "
                                         r"taken by the row kernel, which holds a row in one CTA\), got 32784$"):
        fp4q.quantize_nvfp4(big, "dynamic_per_row")
    strided = cp.asarray(np.zeros((4, 68), np.uint16))[:, :64]
    with pytest.raises(ValueError, match=r"^quantize_nvfp4 loads and stores 16 bytes at a time with a tensor scale "
                                         r"per row: x's row stride of 136 bytes is not a multiple of 16$"):
        fp4q.quantize_nvfp4(strided, "dynamic_per_row")
    with pytest.raises(ValueError, match=r"^config must be None with a tensor scale per row \(the row kernel takes "
                                         r"it, and quantize_nvfp4 takes no RowConfig\), got a SimtConfig$"):
        fp4q.quantize_nvfp4(x, "dynamic_per_row", config=fp4q.SimtConfig())
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("op, prologue", [("quantize", 0), ("silu_and_mul", 1), ("rms_norm", 2),
                                          ("add_rms_norm", 3)])
@pytest.mark.parametrize("k, units", [(64, 1), (4112, 2), (16384, 4), (32768, 8)])
def test_the_launch(cp, op, prologue, k, units):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    m = 5
    x = cp.asarray(np.zeros((m, 2 * k if op == "silu_and_mul" else k), np.uint16))
    w = cp.asarray(np.zeros(k, np.uint16))
    res = cp.asarray(np.zeros((m, k), np.uint16))
    scales = cp.asarray(np.ones(m, np.float32))

    def call(tensor_sf):
        if op == "quantize":
            return fp4q.quantize_nvfp4(x, tensor_sf)
        if op == "silu_and_mul":
            return fp4q.silu_and_mul_quantize_nvfp4(x, tensor_sf)
        return fp4q.rms_norm_quantize_nvfp4(x, w, tensor_sf, residual=res if op == "add_rms_norm" else None)

    for tensor_sf, row_scale in ((scales, 1), ("dynamic_per_row", 2)):
        got = call(tensor_sf)
        launch = fakes.active.launches[-1]
        constants = dict(launch["spec"].constants)
        assert (constants["PROLOGUE"], constants["ROW_UNITS"], constants["ROW_SCALE"]) == (prologue, units, row_scale)
        args = launch["args"]
        assert args["cols"] == k and args["rows"] == m
        if row_scale == 1:
            assert len(got) == 2 and args["tensor_sf_ptr"] == scales.data.ptr
        else:
            assert len(got) == 3 and got[2].shape == (m,) and got[2].dtype == np.float32
            assert args["tensor_sf_ptr"] == got[2].data.ptr
        assert args["weight"] == (w.data.ptr if op in ("rms_norm", "add_rms_norm") else 0)
        assert args["residual"] == (res.data.ptr if op == "add_rms_norm" else 0)


def test_a_row_of_one_value_is_a_device_scalar(cp):
    # (1,) is both a device scalar and the scales of one row: the same value either way.
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    fp4q.quantize_nvfp4(cp.asarray(np.zeros((1, 64), np.uint16)), cp.asarray(np.ones(1, np.float32)))
    assert "ROW_SCALE" not in dict(fakes.active.launches[-1]["spec"].constants)


def test_torch_fakes_and_a_compile_trace():
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fp4q.torch as ft
    from torch_fakes import fake_cuda

    def per_row(x, scales, w):
        q, sf, s = ft.quantize_nvfp4(x, "dynamic_per_row")
        q2, sf2 = ft.quantize_nvfp4(x, scales, out=torch.empty_like(q), sf_out=torch.empty_like(sf))
        h = ft.silu_and_mul_quantize_nvfp4(x, "dynamic_per_row", sf_layout="linear", fp4_dtype=True)
        r = ft.rms_norm_quantize_nvfp4(x, w, scales)
        return q, sf, s, q2, sf2, *h, *r

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(per_row, backend=counter, fullgraph=True, dynamic=True)
    mode = FakeTensorMode()
    for lead, k in (((300,), 320), ((1000,), 640), ((130,), 576), ((7, 130), 576)):
        with mode:
            x, w = fake_cuda((*lead, k)), fake_cuda((k,))
            scales = fake_cuda(lead, torch.float32)
        got = compiled(x, scales, w)
        m = int(np.prod(lead))
        assert got[2].shape == lead and got[2].dtype == torch.float32
        assert got[0].shape == (*lead, k // 2) and got[5].shape == (*lead, k // 4)
        assert got[6].shape == (*lead, k // 32) and got[7].shape == lead  # SiLU·mul: N = k // 2, linear
        assert got[9].shape == fp4q.swizzled_sf_shape(m, k)
        assert counter.frame_count == len(lead)  # one compile per rank of x
    targets = {str(node.target) for node in counter.graphs[-1].graph.nodes}
    assert {"fp4q.quantize_nvfp4_dynamic_per_row.default", "fp4q.quantize_nvfp4_out.Tensor",
            "fp4q.silu_and_mul_quantize_nvfp4_dynamic_per_row.default",
            "fp4q.rms_norm_quantize_nvfp4.Tensor"} <= targets
    with mode:
        x = fake_cuda((4, 64))
        with pytest.raises(ValueError, match=r"\(M,\) = \(4,\) or x.shape\[:-1\] = \(4,\), got dtype float32 "
                                             r"shape \(3,\)$"):
            ft.quantize_nvfp4(x, fake_cuda((3,), torch.float32))


def test_config_for_names_the_row_kernel(cp):
    if fakes.active is None:
        pytest.skip("the fake device's architecture")
    x = cp.asarray(np.zeros((6, 8192), np.uint16))
    cfg = fp4q.config_for(x, cp.asarray(np.ones(6, np.float32)))
    assert isinstance(cfg, RowConfig) and (cfg.row_units, cfg.tensor_sf_mode, cfg.prologue) == (2, "per_row", "none")
    short = fp4q.config_for(x[:, :2048], cp.asarray(np.ones(6, np.float32)))
    assert (short.threads, short.row_units) == (128, 1)
    with pytest.raises(ValueError, match=r"^config must be None with a tensor scale per row"):
        fp4q.config_for(x, cp.asarray(np.ones(6, np.float32)), config=fp4q.SimtConfig())
