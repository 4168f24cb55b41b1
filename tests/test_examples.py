"""examples/: what of each example can be checked without a GPU, and the examples themselves on one.

Without a GPU: the CuPy example's calls on the host-backed fake CuPy and driver (the ``cp`` fixture:
the argument rules, the output shapes and the launches that write them); the torch examples on fake
CUDA tensors (shapes and dtypes, a torch.compile trace with no graph break); each example's check
against the reference's own output (it passes) and a copy with one byte changed (it fails); the
runner's exit status. On a GPU (marked ``gpu``): every example's ``main``, as ``run_all.py`` runs it.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import fakes
import fp4q
from examples import cupy_round_trip, fused_serving, run_all
from fp4q.numerics import reference

M, K = 300, 256  # M not a multiple of 128: the swizzled scales have padding rows


def flipped(a: np.ndarray, index: int = 0) -> np.ndarray:
    """A copy of ``a`` with one bit of one byte changed."""
    b = np.array(a, copy=True)
    b.reshape(-1).view(np.uint8)[index] ^= 0x01
    return b


# ------------------------------------------------------------------------------------------- CuPy
def test_cupy_round_trip_calls_and_shapes(cp):
    x_bits = cupy_round_trip.bf16_activations(M, K)
    scale, q, sf, y = cupy_round_trip.round_trip(cp, x_bits)
    want_q, want_sf = reference.quantize_nvfp4(x_bits, 1.0)
    assert (scale.shape, scale.dtype) == ((), np.float32)
    assert (q.shape, q.dtype) == (want_q.shape, np.uint8)
    assert (sf.shape, sf.dtype) == (want_sf.shape, np.uint8)
    assert (y.shape, y.dtype) == ((M, K), np.uint16)
    if fakes.active is not None:  # the fake ran no kernel: check that kernels were launched onto every output
        written = {value for launch in fakes.active.launches for value in launch["args"].values()}
        for name, out in (("scale", scale), ("q", q), ("sf", sf), ("y", y)):
            assert out.data.ptr in written, f"no launch was given {name}'s address"
    else:
        cupy_round_trip.check(x_bits, cp.asnumpy(scale).reshape(()), cp.asnumpy(q), cp.asnumpy(sf), cp.asnumpy(y))


def _reference_round_trip(x_bits):
    scale = reference.global_scale(x_bits)
    q, sf = reference.quantize_nvfp4(x_bits, scale)
    return np.asarray(scale), q, sf, reference.dequantize_nvfp4(q, sf, scale, dtype="bfloat16")


def assert_checks_every_output(check, outputs) -> None:
    """``check(*outputs)`` passes, and fails once any one output has a byte changed."""
    check(*outputs)
    for i in range(len(outputs)):
        changed = list(outputs)
        changed[i] = flipped(outputs[i], index=outputs[i].nbytes // 2)
        with pytest.raises(AssertionError):
            check(*changed)


def test_cupy_check_passes_the_reference_and_fails_a_changed_byte():
    x_bits = cupy_round_trip.bf16_activations(M, K)
    assert_checks_every_output(lambda *out: cupy_round_trip.check(x_bits, *out), _reference_round_trip(x_bits))


# ------------------------------------------------------------------------------------------- torch
@pytest.fixture
def torch_fake():
    torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)
    from torch._subclasses.fake_tensor import FakeTensorMode

    return torch, FakeTensorMode()


def meta(t) -> tuple:
    return tuple(t.shape), t.dtype, t.device.type


def test_torch_example_shapes_eager_and_compiled(torch_fake):
    torch, mode = torch_fake
    example = importlib.import_module("examples.torch_eager_graph_compile")
    swizzled = reference.quantize_nvfp4(np.zeros((M, K), np.uint16), 1.0)[1].shape
    want = [((M, K // 2), torch.uint8, "cuda"), (swizzled, torch.float8_e4m3fn, "cuda"),
            ((), torch.float32, "cuda"), ((M, K), torch.bfloat16, "cuda")]
    with mode:
        x = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
        assert [meta(t) for t in example.quantize_and_back(x)] == want
    torch._dynamo.reset()
    # fullgraph: a graph break would raise. The eager backend needs no device; inductor runs on the GPU.
    assert [meta(t) for t in example.compiled(backend="eager")(x)] == want


def _torch_outputs(torch, x_bits):
    scale, q, sf, y = _reference_round_trip(x_bits)
    return [torch.from_numpy(q), torch.from_numpy(sf).view(torch.float8_e4m3fn),
            torch.from_numpy(scale.reshape(())), torch.from_numpy(y.view(np.int16)).view(torch.bfloat16)]


def test_torch_check_passes_the_reference_and_fails_a_changed_byte(torch_fake):
    torch, _ = torch_fake
    example = importlib.import_module("examples.torch_eager_graph_compile")
    x_bits = cupy_round_trip.bf16_activations(M, K)
    x = torch.from_numpy(x_bits.view(np.int16)).view(torch.bfloat16)
    outputs = _torch_outputs(torch, x_bits)
    example.check(x, outputs)
    for i, t in enumerate(outputs):
        changed = list(outputs)
        raw = t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16 if t.element_size() == 2 else torch.int32)
        changed[i] = torch.from_numpy(flipped(raw.numpy(), index=raw.numpy().nbytes // 2)).view(t.dtype)
        with pytest.raises(AssertionError):
            example.check(x, changed)


@pytest.mark.parametrize("swizzled", [True, False])
def test_vllm_swap_shapes(torch_fake, swizzled):
    torch, mode = torch_fake
    example = importlib.import_module("examples.vllm_swap")
    import fp4q.torch

    assert example.ops.scaled_fp4_quant is fp4q.torch.scaled_fp4_quant
    (q_shape, q_dtype), (sf_shape, sf_dtype) = example.expected_shapes(M, K, swizzled)
    assert sf_shape == ((384, 16) if swizzled else (M, K // 16))
    with mode:
        x = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
        scale = torch.empty((1,), dtype=torch.float32, device="cuda")
        q, sf = example.quantize_layer_input(x, scale, swizzled)
    assert (meta(q), meta(sf)) == ((q_shape, q_dtype, "cuda"), (sf_shape, sf_dtype, "cuda"))


@pytest.mark.parametrize("swizzled", [True, False])
def test_vllm_check_passes_the_reference_and_fails_a_changed_byte(torch_fake, swizzled):
    torch, _ = torch_fake
    example = importlib.import_module("examples.vllm_swap")
    x_bits = cupy_round_trip.bf16_activations(M, K)
    x = torch.from_numpy(x_bits.view(np.int16)).view(torch.bfloat16)
    scale = torch.tensor([float(reference.global_scale(x_bits))], dtype=torch.float32)
    q, sf = reference.quantize_nvfp4(x_bits, float(scale), sf_layout="swizzled" if swizzled else "linear")
    sf_2d = sf.reshape(example.expected_shapes(M, K, swizzled)[1][0])
    as_sf = lambda a: torch.from_numpy(a).view(torch.float8_e4m3fn)  # noqa: E731
    example.check(x, scale, torch.from_numpy(q), as_sf(sf_2d), swizzled)
    with pytest.raises(AssertionError):
        example.check(x, scale, torch.from_numpy(flipped(q, 7)), as_sf(sf_2d), swizzled)
    with pytest.raises(AssertionError):
        example.check(x, scale, torch.from_numpy(q), as_sf(flipped(sf_2d, 3)), swizzled)
    with pytest.raises(AssertionError):  # the right bytes in the wrong shape
        example.check(x, scale, torch.from_numpy(q), as_sf(sf.reshape(-1)), swizzled)


def test_qat_check_passes_the_reference_and_fails_a_changed_byte(torch_fake):
    torch, _ = torch_fake
    example = importlib.import_module("examples.qat_linear")
    rng = np.random.default_rng(5)
    x_bits = cupy_round_trip.bf16_activations(M, K)
    w_bits = (rng.standard_normal((128, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    as_bf16 = lambda a: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)  # noqa: E731
    x_scale, w_scale = reference.global_scale(x_bits), reference.global_scale(w_bits)
    xq = reference.fake_quantize_nvfp4(x_bits, x_scale, stochastic=True, seed=example.SEED, offset=3)
    wq = reference.fake_quantize_nvfp4(w_bits, w_scale, block_2d=True)
    scales = torch.tensor(float(x_scale)), torch.tensor(float(w_scale))
    example.check(as_bf16(x_bits), as_bf16(w_bits), 3, (as_bf16(xq), as_bf16(wq), *scales))
    for changed in ((as_bf16(flipped(xq, 9)), as_bf16(wq), *scales), (as_bf16(xq), as_bf16(flipped(wq, 9)), *scales),
                    (as_bf16(xq), as_bf16(wq), scales[0] * 2, scales[1])):
        with pytest.raises(AssertionError):
            example.check(as_bf16(x_bits), as_bf16(w_bits), 3, changed)
    with pytest.raises(AssertionError):  # another step's random bits
        example.check(as_bf16(x_bits), as_bf16(w_bits), 4, (as_bf16(xq), as_bf16(wq), *scales))


def test_qat_operands_shapes(torch_fake):
    torch, mode = torch_fake
    example = importlib.import_module("examples.qat_linear")
    with mode:
        # A weight that needs no gradient: autograd on fake CUDA tensors needs a CUDA build of torch.
        layer = example.QATLinear.__new__(example.QATLinear)
        torch.nn.Module.__init__(layer)
        layer.weight = torch.empty((128, K), dtype=torch.bfloat16, device="cuda")
        x = torch.empty((M, K), dtype=torch.bfloat16, device="cuda")
        xq, wq, xs, ws = layer.operands(x, 0)
        y = layer(x, 1)
    assert [meta(t) for t in (xq, wq, xs, ws, y)] == [((M, K), torch.bfloat16, "cuda"), ((128, K), torch.bfloat16, "cuda"),
                                                     ((), torch.float32, "cuda"), ((), torch.float32, "cuda"),
                                                     ((M, 128), torch.bfloat16, "cuda")]


# ------------------------------------------------------------------------------------------- runner
def test_runner_finds_every_example():
    assert [p.name for p in run_all.examples()] == [
        "cupy_round_trip.py", "fused_serving.py", "qat_linear.py", "torch_eager_graph_compile.py", "vllm_swap.py"]


def test_runner_exit_status(tmp_path, capsys):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("print('first')\nprint('the result line')\n")
    bad.write_text("raise AssertionError('codes differ')\n")
    assert run_all.run([good]) == 0
    assert "ok      good" in capsys.readouterr().out
    assert run_all.run([good, bad]) == 1
    out = capsys.readouterr().out
    assert "FAILED  bad (exit 1" in out and "AssertionError: codes differ" in out
    assert run_all.main(["no_such_example"]) == 2


# ------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.stem for p in run_all.examples()])
def test_example_runs(name, capsys):
    if name != "cupy_round_trip":
        pytest.importorskip("torch", exc_type=ModuleNotFoundError)
    importlib.import_module(f"examples.{name}").main()
    assert "fp4q.reference" in capsys.readouterr().out


# ----------------------------------------------------------------------------------- fused serving
def test_fused_serving_calls_and_shapes(cp):
    host = fused_serving.inputs(M, K, 2 * K)
    residual, q_norm, sf_norm, q_mlp, sf_mlp = fused_serving.layer(cp, host)
    assert (residual.shape, q_norm.shape, q_mlp.shape) == ((M, K), (M, K // 2), (M, K))
    assert sf_norm.shape == fp4q.swizzled_sf_shape(M, K) and sf_mlp.shape == fp4q.swizzled_sf_shape(M, 2 * K)
    if fakes.active is not None:  # the fake ran no kernel: both launches were given the outputs
        written = {value for launch in fakes.active.launches for value in launch["args"].values()}
        for out in (residual, q_norm, sf_norm, q_mlp, sf_mlp):
            assert out.data.ptr in written
    else:
        fused_serving.check(host, *(cp.asnumpy(o) for o in (residual, q_norm, sf_norm, q_mlp, sf_mlp)))


def test_fused_serving_check_passes_the_reference_and_fails_a_changed_byte():
    host = fused_serving.inputs(M, K, 2 * K)
    residual = host["residual"].copy()
    q_norm, sf_norm = reference.rms_norm_quantize_nvfp4(host["x"], host["weight"], np.float32(1.0),
                                                        residual=residual)
    q_mlp, sf_mlp = reference.silu_and_mul_quantize_nvfp4(host["gate_up"], np.float32(1.0))
    assert_checks_every_output(lambda *out: fused_serving.check(host, *out),
                               (residual, q_norm, sf_norm, q_mlp, sf_mlp))
