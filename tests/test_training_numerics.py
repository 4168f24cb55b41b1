"""The training numerics headers (numerics/philox.cuh, stochastic.cuh, hadamard.cuh,
four_over_six.cuh) against the reference, bit for bit: on the GPU through the training
probe (tests/kernels/training_probe.cu), for the device's build and, on a Hopper GPU,
the pre-Hopper one; on the CPU, the software stochastic rounding and its byte mapping
transcribed to numpy, and NVRTC's refusal of cvt.rs on every target fp4q ships (why
every target takes the software path)."""

from __future__ import annotations

import numpy as np
import pytest

from fp4q.jit.cache import BinaryCache
from fp4q.jit.compiler import CompileError, compile_source
from fp4q.jit.render import KernelSource
from fp4q.kernels.archs import ALL_TARGETS, EMULATED_SM_80
from fp4q.numerics.groups import group_amax, nvfp4_scales
from fp4q.numerics.hadamard import TE_WGRAD_SIGN_MASK, hadamard16
from fp4q.numerics.philox import group_random_words, philox4x32_10
from fp4q.numerics.stochastic import cvt_rs_random_bytes, e2m1_encode_stochastic, e2m1_round_stochastic
from fp4q.numerics.training import R4, _block_sse
from test_reference_stochastic import PHILOX_KAT

gpu = pytest.mark.gpu
BUILDS = ["device", EMULATED_SM_80]
ITEMS = 1 << 14  # 16-value items, a multiple of 16


def interesting_values(rng, count: int) -> np.ndarray:
    """``count`` float32 values: the named edge cases first (NaN, infinities, zeros, the grid,
    its ties and their neighbours, 6 and above, denormals), then random bit patterns and
    values spread over the grid, in random order after the named ones."""
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5], np.float32)
    above = np.array([6.5, 7, 8, 1e30, np.finfo(np.float32).max], np.float32)
    denormals = np.array([1e-45, 1e-40, 2.0**-126 * 0.5, np.nextafter(np.float32(2.0**-126), np.float32(0))], np.float32)
    named = np.concatenate([grid, ties, above, denormals])
    with np.errstate(over="ignore"):
        named = np.concatenate([named, np.nextafter(named, np.float32(np.inf)), np.nextafter(named, np.float32(0))])
    named = np.concatenate([named, -named, np.array([np.nan, -np.nan, np.inf, -np.inf], np.float32)])
    rest = count - named.size
    bits = rng.integers(0, 2**32, size=rest // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    spread = ((rng.random(rest - rest // 2, dtype=np.float32) * 14 - 7)).astype(np.float32)
    return np.concatenate([named, bits, spread]).astype(np.float32)


def bf16_values(rng, count: int) -> np.ndarray:
    """float32 values of bf16 inputs over many magnitudes (what the transforms see)."""
    v = rng.standard_normal(count).astype(np.float32) * np.exp2(rng.integers(-20, 20, count)).astype(np.float32)
    return (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


# --- the software path, transcribed (CPU) ---------------------------------------------------------------------------


def software_round_stochastic(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """numerics/stochastic.cuh's e2m1_round_stochastic step for step: float32 products by
    powers of two are exact, cvt.rzi truncates (NaN to 0)."""
    a = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore"):
        units_256 = np.where(a < 2, np.float32(512), np.where(a < 4, np.float32(256), np.float32(128)))
        first = np.where(a < 2, 0, np.where(a < 4, 2, 4)).astype(np.uint32)
        scaled = a * units_256
        n = np.where(a < 6, np.trunc(np.where(a < 6, scaled, 0)), 0).astype(np.uint32)
        magnitude = np.where(a < 6, ((n + r.astype(np.uint32)) >> 8) + first, 7)
    sign = (v.view(np.uint32) >> 28) & 8
    return np.where(np.isnan(v), 7, magnitude | sign).astype(np.uint8)


def software_random_bytes(rbits: np.ndarray) -> np.ndarray:
    """cvt_rs_random_bytes: prmt.b32 of {brev(rbits), rbits} with selector 0x6372."""
    brev = np.array([int(f"{int(w):032b}"[::-1], 2) for w in rbits], np.uint64)
    pool = rbits.astype(np.uint64) | (brev << np.uint64(32))  # bytes 0-3: rbits, 4-7: brev
    return np.stack([((pool >> np.uint64(8 * s)) & np.uint64(0xFF)).astype(np.uint8) for s in (2, 7, 3, 6)], axis=-1)


def test_software_stochastic_rounding_is_the_references_for_every_byte():
    v = interesting_values(np.random.default_rng(0), 1 << 12)
    r = np.broadcast_to(np.arange(256, dtype=np.uint8), (v.size, 256)).copy()
    vv = np.repeat(v[:, None], 256, axis=1)
    np.testing.assert_array_equal(software_round_stochastic(vv, r), e2m1_round_stochastic(vv, r))


def test_software_random_bytes_are_the_references():
    rng = np.random.default_rng(1)
    words = np.concatenate([np.array([0, 0xFFFFFFFF, 0x01020304, 0x80000001], np.uint32),
                            rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)])
    np.testing.assert_array_equal(software_random_bytes(words), cvt_rs_random_bytes(words))


CVT_RS = ('extern "C" __global__ void k(const float* x, unsigned* y) {\n    unsigned short d;\n'
          '    asm("cvt.rs.satfinite.e2m1x4.f32 %0, {%1, %2, %3, %4}, %5;" : "=h"(d)\n'
          '        : "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3]), "r"(y[1]));\n    y[0] = d;\n}\n')


@pytest.mark.parametrize("arch", sorted(ALL_TARGETS))
def test_no_target_has_cvt_rs(arch, tmp_path):
    # The software path is every target's: NVRTC takes .rs only for sm_100a and sm_103a. If a
    # target gains it, its kernels may call the instruction once its byte order is checked on
    # hardware against the spec's mapping.
    with pytest.raises(CompileError, match=r"Feature '\.rs' not supported"):
        compile_source(KernelSource("k", CVT_RS, arch), cache=BinaryCache(tmp_path))


# --- the probe on the GPU -------------------------------------------------------------------------------------------


class ProbeInputs:
    def __init__(self, seed: int, rng_words, mask: int, tensor_sf: float, values: np.ndarray):
        rng = np.random.default_rng(seed)
        self.counters = rng.integers(0, 2**32, (ITEMS, 4), dtype=np.uint64).astype(np.uint32)
        self.counters[: len(PHILOX_KAT)] = [c for c, _, _ in PHILOX_KAT]
        self.keys = rng.integers(0, 2**32, (ITEMS, 2), dtype=np.uint64).astype(np.uint32)
        self.keys[: len(PHILOX_KAT)] = [k for _, k, _ in PHILOX_KAT]
        self.rng = np.array(rng_words, np.uint32)
        self.v = values.reshape(ITEMS, 16)
        self.rbytes = rng.integers(0, 256, (ITEMS, 16), dtype=np.uint8)
        self.rbits = rng.integers(0, 2**32, (ITEMS, 4), dtype=np.uint64).astype(np.uint32)
        self.mask = mask
        self.tensor_sf = np.float32(tensor_sf)


def run_probe(inp: ProbeInputs, build: str) -> dict[str, np.ndarray]:
    cp = pytest.importorskip("cupy")
    from fp4q.cuda import driver
    from fp4q.jit.loader import get_kernel
    from fp4q.ops.plans import KernelLaunch
    from probe import training_probe_spec

    dev = driver.device(cp.cuda.Device().id)
    if build != "device" and dev.arch != "sm_90a":
        pytest.skip(f"the {build} build is compiled for sm_90a; this device's target is {dev.arch}")
    spec = training_probe_spec(dev.arch if build == "device" else build)
    kernel = get_kernel(spec, dev.ordinal)
    ins = {name: cp.asarray(getattr(inp, name)) for name in ("counters", "keys", "rng", "v", "rbytes", "rbits")}
    outs = {"philox": cp.zeros((ITEMS, 4), cp.uint32), "group_words": cp.zeros((ITEMS, 4), cp.uint32),
            "rounded": cp.zeros((ITEMS, 16), cp.uint8), "words": cp.zeros((ITEMS, 2), cp.uint32),
            "transformed": cp.zeros((ITEMS, 16), cp.float32), "inverted": cp.zeros((ITEMS, 16), cp.float32),
            "errors": cp.zeros((ITEMS, 2), cp.float32), "scales": cp.zeros(ITEMS, cp.uint32),
            "block_errors": cp.zeros((ITEMS // 16, 2), cp.float32), "block_scales": cp.zeros(ITEMS // 16, cp.uint32)}
    scalars = {"mask": inp.mask, "tensor_sf": float(inp.tensor_sf), "items": ITEMS}
    values = tuple(scalars[p.name] if p.name in scalars else (ins.get(p.name) if p.name in ins else outs[p.name]).data.ptr
                   for p in spec.params)
    launch = KernelLaunch(None, kernel, 256, tuple((p.name, p.kind) for p in spec.params))
    launch(cp.cuda.get_current_stream().ptr, False, values)
    cp.cuda.get_current_stream().synchronize()
    return {name: cp.asnumpy(a) for name, a in outs.items()}


def assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, except that any NaN matches any NaN (payloads are the hardware's)."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    bad = np.flatnonzero(got[keep].view(np.uint32) != want[keep].view(np.uint32))
    assert not bad.size, (got[keep][bad[:4]], want[keep][bad[:4]])


SEED, OFFSET = 0x0123456789ABCDEF, 0xFEDCBA9876543210


@gpu
@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("group_base, direction", [(0, "rowwise"), ((1 << 32) - 100, "columnwise"),
                                                   ((1 << 62) + 5, "rowwise")])
def test_philox_and_group_words(build, group_base, direction):
    rng_words = [SEED & 0xFFFFFFFF, SEED >> 32, OFFSET & 0xFFFFFFFF, OFFSET >> 32, group_base & 0xFFFFFFFF,
                 group_base >> 32, {"rowwise": 0, "columnwise": 1}[direction]]
    inp = ProbeInputs(2, rng_words, 0, 1.0, bf16_values(np.random.default_rng(2), 16 * ITEMS))
    out = run_probe(inp, build)
    for i, (_, _, expected) in enumerate(PHILOX_KAT):  # Random123's known answers
        np.testing.assert_array_equal(out["philox"][i], np.array(expected, np.uint32))
    np.testing.assert_array_equal(out["philox"], philox4x32_10(inp.counters, inp.keys))
    groups = np.arange(ITEMS, dtype=np.uint64) + np.uint64(group_base)
    np.testing.assert_array_equal(out["group_words"], group_random_words(SEED, OFFSET, groups, direction))


@gpu
@pytest.mark.parametrize("build", BUILDS)
def test_stochastic_rounding_bit_exact(build):
    rng = np.random.default_rng(3)
    inp = ProbeInputs(3, [0] * 7, 0, 1.0, interesting_values(rng, 16 * ITEMS))
    out = run_probe(inp, build)
    np.testing.assert_array_equal(out["rounded"], e2m1_round_stochastic(inp.v, inp.rbytes))
    codes = e2m1_encode_stochastic(inp.v, inp.rbits).astype(np.uint32).reshape(ITEMS, 2, 8)
    want = (codes << (4 * np.arange(8, dtype=np.uint32))).sum(axis=-1, dtype=np.uint32)
    np.testing.assert_array_equal(out["words"], want)


@gpu
@pytest.mark.parametrize("build", BUILDS)
def test_stochastic_rounding_every_byte_of_the_named_values(build):
    # Each named value with each of the 256 random bytes (16 items per value).
    named = interesting_values(np.random.default_rng(4), 1 << 12)[:ITEMS // 16]
    v = np.repeat(named, 256).astype(np.float32)
    v = np.concatenate([v, np.zeros(16 * ITEMS - v.size, np.float32)])
    inp = ProbeInputs(4, [0] * 7, 0, 1.0, v)
    inp.rbytes = np.tile(np.arange(256, dtype=np.uint8), ITEMS // 16).reshape(ITEMS, 16)
    out = run_probe(inp, build)
    np.testing.assert_array_equal(out["rounded"], e2m1_round_stochastic(inp.v, inp.rbytes))


@gpu
@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("mask", [0, TE_WGRAD_SIGN_MASK, 0xFFFF, 0x0001])
@pytest.mark.parametrize("kind", ["bf16", "float32 bits"])
def test_hadamard_and_inverse_bit_exact(build, mask, kind):
    rng = np.random.default_rng(5)
    v = bf16_values(rng, 16 * ITEMS) if kind == "bf16" else interesting_values(rng, 16 * ITEMS)
    inp = ProbeInputs(5, [0] * 7, mask, 1.0, v)
    out = run_probe(inp, build)
    assert_same_floats(out["transformed"], hadamard16(inp.v, mask))
    assert_same_floats(out["inverted"], hadamard16(inp.v, mask, inverse=True))


def four_over_six_want(xb: np.ndarray, tsf: np.float32):
    """(errors (n, 2): 6 then 4, scale words) of blocks xb (n, rows, 16), as the probe packs them."""
    amax = group_amax(xb.reshape(xb.shape[0], -1))
    sf6, inv6 = nvfp4_scales(amax, tsf)
    sf4, inv4 = nvfp4_scales(amax, tsf, R4)
    e6, e4 = _block_sse(xb, sf6, tsf, inv6), _block_sse(xb, sf4, tsf, inv4)
    four = e4 < e6
    kept = np.where(four, sf4, sf6)
    words = (sf6.astype(np.uint32) | (sf4.astype(np.uint32) << 8) | (kept.astype(np.uint32) << 16)
             | (four.astype(np.uint32) << 24))
    return np.stack([e6, e4], axis=-1), words


@gpu
@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("tensor_sf", [1.0, 0.37, 1536 / 3.0, 2.0**-20, 2.0**100])
def test_four_over_six_errors_and_choice_bit_exact(build, tensor_sf):
    rng = np.random.default_rng(6)
    v = bf16_values(rng, 16 * ITEMS).reshape(ITEMS, 16)
    v[:8, 0] = [0, np.nan, np.inf, -np.inf, 6, -6, 1e-40, 448]  # one in each of eight groups
    v[8] = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6] * 2, np.float32)  # on the grid: 6 exact, 4 not
    v[9] = np.array([0, 1, 2, 3, 4] + [4] * 11, np.float32)  # 4 exact
    v[10] = 0.0  # equal errors: 6 on the tie
    inp = ProbeInputs(6, [0] * 7, 0, tensor_sf, v.reshape(-1))
    out = run_probe(inp, build)
    assert not (out["scales"] >> 31).any(), "four_over_six_scale disagrees with its candidates' choice"
    errors, words = four_over_six_want(inp.v.reshape(ITEMS, 1, 16), inp.tensor_sf)
    assert_same_floats(out["errors"], errors)
    np.testing.assert_array_equal(out["scales"], words)
    if tensor_sf <= 1:  # both candidates win somewhere (larger scales saturate most groups' bytes: 6 wins)
        assert ((words >> 24) & 1).any() and not ((words >> 24) & 1).all()
    block_errors, block_words = four_over_six_want(inp.v.reshape(ITEMS // 16, 16, 16), inp.tensor_sf)
    assert_same_floats(out["block_errors"], block_errors)
    np.testing.assert_array_equal(out["block_scales"], block_words)
