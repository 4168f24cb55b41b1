"""cuda.core against fp4q's own NVRTC and launch path, in one run.

    python scripts/dev/cuda_core_ab.py [--calls 4000] [--rounds 7] [--json OUT]

Compiling (no GPU needed): every kernel a call can choose for sm_90a and
sm_100f is compiled by ``cuda.core.Program`` with the options fp4q uses
(``ProgramOptions``: arch, C++17, no FMA contraction, no flush to zero,
correctly rounded division and square root, ptxas -v) and by fp4q's NVRTC
path; the script reports whether the cubins are byte-identical and which of
fp4q's options cuda.core can express.

Launching (a GPU): the vector quantizer at 16x4096, the call path's kernel for
serving sizes, launched ``--calls`` times with PDL by fp4q's ``Launcher`` and by
``cuda.core.launch`` (``LaunchConfig(programmatic_stream_serialization=True)``)
with the same arguments, rounds interleaved; host microseconds per launch (the
least of ``--rounds``), the launches queued on one stream without a sync inside
the timed loop. cuda.core takes typed arguments (numpy scalars), so it is timed
twice: with arguments converted once, and converted from the call's values on
every launch, as a call path would have to (fp4q's Launcher packs them itself). Tensor maps: host microseconds to encode the TMA quantizer's
three maps for new pointers, by fp4q's encoder and by cuda.core's
``StridedMemoryView.as_tensor_map``.
"""

from __future__ import annotations

import argparse
import json
import time

import fp4q  # noqa: F401 - the package under test, first on the path
from fp4q.jit.compiler import BASE_OPTIONS, compile_source
from fp4q.jit.cache import BinaryCache
from fp4q.jit.render import render
from fp4q.kernels.archs import target
from fp4q.kernels.quantize import SimtConfig
from fp4q.kernels.variants import default_variants

# fp4q's options, each as cuda.core's ProgramOptions spells it.
CORE_OPTIONS = dict(std="c++17", fma=False, ftz=False, prec_div=True, prec_sqrt=True, ptxas_options="-v")
assert len(CORE_OPTIONS) == len(BASE_OPTIONS), "every fp4q option has its cuda.core spelling"


def kernels(arch: str) -> dict[str, object]:
    """The configs of the kernels a call picks by itself on ``arch``."""
    out = {f"vec_128_x{e}": SimtConfig(threads=128, vector=True, vector_elements=e, arch=arch) for e in (8, 16, 32)}
    out["simt_256"] = SimtConfig(arch=arch)
    out.update(default_variants(arch))
    return out


def compare_compiles(cache_dir: str) -> list[dict]:
    from cuda.core import Program, ProgramOptions

    rows = []
    for arch in ("sm_90a", "sm_100f"):
        for name, cfg in kernels(arch).items():
            src = render(cfg.spec)
            own = compile_source(src, BinaryCache(cache_dir))
            options = ProgramOptions(arch=target(arch).gpu_architecture, name=f"{src.kernel_name}.cu", **CORE_OPTIONS)
            start = time.perf_counter()
            core = Program(src.source, "c++", options).compile("cubin")
            seconds = time.perf_counter() - start
            rows.append(dict(arch=arch, kernel=name, identical=bytes(core.code) == own.cubin,
                             core_seconds=round(seconds, 3)))
    return rows


def time_launches(calls: int, rounds: int) -> dict:
    import cupy as cp
    import numpy as np
    from cuda.core import Device, LaunchConfig, ObjectCode, launch

    import fp4q
    from fp4q.ops.api import QUANTIZE_NVFP4
    from fp4q.ops.arrays import as_operand
    from fp4q.ops.engine import plan_of

    x = cp.zeros((16, 4096), cp.uint16)
    q = cp.empty((16, 2048), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(16, 4096), cp.uint8)
    fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf)  # the plan and its launch, loaded
    plan = plan_of(QUANTIZE_NVFP4, as_operand(x, "x"), ("swizzled",), None)
    (own_launch,) = plan.launches.values()
    values = [x.data.ptr, q.data.ptr, sf.data.ptr, 1.0, 0]
    stream = cp.cuda.get_current_stream().ptr

    dev = Device(0)
    dev.set_current()
    core_stream = dev.create_stream()
    kernel = own_launch.kernel
    core_kernel = ObjectCode.from_cubin(kernel.compiled.cubin).get_kernel(kernel.spec.name)
    config = LaunchConfig(grid=own_launch.grid, block=own_launch.block, shmem_size=own_launch.smem_bytes,
                          programmatic_stream_serialization=True)
    by_name = dict(zip([name for name, _ in QUANTIZE_NVFP4.slots], values), **own_launch.fixed)
    kinds = {"ptr": np.uint64, "i64": np.int64, "i32": np.int32, "u32": np.uint32, "f32": np.float32}
    core_args = [kinds[p.kind](by_name[p.name]) for p in kernel.spec.params]
    # What a call path would do: the call's values converted each call (the fixed ones once).
    slot_index = {name: i for i, (name, _) in enumerate(QUANTIZE_NVFP4.slots)}
    # Per parameter: (the slot it takes, its type) or (None, its fixed value, converted).
    per_call = [(slot_index[p.name], kinds[p.kind]) if p.name in slot_index else (None, kinds[p.kind](by_name[p.name]))
                for p in kernel.spec.params]

    def core_args_of(call_values) -> list:
        return [fixed_or_type(call_values[i]) if i is not None else fixed_or_type for i, fixed_or_type in per_call]

    def own() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            own_launch(stream, True, values)
        return (time.perf_counter() - start) / calls * 1e6

    def core() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            launch(core_stream, config, core_kernel, *core_args)
        return (time.perf_counter() - start) / calls * 1e6

    def core_per_call() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            launch(core_stream, config, core_kernel, *core_args_of(values))
        return (time.perf_counter() - start) / calls * 1e6

    contenders = (("fp4q Launcher", own), ("cuda.core launch", core),
                  ("cuda.core launch, arguments converted per call", core_per_call))
    for _, fn in contenders:  # warm
        fn()
    results: dict[str, list[float]] = {label: [] for label, _ in contenders}
    for r in range(rounds):
        for label, fn in contenders[:: 1 if r % 2 == 0 else -1]:
            results[label].append(fn())
            cp.cuda.Device().synchronize()
            core_stream.sync()
    return {label: round(min(v), 3) for label, v in results.items()}


def time_maps(rounds: int, sets: int = 200) -> dict:
    """Host microseconds to encode the TMA quantizer's three maps (x, out, swizzled sf_out) at
    8192x8192 for new pointers: fp4q's encoder from the spec's MapSpec, and cuda.core's
    ``StridedMemoryView.as_tensor_map`` over views of the same arrays (where it can build them:
    an error is reported as such)."""
    import cupy as cp
    from cuda.core.utils import StridedMemoryView

    import fp4q
    from fp4q.cuda import tma
    from fp4q.kernels.spec import Extent
    from fp4q.kernels.variants import default_variants

    cfg = default_variants("sm_90a")["default"]
    m = k = 8192
    x = cp.zeros((m, k), cp.uint16)
    q = cp.empty((m, k // 2), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(m, k), cp.uint8)
    arrays = {"x": x, "out": q, "sf_out": sf}
    extents = {"x": Extent(m, k, 2 * k), "out": Extent(m, k // 2, k // 2), "sf_out": Extent(m, k // 16, 0)}
    maps = cfg.spec.maps
    # cuda.core takes its own enums (cuda.core 1.2 keeps them in a private module).
    from cuda.core._tensor_map import TensorMapL2Promotion, TensorMapSwizzle

    swizzles = {0: TensorMapSwizzle.NONE, 32: TensorMapSwizzle.SWIZZLE_32B,
                64: TensorMapSwizzle.SWIZZLE_64B, 128: TensorMapSwizzle.SWIZZLE_128B}
    l2 = {0: TensorMapL2Promotion.NONE, 256: TensorMapL2Promotion.L2_256B}
    # The arrays as the maps see them, outermost dimension first.
    views = {"x": x, "out": q, "sf_out": sf.reshape(sf.shape[0], sf.shape[1], 32, 16)}

    def own() -> float:
        start = time.perf_counter()
        for _ in range(sets):
            for spec in maps:
                dims, strides = spec.dims_strides(extents[spec.operand])
                tma.encode(tma.TensorMapSpec(arrays[spec.operand].data.ptr, spec.element_bytes, dims, strides,
                                             spec.box, spec.swizzle, spec.l2_promotion), spec.operand)
        return (time.perf_counter() - start) / sets * 1e6

    def core() -> float:
        start = time.perf_counter()
        for _ in range(sets):
            for spec in maps:
                view = StridedMemoryView.from_any_interface(views[spec.operand], stream_ptr=-1)
                view.as_tensor_map(tuple(reversed(spec.box)), swizzle=swizzles[int(spec.swizzle)],
                                   l2_promotion=l2[spec.l2_promotion])
        return (time.perf_counter() - start) / sets * 1e6

    result: dict = {}
    for label, fn in (("fp4q encode", own), ("cuda.core as_tensor_map", core)):
        try:
            fn()
            result[label] = round(min(fn() for _ in range(rounds)), 3)
        except Exception as exc:  # noqa: BLE001 - what cuda.core cannot express is a finding
            result[label] = f"failed: {type(exc).__name__}: {exc}"
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json")
    parser.add_argument("--no-gpu", action="store_true", help="only the compile comparison")
    args = parser.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory() as cache_dir:
        report: dict = {"compiles": compare_compiles(cache_dir)}
    if not args.no_gpu:
        report["host_us_per_launch"] = time_launches(args.calls, args.rounds)
    if not args.no_gpu:
        report["host_us_per_map_set"] = time_maps(args.rounds)
    for row in report["compiles"]:
        print(f"{row['arch']:8} {row['kernel']:16} identical={row['identical']} cuda.core compile "
              f"{row['core_seconds']} s")
    for label, us in report.get("host_us_per_launch", {}).items():
        print(f"{label}: {us} us per launch")
    for label, us in report.get("host_us_per_map_set", {}).items():
        print(f"three maps, {label}: {us} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
