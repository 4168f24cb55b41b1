"""A one-pass Triton NVFP4 training quantizer, bit-exact to fp4q.reference.quantize_nvfp4_training
for 1D groups rounded to nearest with a float tensor_sf: bench_training's Triton contender.

Each program loads one BLOCK_M x BLOCK_K tile of x once, as int32 words (two bf16 each,
element 2i in the low half), and writes both directions from it:

- rowwise (groups of 16 along K): q (M, K/2) and the swizzled scales over M rows, with
  bench_triton's group quantizer (_quantize_groups) on the tile;
- columnwise (groups of 16 along M: the rowwise quantization of x.T): q_t (K, M/2), a
  byte holding rows 2i (low nibble) and 2i+1 of one column, and the swizzled scales over
  the K rows of x.T. The low and high halves of a word are the even and odd columns, each
  quantized on its own, interleaved again to store.

The numerics are bench_triton's jit helpers, imported (the NaN-dropping amax keys, the
e4m3 scale and e2m1 roundings, the 128x4 swizzled scale words): one rule, one place.

The layout: Triton gives each thread VEC consecutive words (the load's vector) of some
rows of the tile, spreading the tile's rows over the threads round-robin. Tile row t is
x's row 16 * (t % G_T) + t // G_T (G_T = BLOCK_M / 16 columnwise groups), so that a
thread's rows belong to one columnwise group: where the threads along the rows number
G_T (most of CONFIGS; in the others, twice that, a group spans two warps), a columnwise
group is reduced, scaled and packed inside one thread, and only the rowwise groups (8
words of a row: 8 / VEC threads) need shuffles. Codes and
scales are stored as int32 words; the grid covers both padded scale tensors (x's rows
and columns up to multiples of 128), whose padding gets 0x00 from the same code; where
nothing reaches outside the tensors (EVEN) there are no masks.

Shapes: M and K multiples of 16 (the spec's rule for the columnwise direction); tiles
BLOCK_M x BLOCK_K, each a power of two of at least 64 (a scale word is 4 groups of 16 in
either direction), VEC 2 or 4 words (with 1, Triton would spread the threads along the
rows first).
"""

from __future__ import annotations

from scripts.bench import bench_triton as bt
from scripts.bench.bench_triton import TRITON_STATUS, swizzled_sf_bytes, tl, triton

__all__ = ["CONFIGS", "TRITON_STATUS", "even", "outputs", "quantize_training", "triton"]

# (BLOCK_M, BLOCK_K, VEC, num_warps), chosen by what ptxas makes of them for sm_90 (no GPU
# has timed them yet; the benchmark times each). Per thread: a columnwise group's 16 rows x 2
# words (64 elements; about 55 PTX instructions per element, 255 registers, no spills) or
# x 4 words (128 elements; about 45, 200-280 bytes spilled); or 8 rows x 4 words, a group
# over two warps (64 elements; about 54, 168-220 registers, no spills).
CONFIGS = (
    (64, 64, 2, 2),
    (128, 64, 2, 4),
    (64, 128, 2, 4),
    (128, 128, 2, 8),
    (128, 128, 4, 4),
    (64, 256, 4, 4),
    (64, 128, 4, 4),
    (128, 128, 4, 8),
)

if triton is not None:
    from scripts.bench.bench_triton import (_amax, _amax_keys, _e2m1, _halves, _key_amax, _quantize_groups,
                                            _scale_words, _scales, _swizzled_words)

    @triton.jit
    def _column_words(x, inv):
        """q_t words (2, G, C) of float32 x (16, G, C), a columnwise group on axis 0, scaled by its inv
        (G, C): word s of group g holds rows 8s .. 8s + 7 of a column, row 2i in the low nibble of byte i."""
        codes = tl.reshape(_e2m1(x * inv[None, :, :]), (2, 8, x.shape[1], x.shape[2]))
        return tl.sum(codes << (tl.arange(0, 8) * 4)[None, :, None, None], axis=1)

    @triton.jit
    def _training_kernel(xw_ptr, qw_ptr, sfw_ptr, qtw_ptr, sftw_ptr, tsf_ptr, M, K,
                         BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, VEC: tl.constexpr, EVEN: tl.constexpr):
        BW: tl.constexpr = BLOCK_K // 2  # words of a tile row
        BG: tl.constexpr = BLOCK_K // 16  # rowwise groups of a tile row
        BGT: tl.constexpr = BLOCK_M // 16  # columnwise groups of a tile column
        row0 = tl.program_id(0) * BLOCK_M
        col0 = tl.program_id(1) * BLOCK_K
        G, GT = K // 16, M // 16
        # Tile row t is x's row 16 * (t % BGT) + t // BGT (the module's docstring says why): viewed
        # as (16, BGT, BW), the tile is (row in group, columnwise group, word).
        t = tl.arange(0, BLOCK_M)
        rows = row0 + (t % BGT) * 16 + t // BGT
        wcols = col0 // 2 + tl.arange(0, BW)
        # VEC consecutive words of a row per thread: the load's vector, and so the elements per thread.
        x_offs = tl.max_contiguous((rows.to(tl.int64) * (K // 2))[:, None] + wcols[None, :], [1, VEC])
        if EVEN:
            w = tl.load(xw_ptr + x_offs)
        else:
            w = tl.load(xw_ptr + x_offs, mask=(rows < M)[:, None] & (wcols < K // 2)[None, :], other=0)
        u = w.to(tl.uint32, bitcast=True)  # (BLOCK_M, BW)

        # Rowwise, as bench_triton: a group is eight consecutive words of a row.
        ur = tl.reshape(u, (BLOCK_M, BG, 2, 4))
        amax = _amax(ur)
        tsf = tl.load(tsf_ptr)
        r = tl.div_rn(1.0, tsf)
        sf_code, q = _quantize_groups(ur, amax, tsf, r)  # q: (BLOCK_M, BG, 2)
        q_cols = col0 // 8 + tl.arange(0, BLOCK_K // 8)
        q_offs = (rows.to(tl.int64) * (K // 8))[:, None, None] + tl.reshape(q_cols, (BG, 2))[None, :, :]
        groups = col0 // 16 + tl.arange(0, BG)
        sf_words = _scale_words(tl.where((rows < M)[:, None] & (groups < G)[None, :], sf_code, 0), BLOCK_M, BG // 4)
        tiles = col0 // 64 + tl.arange(0, BG // 4)
        sf_offs = _swizzled_words(rows, tiles, (G + 3) // 4)

        # Columnwise: a group is 16 rows of one half of a word column (the low halves are the even
        # columns of x, the high halves the odd ones), interleaved again into x.T's rows.
        u = tl.reshape(u, (16, BGT, BW))
        groups_t = row0 // 16 + tl.arange(0, BGT)
        lo_key, hi_key = _amax_keys(u)
        sf_lo, inv_lo = _scales(_key_amax(tl.max(lo_key, axis=0)), tsf, r)  # (BGT, BW)
        sf_hi, inv_hi = _scales(_key_amax(tl.max(hi_key, axis=0)), tsf, r)
        x_lo, x_hi = _halves(u)
        qt = tl.join(_column_words(x_lo, inv_lo), _column_words(x_hi, inv_hi))  # (2, BGT, BW, 2)
        qt = tl.reshape(qt, (2, BGT, BLOCK_K))  # word (s, g) of x.T's row col0 + c
        cols = col0 + tl.arange(0, BLOCK_K)
        qt_cols = (groups_t * 2)[None, :, None] + tl.arange(0, 2)[:, None, None]
        qt_offs = (cols.to(tl.int64) * (M // 8))[None, None, :] + qt_cols
        sft_code = tl.trans(tl.reshape(tl.join(sf_lo, sf_hi), (BGT, BLOCK_K)))  # (BLOCK_K, BGT)
        sft_words = _scale_words(tl.where((cols < K)[:, None] & (groups_t < GT)[None, :], sft_code, 0), BLOCK_K,
                                 BGT // 4)
        tiles_t = row0 // 64 + tl.arange(0, BGT // 4)
        sft_offs = _swizzled_words(cols, tiles_t, (GT + 3) // 4)

        if EVEN:
            tl.store(qw_ptr + q_offs, q)
            tl.store(sfw_ptr + sf_offs, sf_words)
            tl.store(qtw_ptr + qt_offs, qt)
            tl.store(sftw_ptr + sft_offs, sft_words)
        else:
            # Codes inside x (or x.T); scales inside their padded tensors (rows up to a multiple of
            # 128, groups up to one of 4), padding included.
            q_inside = (rows < M)[:, None, None] & (tl.reshape(q_cols, (BG, 2)) < K // 8)[None, :, :]
            tl.store(qw_ptr + q_offs, q, mask=q_inside)
            tl.store(sfw_ptr + sf_offs, sf_words,
                     mask=(rows < (M + 127) // 128 * 128)[:, None] & (tiles < (G + 3) // 4)[None, :])
            tl.store(qtw_ptr + qt_offs, qt, mask=(cols < K)[None, None, :] & (qt_cols < M // 8))
            tl.store(sftw_ptr + sft_offs, sft_words,
                     mask=(cols < (K + 127) // 128 * 128)[:, None] & (tiles_t < (GT + 3) // 4)[None, :])


def outputs(torch, x):
    """Empty (q, sf, q_t, sf_t) torch uint8 tensors for bf16 x (M, K): q (M, K/2), q_t (K, M/2), and
    the flat swizzled scales of x and of x.T."""
    return bt.outputs(torch, x) + bt.outputs(torch, x.T)


def even(m: int, k: int, config) -> bool:
    """Whether every program of config's grid at (m, k) lies inside x and both scale tensors."""
    block_m, block_k = config[:2]
    return m % 128 == 0 and k % 128 == 0 and m % block_m == 0 and k % block_k == 0


def _tile_side(n: int) -> bool:
    return n >= 64 and n & (n - 1) == 0


def quantize_training(x, tsf, q, sf, q_t, sf_t, config) -> None:
    """Both directions of NVFP4 of bf16 torch tensor x (M, K) with float32 0-d device tensor tsf, into
    contiguous uint8 q (M, K/2), sf (swizzled_sf_bytes(M, K) bytes), q_t (K, M/2) and sf_t
    (swizzled_sf_bytes(K, M) bytes), padding included. config: (BLOCK_M, BLOCK_K, VEC, num_warps)."""
    import torch

    block_m, block_k, vec, warps = config
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise ValueError(f"x must be a 2D bf16 tensor, got {tuple(x.shape)} {x.dtype}")
    m, k = x.shape
    if m % 16 or k % 16 or m == 0 or k == 0:
        raise ValueError(f"M and K must be positive multiples of 16 (16-element groups both ways), got {m}x{k}")
    if not (_tile_side(block_m) and _tile_side(block_k)):
        raise ValueError(f"BLOCK_M and BLOCK_K must be powers of two of at least 64, got {block_m}x{block_k}")
    if vec not in (2, 4):
        raise ValueError(f"VEC must be 2 or 4 words, got {vec}")
    if tsf.dtype != torch.float32 or tsf.numel() != 1 or tsf.device != x.device:
        raise ValueError(f"tsf must be one float32 on x's device, got {tsf.dtype} of {tsf.numel()} on {tsf.device}")
    expected = ((m, k // 2), swizzled_sf_bytes(m, k), (k, m // 2), swizzled_sf_bytes(k, m))
    given = (tuple(q.shape), sf.numel(), tuple(q_t.shape), sf_t.numel())
    if given != expected:
        raise ValueError(f"(q shape, sf bytes, q_t shape, sf_t bytes) must be {expected}, got {given}")
    if not all(t.is_contiguous() for t in (x, q, sf, q_t, sf_t)):
        raise ValueError("x and every output must be contiguous")
    if any(t.dtype != torch.uint8 for t in (q, sf, q_t, sf_t)):
        raise ValueError("every output must be uint8")
    grid = (triton.cdiv(-(-m // 128) * 128, block_m), triton.cdiv(-(-k // 128) * 128, block_k))
    words = [t.view(torch.int32) for t in (x, q, sf, q_t, sf_t)]
    _training_kernel[grid](*words, tsf, m, k, BLOCK_M=block_m, BLOCK_K=block_k, VEC=vec, EVEN=even(m, k, config),
                           num_warps=warps, enable_fp_fusion=False)  # x * inv is rounded before e2m1
