"""The pre-Hopper code path on a Hopper GPU: every public operation with the device mapped to the test
target ``sm_80_on_sm_90a`` (sm_80's templates, flags and kernel choices, compiled for sm_90a), bit-exact
against the reference. Each case runs in a new process, so no kernel, plan or cache of the real target
is reused."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from fp4q.kernels.archs import EMULATED_SM_80

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
gpu = pytest.mark.gpu

PRELUDE = textwrap.dedent(f"""
    import sys
    import numpy as np
    import cupy as cp
    import ml_dtypes
    sys.path.insert(0, {str(REPO_ROOT / "tests")!r})
    import fp4q
    from fp4q import reference
    from fp4q.cuda import driver
    from fp4q.kernels import archs
    from helpers import assert_bytes_equal, mixed_groups, random_bf16

    real = driver.target_for(driver.device(cp.cuda.Device().id).compute_capability)
    if real != "sm_90a":
        print("SKIP the emulated sm_80 build is compiled for sm_90a; this device's target is", real)
        sys.exit(0)
    # Every device now maps to the emulated target: the ops choose, render, compile and launch for it,
    # and the loader refuses any kernel built for another target.
    driver.target_for = lambda cc, device=None: {EMULATED_SM_80!r}
    assert driver.device(cp.cuda.Device().id).arch == {EMULATED_SM_80!r}
    rng = np.random.default_rng(7)
    SHAPES = [(1, 16), (31, 48), (129, 2176), (1000, 96), (300, 4096), (70, 7168)]

    def same_bits(got, want, what):
        got, want = np.asarray(got), np.asarray(want)
        nan = np.isnan(want.astype(np.float32))
        assert (np.isnan(got.astype(np.float32)) == nan).all(), what
        bits = np.uint16 if got.dtype.itemsize == 2 else np.uint32
        assert_bytes_equal(got.view(bits)[~nan], want.view(bits)[~nan], what)
""")

CASES = {
    "quantize_nvfp4": """
        for m, k in SHAPES:
            x = mixed_groups((m, k), rng)
            for layout in ("swizzled", "linear"):
                for device_sf in (False, True):
                    tsf = reference.global_scale(x)
                    arg = cp.asarray(np.array(tsf, np.float32)) if device_sf else float(tsf)
                    for pdl in (True, False):  # accepted, and ignored: no griddepcontrol in these kernels
                        q, sf = fp4q.quantize_nvfp4(cp.asarray(x), arg, sf_layout=layout, pdl=pdl)
                        q_ref, sf_ref = reference.quantize_nvfp4(x, tsf, sf_layout=layout)
                        assert_bytes_equal(cp.asnumpy(q), q_ref, f"q {m}x{k} {layout} {device_sf}")
                        assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"sf {m}x{k} {layout} {device_sf}")
    """,
    "quantize_nvfp4_plain_kernel": """
        # rows at an odd element offset: not 16-byte aligned, so the plain SIMT kernel serves them
        for m, k in SHAPES:
            x = random_bf16((m, k + 1), rng, specials=0.01)
            xd = cp.asarray(x)[:, 1:]
            for layout in ("swizzled", "linear"):
                q, sf = fp4q.quantize_nvfp4(xd, 1.0, sf_layout=layout)
                q_ref, sf_ref = reference.quantize_nvfp4(np.ascontiguousarray(x[:, 1:]), np.float32(1.0),
                                                         sf_layout=layout)
                assert_bytes_equal(cp.asnumpy(q), q_ref, f"plain q {m}x{k} {layout}")
                assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"plain sf {m}x{k} {layout}")
    """,
    "quantize_fp16": """
        for m, k in SHAPES:
            bits = random_bf16((m, k), rng)  # any 16-bit pattern is an fp16 input too
            x = bits.view(np.float16)
            q, sf = fp4q.quantize_nvfp4(cp.asarray(x), 0.5)
            q_ref, sf_ref = reference.quantize_nvfp4(x, np.float32(0.5))
            assert_bytes_equal(cp.asnumpy(q), q_ref, f"fp16 q {m}x{k}")
            assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"fp16 sf {m}x{k}")
    """,
    "quantize_mxfp4": """
        for m, k in SHAPES:
            if k % 32:
                continue
            x = random_bf16((m, k), rng, scale=1e3, specials=0.01)
            for mode in ("rceil", "floor"):
                for layout in ("swizzled", "linear"):
                    q, sf = fp4q.quantize_mxfp4(cp.asarray(x), mode=mode, sf_layout=layout)
                    q_ref, sf_ref = reference.quantize_mxfp4(x, mode=mode, sf_layout=layout)
                    assert_bytes_equal(cp.asnumpy(q), q_ref, f"mx q {m}x{k} {mode} {layout}")
                    assert_bytes_equal(cp.asnumpy(sf), sf_ref, f"mx sf {m}x{k} {mode} {layout}")
    """,
    "dequantize": """
        for m, k in SHAPES + [(2048, 1024)]:  # the last is past the size where Hopper would run the TMA kernel
            x = mixed_groups((m, k), rng)
            tsf = reference.global_scale(x)
            for layout in ("swizzled", "linear"):
                q, sf = reference.quantize_nvfp4(x, tsf, sf_layout=layout)
                for dtype in ("bfloat16", "float32"):
                    y = fp4q.dequantize_nvfp4(cp.asarray(q), cp.asarray(sf), float(tsf), sf_layout=layout,
                                              dtype=dtype)
                    want = reference.dequantize_nvfp4(q, sf, tsf, layout, dtype)
                    got = cp.asnumpy(y)
                    same_bits(got.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else got, want,
                              f"dq nvfp4 {m}x{k} {layout} {dtype}")
                    if k % 32 == 0:
                        qm, sfm = reference.quantize_mxfp4(x, sf_layout=layout)
                        y = fp4q.dequantize_mxfp4(cp.asarray(qm), cp.asarray(sfm), sf_layout=layout, dtype=dtype)
                        want = reference.dequantize_mxfp4(qm, sfm, layout, dtype)
                        got = cp.asnumpy(y)
                        same_bits(got.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else got, want,
                                  f"dq mxfp4 {m}x{k} {layout} {dtype}")
    """,
    "global_scale": """
        for m, k in SHAPES + [(4096, 4096)]:
            for scale in (1e-30, 1.0, 1e30):
                x = random_bf16((m, k), rng, scale=scale, specials=0.01)
                got = cp.asnumpy(fp4q.global_scale(cp.asarray(x)))
                assert got.view(np.uint32) == np.float32(reference.global_scale(x)).view(np.uint32), (m, k, scale)
            # strided rows: the scalar-load amax kernel
            x = random_bf16((m, k + 8), rng)
            got = cp.asnumpy(fp4q.global_scale(cp.asarray(x)[:, 8:]))
            want = reference.global_scale(np.ascontiguousarray(x[:, 8:]))
            assert got.view(np.uint32) == np.float32(want).view(np.uint32), (m, k, "strided")
        x = random_bf16((256, 1024), rng)
        q, sf, t = fp4q.quantize_nvfp4(cp.asarray(x), "dynamic")  # the chained call, without PDL here
        assert cp.asnumpy(t).view(np.uint32) == np.float32(reference.global_scale(x)).view(np.uint32)
    """,
}


@gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_pre_hopper_build_bit_exact_on_hopper(case):
    script = PRELUDE + textwrap.dedent(CASES[case]) + "\nprint('OK')\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout[5:].strip())
    assert out.stdout.strip().endswith("OK"), out.stdout
