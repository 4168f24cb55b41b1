"""cProfile of the host side of one quantize call with warm caches (needs a GPU)."""

from __future__ import annotations

import argparse

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
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    import cProfile
    import pstats

    import cupy as cp
    import numpy as np

    import fp4q

    x = cp.zeros((16, 4096), dtype=cp.uint16)
    q = cp.empty((16, 2048), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(16, 256), cp.uint8)
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
        sft = torch.empty(fp4q.swizzled_sf_shape(16, 256), dtype=torch.uint8, device="cuda")
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
