"""cProfile of the host side of one quantize call with warm caches (needs a GPU).

``--floors`` instead times (unprofiled: the best of 5 runs of
``timing.host_us_per_call`` over 4000 calls, 16x4096) the torch calls of
fp4q beside what no such call can go below on this host: a custom op
defined the same way (``torch.library.Library`` with a Python kernel) that
does nothing, one that only allocates the two outputs, the allocation
alone, one ``cuLaunchKernelEx`` of the kernel, and a torch built-in with
out= (the dispatcher's floor)."""

from __future__ import annotations

import argparse
import os
import sys

if __package__ in (None, ""):  # run as a file: the repository root makes `scripts` importable
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CALLS = {
    "value": "a host float tensor_sf",
    "device": "a device float32 tensor_sf",
    "dynamic": 'tensor_sf="dynamic"',
    "two_calls": "global_scale, then quantize",
    "torch_op": "torch.ops.fp4q.quantize_nvfp4.default on a torch tensor, outputs from torch",
    "torch_packet": "torch.ops.fp4q.quantize_nvfp4 (the overload packet) on a torch tensor",
    "torch_out": "fp4q.quantize_nvfp4 on torch tensors, out= given",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("call", nargs="?", default="value", choices=CALLS,
                        help="; ".join(f"{k}: {v}" for k, v in CALLS.items()) + " (default value)")
    parser.add_argument("--calls", type=int, default=2000, help="profiled calls (default 2000)")
    parser.add_argument("--top", type=int, default=25, help="functions listed, by own time (default 25)")
    parser.add_argument("--floors", action="store_true", help="time the torch calls beside their floors instead")
    return parser.parse_args(argv)


def floors() -> None:
    import torch

    import fp4q
    import fp4q.torch  # noqa: F401 - registers torch.ops.fp4q
    from fp4q.ops.api import QUANTIZE_NVFP4
    from fp4q.ops.arrays import as_operand
    from fp4q.ops.engine import plan_of
    from scripts.bench import timing

    dev = torch.device("cuda", 0)
    xt = torch.zeros((16, 4096), dtype=torch.bfloat16, device=dev)
    qt = torch.empty((16, 2048), dtype=torch.uint8, device=dev)
    sft = torch.empty(fp4q.swizzled_sf_shape(16, 4096), dtype=torch.uint8, device=dev)
    a, b, c = (torch.empty((16, 4096), dtype=torch.bfloat16, device=dev) for _ in range(3))
    q_shape, sf_shape = (16, 2048), (1, 64, 32, 4, 4)
    schema = '(Tensor x, float tensor_sf, str sf_layout="swizzled", bool pdl=True, bool fp4_dtype=False)'

    def nothing(x, tensor_sf, sf_layout="swizzled", pdl=True, fp4_dtype=False):
        return None

    def allocate(x, tensor_sf, sf_layout="swizzled", pdl=True, fp4_dtype=False):
        return (torch.empty_strided(q_shape, (2048, 1), dtype=torch.uint8, device=dev),
                torch.empty_strided(sf_shape, (8192, 512, 16, 4, 1), dtype=torch.float8_e4m3fn, device=dev))

    lib = torch.library.Library("fp4q_floors", "DEF")
    lib.define(f"nothing{schema} -> ()")
    lib.impl("nothing", nothing, "CUDA")
    lib.define(f"allocate{schema} -> (Tensor, Tensor)")
    lib.impl("allocate", allocate, "CUDA")
    op = torch.ops.fp4q.quantize_nvfp4
    # The launch a call at this shape runs (the vector kernel), as its plan keeps it.
    fp4q.quantize_nvfp4(xt, 1.0, out=qt, sf_out=sft)
    (launch,) = plan_of(QUANTIZE_NVFP4, as_operand(xt, "x"), ("swizzled",), None).launches.values()
    values = [xt.data_ptr(), qt.data_ptr(), sft.data_ptr(), 1.0, 0]
    stream = torch.cuda.current_stream(dev).cuda_stream
    rows = [
        ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c)),
        ("a custom op that does nothing", lambda: torch.ops.fp4q_floors.nothing.default(xt, 1.0)),
        ("a custom op that allocates q and sf", lambda: torch.ops.fp4q_floors.allocate.default(xt, 1.0)),
        ("q and sf allocated (two torch.empty_strided)", lambda: allocate(xt, 1.0)),
        ("the kernel's launch (KernelLaunch, cuLaunchKernelEx)", lambda: launch(stream, True, values)),
        ("torch.ops.fp4q.quantize_nvfp4.default(x, 1.0)", lambda: op.default(xt, 1.0)),
        ("torch.ops.fp4q.quantize_nvfp4(x, 1.0) (overload packet)", lambda: op(xt, 1.0)),
        ("fp4q.quantize_nvfp4 on torch tensors, out= given", lambda: fp4q.quantize_nvfp4(xt, 1.0, out=qt, sf_out=sft)),
    ]
    for name, fn in rows:
        best = min(timing.host_us_per_call(fn, calls=4000) for _ in range(5))
        print(f"| {name} | {best:.2f} |", flush=True)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.floors:
        floors()
        return
    import cProfile
    import pstats

    import cupy as cp
    import numpy as np

    import fp4q

    x = cp.zeros((16, 4096), dtype=cp.uint16)
    q = cp.empty((16, 2048), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(16, 4096), cp.uint8)
    tsf_dev = cp.asarray(np.float32(1.0)).reshape(())
    calls = {
        "value": lambda: fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf),
        "device": lambda: fp4q.quantize_nvfp4(x, tsf_dev, out=q, sf_out=sf),
        "dynamic": lambda: fp4q.quantize_nvfp4(x, "dynamic", out=q, sf_out=sf),
        "two_calls": lambda: fp4q.quantize_nvfp4(x, fp4q.global_scale(x), out=q, sf_out=sf),
    }
    if args.call.startswith("torch"):
        import torch

        import fp4q.torch  # noqa: F401 - registers torch.ops.fp4q

        xt = torch.zeros((16, 4096), dtype=torch.bfloat16, device="cuda")
        qt = torch.empty((16, 2048), dtype=torch.uint8, device="cuda")
        sft = torch.empty(fp4q.swizzled_sf_shape(16, 4096), dtype=torch.uint8, device="cuda")
        op = torch.ops.fp4q.quantize_nvfp4
        calls.update(torch_op=lambda: op.default(xt, 1.0), torch_packet=lambda: op(xt, 1.0),
                     torch_out=lambda: fp4q.quantize_nvfp4(xt, 1.0, out=qt, sf_out=sft))
    call = calls[args.call]
    for _ in range(100):
        call()
    cp.cuda.Device().synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        call()
    prof.disable()
    cp.cuda.Device().synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
