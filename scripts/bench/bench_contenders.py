"""The benchmark's contenders: fp4q, the spec's formula in PyTorch eager and
under torch.compile, the Triton quantizer of bench_triton, torchao; their
host overhead per call; and every contender on corner-case data against the
spec."""

from __future__ import annotations

import time

import numpy as np

from scripts.bench import bench_triton as triton_kernel
from scripts.bench import timing
from scripts.bench.bench_measure import Case, as_cupy, compare, timed_row
from scripts.bench.bench_report import Row, progress_line
from scripts.sweep import sweep_ops
from fp4q.numerics.formats import R6

HOST_SHAPE = (16, 4096)  # small enough that a call is host-bound: the host-overhead shape
# Launches per call, an upper estimate, for the contenders made of several kernels.
EAGER_LAUNCHES = 48
COMPILED_LAUNCHES = 8

# E2M1 magnitude code = number of these thresholds below |v| (bucketize, right=False).
# Round to nearest even: 0.25 -> 0, 1.25 -> 1, 2.5 -> 2 and 5 -> 4 round down
# (code goes up only above them); 0.75 -> 1, 1.75 -> 2, 3.5 -> 4 round up (the
# code goes up from them on, so the threshold is the float32 just below).
E2M1_THRESHOLDS = [0.25, float(np.nextafter(np.float32(0.75), np.float32(0))), 1.25,
                   float(np.nextafter(np.float32(1.75), np.float32(0))), 2.5,
                   float(np.nextafter(np.float32(3.5), np.float32(0))), 5.0]


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


def bench_copy(env, case: Case) -> Row:
    return Row("device copy (same bytes)", case.copy_us, case.copy_min_us, note="roofline: timing.copy_fn")


# What the notes say of the config the default call picks, by its kind.
CONFIG_FIELDS = {
    "QuantizeConfig": ("tile_m", "tile_k", "num_stages", "consumer_warpgroups", "min_ctas_per_sm", "persistent"),
    "SimtConfig": ("vector", "vector_elements", "threads"),
}


def bench_fp4q(env, case: Case, pdl: bool) -> Row:
    fp4q = env.fp4q
    fields = ()
    try:  # which config the default picks: for the notes only, a failure here is not the row's
        cfg = fp4q.config_for(case.x, case.tsf, out=case.q, sf_out=case.sf)
        fields = CONFIG_FIELDS.get(type(cfg).__name__, ())
        described = ",".join(f"{f}={getattr(cfg, f)}" for f in fields)
    except Exception as exc:  # noqa: BLE001
        cfg, described = None, f"not reported: {type(exc).__name__}: {exc}"
    case.q.fill(0xAB)
    case.sf.fill(0xAB)
    fp4q.quantize_nvfp4(case.x, case.tsf, out=case.q, sf_out=case.sf, pdl=pdl)
    same = bool(env.cp.array_equal(case.q, case.q_ref) and env.cp.array_equal(case.sf, case.sf_ref))
    row = timed_row(env, f"fp4q default, PDL {'on' if pdl else 'off'}",
                     lambda: fp4q.quantize_nvfp4(case.x, case.tsf, out=case.q, sf_out=case.sf, pdl=pdl),
                     note="swizzled scales; out= given")
    ok, n = env.spec_ok
    row.exact = "yes" if ok and same else "no"
    row.note += f"; vs spec on {n} sampled rows: {'yes' if ok else 'NO'}"
    if not same:
        row.note += "; output differs from the PDL-on call"
        env.problems.append(f"{case.m}x{case.k}: fp4q with pdl={pdl} gave other bytes than with pdl=True")
    row.extra["config"] = {f: str(getattr(cfg, f)) for f in fields}
    row.extra["config_type"] = type(cfg).__name__ if cfg is not None else None
    row.note += f"; config {type(cfg).__name__}({described})"
    return row


def with_comparison(env, case: Case, row: Row, exact: str, detail: str) -> Row:
    """``row`` with its bit-exactness, and a difference noted in the row and the run's findings."""
    row.exact = exact
    if detail:
        row.note += "; " + detail
        env.findings.append(f"{case.m}x{case.k} {row.contender}: {detail}")
    return row


def bench_torch_eager(env, case: Case) -> Row:
    name = "torch eager (spec formula)"
    if env.torch is None:
        return Row(name, status=env.torch_status)
    fn = env.torch_formula
    q, sf = fn(case.xt, case.tsf_t)
    exact, detail = compare(env, case, q, sf)
    row = timed_row(env, name, lambda: fn(case.xt, case.tsf_t), entries=EAGER_LAUNCHES,
                     note="linear scales; allocates its outputs")
    return with_comparison(env, case, row, exact, detail)


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
    row = timed_row(env, name, lambda: compiled(case.xt, case.tsf_t), entries=COMPILED_LAUNCHES,
                     note=f"mode=default, fullgraph; first call (compile) {compile_s:.1f} s; linear scales")
    row.extra["compile_s"] = round(compile_s, 2)
    return with_comparison(env, case, row, exact, detail)


def bench_triton(env, case: Case) -> Row:
    name = "triton (bench_triton, tuned tile)"
    if env.torch is None:
        return Row(name, status=f"needs torch: {env.torch_status}")
    if triton_kernel.triton is None:
        return Row(name, status=triton_kernel.TRITON_STATUS)
    q, sf = triton_kernel.outputs(env.torch, case.xt)
    tiles = []
    candidates = triton_kernel.tiles_for(case.m, case.k)
    for tile in candidates:
        label = f"{tile[0]}x{tile[1]}/{tile[2]}w"
        try:
            q.fill_(0xAB)
            sf.fill_(0xAB)
            triton_kernel.quantize(case.xt, case.tsf_t, q, sf, tile)
            exact, detail = compare(env, case, q, sf, layout="swizzled")
            t = timing.time_fn(lambda tile=tile: triton_kernel.quantize(case.xt, case.tsf_t, q, sf, tile),
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
    tile = env.best_tile[(case.m, case.k)] = best["tile_tuple"]
    # The least of several noisy medians is biased low (the winner's curse): the chosen
    # tile is timed once more, and that second measurement is the one reported.
    chosen = timing.time_fn(lambda: triton_kernel.quantize(case.xt, case.tsf_t, q, sf, tile),
                            warmup=env.args.warmup, reps=env.args.reps)
    others = ", ".join(f"{t['tile']} {t['median_us']:.1f}" for t in timed if t is not best)
    source = "the tuned table's" if (case.m, case.k) in triton_kernel.TUNED else f"best of {len(candidates)}"
    note = (f"{source} tile (rows x elements/warps): {best['tile']}, chosen at "
            f"{best['median_us']:.2f} us and timed again for this row; others (us): {others}; swizzled scales, "
            f"out= given")
    if best["detail"]:
        note += "; " + best["detail"]
        env.findings.append(f"{case.m}x{case.k} {name}: {best['detail']}")
    elif not all(t["exact"] == "yes" for t in timed):
        note += "; some other tile shapes were NOT bit-exact"
    for t in tiles:
        t.pop("tile_tuple", None)
    return Row(name, chosen.median_us, chosen.min_us, exact=best["exact"], note=note, extra=dict(tiles=tiles))


def torchao_nvfp4() -> tuple:
    """(torchao's NVFP4Tensor, torchao's version), or (None, why there is none)."""
    try:
        import torchao
    except ModuleNotFoundError:
        return None, "not installed"
    except Exception as exc:  # noqa: BLE001
        return None, f"import failed: {type(exc).__name__}: {exc}"
    version = getattr(torchao, "__version__", "?")
    try:
        from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor
    except Exception as exc:  # noqa: BLE001
        return None, f"torchao {version} has no NVFP4Tensor: {type(exc).__name__}: {exc}"
    return NVFP4Tensor, version


def torchao_scale(tsf_t):
    """torchao's per-tensor scale, amax / (6 * 448): the reciprocal of the spec's tensor_sf (0-d)."""
    return (1.0 / tsf_t).reshape(())


def bench_torchao(env, case: Case) -> Row:
    name = "torchao NVFP4Tensor.to_nvfp4"
    if env.torch is None:
        return Row(name, status=f"needs torch: {env.torch_status}")
    NVFP4Tensor, version = torchao_nvfp4()
    if NVFP4Tensor is None:
        return Row(name, status=version)
    per_tensor_scale = torchao_scale(case.tsf_t)

    def run():
        return NVFP4Tensor.to_nvfp4(case.xt, per_tensor_scale=per_tensor_scale)

    try:
        out = run()
    except Exception as exc:  # noqa: BLE001
        return Row(name, status=env.fail(f"{case.m}x{case.k} torchao {version}", exc))
    row = timed_row(env, name, run, entries=EAGER_LAUNCHES, note=f"torchao {version}; its own formula and layout")
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
    print(progress_line(case.m, case.k, case.copy_us, row), flush=True)
    return row


def torch_host_runs(env, xt, tsf: float) -> list[tuple]:
    """(name, call, calls) of the torch rows of the host table: fp4q's torch op as a
    torch user calls it, the CuPy API on torch tensors, and torch's dispatcher floor
    (a built-in op of three tensors) to read them against."""
    torch = env.torch
    import fp4q.torch  # noqa: F401 - registers torch.ops.fp4q

    m, k = xt.shape
    qt = torch.empty((m, k // 2), dtype=torch.uint8, device=xt.device)
    sft = torch.empty(env.fp4q.swizzled_sf_shape(m, k), dtype=torch.uint8, device=xt.device)
    a, b, c = (torch.empty((m, k), dtype=torch.bfloat16, device=xt.device) for _ in range(3))
    quantize_op = torch.ops.fp4q.quantize_nvfp4
    return [
        ("torch.ops.fp4q.quantize_nvfp4 (eager, allocating from torch)", lambda: quantize_op(xt, tsf), 2000),
        # The packet above picks an overload per call; this row names it, to show what that choice costs.
        ("torch.ops.fp4q.quantize_nvfp4.default (the overload named)", lambda: quantize_op.default(xt, tsf), 2000),
        ("fp4q.quantize_nvfp4 on torch tensors, out= given",
         lambda: env.fp4q.quantize_nvfp4(xt, tsf, out=qt, sf_out=sft), 2000),
        ("torch.add(a, b, out=c) (torch's dispatcher floor)", lambda: torch.add(a, b, out=c), 2000),
    ]


def bench_host(env) -> list[dict]:
    """Python microseconds per call with warm caches, on a small (host-bound) shape."""
    cp, fp4q = env.cp, env.fp4q
    m, k = HOST_SHAPE
    x_host = sweep_ops.bf16_normal(m, k, np.random.default_rng(7))
    x = cp.asarray(x_host)
    tsf = float(env.reference.global_scale(x_host))
    q = cp.empty((m, k // 2), cp.uint8)
    sf = cp.empty(fp4q.swizzled_sf_shape(m, k), cp.uint8)
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
            runs.extend(torch_host_runs(env, xt, tsf))
        except Exception as exc:  # noqa: BLE001
            env.fail("host overhead: the fp4q.torch rows", exc)
        try:
            torch._dynamo.reset()
            compiled = torch.compile(env.torch_formula, mode="default", fullgraph=True, dynamic=False)
            compiled(xt, tsf_t)
            runs.append(("torch.compile (spec formula)", lambda: compiled(xt, tsf_t), 1000))
        except Exception as exc:  # noqa: BLE001
            env.fail("host overhead: torch.compile", exc)
        if triton_kernel.triton is not None:
            tq, tsf8 = triton_kernel.outputs(torch, xt)
            tile = env.best_tile.get((m, k), triton_kernel.CONFIGS[0])
            runs.append(("triton (bench_triton)", lambda: triton_kernel.quantize(xt, tsf_t, tq, tsf8, tile), 1000))
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
        if triton_kernel.triton is not None:
            def run_triton(tsf):
                q, sf = triton_kernel.outputs(torch, xt)
                triton_kernel.quantize(xt, t_scalar(tsf), q, sf, triton_kernel.CONFIGS[0])
                sf = fp4q.unswizzle_sf(as_cupy(cp, sf).reshape(fp4q.swizzled_sf_shape(m, k)), m, k)
                return q, sf

            contenders.append(("triton (bench_triton)", run_triton))
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


