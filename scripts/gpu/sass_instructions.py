"""SASS instructions per element in the steady state of each kernel a call can choose.

    python scripts/gpu/sass_instructions.py [--arch sm_90a --arch sm_100f --arch sm_80] [--json OUT]
                                        [--match REGEX] [--jobs N] [--annotate REGEX]

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
(16-byte and 2-byte loads). All with bf16 input, swizzled scales and the
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

``--annotate REGEX`` prints, for the matching kernels, each instruction of
the common path with its class and its source (template file, line, text,
innermost first, the call chain up to the kernel), then the path's counts per
innermost source line: where the per-element instructions go.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

# This tree's fp4q, ahead of any installed one (as scripts/sass_dump.py does).
ROOT = pathlib.Path(__file__).resolve().parents[1]
while ROOT != ROOT.parent and not (ROOT / "fp4q" / "__init__.py").is_file():
    ROOT = ROOT.parent  # the script may sit in a subfolder of scripts/
sys.path.insert(0, str(ROOT))

CLASSES = ("mem", "float", "int", "conv", "control", "other")
DEFAULT_ARCHS = ("sm_90a", "sm_100f", "sm_80")

# --------------------------------------------------------------------------------------------
# Classes of instructions
# --------------------------------------------------------------------------------------------

_MEM = {
    "LD", "ST", "LDG", "STG", "LDS", "STS", "LDL", "STL", "LDSM", "STSM", "LDC", "ULDC", "LDCU", "ATOM", "ATOMG",
    "ATOMS", "RED", "REDG", "REDAS", "LDGSTS", "LDGDEPBAR", "UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UTMACCTL",
    "UTMACMDFLUSH", "UBLKCP", "UBLKRED", "UBLKPF", "UBLKL2CP", "CCTL", "CCTLL", "SULD", "SUST", "SUATOM", "SURED",
    "TLD", "TEX", "TLD4", "TMML", "TXQ", "LDTRAM", "UCGABAR_ARV",
}
_FLOAT = {
    "FADD", "FADD32I", "FMUL", "FMUL32I", "FFMA", "FFMA32I", "FMNMX", "FMNMX3", "FSETP", "FSET", "FSEL", "FCHK",
    "FSWZADD", "MUFU", "HADD2", "HADD2_32I", "HMUL2", "HMUL2_32I", "HFMA2", "HFMA2_32I", "HMNMX2", "VHMNMX",
    "HSETP2", "HSET2", "DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "FADD2", "FMUL2", "FFMA2", "FMNMX2", "FHADD",
    "FHFMA", "FHMUL",
}
_INT = {
    "IADD", "IADD3", "IADD32I", "IMAD", "IMAD32I", "IMADSP", "IMUL", "IMUL32I", "LOP", "LOP3", "LOP32I", "SHF", "SHL",
    "SHR", "PRMT", "ISETP", "ISET", "LEA", "IABS", "IMNMX", "VIADD", "VIADDMNMX", "VIMNMX", "VIMNMX3", "SEL", "BFE",
    "BFI", "BMSK", "FLO", "POPC", "BREV", "IDP", "IDP4A", "ISCADD", "PLOP3", "PSETP", "ICMP", "IMNMX3", "LEPC",
    "SGXT", "UIADD3", "UIMAD", "ULOP", "ULOP3", "ULOP32I", "USHF", "USHL", "USHR", "ULEA", "UISETP", "USEL", "UPRMT",
    "UFLO", "UPOPC", "UBREV", "UPLOP3", "UPSETP", "UBMSK", "USGXT", "UIABS", "UIMNMX", "UVIADD", "UVIMNMX",
    "UIADD3.64",
}
_CONV = {"F2F", "F2I", "I2F", "F2FP", "I2FP", "F2IP", "I2I", "I2IP", "FRND", "UF2FP", "UI2F", "UF2I", "UF2F",
         "UFRND", "DFRND"}
_CONTROL = {
    "BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "BPT", "KILL", "WARPSYNC", "BAR",
    "BARRIER", "SYNCS", "YIELD", "NOP", "ACQBULK", "PREEXIT", "ELECT", "UELECT", "MEMBAR", "FENCE", "ERRBAR",
    "CGAERRBAR", "DEPBAR", "NANOSLEEP", "VOTE", "VOTEU", "WARPGROUP", "USETMAXREG", "ENDCOLLECTIVE", "ACQSHMINIT",
    "UCGABAR_WAIT", "RPCMOV", "BMOV",
}


def classify(opcode: str) -> str:
    """The class of an instruction, by its mnemonic (``HMNMX2.BF16_V2.NAN`` -> ``float``)."""
    base = opcode.split(".")[0]
    for name, table in (("mem", _MEM), ("float", _FLOAT), ("int", _INT), ("conv", _CONV), ("control", _CONTROL)):
        if base in table:
            return name
    return "other"


# --------------------------------------------------------------------------------------------
# Parsing nvdisasm / cuobjdump text
# --------------------------------------------------------------------------------------------

@dataclass
class Instr:
    addr: int
    guard: str | None  # "P0", "!P1", "UP0", ...; None when unguarded
    opcode: str  # with modifiers: "BRA.U", "HMNMX2.BF16_V2.NAN.XORSIGN"
    operands: str
    target: int | None = None  # branch / call target address
    label: str | None = None  # an unresolved label target (nvdisasm form)
    chain: tuple[int, ...] = ()  # rendered-source lines, innermost first (line info)

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def cls(self) -> str:
        return classify(self.opcode)

    @property
    def text(self) -> str:
        guard = f"@{self.guard} " if self.guard else ""
        return f"{guard}{self.opcode} {self.operands}".rstrip()


@dataclass
class Function:
    name: str
    instrs: list[Instr] = field(default_factory=list)


_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s*(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_LABEL_DEF = re.compile(r"^\s*([$.\w]+):\s*$")
_FUNC_CUOBJDUMP = re.compile(r"^\s*Function\s*:\s*(\S+)")
_FUNC_NVDISASM = re.compile(r"^\s*\.text\.(\S+):\s*$")
_LINE = re.compile(r'//## File "([^"]*)", line (\d+)(?: inlined at "([^"]*)", line (\d+))?')
_LABEL_REF = re.compile(r"`\(([^)]+)\)")
_HEX = re.compile(r"^0x([0-9a-fA-F]+)$")
BRANCHES = {"BRA", "BRX", "JMP", "JMX"}


def _split_instruction(body: str) -> tuple[str | None, str, str]:
    body = body.strip().strip("{}").strip().rstrip(";").strip()
    guard = None
    m = re.match(r"^@(!?U?P[T0-9]+)\s+(.*)$", body)
    if m:
        guard, body = m.group(1), m.group(2)
        if guard == "PT":
            guard = None
    parts = body.split(None, 1)
    return guard, parts[0], parts[1].strip() if len(parts) > 1 else ""


def _branch_target(opcode: str, operands: str) -> tuple[int | None, str | None]:
    base = opcode.split(".")[0]
    if base not in BRANCHES | {"CALL"}:
        return None, None
    ref = _LABEL_REF.search(operands)
    if ref:
        return None, ref.group(1)
    last = operands.split(",")[-1].split()[-1] if operands else ""
    m = _HEX.match(last)
    return (int(m.group(1), 16), None) if m else (None, None)


def parse_sass(text: str, source_name: str | None = None) -> list[Function]:
    """The functions of a disassembly (``cuobjdump -sass`` or ``nvdisasm``, with or without ``-gi``):
    their instructions with branch targets resolved to addresses and, where line information is
    printed, each instruction's inline chain of line numbers in ``source_name`` (innermost first;
    an instruction with no line comment of its own has the previous one's)."""
    functions: list[Function] = []
    current: Function | None = None
    labels: dict[str, int] = {}
    pending_labels: list[str] = []
    pending_lines: list[tuple[str, int, str | None, int | None]] = []
    chain: tuple[int, ...] = ()

    def start(name: str) -> None:
        nonlocal current, chain
        if current is not None and current.name == name:
            return
        current = Function(name)
        functions.append(current)
        chain = ()

    for raw in text.splitlines():
        m = _FUNC_CUOBJDUMP.match(raw) or _FUNC_NVDISASM.match(raw)
        if m:
            start(m.group(1))
            continue
        m = _LINE.search(raw)
        if m:
            pending_lines.append((m.group(1), int(m.group(2)), m.group(3), int(m.group(4)) if m.group(4) else None))
            continue
        m = _LABEL_DEF.match(raw)
        if m:
            pending_labels.append(m.group(1))
            continue
        m = _INSTR.match(raw)
        if not m or current is None:
            continue
        addr = int(m.group(1), 16)
        guard, opcode, operands = _split_instruction(m.group(2))
        for name in pending_labels:
            labels[name] = addr
        pending_labels.clear()
        if pending_lines:
            # First comment: the innermost location and its call site; each next one: the call site's own.
            first_file, first_line, _, _ = pending_lines[0]
            lines = [first_line if source_name is None or first_file.endswith(source_name) else -1]
            for _, _, at_file, at_line in pending_lines:
                if at_line is not None:
                    lines.append(at_line if source_name is None or at_file.endswith(source_name) else -1)
            chain = tuple(lines)
            pending_lines.clear()
        target, label = _branch_target(opcode, operands)
        current.instrs.append(Instr(addr, guard, opcode, operands, target, label, chain))
    for function in functions:
        for ins in function.instrs:
            if ins.label is not None:
                ins.target = labels[ins.label]
    return functions


# --------------------------------------------------------------------------------------------
# Control flow
# --------------------------------------------------------------------------------------------

@dataclass
class Block:
    index: int
    instrs: list[Instr]
    succ: list[int] = field(default_factory=list)
    pred: list[int] = field(default_factory=list)
    exits: bool = False  # ends in (or holds a guarded) EXIT/RET: a way out of the kernel
    div_edges: set[int] = field(default_factory=set)  # successors reached by a BRA.DIV

    @property
    def start(self) -> int:
        return self.instrs[0].addr

    @property
    def end(self) -> int:
        return self.instrs[-1].addr


def _conditional(ins: Instr) -> bool:
    """A branch that may fall through: guarded, or with a predicate operand before its target."""
    if ins.guard is not None:
        return True
    operands = [x.strip() for x in ins.operands.split(",")]
    return len(operands) > 1 and re.match(r"^!?U?P[0-9T]+$", operands[0]) is not None


def jump_calls(instrs: list[Instr]) -> set[int]:
    """Addresses of the CALLs that are jumps: on sm_80 ptxas leaves a warp-wide loop by a guarded
    ``CALL.REL.NOINC`` to the code after it (an ``EXIT``, or a ``BSYNC``), which never returns. A
    real call's target is a subroutine: from it, a ``RET`` comes before any ``EXIT``."""
    ordered = sorted(instrs, key=lambda ins: ins.addr)
    out = set()
    for ins in instrs:
        if ins.base != "CALL" or ins.target is None:
            continue
        after = (i for i in ordered if i.addr >= ins.target and (i.base == "RET" or (i.base == "EXIT" and i.guard is None)))
        if next((i.base for i in after), "EXIT") != "RET":
            out.add(ins.addr)
    return out


def _ends_block(ins: Instr, jumps: set[int]) -> bool:
    return ins.base in BRANCHES or ins.base in ("EXIT", "RET") or ins.addr in jumps


def build_cfg(instrs: list[Instr]) -> list[Block]:
    """Basic blocks of one function, in address order, with their edges."""
    if not instrs:
        return []
    by_addr = {ins.addr: i for i, ins in enumerate(instrs)}
    jumps = jump_calls(instrs)
    leaders = {0}
    for i, ins in enumerate(instrs):
        if ins.target is not None and (ins.base in BRANCHES or ins.addr in jumps):
            if ins.target not in by_addr:
                raise ValueError(f"branch at {ins.addr:#x} to {ins.target:#x}, which is no instruction")
            leaders.add(by_addr[ins.target])
        if _ends_block(ins, jumps) and i + 1 < len(instrs):
            leaders.add(i + 1)
    starts = sorted(leaders)
    blocks = [Block(n, instrs[s:e]) for n, (s, e) in enumerate(zip(starts, starts[1:] + [len(instrs)]))]
    block_of = {blk.start: blk.index for blk in blocks}
    for blk in blocks:
        last = blk.instrs[-1]
        nxt = blk.index + 1 if blk.index + 1 < len(blocks) else None
        if last.base in BRANCHES or last.addr in jumps:
            if last.target is None:
                # An indirect branch (BRX/JMX): its targets are not in the text.
                raise ValueError(f"indirect branch at {last.addr:#x}: {last.text}")
            tgt = block_of[last.target]
            blk.succ.append(tgt)
            if ".DIV" in last.opcode:
                blk.div_edges.add(tgt)
            if _conditional(last) and nxt is not None:
                blk.succ.append(nxt)
        elif last.base in ("EXIT", "RET"):
            blk.exits = True
            if last.guard is not None and nxt is not None:
                blk.succ.append(nxt)
        elif nxt is not None:
            blk.succ.append(nxt)
        blk.succ = list(dict.fromkeys(blk.succ))
    for blk in blocks:
        for s in blk.succ:
            blocks[s].pred.append(blk.index)
    return blocks


def dominators(blocks: list[Block], entry: int = 0) -> dict[int, set[int]]:
    """Each block reachable from ``entry`` -> the blocks that dominate it (itself included)."""
    reach, stack = {entry}, [entry]
    while stack:
        for s in blocks[stack.pop()].succ:
            if s not in reach:
                reach.add(s)
                stack.append(s)
    dom = {b: set(reach) for b in reach}
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for b in sorted(reach):
            if b == entry:
                continue
            preds = [p for p in blocks[b].pred if p in reach]
            new = set.intersection(*(dom[p] for p in preds)) | {b} if preds else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


@dataclass
class Loop:
    head: int
    latches: list[int]
    body: set[int]


def find_loops(blocks: list[Block], entry: int = 0) -> list[Loop]:
    """The natural loops of the blocks reachable from ``entry``: one per head, from the back
    edges (an edge to a block that dominates its source)."""
    dom = dominators(blocks, entry)
    loops: dict[int, Loop] = {}
    for b in dom:
        for s in blocks[b].succ:
            if s in dom and s in dom[b]:
                loop = loops.setdefault(s, Loop(s, [], {s}))
                loop.latches.append(b)
                stack = [b]
                while stack:
                    x = stack.pop()
                    if x not in loop.body:
                        loop.body.add(x)
                        stack.extend(p for p in blocks[x].pred if p in dom)
    return sorted(loops.values(), key=lambda lp: blocks[lp.head].start)


def back_edges(blocks: list[Block], loops: list[Loop]) -> set[tuple[int, int]]:
    return {(latch, lp.head) for lp in loops for latch in lp.latches}


Cost = tuple[int, int]  # (cold instructions, -instructions): smaller is the common path


def best_path(blocks: list[Block], nodes: set[int], start: int, ends: dict[int, int | None],
              removed: set[tuple[int, int]], cold: dict[int, int], through: set[int] | None = None) -> list[int] | None:
    """The common path through ``nodes`` from ``start`` to one of ``ends`` (block -> instructions of
    it that count, None for all): fewest cold instructions, then most instructions; with
    ``through``, only paths that pass one of those blocks. Edges in ``removed`` (back edges) are
    not followed; what is left must be acyclic."""
    indeg = {n: 0 for n in nodes}
    for n in nodes:
        for s in blocks[n].succ:
            if s in nodes and (n, s) not in removed:
                indeg[s] += 1
    order, ready = [], [n for n in nodes if indeg[n] == 0]
    while ready:
        n = ready.pop()
        order.append(n)
        for s in blocks[n].succ:
            if s in nodes and (n, s) not in removed:
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
    if len(order) != len(nodes):
        raise ValueError("the loop's blocks are not acyclic without its back edges (irreducible control flow)")

    def block_cost(n: int, upto: int | None = None) -> Cost:
        count = len(blocks[n].instrs) if upto is None else upto
        return (cold.get(n, 0) if upto is None else min(cold.get(n, 0), count), -count)

    # Best path to each (block, whether it has passed `through`).
    passed = lambda n, before: before or through is None or n in through  # noqa: E731
    best: dict[tuple[int, bool], tuple[Cost, list[int]]] = {(start, passed(start, False)): (block_cost(start), [start])}
    for n in order:
        for flag in (False, True):
            if (n, flag) not in best:
                continue
            (c_cold, c_len), path = best[(n, flag)]
            for s in blocks[n].succ:
                if s not in nodes or (n, s) in removed:
                    continue
                sc_cold, sc_len = block_cost(s)
                key = (s, passed(s, flag))
                cand = ((c_cold + sc_cold + (1 if s in blocks[n].div_edges else 0), c_len + sc_len), path + [s])
                if key not in best or cand[0] < best[key][0]:
                    best[key] = cand
    choices = []
    for end, upto in ends.items():
        if (end, True) in best:
            (c_cold, c_len), path = best[(end, True)]
            if upto is not None:  # only part of the last block counts
                full_cold, full_len = block_cost(end)
                part_cold, part_len = block_cost(end, upto)
                c_cold, c_len = c_cold - full_cold + part_cold, c_len - full_len + part_len
            choices.append(((c_cold, c_len), path))
    return min(choices)[1] if choices else None


# --------------------------------------------------------------------------------------------
# Cold source regions (__builtin_expect)
# --------------------------------------------------------------------------------------------

def _blank_comments(src: str) -> str:
    """``src`` with comments and string literals replaced by spaces (newlines kept)."""
    out, i, n = list(src), 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src[i] in "\"'":
            j = i + 1
            while j < n and src[j] != src[i]:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != "\n":
                out[k] = " "
        i = j
    return "".join(out)


def _match(code: str, i: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at ``code[i]``."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"unbalanced {open_} at {i}")


def _skip_ws(code: str, i: int) -> int:
    while i < len(code) and code[i].isspace():
        i += 1
    return i


def _statement_end(code: str, i: int) -> int:
    """Past the statement at ``i``: a block, an if (with its else chain) or one up to ``;``."""
    i = _skip_ws(code, i)
    if code[i] == "{":
        return _match(code, i, "{", "}")
    m = re.compile(r"if\b\s*(constexpr\b)?\s*\(").match(code, i)
    if m:
        j = _statement_end(code, _match(code, m.end() - 1, "(", ")"))
        k = _skip_ws(code, j)
        if re.compile(r"else\b").match(code, k):
            return _statement_end(code, k + 4)
        return j
    depth = 0
    for j in range(i, len(code)):
        if code[j] in "({[":
            depth += 1
        elif code[j] in ")}]":
            depth -= 1
        elif code[j] == ";" and depth == 0:
            return j + 1
    return len(code)


_CALL = re.compile(r"\b(?!if\b|while\b|for\b|switch\b|return\b|sizeof\b|__builtin_expect\b)[A-Za-z_]\w*\s*(<[^;()]*>)?\s*\(")


@dataclass(frozen=True)
class ColdSource:
    """Where ``__builtin_expect`` marks code unlikely (``cold_source``): ``lines`` whose code is
    all on the unlikely side, and ``call_lines`` that share the unlikely side with a hot part
    (``if (__builtin_expect(c, 0)) f();`` on one line) but hold calls only on the unlikely side,
    so that what those calls inline is cold while the test itself is not."""

    lines: frozenset[int] = frozenset()
    call_lines: frozenset[int] = frozenset()

    def holds(self, chain: tuple[int, ...]) -> bool:
        """Whether an instruction of this inline chain (innermost first) is cold."""
        return any(ln in self.lines for ln in chain) or any(ln in self.call_lines for ln in chain[1:])


def cold_source(source: str) -> ColdSource:
    """The lines of ``source`` (1-based) that run only on the side a ``__builtin_expect`` calls
    unlikely: the statement of ``if (__builtin_expect(c, 0))``, the ``else`` of ``if
    (__builtin_expect(c, 1))`` and, where that has no ``else`` and its statement returns (or
    breaks, continues), the rest of the enclosing block. A line is cold when all its code is on that side (braces and
    ``else`` aside, and it holds more than those), so that a condition sharing its line with a
    brace stays hot; a line whose unlikely part holds a call and whose likely part none is a
    cold call site."""
    code = _blank_comments(source)
    spans = []
    for m in re.finditer(r"\bif\s*\(\s*__builtin_expect\s*\(", code):
        cond_open = code.index("(", m.start())
        cond_end = _match(code, cond_open, "(", ")")
        args_open = m.end() - 1
        args = code[args_open + 1:_match(code, args_open, "(", ")") - 1]
        depth, last_comma = 0, -1
        for k, ch in enumerate(args):
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "," and depth == 0:
                last_comma = k
        expected = args[last_comma + 1:].strip()
        then_start = _skip_ws(code, cond_end)
        then_end = _statement_end(code, then_start)
        if expected in ("0", "false", "0L", "0l"):
            spans.append((then_start, then_end))
        else:
            k = _skip_ws(code, then_end)
            if re.compile(r"else\b").match(code, k):
                spans.append((k, _statement_end(code, k + 4)))
            elif _leaves(code[then_start:then_end]):
                # The likely branch returns: the rest of the enclosing block is its else.
                spans.append((k, _block_end(code, then_end)))
    lines, call_lines = set(), set()
    starts = [0] + [i + 1 for i, ch in enumerate(code) if ch == "\n"]
    for lo, hi in spans:
        first = code.count("\n", 0, lo)
        last = code.count("\n", 0, hi)
        for ln in range(first, last + 1):
            a = starts[ln]
            b = starts[ln + 1] - 1 if ln + 1 < len(starts) else len(code)
            outside = code[a:max(a, min(lo, b))] + code[min(max(hi, a), b):b]
            inside = code[max(a, lo):min(b, hi)]
            if not re.sub(r"[{}\s]|\belse\b", "", inside):
                continue
            if re.sub(r"[{}\s]|\belse\b", "", outside) == "":
                lines.add(ln + 1)
            elif _CALL.search(inside) and not _CALL.search(outside):
                call_lines.add(ln + 1)
    return ColdSource(frozenset(lines), frozenset(call_lines))


def _leaves(statement: str) -> bool:
    """Whether a statement ends by leaving its block: its last simple statement is a return,
    break, continue or goto."""
    body = statement.strip()
    while body.endswith("}"):
        body = body[:-1].rstrip()
    last = body.rstrip(";").rsplit(";", 1)[-1].lstrip("{ \t\n")
    return re.match(r"(return|break|continue|goto)\b", last) is not None


def _block_end(code: str, i: int) -> int:
    """The index of the brace that closes the block holding position ``i``."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            if depth == 0:
                return j
            depth -= 1
    return len(code)


def cold_lines(source: str) -> set[int]:
    """The wholly cold lines of ``source`` (``cold_source(source).lines``)."""
    return set(cold_source(source).lines)


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


def find_nvdisasm() -> str:
    found = shutil.which("nvdisasm")
    if found:
        return found
    for entry in map(pathlib.Path, sys.path):
        for candidate in sorted(entry.glob("nvidia/*/bin/nvdisasm")):
            return str(candidate)
    raise SystemExit("nvdisasm not found: put it on PATH, or pip install nvidia-cuda-nvdisasm")


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
