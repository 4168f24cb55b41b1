"""NVRTC compilation of rendered source to a cubin, through the binary cache.

Always a cubin for the target's exact architecture (``sm_80``, ``sm_90a``, or
a family such as ``sm_100f``; see ``fp4q.kernels.archs``), never PTX: the
driver on a serving machine may be older than NVRTC and could not JIT newer
PTX. No fast-math and no flush-to-zero (the spec needs denormals), no FMA
contraction (the spec's roundings are explicit).

``FP4Q_DISABLE_JIT=1`` forbids compiling: a cubin missing from the cache
raises ``JitDisabledError`` instead of a compile (``python -m fp4q
precompile`` fills the cache ahead of time).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import struct
import threading
import time
from dataclasses import dataclass

from .. import _version
from ..kernels.archs import ARCHS, target
from .cache import BinaryCache, cache_key
from .render import KernelSource

BASE_OPTIONS = (
    "-std=c++17",
    "--fmad=false",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--ptxas-options=-v",
)

_META = struct.Struct("<I")


class CompileError(RuntimeError):
    """A kernel could not be compiled; where NVRTC rejected the program, carries its log and source."""

    def __init__(self, message: str, log: str = "", source: str | None = None) -> None:
        super().__init__(f"{message}\n--- NVRTC log ---\n{log}" if log else message)
        self.log = log
        self.source = source


class NvrtcError(CompileError):
    """An NVRTC API call failed (not the program: NVRTC itself, its options or its resources)."""


class JitDisabledError(CompileError):
    """``FP4Q_DISABLE_JIT=1`` and the cache holds no cubin for a kernel that is needed."""


DISABLE_JIT_ENV = "FP4Q_DISABLE_JIT"


def jit_disabled() -> bool:
    """Whether ``FP4Q_DISABLE_JIT`` forbids compiling (read on every cache miss: it may change at run time)."""
    value = os.environ.get(DISABLE_JIT_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{DISABLE_JIT_ENV} must be '0' or '1' (or unset), got {value!r}")
    return value == "1"


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for the kernel (None where it said nothing)."""

    registers: int | None
    shared_bytes: int | None
    spill_bytes: int | None
    stack_bytes: int | None


@dataclass(frozen=True)
class CompiledKernel:
    kernel_name: str
    arch: str
    key: str
    cubin: bytes
    log: str
    cache_hit: bool
    seconds: float

    @property
    def resources(self) -> Resources:
        return parse_resources(self.log)


def _nvrtc():
    from cuda.bindings import nvrtc

    return nvrtc


@functools.lru_cache(maxsize=1)
def compiler_identity() -> tuple:
    """What identifies the NVRTC that would compile, for the cache key.

    The version of the ``nvidia-cuda-nvrtc`` wheel (the library cuda.bindings
    loads first) is read from its dist-info directory name, which costs
    microseconds; loading libnvrtc just to ask it costs tens of milliseconds
    and would make every cache hit in a new process slow. Without the wheel,
    NVRTC itself is asked.
    """
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        site = os.path.dirname(location)
        for entry in os.listdir(site):
            if entry.startswith("nvidia_cuda_nvrtc-") and entry.endswith(".dist-info"):
                return ("nvidia-cuda-nvrtc", entry[len("nvidia_cuda_nvrtc-") : -len(".dist-info")])
    return ("nvrtc",) + nvrtc_version()


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return (major, minor)


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise NvrtcError(f"{what} failed: {text.decode(errors='replace')}")


def _options(arch: str) -> tuple[str, ...]:
    return (f"--gpu-architecture={target(arch).gpu_architecture}",) + BASE_OPTIONS


def _nvrtc_compile(src: KernelSource) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(src.source.encode(), f"{src.kernel_name}.cu".encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in _options(src.arch)]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(nvrtc, err, "nvrtcGetProgramLogSize")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
        _check(nvrtc, err, "nvrtcGetProgramLog")
        log = buf.rstrip(b"\x00 ").decode(errors="replace")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile {src.kernel_name} for {src.arch}", log, src.source)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _pack(cubin: bytes, log: str) -> bytes:
    meta = json.dumps({"log": log}).encode()
    return _META.pack(len(meta)) + meta + cubin


def _unpack(payload: bytes) -> tuple[bytes, str]:
    (n,) = _META.unpack_from(payload)
    meta = json.loads(payload[_META.size : _META.size + n])
    return payload[_META.size + n :], meta["log"]


_default_cache: BinaryCache | None = None
_default_cache_lock = threading.Lock()


def default_cache() -> BinaryCache:
    global _default_cache
    with _default_cache_lock:
        if _default_cache is None:
            _default_cache = BinaryCache()
        return _default_cache


def kernel_key(src: KernelSource) -> str:
    """The cache key of ``src``'s cubin: source, options, target, NVRTC and fp4q versions, kernel name."""
    return cache_key(
        source=src.source,
        options=_options(src.arch),
        arch=src.arch,
        compiler_version=compiler_identity(),
        package_version=_version.__version__,
        name=src.kernel_name,
    )


def unpack_cubin(payload: bytes) -> bytes | None:
    """The cubin of a cache payload, or None where the payload is not one of ours."""
    try:
        return _unpack(payload)[0]
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def compile_source(src: KernelSource, cache: BinaryCache | None = None, *, variant=None) -> CompiledKernel:
    """Compile (or fetch from the cache) the cubin of ``src``; ``variant`` (its config) names it in errors."""
    cache = default_cache() if cache is None else cache
    key = kernel_key(src)
    start = time.perf_counter()
    payload, hit = cache.get_or_build(key, lambda: _build(src, cache, variant))
    try:
        cubin, log = _unpack(payload)
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError):
        # A payload that passed the cache's checksum but is not ours: rebuild.
        payload = _build(src, cache, variant)
        cache.put(key, payload)
        cubin, log, hit = *_unpack(payload), False
    return CompiledKernel(src.kernel_name, src.arch, key, cubin, log, hit, time.perf_counter() - start)


def _build(src: KernelSource, cache: BinaryCache, variant) -> bytes:
    if jit_disabled():
        raise JitDisabledError(_jit_disabled_message(src, cache, variant))
    return _pack(*_nvrtc_compile(src))


def _jit_disabled_message(src: KernelSource, cache: BinaryCache, variant) -> str:
    from ..kernels.variants import all_variants

    what = repr(variant) if variant is not None else f"kernel {src.kernel_name}"
    command = f"FP4Q_CACHE_DIR={cache.directory} python -m fp4q precompile --arch {src.arch}"
    shipped = variant is not None and src.arch in ARCHS and variant in {c.spec for c in all_variants(src.arch).values()}
    if shipped:
        how = f"build it ahead of time with: {command}"
    else:
        how = (f"it is not a shipped variant, so precompile does not build it: run this call once with "
               f"{DISABLE_JIT_ENV} unset and the same FP4Q_CACHE_DIR (shipped variants: {command})")
    return (f"{DISABLE_JIT_ENV}=1 forbids compiling, and the kernel cache {cache.directory} has no cubin for "
            f"{what} on target {src.arch} (NVRTC {'-'.join(map(str, compiler_identity()))}, fp4q "
            f"{_version.__version__}); {how}")


_NUM = r"(\d+)"


def parse_resources(log: str) -> Resources:
    def find(pattern: str) -> int | None:
        m = re.search(pattern, log)
        return int(m.group(1)) if m else None

    return Resources(
        registers=find(rf"Used {_NUM} registers"),
        shared_bytes=find(rf"{_NUM} bytes smem"),
        spill_bytes=find(rf"{_NUM} bytes spill stores"),
        stack_bytes=find(rf"{_NUM} bytes stack frame"),
    )
