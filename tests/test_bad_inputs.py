"""The bad-input matrix of quantize_nvfp4 (issue "Reliability").

One test per row. Each asserts the exception type, that the message names
the argument (``pytest.raises(..., match=...)``), the offending value and
the rule, and, where ``out=``/``sf_out=`` buffers are passed, that they are
untouched afterwards: they are prefilled with 0xAB and compared after a
device-wide synchronize, so a kernel queued before the error would show.

Rows that fail before anything touches the GPU (a host ``x``, ConfigError at
construction) take no arrays; without a GPU, a host ``x`` raises ``NoGpuError``
naming the reason before any rule names it, so its rows also run with the
fake driver, which stands for a machine with a GPU. The others take
``cp`` and run twice: with CuPy on a GPU (marked ``gpu``), and on any
machine with the fake CuPy and driver of ``tests/fakes.py`` (host-backed
arrays with real shapes, strides and addresses), where "untouched" is also
"nothing launched before the raise". A few need a real device and are
marked ``gpu`` themselves.

A message that lacks the value or the rule fails with ``MessageIncomplete``,
after the exception type, the argument name and the untouched buffers have
been checked.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import fp4q
from fp4q import ConfigError, QuantizeConfig, SimtConfig
from fp4q.ops import plans

import fakes

gpu = pytest.mark.gpu

M, K = 4, 64
FILL = 0xAB
Q_SHAPE = (M, K // 2)
SF_SWIZZLED = (1, 1, 32, 4, 4)
SF_LINEAR = (M, K // 16)


class MessageIncomplete(Exception):
    """The error was right but its message does not name the value or the rule."""


def _cp():
    """The CuPy module of the running row (the ``cp`` fixture's, tests/conftest.py)."""
    return fakes.active.cupy if fakes.active is not None else pytest.importorskip("cupy")


def _launching_nothing(call):
    """``call``, which must raise, checked (on the fake) to launch nothing before it does."""
    fake = fakes.active
    if fake is None:
        return call

    def checked():
        before = len(fake.launches)
        try:
            return call()
        finally:
            assert len(fake.launches) == before, "a kernel was launched before the call was rejected"

    return checked


def _words(*parts: str) -> str:
    """A regex matching the literal ``parts`` in this order."""
    return ".*".join(re.escape(p) for p in parts)


def _x(cp, shape=(M, K), dtype=np.uint16):
    rng = np.random.default_rng(0)
    return cp.asarray(rng.integers(0, 0x3F80, size=shape).astype(dtype))


def _buffers(cp, sf_layout="swizzled", q_shape=Q_SHAPE):
    sf_shape = SF_SWIZZLED if sf_layout == "swizzled" else SF_LINEAR
    return cp.full(q_shape, FILL, dtype=cp.uint8), cp.full(sf_shape, FILL, dtype=cp.uint8)


def expect_rejected(exc_type, arg, value, rule, call, watch=()):
    """``call()`` raises ``exc_type``; the message names ``arg`` (regex), and
    contains ``value`` and ``rule`` (regexes); every array in ``watch`` is
    bytewise what it was before the call."""
    cp = _cp() if watch else None
    before = [cp.asnumpy(a).copy() for a in watch]
    with pytest.raises(exc_type, match=arg) as info:
        call()
    if watch:
        cp.cuda.Device().synchronize()  # a kernel launched before the raise would have landed by now
        for i, (a, b) in enumerate(zip(watch, before)):
            after = cp.asnumpy(a)
            assert np.array_equal(after, b), f"watched buffer {i} was written although the call was rejected"
    message = str(info.value)
    missing = [what for what, pattern in (("value", value), ("rule", rule)) if not re.search(pattern, message)]
    if missing:
        raise MessageIncomplete(f"message lacks the {' and the '.join(missing)}: {message!r}")
    return info


# Lenient patterns for values the messages do not show yet, so any reasonable wording of the fix passes.
STRIDES = r"strides?\b|\(\d+, \d+\)"
BYTE_RANGE = r"0x[0-9a-fA-F]+|\bbytes?\b|offset|range"


PATHS = ("first", "repeat", "after_valid")


def pytest_generate_tests(metafunc):
    # Every GPU row that takes `path` runs three ways: as the first call of its kind (stored plans
    # forgotten), twice in a row (a failed call must not leave anything that lets the next one
    # through), and after a valid call of the same kind (the plan a success stores for the fast path).
    if "path" in metafunc.fixturenames:
        metafunc.parametrize("path", PATHS)


def _forget_plans():
    plans.plans.clear()


def _is_config(c):
    return c is None or isinstance(c, (QuantizeConfig, SimtConfig))


def _quantize_with_buffers(cp, path, x, tensor_sf=1.0, sf_layout="swizzled", **kwargs):
    """The call, with valid prefilled out/sf_out unless the row passes its own; ``path`` (see
    pytest_generate_tests) says what happens before it."""
    if "out" not in kwargs or "sf_out" not in kwargs:
        out, sf_out = _buffers(cp, sf_layout)
        kwargs.setdefault("out", out)
        kwargs.setdefault("sf_out", sf_out)
    watch = [kwargs["out"], kwargs["sf_out"]]

    @_launching_nothing
    def bad():
        return fp4q.quantize_nvfp4(x, tensor_sf, sf_layout=sf_layout, **kwargs)

    def valid_of_the_same_kind():
        # Same x shape/strides/dtype, layout, tensor_sf mode and config object; fresh outputs, and a
        # fresh x when the row's own x is misaligned (alignment is not part of a call's kind).
        x_ok = x
        if isinstance(x, cp.ndarray) and x.data.ptr % 16 and x.flags.c_contiguous:
            x_ok = cp.zeros(x.shape, x.dtype)
        tsf_ok = cp.asarray(np.float32(1.0)) if isinstance(tensor_sf, cp.ndarray) else 1.0
        layout_ok = sf_layout if sf_layout in ("swizzled", "linear") else "swizzled"
        config = kwargs.get("config")
        try:
            fp4q.quantize_nvfp4(x_ok, tsf_ok, sf_layout=layout_ok, config=config if _is_config(config) else None)
        except (TypeError, ValueError):
            pass  # the row's x or config cannot make a valid call of this kind: then this is "repeat"-like
        cp.cuda.Device().synchronize()

    def call():
        if path == "first":
            _forget_plans()
        elif path == "after_valid":
            valid_of_the_same_kind()
        if path in ("repeat", "after_valid"):
            first = None
            try:
                bad()
            except Exception as exc:  # noqa: BLE001 - compared with the second call's below
                first = exc
            assert first is not None, "the bad call was accepted"
            try:
                bad()
            except Exception as second:
                assert (type(second), str(second)) == (type(first), str(first)), (
                    f"a repeated bad call raised differently: {first!r} then {second!r}"
                )
                raise
            raise AssertionError("the repeated bad call was accepted")
        return bad()

    return call, watch


# --- the control: the buffers and arguments the rows start from are valid -------------------------------------


@gpu
@pytest.mark.parametrize("sf_layout", ["swizzled", "linear"])
def test_control_valid_call_writes_the_buffers(sf_layout, cp):
    from fp4q.numerics import reference

    x = _x(cp)
    out, sf_out = _buffers(cp, sf_layout)
    q, sf = fp4q.quantize_nvfp4(x, 1.0, sf_layout=sf_layout, out=out, sf_out=sf_out, pdl=False)
    cp.cuda.Device().synchronize()
    q_ref, sf_ref = reference.quantize_nvfp4(cp.asnumpy(x), 1.0, sf_layout=sf_layout)
    assert q is out and sf is sf_out
    assert np.array_equal(cp.asnumpy(out), q_ref) and np.array_equal(cp.asnumpy(sf_out), sf_ref)


# --- x ----------------------------------------------------------------------------------------------------------


HOST_XS = pytest.mark.parametrize(
    "x, value",
    [
        (np.zeros((M, K), np.uint16), "ndarray"),
        (np.zeros((M, K), np.float16), "ndarray"),
        (np.float32(1.0), "float32"),
        ([[0] * K] * M, "list"),
    ],
    ids=["numpy_uint16", "numpy_float16", "numpy_scalar", "list"],
)


def _expect_no_gpu_or_host_rejected(value, call):
    """``call`` (of a host x) on this machine, without fakes: NoGpuError naming the reason where
    there is no usable GPU, else the host x's TypeError."""
    from fp4q.cuda.driver import gpu_status

    available, reason = gpu_status()
    if available:
        expect_rejected(TypeError, r"\bx must be", _words(value), _words("must be a CUDA array"), call)
    else:
        expect_rejected(fp4q.NoGpuError, r"^fp4q needs an NVIDIA GPU and driver", _words(reason),
                        _words("needs an NVIDIA GPU and driver"), call)


@HOST_XS
def test_x_on_the_host_is_rejected_without_a_gpu(x, value):
    _expect_no_gpu_or_host_rejected(value, lambda: fp4q.quantize_nvfp4(x, 1.0))


def test_no_gpu_error_comes_before_any_rule_on_a_host_array(monkeypatch):
    # Whatever else is wrong with the call: the host x, or a host out.
    from fp4q.cuda import driver

    monkeypatch.setattr(driver, "gpu_status", lambda: (False, "the reason the probe gave"))
    for call in (lambda: fp4q.quantize_nvfp4(np.zeros((M, K), np.float32), 1.0),
                 lambda: fp4q.quantize_mxfp4(np.zeros((M, K), np.uint16), out=np.zeros(Q_SHAPE, np.uint8)),
                 lambda: fp4q.dequantize_nvfp4(np.zeros(Q_SHAPE, np.uint8), np.zeros(SF_LINEAR, np.uint8), 1.0),
                 lambda: fp4q.global_scale([[0] * K] * M)):
        with pytest.raises(fp4q.NoGpuError, match=r"^fp4q needs an NVIDIA GPU and driver: the reason the probe gave$"):
            call()
    assert issubclass(fp4q.NoGpuError, fp4q.CudaError) and "NoGpuError" in fp4q.__all__


@HOST_XS
def test_x_on_the_host_is_rejected_as_such_where_there_is_a_gpu(x, value, monkeypatch):
    fakes.install(monkeypatch)
    expect_rejected(
        TypeError, r"\bx must be", _words(value), _words("must be a CUDA array"),
        lambda: fp4q.quantize_nvfp4(x, 1.0),
    )


def test_x_torch_cpu_tensor(monkeypatch):
    torch = pytest.importorskip("torch", exc_type=ModuleNotFoundError)
    x = torch.zeros((M, K), dtype=torch.bfloat16)
    _expect_no_gpu_or_host_rejected("Tensor", lambda: fp4q.quantize_nvfp4(x, 1.0))
    fakes.install(monkeypatch)
    expect_rejected(
        TypeError, r"\bx must be", _words("got a torch Tensor on cpu"), _words("must be a CUDA array"),
        lambda: fp4q.quantize_nvfp4(x, 1.0),
    )


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float64"])
def test_x_wrong_dtype(dtype, path, cp):
    x = cp.zeros((M, K), dtype=dtype)
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(
        TypeError, r"\bx must hold", _words(f"got dtype {dtype}"), _words("bfloat16, float16 or float32"), call, watch
    )


def test_x_base_splits_an_element(path, cp):
    # CuPy builds a uint16 array at any address: one at an odd one would make the kernels' loads fault.
    buf = cp.zeros(2 * M * K + 2, dtype=cp.uint8)
    x = cp.ndarray((M, K), dtype=cp.uint16, memptr=buf.data + 1)
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(ValueError, r"x's base address", _words(f"{x.data.ptr:#x}"),
                    _words("not a multiple of its element size (2 bytes)"), call, watch)


def test_x_last_dimension_not_contiguous(path, cp):
    x = _x(cp, (M, 2 * K))[:, ::2]
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(
        ValueError, r"last dimension of x", _words("got stride 4"), _words("must be contiguous (stride 2 bytes)"),
        call, watch,
    )


@pytest.mark.parametrize("k", [8, 40, 65])
def test_x_k_not_a_multiple_of_16(k, path, cp):
    x = _x(cp, (M, k))
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(
        ValueError, r"K \(the last dimension of x\)", _words(f"got {k}"), _words("must be a multiple of 16"),
        call, watch,
    )


def test_x_rank_0(path, cp):
    # A 1-D x of shape (K,) is one row (test_api); a 0-d array has no K.
    x = cp.zeros((), dtype=cp.uint16)
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(
        ValueError, r"\bx must have", _words("got shape ()"), _words("at least 1 dimension (..., K)"), call, watch
    )


def test_x_rows_reversed_negative_stride(path, cp):
    x = _x(cp)[::-1]
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(ValueError, r"rows of x", _words(f"row stride {-2 * K} bytes"), _words("must not overlap"),
                    call, watch)


def test_x_leading_dimensions_do_not_flatten(path, cp):
    x = _x(cp, (2, 4, K))[:, :2, :]  # dimension 0 strides over rows that are not part of x
    call, watch = _quantize_with_buffers(cp, path, x)
    expect_rejected(
        ValueError, r"leading dimensions of x", _words(f"dimension 0 has stride {4 * K * 2} bytes"),
        _words("must flatten to rows with one stride"), call, watch,
    )


# --- devices (needs two GPUs) -----------------------------------------------------------------------------------


@gpu
@pytest.mark.parametrize("which", ["stream", "tensor_sf", "out", "sf_out"])
def test_argument_on_another_device_than_x(which, cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    with cp.cuda.Device(1):
        x = _x(cp)
        out, sf_out = _buffers(cp)
    with cp.cuda.Device(0):
        stream = cp.cuda.Stream(non_blocking=True)
        tsf = cp.asarray(np.float32(1.0))
        out0, sf_out0 = _buffers(cp)
    kwargs = dict(out=out, sf_out=sf_out, stream=None)
    tensor_sf = 1.0
    if which == "stream":
        kwargs["stream"] = stream
    elif which == "tensor_sf":
        tensor_sf = tsf
    else:
        kwargs[which] = {"out": out0, "sf_out": sf_out0}[which]
    with cp.cuda.Device(1):
        expect_rejected(
            ValueError, rf"\b{which}\b", _words("device 0", "x is on device 1"), _words("on device"),
            lambda: fp4q.quantize_nvfp4(x, tensor_sf, **kwargs), [out, sf_out, out0, sf_out0],
        )


# --- tensor_sf --------------------------------------------------------------------------------------------------

RANGE_RULE = _words("must be a float32 in [2**-126, 2**100]")


@pytest.mark.parametrize(
    "tensor_sf",
    [0.0, -0.0, -1.0, np.float32(-2.0), float("nan"), float("inf"), float("-inf"), 2.0**-127, 1e-40, 2.0**101,
     3.4e38, 0],
    ids=lambda v: repr(v),
)
def test_tensor_sf_host_value_out_of_range(tensor_sf, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), tensor_sf)
    expect_rejected(ValueError, r"tensor_sf must be", _words(f"got {tensor_sf!r}"), RANGE_RULE, call, watch)


@pytest.mark.parametrize("tensor_sf", [10**400, 1e39], ids=["int_10e400", "float_1e39"])
def test_tensor_sf_host_value_beyond_float32(tensor_sf, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), tensor_sf)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expect_rejected(ValueError, r"tensor_sf must be", _words(f"got {tensor_sf!r}"), RANGE_RULE, call, watch)


@pytest.mark.parametrize("tensor_sf", [True, False, np.True_], ids=["True", "False", "np_True"])
def test_tensor_sf_bool(tensor_sf, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), tensor_sf)
    expect_rejected(
        TypeError, r"tensor_sf must be", _words(f"got {tensor_sf!r}"), _words("a float or a device float32 scalar"),
        call, watch,
    )


STRING_RULE = _words(f"a float, a device float32 scalar, a device float32 array of one value per row, 'dynamic' or 'dynamic_per_row'")


@pytest.mark.parametrize("tensor_sf", ["1.0", "static"])
def test_tensor_sf_string(tensor_sf, path, cp):
    # ValueError, not TypeError: one string is valid (tensor_sf="dynamic").
    call, watch = _quantize_with_buffers(cp, path, _x(cp), tensor_sf)
    expect_rejected(ValueError, r"tensor_sf must be", _words(f"got {tensor_sf!r}"), STRING_RULE, call, watch)


def test_tensor_sf_device_scalar_misaligned(path, cp):
    # A float32 at an address the kernel's 4-byte load cannot take (CuPy builds one from any pointer).
    buf = cp.zeros(8, dtype=cp.uint8)
    tsf = cp.ndarray((), dtype=cp.float32, memptr=buf.data + 2)
    call, watch = _quantize_with_buffers(cp, path, _x(cp), tsf)
    expect_rejected(ValueError, r"tensor_sf must be", _words(f"got address {tsf.data.ptr:#x}"),
                    _words("4-byte aligned"), call, watch)


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_tensor_sf_device_scalar_wrong_dtype(dtype, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), cp.ones((), dtype=dtype))
    # A ValueError here although a wrong x/out dtype is a TypeError: pinned as the code has it.
    expect_rejected(
        ValueError, r"tensor_sf must be", _words(f"got dtype {dtype} shape ()"),
        _words("float32 array of shape () or (1,)"), call, watch,
    )


@pytest.mark.parametrize("shape", [(2,), (1, 1), (0,)])
def test_tensor_sf_device_scalar_wrong_shape(shape, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), cp.ones(shape, dtype=cp.float32))
    expect_rejected(
        ValueError, r"tensor_sf must be", _words(f"shape {shape}"), _words("float32 array of shape () or (1,)"),
        call, watch,
    )


@pytest.mark.parametrize("tensor_sf", [np.array(1.0, np.float32), np.array([1.0], np.float32)], ids=["0d", "1d"])
def test_tensor_sf_host_numpy_array(tensor_sf, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), tensor_sf)
    expect_rejected(
        TypeError, r"tensor_sf must be", _words("got a host numpy array"), _words("device (CuPy or torch) float32 scalar"),
        call, watch,
    )


# --- out / sf_out -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, sf_layout, x_shape, bad_shape, want",
    [
        ("out", "swizzled", (M, K), (M, K // 2 - 1), Q_SHAPE),
        ("out", "swizzled", (M, K), (M * K // 2,), Q_SHAPE),
        ("out", "linear", (2, 2, K), Q_SHAPE, (2, 2, K // 2)),
        ("sf_out", "swizzled", (M, K), SF_LINEAR, SF_SWIZZLED),
        ("sf_out", "linear", (M, K), SF_SWIZZLED, SF_LINEAR),
        ("sf_out", "linear", (M, K), (M, K // 16 + 1), SF_LINEAR),
    ],
)
def test_out_wrong_shape(name, sf_layout, x_shape, bad_shape, want, path, cp):
    out, sf_out = _buffers(cp, sf_layout, q_shape=(2, 2, K // 2) if len(x_shape) == 3 else Q_SHAPE)
    bufs = {"out": out, "sf_out": sf_out, name: cp.full(bad_shape, FILL, dtype=cp.uint8)}
    call, watch = _quantize_with_buffers(cp, path, _x(cp, x_shape), sf_layout=sf_layout, **bufs)
    expect_rejected(
        ValueError, rf"\b{name} must have shape", _words(f"got {bad_shape}"), _words(f"must have shape {want}"),
        call, watch,
    )


@pytest.mark.parametrize("name", ["out", "sf_out"])
@pytest.mark.parametrize("dtype", ["int8", "uint16", "float32"])
def test_out_wrong_dtype(name, dtype, path, cp):
    out, sf_out = _buffers(cp)
    shape = {"out": Q_SHAPE, "sf_out": SF_SWIZZLED}[name]
    itemsize = np.dtype(dtype).itemsize
    bad = cp.full(shape[:-1] + (shape[-1] * itemsize,), FILL, dtype=cp.uint8).view(dtype)
    bufs = {"out": out, "sf_out": sf_out, name: bad}
    call, watch = _quantize_with_buffers(cp, path, _x(cp), **bufs)
    expect_rejected(TypeError, rf"\b{name} must have dtype", _words(f"got {dtype}"), _words("dtype uint8"),
                    call, watch)


@pytest.mark.parametrize("name", ["out", "sf_out"])
def test_out_host_numpy(name, path, cp):
    out, sf_out = _buffers(cp, "linear")
    host = np.full({"out": Q_SHAPE, "sf_out": SF_LINEAR}[name], FILL, dtype=np.uint8)
    bufs = {"out": out, "sf_out": sf_out, name: host}
    call, watch = _quantize_with_buffers(cp, path, _x(cp), sf_layout="linear", **bufs)
    expect_rejected(TypeError, rf"\b{name} must be", _words("got a host ndarray"), _words("a CUDA array"), call,
                    [b for b in watch if b is not host])
    assert (host == FILL).all()


@pytest.mark.parametrize("name, how", [("out", "strided"), ("out", "transposed"), ("sf_out", "strided")])
def test_out_not_contiguous(name, how, path, cp):
    out, sf_out = _buffers(cp, "linear")
    shape = {"out": Q_SHAPE, "sf_out": SF_LINEAR}[name]
    if how == "strided":
        bad = cp.full((shape[0], 2 * shape[1]), FILL, dtype=cp.uint8)[:, ::2]
    else:
        bad = cp.full(shape[::-1], FILL, dtype=cp.uint8).T
    bufs = {"out": out, "sf_out": sf_out, name: bad}
    call, watch = _quantize_with_buffers(cp, path, _x(cp), sf_layout="linear", **bufs)
    expect_rejected(ValueError, rf"\b{name} must be C-contiguous", STRIDES, _words("C-contiguous"),
                    call, watch)


def test_contiguity_rule_asks_flags_where_cupy_has_no_flag_of_its_own():
    from types import SimpleNamespace

    from fp4q.ops.checks import c_contiguous

    for contiguous in (True, False):
        assert c_contiguous(SimpleNamespace(flags=SimpleNamespace(c_contiguous=contiguous))) is contiguous


@gpu
def test_contiguity_rule_reads_cupys_own_flag(cp):
    """The output rule reads CuPy's contiguity flag directly; it must say what flags.c_contiguous says."""
    from fp4q.ops.checks import c_contiguous

    base = cp.zeros((8, 64), dtype=cp.uint8)
    arrays = [base, base.T, base[:, ::2], base[::2], base[:1], base[:1, ::2], base[3:4, 5:37], base[:0],
              base[:, :0], base.reshape(8, 1, 64)[:, :, 1:], cp.zeros((), dtype=cp.uint8), base.ravel()[5:40]]
    assert [c_contiguous(a) for a in arrays] == [a.flags.c_contiguous for a in arrays]


@pytest.mark.parametrize("name", ["out", "sf_out"])
def test_out_overlapping_the_input(name, path, cp):
    base = cp.full(4096, FILL, dtype=cp.uint8)  # one allocation: x, and a view into it as the output
    x = base[: M * K * 2].view(cp.uint16).reshape(M, K)
    out, sf_out = _buffers(cp)
    if name == "out":
        out = base[256 : 256 + M * K // 2].reshape(Q_SHAPE)
    else:
        sf_out = base[:512].reshape(SF_SWIZZLED)
    call, watch = _quantize_with_buffers(cp, path, x, out=out, sf_out=sf_out)
    expect_rejected(ValueError, rf"\b{name} overlaps", BYTE_RANGE, _words("overlaps x (outputs must not alias"), call,
                    [base, *watch])


def test_out_and_sf_out_overlapping_each_other(path, cp):
    base = cp.full(1024, FILL, dtype=cp.uint8)
    out = base[:128].reshape(Q_SHAPE)
    sf_out = base[120:136].reshape(SF_LINEAR)
    call, watch = _quantize_with_buffers(cp, path, _x(cp), sf_layout="linear", out=out, sf_out=sf_out)
    expect_rejected(ValueError, r"\bsf_out overlaps out", BYTE_RANGE, _words("overlaps out"), call, [base])


# --- sf_layout, config, pdl, stream -----------------------------------------------------------------------------

BAD_LAYOUTS = ["bogus", "SWIZZLED", "", None, 0, ["swizzled"]]  # a list: unhashable in a plan key


@pytest.mark.parametrize("sf_layout", BAD_LAYOUTS, ids=repr)
def test_sf_layout_invalid_is_rejected_before_the_rules_on_x(sf_layout, monkeypatch):
    # The options' rules run before those on the values of x (its dtype, K, strides): x breaks one of
    # each here. (Whether x is a CUDA array at all is known first: without a GPU, a host x raises
    # NoGpuError, test_no_gpu_error_comes_before_any_rule_on_a_host_array.) No GPU is needed: the fakes.
    cp = fakes.install(monkeypatch, fakes.HostCupy()).cupy
    for x in (cp.zeros((M, K), dtype=cp.float32), cp.zeros((M, 24), dtype=cp.uint16), _x(cp, (M, 2 * K))[:, ::2]):
        expect_rejected(
            ValueError, r"sf_layout must be", _words(f"got {sf_layout!r}"),
            _words("one of 'swizzled', 'linear', '8x4'"), lambda: fp4q.quantize_nvfp4(x, 1.0, sf_layout=sf_layout),
        )


@pytest.mark.parametrize("sf_layout", BAD_LAYOUTS, ids=repr)
def test_sf_layout_invalid(sf_layout, path, cp):
    out, sf_out = _buffers(cp)
    call, watch = _quantize_with_buffers(cp, path, _x(cp), sf_layout=sf_layout, out=out, sf_out=sf_out)
    expect_rejected(ValueError, r"sf_layout must be", _words(f"got {sf_layout!r}"),
                    _words("one of 'swizzled', 'linear', '8x4'"), call, watch)


@pytest.mark.parametrize(
    "config, value",
    [("fast", "str"), ({"tile_m": 128}, "dict"), (QuantizeConfig, "type"), (1, "int")],
    ids=["str", "dict", "class", "int"],
)
def test_config_wrong_type(config, value, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), config=config)
    expect_rejected(
        TypeError, r"config must be", _words(f"got {value}"), _words("None, a QuantizeConfig or a SimtConfig"),
        call, watch,
    )


def test_config_wrong_type_with_empty_input(cp):
    x = cp.zeros((0, K), dtype=cp.uint16)
    with pytest.raises(TypeError, match=r"config must be"):
        fp4q.quantize_nvfp4(x, 1.0, config="fast")


def _unservable(cp, obstacle):
    """(x, out, what the message names) for a call that K or a pointer keeps from a kernel."""
    x, out = _x(cp), None
    if obstacle == "k48":
        return _x(cp, (M, 48)), cp.full((M, 24), FILL, dtype=cp.uint8), "K=48 is not a multiple of 32"
    if obstacle == "x_misaligned":
        return _x(cp, (M * K + 1,))[1:].reshape(M, K), out, "x's base address"
    if obstacle == "row_stride":
        return _x(cp, (M, K + 4))[:, :K], out, f"row stride of {(K + 4) * 2} bytes is not a multiple of 16"
    return x, cp.full(M * K // 2 + 1, FILL, dtype=cp.uint8)[1:].reshape(Q_SHAPE), "out's base address"


@pytest.mark.parametrize("config, obstacle, rule", [
    *[pytest.param(QuantizeConfig(), o, ("config is a TMA QuantizeConfig", "TMA cannot serve this call"),
                   id=f"tma-{o}") for o in ("k48", "x_misaligned", "row_stride", "out_misaligned")],
    *[pytest.param(SimtConfig(vector=True), o, ("config is a vector SimtConfig", "16-byte loads cannot serve"),
                   id=f"vector-{o}") for o in ("x_misaligned", "row_stride", "out_misaligned")],
    pytest.param(SimtConfig(vector=True, vector_elements=32), "k48",
                 ("config.vector_elements=32", "quantizes 2 whole groups per unit"), id="vector-x32-k48"),
])
def test_explicit_config_on_a_call_its_kernel_cannot_serve(config, obstacle, rule, path, cp):
    out, sf_out = _buffers(cp)
    x, bad_out, value = _unservable(cp, obstacle)
    call, watch = _quantize_with_buffers(cp, path, x, out=out if bad_out is None else bad_out, sf_out=sf_out,
                                         config=config)
    expect_rejected(ValueError, rf"\b{rule[0]}", _words(value), _words(rule[1]), call, watch)


def test_mxfp4_config_passed_to_quantize_nvfp4(path, cp):
    config = QuantizeConfig(fmt="mxfp4")
    call, watch = _quantize_with_buffers(cp, path, _x(cp, (M, 128)), out=cp.full((M, 64), FILL, dtype=cp.uint8),
                                         sf_out=cp.full(fp4q.swizzled_sf_shape(M, 256, "mxfp4"), FILL, dtype=cp.uint8), config=config)
    expect_rejected(ValueError, r"\bconfig\.fmt\b", _words("'mxfp4'"), _words("quantize_nvfp4 quantizes to NVFP4",
                                                                                "fmt='nvfp4'"), call, watch)


DYNAMIC_BAD = {  # (type, argument named, value, rule, what the row changes)
    "out_shape": (ValueError, r"\bout must have shape", _words("got (4, 48)"), _words("have shape (4, 32)"),
                  dict(out="bad_shape")),
    "sf_layout": (ValueError, r"sf_layout must be", _words("got 'bogus'"), _words("one of 'swizzled', 'linear', '8x4'"),
                  dict(sf_layout="bogus")),
    "pdl": (TypeError, r"pdl must be a bool", _words("got 1"), _words("must be a bool"), dict(pdl=1)),
    "stream": (TypeError, r"stream must be", _words("got 'default'"), _words("a cupy.cuda.Stream"),
               dict(stream="default")),
    "config": (TypeError, r"config must be", _words("got str"), _words("None, a QuantizeConfig or a SimtConfig"),
               dict(config="fast")),
    "x_dtype": (TypeError, r"\bx must hold", _words("got dtype int8"), _words("bfloat16, float16 or float32"),
                dict(x="int8")),
}


def _dynamic_bad_call(cp, bad):
    """The row's call, and the caller's buffers it must leave untouched."""
    exc_type, arg, value, rule, change = DYNAMIC_BAD[bad]
    x = _x(cp)
    out, sf_out = _buffers(cp)
    kwargs = dict(sf_layout="swizzled", out=out, sf_out=sf_out)
    kwargs.update(change)
    if isinstance(kwargs["out"], str):
        kwargs["out"] = cp.full((M, K // 2 + 16), FILL, dtype=cp.uint8)
    if "x" in kwargs:
        x = cp.zeros((M, K), dtype=kwargs.pop("x"))
    return _launching_nothing(lambda: fp4q.quantize_nvfp4(x, "dynamic", **kwargs)), [kwargs["out"], kwargs["sf_out"],
                                                                                      out, sf_out]


@pytest.mark.parametrize("bad", sorted(DYNAMIC_BAD))
def test_dynamic_tensor_sf_with_another_bad_argument(bad, cp):
    """tensor_sf='dynamic' (the scale computed on the device first) does not change what a bad argument
    raises, and nothing is written to the caller's buffers."""
    exc_type, arg, value, rule, _ = DYNAMIC_BAD[bad]
    call, watch = _dynamic_bad_call(cp, bad)
    expect_rejected(exc_type, arg, value, rule, call, watch)


CONFIG_ERRORS = [
    # (class, fields, field named, value as written, rule)
    (QuantizeConfig, dict(tile_m=100), "tile_m", "got 100", "must be 128 or 256"),
    (QuantizeConfig, dict(tile_m=128.0), "tile_m", "got 128.0", "must be 128 or 256"),
    (QuantizeConfig, dict(tile_k=96), "tile_k", "got 96", "must be a multiple of 64"),
    (QuantizeConfig, dict(tile_k=2048), "tile_k", "got 2048", "integer in [64, 1024]"),
    (QuantizeConfig, dict(num_stages=0), "num_stages", "got 0", "integer in [1, 16]"),
    (QuantizeConfig, dict(num_stages=4.0), "num_stages", "got 4.0", "integer in [1, 16]"),
    (QuantizeConfig, dict(num_stages=True), "num_stages", "got True", "integer in [1, 16]"),
    (QuantizeConfig, dict(num_stages=16), "num_stages=16", "shared memory of", "exceeds the sm_90a limit"),
    (QuantizeConfig, dict(consumer_warpgroups=4), "consumer_warpgroups", "got 4", "integer in [1, 3]"),
    (QuantizeConfig, dict(consumer_warpgroups=3), "consumer_warpgroups", "384 threads", "must split evenly"),
    (QuantizeConfig, dict(out_buffers=1), "out_buffers", "got 1", "integer in [2, 4]"),
    (QuantizeConfig, dict(min_ctas_per_sm=0), "min_ctas_per_sm", "got 0", "integer in [1, 4]"),
    (QuantizeConfig, dict(min_ctas_per_sm=4), "min_ctas_per_sm=4", "bytes of shared memory", "do not fit"),
    (QuantizeConfig, dict(input_swizzle=48), "input_swizzle", "got 48", "must be one of [0, 32, 64, 128]"),
    (QuantizeConfig, dict(output_swizzle="B64"), "output_swizzle", "got 'B64'", "must be one of [0, 32, 64, 128]"),
    (QuantizeConfig, dict(input_box_k=48), "input_box_k", "got 96 bytes", "must fill the input_swizzle span"),
    (QuantizeConfig, dict(input_box_k=100, input_swizzle=0), "input_box_k", "got 200 bytes", "multiple of 16"),
    (QuantizeConfig, dict(output_box_k=0), "output_box_k", "got 0", "integer in [1, 256]"),
    (QuantizeConfig, dict(persistent=1), "persistent", "got 1", "must be a bool"),
    (QuantizeConfig, dict(setmaxnreg="yes"), "setmaxnreg", "got 'yes'", "must be a bool"),
    (QuantizeConfig, dict(fmt="fp8"), "fmt", "got 'fp8'", "must be 'nvfp4' or 'mxfp4'"),
    (QuantizeConfig, dict(fmt=16), "fmt", "got 16", "must be 'nvfp4' or 'mxfp4'"),  # a group size is no format
    (QuantizeConfig, dict(arch="sm_89"), "arch", "got 'sm_89'", "must be one of 'sm_80', 'sm_90a', 'sm_100f'"),
    (QuantizeConfig, dict(sf_layout="tiled"), "sf_layout", "got 'tiled'", "must be one of 'swizzled', 'linear', '8x4'"),
    (QuantizeConfig, dict(tensor_sf_mode="host"), "tensor_sf_mode", "got 'host'", "'value', 'pointer'"),
    (QuantizeConfig, dict(fmt="mxfp4", tensor_sf_mode="pointer"), "tensor_sf_mode", "got 'pointer'",
     "must be one of 'value' for fmt='mxfp4'"),
    (QuantizeConfig, dict(input_dtype="float32"), "input_dtype", "got 'float32'", "must be 'bfloat16' or 'float16'"),
    (SimtConfig, dict(threads=100), "threads", "got 100", "must be one of 64, 128, 256, 512, 1024"),
    (SimtConfig, dict(threads=256.0), "threads", "got 256.0", "must be one of 64, 128, 256, 512, 1024"),
    (SimtConfig, dict(arch="sm_90"), "arch", "got 'sm_90'", "must be one of 'sm_80', 'sm_90a'"),
    (SimtConfig, dict(sf_layout="row"), "sf_layout", "got 'row'", "must be one of 'swizzled', 'linear', '8x4'"),
]


@pytest.mark.parametrize(
    "cls, fields, field, value, rule", CONFIG_ERRORS,
    ids=[f"{c.__name__}-{'-'.join(f'{k}={v!r}' for k, v in f.items())}" for c, f, *_ in CONFIG_ERRORS],
)
def test_config_invalid_fields_raise_config_error(cls, fields, field, value, rule):
    info = expect_rejected(ConfigError, rf"\b{re.escape(field)}", _words(value), _words(rule),
                           lambda: cls(**fields))
    assert isinstance(info.value, ValueError)
    # replace() validates the same way
    expect_rejected(ConfigError, rf"\b{re.escape(field)}", _words(value), _words(rule),
                    lambda: cls().replace(**fields))


@pytest.mark.parametrize("pdl", [1, 0, None, "yes", np.True_], ids=repr)
def test_pdl_not_a_bool(pdl, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), pdl=pdl)
    expect_rejected(TypeError, r"pdl must be a bool", _words(f"got {pdl!r}"), _words("must be a bool"),
                    call, watch)


@pytest.mark.parametrize("stream, value", [("default", "str"), (1.5, "float"), (object(), "object"), ([0], "list")],
                         ids=["str", "float", "object", "list"])
def test_stream_wrong_type(stream, value, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), stream=stream)
    expect_rejected(
        TypeError, r"stream must be", _words(f"got {stream!r} ({value})"),
        _words("a cupy.cuda.Stream, a torch stream, an object with __cuda_stream__ or a raw handle (int)"), call, watch,
    )


@pytest.mark.parametrize("stream", [True, False])
def test_stream_bool(stream, path, cp):
    call, watch = _quantize_with_buffers(cp, path, _x(cp), stream=stream)
    expect_rejected(TypeError, r"stream must be", _words(f"got {stream!r}"), _words("raw handle"), call, watch)
