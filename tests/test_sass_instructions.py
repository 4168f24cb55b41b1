"""scripts/gpu/sass_instructions.py and sass_flow.py: the parser, the classes, the control flow and the common path on
canned SASS written for these tests, and one real kernel per target (NVRTC and nvdisasm, no GPU)."""

from __future__ import annotations

import pathlib
import sys
import tempfile

import pytest

_SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "sass_instructions.py"
sys.path.insert(0, str(_SCRIPT.parent))
import sass_instructions as si  # noqa: E402

from scripts.gpu import sass_flow as sf  # noqa: E402


# --------------------------------------------------------------------------- classes

@pytest.mark.parametrize("opcode, cls", [
    ("LDG.E.128.CONSTANT", "mem"), ("STG.E.64", "mem"), ("LDS.128", "mem"), ("STS", "mem"), ("ULDC.64", "mem"),
    ("UTMASTG.2D", "mem"), ("FMUL", "float"), ("FFMA", "float"), ("FMNMX.NAN", "float"),
    ("HMNMX2.BF16_V2.NAN.XORSIGN", "float"), ("VHMNMX.BF16_V2", "float"), ("HADD2.F32", "float"),
    ("MUFU.RCP", "float"), ("IADD3.X", "int"), ("IMAD.WIDE.U32", "int"), ("LOP3.LUT", "int"), ("PRMT", "int"),
    ("SHF.R.U64", "int"), ("ISETP.GE.AND.EX", "int"), ("UIADD3", "int"), ("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", "conv"),
    ("F2I.FTZ.U32.TRUNC.NTZ", "conv"), ("I2F.U32.RP", "conv"), ("BRA", "control"), ("BSSY", "control"),
    ("BSYNC.RECONVERGENT", "control"), ("SYNCS.PHASECHK.TRANS64.TRYWAIT", "control"), ("WARPSYNC.ALL", "control"),
    ("EXIT", "control"), ("MOV", "other"), ("CS2R", "other"), ("SHFL.BFLY", "other"), ("S2R", "other"),
])
def test_classes(opcode, cls):
    assert sf.classify(opcode) == cls


# --------------------------------------------------------------------------- parsing

# cuobjdump -sass form: hex branch targets, encodings in trailing comments.
CUOBJDUMP = """
	code for sm_90a
		Function : toy
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                           /* 0x000fe20000000800 */
        /*0010*/              @!P0 BRA 0x40 ;                              /* 0x0000000000848947 */
                                                                           /* 0x000fea0003800000 */
        /*0020*/                   FMUL R2, R3, 0.5 ;                      /* 0x3f00000003027820 */
                                                                           /* 0x000fe20000400000 */
        /*0030*/              @!P1 BRA P2, 0x10 ;                          /* 0x0000000000848947 */
                                                                           /* 0x000fea0003800000 */
        /*0040*/                   EXIT ;                                  /* 0x000000000000794d */
                                                                           /* 0x000fea0003800000 */
"""


def test_parse_cuobjdump_form():
    (fn,) = sf.parse_sass(CUOBJDUMP)
    assert fn.name == "toy"
    assert [i.addr for i in fn.instrs] == [0x0, 0x10, 0x20, 0x30, 0x40]
    assert [i.opcode for i in fn.instrs] == ["LDC", "BRA", "FMUL", "BRA", "EXIT"]
    bra = fn.instrs[1]
    assert (bra.guard, bra.target, bra.operands) == ("!P0", 0x40, "0x40")
    assert fn.instrs[3].target == 0x10 and fn.instrs[3].guard == "!P1"
    assert fn.instrs[2].operands == "R2, R3, 0.5" and fn.instrs[2].guard is None
    assert all(i.chain == () for i in fn.instrs)


# nvdisasm -c -gi form: label targets, line comments with inline chains (innermost first).
NVDISASM = """
	.target	sm_90a
//--------------------- .text.toy --------------------------
	.section	.text.toy,"ax",@progbits
toy:
.text.toy:
	//## File "/tmp/toy.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/tmp/toy.cu", line 5 inlined at "/tmp/toy.cu", line 8
	//## File "/tmp/toy.cu", line 8 inlined at "/tmp/toy.cu", line 12
	//## File "/tmp/toy.cu", line 12
        /*0010*/                   FMUL R2, R3, 0.5 ;
        /*0020*/               @P0 BRA `(.L_x_1) ;
.L_x_0:
	//## File "/other/header.h", line 99 inlined at "/tmp/toy.cu", line 13
	//## File "/tmp/toy.cu", line 13
        /*0030*/                   CALL.REL.NOINC `($__internal_0_$__slowpath) ;
.L_x_1:
        /*0040*/                   EXIT ;
$__internal_0_$__slowpath:
        /*0050*/                   RET.REL.NODEC R18 `(toy) ;
"""


def test_parse_nvdisasm_form_with_line_info():
    (fn,) = sf.parse_sass(NVDISASM, "toy.cu")
    ldc, fmul, bra, call, exit_, ret = fn.instrs
    assert ldc.chain == (10,)
    assert fmul.chain == (5, 8, 12)
    assert bra.chain == (5, 8, 12)  # no comment of its own: the previous instruction's
    assert bra.target == 0x40 and bra.guard == "P0"
    assert call.chain == (-1, 13)  # a line of another file is not a line of the source
    assert call.target == 0x50
    assert exit_.chain == (-1, 13) and ret.base == "RET"


# --------------------------------------------------------------------------- control flow

def _fn(lines: list[str]) -> sf.Function:
    """A function from '<addr> <instruction>' lines (addresses in hex, cuobjdump style)."""
    text = "Function : toy\n" + "\n".join(f"        /*{a}*/ {body} ;" for a, body in (ln.split(None, 1) for ln in lines))
    return sf.parse_sass(text)[0]


# A grid-stride loop (head 0x10, latch 0xd0) holding a diamond (0x30: short side 0x40, long side
# 0x50-0x70), a slow path that a CALL takes (0x90, subroutine at 0x110) unless skipped (0x80), a
# wait whose retry sits out of line after the loop (0xa0 -> 0xf0, which jumps back to 0xb0: no
# loop) and a guarded exit after the work (0xc0).
LOOP = [
    "0000 MOV R0, RZ",
    "0010 LDG.E R1, desc[UR4][R2.64]",  # head
    "0020 FMUL R1, R1, R4",
    "0030 @P0 BRA 0x50",
    "0040 BRA 0x80",  # short side
    "0050 FADD R1, R1, 1",  # long side
    "0060 FADD R1, R1, 2",
    "0070 FADD R1, R1, 3",
    "0080 @!P1 BRA 0xa0",  # skips the slow path
    "0090 CALL.REL.NOINC 0x110",  # the slow path: cold
    "00a0 @!P2 BRA 0xf0",  # a wait: its retry out of line
    "00b0 STG.E desc[UR4][R2.64], R1",
    "00c0 @P3 EXIT",  # one pass: leave after the work
    "00d0 @P4 BRA 0x10",  # latch
    "00e0 EXIT",
    "00f0 @!P2 BRA 0xf0",  # retry until ready: a loop of its own
    "0100 BRA 0xb0",  # back into the loop: a backward jump, no loop
    "0110 MUFU.RCP R5, R5",
    "0120 RET.REL.NODEC R18 0x0",
]


def _blocks():
    blocks = sf.build_cfg(_fn(LOOP).instrs)
    return blocks, {b.start: b for b in blocks}


def test_blocks_and_edges():
    blocks, start = _blocks()
    assert sorted(start) == [0x0, 0x10, 0x40, 0x50, 0x80, 0x90, 0xa0, 0xb0, 0xd0, 0xe0, 0xf0, 0x100, 0x110]
    idx = {a: b.index for a, b in start.items()}
    assert set(start[0x10].succ) == {idx[0x50], idx[0x40]}  # conditional: target and fall-through
    assert start[0x40].succ == [idx[0x80]]  # unconditional
    assert start[0x50].succ == [idx[0x80]]  # fall-through
    assert start[0x90].succ == [idx[0xa0]] and len(start[0x90].instrs) == 1  # a CALL returns
    assert start[0xb0].exits and start[0xb0].succ == [idx[0xd0]]  # a guarded EXIT falls through
    assert start[0xe0].exits and start[0xe0].succ == []
    assert start[0x100].succ == [idx[0xb0]]


def test_loops_by_dominance():
    blocks, start = _blocks()
    loops = sf.find_loops(blocks)
    # The grid-stride loop and the retry; the jump back from the retry into the loop is no loop.
    assert sorted(blocks[lp.head].start for lp in loops) == [0x10, 0xf0]
    outer = next(lp for lp in loops if blocks[lp.head].start == 0x10)
    assert {blocks[b].start for b in outer.body} == {0x10, 0x40, 0x50, 0x80, 0x90, 0xa0, 0xb0, 0xd0, 0xf0, 0x100}
    assert [blocks[b].start for b in outer.latches] == [0xd0]


def test_jump_calls():
    # A CALL whose target reaches an EXIT before a RET leaves the loop (sm_80); one whose target
    # is a subroutine returns.
    instrs = _fn(LOOP + ["0130 @P5 CALL.REL.NOINC 0xe0"]).instrs
    assert sf.jump_calls(instrs) == {0x130}


def _lines_of(fn: sf.Function, addrs: set[int], line: int) -> None:
    for ins in fn.instrs:
        if ins.addr in addrs:
            ins.chain = (line,)


def _work(fn: sf.Function) -> sf.Function:
    _lines_of(fn, {0x20, 0x50, 0x60, 0x70}, 7)  # the kernel's work: anchor line 7
    return fn


def test_common_path_and_one_pass():
    a = si.analyse(_work(_fn(LOOP)), anchor_lines={7}, cold=set())
    # The head, the long side of the diamond, past the slow path, the wait's fall-through, the
    # store, the latch.
    assert a.loop_head == 0x10
    assert [i.addr for i in a.path] == [0x10, 0x20, 0x30, 0x50, 0x60, 0x70, 0x80, 0xa0, 0xb0, 0xc0, 0xd0]
    assert a.steady.instructions == 11 and a.steady.calls == 0 and a.steady.cold == 0
    assert a.steady.per_class == {"mem": 2, "float": 4, "int": 0, "conv": 0, "control": 5, "other": 0}
    assert a.loop_static == 15  # every instruction of the loop's blocks
    # One pass: up to the guarded EXIT after the store, without the latch.
    assert [i.addr for i in a.one_pass_path] == [0x10, 0x20, 0x30, 0x50, 0x60, 0x70, 0x80, 0xa0, 0xb0, 0xc0]


def test_an_unavoidable_call_is_counted_and_flagged():
    lines = [ln.replace("@!P1 BRA 0xa0", "NOP") for ln in LOOP]  # nothing skips the slow path
    a = si.analyse(_work(_fn(lines)), anchor_lines={7}, cold=set())
    assert 0x90 in {i.addr for i in a.path}
    assert a.steady.calls == 1 and a.steady.cold == 1


def test_cold_source_lines_steer_the_path():
    fn = _work(_fn(LOOP))
    _lines_of(fn, {0x50, 0x60, 0x70}, 3)  # the long side is an unlikely branch's
    _lines_of(fn, {0x20}, 7)
    a = si.analyse(fn, anchor_lines={7}, cold={3})
    assert [i.addr for i in a.path][:4] == [0x10, 0x20, 0x30, 0x40]
    assert a.steady.cold == 0


def test_a_cold_call_site_steers_the_path():
    fn = _work(_fn(LOOP))
    for ins in fn.instrs:
        if ins.addr in (0x50, 0x60, 0x70):
            ins.chain = (40, 3)  # inlined from a call on line 3, a cold call site
    a = si.analyse(fn, anchor_lines={7}, cold=sf.ColdSource(call_lines=frozenset({3})))
    assert [i.addr for i in a.path][:4] == [0x10, 0x20, 0x30, 0x40]


def test_unswitched_copies_the_likely_one():
    # Two copies of a loop (as ptxas unswitches on a launch parameter): the one whose common path
    # holds no cold code is the steady state, whatever their sizes.
    lines = [
        "0000 @P0 BRA 0x60",
        "0010 LDG.E R1, desc[UR4][R2.64]",  # copy 1: the unlikely one (cold work), smaller
        "0020 FMUL R1, R1, R4",
        "0030 @P1 BRA 0x10",
        "0040 EXIT",
        "0060 LDG.E R1, desc[UR4][R2.64]",  # copy 2: the likely one
        "0070 FMUL R1, R1, R4",
        "0080 FADD R1, R1, R4",
        "0090 @P1 BRA 0x60",
        "00a0 EXIT",
    ]
    fn = _fn(lines)
    _lines_of(fn, {0x20}, 7)
    fn.instrs[2].chain = (7, 3)  # the work of copy 1, inlined from a cold call site
    _lines_of(fn, {0x70}, 7)
    a = si.analyse(fn, anchor_lines={7}, cold=sf.ColdSource(call_lines=frozenset({3})))
    assert a.loop_head == 0x60 and a.steady.instructions == 4


def test_avoided_opcodes():
    a = si.analyse(_work(_fn(LOOP)), anchor_lines={7}, cold=set(), avoid=("FADD",))
    assert 0x50 not in {i.addr for i in a.path}


def test_no_loop_with_the_work_is_an_error():
    fn = _fn(LOOP)
    _lines_of(fn, {0x0}, 7)  # only the prologue is the work
    with pytest.raises(ValueError, match="no loop"):
        si.analyse(fn, anchor_lines={7}, cold=set())


# --------------------------------------------------------------------------- cold source

SOURCE = """\
int f(int x, bool finite) {
    int a = x + 1;
    if (__builtin_expect(!finite, 0)) {
        a = slow(a);
    }
    if (x > 3) {
        a += 2;
    } else if (__builtin_expect(x > 0, 1)) {
        a = fast(a);
    } else if (x == 0) {
        a = zero(a);
    } else {
        a = general(a); // if (__builtin_expect(y, 0)) { in a comment }
    }
    if (__builtin_expect(finite, 0)) return 1;
    return a;
}
"""


def test_cold_call_sites():
    # One line: the test is hot, the call is cold (what it inlines), on the line of a one-line
    # unlikely branch; not where the hot part of the line calls too.
    src = ("void f(bool ok, bool x) {\n"
           "    if (__builtin_expect(!ok, 0)) make_exact();\n"
           "    if (__builtin_expect(check(x), 0)) other(x);\n"
           "}\n")
    cold = sf.cold_source(src)
    assert cold.lines == frozenset() and cold.call_lines == {2}
    assert cold.holds((50, 2)) and not cold.holds((2,)) and not cold.holds((3, 9))


def test_cold_after_a_likely_return():
    src = ("int e(unsigned t) {\n"
           "    if (__builtin_expect(t < 9u, 1)) {\n"
           "        return t + 1;\n"
           "    }\n"
           "    if (t == 0) return -1;\n"
           "    return slow(t);\n"
           "}\n"
           "int g(unsigned t) {\n"
           "    if (__builtin_expect(t < 9u, 1)) {\n"
           "        t += 1;\n"
           "    }\n"
           "    return t;\n"
           "}\n")
    assert sf.cold_lines(src) == {5, 6}


def test_cold_lines():
    # The unlikely then-block (4), the else chain after the likely branch (its condition 10 and
    # bodies 11 and 13; lines of braces and else alone are not code); not the one-statement
    # unlikely branch of line 15, whose line also holds the hot test, nor the comment.
    assert sf.cold_lines(SOURCE) == {4, 10, 11, 13}


# --------------------------------------------------------------------------- real kernels

def _kernel(arch: str, name: str) -> si.Kernel:
    return next(k for k in si.kernels(arch) if k.name == name)


needs_tools = pytest.mark.skipif(
    si.nvdisasm_path() is None,
    reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")


def _measure(arch: str, name: str) -> dict:
    with tempfile.TemporaryDirectory() as cache_dir:
        return si.measure((arch, _kernel(arch, name), cache_dir, True))


def _path_text(record: dict) -> list[str]:
    return [row["instr"] for row in record["annotation"]]


def _record(arch, kernel, per_element, one_pass):
    per_class = {c: per_element / len(si.CLASSES) for c in si.CLASSES}
    steady = {"per_element": per_element, "per_class_per_element": per_class}
    return {"arch": arch, "kernel": kernel, "steady": steady,
            "one_pass": None if one_pass is None else {"per_element": one_pass}}


def test_comparison_pairs_the_kernels_of_both_runs():
    before = [_record("sm_90a", "quantize/a", 16.0, 13.0), _record("sm_90a", "quantize/gone", 9.0, None)]
    after = [_record("sm_90a", "quantize/a", 14.5, 13.0), _record("sm_90a", "quantize/new", 8.0, None),
             _record("sm_80", "quantize/a", 20.0, None)]
    lines = si.comparison(before, after).splitlines()
    assert lines[0].startswith("| arch | kernel | per elem | mem |")
    assert len(lines) == 3  # the header, its rule and the one kernel both runs have on that target
    assert lines[2].startswith("| sm_90a | quantize/a | 16.00 -> 14.50 | 2.67 -> 2.42 |")
    assert lines[2].endswith("| 13.00 |")  # unchanged: one number


@needs_tools
def test_vector_kernel_sm_90a():
    # 16 elements per thread, software e2m1: per element at least the product and the three roundings
    # onto the grid (4 float), their two minima as one three-input integer minimum, plus the group's
    # amax; at most about twice the documented 14.5 in all.
    r = _measure("sm_90a", "quantize/vector_nvfp4_x16")
    s = r["steady"]
    assert r["elements"] == 16
    assert 10 <= s["per_element"] <= 24
    assert s["per_class_per_element"]["float"] >= 4
    assert sum(t.startswith("VIMNMX3") for t in _path_text(r)) == 16
    assert s["per_class_per_element"]["conv"] < 0.5  # no e2m1 conversion instruction on sm_90a
    path = _path_text(r)
    # The common path is the fast e2m1 variant: signs by byte permutes, no clamp at M + 7.
    assert sum(t.startswith("PRMT") for t in path) >= 8
    assert not any("12582919" in t or "0x4b400007" in t for t in path)
    # Two 16-byte loads of the next unit, one 8-byte store of codes in the loop; none in one pass.
    assert sum(t.lstrip("@!P0123456789 ").startswith("LDG.E.128") for t in path) == 2
    assert r["one_pass"]["instructions"] < s["instructions"]
    assert r["one_pass"]["per_class"]["mem"] < s["per_class"]["mem"]
    assert s["calls"] == 0


@needs_tools
def test_vector_kernel_sm_100f():
    # The hardware e2m1 pair conversion: one per two elements, and far fewer float instructions.
    r = _measure("sm_100f", "quantize/vector_nvfp4_x16")
    s = r["steady"]
    assert s["per_class_per_element"]["conv"] >= 0.5
    assert s["per_class_per_element"]["float"] < 4
    assert 4 <= s["per_element"] <= 14
    assert sum("E2M1" in t for t in _path_text(r)) == 8


@needs_tools
def test_vector_kernel_sm_80():
    # No packed |x| maximum and software e4m3 as well: more integer work than on sm_90a.
    r = _measure("sm_80", "quantize/vector_nvfp4_x16")
    s = r["steady"]
    assert 10 <= s["per_element"] <= 26
    assert s["per_class_per_element"]["float"] >= 4  # the product and the three roundings; integer minima
    assert s["per_class_per_element"]["conv"] == 0  # e4m3 and e2m1 in software
    assert not any("F2FP" in t for t in _path_text(r))
