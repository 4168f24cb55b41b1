#!/usr/bin/env python3
"""fp4q next to what a user would otherwise run, side by side in one run.

Per shape (device time, L2 flushed before every repetition, launches queued
behind a spin kernel so host overhead never counts):

  copy            a device-to-device copy moving the same bytes (timing.copy_fn):
                  the roofline every other row is a ratio of
  torch eager     the spec's formula written straightforwardly in PyTorch
  torch.compile   the same function under torch.compile(mode="default")
  triton          a straightforward Triton kernel of the formula, one program
                  per (row block, group block) tile; best of 6 tile shapes
  torchao         torchao's NVFP4 quantizer, where torchao imports
  fp4q            the default (tuned) config, with PDL on and with PDL off

torch, torch.compile and triton are checked byte for byte against fp4q's
output (q and the scales, full tensors); fp4q itself against the numpy
reference (the spec) on sampled rows. Then, per shape:

  PDL chain       N dependent launches (quantize -> a consumer kernel that sums
                  the bytes of q -> quantize ...) timed as a whole, with and
                  without pdl=True on the quantize launches
  CUDA graph      K quantize calls with a device tensor_sf captured through
                  cupy stream capture and replayed; bytes checked
  formats         fp4q's MXFP4 quantizer, its NVFP4 and MXFP4 dequantizers, and
                  quantize_nvfp4(x, "dynamic") against global_scale + quantize
                  as two calls (default configs), each next to a copy of its
                  own bytes and checked against the reference on sampled rows

and once: host overhead per call (warm caches), the first call in a new
process with a warm disk cache, and a corner-case bit-exactness check of
every contender against the spec (NaN, Inf, -0, ties, subnormal scales).

Output: markdown tables (printed, and written to docs/benchmarks.md with the
command line, device, driver, versions and date) and JSON (--out).

Optional dependencies (torch, triton, torchao) that are missing give rows
saying so; anything that fails prints its traceback, is named in the table and
makes the exit status 1. Without a GPU nothing is timed and the exit status
is 2.

    python3 scripts/bench.py             # six shapes, 50 repetitions
    python3 scripts/bench.py --quick     # three shapes, 20 repetitions
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import textwrap
import time
import traceback
from dataclasses import asdict, dataclass, field

import numpy as np

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SCRIPTS)
sys.path.insert(0, SCRIPTS)
if REPO not in sys.path:
    sys.path.append(REPO)  # after site-packages: an installed fp4q wins

DEFAULT_SHAPES = "16x4096,128x7168,1024x4096,4096x7168,8192x8192,16384x16384"
QUICK_SHAPES = "16x4096,1024x4096,8192x8192"
HOST_SHAPE = (16, 4096)  # small enough that a call is host-bound: the host-overhead shape
TRITON_TILES = (  # (rows per program, 16-element groups per program, warps)
    (16, 8, 4),
    (8, 32, 4),
    (32, 8, 4),
    (16, 32, 8),
    (64, 8, 8),
    (32, 32, 8),
)
# Entries a repetition may leave in the launch queue before the host could
# block on a full queue (which would let host time leak into device time).
QUEUE_BUDGET = 384
# Launches per call, an upper estimate, for the contenders made of several kernels.
EAGER_LAUNCHES = 48
COMPILED_LAUNCHES = 8

R6 = float(np.array(0x3E2AAAAB, dtype=np.uint32).view(np.float32)[()])  # float32(1/6)
# E2M1 magnitude code = number of these thresholds below |v| (bucketize, right=False).
# Round to nearest even: 0.25 -> 0, 1.25 -> 1, 2.5 -> 2 and 5 -> 4 round down
# (code goes up only above them); 0.75 -> 1, 1.75 -> 2, 3.5 -> 4 round up (the
# code goes up from them on, so the threshold is the float32 just below).
E2M1_THRESHOLDS = [0.25, float(np.nextafter(np.float32(0.75), np.float32(0))), 1.25,
                   float(np.nextafter(np.float32(1.75), np.float32(0))), 2.5,
                   float(np.nextafter(np.float32(3.5), np.float32(0))), 5.0]

try:
    import triton
    import triton.language as tl

    TRITON_STATUS = "ok"
except ModuleNotFoundError:
    triton = tl = None
    TRITON_STATUS = "not installed"
except Exception as exc:  # noqa: BLE001 - a broken install is reported, not fatal
    triton = tl = None
    TRITON_STATUS = f"import failed: {type(exc).__name__}: {exc}"


# ----------------------------------------------------------------- contenders
if triton is not None:

    @triton.jit
    def _nvfp4_triton_kernel(x_ptr, q_ptr, sf_ptr, tsf_ptr, M, K, stride_x, stride_q, stride_sf,
                             BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr):
        # The spec's formula for a BLOCK_M x (BLOCK_G * 16) tile; linear scales.
        pid_m = tl.program_id(0)
        pid_g = tl.program_id(1)
        rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_ok = rows < M
        cols = pid_g * (BLOCK_G * 16) + tl.arange(0, BLOCK_G * 16)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :],
                    mask=row_ok[:, None] & (cols < K)[None, :], other=0.0).to(tl.float32)
        xg = tl.reshape(x, (BLOCK_M, BLOCK_G, 16))
        a = tl.abs(xg)
        a = tl.where(a != a, 0.0, a)  # NaN -> 0: a NaN-ignoring max, 0 for all-NaN groups
        amax = tl.max(a, axis=2)
        tsf = tl.load(tsf_ptr)
        s = tsf * (amax * 0.1666666716337204)  # R6 = float32(1/6), exactly; two roundings
        s = tl.minimum(s, 448.0)  # saturate (+Inf too) before the cast
        sf8 = s.to(tl.float8e4nv, fp_downcast_rounding="rtne")
        one = tl.full((BLOCK_M, BLOCK_G), 1.0, tl.float32)
        d = sf8.to(tl.float32) * tl.div_rn(one, tsf)
        inv = tl.where(d == 0.0, 0.0, tl.div_rn(one, d))
        v = xg * inv[:, :, None]
        av = tl.abs(v)
        code = ((av > 0.25).to(tl.int32) + (av >= 0.75).to(tl.int32) + (av > 1.25).to(tl.int32)
                + (av >= 1.75).to(tl.int32) + (av > 2.5).to(tl.int32) + (av >= 3.5).to(tl.int32)
                + (av > 5.0).to(tl.int32))
        not_nan = v == v
        code = tl.where(not_nan, code, 7)
        negative = (v.to(tl.int32, bitcast=True) < 0) & not_nan
        code = code | (negative.to(tl.int32) << 3)
        lo, hi = tl.split(tl.reshape(code, (BLOCK_M, BLOCK_G * 8, 2)))
        packed = (lo | (hi << 4)).to(tl.uint8)
        qcols = pid_g * (BLOCK_G * 8) + tl.arange(0, BLOCK_G * 8)
        tl.store(q_ptr + rows[:, None] * stride_q + qcols[None, :], packed,
                 mask=row_ok[:, None] & (qcols < K // 2)[None, :])
        gcols = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)
        tl.store(sf_ptr + rows[:, None] * stride_sf + gcols[None, :], sf8.to(tl.uint8, bitcast=True),
                 mask=row_ok[:, None] & (gcols < K // 16)[None, :])


def triton_quantize(xt, tsf_t, q, sf, tile):
    """Launch the Triton kernel: xt bf16 (M, K), tsf_t float32 0-d, q (M, K/2) and sf (M, K/16) uint8."""
    block_m, block_g, warps = tile
    m, k = xt.shape
    grid = (triton.cdiv(m, block_m), triton.cdiv(k // 16, block_g))
    _nvfp4_triton_kernel[grid](xt, q, sf, tsf_t, m, k, xt.stride(0), q.stride(0), sf.stride(0),
                               BLOCK_M=block_m, BLOCK_G=block_g, num_warps=warps)


def make_torch_formula(torch, device):
    """The spec's formula in PyTorch, written straightforwardly: (q, linear e4m3 scales)."""
    bounds = torch.tensor(E2M1_THRESHOLDS, dtype=torch.float32, device=device)

    def quantize(x, tensor_sf):
        m, k = x.shape
        xf = x.float().reshape(m, k // 16, 16)
        a = xf.abs()
        a = a.masked_fill(a.isnan(), 0.0)  # NaN -> 0: a NaN-ignoring max, 0 for all-NaN groups
        amax = a.amax(dim=-1)
        s = tensor_sf * (amax * R6)  # float32, two roundings in the spec's order
        # torch's cast to e4m3fn is not saturating (above 448 gives NaN): clamp first.
        sf8 = s.clamp(max=448.0).to(torch.float8_e4m3fn)
        d = sf8.float() * (1.0 / tensor_sf)
        inv = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
        v = xf * inv.unsqueeze(-1)
        nan = v.isnan()
        code = torch.bucketize(v.abs(), bounds, out_int32=True, right=False)
        code = torch.where(nan, torch.full_like(code, 7), code)
        code = code | ((torch.signbit(v) & ~nan).to(torch.int32) << 3)
        code = code.to(torch.uint8).reshape(m, k)
        q = code[:, 0::2] | (code[:, 1::2] << 4)
        return q, sf8.view(torch.uint8)

    return quantize


# -------------------------------------------------------------------- records
@dataclass
class Row:
    contender: str
    median_us: float | None = None
    min_us: float | None = None
    exact: str = "n/a"  # "yes", "no", "n/a": bytes equal to fp4q (fp4q rows: to the spec)
    status: str = "ok"  # "ok", "not installed", "failed: ..."
    note: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class Case:
    """One shape: the input, fp4q's output to check against, the copy roofline."""

    m: int
    k: int
    x: object
    tsf: float
    q_ref: object
    sf_ref: object  # swizzled, as fp4q returns it by default
    sf_ref_lin: object
    q: object
    sf: object
    copy_us: float
    copy_min_us: float
    moved: int
    xt: object = None  # torch bf16 view of x
    tsf_t: object = None  # torch float32 0-d


class Env:
    """The modules and settings every contender needs."""

    def __init__(self, args):
        import cupy as cp

        import fp4q
        import timing
        from fp4q.numerics import reference

        self.args = args
        self.cp, self.fp4q, self.timing, self.reference = cp, fp4q, timing, reference
        self.problems: list[str] = []  # failures: make the exit status 1
        self.findings: list[str] = []  # honest results worth reading, not failures
        self.torch, self.torch_status = _import_torch()
        from fp4q.cuda.driver import device

        self.device = device(cp.cuda.Device().id)
        self.torch_formula = None
        if self.torch is not None:
            self.torch_formula = make_torch_formula(self.torch, f"cuda:{self.device.ordinal}")
        self.spec_ok = (True, 0)
        self._consumer = None
        self.best_tile: dict[tuple[int, int], tuple] = {}
        if self.torch is not None:
            _align_streams(cp, self.torch)

    def consumer(self):
        if self._consumer is None:
            self._consumer = self.cp.RawKernel(CONSUMER_SOURCE, "bench_consume_q")
        return self._consumer

    def fail(self, where: str, exc: BaseException) -> str:
        msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        print(f"\n[bench] FAILED: {where}: {msg}", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        self.problems.append(f"{where}: {msg}")
        return f"failed: {msg}"


def _import_torch():
    try:
        import torch
    except ModuleNotFoundError:
        return None, "not installed"
    except Exception as exc:  # noqa: BLE001
        return None, f"import failed: {type(exc).__name__}: {exc}"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    return torch, "ok"


def _align_streams(cp, torch) -> None:
    """Make torch (and so Triton) launch on CuPy's current stream, where the timer's events are."""
    cp_stream = cp.cuda.get_current_stream().ptr
    torch_stream = torch.cuda.current_stream().cuda_stream
    if cp_stream == torch_stream:
        return
    if cp_stream == 0:
        raise RuntimeError(f"CuPy uses the legacy default stream but torch's current stream is {torch_stream:#x}; "
                           "the timer could not see torch's work")
    torch.cuda.set_stream(torch.cuda.ExternalStream(cp_stream))


# --------------------------------------------------------------------- timing
def device_time(env, fn, *, reps: int, entries: int, flush: bool = True):
    """timing.time_fn for calls of several launches or slow hosts: (Timing, host_bound).

    The same method (each repetition between its own events, an L2 flush
    before it, all queued behind a spin kernel), in chunks small enough that
    the launch queue never fills, with the spin sized from the measured host
    time of one call. ``host_bound`` says whether the spin ran out before a
    chunk was queued, in which case host time may show as device time.
    """
    cp, timing = env.cp, env.timing
    stream = cp.cuda.get_current_stream()
    for _ in range(env.args.warmup):
        fn()
    stream.synchronize()
    start = time.perf_counter()
    fn()
    host_us = (time.perf_counter() - start) * 1e6
    stream.synchronize()
    chunk = max(1, min(reps, QUEUE_BUDGET // (entries + 4)))
    samples: list[float] = []
    host_bound = False
    while len(samples) < reps:
        n = min(chunk, reps - len(samples))
        events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(n)]
        timing._spin(n * (2.0 * host_us + 100.0) + 2000.0)
        spin_done = cp.cuda.Event()
        spin_done.record(stream)
        for begin, end in events:
            if flush:
                timing.flush_l2()
            begin.record(stream)
            fn()
            end.record(stream)
        host_bound |= spin_done.done
        events[-1][1].synchronize()
        samples.extend(cp.cuda.get_elapsed_time(b, e) * 1e3 for b, e in events)
    return timing.Timing(statistics.median(samples), min(samples), len(samples)), host_bound


def _timed_row(env, name, fn, *, entries: int = 1, note: str = "") -> Row:
    if entries == 1:
        t = env.timing.time_fn(fn, warmup=env.args.warmup, reps=env.args.reps)
        host_bound = False
    else:
        t, host_bound = device_time(env, fn, reps=env.args.reps, entries=entries)
    if host_bound:
        note = (note + "; " if note else "") + "HOST-BOUND: the spin ended before all repetitions were queued"
        env.findings.append(f"{name}: timing was host-bound")
    return Row(name, t.median_us, t.min_us, note=note)


# ---------------------------------------------------------------- bit checks
def compare(env, case: Case, q, sf_lin) -> tuple[str, str]:
    """("yes"/"no", detail) for a contender's q and linear scales against fp4q's."""
    cp = env.cp
    q = cp.asarray(q) if isinstance(q, cp.ndarray) else cp.from_dlpack(q)
    sf_lin = cp.asarray(sf_lin) if isinstance(sf_lin, cp.ndarray) else cp.from_dlpack(sf_lin)
    if q.shape != case.q_ref.shape or sf_lin.shape != case.sf_ref_lin.shape:
        return "no", f"shapes q {tuple(q.shape)}, sf {tuple(sf_lin.shape)}; expected " \
                     f"{tuple(case.q_ref.shape)}, {tuple(case.sf_ref_lin.shape)}"
    q_bad = q != case.q_ref
    sf_bad = sf_lin != case.sf_ref_lin
    nq, nsf = int(cp.count_nonzero(q_bad)), int(cp.count_nonzero(sf_bad))
    if nq == 0 and nsf == 0:
        return "yes", ""
    detail = f"{nq} of {q.size} q bytes and {nsf} of {sf_lin.size} scale bytes differ from fp4q"
    rows = cp.nonzero(q_bad.any(axis=1) | sf_bad.any(axis=1))[0][:4]
    rows_host = cp.asnumpy(rows)
    q_spec, sf_spec = env.reference.quantize_nvfp4(cp.asnumpy(case.x[rows]), case.tsf, sf_layout="linear")
    fp4q_ok = (cp.asnumpy(case.q_ref[rows]) == q_spec).all() and (cp.asnumpy(case.sf_ref_lin[rows]) == sf_spec).all()
    them_ok = (cp.asnumpy(q[rows]) == q_spec).all() and (cp.asnumpy(sf_lin[rows]) == sf_spec).all()
    detail += (f"; on rows {rows_host.tolist()} the spec (numpy reference) agrees with "
               f"fp4q: {'yes' if fp4q_ok else 'NO'}, with this contender: {'yes' if them_ok else 'no'}")
    if not fp4q_ok:
        env.problems.append(f"{case.m}x{case.k}: fp4q differs from the spec on rows {rows_host.tolist()}")
    return "no", detail


def spec_check(env, case: Case) -> tuple[bool, int]:
    """fp4q's output against the numpy reference on sampled rows (all of the last partial 128 block)."""
    import sweep_ops

    cp = env.cp
    rows = sweep_ops.sample_rows(case.m, np.random.default_rng(1))
    idx = cp.asarray(rows)
    q_spec, sf_spec = env.reference.quantize_nvfp4(cp.asnumpy(case.x[idx]), case.tsf, sf_layout="linear")
    ok = bool((cp.asnumpy(case.q_ref[idx]) == q_spec).all() and (cp.asnumpy(case.sf_ref_lin[idx]) == sf_spec).all())
    return ok, len(rows)


# ----------------------------------------------------------- per contender
def bench_copy(env, case: Case) -> Row:
    return Row("device copy (same bytes)", case.copy_us, case.copy_min_us, note="roofline: timing.copy_fn")


def bench_fp4q(env, case: Case, pdl: bool) -> Row:
    fp4q = env.fp4q
    fields = ("tile_m", "tile_k", "num_stages", "consumer_warpgroups", "min_ctas_per_sm", "persistent")
    try:  # which config the default picks: a private helper, so only for the notes
        cfg = fp4q.api._resolve_config(None, fp4q.arrays.as_input(case.x), case.q, case.sf, "swizzled", "value",
                                       env.device.arch)
        described = ",".join(f"{f}={getattr(cfg, f)}" for f in fields if hasattr(cfg, f))
    except Exception as exc:  # noqa: BLE001
        cfg, described = None, f"not reported: {type(exc).__name__}: {exc}"
    case.q.fill(0xAB)
    case.sf.fill(0xAB)
    fp4q.quantize_nvfp4(case.x, case.tsf, out=case.q, sf_out=case.sf, pdl=pdl)
    same = bool(env.cp.array_equal(case.q, case.q_ref) and env.cp.array_equal(case.sf, case.sf_ref))
    row = _timed_row(env, f"fp4q default, PDL {'on' if pdl else 'off'}",
                     lambda: fp4q.quantize_nvfp4(case.x, case.tsf, out=case.q, sf_out=case.sf, pdl=pdl),
                     note="swizzled scales; out= given")
    ok, n = env.spec_ok
    row.exact = "yes" if ok and same else "no"
    row.note += f"; vs spec on {n} sampled rows: {'yes' if ok else 'NO'}"
    if not same:
        row.note += "; output differs from the PDL-on call"
        env.problems.append(f"{case.m}x{case.k}: fp4q with pdl={pdl} gave other bytes than with pdl=True")
    row.extra["config"] = {f: str(getattr(cfg, f)) for f in fields if hasattr(cfg, f)}
    row.extra["config_type"] = type(cfg).__name__ if cfg is not None else None
    row.note += f"; config {type(cfg).__name__}({described})"
    return row


def bench_torch_eager(env, case: Case) -> Row:
    name = "torch eager (spec formula)"
    if env.torch is None:
        return Row(name, status=env.torch_status)
    fn = env.torch_formula
    q, sf = fn(case.xt, case.tsf_t)
    exact, detail = compare(env, case, q, sf)
    row = _timed_row(env, name, lambda: fn(case.xt, case.tsf_t), entries=EAGER_LAUNCHES,
                     note="linear scales; allocates its outputs")
    row.exact = exact
    if detail:
        row.note += "; " + detail
        env.findings.append(f"{case.m}x{case.k} {name}: {detail}")
    return row


def bench_torch_compile(env, case: Case) -> Row:
    name = "torch.compile (spec formula)"
    if env.torch is None:
        return Row(name, status=env.torch_status)
    torch = env.torch
    torch._dynamo.reset()  # a fresh compile per shape; no recompile limit, no dynamic shapes
    compiled = torch.compile(env.torch_formula, mode="default", fullgraph=True, dynamic=False)
    start = time.perf_counter()
    try:
        q, sf = compiled(case.xt, case.tsf_t)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported as the row's status
        return Row(name, status=env.fail(f"{case.m}x{case.k} torch.compile", exc))
    compile_s = time.perf_counter() - start
    exact, detail = compare(env, case, q, sf)
    row = _timed_row(env, name, lambda: compiled(case.xt, case.tsf_t), entries=COMPILED_LAUNCHES,
                     note=f"mode=default, fullgraph; first call (compile) {compile_s:.1f} s; linear scales")
    row.exact = exact
    row.extra["compile_s"] = round(compile_s, 2)
    if detail:
        row.note += "; " + detail
        env.findings.append(f"{case.m}x{case.k} {name}: {detail}")
    return row


def bench_triton(env, case: Case) -> Row:
    name = "triton (spec formula, best tile)"
    if env.torch is None:
        return Row(name, status=f"needs torch: {env.torch_status}")
    if triton is None:
        return Row(name, status=TRITON_STATUS)
    torch = env.torch
    q = torch.empty((case.m, case.k // 2), dtype=torch.uint8, device=case.xt.device)
    sf = torch.empty((case.m, case.k // 16), dtype=torch.uint8, device=case.xt.device)
    tiles = []
    for tile in TRITON_TILES:
        label = f"{tile[0]}x{tile[1] * 16}/{tile[2]}w"
        try:
            q.fill_(0xAB)
            sf.fill_(0xAB)
            triton_quantize(case.xt, case.tsf_t, q, sf, tile)
            exact, detail = compare(env, case, q, sf)
            t = env.timing.time_fn(lambda tile=tile: triton_quantize(case.xt, case.tsf_t, q, sf, tile),
                                   warmup=env.args.warmup, reps=env.args.reps)
        except Exception as exc:  # noqa: BLE001
            tiles.append(dict(tile=label, status=env.fail(f"{case.m}x{case.k} triton tile {label}", exc)))
            continue
        tiles.append(dict(tile=label, tile_tuple=tile, median_us=t.median_us, min_us=t.min_us, exact=exact,
                          detail=detail))
    timed = [t for t in tiles if "median_us" in t]
    if not timed:
        return Row(name, status="failed: every tile shape failed", extra=dict(tiles=tiles))
    best = min(timed, key=lambda t: t["median_us"])
    env.best_tile[(case.m, case.k)] = best["tile_tuple"]
    others = ", ".join(f"{t['tile']} {t['median_us']:.1f}" for t in timed if t is not best)
    all_exact = all(t["exact"] == "yes" for t in timed)
    note = (f"best of {len(TRITON_TILES)} tiles (rows x elements/warps): {best['tile']}; others (us): {others}; "
            "linear scales")
    if best["detail"]:
        note += "; " + best["detail"]
        env.findings.append(f"{case.m}x{case.k} {name}: {best['detail']}")
    elif not all_exact:
        note += "; some other tile shapes were NOT bit-exact"
    for t in tiles:
        t.pop("tile_tuple", None)
    return Row(name, best["median_us"], best["min_us"], exact=best["exact"], note=note, extra=dict(tiles=tiles))


def bench_torchao(env, case: Case) -> Row:
    name = "torchao NVFP4Tensor.to_nvfp4"
    if env.torch is None:
        return Row(name, status=f"needs torch: {env.torch_status}")
    try:
        import torchao
    except ModuleNotFoundError:
        return Row(name, status="not installed")
    except Exception as exc:  # noqa: BLE001
        return Row(name, status=f"import failed: {type(exc).__name__}: {exc}")
    version = getattr(torchao, "__version__", "?")
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    except Exception as exc:  # noqa: BLE001
        return Row(name, status=f"torchao {version} has no NVFP4Tensor: {type(exc).__name__}: {exc}")
    # torchao's per-tensor scale is amax / (6 * 448): the reciprocal of the spec's tensor_sf.
    per_tensor_scale = (1.0 / case.tsf_t).reshape(())

    def run():
        return NVFP4Tensor.to_nvfp4(case.xt, per_tensor_scale=per_tensor_scale)

    try:
        out = run()
    except Exception as exc:  # noqa: BLE001
        return Row(name, status=env.fail(f"{case.m}x{case.k} torchao {version}", exc))
    row = _timed_row(env, name, run, entries=EAGER_LAUNCHES, note=f"torchao {version}; its own formula and layout")
    qdata = getattr(out, "qdata", None)
    if qdata is not None and tuple(qdata.shape) == tuple(case.q_ref.shape):
        same = int(env.cp.count_nonzero(env.cp.from_dlpack(qdata.contiguous().view(env.torch.uint8)) != case.q_ref))
        row.exact = "yes" if same == 0 else "no"
        row.note += f"; q bytes differing from fp4q: {same} of {case.q_ref.size} (scales not compared)"
    else:
        row.note += "; bytes not compared (no qdata of fp4q's shape)"
    return row


def run_contender(env, case: Case, name: str, fn) -> Row:
    try:
        row = fn()
    except Exception as exc:  # noqa: BLE001 - one contender's failure must not lose the run
        row = Row(name, status=env.fail(f"{case.m}x{case.k} {name}", exc))
    _print_row(case, row)
    return row


# ------------------------------------------------------------------ PDL chain
CONSUMER_SOURCE = r"""
extern "C" __global__ void bench_consume_q(const unsigned int* __restrict__ q, unsigned long long n_words,
                                           unsigned long long* __restrict__ acc) {
    unsigned long long sum = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n_words;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned int w = q[i];
        sum += (w & 0xFFu) + ((w >> 8) & 0xFFu) + ((w >> 16) & 0xFFu) + (w >> 24);
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0 && sum != 0) atomicAdd(acc, sum);
}
"""


def bench_pdl_chain(env, case: Case) -> dict:
    """N x (quantize -> consumer summing q's bytes), timed whole, pdl on/off on the quantize launches.

    The quantize calls alternate between x and x with its sign bits flipped
    (other bytes in q), so a quantize that overwrote q while the previous
    consumer still read it would change the consumer's total: that total is
    checked against the sums of the two outputs.
    """
    cp, fp4q = env.cp, env.fp4q
    n = env.args.chain_n
    kernel = env.consumer()
    inputs = (case.x, case.x ^ cp.uint16(0x8000))
    q = cp.empty_like(case.q)
    sf = cp.empty_like(case.sf)
    words = q.size // 4
    acc = cp.zeros(1, dtype=cp.uint64)
    grid = max(1, min(-(-words // 256), env.device.sm_count * 4))
    sums = [int(fp4q.quantize_nvfp4(x, case.tsf)[0].sum(dtype=cp.uint64)) for x in inputs]
    expected = sum(sums[i % 2] for i in range(n))

    def chain(pdl):
        for i in range(n):
            fp4q.quantize_nvfp4(inputs[i % 2], case.tsf, out=q, sf_out=sf, pdl=pdl)
            kernel((grid,), (256,), (q, cp.uint64(words), acc))

    out = dict(n=n)
    for pdl in (False, True):
        acc.fill(0)
        chain(pdl)
        cp.cuda.get_current_stream().synchronize()
        got = int(acc.get()[0])
        if got != expected:
            env.problems.append(f"{case.m}x{case.k} PDL chain (pdl={pdl}): consumer total {got}, expected {expected}")
        t, host_bound = device_time(env, lambda pdl=pdl: chain(pdl), reps=max(5, env.args.reps // 2), entries=2 * n)
        key = "on" if pdl else "off"
        out[f"pdl_{key}_us"] = t.median_us
        out[f"pdl_{key}_min_us"] = t.min_us
        out[f"pdl_{key}_sums_ok"] = got == expected
        out[f"pdl_{key}_host_bound"] = host_bound
        if host_bound:
            env.findings.append(f"{case.m}x{case.k} PDL chain pdl={pdl}: timing was host-bound")
    out["saved_us_per_pdl_launch"] = (out["pdl_off_us"] - out["pdl_on_us"]) / n
    out["saved_pct"] = 100.0 * (out["pdl_off_us"] - out["pdl_on_us"]) / out["pdl_off_us"]
    print(f"{case.m:>6}x{case.k:<6} PDL chain of {n}: off {out['pdl_off_us']:.1f} us, on {out['pdl_on_us']:.1f} us, "
          f"saved {out['saved_us_per_pdl_launch']:.2f} us per PDL launch; consumer totals "
          f"{'ok' if out['pdl_off_sums_ok'] and out['pdl_on_sums_ok'] else 'MISMATCH'}", flush=True)
    return out


# ------------------------------------------------------------------ CUDA graph
def bench_graph(env, case: Case) -> dict:
    """K quantize calls with a device tensor_sf, captured and replayed; bytes checked."""
    cp, fp4q = env.cp, env.fp4q
    calls = env.args.graph_k
    # Separate buffers per call where affordable, so replays do not hit L2 on
    # small shapes; above 2 GiB the per-call footprint is far larger than L2.
    nbuf = calls if case.moved * calls <= (2 << 30) else 1
    xs = [case.x] + [case.x.copy() for _ in range(nbuf - 1)]
    qs = [cp.empty_like(case.q) for _ in range(nbuf)]
    sfs = [cp.empty_like(case.sf) for _ in range(nbuf)]
    tsf_dev = cp.asarray(np.float32(case.tsf)).reshape(())
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()  # the copies above ran on another stream than the capture's
    out = dict(k=calls, distinct_buffers=nbuf)

    def direct():
        for i in range(calls):
            fp4q.quantize_nvfp4(xs[i % nbuf], tsf_dev, out=qs[i % nbuf], sf_out=sfs[i % nbuf])

    with stream:
        direct()  # compiles/loads the device-scale kernel and builds the tensor maps before capture
        stream.synchronize()
        stream.begin_capture()
        try:
            direct()
        finally:
            graph = stream.end_capture()
        for a in qs + sfs:
            a.fill(0xAB)
        graph.launch(stream)
        stream.synchronize()
        ok = all(bool(cp.array_equal(qs[i], case.q_ref) and cp.array_equal(sfs[i], case.sf_ref))
                 for i in range(nbuf))
        if not ok:
            env.problems.append(f"{case.m}x{case.k} CUDA graph: replayed bytes differ from a direct call")
        t_graph, hb_graph = device_time(env, lambda: graph.launch(stream), reps=env.args.reps, entries=calls)
        t_direct, hb_direct = device_time(env, direct, reps=env.args.reps, entries=calls)
    out.update(bytes_equal=ok, graph_us_per_call=t_graph.median_us / calls,
               direct_us_per_call=t_direct.median_us / calls, graph_host_bound=hb_graph,
               direct_host_bound=hb_direct)
    print(f"{case.m:>6}x{case.k:<6} CUDA graph of {calls}: {out['graph_us_per_call']:.2f} us per call replayed, "
          f"{out['direct_us_per_call']:.2f} us per call launched directly; bytes "
          f"{'equal' if ok else 'DIFFER'}", flush=True)
    return out


# ---------------------------------------------------------------- host side
FORMAT_OPS = (("mxfp4", "quantize_mxfp4 (rceil)"), ("dequantize", "dequantize_nvfp4 -> bf16"),
              ("dequantize_mx", "dequantize_mxfp4 -> bf16"),
              ("nvfp4_dynamic", 'quantize_nvfp4(x, "dynamic"): amax + quantize, one call'),
              ("nvfp4_two_calls", "global_scale(x), then quantize_nvfp4: two calls"))


def bench_formats(env, case: Case) -> list[dict]:
    """fp4q's other kernels (default configs) on this shape, each next to a copy of its own bytes."""
    import sweep_ops

    out = []
    for name, label in FORMAT_OPS:
        op = sweep_ops.make(name)
        rng = np.random.default_rng(3)
        try:
            op.prepare(case.m, case.k, rng)
            op.clear()
            op.run(None, True)
            exact = "yes" if op.check(rng) else "no"
            if exact == "no":
                env.problems.append(f"{case.m}x{case.k}: {label} differs from the spec on sampled rows")
            read, written = op.bytes(case.m, case.k)
            copy = env.timing.time_fn(env.timing.copy_fn_bytes(read, written), warmup=env.args.warmup,
                                      reps=env.args.reps)
            t = env.timing.time_fn(lambda: op.run(None, True), warmup=env.args.warmup, reps=env.args.reps)
            out.append(dict(kernel=label, copy_us=copy.median_us, median_us=t.median_us, min_us=t.min_us,
                            moved=read + written, exact=exact))
        except Exception as exc:  # noqa: BLE001
            out.append(dict(kernel=label, status=env.fail(f"{case.m}x{case.k} {label}", exc)))
        op = None
    return out


def bench_host(env) -> list[dict]:
    """Python microseconds per call with warm caches, on a small (host-bound) shape."""
    cp, fp4q, timing = env.cp, env.fp4q, env.timing
    m, k = HOST_SHAPE
    x = _bf16_normal(cp, m, k, seed=7)
    tsf = _global_scale(cp, x)
    q = cp.empty((m, k // 2), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(m, k // 16), cp.uint8)
    tsf_dev = cp.asarray(np.float32(tsf)).reshape(())
    runs = [
        ("fp4q, out= given, host float tensor_sf",
         lambda: fp4q.quantize_nvfp4(x, tsf, out=q, sf_out=sf), 2000),
        ("fp4q, allocating outputs", lambda: fp4q.quantize_nvfp4(x, tsf), 2000),
        ("fp4q, out= given, device tensor_sf", lambda: fp4q.quantize_nvfp4(x, tsf_dev, out=q, sf_out=sf), 2000),
        ('fp4q, out= given, tensor_sf="dynamic" (one call)',
         lambda: fp4q.quantize_nvfp4(x, "dynamic", out=q, sf_out=sf), 2000),
        ("fp4q, out= given, global_scale + quantize (two calls)",
         lambda: fp4q.quantize_nvfp4(x, fp4q.global_scale(x), out=q, sf_out=sf), 2000),
    ]
    torch = env.torch
    if torch is not None:
        xt = torch.from_dlpack(x.view(cp.int16)).view(torch.bfloat16)
        tsf_t = torch.tensor(tsf, dtype=torch.float32, device=xt.device)
        runs.append(("torch eager (spec formula)", lambda: env.torch_formula(xt, tsf_t), 300))
        try:
            torch._dynamo.reset()
            compiled = torch.compile(env.torch_formula, mode="default", fullgraph=True, dynamic=False)
            compiled(xt, tsf_t)
            runs.append(("torch.compile (spec formula)", lambda: compiled(xt, tsf_t), 1000))
        except Exception as exc:  # noqa: BLE001
            env.fail("host overhead: torch.compile", exc)
        if triton is not None:
            tq = torch.empty((m, k // 2), dtype=torch.uint8, device=xt.device)
            tsf8 = torch.empty((m, k // 16), dtype=torch.uint8, device=xt.device)
            tile = env.best_tile.get((m, k), TRITON_TILES[0])
            runs.append(("triton (spec formula)", lambda: triton_quantize(xt, tsf_t, tq, tsf8, tile), 1000))
    rows = []
    for name, fn, calls in runs:
        try:
            us = timing.host_us_per_call(fn, calls=calls)
            rows.append(dict(what=name, shape=f"{m}x{k}", us_per_call=us))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(what=name, shape=f"{m}x{k}", status=env.fail(f"host overhead: {name}", exc)))
    for r in rows:
        print(f"host {r['what']:<42} {r.get('us_per_call', float('nan')):8.1f} us/call", flush=True)
    return rows


FIRST_CALL_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import cupy as cp
    m, k, tsf = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    x = cp.zeros((m, k), dtype=cp.uint16)
    cp.cuda.Device().synchronize()  # CUDA context and CuPy are up before the clock starts
    t0 = time.perf_counter()
    import fp4q
    t1 = time.perf_counter()
    q, sf = fp4q.quantize_nvfp4(x, tsf)
    t2 = time.perf_counter()
    cp.cuda.Device().synchronize()
    t3 = time.perf_counter()
    try:
        from fp4q.jit import loader as kernels
        hits = [bool(v.compiled.cache_hit) for v in kernels._loaded.values()]
    except Exception:
        hits = None  # fp4q's internals changed: unknown
    print("BENCH_FIRST_CALL " + json.dumps(dict(import_ms=(t1 - t0) * 1e3, first_call_ms=(t2 - t1) * 1e3,
          first_call_done_ms=(t3 - t1) * 1e3, cache_hits=hits, fp4q_file=fp4q.__file__)))
    """
)


def bench_first_call(env, m: int, k: int, tsf: float) -> dict:
    """A fresh process: ms for `import fp4q`, and from after the import to the first call's return.

    The parent has already run this shape's config, so the compiled kernel is
    in the disk cache (warm); the child reports whether it was a cache hit.
    """
    import fp4q

    env_vars = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(fp4q.__file__)))
    env_vars["PYTHONPATH"] = os.pathsep.join([root] + ([env_vars["PYTHONPATH"]] if env_vars.get("PYTHONPATH") else []))
    runs = []
    for _ in range(env.args.first_call_runs):
        proc = subprocess.run([sys.executable, "-c", FIRST_CALL_CHILD, str(m), str(k), repr(tsf)],
                              capture_output=True, text=True, timeout=600, env=env_vars)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_FIRST_CALL ")), None)
        if proc.returncode != 0 or line is None:
            raise RuntimeError(f"first-call child exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        runs.append(json.loads(line.split(" ", 1)[1]))
    result = dict(shape=f"{m}x{k}", runs=len(runs),
                  import_ms=statistics.median(r["import_ms"] for r in runs),
                  first_call_ms=statistics.median(r["first_call_ms"] for r in runs),
                  first_call_done_ms=statistics.median(r["first_call_done_ms"] for r in runs),
                  cache_hits=(None if any(r["cache_hits"] is None for r in runs)
                              else all(bool(r["cache_hits"]) and all(r["cache_hits"]) for r in runs)),
                  fp4q_file=runs[0]["fp4q_file"])
    if os.path.realpath(result["fp4q_file"]) != os.path.realpath(fp4q.__file__):
        env.problems.append(f"first call: the child imported {result['fp4q_file']}, not {fp4q.__file__}")
    if result["cache_hits"] is False:
        env.findings.append(f"first call {m}x{k}: the child did not load every kernel from the disk cache")
    print(f"first call {m}x{k}: import fp4q {result['import_ms']:.1f} ms, first call returned after "
          f"{result['first_call_ms']:.1f} ms (done {result['first_call_done_ms']:.1f} ms), disk cache hit: "
          f"{result['cache_hits']}", flush=True)
    return result


# ---------------------------------------------------------------- corner cases
def corner_input() -> np.ndarray:
    """512 x 256 bf16 bits: random bit patterns (NaN, Inf, subnormals), normals over every
    binade, exact e2m1 ties at many scales, zeros, -0 and NaN/Inf groups."""
    rng = np.random.default_rng(3)
    rows = []
    rows.append(rng.integers(0, 1 << 16, size=(128, 256), dtype=np.uint32).astype(np.uint16))
    scales = np.ldexp(np.float32(1), np.linspace(-140, 127, 128).astype(np.int32)).astype(np.float32)
    with np.errstate(over="ignore"):
        normal = (rng.standard_normal((128, 256)).astype(np.float32) * scales[:, None]).astype(np.float32)
    rows.append((normal.view(np.uint32) >> 16).astype(np.uint16))
    ties = np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -0.0],
                    dtype=np.float32)
    tie_scales = np.ldexp(np.float32(1), np.arange(-128, 128, 2)).astype(np.float32)
    with np.errstate(over="ignore"):
        tie_rows = (np.tile(ties, 16)[None, :] * tie_scales[:, None]).astype(np.float32)
    rows.append((tie_rows.view(np.uint32) >> 16).astype(np.uint16))
    special = np.zeros((128, 256), dtype=np.uint16)
    patterns = [0x0000, 0x8000, 0x7FC0, 0xFFC0, 0x7F80, 0xFF80, 0x0001, 0x8001]
    for r in range(128):
        group = r % 16
        special[r] = (rng.standard_normal(256).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        special[r, group * 16:(group + 1) * 16] = patterns[r % len(patterns)]
        special[r, (r * 7) % 256] = patterns[(r // 8) % len(patterns)]
    rows.append(special)
    return np.concatenate(rows)


def bench_corner(env) -> list[dict]:
    """Every contender against the numpy reference on corner-case data, for several tensor_sf."""
    cp, fp4q, reference, torch = env.cp, env.fp4q, env.reference, env.torch
    x_host = corner_input()
    x = cp.asarray(x_host)
    m, k = x_host.shape
    contenders = [("fp4q (default config)", lambda tsf: fp4q.quantize_nvfp4(x, tsf, sf_layout="linear"))]
    if torch is not None:
        xt = torch.from_dlpack(x.view(cp.int16)).view(torch.bfloat16)

        def t_scalar(tsf):
            return torch.tensor(tsf, dtype=torch.float32, device=xt.device)

        contenders.append(("torch eager (spec formula)", lambda tsf: env.torch_formula(xt, t_scalar(tsf))))
        try:
            torch._dynamo.reset()
            compiled = torch.compile(env.torch_formula, mode="default", fullgraph=True, dynamic=False)
            contenders.append(("torch.compile (spec formula)", lambda tsf: compiled(xt, t_scalar(tsf))))
        except Exception as exc:  # noqa: BLE001
            env.fail("corner cases: torch.compile", exc)
        if triton is not None:
            def run_triton(tsf):
                q = torch.empty((m, k // 2), dtype=torch.uint8, device=xt.device)
                sf = torch.empty((m, k // 16), dtype=torch.uint8, device=xt.device)
                triton_quantize(xt, t_scalar(tsf), q, sf, TRITON_TILES[0])
                return q, sf

            contenders.append(("triton (spec formula)", run_triton))
    results = []
    for name, fn in contenders:
        bad_q = bad_sf = 0
        status = "ok"
        for tsf in env.args.corner_tsf:
            q_spec, sf_spec = reference.quantize_nvfp4(x_host, tsf, sf_layout="linear")
            try:
                q, sf = fn(tsf)
                q = cp.asnumpy(q if isinstance(q, cp.ndarray) else cp.from_dlpack(q))
                sf = cp.asnumpy(sf if isinstance(sf, cp.ndarray) else cp.from_dlpack(sf))
            except Exception as exc:  # noqa: BLE001
                status = env.fail(f"corner cases: {name} (tensor_sf={tsf})", exc)
                break
            bad_q += int((q != q_spec).sum())
            bad_sf += int((sf != sf_spec).sum())
        results.append(dict(contender=name, status=status, q_bytes_differing=bad_q, sf_bytes_differing=bad_sf,
                            q_bytes=int(q_spec.size) * len(env.args.corner_tsf),
                            sf_bytes=int(sf_spec.size) * len(env.args.corner_tsf),
                            exact="yes" if status == "ok" and bad_q == 0 and bad_sf == 0 else "no"))
        r = results[-1]
        print(f"corner cases {name:<32} bit-exact vs spec: {r['exact']} "
              f"({bad_q} q / {bad_sf} scale bytes differ){'' if status == 'ok' else ' ' + status}", flush=True)
        if name.startswith("fp4q") and r["exact"] != "yes":
            env.problems.append(f"corner cases: fp4q differs from the spec ({bad_q} q, {bad_sf} scale bytes)")
    return results


# ------------------------------------------------------------------- helpers
def _bf16_normal(cp, m: int, k: int, seed: int):
    f = cp.random.RandomState(seed).standard_normal((m, k), dtype=cp.float32)
    return (f.view(cp.uint32) >> 16).astype(cp.uint16)


def _global_scale(cp, x) -> float:
    """The spec's global scale of bf16 bits x, computed on the device."""
    amax = float(cp.nanmax(cp.abs((x.astype(cp.uint32) << 16).view(cp.float32))))
    if amax == 0 or not math.isfinite(amax):
        return 1.0
    return float(min(np.float32(2688) / np.float32(amax), np.float32(2.0**100)))


def make_case(env, m: int, k: int) -> Case:
    cp, fp4q, timing = env.cp, env.fp4q, env.timing
    x = _bf16_normal(cp, m, k, seed=env.args.seed)
    tsf = _global_scale(cp, x)
    q_ref, sf_ref = fp4q.quantize_nvfp4(x, tsf)
    copy = timing.time_fn(timing.copy_fn(m, k), warmup=env.args.warmup, reps=env.args.reps)
    case = Case(m, k, x, tsf, q_ref, sf_ref, fp4q.unswizzle_sf(sf_ref, m, k // 16), cp.empty_like(q_ref),
                cp.empty_like(sf_ref), copy.median_us, copy.min_us, sum(timing.copy_bytes(m, k)))
    if env.torch is not None:
        case.xt = env.torch.from_dlpack(x.view(cp.int16)).view(env.torch.bfloat16)
        case.tsf_t = env.torch.tensor(tsf, dtype=env.torch.float32, device=case.xt.device)
        if tuple(case.xt.shape) != (m, k) or case.xt.data_ptr() != x.data.ptr:
            raise RuntimeError(f"the torch view of x is not zero-copy: shape {tuple(case.xt.shape)}, "
                               f"pointer {case.xt.data_ptr():#x} vs {x.data.ptr:#x}")
    return case


def _print_row(case: Case, row: Row) -> None:
    if row.median_us is None:
        print(f"{case.m:>6}x{case.k:<6} {row.contender:<34} {row.status}", flush=True)
        return
    print(f"{case.m:>6}x{case.k:<6} {row.contender:<34} {row.median_us:10.2f} us  "
          f"{row.median_us / case.copy_us:6.2f}x copy "
          f"{100 * case.copy_us / row.median_us:6.1f}% copy BW  bit-exact {row.exact}", flush=True)


def _versions(env) -> dict:
    v = dict(python=platform.python_version(), numpy=np.__version__, cupy=env.cp.__version__,
             fp4q=env.fp4q.__version__)
    v["torch"] = env.torch.__version__ if env.torch is not None else env.torch_status
    v["triton"] = triton.__version__ if triton is not None else TRITON_STATUS
    try:
        import torchao

        v["torchao"] = getattr(torchao, "__version__", "?")
    except ModuleNotFoundError:
        v["torchao"] = "not installed"
    except Exception as exc:  # noqa: BLE001
        v["torchao"] = f"import failed: {type(exc).__name__}"
    try:
        from cuda import bindings

        v["cuda-bindings"] = bindings.__version__
    except Exception:  # noqa: BLE001
        v["cuda-bindings"] = "?"
    return v


def _driver(env) -> str:
    from fp4q.cuda.driver import driver_version

    cuda = ".".join(map(str, driver_version()))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        release = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "?"
    except (OSError, subprocess.SubprocessError):
        release = "?"
    return f"{release} (CUDA {cuda})"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return (head or "unknown (not a git checkout)") + (" (modified)" if head and dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"


# ------------------------------------------------------------------- output
def _fmt(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}"


def markdown(meta: dict, shapes: list[dict], host: list[dict], first: list[dict], corner: list[dict],
             problems: list[str], findings: list[str], incomplete: str | None) -> str:
    out = ["# fp4q benchmarks", "",
           "Generated by `scripts/bench.py` on a GPU; do not edit by hand: rerun the script, which overwrites "
           "this file.", ""]
    if incomplete:
        out += [f"**INCOMPLETE RUN**: {incomplete}", ""]
    out += [f"- command: `{meta['command']}`", f"- date: {meta['date']}",
            f"- device: {meta['device']} ({meta['arch']}, {meta['sm_count']} SMs)", f"- driver: {meta['driver']}",
            "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
            f"- fp4q commit: {meta['commit']}",
            f"- repetitions: {meta['reps']} (warm-up {meta['warmup']}); median device time; L2 flushed before each",
            "",
            "Device time only: every repetition sits between its own CUDA events, behind a spin kernel, so host "
            "launch overhead never counts (host overhead has its own table). `x copy` is time / copy time; "
            "`% copy BW` is copy time / time, the share of a same-bytes device copy's bandwidth; GB/s counts "
            "the bytes read and written (2 per input element, 9/16 per output element). `bit-exact`: torch, "
            "torch.compile and triton against fp4q's bytes (full tensors, random normal data); fp4q against "
            "the spec (numpy reference, sampled rows). torch and triton write linear scales; fp4q writes the "
            "swizzled GEMM layout.", ""]
    out += ["## Summary", "", "| shape | copy us | " + " | ".join(SUMMARY_COLUMNS) + " |",
            "|---|---:|" + "---:|" * len(SUMMARY_COLUMNS)]
    for s in shapes:
        cells = []
        for col in SUMMARY_COLUMNS:
            r = next((r for r in s["rows"] if r["contender"].startswith(col)), None)
            if r is None or r["median_us"] is None:
                cells.append("—" if r is None else r["status"].split(":")[0])
            else:
                cells.append(f"{r['median_us']:.1f} ({r['median_us'] / s['copy_us']:.2f}x)")
        out.append(f"| {s['shape']} | {s['copy_us']:.1f} | " + " | ".join(cells) + " |")
    out += ["", "Cells: median us (time / copy time).", ""]
    for s in shapes:
        out += [f"## {s['shape']}", "",
                f"{s['moved'] / 1e6:.2f} MB moved; tensor_sf {s['tensor_sf']:.6g}.", "",
                "| contender | median us | min us | x copy | % copy BW | GB/s | bit-exact | notes |",
                "|---|---:|---:|---:|---:|---:|:---:|---|"]
        for r in s["rows"]:
            if r["median_us"] is None:
                out.append(f"| {r['contender']} | — | — | — | — | — | {r['exact']} | {r['status']} |")
                continue
            out.append(f"| {r['contender']} | {r['median_us']:.2f} | {r['min_us']:.2f} | "
                       f"{r['median_us'] / s['copy_us']:.2f} | {100 * s['copy_us'] / r['median_us']:.1f} | "
                       f"{s['moved'] / r['median_us'] / 1e3:.0f} | {r['exact']} | {_md_escape(r['note'])} |")
        out.append("")
    chains = [s for s in shapes if s.get("chain")]
    if chains:
        n = chains[0]["chain"]["n"]
        out += ["## PDL chain", "",
                f"{n} x (fp4q quantize -> a CuPy kernel summing q's bytes), timed as a whole; the quantize launches "
                "with `pdl=True` or `pdl=False` (the consumer never uses PDL). Saved = (off - on) / "
                f"{n} quantize launches. The consumer's totals check that no quantize overwrote q early.", "",
                "| shape | chain us, PDL off | chain us, PDL on | saved us per PDL launch | saved % | totals |",
                "|---|---:|---:|---:|---:|:---:|"]
        for s in chains:
            c = s["chain"]
            if "status" in c:
                out.append(f"| {s['shape']} | — | — | — | — | {c['status']} |")
                continue
            hb = " (host-bound!)" if c["pdl_off_host_bound"] or c["pdl_on_host_bound"] else ""
            ok = "ok" if c["pdl_off_sums_ok"] and c["pdl_on_sums_ok"] else "MISMATCH"
            out.append(f"| {s['shape']} | {c['pdl_off_us']:.1f} | {c['pdl_on_us']:.1f} | "
                       f"{c['saved_us_per_pdl_launch']:.2f} | {c['saved_pct']:.1f} | {ok}{hb} |")
        out.append("")
    formats = [s for s in shapes if s.get("formats")]
    if formats:
        out += ["## MXFP4, dequantization and the dynamic global scale", "",
                "fp4q's default config for each call, swizzled scales, PDL on; each row has its own device copy of "
                "the bytes that kernel reads and writes (MXFP4 writes 1/32 byte of scale per element, NVFP4 1/16; "
                "dequantization reads the codes and scales and writes bf16; the dynamic rows read x twice, once "
                "for the amax and once to quantize). `bit-exact`: sampled rows against the numpy reference (and "
                "for the dynamic rows, the scale against `reference.global_scale`).", "",
                "| shape | kernel | copy us | median us | min us | x copy | % copy BW | GB/s | bit-exact |",
                "|---|---|---:|---:|---:|---:|---:|---:|:---:|"]
        for s in formats:
            for r in s["formats"]:
                if "status" in r:
                    out.append(f"| {s['shape']} | {r['kernel']} | — | — | — | — | — | — | {r['status']} |")
                    continue
                out.append(f"| {s['shape']} | {r['kernel']} | {r['copy_us']:.2f} | {r['median_us']:.2f} | "
                           f"{r['min_us']:.2f} | {r['median_us'] / r['copy_us']:.2f} | "
                           f"{100 * r['copy_us'] / r['median_us']:.1f} | {r['moved'] / r['median_us'] / 1e3:.0f} | "
                           f"{r['exact']} |")
        out.append("")
    graphs = [s for s in shapes if s.get("graph")]
    if graphs:
        out += ["## CUDA graph", "",
                "K quantize calls with a device float32 tensor_sf, captured with cupy stream capture and replayed "
                "(`graph.launch`), against the same K calls launched directly; per call, L2 flushed before each "
                "group of K. Bytes: every replayed output equals a direct call's.", "",
                "| shape | K | buffers | us per call, graph | us per call, direct | bytes |",
                "|---|---:|---:|---:|---:|:---:|"]
        for s in graphs:
            g = s["graph"]
            if "status" in g:
                out.append(f"| {s['shape']} | — | — | — | — | {g['status']} |")
                continue
            out.append(f"| {s['shape']} | {g['k']} | {g['distinct_buffers']} | {g['graph_us_per_call']:.2f} | "
                       f"{g['direct_us_per_call']:.2f} | {'equal' if g['bytes_equal'] else 'DIFFER'} |")
        out.append("")
    if host:
        out += ["## Host overhead", "", "Python time per call with warm caches (timing.host_us_per_call), on "
                f"{host[0]['shape']} where a call is host-bound.", "", "| call | us per call |", "|---|---:|"]
        out += [f"| {h['what']} | {_fmt(h.get('us_per_call'), 1) if 'status' not in h else h['status']} |"
                for h in host]
        out.append("")
    if first:
        out += ["## First call in a new process", "",
                "A fresh Python process with CuPy imported and the CUDA context up; the kernel is in the disk cache "
                "(the benchmark ran it). Median of the runs.", "",
                "| shape | runs | import fp4q ms | import -> first call returns ms | import -> work done ms "
                "| disk cache hit |",
                "|---|---:|---:|---:|---:|:---:|"]
        for f in first:
            if "status" in f:
                out.append(f"| {f['shape']} | — | — | — | — | {f['status']} |")
                continue
            out.append(f"| {f['shape']} | {f['runs']} | {f['import_ms']:.1f} | {f['first_call_ms']:.1f} | "
                       f"{f['first_call_done_ms']:.1f} | {HIT_WORDS.get(f['cache_hits'], 'unknown')} |")
        out.append("")
    if corner:
        out += ["## Corner cases", "",
                "512x256 bf16 of random bit patterns (NaN, Inf, subnormals), normals over every binade, exact e2m1 "
                "ties at many scales, zeros, -0 and NaN/Inf groups; tensor_sf in " + str(meta["corner_tsf"]) +
                "; against the spec (numpy reference), linear scales.", "",
                "| contender | bit-exact | q bytes differing | scale bytes differing |", "|---|:---:|---:|---:|"]
        for c in corner:
            status = "" if c["status"] == "ok" else f" ({c['status']})"
            out.append(f"| {c['contender']} | {c['exact']}{status} | {c['q_bytes_differing']} of {c['q_bytes']} | "
                       f"{c['sf_bytes_differing']} of {c['sf_bytes']} |")
        out.append("")
    if findings or problems:
        out += ["## Notes from this run", ""]
        out += [f"- {f}" for f in findings]
        out += [f"- PROBLEM: {p}" for p in problems]
        out.append("")
    return "\n".join(out)


HIT_WORDS = {True: "yes", False: "no"}
SUMMARY_COLUMNS = ("torch eager", "torch.compile", "triton", "torchao", "fp4q default, PDL on",
                   "fp4q default, PDL off")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# ---------------------------------------------------------------------- main
def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        try:
            m, k = (int(v) for v in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"shapes are MxK, comma-separated (e.g. 16x4096,1024x7168); got {item!r}") from None
        if m <= 0 or k <= 0 or k % 16:
            raise argparse.ArgumentTypeError(f"shape {item}: M and K must be positive and K a multiple of 16")
        shapes.append((m, k))
    return shapes


SECTIONS = ("eager", "compile", "triton", "torchao", "chain", "graph", "formats", "host", "first-call", "corner")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=parse_shapes, default=None,
                        help=f"comma-separated MxK (default {DEFAULT_SHAPES}; with --quick {QUICK_SHAPES})")
    parser.add_argument("--quick", action="store_true", help="a short run: 3 shapes, 20 repetitions, 1 first-call run")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions (default 50, --quick 20)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--chain-n", type=int, default=20, help="quantize launches in the PDL chain")
    parser.add_argument("--graph-k", type=int, default=10, help="quantize calls captured in the CUDA graph")
    parser.add_argument("--first-call-runs", type=int, default=None,
                        help="fresh processes per shape (default 3, --quick 1)")
    parser.add_argument("--skip", default="", help=f"comma-separated sections to skip: {','.join(SECTIONS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(REPO, ".out", "bench.json"),
                        help="JSON results (default .out/bench.json in the repo, an ignored path; 'none' to skip)")
    parser.add_argument("--md", default=os.path.join(REPO, "docs", "benchmarks.md"),
                        help="markdown report (default docs/benchmarks.md; 'none' to skip)")
    args = parser.parse_args(argv)
    args.shapes = args.shapes or parse_shapes(QUICK_SHAPES if args.quick else DEFAULT_SHAPES)
    args.reps = args.reps or (20 if args.quick else 50)
    args.first_call_runs = args.first_call_runs or (1 if args.quick else 3)
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skip - set(SECTIONS)
    if unknown:
        parser.error(f"--skip: unknown sections {sorted(unknown)}; known: {','.join(SECTIONS)}")
    if args.chain_n < 1 or args.graph_k < 1 or args.reps < 1 or args.warmup < 0:
        parser.error("--chain-n, --graph-k and --reps must be >= 1, --warmup >= 0")
    args.corner_tsf = [1.0, float(np.float32(0.3)), 1024.0, 2.0**-15]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    command = "python3 " + shlex.join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    try:
        from fp4q.cuda.driver import gpu_status
    except Exception as exc:  # noqa: BLE001
        print(f"cannot import fp4q ({type(exc).__name__}: {exc}); run from the repo or pip install -e .",
              file=sys.stderr)
        return 2
    available, reason = gpu_status()
    if not available:
        print(f"No GPU found ({reason}): nothing to benchmark. Run this on a machine with an NVIDIA GPU.",
              file=sys.stderr)
        return 2
    try:
        import cupy  # noqa: F401 - only whether it imports
    except Exception as exc:  # noqa: BLE001
        print(f"CuPy is needed (pip install cupy-cuda13x): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    env = Env(args)
    meta = dict(command=command, date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                device=env.device.name, arch=env.device.arch, sm_count=env.device.sm_count, driver=_driver(env),
                versions=_versions(env), commit=_git_commit(), reps=args.reps, warmup=args.warmup,
                shapes=[f"{m}x{k}" for m, k in args.shapes], corner_tsf=args.corner_tsf, quick=args.quick)
    print(f"{meta['device']}, driver {meta['driver']}; " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
          flush=True)
    shapes_out: list[dict] = []
    host: list[dict] = []
    first: list[dict] = []
    corner: list[dict] = []
    incomplete = None
    try:
        if "corner" not in args.skip:
            corner = bench_corner(env)
        for m, k in args.shapes:
            try:
                shapes_out.append(bench_shape(env, m, k))
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the other shapes still run
                env.fail(f"{m}x{k} (whole shape)", exc)
        if "host" not in args.skip:
            host = bench_host(env)
        if "first-call" not in args.skip:
            for s in shapes_out:
                m, k = (int(v) for v in s["shape"].split("x"))
                try:
                    first.append(bench_first_call(env, m, k, s["tensor_sf"]))
                except Exception as exc:  # noqa: BLE001
                    first.append(dict(shape=s["shape"], status=env.fail(f"first call {s['shape']}", exc)))
    except BaseException as exc:  # noqa: BLE001 - write what was measured, then re-raise
        incomplete = f"stopped by {type(exc).__name__}: {exc}"
        raise
    finally:
        write_outputs(args, meta, shapes_out, host, first, corner, env, incomplete)
    if env.findings:
        print("\nFindings:\n" + "\n".join(f"  - {f}" for f in env.findings))
    if env.problems:
        print("\nPROBLEMS (exit status 1):\n" + "\n".join(f"  - {p}" for p in env.problems), file=sys.stderr)
        return 1
    return 0


def bench_shape(env, m: int, k: int) -> dict:
    cp, args = env.cp, env.args
    case = make_case(env, m, k)
    env.spec_ok = spec_check(env, case)
    if not env.spec_ok[0]:
        env.problems.append(f"{m}x{k}: fp4q differs from the spec on sampled rows")
    rows = [run_contender(env, case, "device copy", lambda: bench_copy(env, case))]
    plan = [("fp4q default, PDL on", lambda: bench_fp4q(env, case, True), None),
            ("fp4q default, PDL off", lambda: bench_fp4q(env, case, False), None),
            ("torch eager", lambda: bench_torch_eager(env, case), "eager"),
            ("torch.compile", lambda: bench_torch_compile(env, case), "compile"),
            ("triton", lambda: bench_triton(env, case), "triton"),
            ("torchao", lambda: bench_torchao(env, case), "torchao")]
    for name, fn, section in plan:
        if section in args.skip:
            rows.append(Row(name, status="skipped (--skip)"))
            continue
        rows.append(run_contender(env, case, name, fn))
    # Table order: roofline, the alternatives, then fp4q.
    rows = [rows[0]] + rows[3:] + rows[1:3]
    result = dict(shape=f"{m}x{k}", m=m, k=k, tensor_sf=case.tsf, moved=case.moved, copy_us=case.copy_us,
                  rows=[asdict(r) for r in rows])
    for key, section, fn in (("chain", "chain", bench_pdl_chain), ("graph", "graph", bench_graph),
                             ("formats", "formats", bench_formats)):
        if section in args.skip:
            continue
        try:
            result[key] = fn(env, case)
        except Exception as exc:  # noqa: BLE001
            result[key] = dict(status=env.fail(f"{m}x{k} {key}", exc), n=args.chain_n)
    case = None  # free this shape's buffers before the next one
    cp.get_default_memory_pool().free_all_blocks()
    if env.torch is not None:
        env.torch.cuda.empty_cache()
    return result


def write_outputs(args, meta, shapes_out, host, first, corner, env, incomplete) -> None:
    data = dict(meta=meta, shapes=shapes_out, host=host, first_call=first, corner=corner,
                findings=env.findings, problems=env.problems, incomplete=incomplete)
    text = markdown(meta, shapes_out, host, first, corner, env.problems, env.findings, incomplete)
    print("\n" + text)
    if args.out and args.out != "none":
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1, default=str)
        print(f"wrote {args.out}")
    if args.md and args.md != "none":
        os.makedirs(os.path.dirname(os.path.abspath(args.md)), exist_ok=True)
        with open(args.md, "w") as f:
            f.write(text + "\n")
        print(f"wrote {args.md}")


if __name__ == "__main__":
    sys.exit(main())
