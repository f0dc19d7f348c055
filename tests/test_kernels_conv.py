"""The compiled convolution and pooling kernels (``kernels/conv.py`` + ``kernels/_jit_conv.py``) against the
float64 references of the ops (``ops/conv.py``, ``ops/pool.py``) and the NumPy path: 1-D, 2-D and 3-D,
strides, pads, dilations, groups, depthwise, ceil_mode, Float32 and Float64, both GEMMs (gradir's and
BLAS), and bits identical for 1 and 2 threads with the work split into many blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gradir.backends.cpu.kernels import conv as K
from gradir.backends.cpu.kernels import jit, parallel
from gradir.backends.cpu.kernels.registry import KERNELS
from gradir.ir.types import DType, TensorType
from gradir.ops.conv import ConvGradOp, ConvOp
from gradir.ops.pool import AveragePoolGradOp, AveragePoolOp, MaxPoolGradOp, MaxPoolOp

JC = jit.load("conv")
pytestmark = pytest.mark.skipif(JC is None, reason="numba is a core dependency; the compiled path is off")

# X shape, W shape, attributes
CONVS = [
    ((2, 4, 9), (6, 2, 3), dict(group=2, strides=[2], pads=[1, 2], dilations=[2])),
    ((3, 4, 7, 6), (6, 2, 3, 2), dict(group=2, strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2])),
    ((2, 3, 8, 8), (5, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((2, 6, 7, 8), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),  # depthwise
    ((2, 6, 7, 8), (6, 1, 3, 3), dict(group=6, strides=[2, 2], pads=[0, 1, 2, 1], dilations=[1, 2])),
    ((2, 6, 9), (6, 1, 3), dict(group=6, strides=[2], pads=[2, 0])),  # depthwise 1-D
    ((2, 3, 5, 6, 4), (4, 3, 2, 3, 2), dict(pads=[1, 0, 1, 0, 1, 1], strides=[1, 2, 1])),
    ((2, 4, 5, 6, 4), (4, 1, 3, 3, 2), dict(group=4, pads=[1, 0, 1, 0, 1, 1])),  # depthwise 3-D
    ((2, 4, 6, 6), (8, 2, 1, 1), dict(group=2)),  # pointwise, grouped
    ((3, 6, 6, 5), (4, 6, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
]
POOLS = [
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((2, 3, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0], ceil_mode=1)),
    ((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),  # the 2x2 kernel
    ((2, 3, 7, 9), dict(kernel_shape=[2, 2], strides=[2, 2])),  # the 2x2 kernel, a row and a column left over
    ((2, 3, 7, 9), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),  # partial windows: the general one
    ((2, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[1, 2], dilations=[2, 1], pads=[1, 0, 2, 1])),
    ((2, 2, 5, 4, 6), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 1], ceil_mode=1)),
]


def _attrs(cls: type, given: dict) -> dict:
    return {**{a.name: a.default for a in cls.ATTRS if not a.required}, **given}


def _close(a: np.ndarray, ref: np.ndarray, dtype: type) -> None:
    assert a.dtype == dtype and a.shape == ref.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(a, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))


def _many_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every image its own block and every plane its own chunk: 2 threads then really share the work."""
    monkeypatch.setattr(K, "_BLOCK_BYTES", 1)
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 1)


def _both_thread_counts(fn, *args, **attrs) -> tuple:  # type: ignore[no-untyped-def]
    got = []
    for n in (1, 2):
        with parallel.cores(n):
            r = fn(*args, **attrs)
        got.append(tuple(np.copy(a) for a in (r if isinstance(r, tuple) else (r,))))
    for a, b in zip(*got):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return got[0] if len(got[0]) > 1 else got[0][0]


@pytest.mark.parametrize("fast_gemm", [True, False], ids=["gradir-gemm", "blas"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ws,given", CONVS)
def test_conv_and_conv_grad_match_the_float64_references_for_1_and_2_threads(xs, ws, given, dtype, fast_gemm,
                                                                             monkeypatch):
    monkeypatch.setattr(JC, "FAST_LARGE", fast_gemm)
    _many_blocks(monkeypatch)
    rng = np.random.default_rng(len(xs) * 7 + ws[0])
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (xs, ws, (ws[0],)))
    attrs = _attrs(ConvOp, given)
    y = _both_thread_counts(K.conv, x, w, b, **attrs)
    _close(y, ConvOp.reference(x, w, b, **attrs), dtype)
    _close(_both_thread_counts(K.conv, x, w, None, **attrs), ConvOp.reference(x, w, None, **attrs), dtype)
    dy = rng.standard_normal(y.shape).astype(dtype)
    got = _both_thread_counts(K.conv_grad, dy, x, w, **attrs)
    for a, ref in zip(got, ConvGradOp.reference(dy, x, w, **attrs)):
        _close(a, ref, dtype)


def test_conv_grad_writes_into_the_runtimes_buffers():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    attrs = _attrs(ConvOp, {"pads": [1, 1, 1, 1]})
    dy = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    bufs = (np.full(x.shape, np.nan, np.float32), np.full(w.shape, np.nan, np.float32), np.full(4, np.nan, np.float32))
    got = K.conv_grad(dy, x, w, out=bufs, **attrs)
    assert all(a is o for a, o in zip(got, bufs))
    for a, ref in zip(got, ConvGradOp.reference(dy, x, w, **attrs)):
        _close(a, ref, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,given", POOLS)
def test_pooling_kernels_match_the_float64_references_for_1_and_2_threads(xs, given, dtype, monkeypatch):
    _many_blocks(monkeypatch)
    rng = np.random.default_rng(len(xs))
    x = rng.standard_normal(xs).astype(dtype)
    attrs = _attrs(MaxPoolOp, given)
    y, idx = _both_thread_counts(K.max_pool, x, **attrs)
    ry, ridx = MaxPoolOp.reference(x, **attrs)
    _close(y, ry, dtype)
    assert idx.dtype == np.int64 and np.array_equal(idx, ridx)
    dy = rng.standard_normal(y.shape).astype(dtype)
    gattrs = _attrs(MaxPoolGradOp, {**given, "shape": list(xs)})
    _close(_both_thread_counts(K.max_pool_grad, dy, idx, **gattrs), MaxPoolGradOp.reference(dy, idx, **gattrs), dtype)
    for include in (0, 1):
        aattrs = _attrs(AveragePoolOp, {**given, "count_include_pad": include})
        _close(_both_thread_counts(K.average_pool, x, **aattrs), AveragePoolOp.reference(x, **aattrs), dtype)
        gattrs = _attrs(AveragePoolGradOp, {**given, "count_include_pad": include, "shape": list(xs)})
        _close(_both_thread_counts(K.average_pool_grad, dy, **gattrs), AveragePoolGradOp.reference(dy, **gattrs),
               dtype)


def test_max_pool_takes_the_first_maximum_in_window_order_and_nan_wins_as_the_numpy_path():
    """Ties (small integers) and NaNs: the compiled Indices are the NumPy path's (np.argmax's rule), also
    column-major (storage_order=1)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, (2, 3, 7, 6)).astype(np.float32)
    x[0, 1, 2, 3] = x[1, 2, 0, 0] = np.nan
    x[1, 0, 4, 2] = x[1, 0, 5, 3] = np.nan
    windows = ({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "ceil_mode": 1},
               {"kernel_shape": [2, 2], "strides": [2, 2]})
    for order, given in itertools.product((0, 1), windows):
        attrs = _attrs(MaxPoolOp, {**given, "storage_order": order})
        y, idx = K.max_pool(x, **attrs)
        ny, nidx = K.max_pool_np(x, **attrs)
        assert np.array_equal(y, ny, equal_nan=True) and np.array_equal(idx, nidx)


def test_max_pool_of_a_shard_writes_the_whole_inputs_indices():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2, 4, 4)).astype(np.float32)
    attrs = _attrs(MaxPoolOp, {"kernel_shape": [2, 2], "strides": [2, 2]})
    rows = np.array([[5, 9], [6, 9], [7, 9]], np.int64)
    for axis in (0, 1):
        a = dict(attrs, shard_axis=axis)
        r = rows if axis == 0 else rows[:2]
        xs = x if axis == 0 else x[:, :2]
        assert np.array_equal(K.max_pool(xs, r, **a)[1], K.max_pool_np(xs, r, **a)[1])


def test_the_numpy_path_stays_the_fallback():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 3))
    attrs = _attrs(ConvOp, {"pads": [1, 1, 1, 1]})
    with jit.disabled():
        y = K.conv(x, w, None, **attrs)
    np.testing.assert_allclose(y, K.conv(x, w, None, **attrs), rtol=1e-12, atol=1e-12)


def test_a_large_convolution_and_its_gradient_get_two_cores():
    """The schedule gives a convolution of a CNN's size two cores (its kernels split over images or channels);
    a tiny one keeps one.  (Before the compiled kernels Conv had no width: one core, one BLAS thread.)"""
    f32 = lambda *s: TensorType(DType.Float32, s)  # noqa: E731
    x, w, y = f32(64, 64, 16, 16), f32(64, 64, 3, 3), f32(64, 64, 16, 16)
    attrs = _attrs(ConvOp, {"pads": [1, 1, 1, 1]})
    assert KERNELS[ConvOp].width([x, w, None], [y], attrs) == 2
    assert KERNELS[ConvGradOp].width([y, x, w], [x, w, f32(64)], attrs) == 2
    small = f32(1, 2, 4, 4)
    assert KERNELS[ConvOp].width([small, f32(2, 2, 3, 3), None], [small], attrs) == 1


# X shape, W shape, attributes: stride 1 along the last axis (the padded path) with asymmetric pads, dilations,
# strides along the other axes (rows no window reaches), groups, a pad wider than the window, 1-D to 3-D
PADDED = [
    ((2, 3, 9), (4, 3, 3), dict(pads=[2, 1], dilations=[2])),
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(group=2, strides=[2, 1], pads=[1, 0, 2, 3], dilations=[2, 2])),
    ((3, 3, 8, 5), (4, 3, 1, 3), dict(strides=[3, 1], pads=[0, 4, 1, 0])),
    ((2, 3, 5, 6, 4), (4, 3, 2, 3, 2), dict(pads=[1, 0, 2, 0, 1, 1], strides=[2, 2, 1], dilations=[1, 2, 2])),
    ((2, 5, 16, 16), (4, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("xs,ws,given", PADDED)
def test_the_padded_columns_are_the_general_paths_bit_for_bit(xs, ws, given, dtype):
    """im2col, col2im and the packed dW columns through padded planes (stride 1 along the last axis) give the
    general path's bits: the same copies, and col2im the same additions in the same order."""
    from gradir.backends.cpu.kernels import _jit_im2col as ji

    rng = np.random.default_rng(sum(xs))
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    attrs = _attrs(ConvOp, given)
    g3, x5 = K._geo3(xs[2:], K._geo(x, w, attrs)), K._as3d(x, 2)
    assert ji.padded_path(g3)
    n, c, k, p = xs[0], xs[1], int(np.prod(ws[2:])), int(np.prod(g3[:, 5]))
    for n0, n1 in ((0, n), (1, n)):
        a, b = (np.full((c * k, (n1 - n0) * p), np.nan, dtype) for _ in range(2))
        ji._im2col_padded(x5, g3, n0, n1, a)
        ji._im2col_general(x5, g3, n0, n1, b)
        assert np.array_equal(a, b)
        dcols = rng.standard_normal(a.shape).astype(dtype)
        da, db = (np.full(x5.shape, np.nan, dtype) for _ in range(2))
        ji._col2im_padded(dcols, g3, n0, n1, da)
        ji._col2im_general(dcols, g3, n0, n1, db)
        assert np.array_equal(da[n0:n1], db[n0:n1]) and np.isnan(da[:n0]).all()
    group = attrs["group"]
    pw = 16 if dtype == np.float32 else 8
    cgk = c // group * k
    for i in range(n):
        a, b = (np.full((group, -(-cgk // pw), p, pw), np.nan, dtype) for _ in range(2))
        ji._packed_padded(x5, g3, i, c // group, a)
        ji._packed_general(x5, g3, i, c // group, b)
        assert np.array_equal(a, b)
