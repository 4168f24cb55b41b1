"""quantize_nvfp4: bit-exact against the reference on the GPU, and its
argument validation (which needs a GPU for device arrays)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fp4q.numerics import reference
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.variants import SHIPPED, SHIPPED_MX, SIMT

import fakes
from helpers import (BIG_K, BIG_M, BIG_ROWS, assert_bytes_equal, device_random_bits, edge_groups, mixed_groups,
                     random_bf16, require_free_device_memory)

gpu = pytest.mark.gpu


def _cp():
    return pytest.importorskip("cupy")


def _run_and_check(x_bits, tensor_sf, sf_layout="swizzled", device_sf=False, **kwargs):
    import fp4q

    cp = _cp()
    tsf = np.float32(tensor_sf)
    x = cp.asarray(x_bits)
    arg = cp.asarray(np.array(tsf, dtype=np.float32)) if device_sf else float(tsf)
    q, sf = fp4q.quantize_nvfp4(x, arg, sf_layout=sf_layout, **kwargs)
    cp.cuda.get_current_stream().synchronize()
    q_ref, sf_ref = reference.quantize_nvfp4(x_bits, tsf, sf_layout=sf_layout)
    assert_bytes_equal(cp.asnumpy(q), q_ref, f"q {x_bits.shape} {sf_layout}")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"sf {x_bits.shape} {sf_layout}")
    return q, sf


M_SHAPES = [0, 1, 31, 127, 128, 129, 1000, 4096]
K_SHAPES = [16, 48, 64, 80, 2176, 7168]


@gpu
@pytest.mark.parametrize("m", M_SHAPES)
@pytest.mark.parametrize("k", K_SHAPES)
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_shapes_bit_exact(m, k, sf_layout):
    rng = np.random.default_rng(m * 10007 + k)
    x = random_bf16((m, k), rng, specials=0.01)
    tsf = reference.global_scale(x) if m else np.float32(1)
    _run_and_check(x, tsf, sf_layout)


@gpu
@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e3, 1e30])
@pytest.mark.parametrize("device_sf", [False, True])
def test_random_scales_bit_exact(scale, device_sf):
    rng = np.random.default_rng(7)
    x = random_bf16((300, 1024), rng, scale=scale)
    _run_and_check(x, reference.global_scale(x), device_sf=device_sf)


@gpu
@pytest.mark.parametrize("k", [64, 2176])
@pytest.mark.parametrize("tensor_sf", [1.0, 0.37, 2.0**-20, 2.0**40, 1e-30])
def test_edge_families_bit_exact(k, tensor_sf):
    x = edge_groups(k)
    for layout in ("swizzled", "linear"):
        _run_and_check(x, tensor_sf, layout)
        _run_and_check(x, tensor_sf, layout, config=SimtConfig())


@gpu
@pytest.mark.parametrize("tensor_sf", [np.float32(-1.5), np.float32(np.nan), np.float32(np.inf),
                                       np.float32(0), np.float32(1e-45)])
def test_device_tensor_sf_outside_range_follows_formulas(tensor_sf):
    rng = np.random.default_rng(3)
    x = random_bf16((130, 256), rng, specials=0.05)
    for layout in ("swizzled", "linear"):
        _run_and_check(x, tensor_sf, layout, device_sf=True)
        _run_and_check(x, tensor_sf, layout, device_sf=True, config=SimtConfig())


# quantize_nvfp4 takes the NVFP4 configs; the MXFP4 ones are checked through quantize_mxfp4 below.
VARIANTS = {name: cfg for name, cfg in {**SHIPPED, **SIMT}.items() if cfg.fmt == "nvfp4"}
MX_VARIANTS = {name: cfg for name, cfg in {**SHIPPED_MX, **SIMT}.items() if cfg.fmt == "mxfp4"}


@gpu
@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
@pytest.mark.parametrize("device_sf", [False, True])
def test_every_shipped_config(name, sf_layout, device_sf):
    rng = np.random.default_rng(11)
    for m, k in [(129, 2176), (1000, 512), (5, 64), (300, 7168), (7, 96)]:  # 96: six groups, two of padding
        x = random_bf16((m, k), rng, specials=0.01)
        _run_and_check(x, reference.global_scale(x), sf_layout, device_sf, config=VARIANTS[name])


@gpu
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_config_on_groups_that_mix_the_conversion_paths(name):
    # The TMA kernel picks its e2m1 variant per 64-element chunk (input signs without the clamp, input
    # signs with it, or the general one for NaN products): neighbouring groups, chunks and lanes mixing
    # normal, tiny (e4m3-subnormal scale) and special groups must all land on the reference's bits.
    rng = np.random.default_rng(29)
    x = mixed_groups((256, 2048), rng)
    for tensor_sf in (reference.global_scale(x), np.float32(1.0), np.float32(2.0**40), np.float32(1e-30)):
        _run_and_check(x, tensor_sf, config=VARIANTS[name])
    finite = mixed_groups((256, 2048), rng, edge_fraction=0.0)  # only the first two paths
    _run_and_check(finite, reference.global_scale(finite), config=VARIANTS[name])


@gpu
def test_out_buffers_prefilled_are_fully_written():
    cp = _cp()
    rng = np.random.default_rng(5)
    for m, k, layout in [(129, 2176, "swizzled"), (129, 80, "swizzled"), (33, 2176, "linear")]:
        x = random_bf16((m, k), rng)
        q_ref, sf_ref = reference.quantize_nvfp4(x, 1.0, sf_layout=layout)
        out = cp.full(q_ref.shape, 0xFF, dtype=cp.uint8)
        sf_out = cp.full(sf_ref.shape, 0xFF, dtype=cp.uint8)
        import fp4q

        q, sf = fp4q.quantize_nvfp4(cp.asarray(x), 1.0, sf_layout=layout, out=out, sf_out=sf_out)
        assert q is out and sf is sf_out
        assert_bytes_equal(cp.asnumpy(out), q_ref, "q")
        assert_bytes_equal(cp.asnumpy(sf_out), sf_ref, "sf")


@gpu
@pytest.mark.parametrize("pdl", [True, False])
def test_non_default_stream_and_pdl(pdl):
    cp = _cp()
    rng = np.random.default_rng(9)
    x = random_bf16((1000, 4096), rng)
    stream = cp.cuda.Stream(non_blocking=True)
    import fp4q

    xd = cp.asarray(x)
    stream.synchronize()
    q, sf = fp4q.quantize_nvfp4(xd, 0.5, stream=stream, pdl=pdl)
    stream.synchronize()
    q_ref, sf_ref = reference.quantize_nvfp4(x, 0.5)
    assert_bytes_equal(cp.asnumpy(q), q_ref, "q")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, "sf")


@gpu
def test_pdl_chain_of_dependent_kernels():
    """Each quantize reads the previous one's output (its codes, read as bf16 bits): PDL must not
    let it read them before they are written."""
    cp = _cp()
    import fp4q

    rng = np.random.default_rng(13)
    x = random_bf16((512, 2048), rng)
    xd = cp.asarray(x)
    outs = []
    for i in range(4):  # K = 2048, 512, 128, 32
        q, sf = fp4q.quantize_nvfp4(xd, 1.0 + i, pdl=True)
        outs.append((q, sf))
        xd = q.view(cp.uint16)
    cp.cuda.get_current_stream().synchronize()
    for i, (q, sf) in enumerate(outs):
        q_ref, sf_ref = reference.quantize_nvfp4(x, 1.0 + i)
        assert_bytes_equal(cp.asnumpy(q), q_ref, f"q[{i}]")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"sf[{i}]")
        x = q_ref.view(np.uint16)


@gpu
def test_torch_bf16_input_zero_copy():
    """A torch bf16 CUDA tensor goes in without a copy and gives the reference's bytes.

    Runs in a fresh interpreter that imports fp4q first, as an application
    would: torch 2.11's own import has failed inside our pytest processes on
    the H200 (a schema parse error inside torch/_library), which a plain
    interpreter that ran fp4q kernels first did not reproduce."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    script = textwrap.dedent("""
        import numpy as np
        import cupy as cp
        import fp4q
        from fp4q.numerics import reference
        import torch

        bits = (np.random.default_rng(17).standard_normal((256, 1024), dtype=np.float32).view(np.uint32)
                >> 16).astype(np.uint16)
        t = torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)
        assert fp4q.ops.arrays.as_operand(t, "x")[fp4q.ops.arrays.PTR] == t.data_ptr(), "the tensor was copied"
        q, sf = fp4q.quantize_nvfp4(t, 2.0)
        cp.cuda.get_current_stream().synchronize()
        q_ref, sf_ref = reference.quantize_nvfp4(bits, 2.0)
        assert (cp.asnumpy(q) == q_ref).all() and (cp.asnumpy(sf) == sf_ref).all(), "bytes differ"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


@gpu
def test_leading_dimensions_flatten():
    cp = _cp()
    import fp4q

    rng = np.random.default_rng(19)
    x = random_bf16((3, 70, 256), rng)
    for layout in ("swizzled", "linear"):
        q, sf = fp4q.quantize_nvfp4(cp.asarray(x), 1.0, sf_layout=layout)
        q_ref, sf_ref = reference.quantize_nvfp4(x, 1.0, sf_layout=layout)
        assert_bytes_equal(cp.asnumpy(q), q_ref, "q")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, "sf")


SIGNATURES = {  # the public functions, written from the ops' declarations: the same calls as ever
    "quantize_nvfp4": "(x, tensor_sf, *, sf_layout='swizzled', padded_k=None, out=None, sf_out=None, stream=None, "
                      "config=None, pdl=True)",
    "quantize_mxfp4": "(x, *, mode='rceil', sf_layout='swizzled', padded_k=None, out=None, sf_out=None, "
                      "stream=None, config=None, pdl=True)",
    "dequantize_nvfp4": "(q, sf, tensor_sf, *, sf_layout='swizzled', dtype='bfloat16', out=None, stream=None, "
                        "config=None, pdl=True)",
    "dequantize_mxfp4": "(q, sf, *, sf_layout='swizzled', dtype='bfloat16', out=None, stream=None, config=None, "
                        "pdl=True)",
    "global_scale": "(x, *, stream=None, pdl=True)",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_public_functions_signatures_and_docstrings(name):
    import inspect

    import fp4q
    from fp4q.ops import api

    fn = getattr(fp4q, name)
    assert fn is getattr(api, name) and fn.__name__ == name and fn.__module__ == "fp4q"
    assert str(inspect.signature(fn)) == SIGNATURES[name]
    # The docstring names every argument.
    for parameter in inspect.signature(fn).parameters:
        assert f"``{parameter}``" in fn.__doc__, parameter


def test_empty_inputs_launch_nothing(cp):
    import fp4q

    q, sf = fp4q.quantize_nvfp4(cp.zeros((0, 64), dtype=cp.uint16), 1.0)
    assert q.shape == (0, 32) and sf.shape == (0, 1, 32, 4, 4)
    q, sf = fp4q.quantize_nvfp4(cp.zeros((5, 0), dtype=cp.uint16), 1.0, sf_layout="linear")
    assert q.shape == (5, 0) and sf.shape == (5, 0)
    assert fakes.active is None or fakes.active.launches == []


def test_explicit_tma_config_on_unservable_shape_is_an_error(cp):
    import fp4q

    with pytest.raises(ValueError, match="K=48 is not a multiple of 32"):
        fp4q.quantize_nvfp4(cp.zeros((4, 48), dtype=cp.uint16), 1.0, config=QuantizeConfig())


# --- beyond the seed: MXFP4, fp16, strided rows, batches, CUDA graphs -------------------------------------------


def _check_mx(x_bits, mode, sf_layout="swizzled", **kwargs):
    import fp4q

    cp = _cp()
    q, sf = fp4q.quantize_mxfp4(cp.asarray(x_bits), mode=mode, sf_layout=sf_layout, **kwargs)
    cp.cuda.get_current_stream().synchronize()
    q_ref, sf_ref = reference.quantize_mxfp4(x_bits, mode=mode, sf_layout=sf_layout)
    assert_bytes_equal(cp.asnumpy(q), q_ref, f"mx q {x_bits.shape} {mode} {sf_layout}")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"mx sf {x_bits.shape} {mode} {sf_layout}")


@gpu
@pytest.mark.parametrize("mode", ["rceil", "floor"])
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
@pytest.mark.parametrize("m,k", [(1, 32), (31, 96), (129, 128), (1000, 2176), (300, 7168), (4096, 4096)])
def test_mxfp4_bit_exact(mode, sf_layout, m, k):
    rng = np.random.default_rng(m + k)
    for scale in (1e-30, 1.0, 1e30):
        _check_mx(random_bf16((m, k), rng, scale=scale, specials=0.01), mode, sf_layout)


@gpu
@pytest.mark.parametrize("mode", ["rceil", "floor"])
def test_mxfp4_edge_families(mode):
    x = edge_groups(256)
    for layout in ("swizzled", "linear"):
        _check_mx(x, mode, layout)
        _check_mx(x, mode, layout, config=SimtConfig(fmt="mxfp4", mx_mode=mode))


@gpu
@pytest.mark.parametrize("name", sorted(MX_VARIANTS))
def test_mxfp4_configs_on_groups_that_mix_the_conversion_paths(name):
    # floor mode puts amax * 2^-e in [4, 8): its chunks often need the clamped variant.
    cfg = MX_VARIANTS[name]
    rng = np.random.default_rng(31)
    for edge_fraction in (0.1, 0.0):
        _check_mx(mixed_groups((256, 2048), rng, edge_fraction), cfg.mx_mode, config=cfg)


@gpu
@pytest.mark.parametrize("name", sorted(MX_VARIANTS))
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_mxfp4_shipped_configs(name, sf_layout):
    cfg = MX_VARIANTS[name]
    rng = np.random.default_rng(23)
    for m, k in [(129, 2176), (5, 128), (300, 4096), (7, 96)]:  # 96: three groups, one of padding
        _check_mx(random_bf16((m, k), rng, specials=0.01), cfg.mx_mode, sf_layout, config=cfg)


def test_variant_lists_split_by_format():
    assert VARIANTS and MX_VARIANTS
    assert {"mx_simt_256", "mx_simt_256_floor"} <= set(MX_VARIANTS)
    assert not set(VARIANTS) & set(MX_VARIANTS)


@gpu
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_fp16_input_bit_exact(sf_layout):
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(29)
    for m, k in [(129, 2176), (7, 48), (1000, 4096)]:
        x = (rng.standard_normal((m, k)) * 3).astype(np.float16)
        x[0, :4] = [np.nan, np.inf, -0.0, 6.1e-5]
        q, sf = fp4q.quantize_nvfp4(cp.asarray(x), 0.7, sf_layout=sf_layout)
        q_ref, sf_ref = reference.quantize_nvfp4(x, 0.7, sf_layout=sf_layout)
        assert_bytes_equal(cp.asnumpy(q), q_ref, "fp16 q")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, "fp16 sf")


@gpu
def test_strided_rows_quantize_in_place_without_copy():
    """A column slice of a wider matrix: rows contiguous, row stride larger than K."""
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(31)
    wide = random_bf16((257, 4096 + 512), rng)
    big = cp.asarray(wide)
    for start, k in [(512, 4096), (64, 1024), (16, 48)]:
        view = big[:, start : start + k]
        assert view.strides[0] > k * 2
        q, sf = fp4q.quantize_nvfp4(view, 1.5)
        q_ref, sf_ref = reference.quantize_nvfp4(np.ascontiguousarray(wide[:, start : start + k]), 1.5)
        assert_bytes_equal(cp.asnumpy(q), q_ref, f"strided q {start}:{start + k}")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"strided sf {start}:{start + k}")


@gpu
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_batched_3d_input(sf_layout):
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(37)
    x = random_bf16((4, 100, 512), rng)
    q, sf = fp4q.quantize_nvfp4(cp.asarray(x), 1.0, sf_layout=sf_layout)
    q_ref, sf_ref = reference.quantize_nvfp4(x, 1.0, sf_layout=sf_layout)
    assert q.shape == (4, 100, 256)
    assert sf.shape == ((4, 100, 32) if sf_layout == "linear" else (4, 8, 32, 4, 4))
    assert_bytes_equal(cp.asnumpy(q), q_ref, "batched q")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, "batched sf")


@gpu
def test_cuda_graph_capture_and_replay():
    """Quantize with a device tensor_sf inside a stream capture; replays track the scalar's value."""
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(41)
    x_host = random_bf16((384, 2048), rng)
    x = cp.asarray(x_host)
    scale = cp.asarray(np.float32(1.0))
    q = cp.empty((384, 1024), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(384, 2048), cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fp4q.quantize_nvfp4(x, scale, out=q, sf_out=sf)  # compile and load outside the capture
        stream.synchronize()
        stream.begin_capture()
        fp4q.quantize_nvfp4(x, scale, out=q, sf_out=sf, stream=stream)
        graph = stream.end_capture()
    for value in (0.5, 3.0, 1e-3):
        scale.fill(np.float32(value))
        q.fill(0xFF)
        sf.fill(0xFF)
        cp.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        q_ref, sf_ref = reference.quantize_nvfp4(x_host, np.float32(value))
        assert_bytes_equal(cp.asnumpy(q), q_ref, f"graph q {value}")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"graph sf {value}")


@gpu
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
@pytest.mark.parametrize("k", [64, 4096, 4112])
def test_one_dimensional_x_is_one_row(sf_layout, k):
    cp = pytest.importorskip("cupy")
    import fp4q

    host = random_bf16((k,), np.random.default_rng(k))
    tsf = float(reference.global_scale(host))
    q, sf = fp4q.quantize_nvfp4(cp.asarray(host), tsf, sf_layout=sf_layout)
    q_ref, sf_ref = reference.quantize_nvfp4(host, tsf, sf_layout=sf_layout)
    assert q.shape == (k // 2,) == q_ref.shape
    assert sf.shape == ((1, -(-k // 64), 32, 4, 4) if sf_layout == "swizzled" else (k // 16,)) == sf_ref.shape
    assert (cp.asnumpy(q) == q_ref).all() and (cp.asnumpy(sf) == sf_ref).all()
    y = fp4q.dequantize_nvfp4(q, sf, tsf, sf_layout=sf_layout, dtype="bfloat16")
    assert y.shape == (k,)
    assert (cp.asnumpy(y) == reference.dequantize_nvfp4(q_ref, sf_ref, tsf, sf_layout, "bfloat16")).all()


@gpu
@pytest.mark.parametrize("kernel", ["default", "vector", "plain", "mxfp4", "dynamic"])
def test_offsets_beyond_32_bits(kernel):
    """A training-sized input (2**32 + 1.5 * 2**20 elements, 8 GB of bf16): every address past 2**31
    and 2**32 bytes is computed in 64 bits. Sampled rows against the reference. For the dynamic
    scale every element is below 2 but the last one, 65536, which the amax pass must reach."""
    import fp4q

    cp = _cp()
    require_free_device_memory(cp, 12 << 30)
    x = device_random_bits(cp, (BIG_M, BIG_K), np.uint16)
    tsf = np.float32(0.75)
    if kernel == "mxfp4":
        q, sf = fp4q.quantize_mxfp4(x, sf_layout="linear")
    elif kernel == "dynamic":
        x &= cp.uint16(0xBFFF)  # the exponent's top bit clear: finite, |x| < 2
        x[-1, -1] = 0x4780  # 65536.0
        q, sf, scale = fp4q.quantize_nvfp4(x, "dynamic", sf_layout="linear")
        tsf = reference.global_scale(np.array([0x4780], dtype=np.uint16))
        assert cp.asnumpy(scale)[()] == tsf
    else:
        config = {"default": None, "vector": SimtConfig(vector=True), "plain": SimtConfig()}[kernel]
        q, sf = fp4q.quantize_nvfp4(x, float(tsf), sf_layout="linear", config=config)
    cp.cuda.Device().synchronize()
    rows = cp.asnumpy(x[BIG_ROWS])
    del x
    if kernel == "mxfp4":
        q_ref, sf_ref = reference.quantize_mxfp4(rows, sf_layout="linear")
    else:
        q_ref, sf_ref = reference.quantize_nvfp4(rows, tsf, sf_layout="linear")
    assert_bytes_equal(cp.asnumpy(q[BIG_ROWS]), q_ref, f"q rows {BIG_ROWS}")
    assert_bytes_equal(cp.asnumpy(sf[BIG_ROWS]), sf_ref, f"sf rows {BIG_ROWS}")
