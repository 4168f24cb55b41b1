"""Launch plans and the one call path of the ops (fp4q/ops/engine.py) without a GPU.

CuPy arrays, the device, kernel loading, tensor-map encoding and the
driver's launch are faked (tests/fakes.py); everything else (validation, plans, argument
packing, CUlaunchConfig objects) is the real code. Each launch is decoded
from the void*[] the driver would read, by the kernel spec's parameter list,
into arguments by name, and compared with what the call means (the grid,
the tensor maps, the scalars), on the first call of a kind and on the calls
after it. Plan keys must differ where a reused plan would be wrong: scale
layout, config object, format; the kernel choice within a plan follows the
pointer alignment and the tensor_sf mode; pdl, the stream, the pointers and
the tensor_sf value are per call.
"""

from __future__ import annotations

import math
import re
import threading

import numpy as np
import pytest
from cuda.bindings import driver as cu

from fp4q.cuda import driver
from fp4q.cuda import launch as launch_module
from fp4q.cuda.launch import Launcher
from fp4q.cuda.tma import TensorMapSpec
from fp4q.kernels import tuning
from fp4q.kernels.global_scale import FusedDynamicConfig
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.spec import KernelSpec, StrideGrid
from fp4q.kernels.walk import unit_divisor
from fp4q.numerics.layouts import swizzled_sf_shape
from fp4q.ops import api, declare, engine, plans
from fp4q.ops import quantize as quantize_ops
from fp4q.ops.arrays import as_operand
from fp4q.ops.quantize import QUANTIZE_NVFP4

import fakes
from fakes import CTAS_PER_SM, SM_COUNT, SUCCESS, FakeArray, FakeDriver, FakeStream


@pytest.fixture
def gpu(monkeypatch):
    fake = fakes.install(monkeypatch)
    fake.views = 0  # calls that ran the rules on the main input (the first of a kind: its plan)
    fake.checked = 0  # quantize kernel choices (per kind of call, tensor_sf mode and the pointers' low bits)
    rows_view, resolve_config = declare.rows_view, quantize_ops.resolve_config

    def counting_view(*args):
        fake.views += 1
        return rows_view(*args)

    def counting_resolve(*args):
        fake.checked += 1
        cfg = resolve_config(*args)
        fake.config_of[cfg.spec] = cfg
        return cfg

    monkeypatch.setattr(declare, "rows_view", counting_view)
    monkeypatch.setattr(quantize_ops, "resolve_config", counting_resolve)
    # These small fake shapes would pick the vector kernel; the tests below are about
    # the TMA kernel unless they say otherwise (vector_kernel_for_small_inputs).
    monkeypatch.setattr(tuning, "vector_max_elements", lambda arch, fmt="nvfp4": 0)
    tuning.choose_config.cache_clear()
    yield fake
    tuning.choose_config.cache_clear()
    plans.plans.clear()


@pytest.fixture
def vector_kernel_for_small_inputs(gpu, monkeypatch):
    monkeypatch.setattr(tuning, "vector_max_elements", lambda arch, fmt="nvfp4": tuning.VECTOR_MAX_ELEMENTS)
    tuning.choose_config.cache_clear()
    return gpu


# ------------------------------------------------------------------------------------ what a call must launch
def expected_launch(cfg, view, q, sf, scale, stream=0):
    """The grid and the arguments (by name) that ``cfg``'s kernel must get for this call:
    tensor maps as TensorMapSpec, pointers and integers as ints, the scale as a float32.
    Kernel parameters are named by the call's slots (x, out, sf_out, tensor_sf_value, tensor_sf_ptr)."""
    rows, cols = view["rows"], view["cols"]
    x_ptr, row_stride = view["ptr"], view["row_stride"]
    args = dict(tensor_sf_value=float(np.float32(scale[0])), tensor_sf_ptr=scale[1], rows=rows, cols=cols)
    if isinstance(cfg, QuantizeConfig):
        in_spec = TensorMapSpec(x_ptr, 2, (cols, rows), (row_stride * 2,), (cfg.input_box_k, cfg.tile_m),
                                cfg.input_swizzle, l2_promotion=256)
        q_spec = TensorMapSpec(q.data.ptr, 1, (cols // 2, rows), (cols // 2,), (cfg.output_box_k, cfg.tile_m),
                               cfg.output_swizzle)
        if cfg.sf_layout == "swizzled":
            k_blocks, m_blocks = math.ceil(cols / (4 * cfg.sf_vec_size)), math.ceil(rows / 128)
            sf_spec = TensorMapSpec(sf.data.ptr, 1, (16, 32, k_blocks, m_blocks), (16, 512, 512 * k_blocks),
                                    tuple(reversed(cfg.scales_box)))
        else:  # linear scales are stored through sf_out; the map the kernel leaves unread is the first one again
            sf_spec = in_spec
        tiles = math.ceil(rows / cfg.tile_m) * math.ceil(cols / cfg.tile_k)
        grid = min(tiles, SM_COUNT * CTAS_PER_SM) if cfg.persistent else tiles
        tickets = FakeDriver.counter_for(None, None, stream) if grid < tiles else 0
        args.update(x_map=in_spec, out_map=q_spec, sf_out_map=sf_spec, sf_out=sf.data.ptr, tickets=tickets)
    else:
        groups = cols // cfg.sf_vec_size
        padded_rows = math.ceil(rows / 128) * 128 if cfg.sf_layout == "swizzled" else rows
        padded_groups = math.ceil(groups / 4) * 4 if cfg.sf_layout == "swizzled" else groups
        if cfg.vector:  # a thread per vector_elements elements, and per word of the last block of scales if padded
            per_row = padded_groups * cfg.sf_vec_size // cfg.vector_elements
            total = max(rows * per_row, padded_groups // 4 * 128 if padded_rows > rows else 0)
        else:
            per_row = padded_groups
            total = padded_rows * padded_groups
        grid = max(1, min(math.ceil(total / cfg.threads), SM_COUNT * CTAS_PER_SM * 4))
        args.update(x=x_ptr, x_row_stride=row_stride, out=q.data.ptr, sf_out=sf.data.ptr, out_cols=cols,
                    **dict(unit_divisor(per_row)))
    return grid, args


def check_launch(launch, cfg_type, x, q, sf, tensor_sf, stream, pdl, row_stride=None):
    """``launch`` is what this call must launch."""
    cfg = launch["config"]
    assert type(cfg) is cfg_type
    rows, cols = math.prod(x.shape[:-1]), x.shape[-1]
    view = dict(rows=rows, cols=cols, ptr=x.data.ptr, row_stride=row_stride or x.strides[-2] // 2)
    if isinstance(tensor_sf, FakeArray):
        scale = (0.0, tensor_sf.data.ptr)
    else:
        scale = (float(np.float32(tensor_sf)), 0)
    grid, args = expected_launch(cfg, view, q, sf, scale, stream)
    assert launch["grid"] == (grid, 1, 1)
    assert launch["block"] == (cfg.threads, 1, 1)
    assert launch["smem"] == (cfg.smem.total if isinstance(cfg, QuantizeConfig) else 0)
    assert launch["stream"] == stream and launch["pdl"] is pdl
    assert launch["args"] == args


def call(gpu, x, tensor_sf=1.0, **kwargs):
    before = len(gpu.launches)
    q, sf = api.quantize_nvfp4(x, tensor_sf, **kwargs)
    new = gpu.launches[before:]
    assert len(new) <= 1
    return q, sf, (new[0] if new else None)


def plan_of(x, options=("swizzled", None)):
    """The stored plan of quantize_nvfp4(x) with these options (sf_layout, padded_k) and no config."""
    stored = len(plans.plans)
    plan = engine.plan_of(QUANTIZE_NVFP4, as_operand(x, "x"), options, None)
    assert len(plans.plans) == stored, "no plan of this kind of call was stored"
    return plan


def low_bits(*pointers):
    """The key of the pointers' alignment in a plan's launches: their low four bits, in order."""
    low = 0
    for ptr in pointers:
        low = (low << 4) | (ptr & 15)
    return low


def swizzled(cupy, m, k, offset=0):
    return cupy.array(swizzled_sf_shape(m, k), np.uint8, offset)


# ------------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
@pytest.mark.parametrize("m, k", [(16, 4096), (129, 2176), (1, 64), (300, 7168)])
def test_planned_calls_launch_what_the_checked_call_launched(gpu, sf_layout, m, k):
    cp = gpu.cupy
    x = cp.array((m, k))
    q = cp.array((m, k // 2), np.uint8)
    sf = swizzled(cp, m, k) if sf_layout == "swizzled" else cp.array((m, k // 16), np.uint8)
    for i in range(3):  # the first call stores the plan, the others use it
        _, _, launch = call(gpu, x, 0.75, sf_layout=sf_layout, out=q, sf_out=sf)
        check_launch(launch, QuantizeConfig, x, q, sf, 0.75, 0, True)
    assert len(plans.plans) == 1 and gpu.checked == 1
    assert len(gpu.launches) == 3


def test_allocated_outputs_take_the_planned_path(gpu):
    cp = gpu.cupy
    x = cp.array((129, 2176))
    for i in range(3):
        q, sf, launch = call(gpu, x, 2.0)
        assert q.shape == (129, 1088) and sf.shape == swizzled_sf_shape(129, 2176)
        assert q.dtype == np.uint8 and sf.dtype == np.uint8
        check_launch(launch, QuantizeConfig, x, q, sf, 2.0, 0, True)
    assert len(cp.allocations) == 6 and len(plans.plans) == 1 and gpu.checked == 1


def test_simt_planned_calls(gpu):
    cp = gpu.cupy
    x = cp.array((33, 80))  # K not a multiple of 32: SIMT
    for sf_layout in ("swizzled", "linear"):
        for _ in range(2):
            q, sf, launch = call(gpu, x, 3.0, sf_layout=sf_layout)
            check_launch(launch, SimtConfig, x, q, sf, 3.0, 0, True)
    assert gpu.checked == 2


@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
@pytest.mark.parametrize("m, k", [(16, 4096), (129, 2176), (1, 64), (33, 80)])
def test_small_inputs_launch_the_vector_kernel(vector_kernel_for_small_inputs, sf_layout, m, k):
    gpu = vector_kernel_for_small_inputs
    cp = gpu.cupy
    x = cp.array((m, k))
    for _ in range(2):
        q, sf, launch = call(gpu, x, 0.5, sf_layout=sf_layout)
        assert launch["config"].vector and launch["config"].threads == tuning.VECTOR_THREADS
        check_launch(launch, SimtConfig, x, q, sf, 0.5, 0, True)
    assert gpu.checked == 1


@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_vector_units_of_two_groups(gpu, sf_layout):
    cp = gpu.cupy
    config = SimtConfig(vector=True, vector_elements=32)
    x = cp.array((33, 96))  # six groups: three units per row, linear; eight groups, four units, swizzled
    for _ in range(2):
        q, sf, launch = call(gpu, x, 2.0, config=config, sf_layout=sf_layout)
        check_launch(launch, SimtConfig, x, q, sf, 2.0, 0, True)
    with pytest.raises(ValueError, match=r"config.vector_elements=32 quantizes 2 whole groups per unit: "
                                         r"K=48 is not a multiple of 32"):
        call(gpu, cp.array((4, 48)), config=config, sf_layout=sf_layout)


def test_misaligned_small_inputs_launch_the_plain_simt_kernel(vector_kernel_for_small_inputs):
    gpu = vector_kernel_for_small_inputs
    cp = gpu.cupy
    x = cp.array((16, 4096), offset=2)
    q, sf, launch = call(gpu, x, 0.5)
    assert not launch["config"].vector
    check_launch(launch, SimtConfig, x, q, sf, 0.5, 0, True)


def test_strided_and_batched_inputs(gpu):
    cp = gpu.cupy
    x = cp.array((3, 70, 256), strides=(70 * 512 * 2, 512 * 2, 2))  # rows 1024 bytes apart, 512 used
    for _ in range(2):
        q, sf, launch = call(gpu, x, 1.5, sf_layout="linear")
        assert q.shape == (3, 70, 128) and sf.shape == (3, 70, 16)
        check_launch(launch, QuantizeConfig, x, q, sf, 1.5, 0, True, row_stride=512)


def test_alignment_is_part_of_the_kind(gpu):
    cp = gpu.cupy
    m, k = 64, 1024
    x = cp.array((m, k))
    q_aligned, q_odd = cp.array((m, k // 2), np.uint8), cp.array((m, k // 2), np.uint8, offset=8)
    sf = swizzled(cp, m, k)
    for q, cfg_type in [(q_aligned, QuantizeConfig), (q_odd, SimtConfig), (q_aligned, QuantizeConfig),
                        (q_odd, SimtConfig)]:
        _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf)
        check_launch(launch, cfg_type, x, q, sf, 1.0, 0, True)
    # A misaligned swizzled sf_out also rules TMA out, a misaligned linear one does not (it is not a map).
    sf_odd = swizzled(cp, m, k, offset=4)
    _, _, launch = call(gpu, x, 1.0, out=q_aligned, sf_out=sf_odd)
    check_launch(launch, SimtConfig, x, q_aligned, sf_odd, 1.0, 0, True)
    sf_lin_odd = cp.array((m, k // 16), np.uint8, offset=4)
    for _ in range(2):
        _, _, launch = call(gpu, x, 1.0, sf_layout="linear", out=q_aligned, sf_out=sf_lin_odd)
        check_launch(launch, QuantizeConfig, x, q_aligned, sf_lin_odd, 1.0, 0, True)
    x_odd = cp.array((m, k), offset=2)
    for _ in range(2):
        _, _, launch = call(gpu, x_odd, 1.0, out=q_aligned, sf_out=sf)
        check_launch(launch, SimtConfig, x_odd, q_aligned, sf, 1.0, 0, True)
    launches = plan_of(x).launches
    # A plan keeps a launch per tensor_sf mode and low four bits of the pointers (x, out, sf_out).
    assert {key: type(launch.config) for key, launch in launches.items()} == {
        ("value", low_bits(x.data.ptr, q_aligned.data.ptr, sf.data.ptr)): QuantizeConfig,
        ("value", low_bits(x.data.ptr, q_odd.data.ptr, sf.data.ptr)): SimtConfig,
        ("value", low_bits(x.data.ptr, q_aligned.data.ptr, sf_odd.data.ptr)): SimtConfig,
        ("value", low_bits(x_odd.data.ptr, q_aligned.data.ptr, sf.data.ptr)): SimtConfig}
    assert low_bits(x.data.ptr, q_aligned.data.ptr, sf.data.ptr) == 0
    # Kernel choices: the first call of each of those four alignments (odd out, odd sf_out, odd x), then
    # the first linear one (another kind of call); each repeat took its stored launch.
    assert gpu.checked == 5


def test_explicit_tma_config_on_misaligned_pointers_raises_every_time(gpu):
    cp = gpu.cupy
    x = cp.array((64, 1024))
    cfg = QuantizeConfig()
    q, sf = cp.array((64, 512), np.uint8), swizzled(cp, 64, 1024)
    call(gpu, x, 1.0, out=q, sf_out=sf, config=cfg)  # stores the plan
    q_odd = cp.array((64, 512), np.uint8, offset=8)
    for _ in range(2):
        with pytest.raises(ValueError, match="config is a TMA QuantizeConfig, but TMA cannot serve this call: "
                                             "out's base address 0x[0-9a-f]+ is not 16-byte aligned"):
            api.quantize_nvfp4(x, 1.0, out=q_odd, sf_out=sf, config=cfg)
    assert len(gpu.launches) == 1


def test_layout_and_mode_are_part_of_the_kind(gpu):
    cp = gpu.cupy
    x = cp.array((16, 4096))
    tsf = cp.array((), np.float32)
    for _ in range(2):
        for sf_layout in ("swizzled", "linear"):
            for tensor_sf in (0.5, tsf):
                q, sf, launch = call(gpu, x, tensor_sf, sf_layout=sf_layout)
                check_launch(launch, QuantizeConfig, x, q, sf, tensor_sf, 0, True)
                assert launch["config"].sf_layout == sf_layout
                assert launch["config"].tensor_sf_mode == ("pointer" if tensor_sf is tsf else "value")
    # One plan per layout; within it, one kernel choice per tensor_sf mode.
    assert len(plans.plans) == 2 and gpu.checked == 4 and gpu.views == 2


def test_tensor_sf_value_is_per_call_and_rounded_like_numpy(gpu):
    cp = gpu.cupy
    x = cp.array((16, 256))
    q, sf = cp.array((16, 128), np.uint8), swizzled(cp, 16, 256)
    rng = np.random.default_rng(0)
    values = [1.0, 0.1, 1 / 3, 2.0**-126, 2.0**100, 7, np.float32(0.37), np.float64(1e-20), np.float16(0.1),
              *(float(v) for v in np.exp(rng.uniform(-80, 60, 50)))]
    for value in values:
        _, _, launch = call(gpu, x, value, out=q, sf_out=sf)
        check_launch(launch, QuantizeConfig, x, q, sf, value, 0, True)
    # A value just outside the range that rounds into it is accepted, as np.float32 rounds it.
    below = float(np.nextafter(2.0**-126, 0))
    assert float(np.float32(below)) == 2.0**-126
    _, _, launch = call(gpu, x, below, out=q, sf_out=sf)
    check_launch(launch, QuantizeConfig, x, q, sf, below, 0, True)
    assert gpu.checked == 1 and gpu.views == 1


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # np.float32(2**200)
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0**101, 1e-40, np.float16(0),
                                 np.float16("inf"), 0, 2**200, True, np.bool_(True)])
def test_bad_tensor_sf_raises_after_a_plan_exists(gpu, bad):
    cp = gpu.cupy
    x = cp.array((16, 256))
    call(gpu, x, 1.0)
    expected = TypeError if isinstance(bad, (bool, np.bool_)) else ValueError
    for _ in range(2):
        with pytest.raises(expected, match="tensor_sf"):
            api.quantize_nvfp4(x, bad)
    assert len(gpu.launches) == 1


def test_device_tensor_sf_checks_after_a_plan_exists(gpu):
    cp = gpu.cupy
    x = cp.array((16, 256))
    call(gpu, x, cp.array((), np.float32))
    for bad, message in [
        (cp.array((2,), np.float32), r"shape \(2,\)"),
        (cp.array((), np.float64), "dtype float64"),
        (cp.array((1, 1), np.float32), r"shape \(1, 1\)"),
        (cp.array((), np.float32, device=1), "tensor_sf is on device 1 but x is on device 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            api.quantize_nvfp4(x, bad)
    assert len(gpu.launches) == 1


def test_output_checks_after_a_plan_exists(gpu):
    cp = gpu.cupy
    m, k = 16, 256
    x = cp.array((m, k))
    q, sf = cp.array((m, k // 2), np.uint8), swizzled(cp, m, k)
    call(gpu, x, 1.0, out=q, sf_out=sf)
    cases = [
        (dict(out=cp.array((m, k // 2 + 1), np.uint8)), ValueError, r"out must have shape \(16, 128\)"),
        (dict(out=cp.array((m, k // 2), np.int8)), TypeError, "out must have dtype uint8 or float4_e2m1fn_x2, got int8"),
        (dict(out=cp.array((m, k // 2), np.uint8, device=1)), ValueError, "out is on device 1 but the input is on device 0"),
        (dict(out=cp.array((m, k // 2), np.uint8, strides=(k, 1))), ValueError, "out must be C-contiguous"),
        (dict(out=FakeArray((m, k // 2), np.uint8, x.data.ptr + 64)), ValueError, "out overlaps x"),
        (dict(sf_out=FakeArray(sf.shape, np.uint8, x.data.ptr + x.nbytes - 1)), ValueError,
         "sf_out overlaps x"),
        (dict(sf_out=FakeArray(sf.shape, np.uint8, q.data.ptr + 16)), ValueError, "sf_out overlaps out"),
        (dict(sf_out=cp.array((m, k // 16), np.uint8)), ValueError, r"sf_out must have shape \(1, 4, 32, 4, 4\)"),
        (dict(out=np.zeros((m, k // 2), np.uint8)), TypeError, "out must be a CUDA array .*, got a host ndarray"),
        (dict(pdl=1), TypeError, "pdl must be a bool, got 1"),
        (dict(pdl=np.bool_(True)), TypeError, "pdl must be a bool"),
        (dict(stream="default"), TypeError, "stream must be a cupy.cuda.Stream"),
        (dict(stream=FakeStream(5, device_id=1)), ValueError, "stream belongs to device 1 but the input is on device 0"),
        (dict(config="fast"), TypeError, "config must be None, a QuantizeConfig or a SimtConfig, got str"),
        (dict(sf_layout="bogus"), ValueError, "sf_layout must be one of 'swizzled', 'linear', '8x4', got 'bogus'"),
        (dict(sf_layout=np.str_("swizzled")), ValueError,
         "sf_layout must be one of 'swizzled', 'linear', '8x4', got np.str_"),
    ]
    for extra, exc_type, message in cases:
        kwargs = dict(out=q, sf_out=sf, **extra) if "out" not in extra and "sf_out" not in extra else extra
        kwargs.setdefault("out", q)
        kwargs.setdefault("sf_out", sf)
        for _ in range(2):
            with pytest.raises(exc_type, match=message):
                api.quantize_nvfp4(x, 1.0, **kwargs)
    assert len(gpu.launches) == 1
    # Touching (not overlapping) buffers are fine, on both paths.
    for _ in range(2):
        _, _, launch = call(gpu, x, 1.0, out=FakeArray((m, k // 2), np.uint8, x.data.ptr + x.nbytes), sf_out=sf)
        assert launch is not None


def test_input_checks_after_a_plan_exists(gpu):
    cp = gpu.cupy
    x = cp.array((16, 256))
    call(gpu, x, 1.0)
    cases = [
        (cp.array((16, 256), np.int16), TypeError, "x must hold bfloat16, float16 or float32 values"),
        (cp.array((16, 250)), ValueError, "K \\(the last dimension of x\\) must be a multiple of 16 for quantize_nvfp4, got 250"),
        (cp.array(()), ValueError, r"x must have at least 1 dimension \(..., K\), got shape \(\)"),
        (cp.array((16, 256), strides=(512, 4)), ValueError, "the last dimension of x must be contiguous"),
        (cp.array((16, 256), strides=(256, 2)), ValueError, "the rows of x must not overlap"),
        (np.zeros((16, 256), np.uint16), TypeError, "x must be a CUDA array"),
    ]
    for bad, exc_type, message in cases:
        for _ in range(2):
            with pytest.raises(exc_type, match=message):
                api.quantize_nvfp4(bad, 1.0)
    assert len(gpu.launches) == 1


def test_empty_inputs_launch_nothing_on_either_path(gpu):
    cp = gpu.cupy
    for shape, layout, q_shape, sf_shape in [((0, 64), "swizzled", (0, 32), (0, 1, 32, 4, 4)),
                                             ((5, 0), "linear", (5, 0), (5, 0))]:
        for _ in range(2):
            q, sf, launch = call(gpu, cp.array(shape), 1.0, sf_layout=layout)
            assert launch is None
            assert (q.shape, q.dtype, sf.shape, sf.dtype) == (q_shape, np.uint8, sf_shape, np.uint8)


@pytest.mark.parametrize("sf_layout, sf_shape", [("swizzled", (1, 65, 32, 4, 4)), ("linear", (257,))])
def test_a_one_dimensional_x_is_one_row(gpu, sf_layout, sf_shape):
    cp = gpu.cupy
    x = cp.array((4112,))
    q, sf, launch = call(gpu, x, 1.0, sf_layout=sf_layout)
    assert (q.shape, sf.shape) == ((2056,), sf_shape)
    assert (launch["args"]["rows"], launch["args"]["cols"]) == (1, 4112)
    # pdl, the stream and the config are still checked for an empty input.
    for _ in range(2):
        with pytest.raises(TypeError, match="pdl must be a bool"):
            api.quantize_nvfp4(cp.array((0, 64)), 1.0, pdl="yes")
        with pytest.raises(TypeError, match="config must be None, a QuantizeConfig or a SimtConfig, got str"):
            api.quantize_nvfp4(cp.array((0, 64)), 1.0, config="not a config")


def test_pdl_and_stream_are_per_call(gpu):
    cp = gpu.cupy
    x = cp.array((16, 4096))
    q, sf = cp.array((16, 2048), np.uint8), swizzled(cp, 16, 4096)
    streams = [None, FakeStream(0x1234, 0), 0x5678, FakeStream(0x9ABC, -1)]
    for i in range(8):
        pdl = bool(i % 3)
        stream = streams[i % 4]
        _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf, stream=stream, pdl=pdl)
        handle = {None: 0, 0x5678: 0x5678}.get(stream) if not isinstance(stream, FakeStream) else stream.ptr
        check_launch(launch, QuantizeConfig, x, q, sf, 1.0, handle, pdl)
    gpu.cupy.current_stream[0] = FakeStream(0x4242, 0)
    _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf)
    assert launch["stream"] == 0x4242
    assert len(plans.plans) == 1 and gpu.checked == 1


def test_tile_counter_is_the_launch_streams_when_ctas_run_several_tiles(gpu):
    cp = gpu.cupy
    x = cp.array((1024, 8192))  # 1024 tiles of 128x64 for 264 CTAs
    q, sf = cp.array((1024, 4096), np.uint8), swizzled(cp, 1024, 8192)
    for stream in (None, 0x5678, FakeStream(0x9ABC, 0), 0x5678):
        _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf, stream=stream)
        handle = stream.ptr if isinstance(stream, FakeStream) else stream or 0
        check_launch(launch, QuantizeConfig, x, q, sf, 1.0, handle, True)
        assert launch["args"]["tickets"] == 0xC0DE0000 + 8 * handle
    one_tile_each = QuantizeConfig(persistent=False)
    _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf, stream=0x5678, config=one_tile_each)
    check_launch(launch, QuantizeConfig, x, q, sf, 1.0, 0x5678, True)
    assert launch["args"]["tickets"] == 0


def test_default_stream_is_the_inputs_device(gpu):
    cp = gpu.cupy
    cp.current_stream[1] = FakeStream(0x1111, 1)
    x = cp.array((16, 256), device=1)
    for _ in range(2):
        q, sf, launch = call(gpu, x, 1.0)
        assert launch["stream"] == 0x1111
        assert q.data.device_id == 1 and sf.data.device_id == 1
        assert cp.current_device == 0  # allocating on device 1 switched back


def test_config_object_is_part_of_the_kind(gpu):
    cp = gpu.cupy
    x = cp.array((64, 1024))
    a, b = QuantizeConfig(num_stages=2), QuantizeConfig(num_stages=2)
    assert a == b and a is not b
    for cfg in (a, b, a, b, SimtConfig(), None):
        q, sf, launch = call(gpu, x, 1.0, config=cfg)
        if cfg is None:
            assert launch["config"] == tuning.choose_config(64, 1024, "sm_90a").replace(sf_layout="swizzled")
        else:
            assert launch["config"] == cfg.replace(arch="sm_90a")
        check_launch(launch, type(cfg or launch["config"]), x, q, sf, 1.0, 0, True)
    assert len(plans.plans) == 4  # a, b, SimtConfig(), None
    assert len(gpu.functions) == 3  # a and b are equal: one kernel


def test_tensor_maps_follow_the_pointers(gpu):
    cp = gpu.cupy
    m, k = 256, 1024
    x = cp.array((m, k))
    qs = [cp.array((m, k // 2), np.uint8) for _ in range(3)]
    sfs = [swizzled(cp, m, k) for _ in range(3)]
    for i, j in [(0, 0), (1, 1), (2, 2), (1, 1), (0, 0), (0, 1), (0, 2), (2, 0), (0, 0)]:
        _, _, launch = call(gpu, x, 1.0, out=qs[i], sf_out=sfs[j])
        check_launch(launch, QuantizeConfig, x, qs[i], sfs[j], 1.0, 0, True)
    assert len(gpu.encodes) == 1 + 3 * 2  # x once; each out and each sf_out once
    assert gpu.checked == 1
    # Another x with the same shape: its own map, never the first x's.
    x2 = cp.array((m, k))
    _, _, launch = call(gpu, x2, 1.0, out=qs[0], sf_out=sfs[0])
    check_launch(launch, QuantizeConfig, x2, qs[0], sfs[0], 1.0, 0, True)


def test_tensor_maps_per_launcher_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(launch_module, "MAPS_PER_LAUNCHER", 2)
    cp = gpu.cupy
    x = cp.array((128, 256))
    outs = [(cp.array((128, 128), np.uint8), swizzled(cp, 128, 256)) for _ in range(4)]
    for i in [0, 1, 2, 3, 0, 3]:
        q, sf = outs[i]
        _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf)
        check_launch(launch, QuantizeConfig, x, q, sf, 1.0, 0, True)
    (launch,) = plan_of(x).launches.values()  # every pointer 16-byte aligned: one launch
    assert len(launch._maps) == 2  # the launcher's own bounded table of maps (MAPS_PER_LAUNCHER)


def test_plans_are_bounded(gpu, monkeypatch):
    monkeypatch.setattr(plans.plans, "capacity", 3)
    cp = gpu.cupy
    xs = [cp.array((16, 64 * (i + 1))) for i in range(5)]
    for x in xs + xs:
        q, sf, launch = call(gpu, x, 1.0)
        check_launch(launch, QuantizeConfig, x, q, sf, 1.0, 0, True)
    assert len(plans.plans) == 3


def test_context_is_pushed_only_when_another_is_current(gpu):
    cp = gpu.cupy
    x = cp.array((16, 256))
    call(gpu, x, 1.0)
    call(gpu, x, 1.0)
    assert gpu.pushes == []
    gpu.current = cu.CUcontext(0x6000)
    q, sf = cp.array((16, 128), np.uint8), swizzled(cp, 16, 256)
    for _ in range(2):
        _, _, launch = call(gpu, x, 1.0, out=q, sf_out=sf)
        check_launch(launch, QuantizeConfig, x, q, sf, 1.0, 0, True)
    # New pointers: the maps are encoded in the device's context (one push), then each launch pushes.
    assert gpu.pushes == [("push", 0x5000, 0x6000), ("pop",)] * 3
    assert int(gpu.current) == 0x6000


def test_launches_from_many_threads(gpu):
    cp = gpu.cupy
    n = 8
    barrier = threading.Barrier(n)
    work = []
    for i in range(n):
        x = cp.array((16 * (1 + i % 3), 1024))
        m = x.shape[0]
        work.append((x, cp.array((m, 512), np.uint8), swizzled(cp, m, 1024), FakeStream(0x100 + i, 0)))
    errors = []

    def body(i):
        try:
            x, q, sf, stream = work[i]
            barrier.wait()
            for j in range(50):
                pdl = bool((i + j) % 2)
                _, _, _ = api.quantize_nvfp4(x, 1.0 + i, out=q, sf_out=sf, stream=stream, pdl=pdl), None, None
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(gpu.launches) == n * 50
    assert gpu.checked < n * 50
    by_stream = {}
    for launch in gpu.launches:
        by_stream.setdefault(launch["stream"], []).append(launch)
    configs_by_thread = {}
    for i in range(n):
        x, q, sf, stream = work[i]
        launches = by_stream[stream.ptr]
        assert len(launches) == 50
        for launch in launches:
            check_launch(launch, QuantizeConfig, x, q, sf, 1.0 + i, stream.ptr, launch["pdl"])
            configs_by_thread.setdefault(launch["thread"], set()).add(id(launch["launch_config"]))
    # No CUlaunchConfig object was used by two threads.
    seen = [c for configs in configs_by_thread.values() for c in configs]
    assert len(seen) == len(set(seen))


def _launcher(grid, block, smem, pdl=True):
    context = cu.CUcontext(0x5000)
    device = driver.Device(0, "Fake", (9, 0), SM_COUNT, 232448, context, int(context))
    spec = KernelSpec("k", "kernels/k.cu", "sm_90a", (), (), (), block, smem, StrideGrid(128))
    return Launcher(spec, cu.CUfunction(1), device, grid, slots=(), pdl=pdl)


def test_launcher_configs_per_thread_and_pdl(monkeypatch):
    seen = []

    def fake_launch(config, function, params, extra):
        seen.append((threading.get_ident(), id(config), config.numAttrs, int(config.hStream), config.gridDimX,
                     config.blockDimX, config.sharedMemBytes))
        return (SUCCESS,)

    monkeypatch.setattr(cu, "cuLaunchKernelEx", fake_launch)
    monkeypatch.setattr(cu, "cuCtxGetCurrent", lambda: (SUCCESS, cu.CUcontext(0x5000)))
    launcher = _launcher(7, 384, 4096)
    launcher(11, True, ())
    launcher(12, False, ())
    launcher(13, True, ())
    t = threading.Thread(target=launcher, args=(14, True, ()))
    t.start()
    t.join()
    assert [s[2:] for s in seen] == [(1, 11, 7, 384, 4096), (0, 12, 7, 384, 4096), (1, 13, 7, 384, 4096),
                                     (1, 14, 7, 384, 4096)]
    assert seen[0][1] == seen[2][1] != seen[1][1]  # one config per PDL setting, reused
    assert seen[3][1] not in (seen[0][1], seen[1][1])  # another thread, another config
    seen.clear()
    without_pdl = _launcher(7, 384, 4096, pdl=False)  # a kernel built without griddepcontrol
    without_pdl(15, True, ())
    assert seen[0][2] == 0


def test_launch_errors_name_the_call(monkeypatch):
    monkeypatch.setattr(cu, "cuLaunchKernelEx", lambda *a: (cu.CUresult.CUDA_ERROR_INVALID_VALUE,))
    monkeypatch.setattr(cu, "cuCtxGetCurrent", lambda: (SUCCESS, cu.CUcontext(0x5000)))
    monkeypatch.setattr(cu, "cuGetErrorName", lambda err: (SUCCESS, b"CUDA_ERROR_INVALID_VALUE"))
    monkeypatch.setattr(cu, "cuGetErrorString", lambda err: (SUCCESS, b"invalid argument"))
    with pytest.raises(driver.CudaError, match="cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE"):
        _launcher(1, 128, 0)(0, False, ())


def test_config_for_names_the_config_the_call_launches(vector_kernel_for_small_inputs):
    gpu = vector_kernel_for_small_inputs
    cp = gpu.cupy
    x, x_odd = cp.array((16, 4096)), cp.array((16, 4096), offset=2)
    q_odd = cp.array((16, 2048), np.uint8, offset=8)
    tsf = cp.array((), np.float32)
    calls = [(x, dict()), (x_odd, dict()), (x, dict(out=q_odd)), (x, dict(sf_layout="linear")),
             (x, dict(config=QuantizeConfig())), (x, dict(config=SimtConfig(vector=True, vector_elements=32)))]
    for x_, kwargs in calls:
        for tensor_sf in (1.0, tsf):
            want = api.config_for(x_, tensor_sf, **kwargs)
            _, _, launch = call(gpu, x_, tensor_sf, **kwargs)
            assert launch["config"] == want, (kwargs, tensor_sf)
            assert want.tensor_sf_mode == ("pointer" if tensor_sf is tsf else "value") and want.fmt == "nvfp4"
        before = len(gpu.launches)
        want = api.config_for(x_, fmt="mxfp4", mode="floor", **kwargs) if "config" not in kwargs else None
        if want is not None:
            api.quantize_mxfp4(x_, mode="floor", **kwargs)
            (launch,) = gpu.launches[before:]
            assert launch["config"] == want and (want.fmt, want.mx_mode) == ("mxfp4", "floor")
    assert api.config_for(cp.array((0, 64))) is None
    with pytest.raises(ValueError, match="fmt must be 'nvfp4' or 'mxfp4', got 'fp8'"):
        api.config_for(x, fmt="fp8")
    with pytest.raises(ValueError, match=re.escape("config.fmt is 'nvfp4', but quantize_mxfp4 quantizes to MXFP4")):
        api.config_for(x, fmt="mxfp4", config=SimtConfig())


def test_kind_of_call_fields(gpu):
    cp = gpu.cupy
    x = cp.array((4, 64))
    call(gpu, x)
    others = [
        lambda: call(gpu, cp.array((4, 64), np.float16)),
        lambda: call(gpu, cp.array((4, 64), strides=(256, 2))),
        lambda: call(gpu, cp.array((2, 2, 64))),
        lambda: call(gpu, cp.array((4, 64), device=1)),
        lambda: call(gpu, x, sf_layout="linear"),
        lambda: call(gpu, x, config=QuantizeConfig()),
        lambda: call(gpu, x, config=QuantizeConfig()),  # another object: another kind
        lambda: api.quantize_mxfp4(x),
        lambda: api.quantize_mxfp4(x, mode="floor"),
    ]
    for n, other in enumerate(others, start=2):
        other()
        assert len(plans.plans) == n
    # Neither the pointer nor the tensor_sf mode is part of the kind.
    call(gpu, cp.array((4, 64)))
    call(gpu, x, cp.array((), np.float32))
    assert len(plans.plans) == len(others) + 1


@pytest.mark.parametrize("mode", ["rceil", "floor"])
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_mxfp4_calls_launch_the_mxfp4_kernel_with_its_scale_geometry(gpu, mode, sf_layout):
    cp = gpu.cupy
    m, k = 129, 2176  # 68 groups of 32: 17 scale blocks of 4
    x = cp.array((m, k))
    for _ in range(3):  # checked path, then the plan (kept apart from NVFP4's by the format)
        before = len(gpu.launches)
        q, sf = api.quantize_mxfp4(x, mode=mode, sf_layout=sf_layout)
        (launch,) = gpu.launches[before:]
        cfg = launch["config"]
        assert (type(cfg), cfg.fmt, cfg.sf_vec_size, cfg.mx_mode, cfg.sf_layout) == (QuantizeConfig, "mxfp4", 32, mode,
                                                                                   sf_layout)
        assert q.shape == (m, k // 2)
        assert sf.shape == (swizzled_sf_shape(m, k, "mxfp4") if sf_layout == "swizzled" else (m, k // 32))
        if sf_layout == "swizzled":
            sf_map = launch["args"]["sf_out_map"]
            assert sf_map.dims == (16, 32, 17, 2) and sf_map.box == (16, 32, 1, 1)
    assert gpu.checked == 1
    # NVFP4 on the same input is another kind of call: its own checked call and plan.
    call(gpu, x, 1.0, sf_layout=sf_layout)
    assert gpu.checked == 2


def test_format_rules_are_checked(gpu):
    cp = gpu.cupy
    with pytest.raises(ValueError, match="K .* must be a multiple of 32 for quantize_mxfp4, got 48"):
        api.quantize_mxfp4(cp.array((4, 48)))
    with pytest.raises(ValueError, match="mode must be 'rceil' or 'floor', got 'ceil'"):
        api.quantize_mxfp4(cp.array((4, 64)), mode="ceil")
    with pytest.raises(ValueError, match=re.escape("config.fmt is 'mxfp4', but quantize_nvfp4 quantizes to NVFP4: "
                                                   "pass a config with fmt='nvfp4'")):
        api.quantize_nvfp4(cp.array((4, 128)), 1.0, config=QuantizeConfig(fmt="mxfp4"))
    with pytest.raises(ValueError, match=re.escape("config.fmt is 'nvfp4', but quantize_mxfp4 quantizes to MXFP4: "
                                                   "pass a config with fmt='mxfp4'")):
        api.quantize_mxfp4(cp.array((4, 128)), config=SimtConfig())
    assert gpu.launches == []


def test_put_bounded_evicts_the_oldest_first():
    table = {}
    for key in "abcde":
        launch_module.put_bounded(table, key, key.upper(), 3)
    assert list(table.items()) == [("c", "C"), ("d", "D"), ("e", "E")]
    launch_module.put_bounded(table, "d", "new", 3)  # a key already there is replaced in place
    assert list(table.items()) == [("c", "C"), ("d", "new"), ("e", "E")]


# ------------------------------------------------------------------------------------- dequantize, global scale
@pytest.mark.parametrize("m, k, tma", [(4096, 512, True), (4096, 512, False), (16, 256, False), (64, 80, False)])
def test_dequantize_launches(gpu, m, k, tma):
    # Without a config, aligned buffers take the vector kernel at any size; the TMA kernel runs when passed.
    from fp4q.kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
    from fp4q.ops.api import dequantize_nvfp4

    cp = gpu.cupy
    q = cp.array((m, k // 2), np.uint8)
    sf = swizzled(cp, m, k)
    tsf = cp.array((), np.float32)
    config = DequantizeConfig() if tma else None
    for _ in range(2):
        before = len(gpu.launches)
        y = dequantize_nvfp4(q, sf, tsf, dtype="float32", config=config)
        (launch,) = gpu.launches[before:]
        assert y.shape == (m, k) and y.dtype == np.float32
        args = dict(sf=sf.data.ptr, out=y.data.ptr, tensor_sf_value=0.0, tensor_sf_ptr=tsf.data.ptr, rows=m, cols=k)
        if tma:
            cfg = DequantizeConfig(out_dtype="float32", tensor_sf_mode="pointer")
            tiles = math.ceil(m / cfg.tile_m) * math.ceil(k / cfg.tile_k)
            grid = min(tiles, SM_COUNT * CTAS_PER_SM)
            args.update(q_map=TensorMapSpec(q.data.ptr, 1, (k // 2, m), (k // 2,), (cfg.tile_k // 2, cfg.tile_m),
                                            l2_promotion=256),
                        tickets=FakeDriver.counter_for(None, None, 0) if grid < tiles else 0)
            assert launch["spec"] == cfg.spec
        else:
            # aligned, contiguous q and out: the vector form
            cfg = DequantizeSimtConfig(out_dtype="float32", tensor_sf_mode="pointer", vector=True)
            grid = max(1, min(math.ceil(m * k // cfg.unit / cfg.threads), SM_COUNT * CTAS_PER_SM * 4))
            args.update(q=q.data.ptr, q_row_stride=k // 2, **dict(unit_divisor(k // 4)))  # 4 float32 per store
            assert launch["spec"] == cfg.spec
        assert launch["args"] == args and launch["grid"] == (grid, 1, 1) and launch["pdl"]
    assert len(plans.plans) == 1


def test_dequantize_takes_tma_from_vector_max_elements(gpu):
    from fp4q.kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
    from fp4q.ops.api import dequantize_nvfp4
    from fp4q.ops.dequantize import VECTOR_MAX_ELEMENTS

    cp = gpu.cupy
    k = 8192
    for m, expected in ((VECTOR_MAX_ELEMENTS // k - 1, DequantizeSimtConfig(vector=True)),
                        (VECTOR_MAX_ELEMENTS // k, DequantizeConfig())):
        before = len(gpu.launches)
        dequantize_nvfp4(cp.array((m, k // 2), np.uint8), swizzled(cp, m, k), 1.0)
        (launch,) = gpu.launches[before:]
        assert launch["spec"] == expected.spec


def test_dequantize_pointers_pick_the_plain_or_the_vector_kernel(gpu):
    from fp4q.kernels.dequantize import DequantizeSimtConfig
    from fp4q.ops.api import dequantize_nvfp4

    cp = gpu.cupy
    m, k = 16, 256
    sf = swizzled(cp, m, k)
    aligned = cp.array((m, k // 2), np.uint8)
    shifted = FakeArray((m, k // 2), np.uint8, aligned.data.ptr + 4096 + 4)  # 4-byte but not 16-byte aligned
    kinds = []
    for q in (aligned, shifted, aligned):
        before = len(gpu.launches)
        dequantize_nvfp4(q, sf, 1.0)
        (launch,) = gpu.launches[before:]
        kinds.append(launch["spec"] == DequantizeSimtConfig(vector=True).spec)
    # Without a config, a pointer that the vector kernel could serve but that is not 16-byte aligned
    # takes the plain kernel.
    assert kinds == [True, False, True]
    with pytest.raises(ValueError, match="config is a vector DequantizeSimtConfig, but it cannot serve this call: "
                                         "q's base address 0x[0-9a-f]+ is not 4-byte aligned"):
        dequantize_nvfp4(FakeArray((m, k // 2), np.uint8, aligned.data.ptr + 4096 + 2), sf, 1.0,
                         config=DequantizeSimtConfig(vector=True))


def test_a_launch_is_reused_only_for_pointers_of_the_same_alignment(gpu):
    from fp4q.kernels.dequantize import DequantizeSimtConfig
    from fp4q.ops.api import dequantize_nvfp4

    cp = gpu.cupy
    m, k = 16, 256
    sf = swizzled(cp, m, k)
    q_base, y_base = cp.array((m, k // 2), np.uint8).data.ptr + 4096, cp.array((m, k), np.uint16).data.ptr + 4096
    cfg = DequantizeSimtConfig(vector=True)
    y = FakeArray((m, k), np.uint16, y_base)
    # The first call's q is 4-byte but not 16-byte aligned: the vector kernel serves it; later calls
    # of the same plan whose q or out it cannot serve must be refused, not given the kernel again.
    dequantize_nvfp4(FakeArray((m, k // 2), np.uint8, q_base + 4), sf, 1.0, out=y, config=cfg)
    with pytest.raises(ValueError, match="q's base address 0x[0-9a-f]+ is not 4-byte aligned"):
        dequantize_nvfp4(FakeArray((m, k // 2), np.uint8, q_base + 2), sf, 1.0, out=y, config=cfg)
    with pytest.raises(ValueError, match="out's base address 0x[0-9a-f]+ is not 16-byte aligned"):
        dequantize_nvfp4(FakeArray((m, k // 2), np.uint8, q_base), sf, 1.0, config=cfg,
                         out=FakeArray((m, k), np.uint16, y_base + 8))
    before = len(gpu.launches)
    dequantize_nvfp4(FakeArray((m, k // 2), np.uint8, q_base + 4 + 64), sf, 1.0, out=y, config=cfg)
    assert [launch["spec"] for launch in gpu.launches[before:]] == [cfg.spec]


def test_a_misaligned_device_tensor_sf_is_refused(gpu):
    from fp4q.ops.api import dequantize_nvfp4

    cp = gpu.cupy
    m, k = 16, 256
    tsf = FakeArray((), np.float32, cp.array((2,), np.float32).data.ptr + 2)
    before = len(gpu.launches)
    for call in (lambda: api.quantize_nvfp4(cp.array((m, k)), tsf),
                 lambda: dequantize_nvfp4(cp.array((m, k // 2), np.uint8), swizzled(cp, m, k), tsf)):
        with pytest.raises(ValueError, match=r"a device tensor_sf must be 4-byte aligned \(the kernel loads it as "
                                             r"a float32\), got address 0x[0-9a-f]+2\b"):
            call()
    assert len(gpu.launches) == before


def test_buffers_at_an_address_that_splits_an_element_are_refused(gpu):
    from fp4q.ops.api import dequantize_nvfp4, global_scale

    cp = gpu.cupy
    m, k = 16, 256
    odd_x = FakeArray((m, k), np.uint16, cp.array((m + 1, k)).data.ptr + 1)
    before = len(gpu.launches)
    for call in (lambda: api.quantize_nvfp4(odd_x, 1.0), lambda: api.quantize_mxfp4(odd_x),
                 lambda: global_scale(odd_x)):
        with pytest.raises(ValueError, match=r"x's base address 0x[0-9a-f]+ is not a multiple of its element size "
                                             r"\(2 bytes\)"):
            call()
    q, sf = cp.array((m, k // 2), np.uint8), swizzled(cp, m, k)
    for dtype, size in (("bfloat16", 2), ("float32", 4)):
        out = FakeArray((m, k), np.uint16 if size == 2 else np.float32, cp.array((m + 1, k), np.float32).data.ptr + 2)
        if size == 2:  # 2-byte aligned: fine for bf16 values (the plain kernel)
            dequantize_nvfp4(q, sf, 1.0, dtype=dtype, out=out)
            continue
        with pytest.raises(ValueError, match=r"out's base address 0x[0-9a-f]+ is not a multiple of its element size "
                                             rf"\({size} bytes\)"):
            dequantize_nvfp4(q, sf, 1.0, dtype=dtype, out=out)
    assert len(gpu.launches) == before + 1


def test_inputs_beyond_32_bit_indices_are_refused(gpu):
    from fp4q.ops.api import dequantize_nvfp4, global_scale

    cp = gpu.cupy
    base = cp.array((1, 16)).data.ptr  # never read: the rules refuse the call first
    before = len(gpu.launches)
    for call, what in ((lambda: api.quantize_nvfp4(FakeArray((2**31 + 16,), np.uint16, base), 1.0), "K (the last "
                        "dimension of x) must be at most 2147483647, got 2147483664"),
                       (lambda: global_scale(FakeArray((2**31 + 16,), np.uint16, base)), "K (the last dimension of "
                        "x) must be at most 2147483647, got 2147483664"),
                       (lambda: dequantize_nvfp4(FakeArray((1, 2**30), np.uint8, base), swizzled(cp, 1, 2**31), 1.0),
                        "K (2 * the last dimension of q) must be at most 2147483647, got 2147483648"),
                       (lambda: api.quantize_mxfp4(FakeArray((2**31, 32), np.uint16, base)), "x has 2147483648 rows; "
                        "at most 2147483647 are supported")):
        with pytest.raises(ValueError, match=re.escape(what)):
            call()
    assert len(gpu.launches) == before


def test_dequantize_rules_after_a_plan_exists(gpu):
    from fp4q.ops.api import dequantize_mxfp4, dequantize_nvfp4

    cp = gpu.cupy
    q, sf = cp.array((16, 128), np.uint8), swizzled(cp, 16, 256)
    dequantize_nvfp4(q, sf, 1.0)
    for bad, exc_type, message in [
        (dict(sf=cp.array((16, 16), np.uint8)), ValueError, r"sf must have shape \(1, 4, 32, 4, 4\)"),
        (dict(tensor_sf=0.0), ValueError, "tensor_sf must be a float32 in"),
        (dict(out=cp.array((16, 256), np.float32)), TypeError, "out must have dtype uint16 or bfloat16, got float32"),
        (dict(out=FakeArray((16, 256), np.uint16, q.data.ptr)), ValueError, "out overlaps q"),
        (dict(pdl=None), TypeError, "pdl must be a bool"),
        (dict(config="x"), TypeError, "config must be None, a DequantizeConfig or a DequantizeSimtConfig"),
        (dict(sf_layout="rows"), ValueError, "sf_layout must be one of 'swizzled', 'linear', '8x4', got 'rows'"),
        (dict(dtype="float16"), ValueError, "dtype must be 'bfloat16' or 'float32', got 'float16'"),
        (dict(q=cp.array((16, 64), np.uint16)), TypeError, "q must hold uint8 bytes .*got dtype uint16"),
    ]:
        kwargs = dict(q=q, sf=sf, tensor_sf=1.0)
        kwargs.update(bad)
        with pytest.raises(exc_type, match=message):
            dequantize_nvfp4(kwargs.pop("q"), kwargs.pop("sf"), kwargs.pop("tensor_sf"), **kwargs)
    with pytest.raises(ValueError, match=r"K \(2 \* the last dimension of q\) must be a multiple of 32 for "
                                         r"dequantize_mxfp4, got 48"):
        dequantize_mxfp4(cp.array((4, 24), np.uint8), cp.array((4, 1), np.uint8), sf_layout="linear")
    assert len(gpu.launches) == 1


def test_global_scale_rules_first_and_after_a_plan_exists(gpu):
    from fp4q.ops.api import global_scale

    cp = gpu.cupy
    x = cp.array((4, 16))
    bad_calls = [
        (lambda: global_scale(cp.array((4, 16), np.float32)), TypeError, "x must hold bfloat16 or float16 values"),
        (lambda: global_scale(x, pdl=None), TypeError, "pdl must be a bool, got None"),
        (lambda: global_scale(x, stream=[0]), TypeError, "stream must be a cupy.cuda.Stream"),
        (lambda: api.quantize_nvfp4(x, "auto"), ValueError,
         "tensor_sf must be a float, a device float32 scalar, a device float32 array of one value per row, 'dynamic' or 'dynamic_per_row', got 'auto'"),
    ]
    for stored in (False, True):
        if stored:
            global_scale(x)
        before = len(gpu.launches)
        for call, exc_type, message in bad_calls:
            with pytest.raises(exc_type, match=message):
                call()
        assert len(gpu.launches) == before


@pytest.mark.parametrize("offset, vector", [(0, True), (2, False)])
def test_global_scale_launches_two_kernels_into_one_buffer(gpu, offset, vector):
    from fp4q.kernels.global_scale import AmaxConfig
    from fp4q.ops.api import global_scale

    cp = gpu.cupy
    x = cp.array((64, 1024), offset=offset)
    for _ in range(2):
        before = len(gpu.launches)
        scale = global_scale(x)
        amax, reduce = gpu.launches[before:]
        buffer = cp.allocations[-1]
        partials = min(math.ceil(64 * 1024 // (8 if vector else 1) / (512 * 4)), SM_COUNT * CTAS_PER_SM)
        assert amax["spec"] == AmaxConfig(vector_loads=vector).spec and amax["grid"] == (partials, 1, 1)
        assert amax["args"] == dict(x=x.data.ptr, x_row_stride=1024, rows=64, cols=1024, partial=buffer.data.ptr + 4)
        assert reduce["grid"] == (1, 1, 1)
        assert reduce["args"] == dict(partial=buffer.data.ptr + 4, count=partials, scale=buffer.data.ptr)
        assert buffer.shape == (1 + partials,) and scale.shape == () and scale.data.ptr == buffer.data.ptr


# ----------------------------------------------------------------------------- tensor_sf="dynamic", one launch
def _dynamic_call(gpu, x, **kwargs):
    before = len(gpu.launches)
    q, sf, scale = api.quantize_nvfp4(x, "dynamic", **kwargs)
    return q, sf, scale, [launch["spec"].name for launch in gpu.launches[before:]], gpu.launches[before:]


@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_dynamic_takes_one_launch_with_the_streams_counter(gpu, sf_layout):
    cp = gpu.cupy
    x = cp.array((100, 7168))
    for _ in range(2):
        q, sf, scale, names, launches = _dynamic_call(gpu, x, sf_layout=sf_layout)
        assert names == ["fp4q_quantize_fp4_dynamic"]
        args = launches[0]["args"]
        per_row = 7168 // 16  # a multiple of 4 groups: no padding groups
        assert args == dict(x=x.data.ptr, x_row_stride=7168, out=q.data.ptr, sf_out=sf.data.ptr,
                            tensor_sf_out=scale.data.ptr, rows=100, cols=7168, out_cols=7168,
                            tickets=FakeDriver.counter_for(None, None, 0), **dict(unit_divisor(per_row)))
        assert scale.shape == () and scale.dtype == np.float32
        units = FusedDynamicConfig(sf_layout=sf_layout).work_items(100, 7168)
        threads = tuning.fused_dynamic_threads(units, SM_COUNT)
        assert launches[0]["spec"].threads == threads and threads > 128
        # One wave: every CTA resident at once, as the grid barrier needs.
        assert launches[0]["grid"][0] == min(math.ceil(units / threads), SM_COUNT * CTAS_PER_SM)


@pytest.mark.parametrize("capturing", [False, True])
def test_a_small_dynamic_input_takes_one_cta_and_no_counter(gpu, monkeypatch, capturing):
    if capturing:  # a stream being captured has no counter; one CTA needs none
        monkeypatch.setattr(launch_module, "counter_for", lambda dev, stream: 0)
    x = gpu.cupy.array((2, 4096))
    q, sf, scale, names, launches = _dynamic_call(gpu, x)
    assert names == ["fp4q_quantize_fp4_dynamic"]
    assert launches[0]["grid"][0] == 1 and launches[0]["spec"].threads == 1024
    assert launches[0]["args"]["tickets"] == 0 and launches[0]["args"]["rows"] == 2
    # One unit more than one CTA takes: the grid barrier, on the stream's counter (two passes without one).
    rows = tuning.FUSED_ONE_CTA_MAX_UNITS // 256 + 1
    _, _, _, names, launches = _dynamic_call(gpu, gpu.cupy.array((rows, 4096)))
    if capturing:
        assert names[:2] == ["fp4q_amax", "fp4q_global_scale"] and len(names) == 3
    else:
        assert names == ["fp4q_quantize_fp4_dynamic"] and launches[0]["grid"][0] > 1
        assert launches[0]["args"]["tickets"] == FakeDriver.counter_for(None, None, 0)


def test_dynamic_takes_two_passes_where_one_launch_cannot_serve(gpu, monkeypatch):
    cp = gpu.cupy
    expected = ["fp4q_amax", "fp4q_global_scale"]
    # An explicit config, a misaligned input, a stream being captured (no counter).
    _, _, scale, names, launches = _dynamic_call(gpu, cp.array((16, 4096)), config=SimtConfig(vector=True))
    assert names == expected + ["fp4q_quantize_fp4_vector"]
    # The quantize kernel reads the scale the second pass wrote, by pointer.
    assert launches[2]["args"]["tensor_sf_ptr"] == scale.data.ptr and launches[2]["spec"].name.endswith("vector")
    assert dict(launches[2]["spec"].flags)["FP4Q_TENSOR_SF_BY_POINTER"]
    _, _, _, names, _ = _dynamic_call(gpu, cp.array((16, 4096), offset=2))
    assert names[:2] == ["fp4q_amax", "fp4q_global_scale"] and names[2] == "fp4q_quantize_fp4_simt"
    monkeypatch.setattr(launch_module, "counter_for", lambda dev, stream: 0)
    _, _, _, names, _ = _dynamic_call(gpu, cp.array((32, 4096)))
    assert names[:2] == expected and len(names) == 3


def test_the_dynamic_scale_holds_partial_maxima_only_where_two_passes_write_them(gpu, monkeypatch):
    """One launch returns a scalar of its own; two passes put the amax pass's partial
    maxima after the scale, in the same allocation, so that they live as long as it."""
    cp = gpu.cupy
    _, _, scale, names, _ = _dynamic_call(gpu, cp.array((32, 4096)))
    assert names == ["fp4q_quantize_fp4_dynamic"]
    assert cp.allocations[-1] is scale and scale.shape == () and scale.nbytes == 4
    monkeypatch.setattr(launch_module, "counter_for", lambda dev, stream: 0)  # captured: no counter
    _, _, scale, names, launches = _dynamic_call(gpu, cp.array((32, 4096)))
    assert names[:2] == ["fp4q_amax", "fp4q_global_scale"] and scale.shape == ()
    buffer = cp.allocations[-1]
    partials = launches[0]["grid"][0]
    assert buffer.shape == (1 + partials,) and buffer.data.ptr == scale.data.ptr
    assert launches[0]["args"]["partial"] == scale.data.ptr + 4 and launches[1]["args"]["count"] == partials


def test_dynamic_with_a_config_the_call_refuses_launches_nothing(gpu):
    """The config's rules run before the two passes' global_scale is launched."""
    cp = gpu.cupy
    x = cp.array((16, 48))  # K % 32 != 0: neither the TMA kernel nor 32-element units can serve it
    for config in (QuantizeConfig(), SimtConfig(vector=True, vector_elements=32)):
        with pytest.raises(ValueError, match="not a multiple of 32"):
            api.quantize_nvfp4(x, "dynamic", config=config)
    assert gpu.launches == []


def test_dynamic_above_the_fused_limit_takes_two_passes(gpu, monkeypatch):
    monkeypatch.setattr(quantize_ops, "FUSED_DYNAMIC_MAX_ELEMENTS", 16 * 4096 - 1)
    cp = gpu.cupy
    _, _, _, names, _ = _dynamic_call(gpu, cp.array((16, 4096)))
    assert names[:2] == ["fp4q_amax", "fp4q_global_scale"] and len(names) == 3
    _, _, _, names, _ = _dynamic_call(gpu, cp.array((15, 4096)))
    assert names == ["fp4q_quantize_fp4_dynamic"]
