"""Kernel specs (fp4q/kernels/spec.py): every shipped spec's parameter list is
its template's extern "C" signature, its grid rules, and the one argument
packer (fp4q/cuda/launch.py) that reads them, without a GPU."""

from __future__ import annotations

import ctypes
import re
import struct

import pytest

from fp4q.cuda.launch import ArgPacker
from fp4q.jit.render import render
from fp4q.kernels.archs import ARCHS
from fp4q.kernels.quantize import numerics_probe_spec
from fp4q.kernels.spec import PARAM_C_TYPES, Param, StrideGrid, TileGrid, params
from fp4q.kernels.variants import all_variants

_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(([^)]*)\)',
                        re.S)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)\s+((?:.*\\\n)*.*)$", re.M)


def signature(source: str, name: str) -> list[tuple[str, str]]:
    """(C type without qualifiers, name) per parameter of kernel ``name`` in ``source``."""
    kernels = {m.group(1): m.group(2) for m in _SIGNATURE.finditer(source)}
    text = kernels[name].strip()
    defines = {m.group(1): m.group(2).replace("\\\n", " ") for m in _DEFINE.finditer(source)}
    while text in defines:  # a parameter list written once as a macro
        text = defines[text].strip()
    out = []
    for decl in text.split(","):
        words = decl.replace("*", " * ").split()
        words = [w for w in words if w not in ("const", "__restrict__", "__grid_constant__")]
        out.append(("".join(words[:-1]), words[-1]))
    return out


def shipped_specs():
    specs = {}
    for arch in ARCHS:
        for name, cfg in all_variants(arch).items():
            specs.setdefault(cfg.spec, f"{arch}/{name}")
        specs.setdefault(numerics_probe_spec(arch), f"{arch}/numerics_probe")
    return specs


SPECS = shipped_specs()


@pytest.mark.parametrize("spec", list(SPECS), ids=list(SPECS.values()))
def test_params_are_the_templates_signature(spec):
    declared = signature(render(spec).source, spec.name)
    assert [name for _, name in declared] == [p.name for p in spec.params]
    for (c_type, name), param in zip(declared, spec.params):
        assert c_type in PARAM_C_TYPES[param.kind], f"{name}: {c_type} is not a {param.kind}"


def test_signature_reader_sees_a_wrong_list():
    source = 'extern "C" __global__ void k(const u8* __restrict__ a, i32 n) {}'
    assert signature(source, "k") == [("u8*", "a"), ("i32", "n")]


def test_param_kind_is_checked():
    with pytest.raises(ValueError, match="Param kind must be one of"):
        Param("x", "u64")


@pytest.mark.parametrize("rows, cols, persistent, sms, per_sm, expected", [
    (128, 128, True, 132, 2, (2, False)),
    (1024, 8192, True, 132, 2, (264, True)),
    (1024, 8192, False, 132, 2, (1024, False)),
    (129, 130, True, 132, 1, (6, False)),
])
def test_tile_grid(rows, cols, persistent, sms, per_sm, expected):
    assert TileGrid(128, 64, persistent).size(rows, cols, sms, per_sm) == expected


def test_stride_grid():
    assert StrideGrid(256, waves=4).size(0, 132, 2) == 1
    assert StrideGrid(256, waves=4).size(1000, 132, 2) == 4
    assert StrideGrid(256, waves=4).size(10**9, 132, 2) == 132 * 2 * 4
    assert StrideGrid(2048, max_ctas_per_sm=4).size(10**9, 132, 8) == 132 * 4


def test_packer_lays_out_maps_then_pointed_scalars():
    packer = ArgPacker(params(("m0", "map"), ("m1", "map"), ("p", "ptr"), ("f", "f32"), ("n", "i32"),
                              ("s", "i64"), ("t", "ptr")))
    block = packer.pack(dict(m0=0x1000, m1=0x2000, p=0xDEAD0, f=1 / 3, n=-5, s=-(2**40), t=0))
    slots = (ctypes.c_uint64 * 7).from_buffer(block)
    assert slots[0] == 0x1000 and slots[1] == 0x2000
    base = ctypes.addressof(block)
    values = [ctypes.c_uint64, ctypes.c_float, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64]
    read = [kind.from_address(slot).value for kind, slot in zip(values, slots[2:])]
    assert read == [0xDEAD0, struct.unpack("f", struct.pack("f", 1 / 3))[0], -5, -(2**40), 0]
    for kind, slot in zip(values, slots[2:]):  # each value inside the block, naturally aligned
        assert base + 56 <= slot < base + ctypes.sizeof(block) and slot % ctypes.sizeof(kind) == 0


def test_packer_wants_maps_first():
    with pytest.raises(ValueError, match="tensor-map parameters must come first"):
        ArgPacker(params(("p", "ptr"), ("m", "map")))


def test_packer_names_a_missing_argument():
    with pytest.raises(KeyError, match="'n'"):
        ArgPacker(params(("p", "ptr"), ("n", "i32"))).pack(dict(p=1))
