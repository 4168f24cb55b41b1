import errno
import hashlib
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from fp4q.jit import cache as cache_mod
from fp4q.jit.cache import BinaryCache, CacheWarning, cache_key, default_cache_dir

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

KEY_FIELDS = dict(
    source="__global__ void k() {}",
    options=("-O3", "--std=c++17"),
    arch="sm_100f",
    compiler_version=(13, 0),
    package_version="0.1.0",
    name="k",
)


def make_key(**changes):
    return cache_key(**{**KEY_FIELDS, **changes})


def entry_files(directory):
    return sorted(p for p in pathlib.Path(directory).rglob("*") if p.is_file())


def only_entry(directory):
    files = entry_files(directory)
    assert len(files) == 1, files
    return files[0]


# --- keys -------------------------------------------------------------------------------------------------------


def test_key_is_stable_sha256_hex():
    key = make_key()
    assert key == make_key()
    assert key == make_key(options=list(KEY_FIELDS["options"]))
    assert len(key) == 64 and set(key) <= set("0123456789abcdef")


@pytest.mark.parametrize(
    "field, value",
    [
        ("source", "__global__ void k() { }"),
        ("options", ("-O3", "--std=c++20")),
        ("options", ("--std=c++17", "-O3")),
        ("options", ("-O3",)),
        ("arch", "sm_120a"),
        ("compiler_version", (13, 1)),
        ("compiler_version", (13, 0, 0)),
        ("package_version", "0.1.1"),
        ("name", "k2"),
        ("name", ""),
    ],
)
def test_key_changes_with_each_field(field, value):
    assert make_key(**{field: value}) != make_key()


def test_key_encoding_is_unambiguous():
    assert make_key(options=["-a", "b"]) != make_key(options=["-a b"])
    assert make_key(compiler_version=(12, 8)) != make_key(compiler_version=(128,))
    assert make_key(source="ab", name="") != make_key(source="a", name="b")


def test_key_rejects_options_as_one_string():
    with pytest.raises(TypeError):
        make_key(options="-O3")


# --- directory --------------------------------------------------------------------------------------------------


def test_default_dir_prefers_fp4q_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FP4Q_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"


def test_default_dir_uses_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("FP4Q_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "fp4q"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # the XDG spec says to ignore relative paths
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "fp4q"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "fp4q"


def test_default_directory_is_resolved_at_first_use(monkeypatch, tmp_path):
    monkeypatch.setenv("FP4Q_CACHE_DIR", str(tmp_path / "before"))
    cache = BinaryCache()
    monkeypatch.setenv("FP4Q_CACHE_DIR", str(tmp_path / "after"))
    cache.put(make_key(), b"cubin")
    assert cache.directory == tmp_path / "after"
    assert len(entry_files(tmp_path / "after")) == 1
    assert not (tmp_path / "before").exists()


# --- hits and misses --------------------------------------------------------------------------------------------


def test_put_then_get_hits_memory(tmp_path):
    cache = BinaryCache(tmp_path)
    key = make_key()
    assert cache.get(key) is None
    cache.put(key, b"\x7fELF payload")
    assert cache.get(key) == b"\x7fELF payload"
    assert (cache.hits_memory, cache.hits_disk, cache.misses) == (1, 0, 1)


def test_fresh_instance_hits_disk_then_memory(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"payload")
    cache = BinaryCache(tmp_path)
    assert cache.get(key) == b"payload"
    assert cache.get(key) == b"payload"
    assert (cache.hits_memory, cache.hits_disk, cache.misses) == (1, 1, 0)
    cache.clear_memory()
    assert cache.get(key) == b"payload"
    assert cache.hits_disk == 2


def test_get_or_build_builds_once_then_hits(tmp_path):
    cache = BinaryCache(tmp_path)
    calls = []

    def build():
        calls.append(1)
        return b"built"

    assert cache.get_or_build(make_key(), build) == (b"built", False)
    assert cache.get_or_build(make_key(), build) == (b"built", True)
    assert BinaryCache(tmp_path).get_or_build(make_key(), build) == (b"built", True)
    assert len(calls) == 1


def test_build_errors_propagate_and_store_nothing(tmp_path):
    cache = BinaryCache(tmp_path)

    def build():
        raise RuntimeError("nvrtc: error")

    with pytest.raises(RuntimeError, match="nvrtc"):
        cache.get_or_build(make_key(), build)
    assert cache.get(make_key()) is None
    assert entry_files(tmp_path) == []


def test_rejects_keys_that_are_not_sha256_hex(tmp_path):
    cache = BinaryCache(tmp_path)
    for bad in ["../../etc/passwd", "ab", make_key().upper()]:
        with pytest.raises(ValueError):
            cache.put(bad, b"x")
        with pytest.raises(ValueError):
            cache.get(bad)


# --- damaged entries --------------------------------------------------------------------------------------------


def assert_bad_entry_is_rebuilt(directory, key):
    cache = BinaryCache(directory)
    assert cache.get(key) is None
    assert cache.misses == 1
    payload, hit = cache.get_or_build(key, lambda: b"rebuilt payload")
    assert (payload, hit) == (b"rebuilt payload", False)
    fresh = BinaryCache(directory)
    assert fresh.get(key) == b"rebuilt payload"
    assert fresh.hits_disk == 1


def test_truncated_entry_is_a_miss_and_rebuilt(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"x" * 1000)
    path = only_entry(tmp_path)
    path.write_bytes(path.read_bytes()[:500])
    assert BinaryCache(tmp_path).get(key) is None
    assert not path.exists()
    assert_bad_entry_is_rebuilt(tmp_path, key)


def test_header_only_and_empty_entries_are_misses(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"x" * 1000)
    path = only_entry(tmp_path)
    whole = path.read_bytes()
    for data in [b"", whole[:10], whole[: cache_mod._HEADER.size]]:
        path.write_bytes(data)
        assert BinaryCache(tmp_path).get(key) is None


def test_garbage_entry_is_a_miss_and_rebuilt(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"payload")
    path = only_entry(tmp_path)
    path.write_bytes(os.urandom(4096))
    assert_bad_entry_is_rebuilt(tmp_path, key)


def test_wrong_magic_is_a_miss(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"payload")
    path = only_entry(tmp_path)
    data = bytearray(path.read_bytes())
    data[7] ^= 0xFF  # the format-version byte
    path.write_bytes(bytes(data))
    assert_bad_entry_is_rebuilt(tmp_path, key)


def test_entry_with_another_key_inside_is_a_miss(tmp_path):
    key_a, key_b = make_key(name="a"), make_key(name="b")
    cache = BinaryCache(tmp_path)
    cache.put(key_a, b"payload for a")
    cache.put(key_b, b"payload for b")
    path_a, path_b = cache._path(key_a), cache._path(key_b)
    path_b.write_bytes(path_a.read_bytes())
    assert BinaryCache(tmp_path).get(key_b) is None
    assert BinaryCache(tmp_path).get(key_a) == b"payload for a"
    assert_bad_entry_is_rebuilt(tmp_path, key_b)


def test_payload_sha_mismatch_is_a_miss(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"payload bytes")
    path = only_entry(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    assert_bad_entry_is_rebuilt(tmp_path, key)


def test_length_mismatch_is_a_miss(tmp_path):
    key = make_key()
    BinaryCache(tmp_path).put(key, b"payload bytes")
    path = only_entry(tmp_path)
    path.write_bytes(path.read_bytes() + b"trailing")
    assert_bad_entry_is_rebuilt(tmp_path, key)


def test_unreadable_entry_is_a_miss_not_an_error(tmp_path):
    key = make_key()
    cache = BinaryCache(tmp_path)
    cache._path(key).mkdir(parents=True)  # opening a directory fails with an OSError other than "not found"
    assert cache.get(key) is None
    assert cache.misses == 1


# --- unwritable cache -------------------------------------------------------------------------------------------


def assert_memory_only_with_one_warning(cache):
    keys = [make_key(name=str(i)) for i in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in keys:
            cache.put(key, b"payload " + key.encode())
        assert cache.get_or_build(make_key(name="built"), lambda: b"built") == (b"built", False)
        assert cache.get_or_build(make_key(name="built"), lambda: b"other") == (b"built", True)
    ours = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert str(cache.directory) in str(ours[0].message)
    for key in keys:
        assert cache.get(key) == b"payload " + key.encode()
    return str(ours[0].message)


def test_directory_under_a_file_warns_once_and_works_in_memory(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    assert_memory_only_with_one_warning(BinaryCache(blocker / "cache"))


def test_enospc_on_replace_warns_once_and_leaves_no_temp_files(tmp_path, monkeypatch):
    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_mod.os, "replace", full_disk)
    message = assert_memory_only_with_one_warning(BinaryCache(tmp_path))
    assert os.strerror(errno.ENOSPC) in message
    assert entry_files(tmp_path) == []


def test_permission_error_on_tempfile_warns_once(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", denied)
    assert_memory_only_with_one_warning(BinaryCache(tmp_path))


def test_each_instance_warns_on_its_own(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    with pytest.warns(CacheWarning):
        BinaryCache(blocker).put(make_key(), b"x")
    with pytest.warns(CacheWarning):
        BinaryCache(blocker).put(make_key(), b"x")


# --- concurrency ------------------------------------------------------------------------------------------------


def test_threads_share_one_cache(tmp_path):
    cache = BinaryCache(tmp_path)
    keys = [make_key(name=str(i % 3)) for i in range(16)]
    barrier = threading.Barrier(len(keys))
    results = [None] * len(keys)
    errors = []

    def work(i):
        try:
            barrier.wait()
            key = keys[i]
            results[i] = cache.get_or_build(key, lambda: hashlib.sha256(key.encode()).digest() * 1000)[0]
        except BaseException as exc:  # surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(keys))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for key, payload in zip(keys, results):
        assert payload == hashlib.sha256(key.encode()).digest() * 1000
    assert len(entry_files(tmp_path)) == 3
    fresh = BinaryCache(tmp_path)
    for key in set(keys):
        assert fresh.get(key) == hashlib.sha256(key.encode()).digest() * 1000


CHILD = textwrap.dedent(
    """
    import hashlib, os, sys, time, warnings
    from fp4q.jit.cache import BinaryCache, CacheWarning

    warnings.simplefilter("error", CacheWarning)
    directory, key, go = sys.argv[1:4]
    deadline = time.monotonic() + 30
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            sys.exit("never told to go")
        time.sleep(0.001)

    def build():
        time.sleep(0.05)  # keep the builds overlapping
        return hashlib.sha256(key.encode()).digest() * 32768

    payload, hit = BinaryCache(directory).get_or_build(key, build)
    assert payload == build(), "wrong payload"
    print("hit" if hit else "built", hashlib.sha256(payload).hexdigest())
    """
)


def test_processes_cold_start_on_one_directory(tmp_path):
    directory = tmp_path / "cache"
    go = tmp_path / "go"
    key = make_key()
    expected = hashlib.sha256(key.encode()).digest() * 32768
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(directory), key, str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    time.sleep(0.3)  # let the interpreters reach the starting line
    go.write_bytes(b"")
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        assert out.split()[1] == hashlib.sha256(expected).hexdigest()
    assert any(out.startswith("built") for out, _ in outputs)
    entry = only_entry(directory)  # also proves no temporary file was left behind
    assert entry == BinaryCache(directory)._path(key)
    fresh = BinaryCache(directory)
    assert fresh.get(key) == expected
    assert fresh.hits_disk == 1
