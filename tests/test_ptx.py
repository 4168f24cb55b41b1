"""ptx/: every wrapper compiles for each target and is named after the PTX instruction it wraps."""

import re

import pytest

from fp4q.jit import compiler
from fp4q.jit.cache import BinaryCache
from fp4q.jit.render import KernelSource, expand_includes, feature_flags, templates_dir
from fp4q.jit.compiler import CompileError, compile_source

HEADER = expand_includes("ptx/all.cuh")

# wrapper -> the PTX instruction it is named after (dotted prefix of the mnemonic in its asm)
MNEMONICS = {
    "mul_rn": "mul.rn.f32",
    "fma_rn": "fma.rn.f32",
    "add_rn": "add.rn.f32",
    "sub_rn": "sub.rn.f32",
    "sqrt_rn": "sqrt.rn.f32",
    "rcp_rn": "rcp.rn.f32",
    "rcp_approx_ftz_f32": "rcp.approx.ftz.f32",
    "div_rn": "div.rn.f32",
    "max_f32": "max.f32",
    "min_f32": "min.f32",
    "min_u32": "min.u32",
    "mul_rn_f16x2": "mul.rn.f16x2",
    "abs_f32": "abs.f32",
    "max_bf16x2": "max.bf16x2",
    "max_f16x2": "max.f16x2",
    "max_nan_bf16x2": "max.NaN.bf16x2",
    "max_nan_f16x2": "max.NaN.f16x2",
    "max_nan_xorsign_abs_bf16x2": "max.NaN.xorsign.abs.bf16x2",
    "max_nan_xorsign_abs_f16x2": "max.NaN.xorsign.abs.f16x2",
    "max_nan_f32": "max.NaN.f32",
    "min_nan_f32": "min.NaN.f32",
    "prmt_b32": "prmt.b32",
    "brev_b32": "brev.b32",
    "mul_wide_u32": "mul.wide.u32",
    "cvt_rzi_u32_f32": "cvt.rzi.u32.f32",
    "cvt_rn_satfinite_e4m3x2_f32": "cvt.rn.satfinite.e4m3x2.f32",
    "cvt_rn_f16x2_e4m3x2": "cvt.rn.f16x2.e4m3x2",
    "cvt_f32_f16": "cvt.f32.f16",
    "cvt_rn_bf16x2_f32": "cvt.rn.bf16x2.f32",
    "cvt_rn_f16x2_f32": "cvt.rn.f16x2.f32",
    "redux_sync_max_u32": "redux.sync.max.u32",
    "shfl_sync_bfly_b32": "shfl.sync.bfly.b32",
    "shfl_sync_up_b32": "shfl.sync.up.b32",
    "vote_sync_any_pred": "vote.sync.any.pred",
    "cvt_rn_satfinite_e2m1x2_f32": "cvt.rn.satfinite.e2m1x2.f32",
    "mbarrier_init": "mbarrier.init",
    "fence_mbarrier_init": "fence.mbarrier_init",
    "mbarrier_arrive": "mbarrier.arrive",
    "mbarrier_arrive_expect_tx": "mbarrier.arrive.expect_tx",
    "mbarrier_try_wait_parity": "mbarrier.try_wait.parity",
    "prefetch_tensormap": "prefetch.tensormap",
    "cp_async_bulk_tensor_2d_global_to_shared": "cp.async.bulk.tensor.2d",
    "cp_async_bulk_tensor_2d_shared_to_global": "cp.async.bulk.tensor.2d",
    "cp_async_bulk_tensor_4d_shared_to_global": "cp.async.bulk.tensor.4d",
    "cp_async_bulk_commit_group": "cp.async.bulk.commit_group",
    "cp_async_bulk_wait_group_read": "cp.async.bulk.wait_group.read",
    "cp_async_bulk_wait_group": "cp.async.bulk.wait_group",
    "fence_proxy_async_shared_cta": "fence.proxy.async.shared::cta",
    "bar_sync": "bar.sync",
    "griddepcontrol_wait": "griddepcontrol.wait",
    "griddepcontrol_launch_dependents": "griddepcontrol.launch_dependents",
    "setmaxnreg_inc": "setmaxnreg.inc",
    "setmaxnreg_dec": "setmaxnreg.dec",
    "ld_shared_v4": "ld.shared.v4",
    "st_shared_v4": "st.shared.v4",
    "st_shared_u16": "st.shared.u16",
    "st_shared_u32": "st.shared.u32",
    "ld_shared_u32": "ld.shared.u32",
    "ld_global_f32": "ld.global.f32",
    "ld_global_nc_v4": "ld.global.nc.v4",
    "ld_global_v4": "ld.global.v4",
    "ld_global_nc_u32": "ld.global.nc.u32",
    "ld_global_nc_u16": "ld.global.nc.u16",
    "st_global_v4": "st.global.v4",
    "st_global_v2": "st.global.v2",
    "st_global_u32": "st.global.u32",
    "st_global_u16": "st.global.u16",
    "atom_global_add_u32": "atom.global.add.u32",
    "atom_acq_rel_gpu_global_add_u32": "atom.acq_rel.gpu.global.add.u32",
    "atom_global_max_u32": "atom.global.max.u32",
    "red_global_max_u32": "red.global.max.u32",
    "red_release_gpu_global_add_u32": "red.release.gpu.global.add.u32",
    "atom_release_gpu_global_add_u32": "atom.release.gpu.global.add.u32",
    "fence_acq_rel_gpu": "fence.acq_rel.gpu",
    "ld_acquire_gpu_global_u32": "ld.acquire.gpu.global.u32",
}
# helpers that wrap no PTX instruction of their own
HELPERS = {"f32_bits", "f32_from_bits", "smem_addr", "mbarrier_wait_parity"}

KERNEL = r"""
extern "C" __global__ void __launch_bounds__(384, 1)
fp4q_ptx_all(const __grid_constant__ TensorMap in_map, const __grid_constant__ TensorMap q_map,
             const __grid_constant__ TensorMap sf_map, const float* __restrict__ x,
             float* __restrict__ y, u32* __restrict__ z) {
    alignas(1024) __shared__ u8 buf[8192];
    __shared__ u64 bars[2];
    const float a = ld_global_f32(x + threadIdx.x);
    const float b = x[threadIdx.x + 1];
    float r = mul_rn(a, b);
    r = fma_rn(r, a, b);
    r = add_rn(r, a);
    r = sub_rn(r, b);
    r = sqrt_rn(r);
    r = rcp_rn(r);
    r = add_rn(r, rcp_approx_ftz_f32(b));
    r = div_rn(r, b);
    r = max_f32(r, a);
    r = min_f32(r, b);
    r = abs_f32(r);
    const u32 e4 = cvt_rn_satfinite_e4m3x2_f32(a, b);
    const u32 h2 = cvt_rn_f16x2_e4m3x2(e4);
    r = add_rn(r, cvt_f32_f16(static_cast<u16>(h2)));
    u32 bits = f32_bits(r) ^ e4;
    r = f32_from_bits(bits ^ 1u);
    bits ^= max_bf16x2(e4, h2);
    bits ^= max_f16x2(h2, bits);
    bits ^= max_nan_bf16x2(e4, bits);
    bits ^= max_nan_f16x2(h2, bits);
    bits ^= max_nan_xorsign_abs_bf16x2(e4, bits);
    bits ^= max_nan_xorsign_abs_f16x2(h2, bits);
    bits ^= prmt_b32(bits, e4, 0x7351u);
    bits ^= brev_b32(bits) ^ cvt_rzi_u32_f32(r);
    bits ^= static_cast<u32>(mul_wide_u32(bits, e4) >> 32);
    bits = min_u32(bits, h2);
    bits ^= mul_rn_f16x2(bits, h2);
    r = max_nan_f32(r, b);
    r = min_nan_f32(r, a);
    bits ^= cvt_rn_bf16x2_f32(a, r);
    bits ^= cvt_rn_f16x2_f32(r, b);
    bits ^= redux_sync_max_u32(bits);
    r = add_rn(r, shfl_sync_bfly_b32(r, 1));
    bits ^= shfl_sync_up_b32(bits, 2u);
    bits ^= vote_sync_any_pred(bits > 7u) ? 1u : 0u;
    u32 g0, g1, g2, g3;
    ld_global_nc_v4(x + 4 * threadIdx.x, g0, g1, g2, g3);
    bits ^= g0 ^ g1 ^ g2 ^ g3;
    ld_global_v4(x + 4 * threadIdx.x + 64, g0, g1, g2, g3);
    bits ^= g0 ^ g1 ^ g2 ^ g3;
    bits ^= ld_global_nc_u32(x + threadIdx.x + 2) ^ ld_global_nc_u16(x + threadIdx.x + 3);
    if constexpr (FP4Q_HAS_CVT_E2M1) bits ^= cvt_rn_satfinite_e2m1x2_f32(a, b);
    if (threadIdx.x == 0) {
        mbarrier_init(&bars[0], 1);
        mbarrier_init(&bars[1], 256);
        fence_mbarrier_init();
        prefetch_tensormap(&in_map);
    }
    __syncthreads();
    griddepcontrol_wait();
    if (threadIdx.x < 128) {
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) {
            mbarrier_arrive_expect_tx(&bars[0], 4096);
            cp_async_bulk_tensor_2d_global_to_shared(buf, &in_map, 0, 0, &bars[0]);
            mbarrier_wait_parity(&bars[0], 0);
            z[0] = mbarrier_try_wait_parity(&bars[1], 0) ? 1u : 0u;
        }
        return;
    }
    setmaxnreg_inc<232>();
    const int t = threadIdx.x - 128;
    st_shared_v4(buf + 4096 + 16 * (t % 64), bits, e4, h2, static_cast<u32>(t));
    st_shared_u32(buf + 4096 + 4 * t, bits);
    st_shared_u16(buf + 6144 + 2 * t, static_cast<u16>(bits));
    u32 p0, p1, p2, p3;
    ld_shared_v4(buf + 16 * (t % 64), p0, p1, p2, p3);
    p0 ^= ld_shared_u32(buf + 4 * t);
    mbarrier_arrive(&bars[1]);
    fence_proxy_async_shared_cta();
    bar_sync(1, 256);
    if (t == 0) {
        prefetch_tensormap(&q_map);
        cp_async_bulk_tensor_2d_shared_to_global(&q_map, 0, 0, buf + 4096);
        cp_async_bulk_tensor_4d_shared_to_global(&sf_map, 0, 0, 0, 0, buf + 6144);
        cp_async_bulk_commit_group();
        cp_async_bulk_wait_group_read<0>();
        cp_async_bulk_wait_group<0>();
    }
    griddepcontrol_launch_dependents();
    y[threadIdx.x] = r;
    z[threadIdx.x + 1] = bits ^ p0 ^ p1 ^ p2 ^ p3;
    st_global_v4(y + 4 * threadIdx.x, p0, p1, p2, p3);
    st_global_u32(z + 300 + threadIdx.x, p0);
    st_global_u16(z + 900 + threadIdx.x, p1);
    st_global_v2(z + 800 + 2 * threadIdx.x, p1, p2);
    z[700] = atom_global_add_u32(z + 600, 1u) + atom_acq_rel_gpu_global_add_u32(z + 601, 1u);
    z[701] = atom_global_max_u32(z + 602, bits) + ld_acquire_gpu_global_u32(z + 603);
    red_global_max_u32(z + 604, bits);
    red_release_gpu_global_add_u32(z + 605, 1u);
    z[702] = atom_release_gpu_global_add_u32(z + 606, 1u);
    fence_acq_rel_gpu();
}
"""


def defined_wrappers(text: str) -> list[str]:
    return re.findall(r"^FP4Q_DEVICE\s+[\w:]+\s+(\w+)\(", text, re.M)


DEFINED = defined_wrappers(HEADER)
TARGETS = ["sm_90a", "sm_100f"]  # without and with the e2m1 conversion


def kernel_source(arch: str) -> KernelSource:
    return KernelSource("fp4q_ptx_all", feature_flags(arch) + HEADER + KERNEL, arch)


def body_of(name: str) -> str:
    """The text of wrapper ``name`` in the ptx/ headers, signature to closing brace."""
    m = re.search(rf"^FP4Q_DEVICE\s+[\w:]+\s+{name}\(", HEADER, re.M)
    assert m, name
    line_end = HEADER.index("\n", m.start())
    if HEADER[m.start():line_end].rstrip().endswith("}"):
        return HEADER[m.start():line_end]
    return HEADER[m.start():HEADER.index("\n}", m.start()) + 2]


def norm(mnemonic: str) -> str:
    return mnemonic.replace("::", "_").replace(".", "_").lower()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return BinaryCache(tmp_path_factory.mktemp("fp4q-ptx-cache"))


def to_ptx(src: KernelSource) -> str:
    """PTX of ``src`` for the virtual arch of its target (to check the instructions survive)."""
    nvrtc = compiler._nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(src.source.encode(), b"ptx_all.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [f"--gpu-architecture=compute_{src.arch[3:]}".encode(), b"-std=c++17", b"--fmad=false"]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetPTX(prog, buf)
        return buf.rstrip(b"\x00").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# --- the wrapper list -------------------------------------------------------------------------------------------


def test_all_cuh_includes_every_family():
    # the wrapper tests see a family only through ptx/all.cuh
    families = {p.name for p in (templates_dir() / "ptx").glob("*.cuh")} - {"all.cuh"}
    included = set(re.findall(r'^#include "ptx/([^"]+)"$', (templates_dir() / "ptx" / "all.cuh").read_text(), re.M))
    assert included == families


def test_every_wrapper_is_known():
    # a new wrapper needs an entry in MNEMONICS (and a call in KERNEL) before this passes
    assert len(DEFINED) == len(set(DEFINED)), "a wrapper is defined twice"
    assert set(DEFINED) == set(MNEMONICS) | HELPERS, set(DEFINED) ^ (set(MNEMONICS) | HELPERS)


def test_every_wrapper_is_called_by_the_test_kernel():
    for name in set(DEFINED) - {"smem_addr"}:  # smem_addr is used by the shared-memory wrappers
        assert re.search(rf"\b{name}\s*(<[^>]*>)?\(", KERNEL), name


@pytest.mark.parametrize("name", sorted(MNEMONICS))
def test_wrapper_is_named_after_its_instruction(name):
    mnemonic = MNEMONICS[name]
    body = body_of(name)
    assert mnemonic in HEADER
    asm = "".join(re.findall(r'"([^"]*)"', body))  # the asm string literals of this wrapper
    assert "asm" in body and mnemonic in asm, (name, body)
    # the name spells the instruction: mul_rn for mul.rn.f32, cp_async_bulk_tensor_2d_... for cp.async.bulk.tensor.2d
    assert name.startswith(norm(mnemonic)) or norm(mnemonic).startswith(name), (name, mnemonic)
    # copy direction in the name matches the PTX operand order (.dst.src)
    direction = re.search(r"_(global|shared)_to_(global|shared)$", name)
    if direction:
        src, dst = direction.groups()
        assert re.search(rf"{re.escape(mnemonic)}\.{dst}(::\w+)?\.{src}\b", asm), (name, asm)


def test_wrappers_do_not_use_a_longer_instruction_than_their_name():
    assert "expect_tx" not in body_of("mbarrier_arrive")
    assert ".read" not in body_of("cp_async_bulk_wait_group")
    assert "satfinite" not in body_of("cvt_rn_f16x2_e4m3x2")


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_helpers_have_no_inline_asm(name):
    assert "asm" not in body_of(name)


def test_side_effect_wrappers_are_volatile():
    # instructions whose effect is not their result must not be removed or moved by the compiler
    for name in ("mbarrier_init", "fence_mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx",
                 "mbarrier_try_wait_parity", "cp_async_bulk_tensor_2d_global_to_shared",
                 "cp_async_bulk_tensor_2d_shared_to_global", "cp_async_bulk_tensor_4d_shared_to_global",
                 "cp_async_bulk_commit_group", "cp_async_bulk_wait_group_read", "cp_async_bulk_wait_group",
                 "fence_proxy_async_shared_cta", "bar_sync", "griddepcontrol_wait",
                 "griddepcontrol_launch_dependents", "setmaxnreg_inc", "setmaxnreg_dec", "st_shared_v4",
                 "st_shared_u16", "st_shared_u32", "prefetch_tensormap", "red_global_max_u32",
                 "red_release_gpu_global_add_u32", "fence_acq_rel_gpu"):
        assert "asm volatile" in body_of(name), name


def test_rounding_wrappers_name_their_rounding():
    for name in ("mul_rn", "fma_rn", "add_rn", "rcp_rn"):
        assert ".rn." in body_of(name)
        assert "approx" not in body_of(name)


def test_e2m1_wrapper_is_defined_once():
    assert HEADER.count("cvt.rn.satfinite.e2m1x2.f32") == 1


# --- compiling all of them --------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", TARGETS)
def test_all_wrappers_compile(arch, cache):
    kernel = compile_source(kernel_source(arch), cache=cache)
    assert kernel.cubin[:4] == b"\x7fELF"
    assert b"fp4q_ptx_all" in kernel.cubin
    assert kernel.resources.spill_bytes == 0, kernel.log
    assert "C7508" not in kernel.log and "setmaxnreg' ignored" not in kernel.log, kernel.log


@pytest.mark.parametrize("arch", TARGETS)
def test_every_instruction_reaches_the_ptx(arch):
    ptx = to_ptx(kernel_source(arch))
    for name, mnemonic in MNEMONICS.items():
        if name == "cvt_rn_satfinite_e2m1x2_f32" and arch == "sm_90a":
            assert mnemonic not in ptx
            continue
        assert mnemonic in ptx, (name, mnemonic)
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx
    assert "cp.async.bulk.wait_group.read 0" in ptx


def with_flag(src: KernelSource, flag: str) -> KernelSource:
    """``src`` with feature ``flag`` forced on."""
    source = src.source.replace(f"bool {flag} = false;", f"bool {flag} = true;")
    assert source != src.source, flag
    return KernelSource(src.kernel_name, source, src.arch)


def test_hardware_e2m1_wrapper_fails_for_sm_90a(cache):
    with pytest.raises(CompileError) as info:
        compile_source(with_flag(kernel_source("sm_90a"), "FP4Q_HAS_CVT_E2M1"), cache=cache)
    assert "e2m1" in info.value.log


# Each instruction sm_80's ptxas rejects, called under the feature flag that says the target has it.
REJECTED_ON_SM_80 = {
    "FP4Q_HAS_PDL": "griddepcontrol_wait(); griddepcontrol_launch_dependents();",
    "FP4Q_HAS_CVT_E4M3": "z[0] = cvt_rn_f16x2_e4m3x2(cvt_rn_satfinite_e4m3x2_f32(x[0], x[1]));",
    "FP4Q_HAS_CVT_E2M1": "z[0] = cvt_rn_satfinite_e2m1x2_f32(x[0], x[1]);",
    "FP4Q_HAS_MAX_ABS_X2": "z[0] = max_nan_xorsign_abs_bf16x2(z[1], z[2]) ^ max_nan_xorsign_abs_f16x2(z[1], z[2]);",
}


@pytest.mark.parametrize("flag", sorted(REJECTED_ON_SM_80))
def test_a_discarded_branch_keeps_its_instruction_from_ptxas(flag, cache):
    # why the feature flags can all be constexpr: the front end drops the discarded branch of an
    # `if constexpr`, also in a function that is not a template, so its asm never reaches ptxas
    kernel = (f'extern "C" __global__ void k(const float* x, u32* z) {{\n'
              f'    if constexpr ({flag}) {{ {REJECTED_ON_SM_80[flag]} }}\n}}\n')
    src = KernelSource("k", feature_flags("sm_80") + HEADER + kernel, "sm_80")
    assert compile_source(src, cache=cache).cubin[:4] == b"\x7fELF"
    with pytest.raises(CompileError, match=r"(requires|not supported on) \.target"):
        compile_source(with_flag(src, flag), cache=cache)
