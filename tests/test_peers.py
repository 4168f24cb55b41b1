"""fp4q.torch.peers: the serving engines' call shapes (vLLM's silu_and_mul_nvfp4_quant, FlashInfer's
fp4_quantize, nvfp4_quantize and silu_and_mul_nvfp4_quantize) on fp4q's ops.

On any machine (fake CUDA tensors): the output shapes and dtypes of every layout and format, the
peer-named rules, and what fp4q does not compute yet refused before anything runs. On the GPU: the
bytes against fp4q.reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import fp4q.torch as ft  # noqa: E402
from fp4q.numerics import reference  # noqa: E402
from fp4q.torch import peers, peers_moe  # noqa: E402

from helpers import assert_bytes_equal, mixed_groups  # noqa: E402
from torch_fakes import fake, fake_cuda  # noqa: E402,F401 (fake: a fixture)

gpu = pytest.mark.gpu
BF16 = torch.bfloat16


def round_up(v: int, to: int) -> int:
    return -(-v // to) * to


def meta(t) -> tuple:
    return tuple(t.shape), t.dtype


# ----------------------------------------------------------------- shapes and dtypes
@pytest.mark.parametrize("shape", [(64,), (5, 48), (300, 128), (2, 130, 64)])
@pytest.mark.parametrize("swizzled", [True, False])
def test_fp4_quantize_shapes(fake, shape, swizzled):
    m, k = math.prod(shape[:-1]), shape[-1]
    q, sf = peers.fp4_quantize(fake_cuda(shape), fake_cuda((1,), torch.float32), is_sf_swizzled_layout=swizzled)
    assert meta(q) == (shape[:-1] + (k // 2,), torch.uint8)
    assert meta(sf) == (((round_up(m, 128), round_up(k // 16, 4)) if swizzled else (m, k // 16)), torch.uint8)
    # A global scale per row (FlashInfer's M elements): fp4q's tensor scale per row.
    q2, sf2 = peers.fp4_quantize(fake_cuda(shape), fake_cuda((m,), torch.float32), is_sf_swizzled_layout=swizzled)
    assert (meta(q2), meta(sf2)) == (meta(q), meta(sf))
    q, sf = peers.fp4_quantize(fake_cuda(shape[:-1] + (2 * k,), torch.float16), sf_vec_size=32, sf_use_ue8m0=True,
                               is_sf_swizzled_layout=swizzled)
    assert meta(q) == (shape[:-1] + (k,), torch.uint8)
    assert meta(sf) == (((round_up(m, 128), round_up(k // 16, 4)) if swizzled else (m, k // 16)), torch.uint8)


@pytest.mark.parametrize("shape", [(5, 64), (3, 100, 80)])
@pytest.mark.parametrize("swizzled", [True, False])
def test_fp4_quantize_8x4_shapes(fake, shape, swizzled):
    # The 8x4 flag picks between FlashInfer's two tiled layouts: without the swizzled flag, linear.
    m, k = math.prod(shape[:-1]), shape[-1]
    want = (round_up(m, 8), round_up(k // 16, 4)) if swizzled else (m, k // 16)
    _, sf = peers.fp4_quantize(fake_cuda(shape), fake_cuda((1,), torch.float32), is_sf_swizzled_layout=swizzled,
                               is_sf_8x4_layout=True)
    assert meta(sf) == (want, torch.uint8)
    _, sf = peers.silu_and_mul_nvfp4_quantize(fake_cuda(shape[:-1] + (2 * k,)), fake_cuda((1,), torch.float32),
                                              is_sf_swizzled_layout=swizzled, is_sf_8x4_layout=True)
    assert meta(sf) == (want, torch.uint8)


@pytest.mark.parametrize("layout, want", [(peers.SfLayout.layout_128x4, (384, 8)), (2, (300, 8)),
                                          (peers.SfLayout.layout_8x4, (304, 8))])

def test_nvfp4_quantize_shapes(fake, layout, want):
    q, sf = peers.nvfp4_quantize(fake_cuda((300, 128)), fake_cuda((1,), torch.float32), layout)
    assert meta(q) == ((300, 64), torch.uint8) and meta(sf) == (want, torch.uint8)


@pytest.mark.parametrize("shape", [(5, 64), (3, 100, 256)])
@pytest.mark.parametrize("swizzled", [True, False])
def test_silu_and_mul_nvfp4_quantize_shapes(fake, shape, swizzled):
    m, k = math.prod(shape[:-1]), shape[-1] // 2
    q, sf = peers.silu_and_mul_nvfp4_quantize(fake_cuda(shape), fake_cuda((1,), torch.float32),
                                              is_sf_swizzled_layout=swizzled)
    assert meta(q) == ((m, k // 2), torch.uint8)
    assert meta(sf) == (((round_up(m, 128), round_up(k // 16, 4)) if swizzled else (m, k // 16)), torch.uint8)


@pytest.mark.parametrize("scale_dtype", [torch.int32, torch.uint8, torch.float8_e4m3fn])
def test_silu_and_mul_nvfp4_quant_takes_vllms_buffers(fake, scale_dtype):
    m, n = 300, 96
    cols = round_up(n // 16, 4)
    result = fake_cuda((m, n // 2), torch.uint8)
    scale = fake_cuda((round_up(m, 128), cols // 4 if scale_dtype == torch.int32 else cols), scale_dtype)
    assert ft.silu_and_mul_nvfp4_quant(result, scale, fake_cuda((m, 2 * n)), fake_cuda((1,), torch.float32)) is None


# ----------------------------------------------------------------- rules
@pytest.mark.parametrize("call, error, message", [
    (lambda: peers.fp4_quantize(fake_cuda((4, 64), torch.float32), fake_cuda((1,), torch.float32)), TypeError,
     "input must be bfloat16 or float16, got torch.float32"),
    (lambda: peers.fp4_quantize(fake_cuda((4, 40)), fake_cuda((1,), torch.float32)), ValueError,
     "the last dimension of input must be a multiple of 16, got 40"),
    (lambda: peers.fp4_quantize(fake_cuda((4, 64))), ValueError, "global_scale is required for NVFP4"),
    (lambda: peers.fp4_quantize(fake_cuda((4, 64)), fake_cuda((3,), torch.float32)), ValueError,
     "global_scale must have one element or one per row (4), got shape (3,)"),
    (lambda: peers.silu_and_mul_nvfp4_quantize(fake_cuda((4, 64)), fake_cuda((4,), torch.float32)), ValueError,
     "global_scale must have one element, got shape (4,)"),
    (lambda: peers.fp4_quantize(fake_cuda((4, 64)), sf_vec_size=32), ValueError,
     "sf_vec_size and sf_use_ue8m0 must be 16 and False (NVFP4) or 32 and True (MXFP4), got 32 and False"),
    (lambda: peers.fp4_quantize(fake_cuda((64, 4)).t(), fake_cuda((1,), torch.float32)), ValueError,
     "input must be row-major"),
    (lambda: peers.nvfp4_quantize(fake_cuda((4, 64)), fake_cuda((1,), torch.float32), 7), ValueError,
     "sfLayout must be one of ['layout_128x4', 'layout_8x4', 'layout_linear'] (or 0, 1, 2), got 7"),
    (lambda: peers.nvfp4_quantize(fake_cuda((4, 64)), fake_cuda((4,), torch.float32), per_token_activation=True),
     ValueError, "a_global_sf must be a tensor of one element with per_token_activation=True, got (4,)"),
    (lambda: peers.nvfp4_quantize(fake_cuda((4, 64)), fake_cuda((1,), torch.float32), do_shuffle=True),
     ValueError, "do_shuffle=True"),
    (lambda: peers.silu_and_mul_nvfp4_quantize(fake_cuda((4, 65)), fake_cuda((1,), torch.float32)), ValueError,
     "the last dimension of input (two halves) must be even"),
    (lambda: ft.silu_and_mul_nvfp4_quant(fake_cuda((4, 32), torch.uint8), fake_cuda((128, 1), torch.int32),
                                         fake_cuda((2, 4, 128)), fake_cuda((1,), torch.float32)), ValueError,
     "input must be 2-D (M, 2N), got shape (2, 4, 128)"),
    (lambda: ft.silu_and_mul_nvfp4_quant(fake_cuda((4, 32), torch.uint8), fake_cuda((4, 4), torch.int32),
                                         fake_cuda((4, 128)), fake_cuda((1,), torch.float32)), ValueError,
     "result_block_scale (int32) must have shape (128, 1), got (4, 4)"),
])
def test_rules_in_the_peers_names(fake, call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


# ----------------------------------------------------------------- GPU
def _cuda(bits: np.ndarray):
    return torch.from_numpy(bits.view(np.int16)).cuda().view(BF16)


def _bytes(t) -> np.ndarray:
    return t.view(torch.uint8).cpu().numpy() if t.element_size() == 1 else t.cpu().numpy()


@gpu
@pytest.mark.parametrize("swizzled", [True, False])
def test_fp4_quantize_bytes(swizzled):
    bits = mixed_groups((300, 256), np.random.default_rng(1))
    tsf = float(reference.global_scale(bits))
    layout = "swizzled" if swizzled else "linear"
    q, sf = peers.fp4_quantize(_cuda(bits), torch.tensor([tsf], device="cuda"), is_sf_swizzled_layout=swizzled)
    want_q, want_sf = reference.quantize_nvfp4(bits, np.float32(tsf), sf_layout=layout)
    assert_bytes_equal(_bytes(q), want_q, "q")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "sf")
    q, sf = peers.fp4_quantize(_cuda(bits), torch.tensor([1 / tsf], device="cuda"), is_sf_swizzled_layout=swizzled,
                               is_global_scale_inversed=True)
    want_q, want_sf = reference.quantize_nvfp4(bits, np.float32(1) / np.float32(1 / tsf), sf_layout=layout)
    assert_bytes_equal(_bytes(q), want_q, "q inversed")
    rows = (2.0 ** np.random.default_rng(3).uniform(-8, 8, 300)).astype(np.float32)
    q, sf = peers.fp4_quantize(_cuda(bits), torch.from_numpy(rows).cuda(), is_sf_swizzled_layout=swizzled)
    want_q, want_sf = reference.quantize_nvfp4(bits, rows, sf_layout=layout)
    assert_bytes_equal(_bytes(q), want_q, "q per row")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "sf per row")
    q, sf = peers.fp4_quantize(_cuda(bits), sf_vec_size=32, sf_use_ue8m0=True, is_sf_swizzled_layout=swizzled)
    want_q, want_sf = reference.quantize_mxfp4(bits, mode="rceil", sf_layout=layout)
    assert_bytes_equal(_bytes(q), want_q, "mx q")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "mx sf")


@gpu
@pytest.mark.parametrize("layout", list(peers.SfLayout))
def test_nvfp4_quantize_per_token_bytes(layout):
    # Rows of zeros, of NaN among values and ordinary rows: the scale returned is amax_row * a_global_sf (float32,
    # NaN ignored), and each row is quantized with its reciprocal as a tensor scale per row.
    bits = mixed_groups((37, 256), np.random.default_rng(4))
    bits[0] = 0
    bits[1, 5] = 0x7FC0  # NaN
    base = np.float32(1 / 2688)
    q, sf, per_token = peers.nvfp4_quantize(_cuda(bits), torch.tensor([base], device="cuda"), layout,
                                            per_token_activation=True)
    values = np.abs((bits.astype(np.uint32) << 16).view(np.float32))
    amax = np.where(np.isnan(values), np.float32(0), values).max(axis=1)
    want_scale = (amax * base).astype(np.float32)
    assert_bytes_equal(per_token.cpu().numpy(), want_scale, "per_token_scale")
    name = {peers.SfLayout.layout_128x4: "swizzled", peers.SfLayout.layout_8x4: "8x4"}.get(layout, "linear")
    want_q, want_sf = reference.quantize_nvfp4(bits, (np.float32(1) / want_scale).astype(np.float32),
                                               sf_layout=name)
    assert_bytes_equal(_bytes(q), want_q, "q")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "sf")


@gpu
def test_silu_and_mul_drop_ins_bytes():
    m, n = 300, 128
    bits = mixed_groups((m, 2 * n), np.random.default_rng(2))
    t = torch.tensor([0.5], device="cuda")
    want_q, want_sf = reference.silu_and_mul_quantize_nvfp4(bits, np.float32(0.5))
    q, sf = peers.silu_and_mul_nvfp4_quantize(_cuda(bits), t)
    assert_bytes_equal(_bytes(q), want_q, "FlashInfer q")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "FlashInfer sf")
    result = torch.full((m, n // 2), 0xEE, dtype=torch.uint8, device="cuda")
    scale = torch.full((round_up(m, 128), round_up(n // 16, 4) // 4), -1, dtype=torch.int32, device="cuda")
    ft.silu_and_mul_nvfp4_quant(result, scale, _cuda(bits), t)
    assert_bytes_equal(_bytes(result), want_q, "vLLM result")
    assert_bytes_equal(scale.view(torch.uint8).cpu().numpy().reshape(-1), want_sf.reshape(-1), "vLLM scale")


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("m, k, experts, blocks", [(300, 256, 8, 10), (5, 7168, 64, 5)])
def test_vllm_experts_shapes(fake, silu, m, k, experts, blocks):
    op = peers_moe.silu_and_mul_scaled_fp4_experts_quant if silu else ft.scaled_fp4_experts_quant
    offsets = fake_cuda((experts + 1,), torch.int32)
    q, sf = op(fake_cuda((m, 2 * k if silu else k)), fake_cuda((experts,), torch.float32), offsets,
               torch.empty_like(offsets), 8)
    assert meta(q) == ((m, k // 2), torch.uint8)
    assert meta(sf) == ((128 * blocks, round_up(k // 16, 4)), torch.float8_e4m3fn)


def test_vllm_experts_rules(fake):
    x, offsets, tsf = fake_cuda((6, 64)), fake_cuda((3,), torch.int32), fake_cuda((2,), torch.float32)
    with pytest.raises(ValueError, match=r"^input_tensor must be 2-D \(m_topk, k\), got shape \(2, 3, 64\)$"):
        ft.scaled_fp4_experts_quant(fake_cuda((2, 3, 64)), tsf, offsets, offsets, 1)
    with pytest.raises(ValueError, match=r"^topk must be an int >= 1, got 0$"):
        ft.scaled_fp4_experts_quant(x, tsf, offsets, offsets, 0)
    with pytest.raises(ValueError, match=r"^blockscale_offsets must be a tensor of expert_offsets' shape \(3,\), "
                                         r"got \(4,\)$"):
        ft.scaled_fp4_experts_quant(x, tsf, offsets, fake_cuda((4,), torch.int32), 1)
    with pytest.raises(ValueError, match=r"^half the last dimension of input_tensor must be a multiple of 16, got 8$"):
        ft.silu_and_mul_scaled_fp4_experts_quant(fake_cuda((6, 16)), tsf, offsets, offsets, 1)


@gpu
def test_vllm_experts_bytes():
    rng = np.random.default_rng(6)
    m, k = 300, 256
    counts = rng.multinomial(m, np.ones(8) / 8)
    offsets_host = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    tsf_host = (2.0 ** rng.uniform(-8, 8, 8)).astype(np.float32)
    offsets, tsf = torch.from_numpy(offsets_host).cuda(), torch.from_numpy(tsf_host).cuda()
    # vLLM's blockscale_offsets, as its callers compute them: a read of fp4q's bytes at those rows.
    blockscale = torch.from_numpy(np.concatenate([[0], np.cumsum(-(-counts // 128) * 128)]).astype(np.int32)).cuda()
    for silu in (False, True):
        bits = mixed_groups((m, 2 * k if silu else k), rng)
        op = ft.silu_and_mul_scaled_fp4_experts_quant if silu else ft.scaled_fp4_experts_quant
        want = (reference.silu_and_mul_quantize_nvfp4_experts if silu else reference.quantize_nvfp4_experts)(
            bits, offsets_host, tsf_host)
        q, sf = op(_cuda(bits), tsf, offsets, blockscale, 8)
        assert_bytes_equal(_bytes(q), want[0], f"q silu={silu}")
        assert_bytes_equal(_bytes(sf).reshape(-1), want[1].reshape(-1), f"sf silu={silu}")
        for e in range(8):
            rows = want[1].reshape(-1, 4 * round_up(k // 64, 1))[blockscale[e].item():][:counts[e]]
            assert_bytes_equal(_bytes(sf)[blockscale[e].item():][:counts[e]], rows, f"expert {e}")


@pytest.mark.parametrize("silu", [False, True])
def test_grouped_quantizer_shapes(fake, silu):
    b, m, k = 3, 130, 256
    a, mask, tsf = fake_cuda((b, m, 2 * k if silu else k)), fake_cuda((b,), torch.int32), fake_cuda((b,), torch.float32)
    op = peers_moe.silu_and_mul_scaled_nvfp4_experts_quantize if silu else peers_moe.scaled_fp4_grouped_quantize
    q, sf = op(a, mask, tsf)
    assert meta(q) == ((m, k // 2, b), torch.uint8)
    assert meta(sf) == ((32, 4, 2, 4, k // 64, b), torch.float8_e4m3fn)


@gpu
def test_grouped_quantizer_bytes():
    rng = np.random.default_rng(8)
    b, m, k = 3, 130, 256
    mask_host = np.array([130, 0, 57], np.int32)
    tsf_host = (2.0 ** rng.uniform(-8, 8, b)).astype(np.float32)
    mask, tsf = torch.from_numpy(mask_host).cuda(), torch.from_numpy(tsf_host).cuda()
    for silu in (False, True):
        bits = mixed_groups((b * m, 2 * k if silu else k), rng).reshape(b, m, -1)
        op = (peers_moe.silu_and_mul_scaled_nvfp4_experts_quantize if silu
              else peers_moe.scaled_fp4_grouped_quantize)
        want_op = reference.silu_and_mul_quantize_nvfp4_batched if silu else reference.quantize_nvfp4_batched
        want_q, want_sf = want_op(bits, tsf_host, mask_host)
        q, sf = op(_cuda(bits), mask, tsf)
        q = _bytes(q.permute(2, 0, 1))
        for i in range(b):  # rows past a count are not written
            assert_bytes_equal(q[i, :mask_host[i]], want_q[i, :mask_host[i]], f"q[{i}] silu={silu}")
        assert_bytes_equal(_bytes(sf.permute(5, 2, 4, 0, 1, 3)), want_sf, f"sf silu={silu}")
    bits = mixed_groups((b * m, k), rng).reshape(b, m, k)
    # nvfp4_batched_quantize: one scale for every batch (its broadcast is a copy, which CPU-only torch
    # cannot run on fake CUDA tensors: its shapes are checked here).
    q, sf = peers_moe.nvfp4_batched_quantize(_cuda(bits), tsf[:1])
    assert meta(q) == ((b, m, k // 2), torch.uint8) and meta(sf) == ((b, 256 * (k // 16)), torch.uint8)
    want_q, want_sf = reference.quantize_nvfp4_batched(bits, np.full(b, tsf_host[0], np.float32))
    assert_bytes_equal(_bytes(q), want_q, "batched q")
    assert_bytes_equal(_bytes(sf), want_sf.reshape(b, -1), "batched sf")


def _engine_calls(x, t, result, scale):
    q, sf = peers.fp4_quantize(x, t)
    qm, sfm = peers.fp4_quantize(x, sf_vec_size=32, sf_use_ue8m0=True, is_sf_swizzled_layout=False)
    qn, sfn = peers.nvfp4_quantize(x, t, peers.SfLayout.layout_linear)
    hq, hsf = peers.silu_and_mul_nvfp4_quantize(x, t)
    ft.silu_and_mul_nvfp4_quant(result, scale, x, t)
    vq, vsf = ft.scaled_fp4_quant(x, t)
    w = x.new_ones((x.shape[-1],))
    rq, rsf = peers.rmsnorm_fp4quant(x, w, global_scale=t, is_sf_swizzled_layout=True)
    aq, asf = peers.add_rmsnorm_fp4quant(x, torch.empty_like(x), w, block_size=32)
    return q, sf, qm, sfm, qn, sfn, hq, hsf, result, scale, vq, vsf, rq, rsf, aq, asf


def test_compile_traces_the_drop_ins_without_a_graph_break_or_a_recompile():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(_engine_calls, backend=counter, fullgraph=True, dynamic=True)
    mode = FakeTensorMode()
    for m, k in ((300, 256), (1000, 512)):
        with mode:
            args = (fake_cuda((m, k)), fake_cuda((1,), torch.float32), fake_cuda((m, k // 4), torch.uint8),
                    fake_cuda((round_up(m, 128), round_up(k // 32, 4) // 4), torch.int32))
        got = compiled(*args)
        with mode:
            want = _engine_calls(*args)
        assert [meta(g) for g in got] == [meta(w) for w in want]
    assert counter.frame_count == 1


# ----------------------------------------------------------------- FlashInfer's RMSNorm quantizers
@pytest.mark.parametrize("shape", [(5, 64), (2, 130, 256)])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("swizzled", [True, False])
def test_rmsnorm_fp4quant_shapes(fake, shape, block_size, swizzled):
    m, h = math.prod(shape[:-1]), shape[-1]
    groups = h // block_size
    sf_dtype = torch.float8_e4m3fn if block_size == 16 else torch.uint8
    want_sf = ((round_up(m, 128) * round_up(groups, 4),) if swizzled else shape[:-1] + (groups,))
    y, sf = peers.rmsnorm_fp4quant(fake_cuda(shape), fake_cuda((h,)), block_size=block_size,
                                   is_sf_swizzled_layout=swizzled)
    assert meta(y) == (shape[:-1] + (h // 2,), torch.float4_e2m1fn_x2) and meta(sf) == (want_sf, sf_dtype)
    y2, sf2 = fake_cuda(shape[:-1] + (h // 2,), torch.uint8), fake_cuda(want_sf, sf_dtype)
    got = peers.add_rmsnorm_fp4quant(fake_cuda(shape), fake_cuda(shape), fake_cuda((h,)), y2, sf2,
                                     fake_cuda((1,), torch.float32), block_size=block_size,
                                     is_sf_swizzled_layout=swizzled)
    assert got[0] is y2 and got[1] is sf2


def test_linear_scales_are_the_references_linear_layout():
    # The swizzled bytes' permutation back to rows and groups, on CPU tensors.
    bits = mixed_groups((300, 320), np.random.default_rng(5))
    _, swizzled = reference.quantize_nvfp4(bits, np.float32(1.0), sf_layout="swizzled")
    _, linear = reference.quantize_nvfp4(bits, np.float32(1.0), sf_layout="linear")
    got = peers.linear_scales(torch.from_numpy(swizzled.reshape(-1)), 300, 20)
    assert_bytes_equal(got.contiguous().numpy(), linear, "linear scales")


def test_rmsnorm_drop_in_rules(fake):
    x, w = fake_cuda((4, 64)), fake_cuda((64,))
    with pytest.raises(ValueError, match="block_size and scale_format must be 16 with 'e4m3'"):
        peers.rmsnorm_fp4quant(x, w, block_size=16, scale_format="ue8m0")
    with pytest.raises(ValueError, match="y_fp4 and block_scale must be given together"):
        peers.rmsnorm_fp4quant(x, w, y_fp4=fake_cuda((4, 32), torch.uint8))


@gpu
@pytest.mark.parametrize("swizzled", [True, False])
def test_rmsnorm_drop_ins_bytes(swizzled):
    m, h = 300, 512
    rng = np.random.default_rng(6)
    x, res = mixed_groups((m, h), rng), mixed_groups((m, h), rng)
    w = (0x3F80 + rng.integers(0, 64, h)).astype(np.uint16)
    layout = "swizzled" if swizzled else "linear"
    y, sf = peers.rmsnorm_fp4quant(_cuda(x), _cuda(w), global_scale=torch.tensor([2.0], device="cuda"),
                                   is_sf_swizzled_layout=swizzled)
    want_q, want_sf = reference.rms_norm_quantize_nvfp4(x, w, np.float32(2.0), sf_layout=layout)
    assert_bytes_equal(_bytes(y), want_q, "y")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "sf")
    residual = _cuda(res)
    want_res = res.copy()
    want_q, want_sf = reference.rms_norm_quantize_nvfp4(x, w, np.float32(1.0), residual=want_res, sf_layout="swizzled")
    y, sf, linear = peers.add_rmsnorm_fp4quant(_cuda(x), residual, _cuda(w), output_both_sf_layouts=True)
    assert_bytes_equal(residual.view(torch.int16).cpu().numpy().view(np.uint16), want_res, "residual")
    assert_bytes_equal(_bytes(y), want_q, "add y")
    assert_bytes_equal(_bytes(sf).reshape(-1), want_sf.reshape(-1), "add sf")
    assert meta(linear) == ((m, h // 16), torch.float8_e4m3fn)
    want_linear = reference.rms_norm_quantize_nvfp4(x, w, np.float32(1.0), residual=res.copy(), sf_layout="linear")[1]
    assert_bytes_equal(_bytes(linear), want_linear, "add linear sf")
