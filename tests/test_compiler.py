"""NVRTC compilation through the binary cache: every shipped variant, options, errors, cache behaviour, timing."""

import json
import os
import pathlib
import struct
import subprocess
import sys
import textwrap

import pytest

import fp4q._version
from fp4q.jit import compiler
from fp4q.jit.cache import BinaryCache
from fp4q.jit.render import KernelSource, expand_includes, render
from probe import numerics_probe_spec, training_probe_spec
from fp4q.jit.compiler import CompileError, CompiledKernel, Resources, compile_source, parse_resources
from fp4q.kernels.archs import ALL_TARGETS, ARCHS
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig, default_config
from fp4q.kernels.variants import all_variants

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
ARCH_LIST = tuple(ARCHS)
VARIANTS = [(arch, name, cfg) for arch in ARCH_LIST for name, cfg in all_variants(arch).items()]
TMA_ARCHS = tuple(a for a in ARCHS if ARCHS[a].features.tma)
EM_CUDA = 190


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory):
    """One on-disk cache for the whole session: each (variant, arch) compiles once."""
    return BinaryCache(tmp_path_factory.mktemp("fp4q-compiler-cache"))


def tiny_source(tag: str, arch: str = "sm_90a") -> KernelSource:
    """A small kernel, unique per tag so that tests do not share cache entries."""
    body = f'extern "C" __global__ void k_{tag}(float* y) {{ y[threadIdx.x] = {len(tag)}.5f * threadIdx.x; }}\n'
    return KernelSource(f"k_{tag}", body, arch)


def assert_is_cubin(cubin: bytes, kernel_name: str) -> None:
    assert cubin[:4] == b"\x7fELF"
    assert cubin[4] == 2  # ELFCLASS64
    assert struct.unpack_from("<H", cubin, 18)[0] == EM_CUDA
    assert kernel_name.encode() in cubin


# --- every shipped variant --------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, name, cfg", VARIANTS, ids=[f"{a}-{n}" for a, n, _ in VARIANTS])
def test_variant_compiles_cleanly(arch, name, cfg, variants_cache):
    kernel = compile_source(render(cfg.spec), cache=variants_cache)
    assert isinstance(kernel, CompiledKernel)
    assert (kernel.arch, kernel.kernel_name) == (arch, render(cfg.spec).kernel_name)
    assert_is_cubin(kernel.cubin, kernel.kernel_name)
    log = kernel.log
    assert f"Compiling entry function '{kernel.kernel_name}' for '{ARCHS[arch].gpu_architecture}'" in log
    res = kernel.resources
    assert res.spill_bytes == 0, log
    assert res.stack_bytes == 0, log
    assert " 0 bytes spill loads" in log
    assert "C7508" not in log and "setmaxnreg' ignored" not in log, log
    assert "ptxas warning" not in log.lower(), log
    assert res.registers is not None and 0 < res.registers <= 255
    if isinstance(cfg, QuantizeConfig):
        # launch bounds: every CTA of min_ctas_per_sm fits in the register file
        allocated = -(-res.registers // 8) * 8  # ptxas allocates in units of 8 per thread
        assert allocated * cfg.threads * cfg.min_ctas_per_sm <= ARCHS[arch].regs_per_sm
        if cfg.setmaxnreg:
            # the producer/consumer split must fit the registers ptxas gave the CTA at entry
            producer, consumer = cfg.register_split
            pool = allocated * cfg.threads
            assert producer * 128 + consumer * cfg.consumer_threads <= pool, (res.registers, cfg.register_split)
            assert producer <= res.registers <= consumer


@pytest.mark.parametrize("probe", [numerics_probe_spec, training_probe_spec])
@pytest.mark.parametrize("arch", sorted(ALL_TARGETS))
def test_numerics_probes_compile(arch, probe, session_cache):
    spec = probe(arch)
    kernel = compile_source(render(spec), cache=session_cache)
    assert_is_cubin(kernel.cubin, spec.name)
    assert kernel.resources.spill_bytes == 0


@pytest.mark.parametrize("arch", TMA_ARCHS)
def test_default_config_compiles_without_spills(arch, session_cache):
    kernel = compile_source(render(default_config(arch).spec), cache=session_cache)
    assert_is_cubin(kernel.cubin, "fp4q_quantize_fp4_tma")
    assert kernel.resources.spill_bytes == 0
    assert "C7508" not in kernel.log


# --- options ----------------------------------------------------------------------------------------------------


FORBIDDEN_OPTIONS = ("--use_fast_math", "-use_fast_math", "--ftz=true", "-ftz=true", "--fmad=true", "-fmad=true",
                     "--prec-div=false", "--prec-sqrt=false", "-ptx", "--ptx")


@pytest.mark.parametrize("arch", ARCH_LIST)
def test_options(arch):
    opts = compiler._options(arch)
    assert opts[0] == f"--gpu-architecture={arch}"  # the exact architecture or family: a cubin, never PTX
    for required in ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--ptxas-options=-v"):
        assert required in opts
    for opt in opts:
        assert "fast" not in opt.lower(), opt
        assert opt not in FORBIDDEN_OPTIONS
        assert "compute_" not in opt


def test_options_actually_passed_to_nvrtc(monkeypatch, tmp_path):
    real = compiler._nvrtc()
    seen = []

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def nvrtcCompileProgram(self, prog, n, opts):
            seen.append([o.decode() for o in opts])
            return real.nvrtcCompileProgram(prog, n, opts)

    monkeypatch.setattr(compiler, "_nvrtc", lambda: Spy())
    for arch in ARCH_LIST:
        compile_source(tiny_source("opts", arch), cache=BinaryCache(tmp_path / arch))
    assert seen == [list(compiler._options(a)) for a in ARCH_LIST]
    for opts in seen:
        assert "--fmad=false" in opts and "--ftz=false" in opts
        assert not any("fast_math" in o or o in FORBIDDEN_OPTIONS for o in opts)


def test_nvrtc_version():
    major, minor = compiler.nvrtc_version()
    assert isinstance(major, int) and isinstance(minor, int)
    assert major >= 12 and minor >= 0


# --- errors -----------------------------------------------------------------------------------------------------


def test_broken_source_raises_compile_error(tmp_path):
    source = 'extern "C" __global__ void broken(float* y) { y[0] = undefined_thing + 1; }\n'
    src = KernelSource("broken", source, "sm_90a")
    with pytest.raises(CompileError) as info:
        compile_source(src, cache=BinaryCache(tmp_path))
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.source == source
    assert 'identifier "undefined_thing" is undefined' in err.log
    assert "error" in err.log
    assert "NVRTC could not compile broken for sm_90a" in str(err)
    assert err.log in str(err)
    # nothing was cached for the failed build
    assert not list(tmp_path.rglob("*.fp4qbin"))


def test_syntax_error_log(tmp_path):
    src = KernelSource("k", "this is not C++\n", "sm_100f")
    with pytest.raises(CompileError, match="expected a declaration") as info:
        compile_source(src, cache=BinaryCache(tmp_path))
    assert info.value.source == "this is not C++\n"
    assert "for sm_100f" in str(info.value)


def test_ptxas_error_is_a_compile_error(tmp_path):
    # setmaxnreg outside the range 24..256 passes the front end and fails in ptxas
    source = expand_includes("ptx/setmaxnreg.cuh") + 'extern "C" __global__ void k() { setmaxnreg_inc<300>(); }\n'
    with pytest.raises(CompileError) as info:
        compile_source(KernelSource("k", source, "sm_90a"), cache=BinaryCache(tmp_path))
    assert "ptxas" in info.value.log


E2M1_KERNEL = 'extern "C" __global__ void e2m1(const float* x, unsigned* y) {\n' \
              '    y[threadIdx.x] = cvt_rn_satfinite_e2m1x2_f32(x[2 * threadIdx.x + 1], x[2 * threadIdx.x]);\n}\n'


def e2m1_source(arch: str) -> KernelSource:
    return KernelSource("e2m1", expand_includes("ptx/convert.cuh") + E2M1_KERNEL, arch)


def test_hardware_e2m1_cvt_does_not_compile_for_sm_90a(tmp_path):
    with pytest.raises(CompileError) as info:
        compile_source(e2m1_source("sm_90a"), cache=BinaryCache(tmp_path))
    assert "e2m1" in info.value.log
    assert "sm_90a" in info.value.log


def test_hardware_e2m1_cvt_compiles_for_sm_100f(tmp_path):
    kernel = compile_source(e2m1_source("sm_100f"), cache=BinaryCache(tmp_path))
    assert_is_cubin(kernel.cubin, "e2m1")
    assert kernel.resources.spill_bytes == 0


# --- the cache --------------------------------------------------------------------------------------------------


def test_second_compile_is_a_cache_hit(tmp_path):
    cache = BinaryCache(tmp_path)
    src = tiny_source("hit")
    first = compile_source(src, cache=cache)
    second = compile_source(src, cache=cache)
    assert not first.cache_hit and second.cache_hit
    assert second.cubin == first.cubin and second.key == first.key and second.log == first.log
    assert (cache.misses, cache.hits_memory) == (1, 1)
    # a fresh process-level cache on the same directory reads it from disk
    disk = BinaryCache(tmp_path)
    third = compile_source(src, cache=disk)
    assert third.cache_hit and third.cubin == first.cubin and disk.hits_disk == 1


def test_default_variant_hit_in_session_cache(session_cache):
    src = render(QuantizeConfig().spec)
    first = compile_source(src, cache=session_cache)
    again = compile_source(src, cache=session_cache)
    assert again.cache_hit and again.cubin == first.cubin and again.key == first.key


def test_different_sources_and_archs_get_different_keys(tmp_path):
    cache = BinaryCache(tmp_path)
    a = compile_source(tiny_source("a"), cache=cache)
    b = compile_source(tiny_source("b"), cache=cache)
    a100 = compile_source(tiny_source("a", "sm_100f"), cache=cache)
    assert len({a.key, b.key, a100.key}) == 3
    assert not b.cache_hit and not a100.cache_hit
    assert a.cubin != a100.cubin
    assert len(list(tmp_path.rglob("*.fp4qbin"))) == 3


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "flipped_byte"])
def test_corrupt_cache_file_is_rebuilt(tmp_path, damage):
    src = tiny_source(f"corrupt_{damage}")
    good = compile_source(src, cache=BinaryCache(tmp_path))
    (entry,) = tmp_path.rglob("*.fp4qbin")
    data = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"this is not a cache entry" * 10)
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:])
    rebuilt = compile_source(src, cache=BinaryCache(tmp_path))
    assert not rebuilt.cache_hit
    assert rebuilt.cubin == good.cubin
    assert_is_cubin(rebuilt.cubin, src.kernel_name)
    # the rebuilt entry replaced the damaged one (the log differs only in ptxas' compile time)
    assert len(entry.read_bytes()) > len(good.cubin)
    again = compile_source(src, cache=BinaryCache(tmp_path))
    assert again.cache_hit and again.cubin == good.cubin and again.log == rebuilt.log


BAD_PAYLOADS = {
    "empty": b"",
    "short": b"\x01\x02",
    "garbage": b"garbage payload",
    "meta_not_json": compiler._META.pack(5) + b"{{{{{cubin",
    "meta_too_long": compiler._META.pack(1000) + b"{",
    "meta_without_log": compiler._META.pack(2) + b"{}" + b"\x7fELF",
    "meta_bad_utf8": compiler._META.pack(2) + b"\xff\xfe",
}
TYPEERROR_PAYLOADS = {
    "meta_is_a_list": compiler._META.pack(3) + b"[1]",
    "meta_is_a_string": compiler._META.pack(3) + b'"x"',
}
@pytest.mark.parametrize(
    "payload",
    list(BAD_PAYLOADS.values()) + list(TYPEERROR_PAYLOADS.values()),
    ids=list(BAD_PAYLOADS) + list(TYPEERROR_PAYLOADS),
)
def test_foreign_payload_is_rebuilt(tmp_path, payload):
    src = tiny_source("payload")
    cache = BinaryCache(tmp_path)
    good = compile_source(src, cache=cache)
    cache.put(good.key, payload)  # passes the cache's own checksum, but is not a compiler payload
    rebuilt = compile_source(src, cache=cache)
    assert not rebuilt.cache_hit
    assert rebuilt.cubin == good.cubin
    assert compiler._unpack(BinaryCache(tmp_path).get(good.key)) == (good.cubin, rebuilt.log)


class RecordingCache:
    """Records the key and serves a canned payload: key tests need no compile."""

    def __init__(self):
        self.keys = []

    def get_or_build(self, key, build):
        self.keys.append(key)
        return compiler._pack(b"\x7fELF canned", "canned log"), True


def key_of(src: KernelSource) -> str:
    cache = RecordingCache()
    kernel = compile_source(src, cache=cache)
    assert kernel.cache_hit and kernel.cubin == b"\x7fELF canned" and kernel.log == "canned log"
    assert cache.keys == [kernel.key]
    return kernel.key


def test_key_is_stable():
    src = render(QuantizeConfig().spec)
    assert key_of(src) == key_of(render(QuantizeConfig().spec))
    assert len(key_of(src)) == 64


def test_key_changes_with_nvrtc_version(monkeypatch):
    src = render(QuantizeConfig().spec)
    before = key_of(src)
    monkeypatch.setattr(compiler, "compiler_identity", lambda: ("nvidia-cuda-nvrtc", "13.6.1"))
    newer = key_of(src)
    monkeypatch.setattr(compiler, "compiler_identity", lambda: ("nvrtc", 14, 0))
    assert len({before, newer, key_of(src)}) == 3


def test_compiler_identity_names_the_nvrtc_wheel_or_version():
    identity = compiler.compiler_identity()
    assert identity[0] in ("nvidia-cuda-nvrtc", "nvrtc")
    if identity[0] == "nvidia-cuda-nvrtc":
        assert identity[1].split(".")[0] == str(compiler.nvrtc_version()[0])


def test_key_changes_with_package_version(monkeypatch):
    src = render(QuantizeConfig().spec)
    before = key_of(src)
    monkeypatch.setattr(fp4q._version, "__version__", fp4q._version.__version__ + ".post1")
    after = key_of(src)
    assert after != before
    monkeypatch.undo()
    assert key_of(src) == before


def test_key_changes_with_source_arch_name_and_options(monkeypatch):
    src = render(QuantizeConfig().spec)
    keys = {
        key_of(src),
        key_of(KernelSource(src.kernel_name, src.source + "\n", src.arch)),
        key_of(KernelSource(src.kernel_name, src.source, "sm_100f")),
        key_of(KernelSource("other_name", src.source, src.arch)),
    }
    monkeypatch.setattr(compiler, "BASE_OPTIONS", compiler.BASE_OPTIONS + ("-lineinfo",))
    keys.add(key_of(src))
    assert len(keys) == 5


def test_pack_roundtrip():
    payload = compiler._pack(b"\x7fELF\x00\x01", 'log with "quotes" and ünïcode\n')
    assert compiler._unpack(payload) == (b"\x7fELF\x00\x01", 'log with "quotes" and ünïcode\n')


# --- cold compile and cached lookups (their times: scripts/dev/compile_times.py) -----------------------------------


def test_cold_compile_of_default_variant_misses_an_empty_cache(tmp_path):
    kernel = compile_source(render(QuantizeConfig().spec), cache=BinaryCache(tmp_path))
    assert not kernel.cache_hit
    assert_is_cubin(kernel.cubin, kernel.kernel_name)


LOOKUP_SCRIPT = textwrap.dedent(
    """
    import json, time
    from fp4q.jit import render as codegen
    from fp4q.jit import compiler
    from fp4q.kernels import quantize as config
    {prepare}
    src = codegen.render(config.QuantizeConfig().spec)
    kernel = compiler.compile_source(src)
    print(json.dumps({{"hit": kernel.cache_hit, "elf": kernel.cubin[:4] == b"\\x7fELF"}}))
    """
)


def run_lookup(cache_dir, prepare: str) -> dict:
    env = dict(os.environ, FP4Q_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", LOOKUP_SCRIPT.format(prepare=prepare)], env=env, cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["elf"], result
    return result


def assert_cached_lookups(cache_dir, prepare: str, runs: int = 3) -> None:
    """``runs`` new processes, each looking up a kernel that is in the on-disk cache: every one a hit."""
    # Warm the directory from a subprocess too: it renders the templates as they are on disk now.
    run_lookup(cache_dir, prepare)
    for _ in range(runs):
        result = run_lookup(cache_dir, prepare)
        assert result["hit"], result


@pytest.fixture(scope="session")
def warm_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fp4q-warm-cache")


def test_cached_lookup_in_new_process_hits(warm_cache_dir):
    assert_cached_lookups(warm_cache_dir, prepare="compiler.nvrtc_version()")


def test_first_cached_lookup_in_new_process_hits(warm_cache_dir):
    assert_cached_lookups(warm_cache_dir, prepare="")


# --- parse_resources --------------------------------------------------------------------------------------------

SAMPLE_LOG = """\
ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry.
ptxas info    : 108 bytes gmem
ptxas info    : Compiling entry function 'fp4q_quantize_fp4_tma' for 'sm_90a'
ptxas info    : Function properties for fp4q_quantize_fp4_tma
ptxas         .     16 bytes stack frame, 24 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 168 registers, used 2 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 207.503 ms
"""


def test_parse_resources_sample_log():
    assert parse_resources(SAMPLE_LOG) == Resources(registers=168, shared_bytes=1024, spill_bytes=24, stack_bytes=16)


def test_parse_resources_without_smem_line():
    log = ("ptxas info    : 4 bytes gmem\n"
           "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 39 registers, used 0 barriers\n")
    # "4 bytes gmem" must not be read as shared memory
    assert parse_resources(log) == Resources(registers=39, shared_bytes=None, spill_bytes=0, stack_bytes=0)


def test_parse_resources_empty_log():
    assert parse_resources("") == Resources(None, None, None, None)


def test_resources_of_a_real_compile(session_cache):
    kernel = compile_source(render(SimtConfig().spec), cache=session_cache)
    res = kernel.resources
    assert res == parse_resources(kernel.log)
    assert res.registers is not None and res.registers > 0
    assert res.spill_bytes == 0 and res.stack_bytes == 0
