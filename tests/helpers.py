"""Input generators and comparisons shared by the test files."""

from __future__ import annotations

import numpy as np

SPECIAL_BF16 = np.array(
    [0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001, 0x807F, 0x7F7F, 0xFF7F, 0x0080, 0x3F80],
    dtype=np.uint16,
)


def bf16_bits(values) -> np.ndarray:
    """float32 values to bf16 bits by truncation (any bf16 is a valid input)."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def random_bf16(shape, rng, scale=1.0, specials=0.0) -> np.ndarray:
    """Random bf16 bits, normal(0, scale); a fraction ``specials`` replaced by NaN/Inf/-0/subnormals."""
    bits = bf16_bits(rng.standard_normal(shape).astype(np.float32) * np.float32(scale))
    if specials:
        mask = rng.random(shape) < specials
        bits[mask] = rng.choice(SPECIAL_BF16, size=int(mask.sum()))
    return bits


def _edge_families() -> list[np.ndarray]:
    f = np.float32
    return [
        np.zeros(16, f),  # all-zero groups
        np.full(16, -0.0, f),  # -0
        np.full(16, np.nan, f),  # all-NaN: amax 0
        np.array([np.nan, 1, -2, 3] * 4, f),  # NaN ignored in amax
        np.array([np.inf, 1, -1, 0] * 4, f),  # Inf: scale 448
        np.array([-np.inf, 5, -5, 0.1] * 4, f),
        np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -6], f),
        np.array([3e38, 1e-38, -1e-40, 1e-45] * 4, f),  # huge amax, subnormals
        np.array([1e-40, -2e-40, 3e-41, 0] * 4, f),  # subnormal-only groups
        np.linspace(-7, 7, 16, dtype=f),
        np.array([448 * 6 * 2, 1, 2, 3] * 4, f),  # scale saturates at 448
        np.array([1e-30, 2e-31, -3e-30, 0] * 4, f),  # e4m3 subnormal/underflow scales
    ]


EDGE_FAMILIES = _edge_families()


def edge_groups(k: int) -> np.ndarray:
    """One row per edge-case family of the spec, each row K wide (bf16 bits)."""
    g = k // 16
    return np.stack([np.tile(bf16_bits(group), g)[:k].astype(np.uint16) for group in EDGE_FAMILIES])


def mixed_groups(shape, rng, edge_fraction=0.1, tiny_fraction=0.1) -> np.ndarray:
    """Random bf16 bits where each 16-element group is, independently, normal data, one of the edge
    families (``edge_fraction``), or normal data shrunk by 10**-1..10**-6 (``tiny_fraction``: some of
    their scales land among the e4m3 subnormals, where |x * inv| can pass 6), so that neighbouring
    groups, chunks and lanes mix every case."""
    m, k = shape
    groups = rng.standard_normal((m, k // 16, 16)).astype(np.float32)
    kind = rng.random((m, k // 16))
    tiny = kind < tiny_fraction
    groups[tiny] *= (10.0 ** -rng.uniform(1, 6, size=(int(tiny.sum()), 1))).astype(np.float32)
    edge = (kind >= tiny_fraction) & (kind < tiny_fraction + edge_fraction)
    groups[edge] = np.stack(EDGE_FAMILIES)[rng.integers(0, len(EDGE_FAMILIES), size=int(edge.sum()))]
    return bf16_bits(groups.reshape(m, k))


def assert_bytes_equal(got, want, what: str) -> None:
    """The arrays hold the same bits (floats compared as their bit patterns, so NaN equals
    the same NaN and 0.0 differs from -0.0)."""
    got = _as_bits(np.asarray(got))
    want = _as_bits(np.asarray(want))
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.argwhere(got != want)
    if bad.size:
        first = [tuple(int(i) for i in idx) for idx in bad[:8]]
        details = ", ".join(f"{i}: got {got[i]:#04x} want {want[i]:#04x}" for i in first)
        raise AssertionError(f"{what}: {len(bad)} of {got.size} bytes differ; first {details}")


def assert_outputs_equal(cp, got, want, what: str) -> None:
    """An op's device outputs (q, sf and, where returned, the computed scale) hold the
    reference's bits, after the stream's work is done."""
    cp.cuda.get_current_stream().synchronize()
    assert len(got) == len(want), what
    for name, g, w in zip(("q", "sf", "scale"), got, want):
        assert_bytes_equal(cp.asnumpy(g), w, f"{name} {what}")


def _as_bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}") if a.dtype.kind in "fV" else a  # V: ml_dtypes bfloat16


# A training-sized tensor of 2**32 + 1.5 * 2**20 elements (8 GB of bf16), and rows whose first byte lies
# just below and above 2**31 and 2**32 bytes (2**33 for 4-byte values), and at its ends.
BIG_M, BIG_K = (1 << 18) + 96, 1 << 14
BIG_ROWS = [0, (1 << 16) - 1, 1 << 16, (1 << 17) - 1, 1 << 17, (1 << 18) - 1, 1 << 18, BIG_M - 1]


def device_random_bits(cp, shape, dtype, chunk_rows=4096):
    """A device array of uniformly random bit patterns (every bf16 / byte value, NaN and Inf
    included), filled a block of rows at a time so that no full-size temporary is needed."""
    info = np.iinfo(dtype)
    a = cp.empty(shape, dtype=dtype)
    for start in range(0, shape[0], chunk_rows):
        block = a[start:start + chunk_rows]
        block[...] = cp.random.randint(int(info.min), int(info.max) + 1, size=block.shape, dtype=cp.int32).astype(dtype)
    return a


def require_free_device_memory(cp, nbytes: int) -> None:
    """Skip where the device has less free memory than the test needs (a hardware limit)."""
    import pytest

    free, _ = cp.cuda.runtime.memGetInfo()
    if free < nbytes:
        pytest.skip(f"needs {nbytes / 2**30:.0f} GiB of free device memory, {free / 2**30:.1f} GiB free")
