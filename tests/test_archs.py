"""The compile targets: the limits table, device -> target mapping and refusals, and what NVRTC compiles
for each target (the features each target claims, and only those)."""

import pytest

from fp4q.cuda.driver import Device
from fp4q.jit.cache import BinaryCache
from fp4q.jit.compiler import CompileError, compile_source
from fp4q.jit.render import KernelSource
from fp4q.kernels.archs import (ALL_TARGETS, ARCHS, COMPUTE_CAPABILITIES, EMULATED_SM_80, UnsupportedDeviceError,
                                target, target_for)

KB = 1024

# The CUDA C++ Programming Guide, technical specifications per compute capability:
# (shared memory per block with opt-in, per SM, threads per SM)
GUIDE = {
    (8, 0): (163 * KB, 164 * KB, 2048), (8, 6): (99 * KB, 100 * KB, 1536), (8, 7): (163 * KB, 164 * KB, 1536),
    (8, 9): (99 * KB, 100 * KB, 1536), (9, 0): (227 * KB, 228 * KB, 2048), (10, 0): (227 * KB, 228 * KB, 2048),
    (10, 3): (227 * KB, 228 * KB, 2048), (11, 0): (227 * KB, 228 * KB, 1536), (12, 0): (99 * KB, 100 * KB, 1536),
    (12, 1): (99 * KB, 100 * KB, 1536),
}
TARGET_OF = {(8, 0): "sm_80", (8, 6): "sm_80", (8, 7): "sm_80", (8, 9): "sm_80", (9, 0): "sm_90a",
             (10, 0): "sm_100f", (10, 3): "sm_100f", (11, 0): "sm_110f", (12, 0): "sm_120f", (12, 1): "sm_120f"}


def test_compute_capability_table_is_the_guides():
    assert set(COMPUTE_CAPABILITIES) == set(GUIDE)
    for cc, (per_block, per_sm, threads) in GUIDE.items():
        limits = COMPUTE_CAPABILITIES[cc].limits
        assert (limits.max_smem_per_block, limits.smem_per_sm, limits.max_threads_per_sm) == (per_block, per_sm,
                                                                                                threads), cc
        assert limits.regs_per_sm == 65536


@pytest.mark.parametrize("cc", sorted(TARGET_OF))
def test_target_for_every_known_compute_capability(cc):
    assert target_for(cc) == TARGET_OF[cc]
    assert cc in ARCHS[TARGET_OF[cc]].compute_capabilities


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_target_limits_are_the_smallest_of_its_devices(name):
    t = ARCHS[name]
    ccs = [cc for cc, tgt in TARGET_OF.items() if tgt == name]
    assert sorted(t.compute_capabilities) == sorted(ccs)
    assert t.max_smem_per_block == min(GUIDE[cc][0] for cc in ccs)
    assert t.smem_per_sm == min(GUIDE[cc][1] for cc in ccs)
    assert t.max_threads_per_sm == min(GUIDE[cc][2] for cc in ccs)
    assert t.gpu_architecture == name


def test_sm_120f_and_sm_80_have_the_small_shared_memory():
    assert (ARCHS["sm_120f"].smem_per_sm, ARCHS["sm_120f"].max_threads_per_sm) == (100 * KB, 1536)
    assert (ARCHS["sm_80"].smem_per_sm, ARCHS["sm_80"].max_threads_per_sm) == (100 * KB, 1536)


@pytest.mark.parametrize("cc", [(8, 1), (8, 8), (8, 15)])
def test_unknown_8x_minor_runs_the_sm_80_cubin(cc):
    assert target_for(cc) == "sm_80"


@pytest.mark.parametrize("cc", [(7, 5), (7, 0), (6, 1), (5, 2), (3, 5)])
def test_below_sm_80_is_refused(cc):
    with pytest.raises(UnsupportedDeviceError,
                       match=rf"does not support a device of compute capability {cc[0]}\.{cc[1]}: it needs "
                             r"compute capability 8\.0 or newer"):
        target_for(cc)


@pytest.mark.parametrize("cc", [(9, 1), (10, 1), (10, 4), (11, 1), (12, 2), (13, 0), (20, 0)])
def test_newer_than_the_table_is_refused(cc):
    with pytest.raises(UnsupportedDeviceError, match=rf"has no compile target for a device of compute capability "
                                                     rf"{cc[0]}\.{cc[1]}: it knows compute capabilities 8\.0, "
                                                     r".*12\.1.* a newer device needs a newer fp4q"):
        target_for(cc)


def fake_device(name, cc):
    return Device(ordinal=3, name=name, compute_capability=cc, sm_count=80, max_smem_optin=96 * KB, context=None,
                  context_handle=0)


def test_device_below_sm_80_is_refused_by_name():
    dev = fake_device("Tesla V100-SXM2-16GB", (7, 0))
    with pytest.raises(UnsupportedDeviceError, match=r"does not support Tesla V100-SXM2-16GB \[device 3\] "
                                                     r"\(compute capability 7\.0\)"):
        dev.arch


def test_device_maps_to_its_target():
    assert fake_device("NVIDIA GeForce RTX 4090", (8, 9)).arch == "sm_80"
    assert fake_device("NVIDIA B300", (10, 3)).arch == "sm_100f"
    assert fake_device("NVIDIA GB10", (12, 1)).arch == "sm_120f"
    with pytest.raises(UnsupportedDeviceError, match=r"Future GPU \[device 3\] \(compute capability 13\.0\)"):
        fake_device("Future GPU", (13, 0)).arch


def test_emulated_sm_80_is_sm_80_compiled_for_sm_90a():
    emulated = target(EMULATED_SM_80)
    assert emulated.features == ARCHS["sm_80"].features
    assert emulated.gpu_architecture == "sm_90a"
    assert EMULATED_SM_80 not in ARCHS  # never a device's target, never precompiled
    assert EMULATED_SM_80 not in {target_for(cc) for cc in COMPUTE_CAPABILITIES}


def test_feature_flags():
    assert ARCHS["sm_80"].features.flags() == dict.fromkeys(
        ["FP4Q_HAS_TMA", "FP4Q_HAS_PDL", "FP4Q_HAS_SETMAXNREG", "FP4Q_HAS_CVT_E2M1", "FP4Q_HAS_CVT_E4M3",
         "FP4Q_HAS_MAX_ABS_X2"], False)
    assert ARCHS["sm_90a"].features.flags()["FP4Q_HAS_CVT_E2M1"] is False
    for name in ("sm_100f", "sm_110f", "sm_120f"):
        assert all(ARCHS[name].features.flags().values()), name


# --- what NVRTC compiles for each target --------------------------------------------------------------------------

INSTRUCTIONS = {
    "tma": 'struct alignas(64) TM { unsigned long long o[16]; };\n'
           'extern "C" __global__ void k(const __grid_constant__ TM m, float* y) {\n'
           '    __shared__ alignas(128) float s[256]; __shared__ unsigned long long bar;\n'
           '    unsigned a = (unsigned)__cvta_generic_to_shared(s), b = (unsigned)__cvta_generic_to_shared(&bar);\n'
           '    asm volatile("cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"\n'
           '                 " [%0], [%1, {%2, %3}], [%4];" :: "r"(a), "l"(&m), "r"(0), "r"(0), "r"(b) : "memory");\n'
           '    y[0] = s[threadIdx.x];\n}\n',
    "pdl": 'extern "C" __global__ void k(float* y) {\n'
           '    asm volatile("griddepcontrol.wait;" ::: "memory"); y[0] = 1.f;\n'
           '    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n}\n',
    "setmaxnreg": 'extern "C" __global__ void __launch_bounds__(256) k(float* y) {\n'
                  '    if (threadIdx.x < 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");\n'
                  '    else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");\n    y[threadIdx.x] = 1.f;\n}\n',
    "cvt_e2m1": 'extern "C" __global__ void k(const float* x, unsigned* y) {\n    unsigned d;\n'
                '    asm("{\\n\\t.reg .b8 t;\\n\\tcvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\\n\\tcvt.u32.u8 %0, t;\\n\\t}"\n'
                '        : "=r"(d) : "f"(x[0]), "f"(x[1]));\n    y[0] = d;\n}\n',
    "cvt_e4m3": 'extern "C" __global__ void k(const float* x, unsigned* y) {\n    unsigned short d; unsigned h;\n'
                '    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(x[0]), "f"(x[1]));\n'
                '    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(d));\n    y[0] = h;\n}\n',
    "max_abs_x2": 'extern "C" __global__ void k(const unsigned* x, unsigned* y) {\n    unsigned d;\n'
                  '    asm("max.NaN.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(x[0]), "r"(x[1]));\n'
                  '    y[0] = d;\n}\n',
}


@pytest.fixture(scope="module")
def probe_cache(tmp_path_factory):
    return BinaryCache(tmp_path_factory.mktemp("fp4q-arch-probe"))


@pytest.mark.parametrize("feature", sorted(INSTRUCTIONS))
@pytest.mark.parametrize("arch", sorted(ALL_TARGETS))
def test_nvrtc_compiles_a_feature_exactly_where_the_target_has_it(arch, feature, probe_cache):
    src = KernelSource("k", INSTRUCTIONS[feature], arch)
    has = getattr(target(arch).features, feature)
    if target(arch).gpu_architecture != arch:
        # the emulated target compiles for sm_90a, which has more than it uses
        has = has or getattr(ARCHS["sm_90a"].features, feature)
    if has:
        kernel = compile_source(src, cache=probe_cache)
        assert kernel.cubin[:4] == b"\x7fELF"
        assert "ptxas warning" not in kernel.log.lower(), kernel.log
    else:
        with pytest.raises(CompileError):
            compile_source(src, cache=probe_cache)
