"""A fake CuPy and a fake CUDA driver, so that fp4q's call path (validation,
plans, argument packing, CUlaunchConfig objects) runs without a GPU.

CuPy arrays, the device, kernel loading, tensor-map encoding and the
driver's launch are faked; each launch is decoded from the void*[] the
driver would read, by the kernel spec's parameter list, into arguments by
name (``FakeDriver.launches``).
"""

from __future__ import annotations

import ctypes
import math
import threading
import types

import numpy as np
from cuda.bindings import driver as cu

from fp4q.cuda import driver, tma
from fp4q.cuda import launch as launch_module
from fp4q.cuda.tma import TensorMapCache
from fp4q.jit import loader
from fp4q.ops import arrays, plans, streams

SUCCESS = cu.CUresult.CUDA_SUCCESS
PDL_ATTR = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
SM_COUNT = 132
CTAS_PER_SM = 2
C_TYPES = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
           "f32": ctypes.c_float}


# The fake driver of the running test that took the ``cp`` fixture's fake (tests/conftest.py), or None.
active = None


# --------------------------------------------------------------------------------------------------- fake CuPy
class FakeMemory:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr, device_id):
        self.ptr = ptr
        self.device_id = device_id


class FakeArray:
    """What fp4q reads of a cupy.ndarray."""

    def __init__(self, shape, dtype, ptr, strides=None, device=0):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        if strides is None:
            strides, step = [], self.dtype.itemsize
            for d in reversed(self.shape):
                strides.insert(0, step)
                step *= d
        self.strides = tuple(strides)
        self.data = FakeMemory(ptr, device)
        step, contiguous = self.dtype.itemsize, True
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            contiguous &= dim <= 1 or stride == step
            step *= dim
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)
        self._c_contiguous = contiguous  # CuPy's own flag, which the output rule reads

    @property
    def device(self):
        return types.SimpleNamespace(id=self.data.device_id)

    def __getitem__(self, index):
        """The first element, as a 0-d array (what global_scale returns)."""
        assert index == 0 and self.size
        return FakeArray((), self.dtype, self.data.ptr, (), self.data.device_id)


class FakeStream:
    def __init__(self, ptr, device_id=-1):
        self.ptr = ptr
        self.device_id = device_id


class FakeCupy(types.ModuleType):
    def __init__(self):
        super().__init__("cupy")
        self.ndarray = FakeArray
        self.next_ptr = 0x7F0000000000
        self.current_device = 0
        self.current_stream = {0: FakeStream(0), 1: FakeStream(0)}
        self.allocations = []
        fake = self

        class Device:
            def __init__(self, id=None):
                self.id = fake.current_device if id is None else id

            def __enter__(self):
                self.prev, fake.current_device = fake.current_device, self.id

            def __exit__(self, *exc):
                fake.current_device = self.prev

            def synchronize(self):
                """Nothing runs on the fake device."""

        self.cuda = types.SimpleNamespace(
            Device=Device,
            Stream=FakeStream,
            ExternalStream=FakeStream,
            get_current_stream=lambda device_id=-1: self.current_stream[
                self.current_device if device_id == -1 else device_id],
            runtime=types.SimpleNamespace(getDevice=lambda: self.current_device),
        )

    def alloc(self, nbytes):
        ptr = self.next_ptr
        self.next_ptr += (nbytes + 511) // 512 * 512 + 512
        return ptr

    def empty(self, shape, dtype):
        arr = FakeArray(shape, dtype, self.alloc(math.prod(shape) * np.dtype(dtype).itemsize),
                        device=self.current_device)
        self.allocations.append(arr)
        return arr

    def array(self, shape, dtype=np.uint16, offset=0, **kwargs):
        """A device array at a fresh 512-byte aligned address plus ``offset`` bytes."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        return FakeArray(shape, dtype, self.alloc(nbytes + offset) + offset, **kwargs)


class HostMemory:
    """A pointer into a host-backed array's buffer, with CuPy's ``memptr + bytes`` arithmetic."""

    __slots__ = ("buffer", "offset", "ptr", "device_id")

    def __init__(self, buffer: np.ndarray, offset: int, device_id: int = 0):
        self.buffer, self.offset, self.device_id = buffer, offset, device_id
        self.ptr = buffer.__array_interface__["data"][0] + offset

    def __add__(self, nbytes: int) -> "HostMemory":
        return HostMemory(self.buffer, self.offset + nbytes, self.device_id)


class DeviceArray:
    """A CuPy-like array whose memory is a host numpy array: its shape, strides, views and
    addresses are real, so every rule of fp4q's call path sees what it would see on a GPU;
    no kernel ever writes it (the fake driver only records launches)."""

    def __init__(self, shape, dtype=np.float64, memptr: HostMemory | None = None, *, host=None, buffer=None):
        if host is None:
            host = np.ndarray(shape, dtype, buffer=memptr.buffer, offset=memptr.offset)
            buffer = memptr.buffer
        self._host, self._buffer = host, buffer

    @classmethod
    def new(cls, host: np.ndarray) -> "DeviceArray":
        """``host`` (C-contiguous, owning its memory) as a device array."""
        return cls(None, host=host, buffer=host.reshape(-1).view(np.uint8))

    def _wrap(self, host: np.ndarray) -> "DeviceArray":
        """A view of this array, or, where numpy had to copy (a reshape of strided memory), new memory."""
        if not np.may_share_memory(host, self._buffer):
            return DeviceArray.new(np.ascontiguousarray(host))
        return DeviceArray(None, host=host, buffer=self._buffer)

    shape = property(lambda self: self._host.shape)
    strides = property(lambda self: self._host.strides)
    dtype = property(lambda self: self._host.dtype)
    ndim = property(lambda self: self._host.ndim)
    size = property(lambda self: self._host.size)
    nbytes = property(lambda self: self._host.nbytes)
    flags = property(lambda self: self._host.flags)
    _c_contiguous = property(lambda self: self._host.flags.c_contiguous)  # CuPy's own flag
    T = property(lambda self: self._wrap(self._host.T))
    device = property(lambda self: types.SimpleNamespace(id=0))

    @property
    def data(self) -> HostMemory:
        offset = self._host.__array_interface__["data"][0] - self._buffer.__array_interface__["data"][0]
        return HostMemory(self._buffer, offset)

    def __getitem__(self, index):
        host = self._host[index]
        if not isinstance(host, np.ndarray):  # numpy gives a scalar copy where CuPy gives a 0-d view
            host = self._host[(*index, ...) if isinstance(index, tuple) else (index, ...)]
        return self._wrap(host)

    def view(self, dtype):
        return self._wrap(self._host.view(dtype))

    def reshape(self, *shape):
        return self._wrap(self._host.reshape(*shape))

    def ravel(self):
        return self._wrap(self._host.ravel())

    def astype(self, dtype):
        return DeviceArray.new(self._host.astype(dtype))

    def copy(self):
        return DeviceArray.new(self._host.copy())

    def get(self) -> np.ndarray:
        return self._host.copy()


class HostCupy(FakeCupy):
    """The fake CuPy module with host-backed arrays (``DeviceArray``)."""

    def __init__(self):
        super().__init__()
        self.ndarray = DeviceArray
        self.uint8, self.uint16, self.int8 = np.uint8, np.uint16, np.int8
        self.float16, self.float32, self.float64 = np.float16, np.float32, np.float64

    def empty(self, shape, dtype):
        return DeviceArray.new(np.zeros(shape, dtype))

    def zeros(self, shape, dtype=np.float64):
        return DeviceArray.new(np.zeros(shape, dtype))

    def ones(self, shape, dtype=np.float64):
        return DeviceArray.new(np.ones(shape, dtype))

    def full(self, shape, fill_value, dtype=None):
        return DeviceArray.new(np.full(shape, fill_value, dtype))

    def asarray(self, a):
        return DeviceArray.new(np.array(a))

    def asnumpy(self, a):
        return a.get()


# --------------------------------------------------------------------------------------------------- fake driver
class FakeDriver:
    """Records launches, decoded from the argument block as the driver would read it."""

    def __init__(self):
        self.context = cu.CUcontext(0x5000)
        self.current = self.context
        self.launches = []
        self.pushes = []
        self.functions = {}  # int(CUfunction) -> spec
        self.config_of = {}  # spec -> the config the call resolved to it
        self.encodes = []  # (spec, what)
        self.maps = {}  # address of a map's storage -> its spec

    def device(self, ordinal):
        return driver.Device(ordinal, "Fake H200", (9, 0), SM_COUNT, 232448, self.context, int(self.context))

    def load(self, spec, dev):
        function = cu.CUfunction(0x1000 + len(self.functions))
        self.functions[int(function)] = spec
        return loader.LoadedKernel(spec, None, dev, function, CTAS_PER_SM, None)

    def counter_for(self, dev, stream):
        """tile_tickets.counter_for: one made-up counter address per stream."""
        return 0xC0DE0000 + 8 * stream

    def encode(self, spec, what):
        spec.validate(what)
        tensor_map = cu.CUtensorMap()
        self.encodes.append((spec, what))
        self.maps[int(tensor_map.getPtr())] = spec
        return tensor_map

    def cuCtxGetCurrent(self):
        return (SUCCESS, self.current)

    def cuCtxPushCurrent(self, ctx):
        self.pushes.append(("push", int(ctx), int(self.current)))
        self.saved, self.current = self.current, ctx
        return (SUCCESS,)

    def cuCtxPopCurrent(self):
        self.pushes.append(("pop",))
        self.current = self.saved
        return (SUCCESS, self.current)

    def cuLaunchKernelEx(self, config, function, params, extra):
        assert extra == 0 and isinstance(params, int)
        assert int(self.current) == int(self.context), "launched outside the device's context"
        spec = self.functions[int(function)]
        slots = (ctypes.c_void_p * len(spec.params)).from_address(params)
        args = {}
        for param, slot in zip(spec.params, slots):
            if param.kind == "map":
                args[param.name] = self.maps[slot]
            else:
                args[param.name] = C_TYPES[param.kind].from_address(slot).value or 0
        pdl = config.numAttrs == 1
        if pdl:
            attr = config.attrs[0]
            assert attr.id == PDL_ATTR and attr.value.programmaticStreamSerializationAllowed == 1
        self.launches.append(dict(
            config=self.config_of.get(spec), spec=spec, grid=(config.gridDimX, config.gridDimY, config.gridDimZ),
            block=(config.blockDimX, config.blockDimY, config.blockDimZ), smem=config.sharedMemBytes,
            stream=int(config.hStream), pdl=pdl, args=args, thread=threading.get_ident(),
            launch_config=config,  # kept alive, so ids are not reused during a test
        ))
        return (SUCCESS,)


def install(monkeypatch, fake_cupy: FakeCupy | None = None) -> FakeDriver:
    """Put the fakes in place of CuPy (``FakeCupy()`` unless given) and the driver (undone with
    ``monkeypatch``); the fake CuPy module is the returned driver's ``cupy``."""
    fake_cupy, fake = fake_cupy or FakeCupy(), FakeDriver()
    monkeypatch.setattr(arrays, "_cupy_module", fake_cupy)
    monkeypatch.setattr(streams, "_cupy_current_stream", None)  # bound to the fake on first use
    monkeypatch.setattr(driver, "_device", fake.device)
    monkeypatch.setattr(driver, "gpu_status", lambda: (True, "the fake driver's device"))
    monkeypatch.setattr(loader, "_load", fake.load)
    monkeypatch.setattr(loader, "_loaded", {})
    monkeypatch.setattr(tma, "encode", fake.encode)
    monkeypatch.setattr(launch_module, "counter_for", fake.counter_for)
    monkeypatch.setattr(launch_module, "tensor_maps", TensorMapCache())
    for name in ("cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuLaunchKernelEx"):
        monkeypatch.setattr(cu, name, getattr(fake, name))
    plans.plans.clear()
    fake.cupy = fake_cupy
    return fake
