"""What the sweep times for each operation (``--op``): its candidate configs,
the bytes it moves (for the same-bytes copy), one call, and a bit check of
sampled rows against the numpy reference.

Every op has ``name``; ``bytes(m, k)`` -> (read, written);
``configs(space)`` -> named configs, given the sweep's NVFP4 space;
``prepare(m, k, rng)`` makes the shape's inputs and outputs once;
``clear()`` fills the outputs with 0xFF, so that a check sees only what the
next run writes; ``run(cfg, pdl)`` writes into those outputs (the timed call
allocates nothing); ``check(rng)`` -> whether sampled rows of the last run's
outputs equal the reference.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

import fp4q
from fp4q.numerics import reference
from fp4q.kernels.variants import DEQUANTIZE, SHIPPED_MX, SIMT

OPS = ("nvfp4", "mxfp4", "dequantize", "dequantize_mx")


def sample_rows(m: int, rng) -> list[int]:
    """Up to 50 random rows, the first and last, and all rows of a partial last 128-row block."""
    rows = set(rng.choice(m, size=min(m, 48), replace=False).tolist()) | {0, m - 1}
    rows |= set(range(max(0, m - m % 128), m)) if m % 128 else set()
    return sorted(rows)[:200]


def bf16_normal(m: int, k: int, rng) -> np.ndarray:
    return (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


class Quantize:
    """quantize_nvfp4 (the sweep's config space) or quantize_mxfp4 rceil (the shipped
    MXFP4 TMA configs and the vector kernel)."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.name = fmt
        self.group = 16 if fmt == "nvfp4" else 32

    def bytes(self, m, k):
        return 2 * m * k, m * k // 2 + m * k // self.group

    def configs(self, space):
        if self.fmt == "nvfp4":
            return space
        vector = {n: c for n, c in SIMT.items() if c.vector and c.fmt == "mxfp4" and c.mx_mode == "rceil"}
        return {**{n: c for n, c in SHIPPED_MX.items() if c.mx_mode == "rceil"}, **vector}

    def prepare(self, m, k, rng):
        self.x_host = bf16_normal(m, k, rng)
        self.x = cp.asarray(self.x_host)
        self.tsf = float(reference.global_scale(self.x_host[: min(m, 256)])) if self.fmt == "nvfp4" else None
        self.q = cp.empty((m, k // 2), cp.uint8)
        self.sf = cp.empty(fp4q.swizzled_sf_shape(m, k, self.fmt), cp.uint8)

    def clear(self):
        self.q.fill(0xFF)
        self.sf.fill(0xFF)

    def run(self, cfg, pdl):
        if self.fmt == "nvfp4":
            fp4q.quantize_nvfp4(self.x, self.tsf, out=self.q, sf_out=self.sf, config=cfg, pdl=pdl)
        else:
            fp4q.quantize_mxfp4(self.x, out=self.q, sf_out=self.sf, config=cfg, pdl=pdl)

    def check(self, rng):
        m, k = self.x_host.shape
        rows = sample_rows(m, rng)
        if self.fmt == "nvfp4":
            q_ref, sf_ref = reference.quantize_nvfp4(self.x_host[rows], self.tsf, sf_layout="linear")
        else:
            q_ref, sf_ref = reference.quantize_mxfp4(self.x_host[rows], sf_layout="linear")
        sf_lin = fp4q.unswizzle_sf(cp.asnumpy(self.sf), m, k, self.fmt)
        return bool((cp.asnumpy(self.q[cp.asarray(rows)]) == q_ref).all() and (sf_lin[rows] == sf_ref).all())


class Dequantize:
    """dequantize_nvfp4 or dequantize_mxfp4 to bf16 from swizzled scales: the shipped dequantize configs."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.name = "dequantize" if fmt == "nvfp4" else "dequantize_mx"
        self.group = 16 if fmt == "nvfp4" else 32

    def bytes(self, m, k):
        return m * k // 2 + m * k // self.group, 2 * m * k

    def configs(self, space):
        return dict(DEQUANTIZE)

    def prepare(self, m, k, rng):
        x_host = bf16_normal(m, k, rng)
        if self.fmt == "nvfp4":
            self.tsf = (float(reference.global_scale(x_host[: min(m, 256)])),)
            self.q, self.sf = fp4q.quantize_nvfp4(cp.asarray(x_host), *self.tsf)
        else:
            self.tsf = ()
            self.q, self.sf = fp4q.quantize_mxfp4(cp.asarray(x_host))
        self.y = cp.empty((m, k), cp.uint16)

    def clear(self):
        self.y.fill(0xFFFF)

    def run(self, cfg, pdl):
        dequantize = fp4q.dequantize_nvfp4 if self.fmt == "nvfp4" else fp4q.dequantize_mxfp4
        dequantize(self.q, self.sf, *self.tsf, out=self.y, config=cfg, pdl=pdl)

    def check(self, rng):
        m, k = self.y.shape
        rows = sample_rows(m, rng)
        q_rows = cp.asnumpy(self.q[cp.asarray(rows)])
        sf_rows = fp4q.unswizzle_sf(cp.asnumpy(self.sf), m, k, self.fmt)[rows]
        dequantize = reference.dequantize_nvfp4 if self.fmt == "nvfp4" else reference.dequantize_mxfp4
        y_ref = dequantize(q_rows, sf_rows, *self.tsf, sf_layout="linear", dtype="bfloat16")
        return bool((cp.asnumpy(self.y[cp.asarray(rows)]) == y_ref.view(np.uint16)).all())


class QuantizeDynamic(Quantize):
    """NVFP4 with the tensor scale computed on the device first (bench only: it has no configs to sweep).

    ``chained=True`` is ``quantize_nvfp4(x, "dynamic")`` (the amax pass and the
    quantize pass chained with PDL in one call); ``chained=False`` is the same
    work as two calls, ``global_scale(x)`` then ``quantize_nvfp4(x, scale)``.
    Both read x twice, which ``bytes`` counts."""

    def __init__(self, chained: bool):
        super().__init__("nvfp4")
        self.chained = chained
        self.name = "nvfp4_dynamic" if chained else "nvfp4_two_calls"

    def bytes(self, m, k):
        read, written = super().bytes(m, k)
        return 2 * read, written

    def configs(self, space):
        return {}

    def run(self, cfg, pdl):
        if self.chained:
            self.scale = fp4q.quantize_nvfp4(self.x, "dynamic", out=self.q, sf_out=self.sf, config=cfg, pdl=pdl)[2]
        else:
            self.scale = fp4q.global_scale(self.x, pdl=pdl)
            fp4q.quantize_nvfp4(self.x, self.scale, out=self.q, sf_out=self.sf, config=cfg, pdl=pdl)

    def check(self, rng):
        self.tsf = float(reference.global_scale(self.x_host))
        return float(self.scale) == self.tsf and super().check(rng)


def make(name: str):
    ops = {"nvfp4": lambda: Quantize("nvfp4"), "mxfp4": lambda: Quantize("mxfp4"),
           "dequantize": lambda: Dequantize("nvfp4"),
           "dequantize_mx": lambda: Dequantize("mxfp4"), "nvfp4_dynamic": lambda: QuantizeDynamic(True),
           "nvfp4_two_calls": lambda: QuantizeDynamic(False)}
    return ops[name]()

