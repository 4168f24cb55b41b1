"""The numerics header on the GPU, step by step, against the reference:
the software e2m1 conversion of sm_90a over hand-picked and random float32
bit patterns, and the e4m3 scale / inverse computation; on a Hopper GPU
also the pre-Hopper build (software e2m1 and e4m3, sm_80's flags compiled
for sm_90a). Without a GPU: the software e4m3 formulas of
numerics/e4m3.cuh and the software e2m1 conversion of numerics/e2m1.cuh
(each of its three variants within its precondition), transcribed to
numpy, against the reference."""

from __future__ import annotations

import numpy as np
import pytest

from fp4q.kernels.archs import EMULATED_SM_80
from fp4q.numerics import formats, reference

gpu = pytest.mark.gpu
BUILDS = ["device", EMULATED_SM_80]


def _probe(v: np.ndarray, amax: np.ndarray, tensor_sf: float, build: str = "device"):
    cp = pytest.importorskip("cupy")
    from fp4q.cuda import driver
    from fp4q.jit.loader import get_kernel
    from probe import numerics_probe_spec
    from fp4q.ops.plans import KernelLaunch

    dev = driver.device(cp.cuda.Device().id)
    if build != "device" and dev.arch != "sm_90a":
        pytest.skip(f"the {build} build is compiled for sm_90a; this device's target is {dev.arch}")
    spec = numerics_probe_spec(dev.arch if build == "device" else build)
    kernel = get_kernel(spec, dev.ordinal)
    pairs = len(v) // 2
    vd, ad = cp.asarray(v), cp.asarray(amax)
    codes = cp.zeros(pairs // 4, cp.uint32)
    sf = cp.zeros(pairs, cp.uint16)
    inv = cp.zeros(2 * pairs, cp.float32)
    # The call's slots are the probe's parameters, in order.
    launch = KernelLaunch(None, kernel, 1024, tuple((p.name, p.kind) for p in spec.params))
    launch(cp.cuda.get_current_stream().ptr, False,
           (vd.data.ptr, codes.data.ptr, ad.data.ptr, sf.data.ptr, inv.data.ptr, tensor_sf, pairs))
    cp.cuda.get_current_stream().synchronize()
    return cp.asnumpy(codes), cp.asnumpy(sf), cp.asnumpy(inv)


def _interesting_floats(rng) -> np.ndarray:
    ties = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 1e30], np.float32)
    near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))])
    specials = np.array([np.inf, np.nan, 1e-45, 3e38], np.float32)
    fixed = np.concatenate([near, specials])
    fixed = np.concatenate([fixed, -fixed])
    random_bits = rng.integers(0, 2**32, size=1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    small = (rng.random(1 << 20, dtype=np.float32) * 8).astype(np.float32)
    v = np.concatenate([fixed, random_bits, small, -small])
    return v[: len(v) // 8 * 8]


@gpu
@pytest.mark.parametrize("build", BUILDS)
def test_e2m1_conversion_bit_exact(build):
    rng = np.random.default_rng(0)
    v = _interesting_floats(rng)
    codes, _, _ = _probe(v, np.zeros_like(v), 1.0, build)
    nibbles = reference.e2m1_encode(v).astype(np.uint32).reshape(-1, 8)
    want = (nibbles << (4 * np.arange(8, dtype=np.uint32))).sum(axis=1, dtype=np.uint32)
    bad = np.flatnonzero(codes != want)
    assert not bad.size, [(v[8 * i : 8 * i + 8], hex(codes[i]), hex(want[i])) for i in bad[:4]]


@gpu
@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("tensor_sf", [1.0, 0.37, 2.0**-126, 2.0**100, 448.0, -0.37])  # negative: signed bytes
def test_scale_and_inverse_bit_exact(tensor_sf, build):
    rng = np.random.default_rng(1)
    amax = np.abs(rng.integers(0, 2**32, size=1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32))
    amax[:8] = [0, np.inf, np.nan, 1e-45, 6 * 448, 3e38, 1e-30, 6]
    # every float32 around the e4m3 grid's ties and its saturation and subnormal edges
    edges = np.float32(np.array([448, 464, 480, 2.0**-6, 2.0**-9, 2.0**-10, 1.5 * 2.0**-9], np.float32) * 6)
    near = np.concatenate([np.nextafter(edges, np.float32(0)), edges, np.nextafter(edges, np.float32(np.inf))])
    amax[8 : 8 + len(near)] = near
    _, sf, inv = _probe(np.zeros_like(amax), amax, tensor_sf, build)
    tsf = np.float32(tensor_sf)
    with np.errstate(all="ignore"):
        want_sf = reference.e4m3_encode(tsf * (amax * formats.R6))
    got_sf = np.stack([sf & 0xFF, sf >> 8], axis=1).reshape(-1).astype(np.uint8)
    np.testing.assert_array_equal(got_sf, want_sf)
    with np.errstate(all="ignore"):
        d = reference.e4m3_decode(want_sf) * (np.float32(1) / tsf)
        want_inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    want_inv = want_inv.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(inv), np.isnan(want_inv))
    finite = ~np.isnan(want_inv)
    np.testing.assert_array_equal(inv[finite].view(np.uint32), want_inv[finite].view(np.uint32))


# --- the software e4m3 conversions, on the CPU ------------------------------------------------------------------
# numpy transcriptions of software_e4m3 and software_e4m3_value (numerics/e4m3.cuh), step for step: float32
# arithmetic rounds to nearest even without flushing subnormals, as the device's add.rn / mul.rn do, and
# np.fmin drops NaN as min.f32 does.


def software_e4m3(s: np.ndarray) -> np.ndarray:
    s = np.asarray(s, np.float32)
    a = np.fmin(np.abs(s), np.float32(448))
    bits = a.view(np.uint32)
    with np.errstate(over="ignore"):
        subnormal = (a + np.float32(2**14)).view(np.uint32) - np.float32(2**14).view(np.uint32)
        normal = ((bits + np.uint32(0x7FFFF) + ((bits >> 20) & 1)) >> 20) - np.uint32(120 << 3)
    code = np.where(a < np.float32(2**-6), subnormal, normal)
    signed = ((s.view(np.uint32) >> 24) & 0x80) | code
    return np.where(np.isnan(s), 0x7F, signed).astype(np.uint8)


def software_e4m3_value(byte: np.ndarray) -> np.ndarray:
    b = np.asarray(byte, np.uint32)
    bits = ((b & 0x7F) << 20) | ((b & 0x80) << 24)
    value = bits.view(np.float32) * np.float32(2**120)
    return np.where((b & 0x7F) == 0x7F, np.float32(np.nan), value)


def _e4m3_inputs() -> np.ndarray:
    """Every e4m3 value and every midpoint between neighbours (the ties), each with its float32 neighbours;
    the saturation and subnormal edges; +-0, +-Inf, NaNs of both signs and several payloads, float32
    subnormals; and random bit patterns."""
    grid = reference.e4m3_decode(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)
    ties = (grid[:-1] + grid[1:]) / 2  # exact in float32: one bit more than e4m3
    edges = np.array([448, 464, 480, 2**-6, 2**-9, 2**-10, 3 * 2**-11, 3e38], np.float64)
    points = np.concatenate([grid, ties, edges]).astype(np.float32)
    near = np.concatenate([points, np.nextafter(points, np.float32(np.inf)), np.nextafter(points, np.float32(0))])
    specials = np.array([0, np.inf, 1e-45, 1e-40, 1.1754942e-38], np.float32)
    nans = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFC00000, 0xFF800001], np.uint32).view(np.float32)
    fixed = np.concatenate([near, specials])
    random_bits = np.random.default_rng(2).integers(0, 2**32, size=1 << 22, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([fixed, -fixed, nans, random_bits.view(np.float32)])


def test_software_e4m3_encode_is_the_reference():
    s = _e4m3_inputs()
    got, want = software_e4m3(s), reference.e4m3_encode(s)
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(s[i], hex(s.view(np.uint32)[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]


def test_software_e4m3_value_is_the_reference():
    byte = np.arange(256, dtype=np.uint8)
    got, want = software_e4m3_value(byte), reference.e4m3_decode(byte)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(got[finite].view(np.uint32), want[finite].view(np.uint32))


def test_software_e4m3_round_trips_every_byte():
    byte = np.arange(256, dtype=np.uint8)
    nan = (byte & 0x7F) == 0x7F
    np.testing.assert_array_equal(software_e4m3(software_e4m3_value(byte))[~nan], byte[~nan])


# --- the software e2m1 conversion, on the CPU -------------------------------------------------------------------
# A numpy transcription of e2m1_magnitude_biased and e2m1x8's sign handling (numerics/e2m1.cuh): each branch is
# one fma or add onto the grid of M = 1.5 * 2^23, computed in float64 (exact here: the operands' bits fit in 53)
# and rounded once to float32, as fma.rn / add.rn round; the minimum is taken of their bit patterns as unsigned
# integers (min.u32), where a NaN branch (positive: |v| is) lies above the clamp's M + 7.

M = np.float32(1.5 * 2**23)


def software_e2m1(v: np.ndarray, input_signs: bool, clamp: bool) -> np.ndarray:
    v = np.asarray(v, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # signalling NaNs, and Inf * 2 + M
        a = np.abs(v).astype(np.float64)
        t0 = (a * 2 + np.float64(M)).astype(np.float32).view(np.uint32)
        t1 = (a + np.float64(M + np.float32(2))).astype(np.float32).view(np.uint32)
        t2 = (a * 0.5 + np.float64(M + np.float32(4))).astype(np.float32).view(np.uint32)
    if clamp:
        t2 = np.minimum(t2, (M + np.float32(7)).view(np.uint32))
    magnitude = np.minimum(np.minimum(t0, t1), t2) - M.view(np.uint32)
    # The input's sign and the product's agree unless the product is NaN (the variant's precondition), so
    # both variants read v's sign bit; the general one also gives NaN a clear sign, as the product's is.
    sign = v.view(np.uint32) >> 31
    if not input_signs:
        sign = np.where(np.isnan(v), np.uint32(0), sign)
    return (magnitude | (sign << 3)).astype(np.uint8)


def _e2m1_inputs() -> np.ndarray:
    """Every 61st float32 bit pattern below 8, every float32 within 2^12 ulps of each grid point and tie, the
    boundaries of the fast variant (7), large and special values, NaNs; both signs."""
    dense = np.arange(0, np.float32(8).view(np.uint32), 61, dtype=np.uint32).view(np.float32)
    points = np.array([0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8], np.float32)
    near = (points.view(np.uint32)[:, None].astype(np.int64) + np.arange(-4096, 4097)).ravel()
    near = near[(near >= 0)].astype(np.uint32).view(np.float32)
    specials = np.array([np.inf, 1e-45, 1e-40, 1.1754942e-38, 6.5, 1e30, 3.4028235e38], np.float32)
    nans = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF], np.uint32).view(np.float32)
    fixed = np.concatenate([dense, near, specials, nans])
    return np.concatenate([fixed, -fixed])


@pytest.mark.parametrize("input_signs, clamp", [(False, True), (True, True), (True, False)])
def test_software_e2m1_is_the_reference(input_signs, clamp):
    v = _e2m1_inputs()
    if input_signs:  # its precondition: no NaN product
        v = v[~np.isnan(v)]
    if not clamp:  # and every |product| below 7
        v = v[np.abs(v) < 7]
    got, want = software_e2m1(v, input_signs, clamp), reference.e2m1_encode(v)
    bad = np.flatnonzero(got != want)
    assert not bad.size, [(v[i], hex(v.view(np.uint32)[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]


def test_e2m1_codes_as_e4m3_bytes_are_their_values():
    """e2m1_values (numerics/e2m1.cuh) on targets that convert e4m3: the bytes it makes of eight codes
    (two shifts and masks per four), times 64, are the codes' values, signs and -0 included."""
    rng = np.random.default_rng(1)
    words = np.concatenate([rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32),
                            np.array([0x76543210, 0xFEDCBA98, 0x88888888, 0], np.uint32)])
    even = ((words << 2) & 0x1C1C1C1C) | ((words << 4) & 0x80808080)
    odd = ((words >> 2) & 0x1C1C1C1C) | (words & 0x80808080)
    for i in range(8):
        source = even if i % 2 == 0 else odd
        byte = ((source >> (8 * (i // 2))) & 0xFF).astype(np.uint8)
        got = formats.e4m3_decode(byte) * np.float32(64)
        want = formats.e2m1_decode(((words >> (4 * i)) & 0xF).astype(np.uint8))
        np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))
