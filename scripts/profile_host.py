"""cProfile of the host side of quantize_nvfp4 with warm caches."""

import cProfile
import pstats

import cupy as cp

import fp4q

x = cp.zeros((16, 4096), dtype=cp.uint16)
q = cp.empty((16, 2048), cp.uint8)
sf = cp.empty(fp4q.swizzled_sf_shape(16, 256), cp.uint8)
for _ in range(100):
    fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf)
cp.cuda.Device().synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(2000):
    fp4q.quantize_nvfp4(x, 1.0, out=q, sf_out=sf)
prof.disable()
cp.cuda.Device().synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
