"""A strong Triton NVFP4 quantizer, bit-exact to docs/NVFP4_SPEC.md: the benchmark's Triton contender.

Written to be as fast as Triton allows, so that the benchmark compares fp4q
with the best a Triton user would write, not a straw man:

- x is read as int32 words (two bf16 each, element 2i in the low half), a
  (rows, groups, 2, 4 words) block per program: each thread's innermost 4
  words are one 16-byte load, and the even/odd split that the nibble
  packing needs comes for free;
- the NaN-dropping group amax is an unsigned max of one multiply-add per
  element: each bf16 magnitude plus 0x7F, modulo 2**15, in the top 15 bits
  of a word, which keeps every number's order and wraps the 127 NaN
  magnitudes below all of them (_amax);
- bf16 -> float32 is a shift or a mask; r = 1 / tensor_sf once per program,
  inv = 1 / d per group, both IEEE divisions (div_rn), as the spec requires;
- the e4m3 scale is rounded in integer arithmetic (normals: round the
  mantissa to 3 bits; subnormals: round s * 2**9 to an integer with the
  2**23 trick), saturating at 448, NaN -> 0x7F, sign kept;
- e2m1 is three roundings onto an integer grid (FMAs whose products by 2
  and 1/2 are exact), an integer min and one signed compare for the sign
  (_e2m1);
- codes and scales are stored as words: each thread's four bytes of codes
  (eight elements) as one int32, and each row's four scale bytes of a
  128x4 tile as one int32 at its swizzled word;
- the grid covers the padded scale tensor (rows up to a multiple of 128,
  groups up to a multiple of 4): the padding gets 0x00 from the same code,
  without a separate fill; where the shape needs no bounds (every program's
  rows and groups inside the tensor), the loads and stores carry no masks
  (the EVEN specialization).

The tile (rows per program, elements per program, warps) is chosen per
shape: TUNED, the winners of ``python -m scripts.bench.tune_triton`` on the
benchmark's GPU (triton_tuned.json beside this file), where it has the
shape, else CONFIGS are tried by the benchmark.
"""

from __future__ import annotations

import json
import pathlib

try:
    import triton
    import triton.language as tl

    TRITON_STATUS = "ok"
except ModuleNotFoundError:
    triton = tl = None
    TRITON_STATUS = "not installed"
except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
    triton = tl = None
    TRITON_STATUS = f"import failed: {type(exc).__name__}: {exc}"

# (BLOCK_M rows, BLOCK_K elements, num_warps); BLOCK_K a multiple of 64 (4 groups: one scale word).
CONFIGS = (
    (1, 1024, 4),
    (2, 512, 4),
    (4, 512, 4),
    (4, 1024, 8),
    (8, 256, 4),
    (8, 512, 8),
    (16, 256, 8),
    (16, 512, 8),
    (8, 1024, 8),
    (16, 1024, 8),
)

TUNED_FILE = pathlib.Path(__file__).with_name("triton_tuned.json")


def load_tuned(path: pathlib.Path = TUNED_FILE) -> dict[tuple[int, int], tuple[int, int, int]]:
    """{(M, K): (BLOCK_M, BLOCK_K, num_warps)} from a tuning run's file; empty where there is none."""
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())["best"]
    return {(e["m"], e["k"]): (e["block_m"], e["block_k"], e["warps"]) for e in entries}


TUNED = load_tuned()


def tiles_for(m: int, k: int) -> tuple[tuple[int, int, int], ...]:
    """The tiles the benchmark tries at (m, k): the tuned one where the table has the shape, else CONFIGS."""
    tuned = TUNED.get((m, k))
    return (tuned,) if tuned else CONFIGS


# e2m1 by rounding onto the integer grid of M = 1.5 * 2**23 (bits 0x4B400000): the
# code of |v| is rint(min(2|v|, |v| + 2, |v|/2 + 4, 7)), each branch one rounding
# FMA or add; the branches are positive floats, so their bit patterns order like their
# values and an integer min takes them (NaN and Inf, above every finite pattern,
# give the clamp's 7 without a float min's NaN rules).
_M = 12582912.0
_M_BITS = 0x4B400000
# int32 bits of -Inf: a float is negative and not NaN exactly where its bits, as a
# signed integer, are at most this (negative NaNs lie between it and -1).
_NEG_INF_BITS = -8388608

if triton is not None:
    # A jit function reads a global only when it is a constexpr object.
    M, M_BITS, NEG_INF_BITS = tl.constexpr(_M), tl.constexpr(_M_BITS), tl.constexpr(_NEG_INF_BITS)

    @triton.jit
    def _e4m3(s):
        """(code, float32 value) of e4m3fn(s): RNE, subnormals, saturation at 448, NaN -> 0x7F, sign kept."""
        bits = s.to(tl.int32, bitcast=True)
        mag = bits & 0x7FFFFFFF
        is_nan = mag > 0x7F800000
        # Normals (|s| >= 2**-6): round the 23-bit mantissa to 3 bits, ties to even; a carry
        # moves into the exponent, which is the right result.
        rounded = (mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20
        normal_code = rounded - ((127 - 7) << 3)
        normal_val = (rounded << 20).to(tl.float32, bitcast=True)
        # Subnormals: steps of 2**-9; s * 512 is exact and adding 2**23 rounds it to an integer.
        sub = (tl.abs(s) * 512.0 + 8388608.0).to(tl.int32, bitcast=True) - 0x4B000000
        sub_val = sub.to(tl.float32) * 0.001953125
        small = mag < 0x3C800000  # 2**-6
        code = tl.where(small, sub, normal_code)
        val = tl.where(small, sub_val, normal_val)
        big = mag >= 0x43E00000  # 448 and above, Inf too; below 448 rounds to at most 448
        code = tl.where(big, 0x7E, code)
        val = tl.where(big, 448.0, val)
        neg = bits < 0
        code = tl.where(is_nan, 0x7F, code | tl.where(neg, 0x80, 0))
        val = tl.where(neg, -val, val)
        val = tl.where(is_nan, s, val)
        return code, val

    @triton.jit
    def _e2m1(v):
        """E2M1 codes (int32, 0..15) of float32 v: RNE with the spec's ties, saturation, NaN -> 7, -0 -> 8."""
        a = tl.abs(v)
        # a * 2 and a * 0.5 are exact, so each FMA rounds once, as the add does.
        t0 = tl.fma(a, 2.0, M).to(tl.int32, bitcast=True)
        t1 = (a + (M + 2.0)).to(tl.int32, bitcast=True)
        t2 = tl.fma(a, 0.5, M + 4.0).to(tl.int32, bitcast=True)
        code = tl.minimum(tl.minimum(t0, t1), tl.minimum(t2, M_BITS + 7)) - M_BITS
        negative = v.to(tl.int32, bitcast=True) <= NEG_INF_BITS  # sign set, not NaN
        return code | tl.where(negative, 8, 0)

    @triton.jit
    def _amax_keys(u):
        """Order keys of the two bf16 halves of each word of u (uint32): a magnitude m (15 bits)
        becomes (m + 0x7F) mod 2**15 in the top 15 bits, so that numbers 0..0x7F80 keep their
        order as 0x7F..0x7FFF and the NaNs 0x7F81..0x7FFF wrap to 0..0x7E, below every number.
        The low element's key is u * 2**17 + 0x7F * 2**17, the high one's u * 2 + 0x7F * 2**17
        (its low 17 bits, the low element's bits, stay below the compared field and never carry
        into it)."""
        return u * 131072 + 0xFE0000, u * 2 + 0xFE0000

    @triton.jit
    def _key_amax(key):
        """The float32 amax of a group from the largest of its _amax_keys: an all-NaN group gives 0."""
        key = key >> 17
        magnitude = tl.where(key >= 0x7F, key - 0x7F, 0)
        return (magnitude << 16).to(tl.float32, bitcast=True)

    @triton.jit
    def _amax(u):
        """The NaN-dropping amax (float32) of each group of u (uint32 words, bf16 pairs; groups on
        axes 0 and 1)."""
        lo_key, hi_key = _amax_keys(u)
        return _key_amax(tl.max(tl.max(tl.maximum(lo_key, hi_key), axis=3), axis=2))

    @triton.jit
    def _scales(amax, tsf, r):
        """(e4m3 code, inv) of groups of amax under tensor_sf tsf, r = 1 / tsf: the spec's steps 3-5."""
        s = tsf * (amax * 0.1666666716337204)  # float32(1/6) exactly; two roundings in this order
        sf_code, sf_val = _e4m3(s)
        d = sf_val * r
        return sf_code, tl.where(d == 0.0, 0.0, tl.div_rn(tl.full(d.shape, 1.0, tl.float32), d))

    @triton.jit
    def _halves(u):
        """The float32 values of the low and high bf16 halves of uint32 words u."""
        return (u << 16).to(tl.float32, bitcast=True), (u & 0xFFFF0000).to(tl.float32, bitcast=True)

    @triton.jit
    def _quantize_groups(u, amax, tsf, r):
        """(scale codes (R, G), q words (R, G, 2) int32) of u (R, G, 2, 4): uint32 words of bf16 pairs,
        a group of 16 on axes 2 and 3, amax = _amax(u), under tensor_sf tsf, r = 1 / tsf."""
        sf_code, inv = _scales(amax, tsf, r)
        inv = inv[:, :, None, None]
        x_lo, x_hi = _halves(u)
        byte = _e2m1(x_lo * inv) | (_e2m1(x_hi * inv) << 4)  # word i of the row: q's byte i
        # Four bytes of codes (eight elements, disjoint bits) as one int32 of q.
        return sf_code, tl.sum(byte << (tl.arange(0, 4) * 8)[None, None, None, :], axis=3)

    @triton.jit
    def _scale_words(sf_code, ROWS: tl.constexpr, WORDS: tl.constexpr):
        """Scale bytes (ROWS, 4 * WORDS) as int32 words (ROWS, WORDS): four groups of a row, the first lowest."""
        shifts = tl.arange(0, 4) * 8
        return tl.sum(tl.reshape(sf_code, (ROWS, WORDS, 4)) << shifts[None, None, :], axis=2)

    @triton.jit
    def _swizzled_words(rows, tiles, GW):
        """Word offsets (rows x tiles) of the swizzled scales: row rows' four scales in 128x4 tile
        column tiles, GW tile columns (scale words per row)."""
        return (((rows // 128) * GW).to(tl.int64)[:, None] + tiles[None, :]) * 128 \
            + ((rows % 32) * 4 + (rows % 128) // 32)[:, None]

    @triton.jit
    def _nvfp4_kernel(xw_ptr, qw_ptr, sfw_ptr, tsf_ptr, M, K, M_pad,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EVEN: tl.constexpr):
        BG: tl.constexpr = BLOCK_K // 16
        pid_m = tl.program_id(0)
        pid_g = tl.program_id(1)
        G = K // 16
        GW = (G + 3) // 4  # scale words per row: ceil(G / 4)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        groups = pid_g * BG + tl.arange(0, BG)
        half = tl.arange(0, 2)
        word = tl.arange(0, 4)
        valid = (rows < M)[:, None] & (groups < G)[None, :]  # (BM, BG)
        inner = (groups * 8)[None, :, None, None] + (half * 4)[None, None, :, None] + word[None, None, None, :]
        offs = (rows.to(tl.int64) * (K // 2))[:, None, None, None] + inner
        if EVEN:
            w = tl.load(xw_ptr + offs)
        else:
            w = tl.load(xw_ptr + offs, mask=valid[:, :, None, None], other=0)  # (BM, BG, 2, 4) int32
        u = w.to(tl.uint32, bitcast=True)
        amax = _amax(u)

        tsf = tl.load(tsf_ptr)
        sf_code, codes = _quantize_groups(u, amax, tsf, tl.div_rn(1.0, tsf))
        q_offs = (rows.to(tl.int64) * (K // 8))[:, None, None] + (groups * 2)[None, :, None] + half[None, None, :]
        if EVEN:
            tl.store(qw_ptr + q_offs, codes)
        else:
            tl.store(qw_ptr + q_offs, codes, mask=valid[:, :, None])

        # A row's four scale bytes of a 128x4 tile as one int32, at its swizzled word
        # (byte offset / 4); padding rows and groups get 0x00.
        sf_words = _scale_words(tl.where(valid, sf_code, 0), BLOCK_M, BG // 4)
        tiles = pid_g * (BG // 4) + tl.arange(0, BG // 4)
        sf_offs = _swizzled_words(rows, tiles, GW)
        if EVEN:
            tl.store(sfw_ptr + sf_offs, sf_words)
        else:
            tl.store(sfw_ptr + sf_offs, sf_words, mask=(rows < M_pad)[:, None] & (tiles < GW)[None, :])


def swizzled_sf_bytes(m: int, k: int) -> int:
    """Bytes of the swizzled scale tensor: ceil(M/128) * ceil(G/4) * 512."""
    return -(-m // 128) * -(-(k // 16) // 4) * 512


def outputs(torch, x):
    """Empty (q, sf) torch uint8 tensors for bf16 x (M, K): q (M, K/2), sf the flat swizzled scales."""
    m, k = x.shape
    return (torch.empty((m, k // 2), dtype=torch.uint8, device=x.device),
            torch.empty(swizzled_sf_bytes(m, k), dtype=torch.uint8, device=x.device))


def even(m: int, k: int, config) -> bool:
    """Whether every program of config's grid at (m, k) lies inside the tensor: no bounds to test."""
    block_m, block_k, _ = config
    groups = k // 16
    return m % 128 == 0 and m % block_m == 0 and groups % (block_k // 16) == 0


def quantize(x, tsf, q, sf, config):
    """NVFP4 of bf16 torch tensor x (M, K), K % 16 == 0, with float32 0-d device tensor tsf.

    Writes q (M, K/2) uint8 and the swizzled scales into sf (contiguous uint8
    of swizzled_sf_bytes(M, K) bytes), padding included.
    """
    block_k = config[1]
    m, k = x.shape
    if k % 16 or block_k % 64 or not x.is_contiguous() or not q.is_contiguous() or not sf.is_contiguous():
        raise ValueError("K must be a multiple of 16, BLOCK_K of 64, and every tensor contiguous")
    if sf.numel() != swizzled_sf_bytes(m, k) or tuple(q.shape) != (m, k // 2):
        raise ValueError(f"q must be ({m}, {k // 2}) and sf {swizzled_sf_bytes(m, k)} bytes")
    kernel_args, grid = launch(x, tsf, q, sf, config)
    _nvfp4_kernel[grid](*kernel_args, **launch_options(m, k, config))


def launch(x, tsf, q, sf, config) -> tuple[tuple, tuple[int, int]]:
    """The kernel's arguments (the tensors viewed as int32 words) and its grid, which covers the
    padded scale tensor."""
    import torch

    block_m, block_k, _ = config
    m, k = x.shape
    m_pad = -(-m // 128) * 128
    g_pad = -(-(k // 16) // 4) * 4
    grid = (triton.cdiv(m_pad, block_m), triton.cdiv(g_pad * 16, block_k))
    return (x.view(torch.int32), q.view(torch.int32), sf.view(torch.int32), tsf, m, k, m_pad), grid


def launch_options(m: int, k: int, config) -> dict:
    block_m, block_k, warps = config
    return dict(BLOCK_M=block_m, BLOCK_K=block_k, EVEN=even(m, k, config), num_warps=warps,
                enable_fp_fusion=False)  # x * inv is rounded before e2m1 (no fma into the grid add)
