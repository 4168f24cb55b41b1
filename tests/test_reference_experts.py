"""The MoE quantizers of the numpy reference (fp4q.reference.quantize_nvfp4_experts,
quantize_nvfp4_batched and their SiLU·mul variants) against NVFP4_SPEC.md, "The project's exact
sequences: experts and batches".

The expected bytes come from the spec's rules transcribed here (the offsets' resolution, the
scale row offsets, the bound), assembled from quantize_nvfp4 of each expert's rows alone, and from
hand-derived bytes: amax 6 under tensor_sf 1 gives scale 0x38 (s = 6 * R6 = 1.0) and d = 1; under
tensor_sf 1000 the scale saturates (0x7E, d = 448 / 1000), as derived in test_reference.py.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fp4q
from fp4q.numerics import experts
from fp4q.numerics.formats import input_float32, round_to
from fp4q.numerics.layouts import swizzled_sf_offset
from fp4q.numerics.prologues import silu_and_mul
from fp4q.numerics.reference import (
    experts_sf_shape,
    quantize_nvfp4,
    quantize_nvfp4_batched,
    quantize_nvfp4_experts,
    resolve_expert_offsets,
    silu_and_mul_quantize_nvfp4_batched,
    silu_and_mul_quantize_nvfp4_experts,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# A row whose group quantizes to known bytes: codes 7 2 1 4 F under d = 1 (tensor_sf 1), and
# 7 4 2 6 F under d = 448 * float32(1/1000) (tensor_sf 1000, 6 * 2.23 -> 6, 1 * 2.23 -> 2, ...).
ROW = [6, 1, 0.5, 2, -6] + [0] * 11
ROW_Q_TSF_1 = [0x27, 0x41, 0x0F, 0, 0, 0, 0, 0]
ROW_Q_TSF_1000 = [0x47, 0x62, 0x0F, 0, 0, 0, 0, 0]


def bf16(values):
    return np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16)


def random_bf16(shape, seed, scale=1.0):
    return bf16(np.random.default_rng(seed).standard_normal(shape) * scale)


def random_scales(n, seed):
    """float32 tensor scales spread over 2**-4 .. 2**10 so that the experts' bytes differ."""
    rng = np.random.default_rng(seed)
    return (np.ldexp(1.0, rng.integers(-4, 11, n)) * rng.uniform(0.5, 1, n)).astype(np.float32)


def offsets_of(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def spec_rows(offsets, m):
    """The spec's recurrence: s[0] = min(max(off[0], 0), M), s[e] = min(max(off[e], s[e - 1]), M)."""
    rows = [min(max(int(offsets[0]), 0), m)]
    for off in offsets[1:]:
        rows.append(min(max(int(off), rows[-1]), m))
    return rows


def spec_blocks(m, num_experts):
    return min(m, (m + 127 * num_experts) // 128)


def place_experts(x, rows, tsf):
    """Expected (q, sf) of the experts quantizer for resolved rows: each expert quantized alone by
    quantize_nvfp4, its swizzled scales written at byte R_e * 4 * ceil(G/4) of a zero buffer of the
    bound's size (vLLM's (rows, 4 * ceil(G/4)) view), rows outside every expert 0x00."""
    m, k = x.shape
    row_bytes = 4 * -(-(k // 16) // 4)
    q = np.zeros((m, k // 2), np.uint8)
    sf = np.zeros(spec_blocks(m, len(tsf)) * 128 * row_bytes, np.uint8)
    sf_row = 0
    for e in range(len(tsf)):
        lo, hi = rows[e], rows[e + 1]
        if hi == lo:
            continue
        q_e, sf_e = quantize_nvfp4(x[lo:hi], tsf[e])
        q[lo:hi] = q_e
        sf[sf_row * row_bytes:sf_row * row_bytes + sf_e.size] = sf_e.ravel()
        sf_row += 128 * -(-(hi - lo) // 128)
    return q, sf


def assert_experts(x, offsets, tsf):
    q, sf = quantize_nvfp4_experts(x, offsets, tsf)
    m, k = x.shape
    assert sf.shape == (spec_blocks(m, len(tsf)), -(-k // 64), 32, 4, 4)
    q_expected, sf_expected = place_experts(x, spec_rows(offsets, m), tsf)
    np.testing.assert_array_equal(q, q_expected)
    np.testing.assert_array_equal(sf.ravel(), sf_expected)


# ----------------------------------------------------------------------- hand-checked


def test_two_experts_by_hand():
    # Rows 0 (expert 0, tensor_sf 1) and 1, 2 (expert 1, tensor_sf 1000), all the same values.
    x = bf16([ROW] * 3)
    q, sf = quantize_nvfp4_experts(x, np.array([0, 1, 3], np.int32), np.array([1, 1000], np.float32))
    np.testing.assert_array_equal(q, np.array([ROW_Q_TSF_1, ROW_Q_TSF_1000, ROW_Q_TSF_1000], np.uint8))
    # P = min(3, floor((3 + 254) / 128)) = 2 blocks; expert 1 starts at row 128 (block 1).
    expected = np.zeros((2, 1, 32, 4, 4), np.uint8)
    expected[0, 0, 0, 0, 0] = 0x38  # expert 0, row 0
    expected[1, 0, 0, 0, 0] = 0x7E  # expert 1, row 0
    expected[1, 0, 1, 0, 0] = 0x7E  # expert 1, row 1: [.., r % 32, (r % 128) // 32, j % 4]
    np.testing.assert_array_equal(sf, expected)


def test_masked_batch_by_hand():
    # Batch 0 (tensor_sf 1) has one valid row; its second row (100s) is not read. Batch 1
    # (tensor_sf 1000) has both rows valid.
    x = bf16([[ROW, [100] * 16], [ROW, ROW]])
    q, sf = quantize_nvfp4_batched(x, np.array([1, 1000], np.float32), np.array([1, 2], np.int32))
    np.testing.assert_array_equal(q, np.array([[ROW_Q_TSF_1, [0] * 8], [ROW_Q_TSF_1000] * 2], np.uint8))
    expected = np.zeros((2, 1, 1, 32, 4, 4), np.uint8)
    expected[0, 0, 0, 0, 0, 0] = 0x38
    expected[1, 0, 0, 0, 0, 0] = 0x7E
    expected[1, 0, 0, 1, 0, 0] = 0x7E
    np.testing.assert_array_equal(sf, expected)


# ---------------------------------------------------------------------------- experts


@pytest.mark.parametrize("m", [0, 1, 31, 127, 128, 129, 300])
@pytest.mark.parametrize("k", [16, 80, 128])
def test_one_expert_is_quantize_nvfp4(m, k):
    x = random_bf16((m, k), seed=m + k)
    tsf = np.float32(37.5)
    q, sf = quantize_nvfp4_experts(x, np.array([0, m], np.int32), np.array([tsf]))
    q_one, sf_one = quantize_nvfp4(x, tsf)
    assert sf.shape == sf_one.shape
    np.testing.assert_array_equal(q, q_one)
    np.testing.assert_array_equal(sf, sf_one)


ROUTINGS = {
    "uniform": [50, 50, 50, 50],
    "empty experts": [0, 7, 0, 0, 130, 0],
    "one-token experts": [1] * 9,
    "all tokens in the first": [300, 0, 0, 0],
    "all tokens in a middle one": [0, 0, 300, 0],
    "all tokens in the last": [0, 0, 0, 300],
    "block boundaries": [127, 128, 129, 1],
    "many empty experts": [200 if e == 63 else 128 if e == 31 else 1 if e == 5 else 0 for e in range(64)],
}


@pytest.mark.parametrize("counts", ROUTINGS.values(), ids=ROUTINGS.keys())
def test_each_expert_is_quantize_nvfp4_of_its_rows(counts):
    x = random_bf16((sum(counts), 80), seed=len(counts))
    assert_experts(x, offsets_of(counts), random_scales(len(counts), seed=len(counts)))


def test_scale_byte_offsets_follow_the_formula():
    # Scale (r, j) of expert e's r-th row is at swizzled_sf_offset(R_e + r, j, G), R_e the sum of
    # the earlier experts' counts rounded up to 128.
    counts, k = [3, 0, 200, 1, 0, 129], 80
    groups = k // 16
    x = random_bf16((sum(counts), k), seed=5)
    tsf = random_scales(len(counts), seed=5)
    _, sf = quantize_nvfp4_experts(x, offsets_of(counts), tsf)
    flat = sf.ravel()
    row, sf_row = 0, 0
    for e, n in enumerate(counts):
        _, sf_e = quantize_nvfp4(x[row:row + n], tsf[e], sf_layout="linear")
        r, j = np.meshgrid(np.arange(n), np.arange(groups), indexing="ij")
        np.testing.assert_array_equal(flat[swizzled_sf_offset(sf_row + r, j, groups)], sf_e)
        row += n
        sf_row += 128 * math.ceil(n / 128)
    assert resolve_expert_offsets(offsets_of(counts), sum(counts))[1].tolist() == [0, 128, 128, 384, 512, 512, 768]


def test_vllm_view_of_the_scales():
    # vLLM's output_scales is (rows, 4 * ceil(G/4)) e4m3 and expert e's scales are the rows
    # blockscale_offsets[e] .. blockscale_offsets[e + 1] of it, the swizzled scales of its rows.
    counts, k = [130, 0, 5], 7 * 16
    x = random_bf16((sum(counts), k), seed=6)
    tsf = random_scales(3, seed=6)
    _, sf = quantize_nvfp4_experts(x, offsets_of(counts), tsf)
    view = sf.reshape(-1, 8)
    _, blockscale_offsets = resolve_expert_offsets(offsets_of(counts), sum(counts))
    assert blockscale_offsets.tolist() == [0, 256, 256, 384]
    for e, (lo, hi) in enumerate(zip(offsets_of(counts)[:-1], offsets_of(counts)[1:])):
        _, sf_e = quantize_nvfp4(x[lo:hi], tsf[e])
        np.testing.assert_array_equal(view[blockscale_offsets[e]:blockscale_offsets[e + 1]], sf_e.reshape(-1, 8))


def test_padding_bytes_are_zero():
    # All ones: every real scale is 0x23 (s = R6 -> 1.375 * 2**-3), so a 0x00 is padding. G = 5
    # leaves 3 padding groups per row; the experts fill 1 + 2 + 1 of P = 6 blocks and rows 133..299
    # are in no expert.
    counts, m, k = [1, 0, 130, 2], 300, 80
    groups = k // 16
    x = bf16(np.ones((m, k)))
    q, sf = quantize_nvfp4_experts(x, offsets_of(counts), np.ones(4, np.float32))
    assert sf.shape == (6, 2, 32, 4, 4)
    used = np.zeros(sf.size, bool)
    sf_row = 0
    for n in counts:
        r, j = np.meshgrid(np.arange(n), np.arange(groups), indexing="ij")
        used[swizzled_sf_offset(sf_row + r, j, groups)] = True
        sf_row += 128 * math.ceil(n / 128)
    assert np.all(sf.ravel()[used] == 0x23)
    assert np.all(sf.ravel()[~used] == 0)
    assert used.sum() == 133 * groups
    assert np.all(q[133:] == 0) and np.all(q[:133] != 0)


@pytest.mark.parametrize(
    "m, num_experts, blocks",
    [
        (0, 1, 0),
        (0, 8, 0),
        (1, 1, 1),
        (128, 1, 1),
        (129, 1, 2),
        (3, 2, 2),  # 1 + 2 rows: 2 blocks
        (255, 2, 3),  # 1 + 254 rows: 1 + 2 blocks
        (1, 256, 1),
        (64, 256, 64),  # fewer rows than experts: one block per row at most
        (1024, 8, 15),  # 7 one-row experts and 1017 rows: 7 + 8 blocks
    ],
)
def test_scale_shape_is_the_bound(m, num_experts, blocks):
    assert experts_sf_shape(m, 80, num_experts) == (blocks, 2, 32, 4, 4)
    x = random_bf16((m, 80), seed=1)
    offsets = np.minimum(np.arange(num_experts + 1), m).astype(np.int32)
    _, sf = quantize_nvfp4_experts(x, offsets, np.ones(num_experts, np.float32))
    assert sf.shape == (blocks, 2, 32, 4, 4)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(m=st.integers(0, 2000), num_experts=st.integers(1, 300), data=st.data())
def test_the_bound_is_reached_and_never_exceeded(m, num_experts, data):
    blocks = experts_sf_shape(m, 16, num_experts)[0]
    offsets = data.draw(st.lists(st.integers(INT32_MIN, INT32_MAX) | st.integers(-3, m + 3),
                                 min_size=num_experts + 1, max_size=num_experts + 1))
    _, sf_rows = resolve_expert_offsets(np.array(offsets, np.int32), m)
    assert sf_rows[-1] <= 128 * blocks
    # E - 1 one-row experts and one with the rest (or one row each while rows last) fill every block.
    worst = np.minimum(np.arange(num_experts + 1), m)
    worst[-1] = m
    assert resolve_expert_offsets(worst.astype(np.int32), m)[1][-1] == 128 * blocks


@pytest.mark.parametrize(
    "offsets, m, rows, sf_rows",
    [
        ([0, 3, 3, 10], 10, [0, 3, 3, 10], [0, 128, 128, 256]),  # valid, one empty expert
        ([0, 4, 20], 10, [0, 4, 10], [0, 128, 256]),  # past M: ends at M
        ([-5, 3], 10, [0, 3], [0, 128]),  # negative: 0
        ([-5, 3, 2, 10, 7], 6, [0, 3, 3, 6, 6], [0, 128, 128, 256, 256]),  # decreasing: empty
        ([0, 5, 2, 4, 8], 10, [0, 5, 5, 5, 8], [0, 128, 128, 128, 256]),  # no row in two experts
        ([4, 6], 10, [4, 6], [0, 128]),  # rows 0..3 in no expert
        ([20, 30], 10, [10, 10], [0, 0]),  # every offset past M
        ([INT32_MIN, INT32_MAX], 7, [0, 7], [0, 128]),
        ([INT32_MAX, INT32_MIN], 7, [7, 7], [0, 0]),
    ],
)
def test_resolve_expert_offsets(offsets, m, rows, sf_rows):
    got_rows, got_sf_rows = resolve_expert_offsets(np.array(offsets, np.int32), m)
    assert got_rows.dtype == got_sf_rows.dtype == np.int64
    assert got_rows.tolist() == rows == spec_rows(offsets, m)
    assert got_sf_rows.tolist() == sf_rows


def test_bad_offsets_quantize_as_their_resolution():
    # Offsets (-5, 3, 2, 10, 7) on 6 rows are rows (0, 3, 3, 6, 6): expert 0 rows 0..2, expert 2
    # rows 3..5 (not 2..5: row 2 stays expert 0's), experts 1 and 3 empty.
    x = random_bf16((6, 32), seed=7, scale=50)
    tsf = np.array([1, 1000, 4, 8], np.float32)
    q, sf = quantize_nvfp4_experts(x, np.array([-5, 3, 2, 10, 7], np.int32), tsf)
    q_0, sf_0 = quantize_nvfp4(x[:3], tsf[0])
    q_2, sf_2 = quantize_nvfp4(x[3:], tsf[2])
    np.testing.assert_array_equal(q, np.concatenate([q_0, q_2]))
    assert sf.shape == (4, 1, 32, 4, 4)  # min(6, floor((6 + 508) / 128))
    np.testing.assert_array_equal(sf, np.concatenate([sf_0, sf_2, np.zeros((2, 1, 32, 4, 4), np.uint8)]))


@settings(derandomize=True, max_examples=60, deadline=None)
@given(m=st.integers(0, 300), num_experts=st.integers(1, 12), data=st.data())
def test_any_offsets_quantize_as_the_spec_resolves_them(m, num_experts, data):
    offsets = np.array(data.draw(st.lists(st.integers(-20, m + 20), min_size=num_experts + 1,
                                          max_size=num_experts + 1)), np.int32)
    x = random_bf16((m, 48), seed=m)
    assert_experts(x, offsets, random_scales(num_experts, seed=num_experts))


def test_rows_in_no_expert_are_not_read():
    x = random_bf16((9, 32), seed=8)
    offsets = np.array([2, 4, 4, 7], np.int32)
    tsf = np.array([3, 5, 7], np.float32)
    changed = x.copy()
    changed[[0, 1, 7, 8]] = bf16([np.nan, np.inf, -3e38, 1e-40])[:, None]
    q, sf = quantize_nvfp4_experts(x, offsets, tsf)
    q_changed, sf_changed = quantize_nvfp4_experts(changed, offsets, tsf)
    np.testing.assert_array_equal(q_changed, q)
    np.testing.assert_array_equal(sf_changed, sf)
    assert not q[[0, 1, 7, 8]].any()


@pytest.mark.parametrize("value", [0.0, np.nan, np.inf, -2.0, 2.0**-149, 3e38])
def test_any_scale_value_is_read_as_for_one_tensor(value):
    # Scale values are read on the device, so none is an error: each expert gives the bytes of
    # quantize_nvfp4 with its value, whatever it is.
    x = random_bf16((40, 32), seed=9)
    counts = [10, 30]
    tsf = np.array([value, 2.0], np.float32)
    assert_experts(x, offsets_of(counts), tsf)


@pytest.mark.parametrize("as_input", [lambda x: x.view(np.uint16), lambda x: x.astype(np.float16)],
                         ids=["bf16 bits", "float16"])
def test_every_input_dtype(as_input):
    x = random_bf16((20, 32), seed=10)
    counts, tsf = [12, 8], np.array([2, 3], np.float32)
    x_in = as_input(x)
    q, sf = quantize_nvfp4_experts(x_in, offsets_of(counts), tsf)
    q_0, _ = quantize_nvfp4(x_in[:12], tsf[0])
    np.testing.assert_array_equal(q[:12], q_0)
    assert_experts(x_in, offsets_of(counts), tsf)


def test_empty_inputs():
    q, sf = quantize_nvfp4_experts(random_bf16((0, 64), 0), np.zeros(4, np.int32), np.ones(3, np.float32))
    assert q.shape == (0, 32) and sf.shape == (0, 1, 32, 4, 4)
    q, sf = quantize_nvfp4_experts(random_bf16((300, 0), 0), offsets_of([100, 200]), np.ones(2, np.float32))
    assert q.shape == (300, 0) and sf.shape == (4, 0, 32, 4, 4)  # P = floor((300 + 254) / 128)
    q, sf = quantize_nvfp4_batched(random_bf16((0, 5, 64), 0), np.ones(0, np.float32))
    assert q.shape == (0, 5, 32) and sf.shape == (0, 1, 1, 32, 4, 4)


# ---------------------------------------------------------------------------- batches


@pytest.mark.parametrize("batches", [1, 3])
@pytest.mark.parametrize("m", [1, 100, 128, 200])
def test_batch_is_quantize_nvfp4_per_batch(batches, m):
    x = random_bf16((batches, m, 80), seed=m)
    tsf = random_scales(batches, seed=m)
    q, sf = quantize_nvfp4_batched(x, tsf)
    assert q.shape == (batches, m, 40) and sf.shape == (batches, math.ceil(m / 128), 2, 32, 4, 4)
    for b in range(batches):
        q_b, sf_b = quantize_nvfp4(x[b], tsf[b])
        np.testing.assert_array_equal(q[b], q_b)
        np.testing.assert_array_equal(sf[b], sf_b)


@pytest.mark.parametrize("m", [1, 128, 200])
def test_batches_are_experts_of_m_rows_each(m):
    batches = 4
    x = random_bf16((batches, m, 48), seed=11)
    tsf = random_scales(batches, seed=11)
    q, sf = quantize_nvfp4_batched(x, tsf)
    q_e, sf_e = quantize_nvfp4_experts(x.reshape(batches * m, 48), (np.arange(batches + 1) * m).astype(np.int32), tsf)
    np.testing.assert_array_equal(q.reshape(batches * m, 24), q_e)
    used = batches * math.ceil(m / 128)
    np.testing.assert_array_equal(sf.reshape(-1, *sf.shape[2:]), sf_e[:used])
    assert not sf_e[used:].any()


def test_rows_past_the_count():
    # Counts 0, 1, M, M + 5 (clamped to M), -3 (clamped to 0), 37 and 129 of M = 150.
    m, k = 150, 80
    valid_rows = np.array([0, 1, m, m + 5, -3, 37, 129], np.int32)
    counts = [0, 1, m, m, 0, 37, 129]
    x = random_bf16((len(counts), m, k), seed=12)
    tsf = random_scales(len(counts), seed=12)
    q, sf = quantize_nvfp4_batched(x, tsf, valid_rows)
    for b, c in enumerate(counts):
        q_b, sf_b = quantize_nvfp4(x[b, :c], tsf[b])
        np.testing.assert_array_equal(q[b, :c], q_b)
        assert not q[b, c:].any()
        expected = np.zeros(sf.shape[1:], np.uint8)
        expected[:sf_b.shape[0]] = sf_b  # scale bytes of rows past the count are 0x00
        np.testing.assert_array_equal(sf[b], expected)
    # The rows past the count are not read.
    changed = x.copy()
    for b, c in enumerate(counts):
        changed[b, c:] = bf16(np.nan)
    q_changed, sf_changed = quantize_nvfp4_batched(changed, tsf, valid_rows)
    np.testing.assert_array_equal(q_changed, q)
    np.testing.assert_array_equal(sf_changed, sf)


def test_full_counts_are_no_counts():
    x = random_bf16((3, 40, 32), seed=13)
    tsf = random_scales(3, seed=13)
    full = quantize_nvfp4_batched(x, tsf, np.full(3, 40, np.int32))
    for got, expected in zip(full, quantize_nvfp4_batched(x, tsf)):
        np.testing.assert_array_equal(got, expected)


# -------------------------------------------------------------------- SiLU·mul variants


def gate_times_up(rows):
    """A stand-in prologue: bf16(gate * up), rows (R, 2N) -> bf16 bits (R, N)."""
    rf = input_float32(rows)
    n = rf.shape[-1] // 2
    return round_to(rf[:, :n] * rf[:, n:], "bfloat16")


def test_silu_experts_are_the_unfused_composition():
    counts = [0, 3, 130, 0, 1]
    x = random_bf16((sum(counts) + 4, 2 * 80), seed=14)
    offsets = np.concatenate([[2], 2 + np.cumsum(counts)]).astype(np.int32)  # rows 0, 1, 136, 137 in no expert
    tsf = random_scales(len(counts), seed=14)
    fused = silu_and_mul_quantize_nvfp4_experts(x, offsets, tsf, prologue=gate_times_up)
    unfused = quantize_nvfp4_experts(gate_times_up(x), offsets, tsf)
    assert fused[0].shape == (len(x), 40)
    for got, expected in zip(fused, unfused):
        np.testing.assert_array_equal(got, expected)


def test_silu_batches_are_the_unfused_composition():
    x = random_bf16((3, 130, 2 * 32), seed=15)
    tsf = random_scales(3, seed=15)
    valid_rows = np.array([130, 0, 7], np.int32)
    fused = silu_and_mul_quantize_nvfp4_batched(x, tsf, valid_rows, prologue=gate_times_up)
    unfused = quantize_nvfp4_batched(gate_times_up(x.reshape(-1, 64)).reshape(3, 130, 32), tsf, valid_rows)
    for got, expected in zip(fused, unfused):
        np.testing.assert_array_equal(got, expected)


def test_the_prologue_sees_only_the_rows_read():
    seen = []

    def recorder(rows):
        seen.append(rows.copy())
        return gate_times_up(rows)

    x = random_bf16((9, 64), seed=16)
    silu_and_mul_quantize_nvfp4_experts(x, np.array([2, 4, 4, 7], np.int32), np.ones(3, np.float32),
                                        prologue=recorder)
    np.testing.assert_array_equal(seen.pop(), x[2:7])
    xb = random_bf16((3, 5, 64), seed=17)
    silu_and_mul_quantize_nvfp4_batched(xb, np.ones(3, np.float32), np.array([1, 0, 3], np.int32), prologue=recorder)
    np.testing.assert_array_equal(seen.pop(), np.concatenate([xb[0, :1], xb[2, :3]]))


@pytest.mark.parametrize("prologue, got", [(lambda rows: rows, "(3, 64)"), (lambda rows: rows.tolist(), "builtins.list")])
def test_the_prologue_result_is_checked(prologue, got):
    with pytest.raises(ValueError) as err:
        silu_and_mul_quantize_nvfp4_experts(random_bf16((3, 64), 0), offsets_of([3]), np.ones(1, np.float32),
                                            prologue=prologue)
    assert str(err.value) == f"prologue must return an array of shape (R, N) = (3, 32) for rows of shape (3, 64), got {got}"


@pytest.mark.parametrize("quantize, x, args", [
    (silu_and_mul_quantize_nvfp4_experts, random_bf16((3, 64), 0), (offsets_of([3]), np.ones(1, np.float32))),
    (silu_and_mul_quantize_nvfp4_batched, random_bf16((1, 3, 64), 0), (np.ones(1, np.float32),)),
])
def test_silu_and_mul_is_the_spec_prologue(quantize, x, args):
    # prologue=None is the spec's SiLU·mul (fp4q.reference.silu_and_mul), applied to the rows read.
    spec = quantize(x, *args, prologue=silu_and_mul)
    for got, want in zip(quantize(x, *args), spec):
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------- host-checked rules


def experts_call(x=None, offsets=None, tsf=None, sf_layout="swizzled"):
    x = random_bf16((4, 16), 0) if x is None else x
    offsets = np.array([0, 1, 2, 3, 4], np.int32) if offsets is None else offsets
    tsf = np.ones(4, np.float32) if tsf is None else tsf
    return quantize_nvfp4_experts(x, offsets, tsf, sf_layout)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(offsets=np.arange(5)), TypeError, "expert_offsets must have dtype int32, got int64"),
    (dict(offsets=[0, 1, 2, 3, 4]), TypeError, "expert_offsets must be a numpy int32 array, got builtins.list"),
    (dict(offsets=np.arange(4, dtype=np.int32)), ValueError,
     "expert_offsets must have shape (E + 1,) = (5,) for tensor_sf of shape (4,), got (4,)"),
    (dict(offsets=np.zeros((1, 5), np.int32)), ValueError,
     "expert_offsets must have shape (E + 1,) = (5,) for tensor_sf of shape (4,), got (1, 5)"),
    (dict(tsf=np.ones(4)), TypeError, "tensor_sf must have dtype float32, got float64"),
    (dict(tsf=1.0), TypeError, "tensor_sf must be a numpy float32 array, got builtins.float"),
    (dict(tsf=np.ones(0, np.float32)), ValueError,
     "tensor_sf must have shape (E,), one scale per expert, with E >= 1, got (0,)"),
    (dict(tsf=np.ones((4, 1), np.float32)), ValueError,
     "tensor_sf must have shape (E,), one scale per expert, with E >= 1, got (4, 1)"),
    (dict(x=random_bf16((2, 2, 16), 0)), ValueError, "x must have shape (M, K), got shape (2, 2, 16)"),
    (dict(x=random_bf16((4, 24), 0)), ValueError, "K must be a multiple of 16, got 24"),
    (dict(x=np.ones((4, 16), np.int8)), TypeError,
     "x must have dtype bfloat16, uint16 (bf16 bits), float16 or float32, got int8"),
    (dict(sf_layout="linear"), ValueError,
     "sf_layout must be 'swizzled' (experts and batches have no linear layout), got 'linear'"),
])
def test_experts_argument_rules(kwargs, error, message):
    with pytest.raises(error) as err:
        experts_call(**kwargs)
    assert str(err.value) == message


def batched_call(x=None, tsf=None, valid_rows=None, sf_layout="swizzled"):
    x = random_bf16((3, 4, 16), 0) if x is None else x
    tsf = np.ones(3, np.float32) if tsf is None else tsf
    return quantize_nvfp4_batched(x, tsf, valid_rows, sf_layout)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(tsf=np.ones(1, np.float32)), ValueError,
     "tensor_sf must have shape (B,) = (3,), one scale per batch, for x of shape (3, 4, 16), got (1,)"),
    (dict(tsf=np.ones(3, np.float16)), TypeError, "tensor_sf must have dtype float32, got float16"),
    (dict(valid_rows=np.ones(3, np.int64)), TypeError, "valid_rows must have dtype int32, got int64"),
    (dict(valid_rows=(4, 4, 4)), TypeError, "valid_rows must be a numpy int32 array, got builtins.tuple"),
    (dict(valid_rows=np.ones(2, np.int32)), ValueError,
     "valid_rows must have shape (B,) = (3,), one count per batch, for x of shape (3, 4, 16), got (2,)"),
    (dict(x=random_bf16((4, 16), 0)), ValueError, "x must have shape (B, M, K), got shape (4, 16)"),
    (dict(x=random_bf16((3, 4, 8), 0)), ValueError, "K must be a multiple of 16, got 8"),
    (dict(sf_layout="linear"), ValueError,
     "sf_layout must be 'swizzled' (experts and batches have no linear layout), got 'linear'"),
])
def test_batched_argument_rules(kwargs, error, message):
    with pytest.raises(error) as err:
        batched_call(**kwargs)
    assert str(err.value) == message


@pytest.mark.parametrize("quantize, x, args, message", [
    (silu_and_mul_quantize_nvfp4_experts, random_bf16((3, 33), 0), (offsets_of([3]), np.ones(1, np.float32)),
     "x.shape[-1] = 2N (gate, then up) must be even, got 33"),
    (silu_and_mul_quantize_nvfp4_experts, random_bf16((3, 48), 0), (offsets_of([3]), np.ones(1, np.float32)),
     "N = x.shape[-1] // 2 must be a multiple of 16, got 24"),
    (silu_and_mul_quantize_nvfp4_experts, random_bf16((3,), 0), (offsets_of([3]), np.ones(1, np.float32)),
     "x must have shape (M, 2N), got shape (3,)"),
    (silu_and_mul_quantize_nvfp4_batched, random_bf16((3, 64), 0), (np.ones(3, np.float32),),
     "x must have shape (B, M, 2N), got shape (3, 64)"),
])
def test_silu_argument_rules(quantize, x, args, message):
    with pytest.raises(ValueError) as err:
        quantize(x, *args, prologue=gate_times_up)
    assert str(err.value) == message


@pytest.mark.parametrize("call, error, message", [
    (lambda: experts_sf_shape(4, 64, 0), ValueError, "num_experts must be an int >= 1, got 0"),
    (lambda: experts_sf_shape(4, 64, True), ValueError, "num_experts must be an int >= 1, got True"),
    (lambda: experts_sf_shape(4, 24, 2), ValueError, "k must be a multiple of 16 for fmt='nvfp4', got 24"),
    (lambda: experts_sf_shape(-1, 64, 2), ValueError, "m must be >= 0, got -1"),
    (lambda: resolve_expert_offsets(np.zeros(1, np.int32), 4), ValueError,
     "expert_offsets must have shape (E + 1,) with E >= 1, got (1,)"),
    (lambda: resolve_expert_offsets(np.zeros(3, np.int32), -1), ValueError, "m must be an int >= 0, got -1"),
    (lambda: resolve_expert_offsets(np.zeros(3, np.uint32), 4), TypeError,
     "expert_offsets must have dtype int32, got uint32"),
])
def test_helper_argument_rules(call, error, message):
    with pytest.raises(error) as err:
        call()
    assert str(err.value) == message


def test_public_under_fp4q_reference():
    for name in experts.__all__:
        assert getattr(fp4q.reference, name) is getattr(experts, name)
        assert name in fp4q.reference.__all__
