"""quantize_nvfp4_training: NVFP4 rowwise and columnwise from one read of x, with 16x16 blocks,
stochastic rounding, the columnwise Hadamard transform and 4/6.

On the GPU: byte for byte against fp4q.reference.quantize_nvfp4_training (q, sf, q_t, sf_t and
the tensor scales), for every direction, block shape, scale layout and tensor-scale mode, both
input dtypes, shapes that are and are not multiples of the 128x128 tile (16 rows, odd tile
counts, rowwise-only M of any size), groups of every edge family of the spec along rows and
along columns, strided x, reused buffers full of garbage; with block_2d, q_t is q transposed;
the Hadamard transform under TE's mask, 0 and 0xFFFF, 4/6 of groups and 16x16 blocks, each
with stochastic rounding and with both, under given and "dynamic" scales.
On any machine (the fakes): the rules of the spec's "Combinations" and of the buffers, and the
launches (the kernel's directions and options, the sign mask, both scales, the dynamic scale's
chain, 4/6's scale pass); that the data of the GPU tests makes the options change the bytes."""

from __future__ import annotations


import numpy as np
import pytest

import fp4q
from fp4q.kernels.global_scale import GlobalScaleConfig
from fp4q.kernels.training import HadamardAmaxConfig, TrainingConfig
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal, mixed_groups, random_bf16

gpu = pytest.mark.gpu
TE_MASK = reference.TE_WGRAD_SIGN_MASK
MASKS = [TE_MASK, 0, 0xFFFF]


def x_of(m: int, k: int, rng, along: str = "rows", dtype=np.uint16) -> np.ndarray:
    """x (m, k) whose groups along ``along`` ("rows" or "columns") mix normal data, tiny data and
    every edge family of the spec (NaN, Inf, zeros, subnormals, saturating scales)."""
    if along == "rows":
        bits = mixed_groups((m, k), rng)
    else:
        bits = np.ascontiguousarray(mixed_groups((k, m), rng).T)
    if dtype == np.float16:
        with np.errstate(over="ignore", invalid="ignore"):
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float16)
    return bits


def check(cp, x_host, tensor_sf, *, x=None, buffers=None, **options):
    """The op on the device against the reference: every output and the scales each direction used."""
    x = cp.asarray(x_host) if x is None else x
    got = fp4q.quantize_nvfp4_training(x, tensor_sf, **options, **(buffers or {}))
    ref_options = dict(options)
    for name in ("tensor_sf", "columnwise_tensor_sf"):
        value = tensor_sf if name == "tensor_sf" else options.get(name)
        if hasattr(value, "get"):
            value = np.float32(value.get())
        if name == "tensor_sf":
            ref_scale = value
        elif name in options:
            ref_options[name] = value
    want = reference.quantize_nvfp4_training(x_host, ref_scale, **ref_options)
    cp.cuda.get_current_stream().synchronize()
    what = f"{x_host.shape} {x_host.dtype} tensor_sf={tensor_sf!r} {options}"
    for field in ("q", "sf", "q_t", "sf_t"):
        g, w = getattr(got, field), getattr(want, field)
        assert (g is None) == (w is None), f"{field} {what}"
        if w is not None:
            assert_bytes_equal(cp.asnumpy(g), w, f"{field} {what}")
    for field in ("tensor_sf", "tensor_sf_t"):
        g, w = getattr(got, field), getattr(want, field)
        assert (g is None) == (w is None), f"{field} {what}"
        if w is not None:
            assert_bytes_equal(np.float32(cp.asnumpy(g) if hasattr(g, "shape") else g), w, f"{field} {what}")
    return got


# (M, K): one tile, whole tiles, partial tiles both ways (odd tile counts), 16 rows, one group wide.
SHAPES = [(128, 128), (256, 384), (16, 16), (48, 80), (144, 272), (400, 1040), (16, 4096), (2064, 208)]
DIRECTIONS = [dict(), dict(columnwise=False), dict(rowwise=False)]


@gpu
@pytest.mark.parametrize("m, k", SHAPES)
@pytest.mark.parametrize("along", ["rows", "columns"])
@pytest.mark.parametrize("block_2d", [False, True])
def test_bit_exact(m, k, along, block_2d):
    import cupy as cp

    rng = np.random.default_rng(m * 7 + k + block_2d)
    x = x_of(m, k, rng, along)
    for directions in DIRECTIONS:
        for layout in ("swizzled", "linear", "8x4"):
            check(cp, x, 3.0, block_2d=block_2d, sf_layout=layout, **directions)
        check(cp, x, 3.0, block_2d=block_2d, stochastic=True, seed=m, offset=k, **directions)


@gpu
@pytest.mark.parametrize("block_2d", [False, True])
def test_tensor_scale_modes(block_2d):
    import cupy as cp

    rng = np.random.default_rng(11 + block_2d)
    x = x_of(272, 400, rng, "columns")
    device = cp.asarray(np.float32(0.25)).reshape(())
    for tensor_sf in (1.0, 2.0**-20, device, "dynamic"):
        for directions in DIRECTIONS:
            check(cp, x, tensor_sf, block_2d=block_2d, **directions)
    if not block_2d:
        for columnwise_tensor_sf in (7.0, device, "dynamic"):
            for tensor_sf in (0.5, "dynamic"):
                check(cp, x, tensor_sf, columnwise_tensor_sf=columnwise_tensor_sf)


@gpu
@pytest.mark.parametrize("block_2d", [False, True])
def test_stochastic_rounding(block_2d):
    import cupy as cp

    rng = np.random.default_rng(12 + block_2d)
    x = x_of(400, 272, rng, "columns")
    for seed, offset in ((0, 0), (2**64 - 1, 2**63 + 5), (0x1234_5678_9ABC_DEF0, 2**32 - 1)):
        for tensor_sf in (1.0, "dynamic"):
            check(cp, x, tensor_sf, block_2d=block_2d, stochastic=True, seed=seed, offset=offset)
        check(cp, x, 0.25, block_2d=block_2d, stochastic=True, seed=seed, offset=offset, rowwise=False,
              sf_layout="linear")
    # Deterministic in (seed, offset); another offset draws other bits.
    first = fp4q.quantize_nvfp4_training(cp.asarray(x), 1.0, block_2d=block_2d, stochastic=True, seed=7, offset=1)
    again = fp4q.quantize_nvfp4_training(cp.asarray(x), 1.0, block_2d=block_2d, stochastic=True, seed=7, offset=1)
    other = fp4q.quantize_nvfp4_training(cp.asarray(x), 1.0, block_2d=block_2d, stochastic=True, seed=7, offset=2)
    assert_bytes_equal(cp.asnumpy(again.q_t), cp.asnumpy(first.q_t), "the same (seed, offset)")
    assert (cp.asnumpy(other.q) != cp.asnumpy(first.q)).any() and (cp.asnumpy(other.q_t) != cp.asnumpy(first.q_t)).any()


@gpu
def test_dynamic_scale_of_zeros_and_nans():
    import cupy as cp

    for value in (0, 0x7FC0, 0x7F80):
        x = np.full((32, 64), value, np.uint16)
        got = check(cp, x, "dynamic")
        assert got.tensor_sf is got.tensor_sf_t


@gpu
def test_fp16():
    import cupy as cp

    rng = np.random.default_rng(3)
    for along in ("rows", "columns"):
        x = x_of(160, 336, rng, along, np.float16)
        check(cp, x, 5.0)
        check(cp, x, "dynamic", block_2d=True)


@gpu
def test_rowwise_any_m_and_leading_dimensions():
    import cupy as cp

    rng = np.random.default_rng(4)
    for m in (1, 5, 127, 129, 300):
        check(cp, x_of(m, 208, rng), 1.5, columnwise=False)
    x = x_of(3 * 48, 96, rng).reshape(3, 48, 96)
    for directions in DIRECTIONS:
        check(cp, x, 1.5, **directions)


@gpu
def test_block_2d_columnwise_is_rowwise_transposed():
    import cupy as cp

    rng = np.random.default_rng(5)
    x = x_of(400, 272, rng)
    got = fp4q.quantize_nvfp4_training(cp.asarray(x), 2.0, block_2d=True, sf_layout="linear")
    q, q_t = cp.asnumpy(got.q), cp.asnumpy(got.q_t)
    codes = np.stack([q & 15, q >> 4], axis=-1).reshape(400, 272)
    codes_t = np.stack([q_t & 15, q_t >> 4], axis=-1).reshape(272, 400)
    assert_bytes_equal(codes_t, codes.T, "q_t against q transposed")
    sf, sf_t = cp.asnumpy(got.sf), cp.asnumpy(got.sf_t)
    assert_bytes_equal(sf_t, np.repeat(sf[::16].T, 16, axis=0), "sf_t against the blocks of sf")


@gpu
def test_strided_x_and_reused_buffers():
    import cupy as cp

    rng = np.random.default_rng(6)
    m, k = 272, 208
    wide = x_of(m, k + 48, rng)
    x = cp.asarray(wide)[:, :k]
    want = reference.quantize_nvfp4_training(np.ascontiguousarray(wide[:, :k]), 2.0)
    buffers = {name: cp.full(getattr(want, field).shape, 0xFF, cp.uint8)
               for name, field in (("out", "q"), ("sf_out", "sf"), ("out_t", "q_t"), ("sf_t_out", "sf_t"))}
    for _ in range(2):
        got = check(cp, np.ascontiguousarray(wide[:, :k]), 2.0, x=x, buffers=buffers)
        assert got.q is buffers["out"] and got.sf_t is buffers["sf_t_out"]


@gpu
def test_large_tensor():
    import cupy as cp

    rng = np.random.default_rng(7)
    x = random_bf16((4096, 4096), rng, specials=1e-4)
    check(cp, x, "dynamic")
    check(cp, x, 1.0, block_2d=True)


# (rowwise, columnwise) of the directions the Hadamard transform takes: a columnwise one.
COLUMNWISE_DIRECTIONS = [dict(), dict(rowwise=False)]


@gpu
@pytest.mark.parametrize("m, k", [(128, 128), (48, 80), (400, 1040), (2064, 208)])
@pytest.mark.parametrize("along", ["rows", "columns"])
@pytest.mark.parametrize("mask", MASKS)
def test_hadamard_bit_exact(m, k, along, mask):
    import cupy as cp

    rng = np.random.default_rng(m + k + mask)
    x = x_of(m, k, rng, along)
    for directions in COLUMNWISE_DIRECTIONS:
        for layout in ("swizzled", "linear", "8x4"):
            check(cp, x, 3.0, hadamard=mask, sf_layout=layout, **directions)
        check(cp, x, 3.0, hadamard=mask, stochastic=True, seed=m, offset=k, **directions)
    check(cp, x, 0.5, columnwise_tensor_sf=2.0**-20, hadamard=mask)


@gpu
@pytest.mark.parametrize("m, k", [(128, 128), (48, 80), (400, 1040), (2064, 208)])
@pytest.mark.parametrize("along", ["rows", "columns"])
@pytest.mark.parametrize("block_2d", [False, True])
def test_four_over_six_bit_exact(m, k, along, block_2d):
    import cupy as cp

    rng = np.random.default_rng(m * 3 + k + block_2d)
    x = x_of(m, k, rng, along)
    for directions in DIRECTIONS:
        for tensor_sf in (3.0, 1536 / 8.0):  # scales in the e4m3 range, where either candidate wins
            check(cp, x, tensor_sf, block_2d=block_2d, four_over_six=True, **directions)
        check(cp, x, 3.0, block_2d=block_2d, four_over_six=True, sf_layout="linear", **directions)
        check(cp, x, 3.0, block_2d=block_2d, four_over_six=True, stochastic=True, seed=2**64 - 1, offset=m,
              **directions)


@gpu
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("stochastic", [False, True])
def test_hadamard_with_four_over_six_bit_exact(mask, stochastic):
    import cupy as cp

    rng = np.random.default_rng(21 + mask)
    for along in ("rows", "columns"):
        x = x_of(272, 400, rng, along)
        for directions in COLUMNWISE_DIRECTIONS:
            check(cp, x, 3.0, hadamard=mask, four_over_six=True, stochastic=stochastic, seed=5, offset=2**63 + 1,
                  **directions)
    x = x_of(160, 336, rng, "columns", np.float16)
    check(cp, x, 3.0, hadamard=mask, four_over_six=True, stochastic=stochastic, seed=6, offset=7)


@gpu
@pytest.mark.parametrize("block_2d", [False, True])
@pytest.mark.parametrize("stochastic", [False, True])
def test_options_fp16(block_2d, stochastic):
    import cupy as cp

    rng = np.random.default_rng(13 + 2 * block_2d + stochastic)
    x = x_of(160, 336, rng, "columns", np.float16)
    check(cp, x, 5.0, block_2d=block_2d, four_over_six=True, stochastic=stochastic, seed=1, offset=2)
    if not block_2d:
        check(cp, x, 5.0, hadamard=TE_MASK, stochastic=stochastic, seed=1, offset=2)


@gpu
@pytest.mark.parametrize("stochastic", [False, True])
def test_options_with_dynamic_and_device_scales(stochastic):
    import cupy as cp

    rng = np.random.default_rng(14 + stochastic)
    x = x_of(272, 400, rng, "columns")
    device = cp.asarray(np.float32(0.25)).reshape(())
    common = dict(stochastic=stochastic, seed=9, offset=10)
    # 4/6: one dynamic scale, 1536 / amax, for every dynamic direction.
    for block_2d in (False, True):
        for directions in DIRECTIONS:
            for tensor_sf in ("dynamic", device):
                check(cp, x, tensor_sf, block_2d=block_2d, four_over_six=True, **directions, **common)
    for tensor_sf, columnwise_tensor_sf in (("dynamic", "dynamic"), (0.5, "dynamic"), ("dynamic", 7.0),
                                            ("dynamic", device)):
        got = check(cp, x, tensor_sf, columnwise_tensor_sf=columnwise_tensor_sf, four_over_six=True, **common)
        assert (got.tensor_sf is got.tensor_sf_t) == (isinstance(columnwise_tensor_sf, str) and tensor_sf == "dynamic")
    # The Hadamard transform: a dynamic rowwise scale beside a given columnwise one.
    for columnwise_tensor_sf in (7.0, device):
        for four_over_six in (False, True):
            check(cp, x, "dynamic", columnwise_tensor_sf=columnwise_tensor_sf, hadamard=TE_MASK,
                  four_over_six=four_over_six, **common)
    check(cp, x, device, columnwise_tensor_sf=device, hadamard=TE_MASK, **common)


@gpu
@pytest.mark.parametrize("m, k", [(16, 16), (272, 400), (2064, 208), (4096, 4096)])
@pytest.mark.parametrize("four_over_six", [False, True])
def test_dynamic_columnwise_scale_after_hadamard(m, k, four_over_six):
    # The post-RHT amax: the columnwise scale over the transformed groups, the rowwise one over x,
    # both directions and either alone; the other scale given by value or on the device.
    import cupy as cp

    rng = np.random.default_rng(16 + four_over_six)
    x = random_bf16((m, k), rng, scale=3.0)
    x[rng.random((m, k)) < 0.01] = 0x7FC0  # NaN, dropped from both maxima
    device = cp.asarray(np.float32(0.25)).reshape(())
    common = dict(hadamard=TE_MASK, four_over_six=four_over_six)
    got = check(cp, x, "dynamic", **common)
    assert float(got.tensor_sf_t) != float(got.tensor_sf)  # finite maxima, and the transform changes x's
    check(cp, x_of(m, k, rng, "columns"), "dynamic", **common)  # the spec's edge families (Inf: scales of 1.0)
    check(cp, x, "dynamic", rowwise=False, **common)
    check(cp, x, "dynamic", columnwise_tensor_sf="dynamic", stochastic=True, seed=4, offset=5, **common)
    for tensor_sf in (0.5, device):
        check(cp, x, tensor_sf, columnwise_tensor_sf="dynamic", **common)
        check(cp, x, tensor_sf, columnwise_tensor_sf="dynamic", rowwise=False, **common)


@gpu
def test_dynamic_columnwise_scale_after_hadamard_edges():
    # Zeros, NaN and +-Inf in every group (an amax of 0 or Inf: scale 1.0; NaN dropped), fp16, a
    # strided x and an empty one.
    import cupy as cp

    for value in (0, 0x7FC0, 0x7F80, 0xFF80):
        check(cp, np.full((32, 64), value, np.uint16), "dynamic", hadamard=TE_MASK)
    rng = np.random.default_rng(17)
    check(cp, x_of(144, 272, rng, "columns", np.float16), "dynamic", hadamard=0xFFFF)
    wide = x_of(144, 400, rng, "columns")
    x = cp.asarray(wide)[:, :272]
    check(cp, np.ascontiguousarray(wide[:, :272]), "dynamic", x=x, hadamard=TE_MASK)
    empty = fp4q.quantize_nvfp4_training(cp.zeros((0, 64), cp.uint16), "dynamic", hadamard=TE_MASK)
    assert float(empty.tensor_sf) == float(empty.tensor_sf_t) == 1.0


@gpu
def test_options_on_large_and_edge_tensors():
    import cupy as cp

    rng = np.random.default_rng(15)
    x = random_bf16((2048, 4096), rng, specials=1e-4)
    check(cp, x, "dynamic", columnwise_tensor_sf=2.0, hadamard=TE_MASK, four_over_six=True, stochastic=True, seed=1,
          offset=2)
    check(cp, x, "dynamic", block_2d=True, four_over_six=True)
    for value in (0, 0x7FC0, 0x7F80, 0xFF80):  # zeros, NaN, +-Inf in every group
        x = np.full((32, 64), value, np.uint16)
        check(cp, x, 1.0, hadamard=TE_MASK, four_over_six=True)
        check(cp, x, "dynamic", block_2d=True, four_over_six=True)
    x = x_of(300, 208, rng)  # rowwise alone: any M
    check(cp, x, 1.5, columnwise=False, four_over_six=True, stochastic=True, seed=3, offset=4)


# ------------------------------------------------------------------- rules (any machine)

def zeros(cp, shape, dtype=np.uint16):
    return cp.asarray(np.zeros(shape, dtype))


@pytest.mark.parametrize("options, message", [
    (dict(rowwise=False, columnwise=False),
     r"^rowwise and columnwise are both False: at least one direction must be asked for$"),
    (dict(rowwise=1), r"^rowwise must be a bool \(True or False\), got 1 \(int\)$"),
    (dict(block_2d=np.bool_(True)), r"^block_2d must be a bool \(True or False\), got np.True_ \(bool\)$"),
    (dict(sf_layout="tiled"), r"^sf_layout must be one of 'swizzled', 'linear', '8x4', got 'tiled'$"),
    (dict(stochastic=1), r"^stochastic must be a bool \(True or False\), got 1 \(int\)$"),
    (dict(stochastic=True, seed=-1), r"^seed must satisfy 0 <= seed < 2\*\*64, got -1$"),
    (dict(offset=2**64), r"^offset must satisfy 0 <= offset < 2\*\*64, got 18446744073709551616$"),
    (dict(seed=1.5), r"^seed must be an int, got 1.5 of type float$"),
    (dict(hadamard=1 << 16), r"^hadamard must satisfy 0 <= hadamard < 2\*\*16, got 65536$"),
    (dict(hadamard=-1), r"^hadamard must satisfy 0 <= hadamard < 2\*\*16, got -1$"),
    (dict(hadamard=1.5), r"^hadamard must be an int or None, got 1.5 \(float\)$"),
    (dict(hadamard=True), r"^hadamard must be an int or None, got True \(bool\)$"),
    (dict(four_over_six=1), r"^four_over_six must be a bool \(True or False\), got 1 \(int\)$"),
    (dict(hadamard=TE_MASK, columnwise=False),
     r"^hadamard=55272 needs columnwise=True: the transform applies to the columnwise direction only$"),
    (dict(hadamard=0, block_2d=True),
     r"^hadamard=0 cannot be combined with block_2d=True: the transform would make the columnwise output differ "
     r"from the transposed rowwise one that 2D blocks guarantee$"),
])
def test_option_rules(cp, options, message):
    with pytest.raises((TypeError, ValueError), match=message):
        fp4q.quantize_nvfp4_training(zeros(cp, (32, 64)), 1.0, **options)
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("options", [dict(hadamard=TE_MASK, columnwise=False), dict(hadamard=0, block_2d=True),
                                     dict(hadamard=0xFFFF, block_2d=True, rowwise=False)])
def test_hadamard_rules_are_the_references(cp, options):
    # The op and the reference refuse the same combinations with the same words.
    with pytest.raises(ValueError) as want:
        reference.quantize_nvfp4_training(np.zeros((32, 64), np.uint16), 1.0, **options)
    with pytest.raises(ValueError) as got:
        fp4q.quantize_nvfp4_training(zeros(cp, (32, 64)), 1.0, **options)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("tensor_sf, columnwise_tensor_sf, rowwise, rowwise_dynamic", [
    ("dynamic", None, True, True),
    ("dynamic", None, False, False),
    (0.5, "dynamic", True, False),
    ("dynamic", "dynamic", True, True),
])
@pytest.mark.parametrize("four_over_six", [False, True])
def test_the_dynamic_columnwise_scale_after_hadamard_launched(cp, tensor_sf, columnwise_tensor_sf, rowwise,
                                                             rowwise_dynamic, four_over_six):
    # One pass over x for the post-RHT amax (and x's, where the rowwise scale is dynamic and written),
    # a scale pass per scale; the quantizer reads the columnwise scale from the allocation's second
    # element and the rowwise one from its first.
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (64, 256))
    before = len(fakes.active.launches)
    got = fp4q.quantize_nvfp4_training(x, tensor_sf, columnwise_tensor_sf=columnwise_tensor_sf, rowwise=rowwise,
                                       hadamard=TE_MASK, four_over_six=four_over_six)
    amax, *scales, quantize = fakes.active.launches[before:]
    assert amax["spec"] == HadamardAmaxConfig().spec
    assert [s["spec"] for s in scales] == [GlobalScaleConfig(four_over_six=four_over_six).spec] * (1 + rowwise_dynamic)
    args = amax["args"]
    count = amax["grid"][0]
    assert (args["x"], args["hadamard"], args["rows"], args["cols"]) == (x.data.ptr, TE_MASK, 64, 256)
    assert args["unit_magic"] * 255 >> args["unit_shift"] == 255 // 128  # divides by the column pairs per row
    base = scales[0]["args"]["scale"] - 4
    assert args["partial"] == base + 8 and scales[0]["args"]["partial"] == base + 8
    assert all(s["args"]["count"] == count for s in scales)
    if rowwise_dynamic:
        assert args["partial_x"] == base + 8 + 4 * count == scales[1]["args"]["partial"]
        assert scales[1]["args"]["scale"] == base
    else:
        assert args["partial_x"] == 0
    assert quantize["args"]["columnwise_tensor_sf_ptr"] == base + 4
    assert quantize["args"]["tensor_sf_ptr"] == (base if rowwise_dynamic else 0)
    assert got.tensor_sf_t.data.ptr == base + 4 and got.tensor_sf_t.shape == ()
    if rowwise_dynamic:
        assert got.tensor_sf.data.ptr == base and got.tensor_sf.shape == ()
    elif rowwise:
        assert got.tensor_sf == np.float32(tensor_sf) and isinstance(got.tensor_sf, np.float32)
    else:
        assert got.tensor_sf is None


def test_m_rules(cp):
    x = zeros(cp, (40, 64))
    for option in ("columnwise", "block_2d"):
        with pytest.raises(ValueError, match=rf"^{option}=True needs M \(x's rows, leading dimensions flattened\) "
                                             rf"to be a multiple of 16, got M=40$"):
            fp4q.quantize_nvfp4_training(x, 1.0, columnwise=option == "columnwise", block_2d=option == "block_2d")
    with pytest.raises(ValueError, match=r"^K \(the last dimension of x\) must be a multiple of 16 for "
                                         r"quantize_nvfp4_training, got 40$"):
        fp4q.quantize_nvfp4_training(zeros(cp, (32, 40)), 1.0)
    got = fp4q.quantize_nvfp4_training(x, 1.0, columnwise=False)
    assert got.q.shape == (40, 32) and got.q_t is None and got.sf_t is None and got.tensor_sf_t is None


def test_scale_rules(cp):
    x = zeros(cp, (32, 64))
    with pytest.raises(ValueError, match=r"^columnwise_tensor_sf cannot be combined with block_2d=True: both "
                                         r"directions share the 2D blocks' scales and tensor_sf$"):
        fp4q.quantize_nvfp4_training(x, 1.0, columnwise_tensor_sf=2.0, block_2d=True)
    with pytest.raises(ValueError, match=r"^columnwise_tensor_sf must be None \(tensor_sf's\), a float, a device "
                                         r"float32 scalar or 'dynamic', got 'dynamic_per_row'$"):
        fp4q.quantize_nvfp4_training(x, 1.0, columnwise_tensor_sf="dynamic_per_row")
    with pytest.raises(ValueError, match=r"^columnwise_tensor_sf must be a float32 in \[2\*\*-126, 2\*\*100\]"):
        fp4q.quantize_nvfp4_training(x, 1.0, columnwise_tensor_sf=0.0)
    with pytest.raises(ValueError, match=r"^a device columnwise_tensor_sf must be a float32 array of shape \(\) or "
                                         r"\(1,\), got dtype float32 shape \(2,\)"):
        fp4q.quantize_nvfp4_training(x, 1.0, columnwise_tensor_sf=cp.asarray(np.ones(2, np.float32)))
    with pytest.raises(ValueError, match=r"^tensor_sf must be a float, a device float32 scalar or 'dynamic', got "
                                         r"'dynamic_per_row'$"):
        fp4q.quantize_nvfp4_training(x, "dynamic_per_row")
    if fakes.active is not None:
        assert fakes.active.launches == []


def test_buffer_rules(cp):
    x = zeros(cp, (32, 64))
    with pytest.raises(ValueError, match=r"^out_t was given, but quantize_nvfp4_training writes it only with "
                                         r"columnwise=True, and columnwise is False$"):
        fp4q.quantize_nvfp4_training(x, 1.0, columnwise=False, out_t=zeros(cp, (64, 16), np.uint8))
    with pytest.raises(ValueError, match=r"^sf_out was given, but quantize_nvfp4_training writes it only with "
                                         r"rowwise=True, and rowwise is False$"):
        fp4q.quantize_nvfp4_training(x, 1.0, rowwise=False, sf_out=zeros(cp, (1, 1, 32, 4, 4), np.uint8))
    with pytest.raises(ValueError, match=r"^out_t must have shape \(64, 16\), got \(16, 64\)$"):
        fp4q.quantize_nvfp4_training(x, 1.0, out_t=zeros(cp, (16, 64), np.uint8))
    with pytest.raises(ValueError, match=r"^sf_t_out must have shape \(64, 2\), got \(32, 4\)$"):
        fp4q.quantize_nvfp4_training(x, 1.0, sf_layout="linear", sf_t_out=zeros(cp, (32, 4), np.uint8))
    with pytest.raises(ValueError, match=r"^quantize_nvfp4_training loads and stores 16 bytes at a time: x's row "
                                         r"stride of 136 bytes is not a multiple of 16$"):
        fp4q.quantize_nvfp4_training(zeros(cp, (32, 68))[:, :64], 1.0)
    if fakes.active is not None:
        assert fakes.active.launches == []


def test_config_rules(cp):
    with pytest.raises(TypeError, match=r"^config must be None or a TrainingConfig, got RowConfig$"):
        fp4q.quantize_nvfp4_training(zeros(cp, (32, 64)), 1.0, config=fp4q.RowConfig())
    with pytest.raises(fp4q.ConfigError, match=r"^rowwise and columnwise are both False"):
        TrainingConfig(rowwise=False, columnwise=False)
    with pytest.raises(fp4q.ConfigError, match=r"^tensor_sf_mode must be 'value' for a TrainingConfig"):
        TrainingConfig(tensor_sf_mode="pointer")
    with pytest.raises(fp4q.ConfigError, match=r"^min_ctas_per_sm must be an integer in \[0, 4\], got 5$"):
        TrainingConfig(min_ctas_per_sm=5)
    # 0: four CTAs per SM rounding 1D blocks to nearest, two with 16x16 blocks or stochastic rounding
    # (which would spill at 64 registers, and on some targets at 80).
    assert dict(TrainingConfig().spec.constants)["MIN_CTAS"] == 4
    assert dict(TrainingConfig(block_2d=True).spec.constants)["MIN_CTAS"] == 2
    assert dict(TrainingConfig(stochastic=True).spec.constants)["MIN_CTAS"] == 2
    assert dict(TrainingConfig(block_2d=True, min_ctas_per_sm=3).spec.constants)["MIN_CTAS"] == 3
    # The float32 groups of the Hadamard transform and of 4/6 take two CTAs per SM too.
    assert dict(TrainingConfig(hadamard=True).spec.constants)["MIN_CTAS"] == 2
    assert dict(TrainingConfig(four_over_six=True).spec.constants)["MIN_CTAS"] == 2
    for changes in (dict(columnwise=False), dict(block_2d=True)):
        with pytest.raises(fp4q.ConfigError, match=r"^hadamard=True needs columnwise=True and block_2d=False: the "
                                                   r"transform is the 1D columnwise direction's$"):
            TrainingConfig(hadamard=True, **changes)
    with pytest.raises(fp4q.ConfigError, match=r"^four_over_six must be a bool, got 1$"):
        TrainingConfig(four_over_six=1)


@pytest.mark.parametrize("m, k, grid", [(128, 128, 1), (144, 272, 6), (4096, 4096, 1024), (16, 16, 1)])
@pytest.mark.parametrize("directions", DIRECTIONS)
@pytest.mark.parametrize("block_2d", [False, True])
def test_the_launch(cp, m, k, grid, directions, block_2d):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (m, k))
    tsf = cp.asarray(np.float32(2.0)).reshape(())
    got = fp4q.quantize_nvfp4_training(x, tsf, block_2d=block_2d, **directions)
    launch = fakes.active.launches[-1]
    assert launch["spec"] == TrainingConfig(block_2d=block_2d, **directions).spec
    assert launch["grid"] == (grid, 1, 1) and launch["block"] == (256, 1, 1) and launch["pdl"]
    constants = dict(launch["spec"].constants)
    rowwise, columnwise = directions.get("rowwise", True), directions.get("columnwise", True)
    assert (constants["WRITES_ROWWISE"], constants["WRITES_COLUMNWISE"], constants["BLOCK_2D"],
            constants["STOCHASTIC"]) == (rowwise, columnwise, block_2d, False)
    args = launch["args"]
    assert (args["rows"], args["cols"], args["x_row_stride"]) == (m, k, k)
    assert args["out"] == (got.q.data.ptr if rowwise else 0) and args["out_t"] == (got.q_t.data.ptr if columnwise else 0)
    assert args["tensor_sf_ptr"] == args["columnwise_tensor_sf_ptr"] == tsf.data.ptr
    if columnwise:
        assert got.q_t.shape == (k, m // 2) and got.tensor_sf_t is tsf
        assert got.sf_t.shape == fp4q.swizzled_sf_shape(k, m)


@pytest.mark.parametrize("block_2d", [False, True])
def test_the_stochastic_launch(cp, block_2d):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (64, 256))
    for seed, offset in ((0, 0), (2**64 - 1, 2**63 + 1), (12345, 678)):
        fp4q.quantize_nvfp4_training(x, 1.0, block_2d=block_2d, stochastic=True, seed=seed, offset=offset)
        launch = fakes.active.launches[-1]
        assert (launch["args"]["seed"], launch["args"]["offset"]) == (seed, offset)
        assert launch["spec"] == TrainingConfig(block_2d=block_2d, stochastic=True).spec
    # The seed and offset are not part of the kind of call: one plan, one launch, for every value.
    plan = next(p for key, p in fp4q.ops.plans.plans._plans.items() if key[0].name == "quantize_nvfp4_training"
                and key[6] == (True, True, block_2d, True, "swizzled", None, False))
    assert len(plan.launches) == 1


def test_the_scales_launched(cp):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (64, 256))
    got = fp4q.quantize_nvfp4_training(x, 0.5, columnwise_tensor_sf=3.0)
    args = fakes.active.launches[-1]["args"]
    assert (args["tensor_sf_value"], args["tensor_sf_ptr"], args["columnwise_tensor_sf_value"],
            args["columnwise_tensor_sf_ptr"]) == (0.5, 0, 3.0, 0)
    assert (got.tensor_sf, got.tensor_sf_t) == (np.float32(0.5), np.float32(3.0))
    # "dynamic": global_scale's two kernels, then the quantizer reading their scale, by every dynamic direction.
    for tensor_sf, columnwise_tensor_sf, dynamic in (("dynamic", None, (True, True)), (0.5, "dynamic", (False, True)),
                                                     ("dynamic", 3.0, (True, False))):
        before = len(fakes.active.launches)
        got = fp4q.quantize_nvfp4_training(x, tensor_sf, columnwise_tensor_sf=columnwise_tensor_sf)
        amax, scale, quantize = fakes.active.launches[before:]
        assert [amax["spec"].name, scale["spec"].name] == ["fp4q_amax", "fp4q_global_scale"]
        computed = scale["args"]["scale"]
        assert amax["args"]["x"] == quantize["args"]["x"] == x.data.ptr
        ptrs = (quantize["args"]["tensor_sf_ptr"], quantize["args"]["columnwise_tensor_sf_ptr"])
        assert ptrs == tuple(computed if d else 0 for d in dynamic)
        for used, d in zip((got.tensor_sf, got.tensor_sf_t), dynamic):
            assert isinstance(used, np.float32) != d
        assert (got.tensor_sf is got.tensor_sf_t) == all(dynamic)


@pytest.mark.parametrize("block_2d, hadamard", [(False, None), (False, TE_MASK), (False, 0), (True, None)])
@pytest.mark.parametrize("four_over_six", [False, True])
@pytest.mark.parametrize("stochastic", [False, True])
def test_the_options_launched(cp, block_2d, hadamard, four_over_six, stochastic):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (64, 256))
    got = fp4q.quantize_nvfp4_training(x, 2.0, block_2d=block_2d, hadamard=hadamard, four_over_six=four_over_six,
                                       stochastic=stochastic, seed=3, offset=4)
    launch = fakes.active.launches[-1]
    assert launch["spec"] == TrainingConfig(block_2d=block_2d, hadamard=hadamard is not None,
                                            four_over_six=four_over_six, stochastic=stochastic).spec
    constants = dict(launch["spec"].constants)
    assert (constants["HADAMARD"], constants["FOUR_OVER_SIX"], constants["BLOCK_2D"], constants["STOCHASTIC"]) == (
        hadamard is not None, four_over_six, block_2d, stochastic)
    assert constants["MIN_CTAS"] == (2 if block_2d or stochastic or hadamard is not None or four_over_six else 4)
    args = launch["args"]
    assert (args["hadamard"], args["seed"], args["offset"], args["tensor_sf_value"]) == (hadamard or 0, 3, 4, 2.0)
    assert got.q_t.shape == (256, 32) and got.sf_t.shape == fp4q.swizzled_sf_shape(256, 64)


def test_the_sign_mask_is_a_launch_value(cp):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (64, 256))
    launched = []
    for mask in (TE_MASK, 0, 0xFFFF, 1):
        fp4q.quantize_nvfp4_training(x, 1.0, hadamard=mask)
        launched.append(fakes.active.launches[-1])
    assert [launch["args"]["hadamard"] for launch in launched] == [TE_MASK, 0, 0xFFFF, 1]
    assert all(launch["spec"] == launched[0]["spec"] for launch in launched)  # one kernel for every mask


@pytest.mark.parametrize("four_over_six", [False, True])
def test_the_dynamic_scale_with_the_options(cp, four_over_six):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = zeros(cp, (64, 256))
    # 4/6: global_scale's amax pass, then its 4/6 scale pass (1536 / amax), read by every dynamic direction.
    for block_2d in (False, True):
        before = len(fakes.active.launches)
        got = fp4q.quantize_nvfp4_training(x, "dynamic", block_2d=block_2d, four_over_six=four_over_six)
        amax, scale, quantize = fakes.active.launches[before:]
        assert [amax["spec"].name, scale["spec"].name] == ["fp4q_amax", "fp4q_global_scale"]
        assert dict(scale["spec"].flags)["FP4Q_FOUR_OVER_SIX"] == four_over_six
        assert dict(quantize["spec"].constants)["FOUR_OVER_SIX"] == four_over_six
        computed = scale["args"]["scale"]
        assert quantize["args"]["tensor_sf_ptr"] == quantize["args"]["columnwise_tensor_sf_ptr"] == computed
        assert got.tensor_sf is got.tensor_sf_t and got.tensor_sf.data.ptr == computed
    # The Hadamard transform: the rowwise scale computed, the columnwise one given.
    for columnwise_tensor_sf in (3.0, cp.asarray(np.float32(3.0)).reshape(())):
        before = len(fakes.active.launches)
        got = fp4q.quantize_nvfp4_training(x, "dynamic", columnwise_tensor_sf=columnwise_tensor_sf, hadamard=TE_MASK,
                                           four_over_six=four_over_six)
        amax, scale, quantize = fakes.active.launches[before:]
        assert dict(scale["spec"].flags)["FP4Q_FOUR_OVER_SIX"] == four_over_six
        args = quantize["args"]
        assert args["tensor_sf_ptr"] == scale["args"]["scale"] and args["hadamard"] == TE_MASK
        if isinstance(columnwise_tensor_sf, float):
            assert (args["columnwise_tensor_sf_value"], args["columnwise_tensor_sf_ptr"]) == (3.0, 0)
            assert got.tensor_sf_t == np.float32(3.0) and isinstance(got.tensor_sf_t, np.float32)
        else:
            assert args["columnwise_tensor_sf_ptr"] == columnwise_tensor_sf.data.ptr
            assert got.tensor_sf_t is columnwise_tensor_sf


def test_the_gpu_tests_data_make_the_options_count():
    # The GPU tests compare bytes: they can only fail where an option changes them. On data like
    # theirs, every mask changes the columnwise outputs and leaves the rowwise ones, and each 4/6
    # candidate wins somewhere, in groups and in 16x16 blocks, both directions.
    x = x_of(400, 1040, np.random.default_rng(0), "columns")
    plain = reference.quantize_nvfp4_training(x, 3.0, sf_layout="linear")
    for mask in MASKS:
        rht = reference.quantize_nvfp4_training(x, 3.0, hadamard=mask, sf_layout="linear")
        assert_bytes_equal(rht.q, plain.q, f"rowwise codes, hadamard={mask}")
        assert (rht.q_t != plain.q_t).any() and (rht.sf_t != plain.sf_t).any(), mask
    for block_2d in (False, True):
        plain = reference.quantize_nvfp4_training(x, 3.0, block_2d=block_2d, sf_layout="linear")
        fos = reference.quantize_nvfp4_training(x, 3.0, block_2d=block_2d, four_over_six=True, sf_layout="linear")
        for field in ("sf", "sf_t"):
            four = getattr(fos, field) != getattr(plain, field)
            assert four.any() and not four.all(), (field, block_2d)


def test_empty(cp):
    got = fp4q.quantize_nvfp4_training(zeros(cp, (0, 64)), 1.0)
    assert got.q.shape == (0, 32) and got.q_t.shape == (64, 0) and got.sf_t.shape == (1, 0, 32, 4, 4)
    if fakes.active is not None:
        assert fakes.active.launches == []


# ------------------------------------------------------------------- torch

def test_torch_fakes_and_a_compile_trace():
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fp4q.torch as ft
    from torch_fakes import fake_cuda

    def training(x, tsf, offset):
        a = ft.quantize_nvfp4_training(x, tsf)
        e = ft.quantize_nvfp4_training(x, tsf, stochastic=True, seed=5, offset=offset)
        b = ft.quantize_nvfp4_training(x, 2.0, columnwise_tensor_sf=0.5, block_2d=False, sf_layout="linear")
        c = ft.quantize_nvfp4_training(x, "dynamic", rowwise=False, block_2d=True)
        d = ft.quantize_nvfp4_training(x, tsf, columnwise=False, fp4_dtype=True)
        f = ft.quantize_nvfp4_training(x, tsf, hadamard=0xD7E8, four_over_six=True, stochastic=True, seed=5,
                                       offset=offset)
        h = ft.quantize_nvfp4_training(x, "dynamic", block_2d=True, four_over_six=True, sf_layout="linear")
        assert c.q is None and c.sf is None and d.q_t is None and d.tensor_sf_t is None
        assert e.q.shape == a.q.shape == f.q.shape and e.q_t.shape == a.q_t.shape == f.q_t.shape
        assert f.sf_t.shape == a.sf_t.shape and h.sf.shape == b.sf.shape and h.sf_t.shape == b.sf_t.shape
        return a.q, a.sf, a.q_t, a.sf_t, b.sf, b.sf_t, c.q_t, c.sf_t, c.tensor_sf_t, d.q

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(training, backend=counter, fullgraph=True, dynamic=True)
    mode = FakeTensorMode()
    for step, (m, k) in enumerate(((288, 320), (1024, 640), (160, 576))):
        with mode:
            x, tsf = fake_cuda((m, k)), fake_cuda((), torch.float32)
        q, sf, q_t, sf_t, sfl, sfl_t, c_q_t, c_sf_t, scale, q4 = compiled(x, tsf, 10 + step)
        assert q.shape == (m, k // 2) and q_t.shape == c_q_t.shape == (k, m // 2) and q4.shape == (m, k // 2)
        assert sf.shape == fp4q.swizzled_sf_shape(m, k) and sf_t.shape == c_sf_t.shape == fp4q.swizzled_sf_shape(k, m)
        assert sfl.shape == (m, k // 16) and sfl_t.shape == (k, m // 16) and scale.shape == ()
        assert (q.dtype, sf.dtype, sf_t.dtype, q4.dtype) == (torch.uint8, torch.float8_e4m3fn, torch.float8_e4m3fn,
                                                             torch.float4_e2m1fn_x2)
    assert counter.frame_count == 1
    with mode:
        with pytest.raises(ValueError, match=r"^columnwise=True needs M \(x's rows, leading dimensions flattened\) "
                                             r"to be a multiple of 16, got M=40$"):
            torch.ops.fp4q.quantize_nvfp4_training(fake_cuda((40, 64)), 1.0)
        for options, message in ((dict(hadamard=0xD7E8, columnwise=False), "needs columnwise=True"),
                                 (dict(hadamard=0, block_2d=True), "cannot be combined with block_2d=True"),
                                 (dict(hadamard=1 << 16), r"must satisfy 0 <= hadamard < 2\*\*16")):
            with pytest.raises(ValueError, match=rf"^hadamard(=\d+)? {message}"):
                torch.ops.fp4q.quantize_nvfp4_training(fake_cuda((64, 64)), 1.0, **options)


def _torch_check(torch, x_bits, got, tensor_sf, **options):
    want = reference.quantize_nvfp4_training(x_bits, tensor_sf, **options)
    torch.cuda.synchronize()
    for field in ("q", "sf", "q_t", "sf_t"):
        g, w = getattr(got, field), getattr(want, field)
        assert (g is None) == (w is None), field
        if w is not None:
            assert_bytes_equal(g.view(torch.uint8).cpu().numpy(), w, f"{field} {options}")


@gpu
def test_torch_bit_exact_graphs_and_compile():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft

    rng = np.random.default_rng(8)
    bits = x_of(272, 400, rng, "columns")
    x = torch.from_numpy(bits.view(np.int16)).cuda().view(torch.bfloat16)
    t = torch.tensor(0.5, dtype=torch.float32, device="cuda")
    for options in (dict(), dict(block_2d=True), dict(rowwise=False), dict(columnwise=False, sf_layout="linear")):
        _torch_check(torch, bits, ft.quantize_nvfp4_training(x, t, **options), np.float32(0.5), **options)
        _torch_check(torch, bits, ft.quantize_nvfp4_training(x, 0.5, **options), np.float32(0.5), **options)
        got = ft.quantize_nvfp4_training(x, "dynamic", **options)
        _torch_check(torch, bits, got, "dynamic", **options)
    got = ft.quantize_nvfp4_training(x, 0.5, columnwise_tensor_sf=t)  # mixed kinds: the ops layer's call
    _torch_check(torch, bits, got, np.float32(0.5), columnwise_tensor_sf=np.float32(0.5))
    for seed, offset in ((3, 4), (2**64 - 1, 2**63)):  # the schema's int64, then the ops layer's call
        for block_2d in (False, True):
            got = ft.quantize_nvfp4_training(x, t, stochastic=True, seed=seed, offset=offset, block_2d=block_2d)
            _torch_check(torch, bits, got, np.float32(0.5), stochastic=True, seed=seed, offset=offset,
                         block_2d=block_2d)

    # A CUDA graph replays the dynamic call on new values of x.
    static = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ft.quantize_nvfp4_training(static, "dynamic")
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ft.quantize_nvfp4_training(static, "dynamic")
    other = x_of(272, 400, rng, "rows")
    static.copy_(torch.from_numpy(other.view(np.int16)).cuda().view(torch.bfloat16))
    graph.replay()
    _torch_check(torch, other, captured, "dynamic")

    def fn(x, t):
        r = ft.quantize_nvfp4_training(x, t, block_2d=True)
        return r.q, r.sf, r.q_t, r.sf_t

    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        q, sf, q_t, sf_t = torch.compile(fn, backend=backend, fullgraph=True)(x, t)
        got = fp4q.TrainingQuantized(q, sf, q_t, sf_t, None, None)
        _torch_check(torch, bits, got, np.float32(0.5), block_2d=True)
