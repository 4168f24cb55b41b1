"""The numerics header on the GPU, step by step, against the reference:
the software e2m1 conversion of sm_90a over hand-picked and random float32
bit patterns, and the e4m3 scale / inverse computation; on a Hopper GPU
also the pre-Hopper build (software e2m1 and e4m3, sm_80's flags compiled
for sm_90a)."""

from __future__ import annotations

import numpy as np
import pytest

from fp4q.kernels.archs import EMULATED_SM_80
from fp4q.numerics import reference

gpu = pytest.mark.gpu
BUILDS = ["device", EMULATED_SM_80]


def _probe(v: np.ndarray, amax: np.ndarray, tensor_sf: float, build: str = "device"):
    cp = pytest.importorskip("cupy")
    from fp4q.cuda import driver
    from fp4q.cuda.launch import Launcher
    from fp4q.jit.loader import get_kernel
    from fp4q.kernels.quantize import numerics_probe_spec

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
    launch = Launcher(dev, kernel.function, spec.params, 1024, spec.threads, spec.smem_bytes)
    launch(cp.cuda.get_current_stream().ptr, False,
           dict(v=vd.data.ptr, codes=codes.data.ptr, amax=ad.data.ptr, sf=sf.data.ptr, inv=inv.data.ptr,
                tensor_sf=tensor_sf, pairs=pairs))
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
@pytest.mark.parametrize("tensor_sf", [1.0, 0.37, 2.0**-126, 2.0**100, 448.0])
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
        want_sf = reference.e4m3_encode(tsf * (amax * reference.R6))
    got_sf = np.stack([sf & 0xFF, sf >> 8], axis=1).reshape(-1).astype(np.uint8)
    np.testing.assert_array_equal(got_sf, want_sf)
    with np.errstate(all="ignore"):
        d = reference.e4m3_decode(want_sf) * (np.float32(1) / tsf)
        want_inv = np.where(d == 0, np.float32(0), np.float32(1) / d)
    want_inv = want_inv.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(inv), np.isnan(want_inv))
    finite = ~np.isnan(want_inv)
    np.testing.assert_array_equal(inv[finite].view(np.uint32), want_inv[finite].view(np.uint32))
