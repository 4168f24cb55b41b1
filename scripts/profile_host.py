"""cProfile of the host side of one quantize call with warm caches.

``python scripts/profile_host.py [call]``, call one of: value (a float
tensor_sf, the default), device (a device float32 tensor_sf), dynamic
(``tensor_sf="dynamic"``), two_calls (``global_scale`` then quantize)."""

import cProfile
import pstats
import sys

import cupy as cp
import numpy as np

import fp4q

x = cp.zeros((16, 4096), dtype=cp.uint16)
q = cp.empty((16, 2048), cp.uint8)
sf = cp.empty(fp4q.swizzled_sf_shape(16, 256), cp.uint8)
tsf_dev = cp.asarray(np.float32(1.0)).reshape(())
CALLS = {
    "value": lambda: fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf),
    "device": lambda: fp4q.quantize_nvfp4(x, tsf_dev, out=q, sf_out=sf),
    "dynamic": lambda: fp4q.quantize_nvfp4(x, "dynamic", out=q, sf_out=sf),
    "two_calls": lambda: fp4q.quantize_nvfp4(x, fp4q.global_scale(x), out=q, sf_out=sf),
}
name = sys.argv[1] if len(sys.argv) > 1 else "value"
if name not in CALLS:
    raise SystemExit(f"call must be one of {', '.join(CALLS)}, got {name!r}")
call = CALLS[name]
for _ in range(100):
    call()
cp.cuda.Device().synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(2000):
    call()
prof.disable()
cp.cuda.Device().synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
