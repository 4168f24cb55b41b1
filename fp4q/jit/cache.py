"""Two-level (memory, then disk) cache of compiled binaries, keyed by a sha256 over everything that shapes them.

Each disk entry carries a header with its own key, payload length and payload sha256, and is written to a
temporary file in its final directory and then renamed into place, so concurrent processes only ever see whole
entries and anything damaged reads as a miss to be rebuilt. Disk trouble is never fatal: the cache warns once
and carries on in memory, because a cache must not be the reason a compile fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import struct
import tempfile
import threading
import warnings
from typing import Callable, Sequence

__all__ = ["BinaryCache", "CacheWarning", "cache_key", "default_cache_dir"]

_FORMAT_VERSION = 1
# The format version lives in the magic so that a future layout reads as a clean miss, not as garbage.
_MAGIC = b"FP4QBC" + _FORMAT_VERSION.to_bytes(2, "big")
# magic, ASCII hex key, payload length, sha256(payload)
_HEADER = struct.Struct(">8s64sQ32s")
_KEY_RE = re.compile(r"[0-9a-f]{64}")
_SUFFIX = ".fp4qbin"


class CacheWarning(UserWarning):
    """The on-disk cache could not be written; compiled binaries are kept in memory only."""


def default_cache_dir() -> pathlib.Path:
    explicit = os.environ.get("FP4Q_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and os.path.isabs(xdg):
        return pathlib.Path(xdg) / "fp4q"
    try:
        home = pathlib.Path.home()
    except (RuntimeError, KeyError):
        # No resolvable home (stripped-down containers); a temp dir still beats failing the compile.
        return pathlib.Path(tempfile.gettempdir()) / "fp4q-cache"
    return home / ".cache" / "fp4q"


def cache_key(
    *,
    source: str,
    options: Sequence[str],
    arch: str,
    compiler_version: tuple,
    package_version: str,
    name: str = "",
) -> str:
    if isinstance(options, (str, bytes)):
        # A bare string would be iterated per character and silently hash a different option list.
        raise TypeError("options must be a sequence of strings, not a single string")
    # JSON of named fields is unambiguous: no concatenation of adjacent fields can collide.
    fields = {
        "schema": _FORMAT_VERSION,
        "source": source,
        "options": list(options),
        "arch": arch,
        "compiler_version": list(compiler_version),
        "package_version": package_version,
        "name": name,
    }
    encoded = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("ascii")
    return hashlib.sha256(encoded).hexdigest()


def _check_key(key: str) -> None:
    # Keys become file names, so anything but a sha256 hex digest could escape the cache directory.
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 64 lowercase hex characters, got {key!r}")


class BinaryCache:
    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self._directory = None if directory is None else pathlib.Path(directory)
        self._lock = threading.Lock()
        self._memory: dict[str, bytes] = {}
        self._disk_writes_disabled = False
        self.hits_memory = 0
        self.hits_disk = 0
        self.misses = 0

    @property
    def directory(self) -> pathlib.Path:
        if self._directory is None:
            self._directory = default_cache_dir()
        return self._directory

    def _path(self, key: str) -> pathlib.Path:
        # Fan out on the first two hex digits so no single directory grows huge.
        return self.directory / key[:2] / (key + _SUFFIX)

    def get(self, key: str) -> bytes | None:
        _check_key(key)
        with self._lock:
            payload = self._memory.get(key)
            if payload is not None:
                self.hits_memory += 1
                return payload
        payload = self._read_disk(key)
        with self._lock:
            if payload is None:
                self.misses += 1
                return None
            self.hits_disk += 1
            self._memory[key] = payload
        return payload

    def _read_disk(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                identity = os.fstat(f.fileno())
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            self._discard(path, None)
            return None
        payload = _decode(key, data)
        if payload is None:
            self._discard(path, identity)
        return payload

    @staticmethod
    def _discard(path: pathlib.Path, identity: os.stat_result | None) -> None:
        with contextlib.suppress(OSError):
            if identity is not None:
                current = os.stat(path)
                # Another process may have renamed a good entry over the bad one since we read it.
                if (current.st_dev, current.st_ino) != (identity.st_dev, identity.st_ino):
                    return
            os.unlink(path)

    def put(self, key: str, payload: bytes) -> None:
        _check_key(key)
        payload = bytes(payload)
        with self._lock:
            self._memory[key] = payload
            if self._disk_writes_disabled:
                return
        try:
            self._write_disk(key, payload)
        except OSError as exc:
            with self._lock:
                first_failure = not self._disk_writes_disabled
                self._disk_writes_disabled = True
            if first_failure:
                warnings.warn(
                    f"fp4q: cannot write the binary cache in {self.directory} ({exc}); "
                    "compiled binaries will be kept in memory only for this cache",
                    CacheWarning,
                    stacklevel=2,
                )

    def _write_disk(self, key: str, payload: bytes) -> None:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        # Same directory as the target so os.replace is a rename within one filesystem, hence atomic.
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=final.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_HEADER.pack(_MAGIC, key.encode("ascii"), len(payload), hashlib.sha256(payload).digest()))
                f.write(payload)
            # mkstemp makes 0600 files; entries are not secrets and a shared FP4Q_CACHE_DIR should work.
            os.chmod(tmp, 0o644)
            # No fsync: an entry torn by a power loss fails its length/sha check and is simply rebuilt.
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> tuple[bytes, bool]:
        payload = self.get(key)
        if payload is not None:
            return payload, True
        # Built without holding the lock: compiles are slow and a duplicate build of one key is harmless.
        payload = bytes(build())
        self.put(key, payload)
        return payload, False

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()


def _decode(key: str, data: bytes) -> bytes | None:
    if len(data) < _HEADER.size:
        return None
    magic, stored_key, length, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if magic != _MAGIC or stored_key != key.encode("ascii") or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != digest:
        return None
    return payload
