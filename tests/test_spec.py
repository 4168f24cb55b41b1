"""Kernel specs (fp4q/kernels/spec.py): every shipped spec's parameter list is
its template's extern "C" signature, its grid rules, and the argument block
the one launcher (fp4q/cuda/launch.py) packs from them, without a GPU."""

from __future__ import annotations

import ctypes
import re
import struct
import threading
import types

import pytest

from fp4q.cuda import driver
from fp4q.cuda import launch
from fp4q.cuda.launch import Launcher
from fp4q.jit.render import render
from fp4q.kernels.archs import ARCHS
from probe import numerics_probe_spec, training_probe_spec
from fp4q.kernels.spec import (PARAM_C_TYPES, Extent, KernelSpec, MapSpec, Param, StrideGrid, TileGrid,
                              WarpSpecialized, params)
from fp4q.kernels.variants import all_variants

_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(([^)]*)\)',
                        re.S)
_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)\s+((?:.*\\\n)*.*)$", re.M)


def signature(source: str, name: str) -> list[tuple[str, str]]:
    """(C type without qualifiers, name) per parameter of kernel ``name`` in ``source``."""
    kernels = {m.group(1): m.group(2) for m in _SIGNATURE.finditer(source)}
    text = kernels[name].strip()
    defines = {m.group(1): m.group(2).replace("\\\n", " ") for m in _DEFINE.finditer(source)}
    decls = [d.strip() for d in text.split(",")]
    while any(d in defines for d in decls):  # parameters written once as a macro, the whole list or a part
        decls = [e.strip() for d in decls for e in (defines[d].split(",") if d in defines else [d])]
    out = []
    for decl in decls:
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
        specs.setdefault(training_probe_spec(arch), f"{arch}/training_probe")
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
        Param("x", "f64")


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


def test_warp_specialized_threads_are_named_together_or_inherited():
    class Ring(WarpSpecialized, producer=32, group=128, groups="rings"):
        rings = 2

    class Inherits(Ring):
        pass

    assert Ring().threads == Inherits().threads == 32 + 2 * 128
    with pytest.raises(TypeError, match="must name producer, group and groups together, got producer=32, "
                                        "group=None, groups='rings'"):
        class Half(WarpSpecialized, producer=32, groups="rings"):
            pass


PACKED = params(("m0", "map"), ("m1", "map"), ("p", "ptr"), ("f", "f32"), ("n", "i32"), ("s", "i64"), ("t", "ptr"))
SLOTS = (("a", "ptr"), ("b", "ptr"), ("p", "ptr"), ("f", "f32"), ("n", "i32"), ("s", "i64"), ("t", "ptr"))
VALUE_KINDS = [ctypes.c_uint64, ctypes.c_float, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64]
SUCCESS = 0


@pytest.fixture
def launched(monkeypatch):
    """Launches through a fake driver: per launch, the thread, the table's address,
    its entries and the values they point at, read while the launch runs."""
    cu = driver.driver_api()
    context = cu.CUcontext(0x5000)
    seen = []

    def fake_launch(config, function, address, extra):
        slots = list((ctypes.c_uint64 * 7).from_address(address))
        values = [kind.from_address(slot).value for kind, slot in zip(VALUE_KINDS, slots[2:])]
        seen.append((threading.get_ident(), address, slots, values))
        return (cu.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(cu, "cuLaunchKernelEx", fake_launch)
    monkeypatch.setattr(cu, "cuCtxGetCurrent", lambda: (cu.CUresult.CUDA_SUCCESS, context))
    # A map "encoded" for a pointer lives at that pointer: its entry must hold it.
    monkeypatch.setattr(launch.tensor_maps, "get", lambda spec, what: types.SimpleNamespace(getPtr=lambda: spec.address))
    device = driver.Device(0, "Fake", (9, 0), 132, 232448, context, int(context))
    boxes = (MapSpec("m0", "a", 1, (16, 1)), MapSpec("m1", "b", 1, (16, 1)))
    extents = {"a": Extent(1, 16, 16), "b": Extent(1, 16, 16)}

    def launcher(params=PACKED, slots=SLOTS, fixed=None, maps=boxes):
        spec = KernelSpec("k", "kernels/k.cu", "sm_90a", (), (), params, 128, 0, StrideGrid(128), maps)
        return Launcher(spec, cu.CUfunction(1), device, 1, slots, fixed, extents=extents)

    return seen, launcher


def test_launcher_lays_out_the_values_before_the_table_maps_first(launched):
    seen, launcher = launched
    launcher()(0, False, (0x1000, 0x2000, 0xDEAD0, 1 / 3, -5, -(2**40), 0))
    (_, address, slots, read), = seen
    assert slots[:2] == [0x1000, 0x2000]
    assert read == [0xDEAD0, struct.unpack("f", struct.pack("f", 1 / 3))[0], -5, -(2**40), 0]
    for kind, slot in zip(VALUE_KINDS, slots[2:]):  # each value before the table, naturally aligned
        assert address - 48 <= slot < address and slot % ctypes.sizeof(kind) == 0


def test_launcher_reuses_its_threads_block_and_rewrites_every_value(launched):
    seen, new_launcher = launched
    launcher = new_launcher()
    launcher(0, False, (0x100, 0x200, 3, 0.5, 4, 5, 6))
    launcher(0, True, (0x700, 0x800, 9, 1.5, 10, 11, 12))
    worker = threading.Thread(target=launcher, args=(0, False, (0x100, 0x200, 3, 0.5, 4, 5, 6)))
    worker.start()
    worker.join()
    first, again, other = seen
    assert again[1] == first[1] and again[2] == [0x700, 0x800, *first[2][2:]] and again[3] == [9, 1.5, 10, 11, 12]
    assert other[0] != first[0] and other[1] != first[1]  # another thread, another block


def test_launcher_takes_each_parameter_from_the_slot_of_its_name(launched):
    seen, launcher = launched
    reordered = launcher(slots=(("t", "ptr"), ("b", "ptr"), ("p", "ptr"), ("f", "f32"), ("a", "ptr"), ("n", "i32"),
                                ("s", "i64"), ("unused", "f32")))
    reordered(0, False, (0, 0x200, 0xDEAD0, 0.5, 0x100, -5, 7, 2.5))
    assert seen[0][2][:2] == [0x100, 0x200] and seen[0][3] == [0xDEAD0, 0.5, -5, 7, 0]
    with pytest.raises(ValueError, match=r"parameter 's' of k is neither a slot of the call \['a', 'b', 'p', 'f', "
                                         r"'n', 't'\], nor a fixed value \[\], nor tickets"):
        launcher(slots=(("a", "ptr"), ("b", "ptr"), ("p", "ptr"), ("f", "f32"), ("n", "i32"), ("t", "ptr")))
    with pytest.raises(ValueError, match="parameter 'f' is a f32, but the call's slot of that name is a ptr"):
        launcher(slots=(("a", "ptr"), ("b", "ptr"), ("p", "ptr"), ("f", "ptr"), ("n", "i32"), ("s", "i64"),
                        ("t", "ptr")))


def test_launcher_packs_its_fixed_values_once(launched):
    seen, launcher = launched
    # "other" is no parameter of the kernel (a plan's fixed values serve every kernel of its op), and a
    # fixed value of a slot's name ("t") gives way to the call's value in that slot.
    fixed = launcher(slots=(("a", "ptr"), ("b", "ptr"), ("t", "ptr"), ("p", "ptr"), ("f", "f32")),
                     fixed={"s": 2**40, "n": -5, "other": 1, "t": 3})
    fixed(0, False, (0x100, 0x200, 7, 0xDEAD0, 0.5))
    fixed(0, False, (0x100, 0x200, 8, 0xBEEF0, 1.5))
    assert [values for *_, values in seen] == [[0xDEAD0, 0.5, -5, 2**40, 7], [0xBEEF0, 1.5, -5, 2**40, 8]]


def test_launcher_wants_maps_first(launched):
    with pytest.raises(ValueError, match="tensor-map parameters must come first"):
        launched[1](params(("p", "ptr"), ("m", "map")), (("p", "ptr"),))


def test_launcher_wants_a_map_spec_per_map_parameter_in_order(launched):
    m0, m1 = MapSpec("m0", "a", 1, (16, 1)), MapSpec("m1", "b", 1, (16, 1))
    for maps in ((m0,), (m1, m0), (m0, m1, MapSpec("m2", "a", 1, (16, 1)))):
        with pytest.raises(ValueError, match=r"the map parameters \('m0', 'm1'\) are not the spec's maps "
                                             + re.escape(str([m.param for m in maps]))):
            launched[1](maps=maps)


def test_launcher_passes_the_first_map_again_for_an_unread_one(launched):
    seen, launcher = launched
    unread = launcher(maps=(MapSpec("m0", "a", 1, (16, 1)), MapSpec("m1", "b", 1, (16, 1), geometry="unused")))
    unread(0, False, (0x1000, 0x2000, 0xDEAD0, 0.5, -5, 7, 0))
    assert seen[0][2][:2] == [0x1000, 0x1000]  # b's map is never encoded


def test_map_geometry():
    rows = MapSpec("x_map", "x", 2, (64, 128))
    assert rows.dims_strides(Extent(rows=300, width=7168, row_bytes=16384)) == ((7168, 300), (16384,))
    # Scales as 512-byte blocks of 128 rows x 4 groups: 300 rows and 70 groups are 3 x 18 blocks.
    blocks = MapSpec("sf_out_map", "sf_out", 1, (16, 32, 2, 1), geometry="sf_blocks")
    assert blocks.dims_strides(Extent(rows=300, width=70, row_bytes=0)) == ((16, 32, 18, 3), (16, 512, 512 * 18))
    with pytest.raises(ValueError, match=r"MapSpec geometry must be one of \('rows', 'sf_blocks', 'unused'\), "
                                         r"got 'tiles'"):
        MapSpec("m", "x", 1, (16, 1), geometry="tiles")
