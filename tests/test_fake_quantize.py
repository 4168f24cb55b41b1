"""fake_quantize_nvfp4: dequantize(quantize(x)) in x's dtype, in one kernel, with every option of
the training quantizer (NVFP4_SPEC.md, "Fake quantization", "Combinations").

On the GPU: byte for byte against fp4q.reference.fake_quantize_nvfp4 for every option and every
combination the spec allows, both input dtypes, every tensor-scale mode ("dynamic" too, its scale
that of the transformed values and 1536 / amax under 4/6), seeds and offsets past
2**63, edge-case groups (NaN, Inf, zeros, subnormals, saturating scales), strided, 1-D and 3-D x,
reused buffers, empty x. On any machine (the fakes): the rules and their messages, and the launch
(the kernel's flags, the seed, offset and sign mask as launch values)."""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.kernels.fake_quantize import FakeQuantizeConfig
from fp4q.numerics import reference
from fp4q.numerics.training import dynamic_tensor_sf

import fakes
from helpers import assert_bytes_equal, edge_groups, mixed_groups

try:  # at collection: torch 2.11 failed to initialize when first imported inside a test in a pytest-xdist worker
    import torch as _torch_module
except ModuleNotFoundError:
    _torch_module = None

gpu = pytest.mark.gpu
TE_MASK = reference.TE_WGRAD_SIGN_MASK
# (block_2d, hadamard): every pair the spec allows
LAYOUTS = [(False, None), (False, TE_MASK), (False, 0xFFFF), (True, None)]
BIG_SEED, BIG_OFFSET = (1 << 64) - 3, (1 << 63) + 12345


def input_of(m: int, k: int, rng, dtype=np.uint16) -> np.ndarray:
    """Mixed groups (normal, edge families, tiny) with the edge rows first."""
    x = mixed_groups((m, k), rng)
    edges = edge_groups(k)
    x[: min(m, len(edges))] = edges[: min(m, len(edges))]
    if dtype == np.float16:
        bits = x.astype(np.uint32) << 16
        with np.errstate(over="ignore"):
            return bits.view(np.float32).astype(np.float16)
    return x


def check(cp, x_host, tensor_sf, *, x=None, **options):
    """The op on the device against the reference, byte for byte; returns the output."""
    got = fp4q.fake_quantize_nvfp4(cp.asarray(x_host) if x is None else x, tensor_sf, **options)
    options.pop("out", None)
    scale = np.float32(tensor_sf.get() if hasattr(tensor_sf, "get") else tensor_sf)
    want = reference.fake_quantize_nvfp4(x_host, scale, **options)
    cp.cuda.get_current_stream().synchronize()
    assert got.dtype == x_host.dtype and got.shape == x_host.shape
    assert_bytes_equal(cp.asnumpy(got), want, f"fake_quantize_nvfp4 {options}")
    return got


@gpu
@pytest.mark.parametrize("block_2d, hadamard", LAYOUTS)
@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("four_over_six", [False, True])
@pytest.mark.parametrize("dtype", [np.uint16, np.float16])
def test_every_combination_bit_exact(block_2d, hadamard, stochastic, four_over_six, dtype):
    import cupy as cp

    rng = np.random.default_rng(1)
    x = input_of(64, 1024, rng, dtype)
    tensor_sf = 1536 / 8.0 if four_over_six else 2688 / 8.0
    options = dict(block_2d=block_2d, hadamard=hadamard, stochastic=stochastic, four_over_six=four_over_six)
    check(cp, x, tensor_sf, seed=BIG_SEED, offset=BIG_OFFSET, **options)
    check(cp, x, cp.asarray(np.float32(0.37)), seed=7, offset=1, **options)  # a device scalar


@gpu
@pytest.mark.parametrize("block_2d, hadamard", LAYOUTS)
@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("four_over_six", [False, True])
@pytest.mark.parametrize("m, k", [(64, 1024), (2048, 4096)])
def test_dynamic_scale_bit_exact(block_2d, hadamard, stochastic, four_over_six, m, k):
    import cupy as cp

    x = input_of(m, k, np.random.default_rng(m))
    x[-1, -16:] = 0x7FC0  # a NaN group: the amax ignores it
    options = dict(block_2d=block_2d, hadamard=hadamard, stochastic=stochastic, four_over_six=four_over_six, seed=3,
                   offset=4)
    y, scale = fp4q.fake_quantize_nvfp4(cp.asarray(x), "dynamic", **options)
    values = (x.astype(np.uint32) << 16).view(np.float32)
    if hadamard is not None:
        values = reference.hadamard16(values, hadamard)
    want_scale = dynamic_tensor_sf(values, four_over_six)
    assert scale.shape == () and scale.dtype == np.float32 and scale.get() == want_scale
    assert_bytes_equal(cp.asnumpy(y), reference.fake_quantize_nvfp4(x, "dynamic", **options), "dynamic")
    assert_bytes_equal(cp.asnumpy(y), reference.fake_quantize_nvfp4(x, want_scale, **options), "with its scale")


@gpu
def test_dynamic_scale_of_zeros_and_empty_input():
    import cupy as cp

    y, scale = fp4q.fake_quantize_nvfp4(cp.zeros((16, 64), cp.uint16), "dynamic", four_over_six=True)
    assert scale.get() == 1.0 and not cp.asnumpy(y).any()
    y, scale = fp4q.fake_quantize_nvfp4(cp.zeros((0, 64), cp.uint16), "dynamic")
    assert y.shape == (0, 64) and scale.get() == 1.0


@gpu
@pytest.mark.parametrize("m, k", [(16, 16), (32, 4096), (256, 272), (1024, 8192)])
@pytest.mark.parametrize("block_2d", [False, True])
def test_shapes(m, k, block_2d):
    import cupy as cp

    rng = np.random.default_rng(m + k)
    check(cp, input_of(m, k, rng), 100.0, block_2d=block_2d, stochastic=True, four_over_six=True, seed=m, offset=k)


@gpu
def test_scales_across_the_e4m3_range():
    import cupy as cp

    rng = np.random.default_rng(2)
    x = input_of(32, 512, rng)
    for tensor_sf in (2.0**-126, 1e-20, 1.0, 448.0, 3e5, 2.0**100):
        for block_2d, hadamard in LAYOUTS:
            check(cp, x, tensor_sf, block_2d=block_2d, hadamard=hadamard, four_over_six=True)


@gpu
def test_offsets_draw_new_bits_and_seeds_repeat():
    import cupy as cp

    x = input_of(32, 256, np.random.default_rng(3))
    a = check(cp, x, 50.0, stochastic=True, seed=1, offset=0)
    b = check(cp, x, 50.0, stochastic=True, seed=1, offset=1)
    c = check(cp, x, 50.0, stochastic=True, seed=1, offset=0)
    assert (cp.asnumpy(a) != cp.asnumpy(b)).any() and (cp.asnumpy(a) == cp.asnumpy(c)).all()


@gpu
def test_strided_1d_3d_x_reused_buffers_and_empty():
    import cupy as cp

    rng = np.random.default_rng(4)
    x_host = input_of(48, 256, rng)
    wide = cp.zeros((48, 264), cp.uint16)
    wide[:, :256] = cp.asarray(x_host)
    check(cp, x_host, 3.0, x=wide[:, :256], stochastic=True, hadamard=TE_MASK)
    check(cp, x_host, 3.0, x=wide[:, :256], block_2d=True)
    check(cp, x_host[7], 3.0, four_over_six=True)
    check(cp, x_host.reshape(3, 16, 256), 3.0, block_2d=True, stochastic=True)
    out = cp.full((48, 256), 0xEEEE, cp.uint16)
    got = check(cp, x_host, 3.0, out=out, four_over_six=True)
    assert got is out
    # element loads and stores: x and out 2 bytes past a 16-byte boundary
    flat = cp.zeros(48 * 256 + 8, cp.uint16)
    flat[1:48 * 256 + 1] = cp.asarray(x_host.reshape(-1))
    shifted = flat[1:48 * 256 + 1].reshape(48, 256)
    out = cp.zeros(48 * 256 + 8, cp.uint16)[1:48 * 256 + 1].reshape(48, 256)
    for options in (dict(stochastic=True, hadamard=TE_MASK), dict(block_2d=True, four_over_six=True)):
        check(cp, x_host, 3.0, x=shifted, out=out, **options)
        y, scale = fp4q.fake_quantize_nvfp4(shifted, "dynamic", **options)
        assert_bytes_equal(cp.asnumpy(y), reference.fake_quantize_nvfp4(x_host, "dynamic", **options), "dynamic")
    empty = fp4q.fake_quantize_nvfp4(cp.zeros((0, 64), cp.uint16), 1.0)
    assert empty.shape == (0, 64) and empty.dtype == cp.uint16


# ---------------------------------------------------------------- on any machine
def test_rules(cp):
    x = cp.asarray(np.zeros((24, 64), np.uint16))
    with pytest.raises(ValueError, match=r"^block_2d=True needs M \(x's rows, leading dimensions flattened\) to be "
                                         r"a multiple of 16, got M=24$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, block_2d=True)
    x32 = cp.asarray(np.zeros((32, 64), np.uint16))
    with pytest.raises(ValueError, match=r"^hadamard=55272 cannot be combined with block_2d=True: the transform "
                                         r"mixes the values of a group along K, which 16x16 blocks do not follow$"):
        fp4q.fake_quantize_nvfp4(x32, 1.0, block_2d=True, hadamard=TE_MASK)
    with pytest.raises(ValueError, match=r"^hadamard must satisfy 0 <= hadamard < 2\*\*16, got 65536$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, hadamard=1 << 16)
    with pytest.raises(TypeError, match=r"^hadamard must be an int or None, got 1.5 \(float\)$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, hadamard=1.5)
    with pytest.raises(ValueError, match=r"^seed must satisfy 0 <= seed < 2\*\*64, got -1$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, stochastic=True, seed=-1)
    with pytest.raises(ValueError, match=r"^offset must satisfy 0 <= offset < 2\*\*64, got 18446744073709551616$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, stochastic=True, offset=1 << 64)
    with pytest.raises(TypeError, match=r"^seed must be an int, got True of type bool$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, seed=True)
    with pytest.raises(TypeError, match=r"^stochastic must be a bool \(True or False\), got 1 \(int\)$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, stochastic=1)
    with pytest.raises(ValueError, match=r"^tensor_sf must be a float, a device float32 scalar or 'dynamic', got "
                                         r"'dynamic_per_row'$"):
        fp4q.fake_quantize_nvfp4(x, "dynamic_per_row")
    with pytest.raises(ValueError, match=r"^K \(the last dimension of x\) must be a multiple of 16 for "
                                         r"fake_quantize_nvfp4, got 40$"):
        fp4q.fake_quantize_nvfp4(cp.asarray(np.zeros((4, 40), np.uint16)), 1.0)
    with pytest.raises(TypeError, match=r"^out must have dtype float16, got uint16$"):
        fp4q.fake_quantize_nvfp4(cp.asarray(np.zeros((4, 64), np.float16)), 1.0, out=x[:4])
    with pytest.raises(ValueError, match=r"^out must have shape \(24, 64\), got \(24, 32\)$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, out=cp.asarray(np.zeros((24, 32), np.uint16)))
    with pytest.raises(TypeError, match=r"^config must be None or a FakeQuantizeConfig, got SimtConfig$"):
        fp4q.fake_quantize_nvfp4(x, 1.0, config=fp4q.SimtConfig())
    if fakes.active is not None:
        assert fakes.active.launches == []


def test_config_rules():
    with pytest.raises(fp4q.ConfigError, match=r"^fake quantization is NVFP4's, got fmt='mxfp4'$"):
        FakeQuantizeConfig(fmt="mxfp4")
    with pytest.raises(fp4q.ConfigError, match=r"^threads must be 128 or 256, got 64$"):
        FakeQuantizeConfig(threads=64)
    with pytest.raises(fp4q.ConfigError, match=r"^stochastic must be a bool, got 1$"):
        FakeQuantizeConfig(stochastic=1)


FLAGS = ("FP4Q_BLOCK_2D", "FP4Q_STOCHASTIC", "FP4Q_HADAMARD", "FP4Q_FOUR_OVER_SIX")


@pytest.mark.parametrize("block_2d, hadamard", LAYOUTS)
@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("four_over_six", [False, True])
def test_the_launch(cp, block_2d, hadamard, stochastic, four_over_six):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((64, 256), np.uint16))
    y = fp4q.fake_quantize_nvfp4(x, 2.0, block_2d=block_2d, hadamard=hadamard, stochastic=stochastic,
                                 seed=BIG_SEED, offset=BIG_OFFSET, four_over_six=four_over_six)
    assert y.shape == (64, 256) and y.dtype == np.uint16
    launch = fakes.active.launches[-1]
    flags = dict(launch["spec"].flags)
    assert [flags[f] for f in FLAGS] == [block_2d, stochastic, hadamard is not None, four_over_six]
    args = launch["args"]
    # the kernel's u64 parameters: every value of the 64-bit unsigned range
    assert args["seed"] == BIG_SEED and args["offset"] == BIG_OFFSET
    assert args["hadamard"] == (hadamard or 0) and args["tensor_sf_value"] == 2.0
    assert (args["rows"], args["cols"], args["x_row_stride"], args["x"], args["out"]) == (
        64, 256, 256, x.data.ptr, y.data.ptr)


@pytest.mark.parametrize("hadamard", [None, TE_MASK])
@pytest.mark.parametrize("four_over_six", [False, True])
def test_the_dynamic_passes(cp, hadamard, four_over_six):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launches")
    x = cp.asarray(np.zeros((64, 256), np.uint16))
    y, scale = fp4q.fake_quantize_nvfp4(x, "dynamic", hadamard=hadamard, four_over_six=four_over_six, seed=9)
    assert y.shape == (64, 256) and scale.shape == ()
    amax, scale_pass, fake = fakes.active.launches[-3:]
    flags = dict(amax["spec"].flags)
    assert flags["FP4Q_AMAX_PASS"] and flags["FP4Q_HADAMARD"] == (hadamard is not None)
    assert not (flags["FP4Q_FOUR_OVER_SIX"] or flags["FP4Q_STOCHASTIC"] or flags["FP4Q_BLOCK_2D"])
    assert amax["args"]["x"] == x.data.ptr and amax["args"]["hadamard"] == (hadamard or 0)
    partial = amax["args"]["partial"]
    assert partial == scale.data.ptr + 4 and scale_pass["args"]["partial"] == partial
    assert scale_pass["args"]["count"] == amax["grid"][0] and scale_pass["grid"] == (1, 1, 1)
    assert dict(scale_pass["spec"].flags)["FP4Q_FOUR_OVER_SIX"] == four_over_six
    assert scale_pass["args"]["scale"] == scale.data.ptr
    flags = dict(fake["spec"].flags)
    assert flags["FP4Q_TENSOR_SF_BY_POINTER"] and not flags["FP4Q_AMAX_PASS"]
    assert flags["FP4Q_FOUR_OVER_SIX"] == four_over_six and flags["FP4Q_HADAMARD"] == (hadamard is not None)
    assert (fake["args"]["tensor_sf_ptr"], fake["args"]["out"], fake["args"]["seed"]) == (scale.data.ptr, y.data.ptr, 9)


def test_vector_loads_where_the_pointers_allow(cp):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launches")
    base = cp.asarray(np.zeros(32 * 64 + 8, np.uint16))
    aligned, shifted = base[:32 * 64].reshape(32, 64), base[1:32 * 64 + 1].reshape(32, 64)
    fp4q.fake_quantize_nvfp4(aligned, 1.0)
    assert dict(fakes.active.launches[-1]["spec"].flags)["FP4Q_VECTOR"]
    for x, out in ((shifted, None), (aligned, cp.asarray(np.zeros(32 * 64 + 8, np.uint16))[1:32 * 64 + 1].reshape(32, 64))):
        fp4q.fake_quantize_nvfp4(x, 1.0, out=out)
        assert not dict(fakes.active.launches[-1]["spec"].flags)["FP4Q_VECTOR"]
    fp4q.fake_quantize_nvfp4(shifted, "dynamic", hadamard=TE_MASK)
    assert not any(dict(launch["spec"].flags).get("FP4Q_VECTOR", False) for launch in fakes.active.launches[-3:])
    with pytest.raises(ValueError, match=r"^config is a vector FakeQuantizeConfig, but it cannot serve this call: "
                                         r"x's base address 0x[0-9a-f]+ is not 16-byte aligned$"):
        fp4q.fake_quantize_nvfp4(shifted, 1.0, config=FakeQuantizeConfig(vector=True))


def test_fp16_output_and_the_device_scale(cp):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((2, 3, 32), np.float16))
    scale = cp.asarray(np.ones((), np.float32))
    y = fp4q.fake_quantize_nvfp4(x, scale)
    assert y.shape == (2, 3, 32) and y.dtype == np.float16
    launch = fakes.active.launches[-1]
    flags = dict(launch["spec"].flags)
    assert flags["FP4Q_INPUT_FP16"] and flags["FP4Q_TENSOR_SF_BY_POINTER"]
    assert launch["args"]["tensor_sf_ptr"] == scale.data.ptr


# ---------------------------------------------------------------- torch: the straight-through gradient
def _torch():
    if _torch_module is None:
        pytest.skip("torch is not installed")
    return _torch_module


def host_bits(t) -> np.ndarray:
    """A CPU or CUDA bf16 / fp16 tensor's values as the reference takes them (bf16 bits as uint16)."""
    torch = _torch()
    t = t.detach().cpu()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def reference_forward(x, tensor_sf, **options):
    """fp4q.torch.fake_quantize_nvfp4 computed by the reference on the host (the fake forward)."""
    torch = _torch()
    scale = float(tensor_sf) if not isinstance(tensor_sf, torch.Tensor) else float(tensor_sf.item())
    y = reference.fake_quantize_nvfp4(host_bits(x), np.float32(scale), **options)
    out = torch.from_numpy(y.view(np.int16)).view(torch.bfloat16) if x.dtype == torch.bfloat16 else torch.from_numpy(y)
    return out.to(x.device)


def saturating_input(torch, block_2d: bool):
    """bf16 (32, 64): normal values, and in group (0, 1) (block (0, 1) with block_2d) one value so large
    that with tensor_sf=1 the scale saturates at 448 and values above 6 * 448 clip."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((32, 64)).astype(np.float32) * 50
    x[0, 16:32] = np.linspace(-4000, 4000, 16)
    x[0, 20] = 20000.0
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def clipped_by_scale(x_bits: np.ndarray, block_2d: bool) -> np.ndarray:
    """Where |x| > 6 d, d the element's group's multiplier from the reference's scale bytes
    (tensor_sf = 1, so d is the e4m3 value and 6 d is exact in bf16)."""
    q = reference.quantize_nvfp4_training(x_bits, np.float32(1), columnwise=False, block_2d=block_2d,
                                          sf_layout="linear")
    d = reference.e4m3_decode(q.sf).astype(np.float32)
    xf = np.abs((x_bits.astype(np.uint32) << 16).view(np.float32))
    return xf > 6 * np.repeat(d, 16, axis=-1)


@pytest.mark.parametrize("block_2d", [False, True])
@pytest.mark.parametrize("mask_saturated", [False, True])
def test_ste_gradient_on_the_host_with_the_reference_forward(monkeypatch, block_2d, mask_saturated):
    torch = _torch()
    import fp4q.torch as ft

    monkeypatch.setattr(ft, "fake_quantize_nvfp4", reference_forward)
    x = saturating_input(torch, block_2d).requires_grad_()
    y = ft.fake_quantize_nvfp4_ste(x, 1.0, block_2d=block_2d, mask_saturated=mask_saturated)
    assert_bytes_equal(host_bits(y), reference.fake_quantize_nvfp4(host_bits(x), np.float32(1), block_2d=block_2d),
                       "forward")
    grad = torch.arange(x.numel(), dtype=torch.float32).reshape(x.shape).to(torch.bfloat16) + 1
    y.backward(grad)
    clipped = clipped_by_scale(host_bits(x), block_2d)
    # the values above 6 * 448 clip, the others in their group do not; elsewhere a group's largest value
    # clips where its scale byte rounded down
    assert clipped[0, 20] and 6 <= clipped[0, 16:32].sum() < 16 and 0 < clipped.sum() < clipped.size // 16
    want = grad.clone()
    if mask_saturated:
        want[torch.from_numpy(clipped)] = 0
    assert torch.equal(x.grad, want)


def test_ste_mask_is_the_groups_largest_output():
    torch = _torch()
    from fp4q.torch.qat import saturated

    x = torch.tensor([[1.0] * 15 + [5.0]] * 16, dtype=torch.bfloat16)
    y = torch.tensor([[1.0] * 15 + [4.0]] * 16, dtype=torch.bfloat16)
    assert saturated(x, y, False)[:, 15].all() and saturated(x, y, False).sum() == 16
    y[3, 0] = 6.0  # a larger output elsewhere in the 16x16 block: nothing clipped there
    assert saturated(x, y, True).sum() == 0
    assert saturated(x, y, False).sum() == 15
    x[5, 2] = float("nan")
    assert not saturated(x, y, False)[5, 2]


def test_ste_rules():
    torch = _torch()
    import fp4q.torch as ft

    x = torch.zeros((16, 64), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^mask_saturated=True cannot be combined with hadamard=55272: the "
                                         r"transform mixes the values of a group, so no input value saturates on "
                                         r"its own$"):
        ft.fake_quantize_nvfp4_ste(x, 1.0, hadamard=TE_MASK, mask_saturated=True)
    with pytest.raises(TypeError, match=r"^mask_saturated must be a bool, got 1 \(int\)$"):
        ft.fake_quantize_nvfp4_ste(x, 1.0, mask_saturated=1)
    with pytest.raises(TypeError, match=r"^x must be a bfloat16 or float16 tensor \(its gradient flows back\), "
                                        r"got torch.int16$"):
        ft.fake_quantize_nvfp4_ste(x.view(torch.int16), 1.0)


def above_group_outputs(x_bits: np.ndarray, y_bits: np.ndarray, block_2d: bool) -> np.ndarray:
    """Where |x| is larger than every |y| of its scale group (bf16 bits, (M, K))."""
    ax = np.abs((x_bits.astype(np.uint32) << 16).view(np.float32))
    ay = np.abs((y_bits.astype(np.uint32) << 16).view(np.float32))
    m, k = ay.shape
    if block_2d:
        top = np.fmax.reduce(ay.reshape(m // 16, 16, k // 16, 16), axis=(1, 3), initial=np.float32(0))
        top = np.repeat(np.repeat(top, 16, axis=0), 16, axis=1)
    else:
        top = np.repeat(np.fmax.reduce(ay.reshape(m, k // 16, 16), axis=-1, initial=np.float32(0)), 16, axis=1)
    return ax > top


@gpu
@pytest.mark.parametrize("block_2d, hadamard", LAYOUTS)
@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("four_over_six", [False, True])
@pytest.mark.parametrize("mask_saturated", [False, True])
def test_ste_on_the_device(block_2d, hadamard, stochastic, four_over_six, mask_saturated):
    torch = _torch()
    import fp4q.torch as ft

    if mask_saturated and hadamard is not None:
        pytest.skip("refused (test_ste_rules)")
    x = saturating_input(torch, block_2d).cuda().requires_grad_()
    options = dict(block_2d=block_2d, hadamard=hadamard, stochastic=stochastic, seed=5, offset=6,
                   four_over_six=four_over_six)
    y = ft.fake_quantize_nvfp4_ste(x, 1.0, mask_saturated=mask_saturated, **options)
    want_y = reference.fake_quantize_nvfp4(host_bits(x), np.float32(1), **options)
    assert_bytes_equal(host_bits(y), want_y, "forward")
    grad = torch.full_like(y, 3.0)
    y.backward(grad)
    want = grad.clone()
    if mask_saturated:
        masked = above_group_outputs(host_bits(x), want_y, block_2d)
        if not (stochastic or four_over_six):  # then exactly the e2m1 clamp, |x| > 6 d
            np.testing.assert_array_equal(masked, clipped_by_scale(host_bits(x), block_2d))
        want[torch.from_numpy(masked).cuda()] = 0
    assert torch.equal(x.grad, want)


def qat_loss(x, w, t):
    """A QAT layer's forward: the weight in 16x16 blocks, the input in groups."""
    import fp4q.torch as ft

    xq = ft.fake_quantize_nvfp4_ste(x, t, four_over_six=True)
    wq = ft.fake_quantize_nvfp4_ste(w, t, block_2d=True, mask_saturated=True)
    return (xq @ wq.t()).float().square().mean()


@gpu
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_ste_compiles_fullgraph_with_its_backward(backend):
    torch = _torch()

    rng = np.random.default_rng(9)
    make = lambda shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16).cuda()  # noqa: E731
    x, w = make((64, 256)), make((128, 256))
    t = torch.tensor(100.0, device="cuda")
    grads = []
    # The compiled forward is one graph; its backward is the graph AOTAutograd derives from it.
    for run in (qat_loss, torch.compile(qat_loss, backend=backend, fullgraph=True)):
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        run(xs, ws, t).backward()
        grads.append((xs.grad, ws.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


@gpu
def test_cuda_graph_capture_and_replay():
    torch = _torch()
    import fp4q.torch as ft

    a = input_of(64, 512, np.random.default_rng(10))
    b = input_of(64, 512, np.random.default_rng(11))
    x = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
    t = torch.tensor(30.0, device="cuda")

    def body():
        return (ft.fake_quantize_nvfp4(x, 0.5, stochastic=True, seed=1, offset=2, hadamard=TE_MASK),
                ft.fake_quantize_nvfp4(x, t, block_2d=True, four_over_six=True))

    for _ in range(2):  # compile, load and plan outside the capture
        body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = body()
    for bits, scale in ((b, 7.0), (a, 30.0)):
        x.copy_(torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).cuda())
        t.fill_(scale)
        graph.replay()
        torch.cuda.synchronize()
        want = (reference.fake_quantize_nvfp4(bits, np.float32(0.5), stochastic=True, seed=1, offset=2, hadamard=TE_MASK),
                reference.fake_quantize_nvfp4(bits, np.float32(scale), block_2d=True, four_over_six=True))
        for got, w in zip(outs, want):
            assert_bytes_equal(host_bits(got), w, "replay")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "uint16"])
@pytest.mark.parametrize("shape", [(32, 64), (2, 16, 48), (64,)])
def test_torch_fakes(dtype, shape):
    """The registered ops on fake CUDA tensors: x's shape and dtype out, the dynamic scale a float32
    scalar after it, the rules on fake tensors as on real ones."""
    torch = _torch()
    import fp4q.torch as ft
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
        y = ft.fake_quantize_nvfp4(x, torch.empty((), device="cuda"), stochastic=True, hadamard=TE_MASK)
        y2, scale = ft.fake_quantize_nvfp4(x, "dynamic", four_over_six=True, out=torch.empty_like(x))
        assert (y.shape, y.dtype, y2.shape, y2.dtype) == (x.shape, x.dtype, x.shape, x.dtype)
        assert (scale.shape, scale.dtype) == ((), torch.float32)
        rows = x.numel() // shape[-1]
        if rows % 16:
            with pytest.raises(ValueError, match=rf"^block_2d=True needs M .* got M={rows}$"):
                ft.fake_quantize_nvfp4(x, 1.0, block_2d=True)
        else:
            assert ft.fake_quantize_nvfp4(x, 1.0, block_2d=True, four_over_six=True).shape == x.shape
            with pytest.raises(ValueError, match=r"^hadamard=55272 cannot be combined with block_2d=True"):
                ft.fake_quantize_nvfp4(x, 1.0, block_2d=True, hadamard=TE_MASK)


def test_benchmark_arguments_and_table():
    from scripts.bench import bench_fake_quantize as bench

    assert bench.shapes("16x32,4096x53248") == [(16, 32), (4096, 53248)]
    with pytest.raises(Exception, match=r"multiples of 16, got '15x32'"):
        bench.shapes("15x32")
    row = dict(option="4over6", m=4096, k=4096, fake_us=30.0, copy_us=25.0, fake_over_copy=1.2)
    assert bench.table([row]).splitlines()[-1] == "| 4over6 | 4096x4096 | 30.0 | 25.0 | 1.20 |"
    assert set(bench.OPTIONS) == {"plain", "2d", "sr", "rht", "4over6", "dynamic"}
