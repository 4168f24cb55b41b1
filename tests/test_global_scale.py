"""The dynamic global scale: configs, rendering and compilation (CPU); the
device reduction bit-exact against fp4q.reference, quantize_nvfp4 with
tensor_sf="dynamic", and CUDA-graph capture (GPU)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fp4q.jit import render as codegen
from fp4q.numerics import reference
from fp4q.jit.compiler import compile_source
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.global_scale import AmaxConfig, FusedDynamicConfig, GlobalScaleConfig
from fp4q.kernels.quantize import SimtConfig
from fp4q.numerics.layouts import swizzled_sf_shape
from fp4q.kernels.archs import ARCHS
from fp4q.kernels.variants import GLOBAL_SCALE, all_variants

from helpers import assert_bytes_equal, bf16_bits, edge_groups, random_bf16

gpu = pytest.mark.gpu
ARCH_LIST = tuple(ARCHS)


def raises_config(*fragments):
    return pytest.raises(ConfigError, match=".*".join(re.escape(f) for f in fragments))


# --- configs, rendering, compilation (CPU) -----------------------------------------------------------------------


def test_defaults():
    assert (AmaxConfig().threads, AmaxConfig().vector_loads, AmaxConfig().input_dtype) == (512, True, "bfloat16")
    assert GlobalScaleConfig().threads == 256


@pytest.mark.parametrize("cls", [AmaxConfig, GlobalScaleConfig, FusedDynamicConfig])
def test_shared_rules(cls):
    with raises_config("arch must be one of 'sm_80', 'sm_90a', 'sm_100f', 'sm_110f', 'sm_120f', 'sm_80_on_sm_90a', got 'sm_89'"):
        cls(arch="sm_89")
    with raises_config("threads must be one of 128, 256, 512, 1024, got 96"):
        cls(threads=96)
    with raises_config("threads must be one of 128, 256, 512, 1024, got 256.0"):
        cls(threads=256.0)


def test_amax_rules():
    with raises_config("input_dtype must be 'bfloat16' or 'float16', got 'float32'"):
        AmaxConfig(input_dtype="float32")
    with raises_config("vector_loads must be a bool, got 1"):
        AmaxConfig(vector_loads=1)


def test_fused_dynamic_rules_and_render():
    with raises_config("sf_layout must be one of 'swizzled', 'linear', '8x4', got 'tiled'"):
        FusedDynamicConfig(sf_layout="tiled")
    with raises_config("input_dtype must be 'bfloat16' or 'float16', got 'float32'"):
        FusedDynamicConfig(input_dtype="float32")
    # NVFP4 with the scale it derives, by value: the call fields no other format or mode.
    with raises_config("the one-launch dynamic quantizer is NVFP4 with the scale it derives (fmt='nvfp4', "
                       "tensor_sf_mode='value'), got fmt='mxfp4', tensor_sf_mode='value'"):
        FusedDynamicConfig(fmt="mxfp4")
    with raises_config("got fmt='nvfp4', tensor_sf_mode='pointer'"):
        FusedDynamicConfig(tensor_sf_mode="pointer")
    cfg = FusedDynamicConfig(sf_layout="linear", input_dtype="float16", arch="sm_100f")
    # The quantize half is the vector kernel's: the same flags and the same work items.
    assert cfg.vector == SimtConfig(threads=128, vector=True, sf_layout="linear", input_dtype="float16",
                                    arch="sm_100f")
    assert cfg.work_items(300, 7168) == cfg.vector.work_items(300, 7168)
    src = codegen.render(cfg.spec)
    assert (src.kernel_name, src.arch) == ("fp4q_quantize_fp4_dynamic", "sm_100f")
    head = prelude(src.source)
    for line in ("constexpr int SIMT_THREADS = 128;", "constexpr int SF_VEC = 16;", "constexpr int VEC_ELEMS = 16;",
                 "constexpr bool FP4Q_SF_SWIZZLED = false;", "constexpr bool FP4Q_INPUT_FP16 = true;"):
        assert line in head
    assert cfg.spec.grid.waves == 1  # one wave: the grid barrier needs every CTA resident


def prelude(source: str) -> str:
    return source[:source.index("typedef unsigned char u8;")]


@pytest.mark.parametrize("vector", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_render_amax(vector, dtype):
    src = codegen.render(AmaxConfig(threads=256, vector_loads=vector, input_dtype=dtype).spec)
    assert src.kernel_name == "fp4q_amax"
    head = prelude(src.source)
    assert f"constexpr bool FP4Q_VECTOR_LOADS = {str(vector).lower()};" in head
    assert f"constexpr bool FP4Q_INPUT_FP16 = {str(dtype == 'float16').lower()};" in head
    assert "constexpr int AMAX_THREADS = 256;" in head
    assert not re.search(r"^\s*#\s*(include|pragma\s+once)", src.source, re.M)


@pytest.mark.parametrize("four_over_six", [False, True])
def test_render_global_scale(four_over_six):
    src = codegen.render(GlobalScaleConfig(threads=128, four_over_six=four_over_six, arch="sm_100f").spec)
    assert (src.kernel_name, src.arch) == ("fp4q_global_scale", "sm_100f")
    assert "constexpr int SCALE_THREADS = 128;" in prelude(src.source)
    assert f"constexpr bool FP4Q_FOUR_OVER_SIX = {str(four_over_six).lower()};" in prelude(src.source)
    assert "div_rn(numerator, amax)" in src.source  # the spec's correctly rounded division
    assert "FP4Q_FOUR_OVER_SIX ? 1536.0f : 2688.0f" in src.source


@pytest.mark.parametrize("arch", ARCH_LIST)
def test_global_scale_kernels_are_in_all_variants(arch):
    everything = all_variants(arch)
    for name, cfg in GLOBAL_SCALE.items():
        assert everything[name] == cfg.replace(arch=arch)
    amax = {(c.input_dtype, c.vector_loads) for c in GLOBAL_SCALE.values() if isinstance(c, AmaxConfig)}
    assert amax == {(d, v) for d in ("bfloat16", "float16") for v in (True, False)}


@pytest.mark.parametrize("arch", ARCH_LIST)
@pytest.mark.parametrize("name", sorted(GLOBAL_SCALE))
def test_compiles_without_spills(arch, name, variants_cache):
    kernel = compile_source(codegen.render(GLOBAL_SCALE[name].replace(arch=arch).spec), cache=variants_cache)
    assert kernel.cubin[:4] == b"\x7fELF"
    assert kernel.resources.spill_bytes == 0 and kernel.resources.stack_bytes == 0, kernel.log
    assert "warning" not in kernel.log.lower(), kernel.log


# --- GPU ---------------------------------------------------------------------------------------------------------


def _cp():
    return pytest.importorskip("cupy")


def _scale_of(x_bits, **kwargs):
    import fp4q

    cp = _cp()
    x = x_bits if isinstance(x_bits, cp.ndarray) else cp.asarray(x_bits)
    s = fp4q.global_scale(x, **kwargs)
    assert isinstance(s, cp.ndarray) and s.shape == () and s.dtype == np.float32
    return np.float32(cp.asnumpy(s)[()])


def assert_scale(got, want, what):
    assert np.float32(got).view(np.uint32) == np.float32(want).view(np.uint32), f"{what}: got {got!r} want {want!r}"


@gpu
@pytest.mark.parametrize("values, want", [
    ([0.0] * 64, 1.0),
    ([-0.0] * 64, 1.0),
    ([np.nan] * 64, 1.0),  # NaN ignored: amax 0
    ([np.inf, 1.0] * 32, 1.0),
    ([-np.inf, np.nan] * 32, 1.0),
    ([1e-40, -3e-41] * 32, 2.0**100),  # subnormal amax: 2688 / amax overflows, clamped
    ([3e38, -1.0] * 32, None),
    ([np.nan, -5.0, 2.0, 0.0] * 16, None),  # NaN ignored, |-5| wins
])
def test_special_tensors(values, want):
    x = bf16_bits(np.array(values, dtype=np.float32)).reshape(4, 16)
    ref = reference.global_scale(x)
    if want is not None:
        assert_scale(ref, want, "reference")
    assert_scale(_scale_of(x), ref, str(values[:4]))


@gpu
@pytest.mark.parametrize("shape", [(1, 16), (3, 48), (129, 2176), (1000, 7168), (4096, 4096), (70000, 16)])
@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
def test_random_tensors(shape, scale):
    rng = np.random.default_rng(shape[0] + shape[1])
    x = random_bf16(shape, rng, scale=scale)
    assert_scale(_scale_of(x), reference.global_scale(x), f"{shape} {scale}")


@gpu
def test_the_maximum_anywhere_is_found():
    # one large element at every position class: first, last, inside a vector, past the unrolled part
    for pos in [0, 1, 7, 8, 4095, 123456, 1000 * 512 - 1]:
        x = np.full(1000 * 512, bf16_bits(np.float32(0.5)), dtype=np.uint16)
        x[pos] = bf16_bits(np.float32(-7.0))
        assert_scale(_scale_of(x.reshape(1000, 512)), np.float32(2688) / np.float32(7), f"pos {pos}")


@gpu
def test_edge_families_and_specials():
    rng = np.random.default_rng(5)
    x = np.concatenate([edge_groups(256), random_bf16((50, 256), rng, specials=0.2)])
    assert_scale(_scale_of(x), reference.global_scale(x), "edges")


@gpu
def test_fp16_input():
    cp = _cp()
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((300, 512)) * 100).astype(np.float16)
    x[5, 7] = np.float16(np.nan)
    assert_scale(_scale_of(cp.asarray(x)), reference.global_scale(x), "fp16")


@gpu
def test_strided_and_misaligned_inputs():
    cp = _cp()
    rng = np.random.default_rng(7)
    wide = random_bf16((300, 1024), rng, specials=0.01)
    wd = cp.asarray(wide)
    for start, stop in [(0, 512), (8, 520), (1, 513), (16, 32), (3, 19)]:  # vector and scalar loads
        assert_scale(_scale_of(wd[:, start:stop]), reference.global_scale(np.ascontiguousarray(wide[:, start:stop])),
                     f"columns {start}:{stop}")


@gpu
def test_empty_input_gives_one():
    cp = _cp()
    assert_scale(_scale_of(cp.zeros((0, 64), dtype=cp.uint16)), 1.0, "no rows")
    assert_scale(_scale_of(cp.zeros((4, 0), dtype=cp.uint16)), 1.0, "no columns")


@gpu
def test_deterministic_and_stream_ordered():
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(8)
    x = cp.asarray(random_bf16((2048, 4096), rng))
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.get_current_stream().synchronize()
    scales = [fp4q.global_scale(x, stream=stream, pdl=pdl) for pdl in (True, False, True)]
    stream.synchronize()
    bits = {int(cp.asnumpy(s).view(np.uint32)) for s in scales}
    assert len(bits) == 1


@gpu
def test_repeated_calls_reuse_their_plan_with_new_pointers():
    import fp4q
    from fp4q.ops import engine, plans
    from fp4q.ops.arrays import as_operand
    from fp4q.ops.global_scale import GLOBAL_SCALE

    cp = _cp()
    rng = np.random.default_rng(9)
    wide = random_bf16((64, 1040), rng)
    for start in (0, 8, 1):  # aligned and misaligned starts: vector and scalar loads, a plan each
        for trial in range(3):  # a new allocation (a new pointer) each time, the same kind of call
            host = random_bf16((64, 1040), rng, scale=10.0 ** trial)
            x = cp.asarray(host)[:, start:start + 512]
            want = reference.global_scale(np.ascontiguousarray(host[:, start:start + 512]))
            assert_scale(_scale_of(x), want, f"start {start} trial {trial}")
            stored = len(plans.plans)
            plan = engine.plan_of(GLOBAL_SCALE, as_operand(x, "x"), (), None)
            assert len(plans.plans) == stored, "the call stored no plan of its kind"
            # A launch per low four bits of x's pointer (the op's only pointer before its scalar output).
            launch = plan.launches[("value", x.data.ptr & 15)]
            assert launch.amax.config.vector_loads == (x.data.ptr % 16 == 0)
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.asarray(wide)
    want = reference.global_scale(wide)
    got = fp4q.global_scale(x, stream=stream)
    stream.synchronize()
    assert_scale(np.float32(cp.asnumpy(got)[()]), want, "planned call on a non-current stream")


def test_a_stored_plan_still_checks_what_varies_per_call(cp):
    import fp4q

    x = cp.zeros((4, 16), dtype=cp.uint16)
    fp4q.global_scale(x)
    with pytest.raises(TypeError, match="pdl must be a bool, got None"):
        fp4q.global_scale(x, pdl=None)
    with pytest.raises(TypeError, match="stream must be a cupy.cuda.Stream"):
        fp4q.global_scale(x, stream=[0])


def test_argument_errors(cp):
    import fp4q

    with pytest.raises(TypeError, match="x must hold bfloat16 or float16 values"):
        fp4q.global_scale(cp.zeros((4, 16), dtype=cp.float32))
    with pytest.raises(TypeError, match="pdl must be a bool, got None"):
        fp4q.global_scale(cp.zeros((4, 16), dtype=cp.uint16), pdl=None)
    with pytest.raises(ValueError, match="tensor_sf must be a float, a device float32 scalar, a device float32 array of one value per row, 'dynamic' or 'dynamic_per_row', got 'auto'"):
        fp4q.quantize_nvfp4(cp.zeros((4, 16), dtype=cp.uint16), "auto")


# --- quantize_nvfp4(x, "dynamic") --------------------------------------------------------------------------------


@gpu
# One launch, on the H200 with CTAs of 128 (1x16, 33x80), 256 (129x2176), 512 (128x7168) and 1024
# threads (1000x7168, whose one-wave grid walks more than one unit per thread).
@pytest.mark.parametrize("shape", [(1, 16), (129, 2176), (128, 7168), (1000, 7168), (33, 80)])
@pytest.mark.parametrize("layout", ["swizzled", "linear"])
def test_dynamic_quantize_equals_reference(shape, layout):
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(shape[0] * 31 + shape[1])
    x = random_bf16(shape, rng, scale=0.01, specials=0.01)
    q, sf, tsf = fp4q.quantize_nvfp4(cp.asarray(x), "dynamic", sf_layout=layout)
    want_tsf = reference.global_scale(x)
    q_ref, sf_ref = reference.quantize_nvfp4(x, want_tsf, sf_layout=layout)
    assert tsf.shape == () and tsf.dtype == np.float32
    assert_scale(cp.asnumpy(tsf)[()], want_tsf, "tensor_sf")
    assert_bytes_equal(cp.asnumpy(q), q_ref, "q")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, "sf")


@gpu
def test_dynamic_quantize_chain_without_host_sync():
    """Each dynamic call reads x right after a CuPy kernel rewrote it: PDL must not let the amax pass run early."""
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(12)
    base = random_bf16((512, 2048), rng)
    x = cp.asarray(base)
    results = []
    for i in range(6):
        factor = np.float32(2.0 ** (i - 3))
        x_host = bf16_bits((base.astype(np.uint32) << 16).view(np.float32) * factor)
        x[...] = cp.asarray(x_host)
        results.append((x_host, fp4q.quantize_nvfp4(x, "dynamic", out=cp.empty((512, 1024), dtype=cp.uint8))))
    cp.cuda.get_current_stream().synchronize()
    for i, (x_host, (q, sf, tsf)) in enumerate(results):
        want_tsf = reference.global_scale(x_host)
        q_ref, sf_ref = reference.quantize_nvfp4(x_host, want_tsf)
        assert_scale(cp.asnumpy(tsf)[()], want_tsf, f"tensor_sf[{i}]")
        assert_bytes_equal(cp.asnumpy(q), q_ref, f"q[{i}]")
        assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"sf[{i}]")


@gpu
def test_dynamic_empty_input():
    import fp4q

    cp = _cp()
    q, sf, tsf = fp4q.quantize_nvfp4(cp.zeros((0, 64), dtype=cp.uint16), "dynamic")
    assert q.shape == (0, 32) and sf.shape == (0, 1, 32, 4, 4)
    assert_scale(cp.asnumpy(tsf)[()], 1.0, "tensor_sf")


@gpu
# 300x2176 captures the two passes; 3x2048 (384 units) the one launch of one CTA, which needs no counter.
@pytest.mark.parametrize("m, k", [(300, 2176), (3, 2048)])
def test_cuda_graph_capture_and_replay(m, k):
    """Quantize with a dynamic scale and dequantize, captured once and replayed on new data."""
    import fp4q

    cp = _cp()
    rng = np.random.default_rng(13)
    stream = cp.cuda.Stream(non_blocking=True)
    x = cp.empty((m, k), dtype=cp.uint16)
    q_out = cp.empty((m, k // 2), dtype=cp.uint8)
    sf_out = cp.empty(swizzled_sf_shape(m, k), dtype=cp.uint8)
    y_out = cp.empty((m, k), dtype=cp.float32)
    with stream:
        # Warm up: compile and load the kernels outside the capture.
        x[...] = cp.asarray(random_bf16((m, k), rng))
        _, _, tsf = fp4q.quantize_nvfp4(x, "dynamic", out=q_out, sf_out=sf_out, stream=stream)
        fp4q.dequantize_nvfp4(q_out, sf_out, tsf, dtype="float32", out=y_out, stream=stream)
        stream.synchronize()
        stream.begin_capture()
        _, _, tsf = fp4q.quantize_nvfp4(x, "dynamic", out=q_out, sf_out=sf_out, stream=stream)
        fp4q.dequantize_nvfp4(q_out, sf_out, tsf, dtype="float32", out=y_out, stream=stream)
        graph = stream.end_capture()
    for scale in (1e-3, 1.0, 1e4):
        x_host = random_bf16((m, k), rng, scale=scale, specials=0.01)
        x.set(x_host, stream=stream)
        graph.launch(stream)
        stream.synchronize()
        want_tsf = reference.global_scale(x_host)
        q_ref, sf_ref = reference.quantize_nvfp4(x_host, want_tsf)
        assert_scale(cp.asnumpy(tsf)[()], want_tsf, f"tensor_sf at scale {scale}")
        assert_bytes_equal(cp.asnumpy(q_out), q_ref, "q")
        assert_bytes_equal(cp.asnumpy(sf_out), sf_ref, "sf")
        y_ref = reference.dequantize_nvfp4(q_ref, sf_ref, want_tsf, dtype="float32")
        got = cp.asnumpy(y_out)
        same = (got.view(np.uint32) == y_ref.view(np.uint32)) | (np.isnan(got) & np.isnan(y_ref))
        assert same.all(), f"y: {int((~same).sum())} values differ at scale {scale}"
