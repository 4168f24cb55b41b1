"""The binary cache under stress, with a real kernel compiled by NVRTC (no GPU
needed; issue "Reliability"): 8 processes cold-starting on one empty cache
directory, damaged entries, an unwritable or full cache directory, and
entries made under another NVRTC or package version.

Tests run as root here, so read-only directories are simulated (a cache
path under a regular file; os.replace failing with ENOSPC) rather than made
with chmod.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pathlib
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
from cuda.pathfinder import DynamicLibNotFoundError

import fp4q._version
from fp4q.jit import cache as cache_mod
from fp4q.jit import compiler
from fp4q.jit.cache import BinaryCache, CacheWarning
from fp4q.jit.render import render
from fp4q.kernels.quantize import QuantizeConfig, SimtConfig

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PROCESSES = 8


@pytest.fixture(scope="module")
def source():
    """The rendered source of the default config, the variant every process compiles."""
    return render(QuantizeConfig().spec)


@pytest.fixture(autouse=True)
def _needs_nvrtc():
    """Skips only where libnvrtc cannot be found; any other NVRTC failure fails the test."""
    try:
        compiler.nvrtc_version()
    except DynamicLibNotFoundError as exc:
        pytest.skip(f"libnvrtc cannot be loaded here: {exc}")


def entry_files(directory):
    return sorted(p for p in pathlib.Path(directory).rglob("*") if p.is_file())


def _env(cache_dir):
    return {
        **os.environ,
        "FP4Q_CACHE_DIR": str(cache_dir),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }


CHILD = textwrap.dedent(
    """
    import hashlib, os, sys, time, warnings
    from fp4q.jit.cache import CacheWarning
    warnings.simplefilter("error", CacheWarning)
    go = sys.argv[1]
    from fp4q.jit.render import render
    from fp4q.jit.compiler import compile_source
    from fp4q.kernels.quantize import QuantizeConfig
    src = render(QuantizeConfig().spec)
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("never told to go")
        time.sleep(0.001)
    kernel = compile_source(src)
    assert kernel.cubin[:4] == b"\\x7fELF", kernel.cubin[:16]
    print("hit" if kernel.cache_hit else "built", kernel.key, hashlib.sha256(kernel.cubin).hexdigest())
    """
)


def test_processes_cold_start_compiling_the_same_kernel(tmp_path, source):
    cache_dir = tmp_path / "cache"  # empty: does not even exist yet
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(go)], env=_env(cache_dir),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    time.sleep(1.0)  # let the interpreters import and render, then release them together
    go.write_bytes(b"")
    outputs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    lines = [out.split() for out, _ in outputs]
    assert {line[1] for line in lines} == {lines[0][1]}, "processes computed different keys"
    assert {line[2] for line in lines} == {lines[0][2]}, "processes got different cubins"
    assert any(line[0] == "built" for line in lines)
    key, cubin_sha = lines[0][1], lines[0][2]
    # Exactly one entry, under its key, and no temporary file left behind.
    assert entry_files(cache_dir) == [BinaryCache(cache_dir)._path(key)]
    # A fresh process reads it as a hit.
    fresh = subprocess.run([sys.executable, "-c", CHILD, str(go)], env=_env(cache_dir),
                           capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.split() == ["hit", key, cubin_sha]
    # ... and so does this process, with the same bytes.
    kernel = compiler.compile_source(source, BinaryCache(cache_dir))
    assert kernel.cache_hit and kernel.key == key and hashlib.sha256(kernel.cubin).hexdigest() == cubin_sha


def _populate(directory, source):
    kernel = compiler.compile_source(source, BinaryCache(directory))
    assert not kernel.cache_hit
    (path,) = entry_files(directory)
    return kernel, path


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "flipped_byte"])
def test_damaged_entry_is_rebuilt(tmp_path, source, damage):
    good, path = _populate(tmp_path, source)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(flipped))
    cache = BinaryCache(tmp_path)
    rebuilt = compiler.compile_source(source, cache)
    assert not rebuilt.cache_hit and cache.misses == 1
    assert rebuilt.key == good.key and rebuilt.cubin == good.cubin
    assert path.is_file() and path.read_bytes() != b"", "the rebuilt entry was not written back"
    assert entry_files(tmp_path) == [path]  # (the log inside says the compile time, so bytes may differ)
    again = compiler.compile_source(source, BinaryCache(tmp_path))
    assert again.cache_hit and again.cubin == good.cubin


def test_entry_with_a_valid_checksum_but_a_foreign_payload_is_rebuilt(tmp_path, source):
    good, path = _populate(tmp_path, source)
    BinaryCache(tmp_path).put(good.key, b"not a packed cubin at all")
    rebuilt = compiler.compile_source(source, BinaryCache(tmp_path))
    assert not rebuilt.cache_hit and rebuilt.cubin == good.cubin
    assert compiler.compile_source(source, BinaryCache(tmp_path)).cache_hit


def _compile_twice_and_count_warnings(cache, source, other):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = compiler.compile_source(source, cache)
        second = compiler.compile_source(source, cache)
        third = compiler.compile_source(other, cache)
    ours = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert not first.cache_hit and second.cache_hit and not third.cache_hit
    assert first.cubin == second.cubin and first.cubin[:4] == b"\x7fELF" and third.cubin[:4] == b"\x7fELF"
    return str(ours[0].message)


def test_cache_dir_under_a_regular_file_degrades_to_memory_with_one_warning(tmp_path, source):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    cache = BinaryCache(blocker / "cache")
    message = _compile_twice_and_count_warnings(cache, source, render(SimtConfig().spec))
    assert str(blocker / "cache") in message
    assert blocker.read_bytes() == b""


def test_full_disk_degrades_to_memory_with_one_warning(tmp_path, monkeypatch, source):
    def full(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_mod.os, "replace", full)
    message = _compile_twice_and_count_warnings(BinaryCache(tmp_path), source, render(SimtConfig().spec))
    assert os.strerror(errno.ENOSPC) in message
    assert entry_files(tmp_path) == [], "temporary files were left behind"


DEFAULT_CACHE_CHILD = textwrap.dedent(
    """
    import warnings
    from fp4q.jit.cache import CacheWarning
    from fp4q.jit.render import render
    from fp4q.jit.compiler import compile_source
    from fp4q.kernels.quantize import QuantizeConfig, SimtConfig
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernels = [compile_source(render(c.spec)) for c in (QuantizeConfig(), SimtConfig(), QuantizeConfig())]
    print(sum(issubclass(w.category, CacheWarning) for w in caught), [k.cache_hit for k in kernels])
    """
)


def test_default_cache_in_an_unusable_fp4q_cache_dir_warns_once(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    run = subprocess.run([sys.executable, "-c", DEFAULT_CACHE_CHILD], env=_env(blocker / "cache"),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split(None, 1) == ["1", "[False, False, True]\n"]


@pytest.mark.parametrize("what", ["nvrtc", "package"])
def test_entry_from_another_nvrtc_or_package_version_is_not_used(tmp_path, monkeypatch, source, what):
    real = compiler.compile_source(source, BinaryCache(tmp_path))
    assert not real.cache_hit
    with monkeypatch.context() as patch:
        if what == "nvrtc":
            identity = compiler.compiler_identity()
            patch.setattr(compiler, "compiler_identity", lambda: identity[:-1] + ("0.0.0-elsewhere",))
        else:
            patch.setattr(fp4q._version, "__version__", fp4q._version.__version__ + ".post999")
        cache = BinaryCache(tmp_path)
        foreign = compiler.compile_source(source, cache)
        assert foreign.key != real.key, f"the cache key does not depend on the {what} version"
        assert not foreign.cache_hit and cache.misses == 1 and cache.hits_disk == 0
        assert compiler.compile_source(source, BinaryCache(tmp_path)).cache_hit  # its own entry now exists
    assert len(entry_files(tmp_path)) == 2
    # Back under the real identity: the real entry, not the foreign one.
    cache = BinaryCache(tmp_path)
    back = compiler.compile_source(source, cache)
    assert back.cache_hit and back.key == real.key and cache.hits_disk == 1
