"""scripts/bench/bench_triton.py in Triton's interpreter on the CPU, bit for bit against the numpy reference.

Skipped where triton is not installed (it is not a dependency of fp4q; CI
installs the version the benchmark machine runs). The interpreter
must be switched on before triton is first imported (triton's own jitted
library functions are decorated then), so the kernel runs in one child
process with TRITON_INTERPRET=1 for all cases; the tests compare its outputs,
padding bytes included (the buffers start as 0xAB).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fp4q import reference

pytest.importorskip("triton", exc_type=ModuleNotFoundError)
pytest.importorskip("torch", exc_type=ModuleNotFoundError)

from scripts.bench import bench_triton  # noqa: E402 - for its tile list; the kernel runs in the child

# The child imports the script the same way, from the repository root this copy of it sits in.
ROOT = pathlib.Path(bench_triton.__file__).resolve().parents[2]
TSFS = (1.0, float(np.float32(0.3)), 1024.0, 2.0**-15, 2.0**20)

# The start of a child running a kernel module of scripts/bench as `kernel`: it says where triton does not
# import, and reads the inputs (argv[1], .npz) and the cases (argv[2], JSON: name -> (tsf, config)).
CHILD_START = """
import json, sys
import numpy as np
import torch
from scripts.bench import {module} as kernel

if kernel.triton is None:
    print(json.dumps(dict(skip="triton does not import: " + kernel.TRITON_STATUS)))
    sys.exit(0)
inputs = np.load(sys.argv[1])
cases = json.loads(open(sys.argv[2]).read())
"""

CHILD = CHILD_START.format(module="bench_triton") + """
out = {}
with np.errstate(all="ignore"):  # the interpreter evaluates both sides of every where()
    for name, (tsf, config) in cases.items():
        x = torch.from_numpy(inputs[name].view(np.int16)).view(torch.bfloat16)
        q, sf = kernel.outputs(torch, x)
        q.fill_(0xAB)
        sf.fill_(0xAB)
        kernel.quantize(x, torch.tensor(np.float32(tsf)), q, sf, tuple(config))
        out["q_" + name], out["sf_" + name] = q.numpy(), sf.numpy()
    refused = []
    x = torch.zeros((4, 64), dtype=torch.bfloat16)
    q, sf = kernel.outputs(torch, x)
    for args in ((x, torch.tensor(1.0), q, sf, (1, 32, 1)), (x, torch.tensor(1.0), q[:2], sf, (1, 64, 1))):
        try:
            kernel.quantize(*args)
        except ValueError:
            refused.append(True)
        else:
            refused.append(False)
np.savez(sys.argv[3], **out)
print(json.dumps(dict(refused=refused)))
"""


def bf16_normal(m, k, seed, scale=1.0):
    f = np.random.default_rng(seed).standard_normal((m, k), dtype=np.float32) * np.float32(scale)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def adversarial() -> np.ndarray:
    """Rows of 16 groups (K = 256): the special values, exact e2m1 ties, and a ladder of group amaxes
    over every bf16 value from 2**-20 to 2**12 (e4m3 subnormal and zero scales, every rounding
    boundary of the scale, saturation at 448 for the larger tensor scales)."""
    rng = np.random.default_rng(5)
    to_bits = lambda f: (np.asarray(f, np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    special = np.array([0x0000, 0x8000, 0x7FC0, 0xFFC0, 0x7F81, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x007F],
                       dtype=np.uint16)
    rows = [rng.choice(special, size=(16, 256))]
    nan_groups = bf16_normal(16, 256, 6)
    nan_groups[:, :16] = 0x7FC0  # an all-NaN group: amax 0
    nan_groups[:, 16:32:3] = 0xFFC0  # NaN among numbers: ignored in the max
    nan_groups[:, 32:48] = 0x8000  # all -0
    rows.append(nan_groups)
    ties = np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -0.0],
                    np.float32)
    # amax 6 with tensor_sf 1 gives s = 1, scale 1 and inv 1: the ties stay exact ties.
    rows.append(np.tile(to_bits(ties), (8, 16)))
    rows.append(np.tile(to_bits(ties * np.float32(2.0**-3)), (8, 16)))
    ladder = np.arange(to_bits(2.0**-20), to_bits(2.0**12), dtype=np.uint16)
    ladder = np.concatenate([ladder, np.full(-len(ladder) % 16, ladder[-1], np.uint16)])
    groups = np.repeat(ladder[:, None], 16, axis=1)
    groups[:, 1:] = (groups[:, 1:].astype(np.int32) - rng.integers(0, 300, size=(len(ladder), 15))).clip(0)
    groups[:, 5] |= 0x8000  # a negative element below the amax in every group
    rows.append(groups.reshape(-1, 256))
    return np.concatenate(rows)


RAGGED = bf16_normal(20, 1072, seed=11)  # G = 67: the last scale word has padding groups
RANDOM_SHAPES = [(1, 16), (3, 48), (130, 208), (200, 1104), (64, 1024)]


def cases(configs) -> dict[str, tuple[np.ndarray, float, tuple]]:
    out = {}
    x = adversarial()
    for i, tsf in enumerate(TSFS):
        out[f"adversarial_{i}"] = (x, tsf, (64, 256, 4))
    for m, k in RANDOM_SHAPES:
        r = bf16_normal(m, k, seed=m + k, scale=3.0)
        out[f"random_{m}x{k}"] = (r, float(reference.global_scale(r)), (16, 256, 4))
    even = bf16_normal(256, 512, seed=13, scale=2.0)  # every program inside the tensor: no masks
    even[3, 40:56] = 0x7FC0  # an all-NaN group, and NaN among numbers in the next one
    even[3, 57] = 0xFFC1
    out["even_256x512"] = (even, float(reference.global_scale(even)), (16, 256, 4))
    small = bf16_normal(20, 208, seed=9)  # G = 13, M = 20: not multiples of 4, 128 or BLOCK_M = 32
    out["small_tiles_0"] = (small, 448.0 * 6 / 4.0, (1, 64, 1))
    out["small_tiles_1"] = (small, 448.0 * 6 / 4.0, (32, 128, 4))
    for i, config in enumerate(configs):
        out[f"tile_{i}"] = (RAGGED, float(reference.global_scale(RAGGED)), tuple(config))
    return out


def interpret(tmp: pathlib.Path, child: str, all_cases: dict) -> tuple[dict, dict]:
    """Runs ``child`` (CHILD_START and its body, which saves its outputs to argv[3]) with
    TRITON_INTERPRET=1 on ``all_cases`` (name -> (x, tsf, config)): its last line's JSON and the
    outputs; skips where triton does not import there, fails where the child does."""
    np.savez(tmp / "in.npz", **{name: x for name, (x, _, _) in all_cases.items()})
    (tmp / "cases.json").write_text(json.dumps({n: (tsf, list(c)) for n, (_, tsf, c) in all_cases.items()}))
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", child, str(tmp / "in.npz"), str(tmp / "cases.json"),
                           str(tmp / "out.npz")], capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"the interpreted kernel's process failed:\n{proc.stderr.strip()[-2000:]}")
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in status:
        pytest.skip(status["skip"])
    return status, dict(np.load(tmp / "out.npz"))


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """{"cases": name -> (x, tsf, config), "q_"/"sf_" + name -> outputs, "refused": [...]}: one child run."""
    all_cases = cases(bench_triton.CONFIGS)
    status, outputs = interpret(tmp_path_factory.mktemp("bench-triton"), CHILD, all_cases)
    return dict(cases=all_cases, refused=status["refused"], **outputs)


def assert_exact(interpreted, name):
    x, tsf, config = interpreted["cases"][name]
    q, sf = interpreted["q_" + name], interpreted["sf_" + name]
    q_ref, sf_ref = reference.quantize_nvfp4(x, tsf)
    bad_q = np.argwhere(q != q_ref)
    bad_sf = np.flatnonzero(sf != sf_ref.reshape(-1))
    assert bad_q.size == 0 and bad_sf.size == 0, (
        f"{name}: tsf={tsf} config={config}: {len(bad_q)} q bytes (first {bad_q[:3].tolist()}) and {bad_sf.size} "
        f"scale bytes (first offsets {bad_sf[:3].tolist()}) differ from the reference")


@pytest.mark.parametrize("i", range(len(TSFS)))
def test_adversarial_bit_exact(interpreted, i):
    assert interpreted["cases"][f"adversarial_{i}"][0].shape[0] % 128  # padding rows in the scales
    assert_exact(interpreted, f"adversarial_{i}")


@pytest.mark.parametrize("m, k", RANDOM_SHAPES)
def test_random_bit_exact(interpreted, m, k):
    assert_exact(interpreted, f"random_{m}x{k}")


def test_even_shape_without_bounds(interpreted):
    _, _, config = interpreted["cases"]["even_256x512"]
    assert bench_triton.even(256, 512, config)
    assert_exact(interpreted, "even_256x512")


@pytest.mark.parametrize("i", range(2))
def test_small_tiles_on_ragged_shapes(interpreted, i):
    assert_exact(interpreted, f"small_tiles_{i}")


@pytest.mark.parametrize("i", range(len(bench_triton.CONFIGS)))
def test_every_benchmark_tile(interpreted, i):
    assert_exact(interpreted, f"tile_{i}")


def test_the_tuned_tile_is_the_one_tried(tmp_path, monkeypatch):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"best": [dict(m=64, k=1024, block_m=32, block_k=128, warps=2, us=1.0)]}))
    monkeypatch.setattr(bench_triton, "TUNED", bench_triton.load_tuned(path))
    assert bench_triton.tiles_for(64, 1024) == ((32, 128, 2),)
    assert bench_triton.tiles_for(64, 2048) == bench_triton.CONFIGS
    assert bench_triton.load_tuned(tmp_path / "none.json") == {}


def test_bad_arguments_are_refused(interpreted):
    assert interpreted["refused"] == [True, True]


@pytest.mark.parametrize("even", (False, True), ids=("masked", "even"))
@pytest.mark.parametrize("tile", bench_triton.CONFIGS, ids=lambda t: f"{t[0]}x{t[1]}")
def test_the_kernel_compiles_for_hopper_without_a_gpu(tile, even):
    """The interpreter accepts what Triton's compiler may not (globals that are not
    constexpr objects, say): compile each benchmarked tile to a cubin for sm_90,
    with and without the bounds."""
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    kernel = bench_triton._nvfp4_kernel
    names = list(inspect.signature(kernel.fn).parameters)
    types = ["*i32", "*i32", "*i32", "*fp32", "i32", "i32", "i32", "constexpr", "constexpr", "constexpr"]
    constexprs = {(names.index("BLOCK_M"),): tile[0], (names.index("BLOCK_K"),): tile[1],
                  (names.index("EVEN"),): even}
    source = ASTSource(fn=kernel, signature=dict(zip(names, types)), constexprs=constexprs)
    compiled = compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": tile[2]})
    assert compiled.asm["cubin"][:4] == b"\x7fELF"


def test_the_tuning_space_fits_each_shape():
    from scripts.bench import tune_triton

    assert all(8 <= bm * bk // (32 * w) <= 32 and bk % 64 == 0 for bm, bk, w in tune_triton.SPACE)
    assert tune_triton.space_for(4096, 7168) == list(tune_triton.SPACE)
    small = tune_triton.space_for(3, 48)  # one scale word per row: tiles of 128 columns
    assert small and all(bk == 128 for _, bk, _ in small)
    assert tune_triton.parse_shapes("1x4096,8192X8192") == [(1, 4096), (8192, 8192)]
