"""Property-based tests (hypothesis) of the reference and, on a GPU, of the
kernels against it (issue "Reliability").

Every property runs with ``derandomize=True`` and no example database, so a
run is reproducible and leaves nothing behind; the example counts are small
enough for CI and are multiplied by ``LONG_FACTOR`` under ``--fuzz-long``
(an option registered in conftest.py). The settings are applied when each
test runs, which is why each test wraps its property in ``_run``.

CPU properties of fp4q.reference:
- dequantize(quantize(x)) stays within the error bound the format implies;
- the scale layouts round-trip and agree with the offset formula;
- the scale byte is monotonic non-decreasing in the group amax;
- quantizing a row alone gives that row of the whole tensor.

GPU (marked ``gpu``): random shapes, bit patterns, tensor_sf, configs,
layouts, placements, buffers, streams; bit-exact against the reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, reject, settings
from hypothesis import strategies as st

import fp4q
from fp4q.numerics import formats, layouts
from fp4q.numerics import reference
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.spec import Swizzle
from fp4q.kernels.variants import SHIPPED, SIMT

from helpers import assert_bytes_equal, random_bf16

gpu = pytest.mark.gpu

LONG_FACTOR = 20
R6 = formats.R6
F32 = np.float32


def _run(request, examples, strategy, check, **overrides):
    """Run ``check`` on ``examples`` draws of ``strategy`` (x LONG_FACTOR under --fuzz-long)."""
    if request.config.getoption("--fuzz-long", default=False):
        examples *= LONG_FACTOR
    options = dict(max_examples=examples, derandomize=True, deadline=None, database=None)
    options.update(overrides)

    @settings(**options)
    @given(strategy)
    def prop(case):
        check(case)

    prop()


def _bf16(values) -> np.ndarray:
    """float64/float32 values to bf16 bits (truncation of the float32; finite stays finite)."""
    f = np.clip(np.asarray(values, dtype=np.float64), -3.3e38, 3.3e38).astype(F32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def _as_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(F32)


# --- 1. dequantize(quantize(x)) error bound ---------------------------------------------------------------------
#
# Per group, with d = float32(e4m3(sf)) * (1/tensor_sf) (spec step 5) and t = |x| / d:
#
# * The e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6} has spacing 0.5 on [0, 2], 1 on [2, 4] and 2 on [4, 6]. When
#   t <= 6 the code is the grid point nearest to x * inv, so the dequantized value e2m1(q) * d is off by at
#   most half the spacing at t's magnitude, times d:  |x - y| <= d * spacing(t) / 2.
# * t > 6 saturates to +-6: |x - y| = |x| - 6d. The scale is sf = e4m3(s) with s = tensor_sf * amax / 6
#   (R6 rounding aside), so amax / d = 6 s / sf: t > 6 needs sf < s, the e4m3 scale rounded DOWN. For a
#   normal e4m3 scale (3 mantissa bits) rounding moves s by at most 2**-4 of its binade's start, so
#   sf >= s (1 - 1/16) and t <= 6 * 16/15 = 6.4: the saturation error is at most 0.4 d, inside the d of the
#   top interval. Subnormal e4m3 scales (s < 2**-6) and the 448 clamp (s >= 448) have no such bound: there
#   only "rounded down" and |y| = 6d are checked.
# * Float32 roundings of 1/tensor_sf, d, inv, x * inv and e2m1 * d add a few ulps relative to |x| and |y|,
#   plus underflow (2**-150 absolute in x * inv and y): SLOP below.
# * d == 0 (s <= 2**-10 rounds the scale to 0) gives all zeros; when d is subnormal or 1/d is not a normal
#   float32 only the sign and |y| <= 6d are checked.


def _spacing(t):
    return np.where(t <= 2, 0.5, np.where(t <= 4, 1.0, 2.0))


@st.composite
def finite_inputs(draw, max_rows=6, max_groups=6):
    m = draw(st.integers(1, max_rows))
    g = draw(st.integers(1, max_groups))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (m, 16 * g)
    kind = draw(st.sampled_from(["spread", "raw", "flat"]))
    if kind == "raw":  # any finite bf16 bit pattern, subnormals included
        bits = rng.integers(0, 0x10000, size=shape, dtype=np.uint32).astype(np.uint16)
        exp_all_ones = (bits & 0x7F80) == 0x7F80
        bits[exp_all_ones] &= 0xFF7F  # NaN/Inf -> a finite value of the same sign
    else:
        top = draw(st.integers(-133, 127))
        spread = 0 if kind == "flat" else draw(st.integers(0, 30))
        exps = top - rng.integers(0, spread + 1, size=shape)
        vals = np.ldexp(rng.uniform(1, 2, size=shape), exps) * rng.choice([-1.0, 1.0], size=shape)
        bits = _bf16(vals)
    zero_frac = draw(st.sampled_from([0.0, 0.0, 0.2, 1.0]))
    zeros = rng.random(shape) < zero_frac
    bits[zeros] = rng.choice(np.array([0x0000, 0x8000], np.uint16), size=int(zeros.sum()))
    return bits


@st.composite
def in_range_tensor_sf(draw, bits):
    kind = draw(st.sampled_from(["global", "near_global", "any"]))
    if kind == "any":
        return F32(draw(st.floats(2.0**-126, 2.0**100, width=32)))
    g = reference.global_scale(bits)
    if kind == "near_global":
        g = np.clip(np.float64(g) * 2.0 ** draw(st.integers(-12, 12)), 2.0**-126, 2.0**100)
    return F32(g)


@st.composite
def bound_cases(draw):
    bits = draw(finite_inputs())
    return bits, draw(in_range_tensor_sf(bits))


def check_error_bound(case):
    bits, tsf = case
    m, k = bits.shape
    g = k // 16
    x32 = _as_f32(bits).reshape(m, g, 16)
    q, sf = reference.quantize_nvfp4(bits, tsf, sf_layout="linear")
    y32 = reference.dequantize_nvfp4(q, sf, tsf, sf_layout="linear", dtype="float32").reshape(m, g, 16)
    x, y = x32.astype(np.float64), y32.astype(np.float64)
    with np.errstate(all="ignore"):
        amax = np.abs(x32).max(axis=-1)
        s32 = tsf * (amax * R6)  # spec step 3, float32
        sfv = reference.e4m3_decode(sf)
        d32 = sfv * (F32(1) / tsf)  # spec step 5, float32
        d = d32.astype(np.float64)[..., None]
        t = np.abs(x) / d
    err = np.abs(x - y)
    slop = 2.0**-21 * (np.abs(x) + np.abs(y)) + d * 2.0**-140 + 2.0**-140

    # Sign: a nonzero result has the sign of x.
    nonzero = y != 0
    assert (np.signbit(y) == np.signbit(x))[nonzero].all(), "dequantized value with the wrong sign"
    # d == 0 only from an e4m3 underflow, and then everything is zero.
    zero_d = (d32 == 0)
    assert (s32[zero_d] <= 2.0**-10).all(), f"scale 0 for s = {s32[zero_d]}"
    assert (y[zero_d] == 0).all()
    # Never beyond the e2m1 maximum.
    finite_d = np.isfinite(d32)[..., None] & (d > 0)
    assert (np.abs(y) <= 6 * d * (1 + 2.0**-22) + 2.0**-149)[np.broadcast_to(finite_d, y.shape)].all()

    regular = ((d32 >= 2.0**-125) & (d32 <= 2.0**125))[..., None]
    inside = regular & (t <= 6 * (1 - 2.0**-20))
    bound = d * _spacing(t * (1 + 2.0**-20)) / 2 + slop
    bad = inside & (err > bound)
    assert not bad.any(), (
        f"e2m1 rounding error above d*spacing/2: x={x[bad][:4]}, y={y[bad][:4]}, d={np.broadcast_to(d, x.shape)[bad][:4]}"
    )
    saturated = regular & (t > 6 * (1 + 2.0**-20))
    rows, groups, _ = np.nonzero(saturated)
    assert (sfv[rows, groups] < s32[rows, groups]).all(), "saturation although the e4m3 scale was not rounded down"
    six_d = (F32(6) * d32).astype(np.float64)[..., None]
    assert (np.abs(y) == six_d)[saturated].all(), "a saturated element is not +-6d"
    # A normal, unclamped e4m3 scale bounds the saturation too: every error within d (t <= 6.4).
    normal_scale = np.broadcast_to(((sfv >= 2.0**-6) & (s32 < 448))[..., None] & regular, x.shape)
    assert (t <= 6.4 * (1 + 2.0**-20))[normal_scale].all()
    assert (err <= d + slop)[normal_scale].all()


def test_dequantize_error_within_format_bound(request):
    _run(request, 150, bound_cases(), check_error_bound)


# --- 2. scale layouts -------------------------------------------------------------------------------------------


@st.composite
def linear_scales(draw):
    m = draw(st.integers(0, 300))
    g = draw(st.integers(0, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lin = rng.integers(0, 256, size=(m, g), dtype=np.uint8)
    lead = (m,)
    split = draw(st.integers(1, 8))
    if m and m % split == 0:
        lead = (m // split, split)
    return lin.reshape(lead + (g,))


def check_layout_round_trip(lin):
    g = lin.shape[-1]
    m = int(np.prod(lin.shape[:-1]))
    flat = lin.reshape(m, g)
    sw = layouts.swizzle_sf(lin)
    assert sw.shape == layouts.block_shape(m, g) and sw.dtype == np.uint8 and sw.flags.c_contiguous
    assert np.array_equal(sw, layouts.swizzle_sf(flat)), "leading dimensions must flatten to rows"
    assert np.array_equal(layouts.unswizzle_groups(sw, m, g), flat)
    mi, ji = np.meshgrid(np.arange(m), np.arange(g), indexing="ij")
    offsets = layouts.swizzled_sf_offset(mi, ji, g) if m and g else np.zeros((m, g), np.int64)
    assert np.unique(offsets).size == m * g and (offsets < max(sw.size, 1)).all()
    assert np.array_equal(sw.ravel()[offsets], flat), "offset formula disagrees with swizzle_sf"
    padding = np.ones(sw.size, bool)
    padding[offsets.ravel()] = False
    assert not sw.ravel()[padding].any(), "padding bytes must be 0x00"
    # The other direction: any swizzled array with zero padding survives unswizzle -> swizzle.
    other = np.random.default_rng(m * 131 + g).integers(0, 256, size=sw.shape, dtype=np.uint8)
    other.ravel()[padding] = 0
    assert np.array_equal(layouts.swizzle_sf(layouts.unswizzle_groups(other, m, g)), other)


def test_layouts_round_trip(request):
    _run(request, 100, linear_scales(), check_layout_round_trip)


# --- 3. scale byte monotonic in amax ----------------------------------------------------------------------------


@st.composite
def amax_ladders(draw):
    tsf = F32(draw(st.floats(2.0**-126, 2.0**100, width=32)))
    # Non-negative bf16 bit patterns up to +Inf (NaN excluded) are ordered like their values.
    mags = sorted(draw(st.lists(st.integers(0, 0x7F80), min_size=2, max_size=48)))
    seed = draw(st.integers(0, 2**32 - 1))
    return tsf, np.array(mags, dtype=np.uint16), seed


def check_scale_monotonic(case):
    tsf, mags, seed = case
    rng = np.random.default_rng(seed)
    n = mags.size
    # Row i: amax mags[i] at a random position with a random sign; the rest no larger in magnitude.
    with np.errstate(invalid="ignore"):  # 0 * Inf: a NaN, which amax ignores
        rest = rng.random((n, 16)) * _as_f32(mags)[:, None]
    bits = _bf16(rest) & 0x7FFF
    bits[np.arange(n), rng.integers(0, 16, n)] = mags
    bits |= (rng.random((n, 16)) < 0.5).astype(np.uint16) << 15
    _, sf = reference.quantize_nvfp4(bits, tsf, sf_layout="linear")
    codes = sf[:, 0].astype(int)
    assert (codes <= 0x7E).all(), "a scale from a finite positive s must not be NaN or negative"
    assert (np.diff(codes) >= 0).all(), f"scale bytes not monotonic in amax: {codes.tolist()} for {mags.tolist()}"


def test_scale_byte_monotonic_in_amax(request):
    _run(request, 150, amax_ladders(), check_scale_monotonic)


# --- 4. rows are independent ------------------------------------------------------------------------------------


@st.composite
def row_cases(draw):
    m = draw(st.integers(1, 40))
    g = draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(["bfloat16", "float16"]))
    if dtype == "bfloat16":
        x = random_bf16((m, 16 * g), rng, scale=2.0 ** draw(st.integers(-60, 60)),
                        specials=draw(st.sampled_from([0, 0.05, 0.5])))
    else:
        x = rng.integers(0, 0x10000, size=(m, 16 * g), dtype=np.uint32).astype(np.uint16).view(np.float16)
    # The reference follows the formulas for any float32 tensor_sf (what a device scalar may hold).
    tsf = np.array(draw(st.integers(0, 2**32 - 1)), dtype=np.uint32).view(F32)[()]
    if draw(st.booleans()):
        tsf = F32(reference.global_scale(x))
    return x, tsf


def check_rows_independent(case):
    x, tsf = case
    m, k = x.shape
    q, sf = reference.quantize_nvfp4(x, tsf, sf_layout="linear")
    q_sw, sf_sw = reference.quantize_nvfp4(x, tsf, sf_layout="swizzled")
    assert np.array_equal(q_sw, q)
    assert np.array_equal(layouts.unswizzle_sf(sf_sw, m, k), sf)
    for i in range(m):
        qi, sfi = reference.quantize_nvfp4(x[i : i + 1], tsf, sf_layout="linear")
        assert np.array_equal(qi[0], q[i]) and np.array_equal(sfi[0], sf[i]), f"row {i} depends on other rows"
    if m % 2 == 0:  # leading dimensions flatten to the same rows
        q3, sf3 = reference.quantize_nvfp4(x.reshape(2, m // 2, k), tsf, sf_layout="linear")
        assert np.array_equal(q3.reshape(q.shape), q) and np.array_equal(sf3.reshape(sf.shape), sf)


def test_quantize_rows_are_independent(request):
    _run(request, 60, row_cases(), check_rows_independent)


# --- 5. GPU: random calls, bit-exact against the reference ------------------------------------------------------

FP16_SPECIALS = np.array([0x7E00, 0xFE01, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x0001, 0x83FF, 0x7BFF, 0x0400],
                         dtype=np.uint16)


@st.composite
def random_tma_configs(draw):
    """Any combination of QuantizeConfig fields; the ones the config rejects are not tried."""
    tile_k = draw(st.sampled_from([64, 128, 192, 256, 384, 512]))
    in_swizzle = draw(st.sampled_from(list(Swizzle)))
    if in_swizzle == Swizzle.NONE:
        input_box_k = draw(st.sampled_from([b for b in (8, 16, 32, 64, 128, 256) if tile_k % b == 0]))
    else:
        input_box_k = in_swizzle.value // 2
    out_swizzle = draw(st.sampled_from(list(Swizzle)))
    if out_swizzle == Swizzle.NONE:
        output_box_k = draw(st.sampled_from([b for b in (16, 32, 64, 128, 256) if (tile_k // 2) % b == 0]))
    else:
        output_box_k = out_swizzle.value
    fields = dict(
        tile_m=draw(st.sampled_from([128, 256])), tile_k=tile_k, input_box_k=input_box_k,
        input_swizzle=in_swizzle, output_box_k=output_box_k, output_swizzle=out_swizzle,
        num_stages=draw(st.integers(1, 8)), consumer_warpgroups=draw(st.integers(1, 3)),
        out_buffers=draw(st.integers(2, 4)), persistent=draw(st.booleans()),
        min_ctas_per_sm=draw(st.integers(1, 3)), setmaxnreg=draw(st.booleans()),
    )
    try:
        return QuantizeConfig(**fields)
    except ConfigError:
        reject()


CONFIGS = st.one_of(
    st.none(),
    # quantize_nvfp4 takes NVFP4 configs; the MXFP4 ones belong to another entry point.
    st.sampled_from([c for _, c in sorted({**SHIPPED, **SIMT}.items()) if c.fmt == "nvfp4"]),
    random_tma_configs(),
    st.sampled_from([SimtConfig(threads=t, vector=v) for t in (64, 128, 256, 512, 1024) for v in (False, True)]),
    st.sampled_from([SimtConfig(threads=t, vector=True, vector_elements=32) for t in (64, 256, 1024)]),
)


@dataclasses.dataclass(frozen=True)
class GpuCase:
    m: int
    k: int
    dtype: str  # "bfloat16" (as uint16 bits) or "float16"
    content: str
    scale_exp: int
    specials: float
    seed: int
    sf_layout: str
    placement: str  # contiguous, column_slice (row stride K + pad), misaligned (base address + 2 bytes)
    pad: int
    tsf_kind: str
    tsf_bits: int
    tsf_shape: tuple
    config: object
    out_buffers: bool
    pdl: bool
    stream: int | None

    def host_input(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        shape = (self.m, self.k)
        if self.content == "raw":
            bits = rng.integers(0, 0x10000, size=shape, dtype=np.uint32).astype(np.uint16)
        elif self.dtype == "bfloat16":
            bits = random_bf16(shape, rng, scale=2.0**self.scale_exp, specials=self.specials)
        else:
            with np.errstate(over="ignore"):
                vals = (rng.standard_normal(shape) * 2.0**self.scale_exp).astype(np.float16)
            bits = vals.view(np.uint16)
            mask = rng.random(shape) < self.specials
            bits[mask] = rng.choice(FP16_SPECIALS, size=int(mask.sum()))
        if self.content == "zeros":
            bits[:] = 0x8000 if self.seed % 2 else 0
        return bits.view(np.float16) if self.dtype == "float16" else bits

    def tensor_sf(self, cp, host):
        """(the float32 the reference uses, what is passed)."""
        if self.tsf_kind.endswith("global"):
            value = F32(reference.global_scale(host))
        else:
            value = np.array(self.tsf_bits, np.uint32).view(F32)[()]
        if self.tsf_kind.startswith("host"):
            return value, (float(value) if self.tsf_bits % 2 else value)
        return value, cp.asarray(np.full(self.tsf_shape, value, dtype=F32))

    def place(self, cp, host):
        if self.placement == "column_slice":
            base = cp.full((self.m, self.k + self.pad), 0x7FC0, dtype=cp.uint16)
            x = base[:, : self.k]
            x[...] = cp.asarray(host.view(np.uint16))
        elif self.placement == "misaligned":
            base = cp.zeros(self.m * self.k + 1, dtype=cp.uint16)
            x = base[1:].reshape(self.m, self.k)
            x[...] = cp.asarray(host.view(np.uint16))
        else:
            x = cp.asarray(host.view(np.uint16))
        return x.view(cp.float16) if self.dtype == "float16" else x

    def alignment_obstacle(self, x) -> bool:
        """Whether x's rows are not 16-byte aligned (the API must refuse an explicit vector SimtConfig)."""
        if self.m == 0 or self.k == 0:
            return False
        row_stride = x.strides[0] if self.m > 1 else self.k * 2
        return x.data.ptr % 16 != 0 or row_stride % 16 != 0

    def tma_obstacle(self, x) -> bool:
        """Whether TMA cannot serve the call (the API must refuse an explicit QuantizeConfig)."""
        return self.m > 0 and self.k > 0 and (self.k % 32 != 0 or self.alignment_obstacle(x))


@st.composite
def gpu_cases(draw):
    dtype = draw(st.sampled_from(["bfloat16", "bfloat16", "float16"]))
    tsf_kind = draw(st.sampled_from(["host_global", "host_any", "device_global", "device_any"]))
    if tsf_kind == "host_any":
        tsf_bits = int(np.array(draw(st.floats(2.0**-126, 2.0**100, width=32)), F32).view(np.uint32))
    elif tsf_kind == "device_any":
        special = st.sampled_from([0xBFC00000, 0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0, 0x80000000, 1,
                                   0x00800000, 0x7F7FFFFF, 0x3F800000])
        tsf_bits = draw(st.one_of(special, st.integers(0, 2**32 - 1)))
    else:
        tsf_bits = draw(st.integers(0, 1))
    return GpuCase(
        m=draw(st.integers(0, 600)),
        k=16 * draw(st.integers(0, 256)),
        dtype=dtype,
        content=draw(st.sampled_from(["normal", "normal", "raw", "zeros"])),
        scale_exp=draw(st.integers(-30, 30)),
        specials=draw(st.sampled_from([0.0, 0.01, 0.3])),
        seed=draw(st.integers(0, 2**32 - 1)),
        sf_layout=draw(st.sampled_from(["swizzled", "linear"])),
        placement=draw(st.sampled_from(["contiguous", "contiguous", "column_slice", "misaligned"])),
        pad=draw(st.sampled_from([4, 8, 16, 64])),
        tsf_kind=tsf_kind,
        tsf_bits=tsf_bits,
        tsf_shape=draw(st.sampled_from([(), (1,)])),
        config=draw(CONFIGS),
        out_buffers=draw(st.booleans()),
        pdl=draw(st.booleans()),
        stream=draw(st.sampled_from([None, 0, 1])),
    )


def check_gpu_case(case, cp, streams):
    host = case.host_input()
    x = case.place(cp, host)
    tsf_ref, tsf_arg = case.tensor_sf(cp, host)
    g = case.k // 16
    q_shape = (case.m, case.k // 2)
    sf_shape = layouts.block_shape(case.m, g) if case.sf_layout == "swizzled" else (case.m, g)
    kwargs = dict(sf_layout=case.sf_layout, config=case.config, pdl=case.pdl,
                  stream=None if case.stream is None else streams[case.stream])
    if case.out_buffers:  # reused, dirty buffers: every byte, padding included, must be rewritten
        kwargs["out"] = cp.full(q_shape, 0xFF, dtype=cp.uint8)
        kwargs["sf_out"] = cp.full(sf_shape, 0xFF, dtype=cp.uint8)
    cp.cuda.Device().synchronize()  # inputs are on the null stream; the call may use another
    if isinstance(case.config, QuantizeConfig) and case.tma_obstacle(x):
        with pytest.raises(ValueError, match="TMA cannot serve"):
            fp4q.quantize_nvfp4(x, tsf_arg, **kwargs)
        return
    if isinstance(case.config, SimtConfig) and case.config.vector and case.alignment_obstacle(x):
        with pytest.raises(ValueError, match="16-byte loads cannot serve"):
            fp4q.quantize_nvfp4(x, tsf_arg, **kwargs)
        return
    if isinstance(case.config, SimtConfig) and case.config.vector_elements == 32 and case.m > 0 and case.k % 32:
        with pytest.raises(ValueError, match="quantizes 2 whole groups per unit"):
            fp4q.quantize_nvfp4(x, tsf_arg, **kwargs)
        return
    q, sf = fp4q.quantize_nvfp4(x, tsf_arg, **kwargs)
    cp.cuda.Device().synchronize()
    q_ref, sf_ref = reference.quantize_nvfp4(host, tsf_ref, sf_layout=case.sf_layout)
    assert_bytes_equal(cp.asnumpy(q), q_ref, "q")
    assert_bytes_equal(cp.asnumpy(sf), sf_ref, "sf")


@gpu
def test_gpu_random_calls_bit_exact(request):
    cp = pytest.importorskip("cupy")
    streams = [cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=False)]

    def check(case):
        note(repr(case))
        check_gpu_case(case, cp, streams)

    # No shrinking: each new config is a compile; the failing draw is printed whole instead.
    _run(request, 150, gpu_cases(), check, phases=[Phase.explicit, Phase.reuse, Phase.generate],
         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
