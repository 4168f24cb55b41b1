"""TMA tensor-map specs: every driver rule checked with a message, and the LRU cache of encoded maps."""

import ctypes
import math
import re

import pytest

from fp4q.cuda import tma
from fp4q.kernels.quantize import QuantizeConfig
from fp4q.kernels.spec import Swizzle
from fp4q.cuda.tma import TensorMapCache, TensorMapSpec, TmaError

S = Swizzle


def in_spec(**changes) -> TensorMapSpec:
    """The input map of the default config for a 1024 x 4096 bf16 tensor."""
    fields = dict(address=0x7F0000000000, element_bytes=2, dims=(4096, 1024), strides=(8192,), box=(64, 128),
                  swizzle=S.B128, l2_promotion=256)
    fields.update(changes)
    return TensorMapSpec(**fields)


def sf_spec(**changes) -> TensorMapSpec:
    """The 4-D swizzled-scales map, as the API builds it."""
    cfg = QuantizeConfig()
    k_blocks, m_blocks = 64, 8
    fields = dict(address=0x7F0000100000, element_bytes=1, dims=(16, 32, k_blocks, m_blocks),
                  strides=(16, 512, 512 * k_blocks), box=tuple(reversed(cfg.scales_box)))
    fields.update(changes)
    return TensorMapSpec(**fields)


def raises_tma(*fragments):
    return pytest.raises(TmaError, match=".*".join(re.escape(f) for f in fragments))


def test_tma_error_is_a_value_error():
    assert issubclass(TmaError, ValueError)


@pytest.mark.parametrize(
    "spec",
    [
        in_spec(),
        in_spec(swizzle=S.NONE, box=(256, 256)),
        in_spec(swizzle=S.B32, box=(16, 128)),
        in_spec(swizzle=S.B64, box=(32, 256)),
        in_spec(dims=(1 << 32, 1), strides=(1 << 39,)),
        in_spec(dims=(16,), strides=(), box=(8,), swizzle=S.NONE),
        TensorMapSpec(0x1000, 1, (64, 128), (64,), (64, 128), S.B64),
        sf_spec(),
        TensorMapSpec(0x10, 1, (16, 2, 2, 2, 2), (16, 32, 64, 128), (16, 2, 2, 2, 2)),
    ],
)
def test_valid_specs_pass(spec):
    assert spec.validate("x") is None


def test_unaligned_base_address():
    with raises_tma("x: the base address must be 16-byte aligned, got 0x7f0000000008"):
        in_spec(address=0x7F0000000008).validate("x")
    with raises_tma("sf_out: the base address must be 16-byte aligned, got 0x1"):
        sf_spec(address=1).validate("sf_out")


@pytest.mark.parametrize("stride", [8200, 8, 1, 0, -16, 1 << 40, (1 << 40) + 16])
def test_bad_stride(stride):
    with raises_tma("out: the stride of dimension 1 must be a positive multiple of 16 bytes below 2**40, got",
                    str(stride)):
        in_spec(strides=(stride,)).validate("out")


def test_bad_stride_names_its_dimension():
    with raises_tma("the stride of dimension 3 must be a positive multiple of 16 bytes below 2**40, got 520"):
        sf_spec(strides=(16, 512, 520)).validate("sf_out")


@pytest.mark.parametrize("index, value", [(0, 0), (1, 0), (0, 257), (1, 512), (1, -1)])
def test_bad_box_dimension(index, value):
    box = [64, 128]
    box[index] = value
    with raises_tma(f"x: box dimension {index} must be in [1, 256], got {value}"):
        in_spec(box=tuple(box), swizzle=S.NONE).validate("x")


@pytest.mark.parametrize("element_bytes, inner, nbytes", [(2, 4, 8), (2, 12, 24), (1, 8, 8), (1, 40, 40)])
def test_inner_box_not_a_multiple_of_16_bytes(element_bytes, inner, nbytes):
    with raises_tma(f"x: the inner box must span a multiple of 16 bytes, got {nbytes}"):
        in_spec(element_bytes=element_bytes, box=(inner, 128), swizzle=S.NONE).validate("x")


@pytest.mark.parametrize("swizzle, inner", [(S.B128, 128), (S.B64, 64), (S.B32, 32), (S.B32, 256)])
def test_inner_box_larger_than_swizzle_span(swizzle, inner):
    with raises_tma(f"x: the inner box spans {inner * 2} bytes, more than the {swizzle.value}-byte swizzle span"):
        in_spec(box=(inner, 128), swizzle=swizzle).validate("x")


@pytest.mark.parametrize("rank", [0, 6])
def test_bad_rank(rank):
    spec = TensorMapSpec(0x1000, 1, (16,) * rank, (16,) * max(rank - 1, 0), (16,) * rank)
    with raises_tma(f"x: rank must be 1..5, got {rank}"):
        spec.validate("x")


@pytest.mark.parametrize("index, dim", [(0, 0), (1, 0), (0, (1 << 32) + 1), (1, 1 << 33), (1, -5)])
def test_bad_dimension(index, dim):
    dims = [4096, 1024]
    dims[index] = dim
    with raises_tma(f"x: dimension {index} must be in [1, 2**32], got {dim}"):
        in_spec(dims=tuple(dims)).validate("x")


@pytest.mark.parametrize(
    "strides, box",
    [((), (64, 128)), ((8192, 16), (64, 128)), ((8192,), (64,)), ((8192,), (64, 128, 1))],
)
def test_mismatched_strides_or_box_length(strides, box):
    with raises_tma("x: need 1 strides and 2 box dims, got", str(strides), str(box)):
        in_spec(strides=strides, box=box).validate("x")


def test_first_broken_rule_is_reported():
    # rank before alignment before dims: the message names the structural problem first
    with raises_tma("need 1 strides"):
        in_spec(address=3, strides=()).validate("x")
    with raises_tma("base address"):
        in_spec(address=3, dims=(0, 1)).validate("x")


def test_encode_validates_before_touching_the_driver(monkeypatch):
    def boom():
        raise AssertionError("the driver must not be reached for an invalid spec")

    monkeypatch.setattr(tma, "_enums", boom)
    with raises_tma("q: box dimension 1 must be in [1, 256], got 0"):
        tma.encode(in_spec(box=(64, 0)), "q")


# --- TensorMapCache ---------------------------------------------------------------------------------------------


class FakeEncode:
    def __init__(self):
        self.calls = []

    def __call__(self, spec, what):
        spec.validate(what)
        self.calls.append((spec, what))
        return object()  # a fresh sentinel per encode


@pytest.fixture
def fake_encode(monkeypatch):
    fake = FakeEncode()
    monkeypatch.setattr(tma, "encode", fake)
    return fake


def test_cache_hit_and_miss_counting(fake_encode):
    cache = TensorMapCache()
    a = cache.get(in_spec(), "x")
    assert (cache.hits, cache.misses, len(fake_encode.calls)) == (0, 1, 1)
    assert cache.get(in_spec(), "x") is a  # an equal spec, another instance
    assert cache.get(in_spec(), "other name") is a  # the name is only for messages
    assert (cache.hits, cache.misses, len(fake_encode.calls)) == (2, 1, 1)
    b = cache.get(in_spec(address=0x7F0000000010), "x")
    assert b is not a
    c = cache.get(in_spec(dims=(4096, 1023)), "x")
    d = cache.get(in_spec(swizzle=S.NONE), "x")
    e = cache.get(in_spec(l2_promotion=0), "x")
    assert len({id(v) for v in (a, b, c, d, e)}) == 5
    assert (cache.hits, cache.misses, len(fake_encode.calls)) == (2, 5, 5)


def test_cache_lru_eviction(fake_encode):
    cache = TensorMapCache(capacity=2)
    spec = [in_spec(address=0x1000 * (i + 1)) for i in range(3)]
    m0 = cache.get(spec[0], "x")
    m1 = cache.get(spec[1], "x")
    assert cache.get(spec[0], "x") is m0  # 0 is now the most recently used
    cache.get(spec[2], "x")  # evicts 1, the least recently used
    assert len(fake_encode.calls) == 3
    assert cache.get(spec[0], "x") is m0  # still cached
    assert len(fake_encode.calls) == 3
    again = cache.get(spec[1], "x")  # was evicted: encoded again, evicting 2
    assert again is not m1
    assert len(fake_encode.calls) == 4 and fake_encode.calls[-1][0] == spec[1]
    cache.get(spec[2], "x")
    assert len(fake_encode.calls) == 5
    assert (cache.hits, cache.misses) == (2, 5)


def test_cache_never_exceeds_capacity(fake_encode):
    cache = TensorMapCache(capacity=4)
    for i in range(20):
        cache.get(in_spec(address=0x100 * (i + 1)), "x")
    assert len(cache._maps) == 4
    # the last four are the ones kept
    for i in range(16, 20):
        cache.get(in_spec(address=0x100 * (i + 1)), "x")
    assert cache.hits == 4 and cache.misses == 20


def test_cache_does_not_store_failed_encodes(fake_encode):
    cache = TensorMapCache()
    with raises_tma("base address"):
        cache.get(in_spec(address=8), "x")
    assert (cache.hits, cache.misses, len(cache._maps)) == (0, 0, 0)
    with raises_tma("base address"):
        cache.get(in_spec(address=8), "x")


# --- encode on a GPU --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [QuantizeConfig(), QuantizeConfig(input_box_k=16, input_swizzle=S.B32, output_box_k=16,
                                                                  output_swizzle=S.NONE)])
def test_encode_the_three_kernel_maps(cfg):
    import cupy as cp

    rows, cols = 300, 1024
    x = cp.zeros((rows, cols), dtype=cp.uint16)
    q = cp.zeros((rows, cols // 2), dtype=cp.uint8)
    k_blocks, m_blocks = math.ceil(cols / 64), math.ceil(rows / 128)
    sf = cp.zeros((m_blocks, k_blocks, 32, 16), dtype=cp.uint8)
    specs = {
        "x": TensorMapSpec(x.data.ptr, 2, (cols, rows), (cols * 2,), (cfg.input_box_k, cfg.tile_m), cfg.input_swizzle,
                           l2_promotion=256),
        "out": TensorMapSpec(q.data.ptr, 1, (cols // 2, rows), (cols // 2,), (cfg.output_box_k, cfg.tile_m),
                             cfg.output_swizzle),
        "sf_out": TensorMapSpec(sf.data.ptr, 1, (16, 32, k_blocks, m_blocks), (16, 512, 512 * k_blocks),
                                tuple(reversed(cfg.scales_box))),
    }
    for what, spec in specs.items():
        tensor_map = tma.encode(spec, what)
        # The map is opaque; the driver must at least have written its 128 bytes.
        encoded = bytes((ctypes.c_ubyte * 128).from_address(int(tensor_map.getPtr())))
        assert any(encoded), what
