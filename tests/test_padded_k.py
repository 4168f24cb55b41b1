"""Outputs padded to a row width ``padded_k >= K`` (vLLM's ``padded_n``): every quantize op,
each kernel that writes them (the SIMT, vector, one-launch dynamic and row kernels; the TMA
kernel writes rows of K values and is not chosen), torch's ops and vLLM's drop-in.

On the GPU: byte for byte against fp4q.reference with ``padded_k``, into buffers filled
with 0xFF first, so that every code and scale byte past K must be written as 0x00, also
under tensor scales whose formulas would give other bytes for a zero group (negative, NaN).
On any machine (the fakes): the rules and their messages, the shapes, the launch's
``cols`` and ``out_cols`` and which kernel a call takes; torch's schemas and fakes.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.rows import RowConfig
from fp4q.kernels.variants import SIMT
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal, assert_outputs_equal, random_bf16
from test_per_row import inputs, row_scales

gpu = pytest.mark.gpu

LAYOUTS = ["swizzled", "linear", "8x4"]
# (K, padded_k): a group more, to the next multiple of 4 groups, of 64 and 128 values, and none.
WIDTHS = [(16, 32), (48, 64), (80, 128), (2176, 2304), (64, 64)]


def sf_shape(layout: str, m: int, k: int, fmt: str = "nvfp4") -> tuple:
    if layout == "swizzled":
        return fp4q.swizzled_sf_shape(m, k, fmt)
    if layout == "8x4":
        return fp4q.sf_8x4_shape(m, k, fmt)
    return (m, k // (16 if fmt == "nvfp4" else 32))


def filled_outputs(cp, m: int, padded: int, layout: str, fmt: str = "nvfp4") -> dict:
    return dict(out=cp.full((m, padded // 2), 0xFF, cp.uint8),
                sf_out=cp.full(sf_shape(layout, m, padded, fmt), 0xFF, cp.uint8))


# ---------------------------------------------------------------- on the GPU
@gpu
@pytest.mark.parametrize("k, padded", WIDTHS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("config", [None, *sorted(n for n, c in SIMT.items() if c.fmt == "nvfp4")])
def test_quantize_nvfp4_every_kernel(k, padded, layout, config):
    import cupy as cp

    cfg = None if config is None else SIMT[config]
    if cfg is not None and cfg.vector and cfg.elements_per_unit > 16 and k % cfg.elements_per_unit:
        pytest.skip(f"{config} quantizes whole pairs of groups: K={k} is not a multiple of 32 (a rule)")
    rng = np.random.default_rng(k + padded)
    for m in (1, 9, 130):
        x = random_bf16((m, k), rng, specials=0.02)
        tsf = reference.global_scale(x)
        got = fp4q.quantize_nvfp4(cp.asarray(x), float(tsf), sf_layout=layout, padded_k=padded, config=cfg,
                                  **filled_outputs(cp, m, padded, layout))
        want = reference.quantize_nvfp4(x, tsf, sf_layout=layout, padded_k=padded)
        assert_outputs_equal(cp, got, want, f"{m}x{k} -> {padded} {layout} {config}")


@gpu
@pytest.mark.parametrize("tensor_sf", [np.float32(-1.5), np.float32(np.nan), np.float32(0)])
def test_padding_is_zero_under_any_tensor_scale(tensor_sf):
    # A zero group's scale byte is 0x80 under a negative scale and 0x7F under NaN; padding stays 0x00.
    import cupy as cp

    rng = np.random.default_rng(1)
    x = random_bf16((40, 96), rng, specials=0.05)
    for config in (None, SimtConfig()):
        for layout in LAYOUTS:
            got = fp4q.quantize_nvfp4(cp.asarray(x), cp.asarray(tensor_sf), sf_layout=layout, padded_k=160,
                                      config=config, **filled_outputs(cp, 40, 160, layout))
            want = reference.quantize_nvfp4(x, tensor_sf, sf_layout=layout, padded_k=160)
            assert_outputs_equal(cp, got, want, f"tensor_sf {tensor_sf} {layout} {config}")


@gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_quantize_mxfp4(layout, mode):
    import cupy as cp

    rng = np.random.default_rng(4)
    for m, k, padded in ((1, 32, 64), (9, 96, 128), (130, 2176, 2304)):
        x = random_bf16((m, k), rng, specials=0.02)
        for config in (None, SimtConfig(fmt="mxfp4"), SimtConfig(fmt="mxfp4", vector=True)):
            got = fp4q.quantize_mxfp4(cp.asarray(x), mode=mode, sf_layout=layout, padded_k=padded, config=config,
                                      **filled_outputs(cp, m, padded, layout, "mxfp4"))
            want = reference.quantize_mxfp4(x, mode, sf_layout=layout, padded_k=padded)
            assert_outputs_equal(cp, got, want, f"mxfp4 {m}x{k} -> {padded} {layout} {config}")


@gpu
@pytest.mark.parametrize("m", [1, 300, 5000])
def test_dynamic_tensor_scale_both_paths(m):
    import cupy as cp

    rng = np.random.default_rng(m)
    x = random_bf16((m, 1040), rng, specials=0.02)
    want = reference.quantize_nvfp4(x, reference.global_scale(x), padded_k=1088)
    # One launch (no config), and global_scale's two passes before the vector kernel (a config).
    for config in (None, SimtConfig(vector=True)):
        got = fp4q.quantize_nvfp4(cp.asarray(x), "dynamic", padded_k=1088, config=config,
                                  **filled_outputs(cp, m, 1088, "swizzled"))
        assert_outputs_equal(cp, got[:2], want, f"dynamic {m} rows, config {config}")
        assert_bytes_equal(cp.asnumpy(got[2]), np.float32(reference.global_scale(x)), "the dynamic scale")


@gpu
@pytest.mark.parametrize("op", ["quantize", "silu_and_mul", "rms_norm", "add_rms_norm"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_ops_and_scales_per_row(op, layout):
    import cupy as cp

    rng = np.random.default_rng(7)
    m, k, padded = 130, 1040, 1152
    x, w, res = inputs(op, m, k, rng)
    for tsf in (np.float32(0.7), row_scales(m, rng), "dynamic_per_row", "dynamic"):
        if isinstance(tsf, str) and tsf == "dynamic" and op in ("rms_norm", "add_rms_norm"):
            continue  # the RMSNorm ops take no whole-tensor dynamic scale
        dev_tsf = float(tsf) if isinstance(tsf, np.float32) else (cp.asarray(tsf) if isinstance(tsf, np.ndarray)
                                                                  else tsf)
        out = dict(filled_outputs(cp, m, padded, layout), sf_layout=layout, padded_k=padded)
        residual = None if res is None else cp.asarray(res)
        want_res = None if res is None else res.copy()
        if op == "quantize":
            got = fp4q.quantize_nvfp4(cp.asarray(x), dev_tsf, **out)
            want = reference.quantize_nvfp4(x, tsf, sf_layout=layout, padded_k=padded)
        elif op == "silu_and_mul":
            got = fp4q.silu_and_mul_quantize_nvfp4(cp.asarray(x), dev_tsf, **out)
            want = reference.silu_and_mul_quantize_nvfp4(x, tsf, sf_layout=layout, padded_k=padded)
        else:
            got = fp4q.rms_norm_quantize_nvfp4(cp.asarray(x), cp.asarray(w), dev_tsf, residual=residual, **out)
            want = reference.rms_norm_quantize_nvfp4(x, w, tsf, residual=want_res, sf_layout=layout,
                                                     padded_k=padded)
        what = f"{op} {layout} {tsf if isinstance(tsf, str) else type(tsf).__name__}"
        assert_outputs_equal(cp, got, want, what)
        if residual is not None:
            assert_bytes_equal(cp.asnumpy(residual), want_res, f"residual {what}")


@gpu
def test_mxfp4_fused_ops_and_a_row_config():
    import cupy as cp

    rng = np.random.default_rng(8)
    x = random_bf16((9, 2 * 1056), rng, specials=0.02)
    w = random_bf16((1056,), rng)
    got = fp4q.silu_and_mul_quantize_mxfp4(cp.asarray(x), padded_k=1152, **filled_outputs(cp, 9, 1152, "swizzled",
                                                                                             "mxfp4"))
    assert_outputs_equal(cp, got, reference.silu_and_mul_quantize_mxfp4(x, padded_k=1152), "silu_and_mul mxfp4")
    for units in (1, 2, 4):
        got = fp4q.rms_norm_quantize_mxfp4(cp.asarray(x[:, :1056]), cp.asarray(w), padded_k=1152,
                                           config=RowConfig(fmt="mxfp4", row_units=units),
                                           **filled_outputs(cp, 9, 1152, "swizzled", "mxfp4"))
        assert_outputs_equal(cp, got, reference.rms_norm_quantize_mxfp4(x[:, :1056], w, padded_k=1152), f"rms u{units}")


@gpu
def test_torch_op_and_vllm_drop_in():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft

    rng = np.random.default_rng(9)
    m, k, padded = 40, 1040, 1088
    x_host = random_bf16((m, k), rng, specials=0.01)
    x = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)
    tsf = torch.tensor([0.5], dtype=torch.float32, device="cuda")
    q_ref, sf_ref = reference.quantize_nvfp4(x_host, np.float32(0.5), padded_k=padded)
    q, sf = ft.quantize_nvfp4(x, tsf, padded_k=padded)
    assert_bytes_equal(q.cpu().numpy(), q_ref, "torch q")
    assert_bytes_equal(sf.cpu().view(torch.uint8).numpy(), sf_ref, "torch sf")
    q, sf = ft.scaled_fp4_quant(x, tsf, padded_n=padded)
    assert tuple(q.shape) == (m, padded // 2) and tuple(sf.shape) == (128, 68)
    assert_bytes_equal(q.cpu().numpy(), q_ref, "vLLM q")
    assert_bytes_equal(sf.cpu().view(torch.uint8).numpy(), sf_ref.reshape(128, 68), "vLLM sf")
    # At most 32 rows with a trtllm backend: FlashInfer's 8x4 layout.
    q, sf = ft.scaled_fp4_quant(x[:20], tsf, backend="flashinfer-trtllm")
    want = reference.quantize_nvfp4(x_host[:20], np.float32(0.5), sf_layout="8x4")[1]
    assert_bytes_equal(sf.cpu().view(torch.uint8).numpy(), want.reshape(24, 68), "vLLM 8x4 sf")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ft.quantize_nvfp4(x, tsf, padded_k=padded)
    graph.replay()
    torch.cuda.synchronize()
    assert_bytes_equal(captured[1].cpu().view(torch.uint8).numpy(), sf_ref, "captured sf")


# ---------------------------------------------------------------- on any machine
@pytest.mark.parametrize("padded_k, error, message", [
    (48, ValueError, "padded_k must be >= K = 64, got 48"),
    (72, ValueError, "padded_k must be a multiple of 16, got 72"),
    (64.0, TypeError, "padded_k must be an int or None, got 64.0 of type float"),
    (True, TypeError, "padded_k must be an int or None, got True of type bool"),
    ("128", TypeError, "padded_k must be an int or None, got '128' of type str"),
])
def test_rules(cp, padded_k, error, message):
    x = cp.asarray(np.zeros((4, 64), np.uint16))
    with pytest.raises(error, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        fp4q.quantize_nvfp4(x, 1.0, padded_k=padded_k)
    with pytest.raises(ValueError, match=r"^padded_k must be a multiple of 32, got 80$"):
        fp4q.quantize_mxfp4(x, padded_k=80)
    with pytest.raises(ValueError, match=r"^padded_k must be >= N = 64, got 48$"):
        fp4q.silu_and_mul_quantize_nvfp4(cp.asarray(np.zeros((4, 128), np.uint16)), 1.0, padded_k=48)
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shapes_and_the_launch(cp, layout):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((9, 80), np.uint16))
    q, sf = fp4q.quantize_nvfp4(x, 1.0, sf_layout=layout, padded_k=128)
    assert q.shape == (9, 64) and sf.shape == sf_shape(layout, 9, 128)
    args = fakes.active.launches[-1]["args"]
    assert (args["cols"], args["out_cols"]) == (80, 128)
    cfg = fp4q.config_for(x, 1.0, sf_layout=layout, padded_k=128)
    assert cfg.units_per_row(128) == 8 * 16 // cfg.elements_per_unit  # the walk covers the padded groups
    # No padding: out_cols is K.
    fp4q.quantize_nvfp4(x, 1.0, sf_layout=layout)
    assert fakes.active.launches[-1]["args"]["out_cols"] == 80
    # The row kernel (a scale per row, RMSNorm): the same two widths.
    q, sf, _ = fp4q.quantize_nvfp4(x, "dynamic_per_row", sf_layout=layout, padded_k=128)
    args = fakes.active.launches[-1]["args"]
    assert q.shape == (9, 64) and (args["cols"], args["out_cols"]) == (80, 128)


def test_the_tma_kernel_is_not_chosen(cp):
    if fakes.active is None:
        pytest.skip("the fake device's architecture")
    x = cp.zeros((8192, 8192), cp.uint16)
    assert isinstance(fp4q.config_for(x, 1.0), QuantizeConfig)
    cfg = fp4q.config_for(x, 1.0, padded_k=8192 + 64)
    assert isinstance(cfg, SimtConfig) and cfg.vector
    with pytest.raises(ValueError, match=r"^config is a TMA QuantizeConfig, but TMA cannot serve this call: it writes "
                                         r"rows of K values, not padded to padded_k=8256$"):
        fp4q.quantize_nvfp4(x, 1.0, padded_k=8192 + 64, config=QuantizeConfig())
    with pytest.raises(ValueError, match=r"^config.vector_elements=32 quantizes 2 whole groups per unit: "
                                         r"padded_k=8208 is not a multiple of 32$"):
        fp4q.quantize_nvfp4(x, 1.0, padded_k=8192 + 16, config=SimtConfig(vector=True, vector_elements=32))
    row = cp.asarray(np.zeros((2, 64), np.uint16))
    with pytest.raises(ValueError, match=r"^padded_k must be at most 32768 for quantize_nvfp4 \(a tensor scale per "
                                         r"row is taken by the row kernel, which holds a row in one CTA\), got 32784$"):
        fp4q.quantize_nvfp4(row, "dynamic_per_row", padded_k=32768 + 16)
    assert fakes.active.launches == []


def test_torch_schema_and_fakes():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fp4q.torch as ft
    from torch_fakes import fake_cuda

    schema = str(torch.ops.fp4q.quantize_nvfp4.default._schema)
    assert schema.endswith('str sf_layout="swizzled", bool pdl=True, bool fp4_dtype=False, int? padded_k=None) '
                           '-> (Tensor, Tensor)'), schema
    with FakeTensorMode():
        x = fake_cuda((13, 1040))
        q, sf = ft.quantize_nvfp4(x, 1.0, padded_k=1088)
        assert tuple(q.shape) == (13, 544) and tuple(sf.shape) == fp4q.swizzled_sf_shape(13, 1088)
        q, sf = ft.rms_norm_quantize_nvfp4(x, fake_cuda((1040,)), 1.0, sf_layout="linear", padded_k=1088)
        assert tuple(sf.shape) == (13, 68)
        q, sf = ft.scaled_fp4_quant(x, fake_cuda((1,), torch.float32), padded_n=1088)
        assert tuple(q.shape) == (13, 544) and tuple(sf.shape) == (128, 68)
        with pytest.raises(ValueError, match=r"^padded_n must be None or n = 1040 with the 8x4 layout"):
            ft.scaled_fp4_quant(x, fake_cuda((1,), torch.float32), backend="trtllm", padded_n=1088)
