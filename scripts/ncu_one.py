"""One quantize launch of a given shape and shipped config, for ncu."""

import sys

import cupy as cp
import numpy as np

import fp4q
from fp4q.kernels.variants import SHIPPED

m, k = map(int, sys.argv[1].split("x"))
cfg = SHIPPED.get(sys.argv[2]) if len(sys.argv) > 2 else None
rng = np.random.default_rng(0)
x = cp.asarray((rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16))
for _ in range(3):
    fp4q.quantize_nvfp4(x, 1.0, config=cfg)
cp.cuda.Device().synchronize()
