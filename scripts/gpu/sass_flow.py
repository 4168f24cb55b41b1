"""SASS as data, for scripts/gpu/sass_instructions.py: instructions and their classes,
the functions of a disassembly (``nvdisasm`` or ``cuobjdump`` text, with line
information where it was compiled with it), the control-flow graph, its
dominators and loops, the longest common path through a loop, and which source
lines are cold (``__builtin_expect``'s unlikely branches, the calls in them).
The method is described in sass_instructions.py's docstring."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CLASSES = ("mem", "float", "int", "conv", "control", "other")

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
