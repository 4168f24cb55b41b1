"""Ahead-of-time compilation (python -m fp4q precompile), FP4Q_DISABLE_JIT, and fp4q's own NVRTC errors."""

import os
import pathlib
import subprocess
import sys

import pytest

import fp4q
from fp4q.jit import compiler
from fp4q.jit.cache import BinaryCache
from fp4q.jit.compiler import CompileError, JitDisabledError, NvrtcError, compile_source, kernel_key
from fp4q.ops.api import ALL_OPS as API_OPS
from fp4q.jit.precompile import precompile, variants
from fp4q.jit.render import KernelSource, render
from fp4q.kernels.archs import ARCHS, ALL_TARGETS
from fp4q.kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
from fp4q.kernels.fake_quantize import FakeQuantizeConfig
from fp4q.kernels.global_scale import AmaxConfig, FusedDynamicConfig, GlobalScaleConfig
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
from fp4q.kernels.rows import RowConfig
from fp4q.kernels.rules import ConfigError
from fp4q.kernels.variants import OPS, all_variants, op_of

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
gpu = pytest.mark.gpu


def run_fp4q(args, cache_dir, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "FP4Q_DISABLE_JIT"}
    full_env.update(FP4Q_CACHE_DIR=str(cache_dir),
                    PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    return subprocess.run([sys.executable, "-m", "fp4q", *args], env=full_env, cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=600)


def test_precompile_fills_an_empty_cache_then_check_passes_and_nothing_compiles_again(tmp_path):
    args = ["precompile", "--arch", "sm_90a", "--ops", "global_scale", "--jobs", "2", "--no-progress"]
    first = run_fp4q(args, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "5 variants: 5 compiled, 0 already cached, 0 missing, 0 failed" in first.stdout
    assert len(list(tmp_path.rglob("*.fp4qbin"))) == 5
    check = run_fp4q(args + ["--check"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 compiled, 5 already cached, 0 missing" in check.stdout
    # with compiling forbidden, a second run can only succeed if every variant is a hit
    again = run_fp4q(args, tmp_path, FP4Q_DISABLE_JIT="1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 compiled, 5 already cached" in again.stdout


def test_check_on_an_empty_cache_fails_listing_what_is_missing(tmp_path):
    out = run_fp4q(["precompile", "--check", "--arch", "sm_120f", "--ops", "global_scale"], tmp_path)
    assert out.returncode == 1
    assert "5 variants: 0 compiled, 0 already cached, 5 missing" in out.stdout
    for name, cfg in all_variants("sm_120f").items():
        if op_of(cfg) == "global_scale":
            assert isinstance(cfg, (AmaxConfig, GlobalScaleConfig))
            assert f"missing: sm_120f {name}: {cfg!r}" in out.stdout
    assert not list(tmp_path.rglob("*.fp4qbin"))


def test_precompile_with_jit_disabled_and_an_empty_cache_fails(tmp_path):
    out = run_fp4q(["precompile", "--arch", "sm_90a", "--ops", "global_scale", "--jobs", "1"], tmp_path,
                   FP4Q_DISABLE_JIT="1")
    assert out.returncode == 1
    assert "0 compiled, 0 already cached, 0 missing, 5 failed" in out.stdout
    assert "JitDisabledError: FP4Q_DISABLE_JIT=1 forbids compiling" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--arch", "sm_100a"], "arch must be one of 'sm_80', 'sm_90a', 'sm_100f', 'sm_110f', 'sm_120f', got 'sm_100a'"),
    (["--arch", "sm_80_on_sm_90a"], "got 'sm_80_on_sm_90a'"),
    (["--arch", ""], "arch must name at least one of"),
    (["--ops", "quantize_nvfp4,fp8"], f"ops must be one of {', '.join(map(repr, OPS))}, got 'fp8'"),
    (["--ops", "quantize"], f"ops must be one of {', '.join(map(repr, OPS))}, got 'quantize'"),  # by name
    (["--jobs", "0"], "jobs must be an integer >= 1, got 0"),
])
def test_bad_arguments_are_refused(tmp_path, args, message):
    out = run_fp4q(["precompile", "--check", *args], tmp_path)
    assert out.returncode == 2
    assert message in out.stderr


def test_variants_default_to_every_target_and_op():
    everything = variants()
    assert {v.arch for v in everything} == set(ARCHS)
    assert len(everything) == sum(len(all_variants(a)) for a in ARCHS)
    assert {op_of(v.config) for v in everything} == set(OPS)
    # Every op, by its function's (or torch op's) name; the masked batches run their unmasked op's
    # kernels (the counts are a launch argument), which --ops quantize_nvfp4_batched precompiles.
    masked = {op.name for op in API_OPS if op.name.endswith("_batched_masked")}
    assert masked == {"quantize_nvfp4_batched_masked", "silu_and_mul_quantize_nvfp4_batched_masked"}
    assert set(OPS) == {op.name for op in API_OPS} - masked
    assert {v.arch for v in variants("sm_80,sm_120f", ["quantize_mxfp4"])} == {"sm_80", "sm_120f"}
    assert {op_of(v.config) for v in variants(None, "quantize_nvfp4,dequantize_mxfp4")} == {"quantize_nvfp4",
                                                                                           "dequantize_mxfp4"}
    with pytest.raises(ConfigError):
        variants(["sm_75"])


def test_each_kernel_config_serves_the_op_of_its_function():
    """op_of names the public function a config's kernel serves: the format's quantize or dequantize
    function, global_scale for the two passes, quantize_nvfp4 (its tensor_sf="dynamic") for the one launch,
    fake_quantize_nvfp4 for its kernel, its amax pass and the 4/6 scale pass."""
    cases = [(QuantizeConfig(), "quantize_nvfp4"), (QuantizeConfig(fmt="mxfp4"), "quantize_mxfp4"),
             (SimtConfig(vector=True), "quantize_nvfp4"), (SimtConfig(fmt="mxfp4"), "quantize_mxfp4"),
             (DequantizeConfig(), "dequantize_nvfp4"), (DequantizeSimtConfig(fmt="mxfp4"), "dequantize_mxfp4"),
             (AmaxConfig(), "global_scale"), (GlobalScaleConfig(), "global_scale"),
             (FusedDynamicConfig(), "quantize_nvfp4"),
             (RowConfig(segments="experts", tensor_sf_mode="per_expert"), "quantize_nvfp4_experts"),
             (RowConfig(segments="batches", tensor_sf_mode="per_expert", prologue="silu_mul"),
              "silu_and_mul_quantize_nvfp4_batched"),
             (FakeQuantizeConfig(block_2d=True), "fake_quantize_nvfp4"),
             (FakeQuantizeConfig(amax_pass=True), "fake_quantize_nvfp4"),
             (GlobalScaleConfig(four_over_six=True), "fake_quantize_nvfp4")]
    for cfg, op in cases:
        assert op_of(cfg) == op, cfg
    for v in variants("sm_90a"):
        name = op_of(v.config)
        assert name == "global_scale" or getattr(v.config, "fmt", "nvfp4") in name.split("_"), v


def test_precompile_in_process_reports_bytes_per_target(tmp_path):
    report = precompile("sm_90a", "global_scale", jobs=1, cache_dir=tmp_path, progress=False)
    assert report.ok and len(report.compiled) == 5 and not report.cached
    assert report.bytes_by_arch["sm_90a"] == sum(
        len(compile_source(render(v.config.spec), BinaryCache(tmp_path)).cubin) for v in report.compiled)
    assert fp4q.precompile is precompile


# --- FP4Q_DISABLE_JIT ----------------------------------------------------------------------------------------------


def test_jit_disabled_miss_names_the_variant_target_and_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FP4Q_DISABLE_JIT", "1")
    monkeypatch.setattr(compiler, "_nvrtc_compile", lambda src: pytest.fail("NVRTC called with JIT disabled"))
    cfg = SimtConfig(vector=True, arch="sm_100f")
    with pytest.raises(JitDisabledError) as info:
        compile_source(render(cfg.spec), cache=BinaryCache(tmp_path), variant=cfg.spec)
    message = str(info.value)
    assert isinstance(info.value, CompileError)
    assert f"FP4Q_DISABLE_JIT=1 forbids compiling, and the kernel cache {tmp_path} has no cubin for {cfg.spec!r} " \
           f"on target sm_100f" in message
    assert f"build it ahead of time with: FP4Q_CACHE_DIR={tmp_path} python -m fp4q precompile --arch sm_100f" \
        in message
    assert fp4q.JitDisabledError is JitDisabledError


def test_jit_disabled_miss_of_a_config_that_is_not_shipped(tmp_path, monkeypatch):
    monkeypatch.setenv("FP4Q_DISABLE_JIT", "1")
    cfg = SimtConfig(threads=512, arch="sm_90a")
    with pytest.raises(JitDisabledError, match="it is not a shipped variant, so precompile does not build it: run "
                                               "this call once with FP4Q_DISABLE_JIT unset"):
        compile_source(render(cfg.spec), cache=BinaryCache(tmp_path), variant=cfg.spec)


def test_jit_disabled_hit_needs_no_compile(tmp_path, monkeypatch):
    cfg = GlobalScaleConfig()
    first = compile_source(render(cfg.spec), cache=BinaryCache(tmp_path))
    monkeypatch.setenv("FP4Q_DISABLE_JIT", "1")
    again = compile_source(render(cfg.spec), cache=BinaryCache(tmp_path), variant=cfg.spec)
    assert again.cache_hit and again.cubin == first.cubin and again.key == kernel_key(render(cfg.spec))


@pytest.mark.parametrize("value", ["0", ""])
def test_jit_enabled_values(tmp_path, monkeypatch, value):
    monkeypatch.setenv("FP4Q_DISABLE_JIT", value)
    assert not compile_source(render(GlobalScaleConfig().spec), cache=BinaryCache(tmp_path)).cache_hit


def test_bad_disable_jit_value(tmp_path, monkeypatch):
    monkeypatch.setenv("FP4Q_DISABLE_JIT", "yes")
    with pytest.raises(ValueError, match="FP4Q_DISABLE_JIT must be '0' or '1' \\(or unset\\), got 'yes'"):
        compile_source(render(GlobalScaleConfig().spec), cache=BinaryCache(tmp_path))


# --- NVRTC API failures --------------------------------------------------------------------------------------------


def test_nvrtc_api_failure_is_an_nvrtc_error(tmp_path, monkeypatch):
    real = compiler._nvrtc()

    class Failing:
        def __getattr__(self, name):
            return getattr(real, name)

        def nvrtcGetCUBINSize(self, prog):
            return real.nvrtcResult.NVRTC_ERROR_OUT_OF_MEMORY, 0

    monkeypatch.setattr(compiler, "_nvrtc", lambda: Failing())
    with pytest.raises(NvrtcError, match="nvrtcGetCUBINSize failed: NVRTC_ERROR_OUT_OF_MEMORY") as info:
        compile_source(KernelSource("k", 'extern "C" __global__ void k() {}\n', "sm_90a"),
                       cache=BinaryCache(tmp_path))
    assert isinstance(info.value, CompileError) and not isinstance(info.value, JitDisabledError)
    assert fp4q.NvrtcError is NvrtcError


def test_every_target_compiles_with_its_gpu_architecture():
    for name, tgt in ALL_TARGETS.items():
        assert compiler._options(name)[0] == f"--gpu-architecture={tgt.gpu_architecture}"


# --- the GPU: a run-time miss with compiling forbidden -------------------------------------------------------------

JIT_DISABLED_SCRIPT = """
import cupy as cp
import fp4q
x = cp.zeros((256, 256), dtype=cp.uint16).view(cp.float16)
try:
    fp4q.quantize_nvfp4(x, 1.0)
except fp4q.JitDisabledError as exc:
    print("RAISED", exc)
else:
    print("NO ERROR")
"""


@gpu
def test_quantize_with_jit_disabled_and_an_empty_cache_raises(tmp_path):
    env = dict(os.environ, FP4Q_CACHE_DIR=str(tmp_path), FP4Q_DISABLE_JIT="1",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", JIT_DISABLED_SCRIPT], env=env, cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("RAISED FP4Q_DISABLE_JIT=1 forbids compiling"), out.stdout
    assert "python -m fp4q precompile --arch " in out.stdout
    assert "('FP4Q_INPUT_FP16', True)" in out.stdout  # the kernel the call needed, by its spec
    assert not list(tmp_path.rglob("*.fp4qbin"))
