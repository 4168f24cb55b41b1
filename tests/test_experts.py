"""The mixture-of-experts quantizers: quantize_nvfp4_experts and
silu_and_mul_quantize_nvfp4_experts, the rows of each expert under its own tensor scale
and its scales in 128-row blocks of their own, in one launch of the row kernel; and the
masked batches, quantize_nvfp4_batched and silu_and_mul_quantize_nvfp4_batched (with and
without valid_rows).

On the GPU: byte for byte against fp4q.reference for every routing (uniform, one hot
expert, many empty experts, one-token experts, every token in one expert, E = 1 equal to
quantize_nvfp4, E = 1024), offsets that are out of order, negative or past M (resolved
on the device by the spec's rule), every unit count of the row kernel, fp16 and strided
x, reused buffers (rows no expert owns keep their bytes, every scale byte is written),
empty inputs, torch's ops and one CUDA graph replayed with new offsets. On any machine
(the fakes): the rules on each argument, the launch (SEGMENTS, the scale blocks, the
offsets' pointer), torch's fakes and a compile trace.
"""

from __future__ import annotations

import numpy as np
import pytest

import fp4q
from fp4q.numerics import reference

import fakes
from helpers import assert_bytes_equal
from test_per_row import row_scales
from test_rms_norm import rows_of

gpu = pytest.mark.gpu
SENTINEL = 0xA5


def routing(m: int, experts: int, kind: str, rng) -> np.ndarray:
    """Offsets ``(E + 1,)`` int32 of ``m`` rows routed to ``experts`` experts."""
    if kind == "uniform":
        counts = np.full(experts, m // experts)
        counts[: m % experts] += 1
    elif kind == "hot":  # one expert takes nine tenths, the rest share the others
        counts = np.zeros(experts, np.int64)
        counts[rng.integers(experts)] = m - m // 10
        counts += np.bincount(rng.integers(0, experts, m // 10), minlength=experts)
    elif kind == "sparse":  # most experts get no token
        chosen = rng.choice(experts, size=max(1, experts // 8), replace=False)
        counts = np.bincount(rng.choice(chosen, size=m), minlength=experts)
    elif kind == "single_tokens":
        counts = np.zeros(experts, np.int64)
        counts[rng.choice(experts, size=min(m, experts), replace=False)] = 1
        counts[0] += m - counts.sum()
    elif kind == "one_expert":
        counts = np.zeros(experts, np.int64)
        counts[-1] = m
    else:
        counts = rng.multinomial(m, rng.dirichlet(np.ones(experts)))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def scales_of(experts: int, rng) -> np.ndarray:
    return row_scales(experts, rng) if experts > 8 else (2.0 ** rng.uniform(-10, 10, experts)).astype(np.float32)


def check(cp, x_host, offsets, tensor_sf, *, silu=False, x=None, out=None, sf_out=None, what=""):
    """The op on the device against the reference: rows no expert owns keep what ``out`` held
    (the sentinel), every other byte is the reference's."""
    m = x_host.shape[0]
    k = x_host.shape[1] // 2 if silu else x_host.shape[1]
    op = fp4q.silu_and_mul_quantize_nvfp4_experts if silu else fp4q.quantize_nvfp4_experts
    want_op = reference.silu_and_mul_quantize_nvfp4_experts if silu else reference.quantize_nvfp4_experts
    if out is None:
        out = cp.full((m, k // 2), SENTINEL, cp.uint8)
    held = cp.asnumpy(out)
    got = op(cp.asarray(x_host) if x is None else x, cp.asarray(offsets), cp.asarray(tensor_sf), out=out,
             sf_out=sf_out)
    want_q, want_sf = want_op(x_host, offsets, tensor_sf)
    cp.cuda.get_current_stream().synchronize()
    rows, _ = reference.resolve_expert_offsets(offsets, m)
    owned = np.zeros(m, bool)
    owned[rows[0]:rows[-1]] = True
    want_q[~owned] = held[~owned]
    assert_bytes_equal(cp.asnumpy(got[0]), want_q, f"q {what}")
    assert_bytes_equal(cp.asnumpy(got[1]), want_sf, f"sf {what}")
    return got


# ---------------------------------------------------------------- on the GPU
@gpu
@pytest.mark.parametrize("kind", ["uniform", "hot", "sparse", "single_tokens", "one_expert", "random"])
@pytest.mark.parametrize("experts", [1, 8, 64, 256])
@pytest.mark.parametrize("silu", [False, True])
def test_routings(kind, experts, silu):
    import cupy as cp

    rng = np.random.default_rng(experts)
    for m, k in ((700, 2048), (3, 7168), (1300, 64)):
        x = rows_of(m, 2 * k if silu else k, rng)
        check(cp, x, routing(m, experts, kind, rng), scales_of(experts, rng), silu=silu,
              what=f"{kind} E={experts} {m}x{k}")


@gpu
@pytest.mark.parametrize("offsets", [
    [0, 50, 20, 100],  # a decreasing offset: an empty expert, the next starts at 50
    [-5, 10, 10, 99999],  # negative and past M: clamped
    [30, 40, 60, 90],  # rows before the first and after the last expert: not read, not written
    [120, 120, 120, 120],  # every expert empty
    [2**31 - 1, -2**31, 7, 0],  # int32 extremes
])
def test_bad_offsets_are_resolved_on_the_device(offsets):
    import cupy as cp

    rng = np.random.default_rng(7)
    x = rows_of(120, 512, rng)
    check(cp, x, np.array(offsets, np.int32), scales_of(3, rng), what=str(offsets))


@gpu
def test_one_expert_is_quantize_nvfp4():
    import cupy as cp

    rng = np.random.default_rng(1)
    for m in (1, 127, 128, 129, 1000):
        x = cp.asarray(rows_of(m, 1024, rng))
        tsf = cp.asarray(np.array([2688.0 / 7.5], np.float32))
        got = fp4q.quantize_nvfp4_experts(x, cp.asarray(np.array([0, m], np.int32)), tsf)
        want = fp4q.quantize_nvfp4(x, tsf)
        for g, w, name in zip(got, want, ("q", "sf")):
            assert_bytes_equal(cp.asnumpy(g), cp.asnumpy(w), f"{name} m={m}")


@gpu
# The row kernel's CTA shapes: 128 threads of one unit, 256 threads of 1, 2, 4 and 8 units.
@pytest.mark.parametrize("k", [64, 2064, 4112, 16384, 32768])
@pytest.mark.parametrize("silu", [False, True])
def test_every_cta_shape(k, silu):
    import cupy as cp

    rng = np.random.default_rng(k)
    x = rows_of(300, 2 * k if silu else k, rng)
    check(cp, x, routing(300, 5, "random", rng), scales_of(5, rng), silu=silu, what=f"K={k}")


@gpu
def test_the_most_experts():
    import cupy as cp

    rng = np.random.default_rng(2)
    for m, kind in ((3000, "random"), (5, "single_tokens"), (4000, "sparse")):
        check(cp, rows_of(m, 256, rng), routing(m, 1024, kind, rng), scales_of(1024, rng), what=f"E=1024 {kind}")


@gpu
def test_fp16_strided_and_reused_buffers():
    import cupy as cp

    rng = np.random.default_rng(4)
    offsets, tsf = routing(400, 16, "random", rng), scales_of(16, rng)
    check(cp, rows_of(400, 512, rng, np.float16), offsets, tsf, what="fp16")
    x_host = rows_of(400, 512, rng)
    wide = cp.zeros((400, 520), cp.uint16)
    wide[:, :512] = cp.asarray(x_host)
    check(cp, x_host, offsets, tsf, x=wide[:, :512], what="strided")
    # A reused scale buffer: every byte written again, the padding of each expert's last block
    # and the blocks past the last expert's included; q rows no expert owns keep their bytes.
    sf = cp.full(fp4q.experts_sf_shape(400, 512, 16), 0xEE, cp.uint8)
    q = cp.full((400, 256), 0x3C, cp.uint8)
    for kind in ("hot", "single_tokens", "uniform"):
        shifted = np.minimum(routing(380, 16, kind, rng) + 10, 400).astype(np.int32)
        check(cp, x_host, shifted, tsf, out=q, sf_out=sf, what=f"reused {kind}")


@gpu
def test_empty_inputs():
    import cupy as cp

    offsets, tsf = cp.asarray(np.array([0, 0, 0], np.int32)), cp.ones(2, cp.float32)
    q, sf = fp4q.quantize_nvfp4_experts(cp.zeros((0, 64), cp.uint16), offsets, tsf)
    assert q.shape == (0, 32) and sf.shape == (0, 1, 32, 4, 4)
    q, sf = fp4q.quantize_nvfp4_experts(cp.zeros((5, 0), cp.uint16), offsets, tsf)
    assert q.shape == (5, 0) and sf.shape == (2, 0, 32, 4, 4)


@gpu
def test_torch_ops_and_a_graph_replayed_with_new_offsets():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft

    rng = np.random.default_rng(9)
    m, k, experts = 500, 1024, 8
    x_host = rows_of(m, 2 * k, rng)
    tsf_host = scales_of(experts, rng)
    x = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)
    tsf = torch.from_numpy(tsf_host).cuda()
    offsets = torch.zeros(experts + 1, dtype=torch.int32, device="cuda")

    def every_form():
        return (*ft.quantize_nvfp4_experts(x[:, :k], offsets, tsf),
                *ft.silu_and_mul_quantize_nvfp4_experts(x, offsets, tsf, fp4_dtype=True))

    def check_all(got, routed):
        q, sf = reference.quantize_nvfp4_experts(np.ascontiguousarray(x_host[:, :k]), routed, tsf_host)
        hq, hsf = reference.silu_and_mul_quantize_nvfp4_experts(x_host, routed, tsf_host)
        for i, (g, want) in enumerate(zip(got, (q, sf, hq, hsf))):
            assert_bytes_equal(g.cpu().view(torch.uint8).numpy(), want, f"output {i}")

    first = routing(m, experts, "uniform", rng)
    offsets.copy_(torch.from_numpy(first))
    check_all(every_form(), first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = every_form()
    for kind in ("hot", "sparse", "one_expert"):
        routed = routing(m, experts, kind, rng)
        offsets.copy_(torch.from_numpy(routed))
        graph.replay()
        torch.cuda.synchronize()
        check_all(captured, routed)


def check_batches(cp, x_host, tensor_sf, valid_rows=None, *, silu=False, out=None, sf_out=None, what=""):
    """The batched op on the device against the reference: rows at or past a batch's count keep
    what ``out`` held, every other byte is the reference's."""
    b, m = x_host.shape[:2]
    k = x_host.shape[2] // 2 if silu else x_host.shape[2]
    op = fp4q.silu_and_mul_quantize_nvfp4_batched if silu else fp4q.quantize_nvfp4_batched
    want_op = reference.silu_and_mul_quantize_nvfp4_batched if silu else reference.quantize_nvfp4_batched
    if out is None:
        out = cp.full((b, m, k // 2), SENTINEL, cp.uint8)
    held = cp.asnumpy(out)
    got = op(cp.asarray(x_host), cp.asarray(tensor_sf), valid_rows=None if valid_rows is None else
             cp.asarray(valid_rows), out=out, sf_out=sf_out)
    want_q, want_sf = want_op(x_host, tensor_sf, valid_rows)
    cp.cuda.get_current_stream().synchronize()
    counts = np.full(b, m) if valid_rows is None else np.clip(valid_rows.astype(np.int64), 0, m)
    unread = np.arange(m)[None, :] >= counts[:, None]
    want_q[unread] = held[unread]
    assert_bytes_equal(cp.asnumpy(got[0]), want_q, f"q {what}")
    assert_bytes_equal(cp.asnumpy(got[1]), want_sf, f"sf {what}")


@gpu
@pytest.mark.parametrize("batches, m", [(1, 1), (4, 130), (64, 40), (3, 300)])
@pytest.mark.parametrize("silu", [False, True])
def test_batches(batches, m, silu):
    import cupy as cp

    rng = np.random.default_rng(batches * m)
    k = 512
    x = rows_of(batches * m, 2 * k if silu else k, rng).reshape(batches, m, -1)
    tsf = scales_of(batches, rng)
    check_batches(cp, x, tsf, silu=silu, what="every row")
    counts = rng.integers(0, m + 1, batches).astype(np.int32)
    counts[: min(batches, 4)] = np.array([0, m, m + 7, -3], np.int32)[: min(batches, 4)]
    check_batches(cp, x, tsf, counts, silu=silu, what=f"counts {counts[:6]}")


@gpu
def test_batches_are_quantize_nvfp4_of_each_batch_and_reuse_buffers():
    import cupy as cp

    rng = np.random.default_rng(12)
    x = cp.asarray(rows_of(3 * 200, 256, rng).reshape(3, 200, 256))
    tsf = cp.asarray(scales_of(3, rng))
    q, sf = fp4q.quantize_nvfp4_batched(x, tsf)
    for b in range(3):
        want = fp4q.quantize_nvfp4(x[b], tsf[b:b + 1])
        assert_bytes_equal(cp.asnumpy(q[b]), cp.asnumpy(want[0]), f"q[{b}]")
        assert_bytes_equal(cp.asnumpy(sf[b]), cp.asnumpy(want[1]), f"sf[{b}]")
    sf_reused = cp.full(sf.shape, 0xEE, cp.uint8)
    check_batches(cp, cp.asnumpy(x), cp.asnumpy(tsf), np.array([5, 0, 199], np.int32), sf_out=sf_reused,
                  what="reused")


@gpu
def test_torch_batches_and_a_graph_replayed_with_new_counts():
    torch = pytest.importorskip("torch")
    import fp4q.torch as ft

    rng = np.random.default_rng(13)
    x_host = rows_of(4 * 150, 2 * 256, rng).reshape(4, 150, 512)
    tsf_host = scales_of(4, rng)
    x = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)
    tsf = torch.from_numpy(tsf_host).cuda()
    counts = torch.zeros(4, dtype=torch.int32, device="cuda")

    def every_form():
        return (*ft.quantize_nvfp4_batched(x[..., :256], tsf, valid_rows=counts),
                *ft.silu_and_mul_quantize_nvfp4_batched(x, tsf, valid_rows=counts, fp4_dtype=True))

    def check_all(got, valid):
        q_out = reference.quantize_nvfp4_batched(np.ascontiguousarray(x_host[..., :256]), tsf_host, valid)
        h_out = reference.silu_and_mul_quantize_nvfp4_batched(x_host, tsf_host, valid)
        unread = np.arange(150)[None, :] >= np.clip(valid, 0, 150)[:, None]
        for i, (g, want) in enumerate(zip(got, (*q_out, *h_out))):
            g = g.cpu().view(torch.uint8).numpy()
            if i % 2 == 0:  # q: rows past the count are not written
                want = want.copy()
                want[unread] = g[unread]
            assert_bytes_equal(g, want, f"output {i}")

    first = np.array([150, 3, 0, 77], np.int32)
    counts.copy_(torch.from_numpy(first))
    check_all(every_form(), first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = every_form()
    for valid in (np.array([1, 150, 149, 0], np.int32), np.array([-1, 200, 64, 128], np.int32)):
        counts.copy_(torch.from_numpy(valid))
        graph.replay()
        torch.cuda.synchronize()
        check_all(captured, valid)


# ---------------------------------------------------------------- on any machine
def test_batch_rules(cp):
    x = cp.asarray(np.zeros((4, 6, 64), np.uint16))
    tsf = cp.asarray(np.ones(4, np.float32))
    op = fp4q.quantize_nvfp4_batched
    with pytest.raises(ValueError, match=r"^x must have 3 dimensions \(B, M, K\) for quantize_nvfp4_batched, got shape "
                                         r"\(24, 64\)$"):
        op(x.reshape(24, 64), tsf)
    with pytest.raises(ValueError, match=r"^x must have 3 dimensions \(B, M, K\) for quantize_nvfp4_batched_masked"):
        op(x.reshape(24, 64), tsf, valid_rows=cp.asarray(np.zeros(4, np.int32)))
    with pytest.raises(ValueError, match=r"^tensor_sf must be a device float32 array of shape \(B,\) = \(4,\), one scale "
                                         r"per batch, got dtype float32 shape \(1,\)$"):
        op(x, cp.asarray(np.ones(1, np.float32)))
    with pytest.raises(TypeError, match=r"^tensor_sf must be a device float32 array of shape \(B,\) = \(4,\), one scale "
                                        r"per batch, got 2.0 \(float\)$"):
        op(x, 2.0)
    with pytest.raises(TypeError, match=r"^valid_rows must have dtype int32, got int64$"):
        op(x, tsf, valid_rows=cp.asarray(np.zeros(4, np.int64)))
    with pytest.raises(ValueError, match=r"^valid_rows must have shape \(4,\), got \(3,\)$"):
        op(x, tsf, valid_rows=cp.asarray(np.zeros(3, np.int32)))
    with pytest.raises(ValueError, match=r"^x must have at most 1024 batches \(B\) for quantize_nvfp4_batched, got 1025$"):
        op(cp.asarray(np.zeros((1025, 1, 64), np.uint16)), cp.asarray(np.ones(1025, np.float32)))
    with pytest.raises(ValueError, match=r"^x must have 3 dimensions \(B, M, 2N\) for "
                                         r"silu_and_mul_quantize_nvfp4_batched"):
        fp4q.silu_and_mul_quantize_nvfp4_batched(x[0], tsf)
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("counted", [False, True])
def test_the_batch_launch(cp, counted):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    x = cp.asarray(np.zeros((5, 300, 2048), np.uint16))
    tsf = cp.asarray(np.ones(5, np.float32))
    counts = cp.asarray(np.zeros(5, np.int32)) if counted else None
    q, sf = fp4q.quantize_nvfp4_batched(x, tsf, valid_rows=counts)
    assert q.shape == (5, 300, 1024) and sf.shape == (5, 3, 32, 32, 4, 4)
    launch = fakes.active.launches[-1]
    constants = dict(launch["spec"].constants)
    assert (constants["SEGMENTS"], constants["ROW_SCALE"]) == (2, 1)
    args = launch["args"]
    assert (args["rows"], args["experts"], args["batch_rows"], args["sf_blocks"]) == (1500, 5, 300, 15)
    assert args["valid_rows"] == (counts.data.ptr if counted else 0) and args["expert_offsets"] == 0


def test_rules(cp):
    x = cp.asarray(np.zeros((6, 64), np.uint16))
    offsets = cp.asarray(np.array([0, 3, 6], np.int32))
    tsf = cp.asarray(np.ones(2, np.float32))
    op = fp4q.quantize_nvfp4_experts
    with pytest.raises(TypeError, match=r"^expert_offsets must have dtype int32, got int64$"):
        op(x, cp.asarray(np.array([0, 3, 6], np.int64)), tsf)
    with pytest.raises(ValueError, match=r"^expert_offsets must have shape \(E \+ 1,\) with 1 <= E <= 1024 \(one first "
                                         r"row per expert, then the end\), got shape \(1,\)$"):
        op(x, cp.asarray(np.array([0], np.int32)), cp.asarray(np.ones(0, np.float32)))
    with pytest.raises(ValueError, match=r"got shape \(2, 3\)$"):
        op(x, cp.asarray(np.zeros((2, 3), np.int32)), tsf)
    with pytest.raises(ValueError, match=r"got shape \(1026,\)$"):
        op(x, cp.asarray(np.zeros(1026, np.int32)), cp.asarray(np.ones(1025, np.float32)))
    with pytest.raises(TypeError, match=r"^tensor_sf must be a device float32 array of shape \(E,\) = \(2,\), one scale "
                                        r"per expert, got 1.0 \(float\)$"):
        op(x, offsets, 1.0)
    with pytest.raises(TypeError, match=r"got 'dynamic' \(str\)$"):
        op(x, offsets, "dynamic")
    with pytest.raises(ValueError, match=r"^tensor_sf must be a device float32 array of shape \(E,\) = \(2,\), one scale "
                                         r"per expert, got dtype float32 shape \(3,\)$"):
        op(x, offsets, cp.asarray(np.ones(3, np.float32)))
    with pytest.raises(ValueError, match=r"^tensor_sf must be C-contiguous"):
        op(x, offsets, cp.asarray(np.ones(4, np.float32))[::2])
    with pytest.raises(ValueError, match=r"^sf_layout must be 'swizzled', got 'linear'$"):
        op(x, offsets, tsf, sf_layout="linear")
    with pytest.raises(ValueError, match=r"^x must have 2 dimensions \(M, K\) for quantize_nvfp4_experts, got shape "
                                         r"\(2, 3, 64\)$"):
        op(cp.asarray(np.zeros((2, 3, 64), np.uint16)), offsets, tsf)
    with pytest.raises(TypeError, match=r"^x must hold bfloat16 or float16 values"):
        op(cp.asarray(np.zeros((6, 64), np.float32)), offsets, tsf)
    with pytest.raises(ValueError, match=r"^x must have 2 dimensions \(M, 2N\) for silu_and_mul_quantize_nvfp4_experts"):
        fp4q.silu_and_mul_quantize_nvfp4_experts(cp.asarray(np.zeros(64, np.uint16)), offsets, tsf)
    with pytest.raises(ValueError, match=r"^K must be at most 32768 for quantize_nvfp4_experts \(the row kernel "
                                         r"quantizes the experts' rows, one row in one CTA\), got 32784$"):
        op(cp.asarray(np.zeros((2, 32784), np.uint16)), offsets, tsf)
    # Sized by the most blocks a routing fills: min(6, (6 + 127 * 2) // 128) = 2.
    with pytest.raises(ValueError, match=r"^sf_out must have shape \(2, 1, 32, 4, 4\), got \(1, 1, 32, 4, 4\)$"):
        op(x, offsets, tsf, sf_out=cp.asarray(np.zeros((1, 1, 32, 4, 4), np.uint8)))
    if fakes.active is not None:
        assert fakes.active.launches == []


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("m, experts, blocks", [(1, 1, 1), (300, 8, 10), (5, 64, 5), (4096, 64, 95)])
def test_the_launch(cp, silu, m, experts, blocks):
    if fakes.active is None:
        pytest.skip("reads the fake driver's record of the launch")
    k = 2048
    x = cp.asarray(np.zeros((m, 2 * k if silu else k), np.uint16))
    offsets = cp.asarray(np.zeros(experts + 1, np.int32))
    tsf = cp.asarray(np.ones(experts, np.float32))
    op = fp4q.silu_and_mul_quantize_nvfp4_experts if silu else fp4q.quantize_nvfp4_experts
    q, sf = op(x, offsets, tsf)
    assert q.shape == (m, k // 2) and sf.shape == (blocks, k // 64, 32, 4, 4) == fp4q.experts_sf_shape(m, k, experts)
    launch = fakes.active.launches[-1]
    constants = dict(launch["spec"].constants)
    assert (constants["SEGMENTS"], constants["ROW_SCALE"], constants["PROLOGUE"]) == (1, 1, int(silu))
    args = launch["args"]
    assert (args["rows"], args["cols"], args["experts"], args["sf_blocks"]) == (m, k, experts, blocks)
    assert (args["expert_offsets"], args["tensor_sf_ptr"]) == (offsets.data.ptr, tsf.data.ptr)
    assert (args["out"], args["sf_out"]) == (q.data.ptr, sf.data.ptr)
    assert args["weight"] == args["residual"] == 0


def test_torch_fakes_and_a_compile_trace():
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fp4q.torch as ft
    from torch_fakes import fake_cuda

    def experts(x, offsets, tsf):
        q, sf = ft.quantize_nvfp4_experts(x, offsets, tsf)
        ft.quantize_nvfp4_experts(x, offsets, tsf, out=torch.empty_like(q), sf_out=torch.empty_like(sf))
        return q, sf, *ft.silu_and_mul_quantize_nvfp4_experts(x, offsets, tsf)

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(experts, backend=counter, fullgraph=True, dynamic=True)
    mode = FakeTensorMode()
    for m, k in ((300, 320), (1000, 640), (5000, 576)):
        with mode:
            x = fake_cuda((m, k))
            offsets, tsf = fake_cuda((9,), torch.int32), fake_cuda((8,), torch.float32)
        q, sf, hq, hsf = compiled(x, offsets, tsf)
        assert q.shape == (m, k // 2) and hq.shape == (m, k // 4)
        assert sf.shape == fp4q.experts_sf_shape(m, k, 8) and hsf.shape == fp4q.experts_sf_shape(m, k // 2, 8)
        assert sf.dtype == torch.float8_e4m3fn
    assert counter.frame_count == 1
    with mode:
        x = fake_cuda((4, 64))
        with pytest.raises(ValueError, match=r"^tensor_sf must be a device float32 array of shape \(E,\) = \(3,\)"):
            torch.ops.fp4q.quantize_nvfp4_experts(x, fake_cuda((4,), torch.int32), fake_cuda((2,), torch.float32))
