"""scripts/bench/triton_training.py in Triton's interpreter on the CPU, bit for bit against
fp4q.reference.quantize_nvfp4_training (both directions, padding bytes of the scales included).

As tests/test_bench_triton.py: skipped where triton or torch is not installed; the kernel
runs in one child process with TRITON_INTERPRET=1 for all cases (the interpreter must be on
before triton is first imported), the outputs starting as 0xAB. Arguments the wrapper refuses
never reach a launch, so they are checked here; and each tile compiles for sm_90 without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from fp4q import reference

pytest.importorskip("triton", exc_type=ModuleNotFoundError)
torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)

from scripts.bench import triton_training  # noqa: E402 - the kernel runs in the child
from test_bench_triton import CHILD_START, TSFS, adversarial, bf16_normal, interpret  # noqa: E402

CHILD = CHILD_START.format(module="triton_training") + """
out = {}
with np.errstate(all="ignore"):  # the interpreter evaluates both sides of every where()
    for name, (tsf, config) in cases.items():
        x = torch.from_numpy(inputs[name].view(np.int16)).view(torch.bfloat16)
        got = kernel.outputs(torch, x)
        for t in got:
            t.fill_(0xAB)
        kernel.quantize_training(x, torch.tensor(np.float32(tsf)), *got, tuple(config))
        for field, t in zip(("q", "sf", "q_t", "sf_t"), got):
            out[field + "_" + name] = t.numpy()
np.savez(sys.argv[3], **out)
print(json.dumps(dict(ok=True)))
"""

ADVERSARIAL = adversarial()  # 304 x 256: special values, ties and an amax ladder along the rows
RAGGED = bf16_normal(144, 336, seed=17, scale=2.0)  # G = 21, G_T = 9: padding groups both ways
EVEN = bf16_normal(256, 256, seed=19, scale=2.0)  # every tile inside the tensors: no masks
RANDOM_SHAPES = [(16, 16), (48, 80), (160, 208), (272, 1040), (128, 128)]
# A columnwise group in one thread (16 rows x 2 words), and over two warps (8 rows x 4 words each).
IN_THREAD, SPLIT = (64, 64, 2, 2), (64, 128, 4, 4)
NON_FINITE = (float("inf"), float("nan"))


def cases() -> dict[str, tuple[np.ndarray, float, tuple]]:
    out = {}
    for i, tsf in enumerate(TSFS):
        out[f"adversarial_{i}"] = (ADVERSARIAL, tsf, IN_THREAD)
    # Transposed, the ladder runs down the columns: every amax of a columnwise group; K = 304.
    transposed = np.ascontiguousarray(ADVERSARIAL.T)
    for i, tsf in enumerate(TSFS[:3]):
        out[f"transposed_{i}"] = (transposed, tsf, SPLIT)
    for i, (m, k) in enumerate(RANDOM_SHAPES):
        x = bf16_normal(m, k, seed=m + k, scale=3.0)
        out[f"random_{m}x{k}"] = (x, float(reference.global_scale(x)), (IN_THREAD, SPLIT)[i % 2])
    nan_groups = EVEN.copy()
    nan_groups[32:48, 5] = 0x7FC0  # an all-NaN columnwise group; NaN among numbers in the next column
    nan_groups[40, 6] = 0xFFC1
    nan_groups[7, 16:32] = 0xFF80  # -Inf: a rowwise group saturating
    for i, tsf in enumerate(NON_FINITE):  # scales of real groups 0x7F (NaN); the padding's stay 0x00
        out[f"non_finite_{i}"] = (RAGGED, tsf, (IN_THREAD, SPLIT)[i])
    for i, config in enumerate(triton_training.CONFIGS):
        out[f"ragged_{i}"] = (RAGGED, float(reference.global_scale(RAGGED)), config)
        out[f"even_{i}"] = (nan_groups, 448.0 * 6 / 3.0, config)
    return out


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """{"cases": name -> (x, tsf, config), field + "_" + name -> output}: one child run."""
    all_cases = cases()
    _, outputs = interpret(tmp_path_factory.mktemp("triton-training"), CHILD, all_cases)
    return dict(cases=all_cases, **outputs)


def assert_exact(interpreted, name):
    x, tsf, config = interpreted["cases"][name]
    ref = reference.quantize_nvfp4_training(x, tsf)
    bad = []
    for field in ("q", "sf", "q_t", "sf_t"):
        got, want = interpreted[f"{field}_{name}"].reshape(-1), getattr(ref, field).reshape(-1)
        assert got.shape == want.shape, f"{name} {field}: {got.shape} bytes, expected {want.shape}"
        wrong = np.flatnonzero(got != want)
        if wrong.size:
            bad.append(f"{field}: {wrong.size} bytes (first offsets {wrong[:3].tolist()})")
    assert not bad, f"{name}: tsf={tsf} config={config} {x.shape}: differ from the reference: {'; '.join(bad)}"


@pytest.mark.parametrize("i", range(len(TSFS)))
def test_adversarial_bit_exact(interpreted, i):
    assert ADVERSARIAL.shape[0] % 128 and ADVERSARIAL.shape[0] % 16 == 0  # padding rows in the scales
    assert_exact(interpreted, f"adversarial_{i}")


@pytest.mark.parametrize("i", range(3))
def test_transposed_adversarial_bit_exact(interpreted, i):
    assert_exact(interpreted, f"transposed_{i}")


@pytest.mark.parametrize("m, k", RANDOM_SHAPES)
def test_random_bit_exact(interpreted, m, k):
    assert_exact(interpreted, f"random_{m}x{k}")


@pytest.mark.parametrize("i", range(len(NON_FINITE)))
def test_non_finite_tensor_scale_leaves_the_padding_zero(interpreted, i):
    assert_exact(interpreted, f"non_finite_{i}")


@pytest.mark.parametrize("i", range(len(triton_training.CONFIGS)))
def test_every_tile_ragged_and_even(interpreted, i):
    config = triton_training.CONFIGS[i]
    assert not triton_training.even(*RAGGED.shape, config) and triton_training.even(*EVEN.shape, config)
    assert_exact(interpreted, f"ragged_{i}")
    assert_exact(interpreted, f"even_{i}")


def refused_calls():
    """(why, call arguments) the wrapper must refuse with ValueError before any launch."""
    x = torch.zeros((64, 128), dtype=torch.bfloat16)
    tsf = torch.tensor(1.0)
    good = triton_training.outputs(torch, x)
    config = triton_training.CONFIGS[0]
    odd = torch.zeros((40, 128), dtype=torch.bfloat16)
    return [
        ("M not a multiple of 16", (odd, tsf, *triton_training.outputs(torch, odd), config)),
        ("K not a multiple of 16", (x[:, :120].contiguous(), tsf, *good, config)),
        ("a 1D x", (x.reshape(-1), tsf, *good, config)),
        ("float32 x", (x.float(), tsf, *good, config)),
        ("BLOCK_M below 64", (x, tsf, *good, (32, 64, 2, 2))),
        ("BLOCK_K not a power of two", (x, tsf, *good, (64, 96, 2, 2))),
        ("VEC 1", (x, tsf, *good, (64, 64, 1, 2))),
        ("q too short", (x, tsf, good[0][:32], *good[1:], config)),
        ("sf_t one byte short", (x, tsf, *good[:3], good[3][:-1], config)),
        ("q_t of x's shape", (x, tsf, good[0], good[1], good[0], good[3], config)),
        ("x not contiguous", (torch.zeros((64, 256), dtype=torch.bfloat16)[:, ::2], tsf, *good, config)),
        ("int32 outputs", (x, tsf, *(t.view(torch.int32) for t in good), config)),
        ("float64 tsf", (x, torch.tensor(1.0, dtype=torch.float64), *good, config)),
        ("two tsf values", (x, torch.ones(2), *good, config)),
    ]


@pytest.mark.parametrize("why, args", refused_calls(), ids=[why for why, _ in refused_calls()])
def test_bad_arguments_are_refused(why, args):
    with pytest.raises(ValueError):
        triton_training.quantize_training(*args)


def test_outputs_and_even():
    x = torch.zeros((48, 80), dtype=torch.bfloat16)
    q, sf, q_t, sf_t = triton_training.outputs(torch, x)
    assert (tuple(q.shape), tuple(q_t.shape)) == ((48, 40), (80, 24))
    assert (sf.numel(), sf_t.numel()) == (512 * 1 * 2, 512 * 1 * 1)  # ceil(G/4) = 2, ceil(G_T/4) = 1
    assert triton_training.even(256, 512, (128, 256, 4, 8))
    assert triton_training.even(256, 512, (256, 256, 4, 8))  # BLOCK_M = M: still inside
    assert not triton_training.even(192, 512, (64, 128, 2, 4))  # rows of the scales up to 256
    assert not triton_training.even(256, 320, (64, 64, 2, 2))  # K not a multiple of 128


@pytest.mark.parametrize("i", range(len(triton_training.CONFIGS)))
def test_the_kernel_compiles_for_hopper_without_a_gpu(i):
    """Each tile compiles to a cubin for sm_90 (the interpreter accepts what the compiler may not),
    with the bounds for half the tiles and without for the other half."""
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    block_m, block_k, vec, warps = triton_training.CONFIGS[i]
    kernel = triton_training._training_kernel
    names = list(inspect.signature(kernel.fn).parameters)
    types = ["*i32"] * 5 + ["*fp32", "i32", "i32"] + ["constexpr"] * 4
    constexprs = {(names.index(n),): v for n, v in dict(BLOCK_M=block_m, BLOCK_K=block_k, VEC=vec,
                                                        EVEN=bool(i % 2)).items()}
    source = ASTSource(fn=kernel, signature=dict(zip(names, types)), constexprs=constexprs)
    options = {"num_warps": warps, "enable_fp_fusion": False}  # as quantize_training launches it
    compiled = compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    assert compiled.asm["cubin"][:4] == b"\x7fELF"
