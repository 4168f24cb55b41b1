"""A small workload for compute-sanitizer: every shipped quantize config
(NVFP4 and MXFP4; TMA, vector and plain kernels) on ragged shapes, both
scale layouts, both tensor_sf modes (NVFP4), then every shipped dequantize
config on both formats, then a shape with more TMA tiles than CTAs (the
dynamic tile order), the global scale, the fused prologues, the row kernel,
tensor scales per row, the 8x4 layout and padded outputs, the experts and
masked batches (with offsets and counts out of range, which the kernel must
resolve without reading or writing outside the arrays); each result checked
against the reference. With
``--emulate-sm80`` the device is mapped to the pre-Hopper test target
(sm_80's kernels and choices, compiled for sm_90a), so the code an A100
would run is the code under the sanitizers: the SIMT quantizers and
dequantizer, and the default calls.

Outputs go into buffers pre-filled with 0xFF: a byte the kernel fails to
write shows up as a mismatch, and initcheck (which does not see TMA stores
as initializing memory) then judges only the kernel's reads.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time

import cupy as cp
import numpy as np

import fp4q
from fp4q.cuda import driver
from fp4q.numerics import reference
from fp4q.kernels.archs import EMULATED_SM_80
from fp4q.kernels.dequantize import DequantizeConfig
from fp4q.kernels.rows import ROW_UNITS, RowConfig
from fp4q.kernels.variants import DEQUANTIZE, SHIPPED, SHIPPED_MX, SIMT

SHAPES = [(129, 2176), (5, 64), (300, 512)]
# More TMA tiles than CTAs, so the CTAs take their tiles from the stream's counter.
DYNAMIC_SHAPE = (2048, 4096)
SIMT_SHAPES = SHAPES + [(33, 80), (7, 16), (33, 96)]
# The workload's passes, in order: every shipped quantize config, then the others.
PASSES = ("quantize", "dequantize", "dynamic_order", "global_scale", "prologues", "rows", "per_row",
          "layouts_and_padding", "experts", "training", "fake_quantize")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", default="all", help="comma-separated shipped names, or 'all'")
    parser.add_argument("--trace", action="store_true",
                        help="print each quantize call before it runs (where a hang under a tool stopped)")
    parser.add_argument("--emulate-sm80", action="store_true",
                        help=f"run the pre-Hopper kernels, built as {EMULATED_SM_80} (needs an sm_90a device)")
    parser.add_argument("--device", type=int, default=0,
                        help="the GPU every input and output lives on (1: the second GPU's per-device state)")
    parser.add_argument("--passes", default="all",
                        help=f"comma-separated passes to run, of {', '.join(PASSES)}, or 'all'")
    args = parser.parse_args()
    passes = PASSES if args.passes == "all" else tuple(args.passes.split(","))
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        parser.error(f"--passes must name passes of {', '.join(PASSES)}, got {', '.join(unknown)}")
    count = cp.cuda.runtime.getDeviceCount()
    if not 0 <= args.device < count:
        print(f"--device must name one of the {count} GPUs (0 to {count - 1}), got {args.device}", flush=True)
        return 2
    cp.cuda.Device(args.device).use()
    configs = {**SIMT} if args.emulate_sm80 else {**SHIPPED, **SHIPPED_MX, **SIMT}
    if args.configs != "all":
        configs = {name: configs[name] for name in args.configs.split(",")}
    if "quantize" not in passes:
        configs = {}
    dequantize_configs = DEQUANTIZE
    if args.emulate_sm80:
        real = driver.target_for(driver.device(cp.cuda.Device().id).compute_capability)
        if real != "sm_90a":
            print(f"--emulate-sm80 needs an sm_90a device, this one's target is {real}", flush=True)
            return 2
        driver.target_for = lambda cc, device=None: EMULATED_SM_80
        assert driver.device(cp.cuda.Device().id).arch == EMULATED_SM_80
        dequantize_configs = {n: c for n, c in DEQUANTIZE.items() if not isinstance(c, DequantizeConfig)}
    rng = np.random.default_rng(0)
    failures = 0
    start = time.perf_counter()
    for name, cfg in configs.items():
        shapes = SIMT_SHAPES if name in SIMT else SHAPES
        for m, k in shapes:
            bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
            x = cp.asarray(bits)
            if k % cfg.sf_vec_size or (name in SIMT and cfg.vector and k % cfg.vector_elements):
                continue  # a K the config refuses (the vector kernel's units of two groups need even groups)
            mx = cfg.fmt == "mxfp4"
            for layout in ("swizzled", "linear"):
                for device_sf in (False,) if mx else (False, True):
                    if mx:
                        q_ref, sf_ref = reference.quantize_mxfp4(bits, mode=cfg.mx_mode, sf_layout=layout)
                    else:
                        q_ref, sf_ref = reference.quantize_nvfp4(bits, 0.75, sf_layout=layout)
                    out = cp.full(q_ref.shape, 0xFF, dtype=cp.uint8)
                    sf_out = cp.full(sf_ref.shape, 0xFF, dtype=cp.uint8)
                    if args.trace:
                        print(f"{time.perf_counter() - start:7.1f}s  > {name} {m}x{k} {layout} device_sf={device_sf}",
                              flush=True)
                    if mx:
                        q, sf = fp4q.quantize_mxfp4(x, mode=cfg.mx_mode, sf_layout=layout, config=cfg,
                                                    out=out, sf_out=sf_out)
                    else:
                        tsf = cp.asarray(np.full(1, 0.75, np.float32)) if device_sf else 0.75
                        q, sf = fp4q.quantize_nvfp4(x, tsf, sf_layout=layout, config=cfg, out=out, sf_out=sf_out)
                    ok = np.array_equal(cp.asnumpy(q), q_ref) and np.array_equal(cp.asnumpy(sf), sf_ref)
                    if not ok:
                        failures += 1
                        print(f"MISMATCH {name} {m}x{k} {layout} device_sf={device_sf}", flush=True)
        print(f"{time.perf_counter() - start:7.1f}s  {name}", flush=True)
    runs = {"dequantize": lambda: dequantize_pass(rng, start, dequantize_configs),
            "dynamic_order": lambda: dynamic_order_pass(rng, start, dequantize_configs),
            "global_scale": lambda: global_scale_pass(rng, start),
            "prologues": lambda: prologue_pass(rng, start, args.emulate_sm80),
            "rows": lambda: rows_pass(rng, start),
            "per_row": lambda: per_row_pass(rng, start),
            "layouts_and_padding": lambda: layouts_and_padding_pass(rng, start, dequantize_configs),
            "experts": lambda: experts_pass(rng, start),
            "training": lambda: training_pass(rng, start),
            "fake_quantize": lambda: fake_quantize_pass(rng, start)}
    for name in PASSES[1:]:
        if name in passes:
            failures += runs[name]()
    cp.cuda.Device().synchronize()
    target = driver.device(cp.cuda.Device().id).arch
    print(f"sanitize workload ({target}): {len(configs)} quantize and {len(dequantize_configs)} dequantize configs, "
          f"{failures} mismatches", flush=True)
    return 1 if failures else 0


def dequantize_pass(rng, start: float, configs: dict) -> int:
    """Every given dequantize config, both formats, bf16 output into a 0xFF-filled buffer."""
    failures = 0
    for name, cfg in configs.items():
        for m, k in SHAPES:
            bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
            for fmt in ("nvfp4", "mxfp4"):
                out = cp.full((m, k), 0xFFFF, dtype=cp.uint16)
                if fmt == "nvfp4":
                    q, sf = fp4q.quantize_nvfp4(cp.asarray(bits), 0.75)
                    y_ref = reference.dequantize_nvfp4(cp.asnumpy(q), cp.asnumpy(sf), 0.75, dtype="bfloat16")
                    fp4q.dequantize_nvfp4(q, sf, 0.75, out=out, config=cfg)
                else:
                    q, sf = fp4q.quantize_mxfp4(cp.asarray(bits))
                    y_ref = reference.dequantize_mxfp4(cp.asnumpy(q), cp.asnumpy(sf), dtype="bfloat16")
                    fp4q.dequantize_mxfp4(q, sf, out=out, config=cfg)
                if not np.array_equal(cp.asnumpy(out), y_ref.view(np.uint16)):
                    failures += 1
                    print(f"MISMATCH {name} {fmt} {m}x{k}", flush=True)
        print(f"{time.perf_counter() - start:7.1f}s  {name}", flush=True)
    return failures


def dynamic_order_pass(rng, start: float, configs: dict) -> int:
    """The default TMA quantize config (the default call takes the vector kernel at this size) and the
    TMA dequantize configs on DYNAMIC_SHAPE, into 0xFF-filled outputs; without TMA (--emulate-sm80)
    the default call."""
    failures = 0
    m, k = DYNAMIC_SHAPE
    arch = driver.device(cp.cuda.Device().id).arch
    quantize_config = None if arch == EMULATED_SM_80 else fp4q.default_config(arch)
    bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    for layout in ("swizzled", "linear"):
        q_ref, sf_ref = reference.quantize_nvfp4(bits, 0.75, sf_layout=layout)
        q = cp.full(q_ref.shape, 0xFF, dtype=cp.uint8)
        sf = cp.full(sf_ref.shape, 0xFF, dtype=cp.uint8)
        fp4q.quantize_nvfp4(cp.asarray(bits), 0.75, sf_layout=layout, out=q, sf_out=sf, config=quantize_config)
        if not (np.array_equal(cp.asnumpy(q), q_ref) and np.array_equal(cp.asnumpy(sf), sf_ref)):
            failures += 1
            print(f"MISMATCH {quantize_config or 'default call'} {m}x{k} {layout}", flush=True)
    y_ref = reference.dequantize_nvfp4(q_ref, sf_ref, 0.75, sf_layout="linear", dtype="bfloat16").view(np.uint16)
    for name, cfg in configs.items():
        if isinstance(cfg, DequantizeConfig):
            out = cp.full((m, k), 0xFFFF, dtype=cp.uint16)
            fp4q.dequantize_nvfp4(q, sf, 0.75, sf_layout="linear", out=out, config=cfg)
            if not np.array_equal(cp.asnumpy(out), y_ref):
                failures += 1
                print(f"MISMATCH {name} {m}x{k}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  dynamic tile order, {m}x{k}", flush=True)
    return failures


def global_scale_pass(rng, start: float) -> int:
    """The global scale on ragged shapes and on DYNAMIC_SHAPE, then a quantize with ``tensor_sf="dynamic"``
    (one launch at these sizes: a single CTA without the grid barrier at 5x64; at DYNAMIC_SHAPE with the
    largest CTAs)."""
    failures = 0
    for m, k in SHAPES + [DYNAMIC_SHAPE]:
        bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        x = cp.asarray(bits)
        want = np.float32(reference.global_scale(bits))
        got = fp4q.global_scale(x)
        q, sf, scale = fp4q.quantize_nvfp4(x, "dynamic")
        q_ref, sf_ref = reference.quantize_nvfp4(bits, float(want))
        if not (cp.asnumpy(got).view(np.uint32) == want.view(np.uint32)
                and cp.asnumpy(scale).view(np.uint32) == want.view(np.uint32)
                and np.array_equal(cp.asnumpy(q), q_ref) and np.array_equal(cp.asnumpy(sf), sf_ref)):
            failures += 1
            print(f"MISMATCH global scale {m}x{k}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  global scale and dynamic quantize", flush=True)
    return failures


def prologue_pass(rng, start: float, emulate_sm80: bool) -> int:
    """SiLU·mul into NVFP4 on ragged shapes, into 0xFF-filled outputs: the default call, the plain and
    vector kernels, the TMA kernel (not under --emulate-sm80) and the dynamic scale (one launch, and the
    two passes an explicit config takes)."""
    failures = 0
    configs = [None, SIMT["simt_256"], SIMT["vec_128"]]
    if not emulate_sm80:
        configs.append(fp4q.QuantizeConfig(tile_k=64, output_box_k=32, output_swizzle=32, num_stages=2,
                                           consumer_warpgroups=1))
    for m, n in [(129, 1088), (5, 64), (300, 512), DYNAMIC_SHAPE]:
        bits = (rng.standard_normal((m, 2 * n), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        x = cp.asarray(bits)
        for config in configs:
            for tensor_sf in (0.75, "dynamic"):
                want = reference.silu_and_mul_quantize_nvfp4(bits, tensor_sf)
                out = cp.full(want[0].shape, 0xFF, dtype=cp.uint8)
                sf_out = cp.full(want[1].shape, 0xFF, dtype=cp.uint8)
                got = fp4q.silu_and_mul_quantize_nvfp4(x, tensor_sf, out=out, sf_out=sf_out, config=config)
                if not all(np.array_equal(cp.asnumpy(g), w) for g, w in zip(got, want)):
                    failures += 1
                    print(f"MISMATCH silu_and_mul {config} {m}x{2 * n} {tensor_sf}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  SiLU·mul", flush=True)
    return failures


def rows_pass(rng, start: float) -> int:
    """RMSNorm and add+RMSNorm (the row kernel) into 0xFF-filled outputs: every unit count of both
    formats, on ragged row counts, each with and without the residual."""
    failures = 0
    for fmt in ROW_UNITS:
        for units in ROW_UNITS[fmt]:
            config = RowConfig(fmt=fmt, row_units=units)
            for m, k in [(5, 64), (129, config.max_k - 4 * config.sf_vec_size), (3, config.max_k)]:
                bits = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
                w = (rng.standard_normal(k, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
                res = (rng.standard_normal((m, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
                for residual in (None, res):
                    want_res = None if residual is None else residual.copy()
                    if fmt == "nvfp4":
                        want = reference.rms_norm_quantize_nvfp4(bits, w, 0.75, residual=want_res)
                    else:
                        want = reference.rms_norm_quantize_mxfp4(bits, w, residual=want_res)
                    out = cp.full(want[0].shape, 0xFF, dtype=cp.uint8)
                    sf_out = cp.full(want[1].shape, 0xFF, dtype=cp.uint8)
                    dev_res = None if residual is None else cp.asarray(residual)
                    args = (cp.asarray(bits), cp.asarray(w))
                    if fmt == "nvfp4":
                        got = fp4q.rms_norm_quantize_nvfp4(*args, 0.75, residual=dev_res, out=out, sf_out=sf_out,
                                                           config=config)
                    else:
                        got = fp4q.rms_norm_quantize_mxfp4(*args, residual=dev_res, out=out, sf_out=sf_out,
                                                           config=config)
                    ok = all(np.array_equal(cp.asnumpy(g), w_) for g, w_ in zip(got, want))
                    if dev_res is not None:
                        ok = ok and np.array_equal(cp.asnumpy(dev_res), want_res)
                    if not ok:
                        failures += 1
                        print(f"MISMATCH rms_norm {config} {m}x{k} residual={residual is not None}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  RMSNorm and add+RMSNorm", flush=True)
    return failures


def per_row_pass(rng, start: float) -> int:
    """Tensor scales per row (the row kernel after each prologue) into 0xFF-filled outputs: a
    float32 per row and "dynamic_per_row", at each unit count's longest row and a ragged one."""
    def bf16(*shape):
        return (rng.standard_normal(shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)

    failures = 0
    for units in ROW_UNITS["nvfp4"]:
        longest = RowConfig(row_units=units).max_k
        for m, k in [(5, longest), (129, longest - 64)]:
            x, x2, w = bf16(m, k), bf16(m, 2 * k), bf16(k)
            scales = (2.0 ** rng.uniform(-10, 10, m)).astype(np.float32)
            for op in ("quantize", "silu_and_mul", "rms_norm", "add_rms_norm"):
                for tensor_sf in (scales, "dynamic_per_row"):
                    res = bf16(m, k) if op == "add_rms_norm" else None
                    dev_sf = tensor_sf if isinstance(tensor_sf, str) else cp.asarray(tensor_sf)
                    if op == "quantize":
                        want = reference.quantize_nvfp4(x, tensor_sf)
                    elif op == "silu_and_mul":
                        want = reference.silu_and_mul_quantize_nvfp4(x2, tensor_sf)
                    else:
                        want = reference.rms_norm_quantize_nvfp4(x, w, tensor_sf, residual=None if res is None
                                                                 else res.copy())
                    out = cp.full(want[0].shape, 0xFF, dtype=cp.uint8)
                    sf_out = cp.full(want[1].shape, 0xFF, dtype=cp.uint8)
                    if op == "quantize":
                        got = fp4q.quantize_nvfp4(cp.asarray(x), dev_sf, out=out, sf_out=sf_out)
                    elif op == "silu_and_mul":
                        got = fp4q.silu_and_mul_quantize_nvfp4(cp.asarray(x2), dev_sf, out=out, sf_out=sf_out)
                    else:
                        got = fp4q.rms_norm_quantize_nvfp4(cp.asarray(x), cp.asarray(w), dev_sf, out=out,
                                                           sf_out=sf_out,
                                                           residual=None if res is None else cp.asarray(res))
                    if not all(np.array_equal(cp.asnumpy(g), w_) for g, w_ in zip(got, want)):
                        failures += 1
                        mode = tensor_sf if isinstance(tensor_sf, str) else "array"
                        print(f"MISMATCH per-row {op} u{units} {m}x{k} {mode}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  tensor scales per row", flush=True)
    return failures


def layouts_and_padding_pass(rng, start: float, dequantize_configs: dict) -> int:
    """The 8x4 layout and outputs padded past K (padded_k), into 0xFF-filled outputs: every SIMT
    and vector config and the default call, the one-launch dynamic quantizer, the row kernel
    (a scale per row, RMSNorm); then every dequantize config reading 8x4 scales."""
    def bf16(*shape):
        return (rng.standard_normal(shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)

    failures = 0

    def check(what, got, want):
        nonlocal failures
        if not all(np.array_equal(cp.asnumpy(g), w) for g, w in zip(got, want)):
            failures += 1
            print(f"MISMATCH {what}", flush=True)

    def filled(want):
        return dict(out=cp.full(want[0].shape, 0xFF, dtype=cp.uint8), sf_out=cp.full(want[1].shape, 0xFF,
                                                                                      dtype=cp.uint8))

    configs = {"default call": None, **{n: c for n, c in SIMT.items() if c.fmt == "nvfp4"}}
    for m, k in SIMT_SHAPES:
        x = bf16(m, k)
        padded = -(-k // 64) * 64 + 64
        for layout, padded_k in (("8x4", None), ("swizzled", padded), ("8x4", padded)):
            want = reference.quantize_nvfp4(x, 0.75, sf_layout=layout, padded_k=padded_k)
            for name, cfg in configs.items():
                if cfg is not None and cfg.vector and cfg.elements_per_unit > 16 and k % cfg.elements_per_unit:
                    continue
                got = fp4q.quantize_nvfp4(cp.asarray(x), 0.75, sf_layout=layout, padded_k=padded_k, config=cfg,
                                          **filled(want))
                check(f"{name} {m}x{k} {layout} padded_k={padded_k}", got, want)
            want = reference.quantize_nvfp4(x, reference.global_scale(x), sf_layout=layout, padded_k=padded_k)
            got = fp4q.quantize_nvfp4(cp.asarray(x), "dynamic", sf_layout=layout, padded_k=padded_k, **filled(want))
            check(f"dynamic {m}x{k} {layout} padded_k={padded_k}", got[:2], want)
            want = reference.quantize_nvfp4(x, "dynamic_per_row", sf_layout=layout, padded_k=padded_k)
            got = fp4q.quantize_nvfp4(cp.asarray(x), "dynamic_per_row", sf_layout=layout, padded_k=padded_k,
                                      **filled(want))
            check(f"per-row {m}x{k} {layout} padded_k={padded_k}", got, want)
            w = bf16(k)
            want = reference.rms_norm_quantize_nvfp4(x, w, 0.75, sf_layout=layout, padded_k=padded_k)
            got = fp4q.rms_norm_quantize_nvfp4(cp.asarray(x), cp.asarray(w), 0.75, sf_layout=layout,
                                               padded_k=padded_k, **filled(want))
            check(f"rms_norm {m}x{k} {layout} padded_k={padded_k}", got, want)
        if (m, k) not in SHAPES:  # the rows every dequantize config (TMA too) addresses
            continue
        q, sf = reference.quantize_nvfp4(x, 0.75, sf_layout="8x4")
        y_ref = reference.dequantize_nvfp4(q, sf, 0.75, sf_layout="8x4", dtype="bfloat16").view(np.uint16)
        for name, cfg in dequantize_configs.items():
            out = cp.full((m, k), 0xFFFF, dtype=cp.uint16)
            fp4q.dequantize_nvfp4(cp.asarray(q), cp.asarray(sf), 0.75, sf_layout="8x4", out=out, config=cfg)
            check(f"dequantize {name} {m}x{k} 8x4", (out,), (y_ref,))
    print(f"{time.perf_counter() - start:7.1f}s  the 8x4 layout and padded outputs", flush=True)
    return failures


def experts_pass(rng, start: float) -> int:
    """The experts' and the masked batches' quantizers (and their SiLU·mul forms), every unit
    count of the row kernel, into 0xFF-filled outputs: routings with empty experts, offsets that
    decrease, are negative or pass M, every expert empty; counts below 0, above M and 0. Rows no
    expert (or count) owns must keep their 0xFF; every scale byte is written."""
    def bf16(*shape):
        return (rng.standard_normal(shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)

    failures = 0
    offsets_cases = [[0, 40, 40, 130], [0, 50, 20, 200], [-7, 3, 3, 99], [130, 130, 130, 130], [5, 6, 7, 125]]
    for k in (64, 2064, 4112, 16384, 32768):  # every CTA shape of the row kernel
        m = 130
        for silu in (False, True):
            x = bf16(m, 2 * k if silu else k)
            tsf = (2.0 ** rng.uniform(-8, 8, 3)).astype(np.float32)
            op = fp4q.silu_and_mul_quantize_nvfp4_experts if silu else fp4q.quantize_nvfp4_experts
            want_op = reference.silu_and_mul_quantize_nvfp4_experts if silu else reference.quantize_nvfp4_experts
            for offsets in offsets_cases:
                offsets = np.array(offsets, np.int32)
                want_q, want_sf = want_op(x, offsets, tsf)
                rows, _ = reference.resolve_expert_offsets(offsets, m)
                want_q[: rows[0]] = 0xFF
                want_q[rows[-1]:] = 0xFF
                out = cp.full(want_q.shape, 0xFF, cp.uint8)
                sf_out = cp.full(want_sf.shape, 0xFF, cp.uint8)
                op(cp.asarray(x), cp.asarray(offsets), cp.asarray(tsf), out=out, sf_out=sf_out)
                if not (np.array_equal(cp.asnumpy(out), want_q) and np.array_equal(cp.asnumpy(sf_out), want_sf)):
                    failures += 1
                    print(f"MISMATCH experts K={k} silu={silu} offsets={offsets.tolist()}", flush=True)
            xb = bf16(3, 50, 2 * k if silu else k)
            op = fp4q.silu_and_mul_quantize_nvfp4_batched if silu else fp4q.quantize_nvfp4_batched
            want_op = reference.silu_and_mul_quantize_nvfp4_batched if silu else reference.quantize_nvfp4_batched
            for counts in (None, np.array([-2, 50, 999], np.int32), np.array([0, 17, 49], np.int32)):
                want_q, want_sf = want_op(xb, tsf, counts)
                valid = np.full(3, 50) if counts is None else np.clip(counts, 0, 50)
                want_q[np.arange(50)[None, :] >= valid[:, None]] = 0xFF
                out = cp.full(want_q.shape, 0xFF, cp.uint8)
                sf_out = cp.full(want_sf.shape, 0xFF, cp.uint8)
                op(cp.asarray(xb), cp.asarray(tsf), valid_rows=None if counts is None else cp.asarray(counts),
                   out=out, sf_out=sf_out)
                if not (np.array_equal(cp.asnumpy(out), want_q) and np.array_equal(cp.asnumpy(sf_out), want_sf)):
                    failures += 1
                    print(f"MISMATCH batches K={k} silu={silu} counts={counts}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  experts and batches", flush=True)
    return failures


def _bf16(rng, *shape):
    return (rng.standard_normal(shape, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _training_options(columnwise: bool):
    """(block_2d, hadamard, stochastic, four_over_six) the training quantizer combines: the
    Hadamard transform needs the columnwise direction and 1D blocks."""
    for block_2d in (False, True):
        for hadamard in (None, 0xD7E8) if columnwise and not block_2d else (None,):
            for stochastic in (False, True):
                for four_over_six in (False, True):
                    yield block_2d, hadamard, stochastic, four_over_six


def training_pass(rng, start: float) -> int:
    """The training quantizer into 0xFF-filled outputs: each direction alone and both, 16x16
    blocks, stochastic rounding, the Hadamard transform, 4/6, tiles cut by M and K, both
    layouts, a given and a dynamic scale (with the transform, the columnwise one over the
    transformed values); every output byte is written."""
    failures = 0
    for m, k in ((16, 16), (144, 400), (272, 2064)):
        x = _bf16(rng, m, k)
        for rowwise, columnwise in ((True, True), (True, False), (False, True)):
            for block_2d, hadamard, stochastic, four_over_six in _training_options(columnwise):
                for layout, tsf in itertools.product(("swizzled", "linear"), (0.75, "dynamic")):
                    options = dict(rowwise=rowwise, columnwise=columnwise, block_2d=block_2d, hadamard=hadamard,
                                   stochastic=stochastic, four_over_six=four_over_six, seed=7, offset=3,
                                   sf_layout=layout)
                    want = reference.quantize_nvfp4_training(x, tsf, **options)
                    buffers = {name: cp.full(getattr(want, field).shape, 0xFF, cp.uint8)
                               for name, field in (("out", "q"), ("sf_out", "sf"), ("out_t", "q_t"),
                                                   ("sf_t_out", "sf_t")) if getattr(want, field) is not None}
                    got = fp4q.quantize_nvfp4_training(cp.asarray(x), tsf, **options, **buffers)
                    same = all(np.array_equal(cp.asnumpy(getattr(got, f)), getattr(want, f))
                               for f in ("q", "sf", "q_t", "sf_t") if getattr(want, f) is not None)
                    if not same:
                        failures += 1
                        print(f"MISMATCH training {m}x{k} {options} tensor_sf={tsf!r}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  training", flush=True)
    return failures


def fake_quantize_pass(rng, start: float) -> int:
    """Fake quantization into 0xFF-filled outputs: every option the op combines, a given and a
    dynamic scale, shapes whose rows are not a multiple of the CTA's."""
    failures = 0
    for m, k in ((16, 16), (48, 400), (160, 2064)):
        x = _bf16(rng, m, k)
        for block_2d in (False, True):
            for hadamard in (None,) if block_2d else (None, 0xD7E8):
                for stochastic in (False, True):
                    for four_over_six in (False, True):
                        for tsf in (0.75, "dynamic"):
                            options = dict(block_2d=block_2d, hadamard=hadamard, stochastic=stochastic, seed=5,
                                           offset=9, four_over_six=four_over_six)
                            want = reference.fake_quantize_nvfp4(x, tsf, **options)
                            out = cp.full(x.shape, 0xFFFF, cp.uint16)
                            got = fp4q.fake_quantize_nvfp4(cp.asarray(x), tsf, **options, out=out)
                            values = got[0] if isinstance(got, tuple) else got
                            if not np.array_equal(cp.asnumpy(values), want):
                                failures += 1
                                print(f"MISMATCH fake_quantize {m}x{k} {options} tensor_sf={tsf!r}", flush=True)
    print(f"{time.perf_counter() - start:7.1f}s  fake quantization", flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(main())
