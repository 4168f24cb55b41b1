"""SASS instructions per element in the steady state of each kernel a call can choose.

    python scripts/gpu/sass_instructions.py [--arch sm_90a --arch sm_100f --arch sm_80] [--json OUT]
                                        [--match REGEX] [--jobs N] [--annotate REGEX]
                                        [--compare BEFORE.json]

For each kernel (below) and target, the kernel is rendered and compiled as the
library does (``render`` + ``compile_source`` into a throw-away binary cache),
disassembled with ``nvdisasm``, and the instructions one thread issues per
unit of work in its steady state are counted, split by class, and divided by
the elements that unit holds. Needs no GPU: NVRTC compiles for every target,
and ``nvdisasm`` comes from PATH or the pip wheel ``nvidia-cuda-nvdisasm``
(as in ``scripts/sass_dump.py``).

The kernels: the vector SIMT quantizer with 8, 16 and 32 elements per thread
(NVFP4) and 16 and 32 (MXFP4); the plain SIMT quantizer (NVFP4, MXFP4); the
TMA quantizer's default configs (``variants.default_variants``) and every
distinct config of the tuned table (``variants.tuned_variants``); the one-launch
dynamic quantizer at each block size; the dequantizers (vector, plain, the
default TMA config; NVFP4 and MXFP4, bf16 and float32 out); the amax pass
(16-byte and 2-byte loads); the row kernel (RMSNorm, add+RMSNorm, the tensor
scales per row, the experts and masked batches). All with bf16 input, swizzled scales and the
tensor scale by value, the common call; ``--match`` picks some by name.

How the steady state is found, from the SASS control flow alone:

1. **Blocks and edges.** Basic blocks start at the entry, at every branch
   target and after every branch, ``EXIT`` and ``RET``. A ``BRA`` with a
   guard predicate (``@P0``, ``@!P1``) or a predicate operand (``BRA P2, L``,
   ``BRA.U !UP0, L``) has two successors, otherwise one; a guarded ``EXIT``
   falls through. ``CALL`` does not end a block: it returns to the next
   instruction (what it calls, a subroutine after the kernel's ``EXIT``, is
   not part of the kernel's CFG), except a ``CALL`` whose target reaches an
   ``EXIT`` before any ``RET``: that is how ptxas leaves a warp-wide loop on
   sm_80 (``@P1 CALL.REL.NOINC`` to the code after it), a jump.
2. **Loops.** A branch to a lower or equal address is a loop's back edge only
   if its target dominates it (dominators from the entry): ptxas also puts
   slow paths out of line, after the loop, and jumps back from them (the
   retry of an mbarrier wait), and such a backward jump is no loop. Each back
   edge ``latch -> head`` gives the natural loop: the head plus every block
   that reaches the latch without passing the head; back edges to one head
   make one loop.
3. **The steady-state loop** is the innermost loop that holds any instruction
   of the kernel's work, told by line information: the kernel is compiled a
   second time with ``--generate-line-info``, the two disassemblies must be
   the same instructions at the same addresses (checked; otherwise the count
   stops with an error), and an instruction belongs to the work when its
   inline chain passes through the kernel's anchor template
   (``numerics/quantize_group.cuh`` for the quantizers, whose amax loop in
   the dynamic kernel does not use it; ``numerics/dequantize.cuh`` for the
   dequantizers; ``kernels/amax.cu``'s ``load_magnitudes`` line for the amax pass). For the
   vector SIMT quantizer that is the grid-stride ``while`` loop, for a TMA
   kernel the consumers' per-tile loop.
4. **The common path** through that loop, from its head to a latch and
   round the back edge: the path through the loop's blocks (inner back edges
   removed, so it is a DAG) with the fewest *cold* instructions and, among
   those, the most instructions. Cold are: instructions whose inline chain
   passes a source line that the programmer marked unlikely (the statement
   of ``if (__builtin_expect(c, 0))``, the ``else`` of ``if
   (__builtin_expect(c, 1))``: the non-finite amax fallback and the general
   e2m1 variants); ``CALL`` (ptxas's IEEE slow path of ``rcp.rn``/``div.rn``
   for subnormal or huge operands); edges taken by ``BRA.DIV`` (a diverged
   warp); and the blocks of loops nested in the steady-state loop (the retry
   of a wait, the per-lane loop around a TMA store: in the steady state a
   wait succeeds at its first test, and the elected thread's work is one
   thread's). "The most instructions" makes every bounds guard pass and
   every early-out (an all-zero group, a NaN byte) not taken: the work of a
   unit of ordinary data inside the tensor. Where that rule would take a
   path the call does not (a branch on a launch parameter), the kernel's
   entry below names opcodes to avoid, as a stated assumption: the amax
   pass assumes dense rows, whose offset needs no integer division. Guards that only some threads of
   a unit pass (the scale store of one thread of a group's pair in the
   8-element vector kernel, the consumer thread 0 that waits for the TMA
   store's reads) count as passed: an upper bound by those few
   instructions.
5. **One pass.** Where the loop has an exit after its work (the vector and
   dynamic kernels' ``if (one_pass) break``, or the loop test at the bottom
   of a ``for``), the common path from the head to the first such exit is
   counted too: at serving sizes the vector kernel's grid has a thread per
   unit and runs this path once, without the walk's step and next load.

Elements per pass come from the config, as the templates use them: the vector
quantizer's ``VEC_ELEMS`` per thread and trip; the plain quantizer's one group
(``SF_VEC``); a TMA quantize or dequantize consumer's ``TILE_M * TILE_K /
CONSUMER_THREADS`` per thread and tile; the dynamic kernel's ``VEC_ELEMS``;
the SIMT dequantizers' 16-byte output unit (8 bf16 or 4 float32 values); the
amax pass's ``AMAX_UNROLL`` loads of 8 elements (2-byte loads: 1) per trip.

Classes, by the opcode's mnemonic: ``mem`` (global, shared, local, constant
and TMA loads and stores, atomics: ``LDG STG LDS STS LDSM LD ST LDC ULDC
LDCU ATOM RED UTMALDG UTMASTG ...``), ``float`` (``FADD FMUL FFMA FMNMX
FSETP FSEL MUFU HADD2 HMUL2 HFMA2 HMNMX2 VHMNMX ...``; note ``HADD2.F32`` is
how ptxas widens an f16 to float32), ``int`` (``IADD3 IMAD LOP3 SHF PRMT
ISETP LEA SEL VIADD PLOP3`` and the uniform ``U...`` forms), ``conv`` (``F2F
F2I I2F F2FP I2FP FRND ...``), ``control`` (``BRA BSSY BSYNC WARPSYNC EXIT
CALL RET BAR SYNCS VOTE MEMBAR DEPBAR NOP ...``), ``other`` (moves, special
registers, shuffles: ``MOV CS2R S2R R2UR SHFL ...``). Uniform-datapath
instructions count like the others: each takes an issue slot of its warp.

Beside the counts: ptxas's registers and spill bytes of each kernel (a cut
that makes a kernel at its register cap spill is no cut), the loop's head
address, its blocks and its static size (every instruction of its blocks,
all variants included).

``--compare BEFORE.json`` prints, beside the table, each kernel's steady-state
instructions per element and per class before (a ``--json`` of another tree)
and now, and the one-pass count: the before/after table of a change.

``--annotate REGEX`` prints, for the matching kernels, each instruction of
the common path with its class and its source (template file, line, text,
innermost first, the call chain up to the kernel), then the path's counts per
innermost source line: where the per-element instructions go.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

# This tree's fp4q, ahead of any installed one (as scripts/sass_dump.py does).
ROOT = pathlib.Path(__file__).resolve().parents[1]
while ROOT != ROOT.parent and not (ROOT / "fp4q" / "__init__.py").is_file():
    ROOT = ROOT.parent  # the script may sit in a subfolder of scripts/
sys.path.insert(0, str(ROOT))

from scripts.gpu.sass_flow import (CLASSES, ColdSource, Function, Instr, Loop, back_edges, best_path,  # noqa: E402
                                   build_cfg, cold_source, find_loops, jump_calls, parse_sass)

DEFAULT_ARCHS = ("sm_90a", "sm_100f", "sm_80")

# --------------------------------------------------------------------------------------------
# Rendering, compiling, disassembling
# --------------------------------------------------------------------------------------------

def source_origins(spec) -> list[tuple[str, int]]:
    """For each line of the rendered source of ``spec``, the template (or ``<prelude>``) and line
    it came from; checked against ``render`` itself."""
    from fp4q.jit import render as r

    prelude = r._prelude(spec).splitlines()
    out = [("<prelude>", i + 1) for i in range(len(prelude))]
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for i, line in enumerate(r._read_template(name).splitlines(), 1):
            m = r._INCLUDE.match(line)
            if m:
                visit(m.group(1))
            elif not r._PRAGMA_ONCE.match(line):
                out.append((name, i))

    visit(spec.template)
    if len(out) != len(r.render(spec).source.splitlines()):
        raise RuntimeError("the renderer changed: the rendered lines no longer map onto the templates")
    return out


def nvdisasm_path() -> str | None:
    """nvdisasm from PATH, else from the pip wheel's ``nvidia/*/bin``; None where neither has it."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    for entry in map(pathlib.Path, sys.path):
        for candidate in sorted(entry.glob("nvidia/*/bin/nvdisasm")):
            return str(candidate)
    return None


def find_nvdisasm() -> str:
    found = nvdisasm_path()
    if found is None:
        raise SystemExit("nvdisasm not found: put it on PATH, or pip install nvidia-cuda-nvdisasm")
    return found


def _compile_with_line_info(src) -> bytes:
    """The cubin of ``src`` with ``--generate-line-info`` added to the library's options."""
    from fp4q.jit import compiler

    nvrtc = compiler._nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(src.source.encode(), f"{src.kernel_name}.cu".encode(), 0, [], [])
    compiler._check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in (*compiler._options(src.arch), "--generate-line-info")]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC could not compile {src.kernel_name} for {src.arch} with line info")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        compiler._check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        compiler._check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def disassemble(cubin: bytes, line_info: bool) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        args = [find_nvdisasm(), "-c"] + (["-gi"] if line_info else []) + [str(path)]
        return subprocess.run(args, check=True, capture_output=True, text=True).stdout


# --------------------------------------------------------------------------------------------
# The kernels
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    name: str
    cfg: object
    elements: int  # per thread and pass of the steady-state loop
    anchor: tuple[str, str | None]  # (template, text of a line in it or None): the kernel's work
    note: str = ""
    avoid: tuple[str, ...] = ()  # opcodes (with modifiers, as printed) cold in this kernel: a stated assumption


QUANTIZE_ANCHOR = ("numerics/quantize_group.cuh", None)
DEQUANTIZE_ANCHOR = ("numerics/dequantize.cuh", None)
AMAX_ANCHOR = ("kernels/amax.cu", "w[k] = v < units ? load_magnitudes")


def _constants(cfg) -> dict[str, int]:
    return dict(cfg.spec.constants)


def _tma_name(cfg) -> str:
    return (f"m{cfg.tile_m}_k{cfg.tile_k}_in{cfg.input_box_k}_s{cfg.num_stages}_wg{cfg.consumer_warpgroups}"
            f"_c{cfg.min_ctas_per_sm}_ob{cfg.out_buffers}")


def kernels(arch: str) -> list[Kernel]:
    """The kernels a call can choose on ``arch``, each with its elements per pass."""
    from fp4q.kernels import variants
    from fp4q.kernels.archs import target
    from fp4q.kernels.dequantize import DequantizeConfig, DequantizeSimtConfig
    from fp4q.kernels.global_scale import AMAX_UNROLL, AmaxConfig, FusedDynamicConfig
    from fp4q.kernels.rows import RowConfig
    from fp4q.kernels.tuning import FUSED_DYNAMIC_BLOCK_SIZES

    out = []
    simt = {"vec_128_x8": "vector nvfp4 x8", "vec_256": "vector nvfp4 x16", "vec_128_x32": "vector nvfp4 x32",
            "mx_vec_256": "vector mxfp4 x16", "mx_vec_128_x32": "vector mxfp4 x32", "simt_256": "plain nvfp4",
            "mx_simt_256": "plain mxfp4"}
    for key, label in simt.items():
        cfg = variants.SIMT[key].replace(arch=arch)
        c = _constants(cfg)
        elements = c["VEC_ELEMS"] if cfg.vector else c["SF_VEC"]
        out.append(Kernel(f"quantize/{label.replace(' ', '_')}", cfg, elements, QUANTIZE_ANCHOR))
    tma: dict = {}
    for name, cfg in {**variants.default_variants(arch), **variants.tuned_variants(arch)}.items():
        tma.setdefault(cfg.replace(arch=arch), []).append(name)
    for cfg, names in tma.items():
        c = _constants(cfg)
        elements = c["TILE_M"] * c["TILE_K"] // c["CONSUMER_THREADS"]
        out.append(Kernel(f"quantize/tma_{cfg.fmt}_{_tma_name(cfg)}", cfg, elements, QUANTIZE_ANCHOR,
                          note=", ".join(names)))
    for threads in FUSED_DYNAMIC_BLOCK_SIZES:
        cfg = FusedDynamicConfig(threads=threads, arch=arch)
        out.append(Kernel(f"quantize/dynamic_{threads}", cfg, _constants(cfg)["VEC_ELEMS"], QUANTIZE_ANCHOR))
    # The fused SiLU·mul quantizers: per element of h (each reads two of x).
    for key in ("vec_128", "vec_128_x32", "mx_vec_128_x32"):
        cfg = variants.SIMT[key].replace(arch=arch, prologue="silu_mul")
        out.append(Kernel(f"silu_mul/vector_{cfg.fmt}_x{cfg.vector_elements}", cfg, cfg.vector_elements,
                          QUANTIZE_ANCHOR))
    if target(arch).features.tma:
        fit = variants.fitted(variants.default_config(arch), arch, prologue="silu_mul")
        if fit is not None:
            c = _constants(fit)
            out.append(Kernel(f"silu_mul/tma_nvfp4_{_tma_name(fit)}", fit,
                              c["TILE_M"] * c["TILE_K"] // c["CONSUMER_THREADS"], QUANTIZE_ANCHOR))
    # The row kernel (RMSNorm, add+RMSNorm): per element of a row pass, the row's reduction included.
    for prologue, fmt, units in (("rms_norm", "nvfp4", 1), ("rms_norm", "nvfp4", 4), ("rms_norm", "nvfp4", 8),
                                 ("add_rms_norm", "nvfp4", 1), ("add_rms_norm", "nvfp4", 4),
                                 ("rms_norm", "mxfp4", 1)):
        cfg = RowConfig(prologue=prologue, fmt=fmt, row_units=units, arch=arch)
        out.append(Kernel(f"{prologue}/rows_{fmt}_u{units}", cfg, units * cfg.sf_vec_size, QUANTIZE_ANCHOR))
    # Tensor scales per row (the row kernel after any prologue): read, or each row's computed.
    for prologue, units, mode in (("none", 1, "per_row"), ("none", 1, "dynamic_per_row"),
                                  ("none", 4, "dynamic_per_row"), ("silu_mul", 1, "dynamic_per_row"),
                                  ("rms_norm", 1, "dynamic_per_row")):
        cfg = RowConfig(prologue=prologue, row_units=units, tensor_sf_mode=mode, arch=arch)
        out.append(Kernel(f"{prologue}/rows_nvfp4_u{units}_{mode}", cfg, units * cfg.sf_vec_size, QUANTIZE_ANCHOR))
    # The experts and the masked batches (the row kernel walking the rows of its segments).
    for segments, prologue, threads, units in (("experts", "none", 128, 1), ("experts", "none", 256, 1),
                                               ("experts", "none", 256, 4), ("experts", "silu_mul", 128, 1),
                                               ("batches", "none", 128, 1)):
        cfg = RowConfig(prologue=prologue, threads=threads, row_units=units, segments=segments,
                        tensor_sf_mode="per_expert", arch=arch)
        out.append(Kernel(f"{prologue}/{segments}_nvfp4_u{units}_t{threads}", cfg, units * cfg.sf_vec_size,
                          QUANTIZE_ANCHOR))
    dq_bases: dict[str, object] = {"vector": DequantizeSimtConfig(vector=True), "plain": DequantizeSimtConfig()}
    if target(arch).features.tma:
        fit = variants.fitted(DequantizeConfig(), arch)
        if fit is not None:
            dq_bases["tma"] = fit
    for label, base in dq_bases.items():
        for fmt in ("nvfp4", "mxfp4"):
            for dtype in ("bfloat16", "float32"):
                cfg = base.replace(arch=arch, fmt=fmt, out_dtype=dtype)
                if isinstance(cfg, DequantizeConfig):
                    c = _constants(cfg)
                    elements = c["TILE_M"] * c["TILE_K"] // c["CONSUMER_THREADS"]
                else:
                    elements = cfg.unit
                out.append(Kernel(f"dequantize/{label}_{fmt}_{'bf16' if dtype == 'bfloat16' else 'f32'}", cfg,
                                  elements, DEQUANTIZE_ANCHOR))
    for vector in (True, False):
        cfg = AmaxConfig(vector_loads=vector, arch=arch)
        # The call's tensor is dense (row_stride == cols): its offset is v * VEC. The strided
        # offset divides by the units per row (I2F.U32.RP starts ptxas's integer division), and
        # is the longer path, which rule 4 would take.
        out.append(Kernel(f"amax/{'vector' if vector else 'scalar'}", cfg, AMAX_UNROLL * cfg.elements_per_unit,
                          AMAX_ANCHOR, note="dense rows assumed", avoid=("I2F.U32.RP",)))
    return out


# --------------------------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------------------------

@dataclass
class PathCount:
    instructions: int
    per_class: dict[str, int]
    cold: int  # cold instructions the path could not avoid
    calls: int  # CALLs on it: their subroutines are not counted
    addresses: list[int]


def _count(instrs: list[Instr], cold_set: set[int], jumps: set[int]) -> PathCount:
    per_class = {c: 0 for c in CLASSES}
    for ins in instrs:
        per_class[ins.cls] += 1
    calls = sum(ins.base == "CALL" and ins.addr not in jumps for ins in instrs)
    return PathCount(len(instrs), per_class, sum(ins.addr in cold_set for ins in instrs), calls,
                     [ins.addr for ins in instrs])


@dataclass
class Analysis:
    loop_head: int
    loop_blocks: int
    loop_static: int  # every instruction of the loop's blocks
    steady: PathCount
    one_pass: PathCount | None
    path: list[Instr]
    one_pass_path: list[Instr] | None


def analyse(function: Function, anchor_lines: set[int], cold: ColdSource | set[int],
            avoid: tuple[str, ...] = ()) -> Analysis:
    """The steady-state loop of ``function`` and the common paths through it (module docstring).
    ``cold``: the cold source (a set of lines: wholly cold lines)."""
    source = cold if isinstance(cold, ColdSource) else ColdSource(frozenset(cold))
    blocks = build_cfg(function.instrs)
    loops = find_loops(blocks)
    removed = back_edges(blocks, loops)
    jumps = jump_calls(function.instrs)
    is_anchor = lambda ins: any(ln in anchor_lines for ln in ins.chain)  # noqa: E731

    def common_path(loop: Loop):
        nested = set().union(*[lp.body for lp in loops if lp.head != loop.head and lp.body < loop.body] or [set()])
        cold_set: set[int] = set()
        per_block: dict[int, int] = {}
        for b in loop.body:
            for ins in blocks[b].instrs:
                call = ins.base == "CALL" and ins.addr not in jumps
                if b in nested or call or ins.opcode in avoid or source.holds(ins.chain):
                    cold_set.add(ins.addr)
                    per_block[b] = per_block.get(b, 0) + 1
        work = {b for b in loop.body if any(is_anchor(ins) for ins in blocks[b].instrs)}
        path = best_path(blocks, loop.body, loop.head, {latch: None for latch in loop.latches}, removed, per_block,
                         through=work)
        instrs = [ins for b in path or [] for ins in blocks[b].instrs]
        return path, instrs, cold_set, per_block, work

    # The loop whose common path does the kernel's work: of those, the one whose path has the
    # fewest cold instructions (a loop nested in another counts as cold in it, and of two copies
    # that ptxas made by unswitching a loop on a launch parameter, the likely one), then the
    # fewest avoided opcodes, then the innermost.
    candidates = []
    for loop in loops:
        path, instrs, cold_set, per_block, work = common_path(loop)
        if path:
            key = (sum(ins.addr in cold_set for ins in instrs),
                   any(i.opcode in avoid for b in loop.body for i in blocks[b].instrs),
                   len(loop.body), sum(len(blocks[b].instrs) for b in loop.body))
            candidates.append((key, loop, path, instrs, cold_set, per_block, work))
    if not candidates:
        raise ValueError(f"{function.name}: no loop holds the kernel's work")
    _, loop, path, steady_instrs, cold_set, per_block, work = min(candidates, key=lambda c: c[0])

    # One pass: the common path from the head to the first way out of the loop after the work.
    last_work = max(ins.addr for ins in steady_instrs if is_anchor(ins))
    exits: dict[int, int | None] = {}
    for b in loop.body:
        blk = blocks[b]
        leaves = blk.exits or any(s not in loop.body for s in blk.succ)
        if leaves and blk.end > last_work:
            exits[b] = None
    one_pass = one_pass_instrs = None
    if exits:
        first = min(exits, key=lambda b: blocks[b].end)
        p = best_path(blocks, loop.body, loop.head, {first: None}, removed, per_block, through=work)
        if p is not None:
            one_pass_instrs = [ins for b in p for ins in blocks[b].instrs]
            one_pass = _count(one_pass_instrs, cold_set, jumps)
    static = sum(len(blocks[b].instrs) for b in loop.body)
    return Analysis(blocks[loop.head].start, len(loop.body), static, _count(steady_instrs, cold_set, jumps), one_pass,
                    steady_instrs, one_pass_instrs)


def _anchor_lines(origins: list[tuple[str, int]], source_lines: list[str], anchor: tuple[str, str | None]) -> set[int]:
    template, text = anchor
    lines = {i + 1 for i, (name, _) in enumerate(origins) if name == template
             and (text is None or text in source_lines[i])}
    if not lines:
        raise ValueError(f"the anchor {anchor} is not in the rendered source")
    return lines


def measure(job: tuple[str, Kernel, str, bool]) -> dict:
    """Compile, disassemble and count one kernel; a JSON-ready record (``annotate``: with the path)."""
    arch, kernel, cache_dir, annotate = job
    from fp4q.jit import cache, compiler, render

    spec = kernel.cfg.spec
    src = render.render(spec)
    compiled = compiler.compile_source(src, cache.BinaryCache(cache_dir))
    shipped = parse_sass(disassemble(compiled.cubin, False))
    with_lines = parse_sass(disassemble(_compile_with_line_info(src), True), f"{src.kernel_name}.cu")
    fn = next(f for f in with_lines if f.name == spec.name)
    fn_shipped = next(f for f in shipped if f.name == spec.name)
    if [(i.addr, i.text) for i in fn.instrs] != [(i.addr, i.text) for i in fn_shipped.instrs]:
        raise RuntimeError(f"{arch} {kernel.name}: the build with line information is not the shipped code")
    origins = source_origins(spec)
    source_lines = src.source.splitlines()
    result = analyse(fn, _anchor_lines(origins, source_lines, kernel.anchor), cold_source(src.source), kernel.avoid)

    def record(pc: PathCount | None) -> dict | None:
        if pc is None:
            return None
        return {"instructions": pc.instructions, "per_element": pc.instructions / kernel.elements,
                "per_class": pc.per_class,
                "per_class_per_element": {c: n / kernel.elements for c, n in pc.per_class.items()},
                "cold_unavoidable": pc.cold, "calls": pc.calls}

    out = {
        "arch": arch, "kernel": kernel.name, "config": repr(kernel.cfg), "note": kernel.note,
        "elements": kernel.elements, "registers": compiled.resources.registers,
        "spill_bytes": compiled.resources.spill_bytes,
        "loop_head": f"{result.loop_head:#x}", "loop_blocks": result.loop_blocks,
        "loop_static_instructions": result.loop_static, "kernel_instructions": len(fn.instrs),
        "steady": record(result.steady), "one_pass": record(result.one_pass),
    }
    if annotate:
        out["annotation"] = annotation(result.path, origins, source_lines, set(result.steady.addresses))
    return out


def annotation(path: list[Instr], origins, source_lines, _addrs) -> list[dict]:
    rows = []
    for ins in path:
        frames = []
        for ln in ins.chain:
            if 0 < ln <= len(origins):
                name, line = origins[ln - 1]
                frames.append(f"{name}:{line}: {source_lines[ln - 1].strip()}")
        rows.append({"addr": f"{ins.addr:#06x}", "instr": ins.text, "class": ins.cls, "source": frames})
    return rows


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def table(records: list[dict]) -> str:
    head = (f"| arch | kernel | elems | regs | loop instr | per elem | " + " | ".join(CLASSES)
            + " | one pass instr | one pass per elem |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        s, o = r["steady"], r["one_pass"]
        per = " | ".join(f"{s['per_class_per_element'][c]:.2f}" for c in CLASSES)
        flag = " (!)" if s["calls"] else ""
        one = f"{o['instructions']} | {o['per_element']:.2f}" if o else "- | -"
        regs = f"{r['registers']}" + (f" (spills {r['spill_bytes']} B)" if r.get("spill_bytes") else "")
        lines.append(f"| {r['arch']} | {r['kernel']} | {r['elements']} | {regs} | {s['instructions']}{flag}"
                     f" | {s['per_element']:.2f} | {per} | {one} |")
    return "\n".join(lines)


def comparison(before: list[dict], after: list[dict]) -> str:
    """Markdown: per kernel of ``after`` that ``before`` has too (same target and name), the steady
    state's instructions per element, in all and by class, and the one pass's, before -> after."""
    old = {(r["arch"], r["kernel"]): r for r in before}
    head = "| arch | kernel | per elem | " + " | ".join(CLASSES) + " | one pass per elem |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def pair(a: float | None, b: float | None) -> str:
        if a is None or b is None:
            return "-" if b is None else f"{b:.2f}"
        return f"{b:.2f}" if abs(a - b) < 0.005 else f"{a:.2f} -> {b:.2f}"

    for r in after:
        b = old.get((r["arch"], r["kernel"]))
        if b is None:
            continue
        s, t = b["steady"], r["steady"]
        per = " | ".join(pair(s["per_class_per_element"][c], t["per_class_per_element"][c]) for c in CLASSES)
        one = pair(b["one_pass"] and b["one_pass"]["per_element"], r["one_pass"] and r["one_pass"]["per_element"])
        lines.append(f"| {r['arch']} | {r['kernel']} | {pair(s['per_element'], t['per_element'])} | {per} | {one} |")
    return "\n".join(lines)


def print_annotation(r: dict) -> None:
    print(f"\n=== {r['arch']} {r['kernel']}: {r['steady']['instructions']} instructions for {r['elements']} elements")
    by_line: dict[str, dict[str, int]] = {}
    for row in r["annotation"]:
        src = row["source"][0] if row["source"] else "?"
        chain = " <- ".join(f.split(":")[0] + ":" + f.split(":")[1] for f in row["source"][1:4])
        print(f"{row['addr']} {row['class']:7s} {row['instr']:60s} | {src[:90]} | {chain}")
        counts = by_line.setdefault(src, {c: 0 for c in CLASSES})
        counts[row["class"]] += 1
    print(f"\n--- per innermost source line ({r['kernel']}, {r['arch']})")
    for src, counts in sorted(by_line.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(counts.values())
        split = ", ".join(f"{c} {n}" for c, n in counts.items() if n)
        print(f"{total:4d}  {split:40s} {src[:110]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", action="append", help=f"target (repeatable; default {' '.join(DEFAULT_ARCHS)})")
    parser.add_argument("--json", type=pathlib.Path, help="write the records here")
    parser.add_argument("--match", help="only the kernels whose name this regular expression finds")
    parser.add_argument("--annotate", help="print the common path of the kernels whose name this finds")
    parser.add_argument("--compare", type=pathlib.Path, help="a --json of another tree: print before -> after")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    args = parser.parse_args(argv)
    archs = args.arch or list(DEFAULT_ARCHS)
    with tempfile.TemporaryDirectory() as cache_dir:
        work = [(arch, k, cache_dir, bool(args.annotate and re.search(args.annotate, k.name)))
                for arch in archs for k in kernels(arch)
                if args.match is None or re.search(args.match, k.name)]
        if not work:
            parser.error("no kernel matches")
        with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            records = list(pool.map(measure, work))
    print(table(records))
    if args.compare:
        print("\n" + comparison(json.loads(args.compare.read_text())["records"], records))
    for r in records:
        if "annotation" in r:
            print_annotation(r)
    if any(r["steady"]["calls"] for r in records):
        print("\n(!) the common path holds a CALL it could not avoid: its subroutine is not counted")
    if args.json:
        args.json.write_text(json.dumps({"records": records}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
