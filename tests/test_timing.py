"""scripts/bench/timing.py without a GPU: how repetitions are chunked behind the spin kernel and how long it spins."""

from __future__ import annotations

from scripts.bench import timing


def test_single_launch_reps_fit_one_chunk():
    assert timing.chunk_size(50, 1) == 50


def test_chunks_never_overfill_the_queue():
    for entries in (1, 8, 40, 48, 1000):
        n = timing.chunk_size(200, entries)
        assert 1 <= n <= 200
        assert n == 1 or n * (entries + 2 + timing.FLUSH_PASSES) <= timing.QUEUE_BUDGET


def test_spin_covers_the_host_time_of_the_chunk():
    assert timing.spin_us(10, 1.0) == 10 * timing.MIN_SPIN_PER_REP_US + 2000.0
    assert timing.spin_us(10, 1000.0) == 10 * 2100.0 + 2000.0


def test_copy_bytes():
    assert timing.copy_bytes(16, 4096) == (2 * 16 * 4096, 16 * 4096 // 2 + 16 * 4096 // 16)
