"""Kernels of the convolution and pooling ops (``gradir/ops/conv.py``, ``gradir/ops/pool.py``), in NumPy.

Conv and ConvGrad are GEMMs over im2col columns: X padded, its windows gathered into [N, group, C/group * K,
O] columns, one NumPy matmul per product (BLAS, held to one thread in runs: ``blas=True``), so the bits do not
depend on the thread count.  Results are computed in float64 for Float64 and in the operands' dtype for
Float32.  The pooling kernels gather the windows the same way and reduce over the window axis; the
gradients scatter-add in a fixed order (``np.add.at``).  Speed work (blocking, gradir's packed GEMM, a direct
depthwise kernel) is still to come.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

import numpy as np

from ....ops.conv import ConvGradOp, ConvOp, Window, window
from ....ops.pool import (AveragePoolGradOp, AveragePoolOp, MaxPoolGradOp, MaxPoolOp, average_counts, pool_windows,
                          window_positions)
from .registry import kernel

__all__ = ["conv", "conv_grad", "max_pool", "max_pool_grad", "average_pool", "average_pool_grad"]


def _put(out: Any, k: int, a: np.ndarray) -> np.ndarray:
    o = out[k] if isinstance(out, tuple) else out
    if o is not None and o.shape == a.shape and o.dtype == a.dtype:
        np.copyto(o, a)
        return o
    return a


def _columns(x: np.ndarray, geo: Window, group: int) -> np.ndarray:
    """im2col: [N, group, C/group * K..., O...] -> [N, group, C/group * prod(K), prod(O)]."""
    n, c = x.shape[:2]
    win = pool_windows(x, geo, 0.0)  # [N, C, O..., K...]
    k = len(geo.out)
    win = np.moveaxis(win, tuple(range(2, 2 + k)), tuple(range(2 + k, 2 + 2 * k)))  # [N, C, K..., O...]
    return np.ascontiguousarray(win).reshape(n, group, -1, int(np.prod(geo.out)))


def _geo(x: np.ndarray, w: np.ndarray, attrs: dict) -> Window:
    return window(x.shape[2:], attrs, w.shape[2:])


@kernel(ConvOp, blas=True)
def conv(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """Y (docs/ops.md)."""
    geo, group = _geo(X, W, attrs), attrs.get("group", 1)
    cols = _columns(X, geo, group)  # [N, G, CgK, P]
    m = W.shape[0]
    w = W.reshape(group, m // group, -1)  # [G, Mg, CgK]
    y = np.matmul(w[None], cols)  # [N, G, Mg, P]
    y = y.reshape((X.shape[0], m) + geo.out)
    if B is not None:
        y += B.reshape((1, m) + (1,) * len(geo.out))
    return _put(out, 0, y.astype(X.dtype, copy=False))


def _col2im(dcols: np.ndarray, x_shape: tuple, geo: Window) -> np.ndarray:
    """The adjoint of ``_columns``: [N, C, K..., O...] summed back into X's padded layout, window element by
    window element (a fixed order)."""
    k = len(geo.out)
    extra = [max(0, (o - 1) * s + (kk - 1) * d + 1 - (n + b + e))
             for o, s, kk, d, n, b, e in zip(geo.out, geo.strides, geo.kernel, geo.dilations, x_shape[2:], geo.begin,
                                             geo.end)]
    padded = tuple(n + b + e + z for n, b, e, z in zip(x_shape[2:], geo.begin, geo.end, extra))
    dxp = np.zeros(tuple(x_shape[:2]) + padded, dcols.dtype)
    for kk in itertools.product(*(range(n) for n in geo.kernel)):
        sl = tuple(slice(kk[i] * geo.dilations[i], kk[i] * geo.dilations[i] + (geo.out[i] - 1) * geo.strides[i] + 1,
                         geo.strides[i]) for i in range(k))
        dxp[(slice(None), slice(None)) + sl] += dcols[(slice(None), slice(None)) + kk]
    core = tuple(slice(b, b + n) for b, n in zip(geo.begin, x_shape[2:]))
    return dxp[(slice(None), slice(None)) + core]


@kernel(ConvGradOp, blas=True)
def conv_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, *, out: Any = None, **attrs: Any) -> tuple:
    """(dX, dW, dB) (docs/ops.md)."""
    geo, group = _geo(X, W, attrs), attrs.get("group", 1)
    n, m = dY.shape[:2]
    p = int(np.prod(geo.out))
    dy = dY.reshape(n, group, m // group, p)  # [N, G, Mg, P]
    cols = _columns(X, geo, group)  # [N, G, CgK, P]
    # dW[g] = Σ_n dy[n, g] @ cols[n, g]^T, the batch summed in order
    dw = np.zeros((group, m // group, cols.shape[2]), dY.dtype)
    for i in range(n):
        dw += np.matmul(dy[i], np.swapaxes(cols[i], -1, -2))
    w = W.reshape(group, m // group, -1)
    dcols = np.matmul(np.swapaxes(w, -1, -2)[None], dy)  # [N, G, CgK, P]
    dcols = dcols.reshape((n, X.shape[1]) + geo.kernel + geo.out)
    dx = _col2im(dcols, X.shape, geo)
    db = dY.reshape(n, m, p).astype(np.float64).sum(axis=(0, 2))
    return (_put(out, 0, np.ascontiguousarray(dx).astype(X.dtype, copy=False)),
            _put(out, 1, dw.reshape(W.shape).astype(W.dtype, copy=False)), _put(out, 2, db.astype(W.dtype)))


def _pool_geo(shape: tuple, attrs: dict) -> Window:
    return window(shape[2:], attrs, None, bool(attrs.get("ceil_mode", 0)))


@kernel(MaxPoolOp)
def max_pool(X: np.ndarray, shard_rows: Optional[np.ndarray] = None, *, out: Any = None, **attrs: Any) -> tuple:
    """(Y, Indices) (docs/ops.md); a shard's (``shard_rows``) Indices are the whole X's."""
    geo = _pool_geo(X.shape, attrs)
    win = pool_windows(X, geo, -np.inf)
    flat = win.reshape(win.shape[:2 + len(geo.out)] + (-1,))
    arg = np.argmax(flat, axis=-1)  # the first maximum in window order
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    pos = window_positions(X.shape, geo).reshape(geo.out + (-1,))  # [O..., K]
    local = np.take_along_axis(np.broadcast_to(pos, arg.shape + pos.shape[-1:]), arg[..., None], axis=-1)[..., 0]
    sp = X.shape[2:]
    if attrs.get("storage_order", 0):
        coords = np.unravel_index(local, sp)
        local = np.ravel_multi_index(coords, sp, order="F")
    image = int(np.prod(sp))
    n, c = np.arange(X.shape[0], dtype=np.int64)[:, None], np.arange(X.shape[1], dtype=np.int64)[None, :]
    if shard_rows is None:
        images = n * X.shape[1] + c
    elif attrs.get("shard_axis", 0) == 0:
        images = shard_rows[:, :1].astype(np.int64) * X.shape[1] + c
    else:
        images = n * shard_rows[:, 1].astype(np.int64)[None, :] + shard_rows[:, 0].astype(np.int64)[None, :]
    base = (images * image).reshape(X.shape[:2] + (1,) * len(sp))
    return _put(out, 0, y.astype(X.dtype, copy=False)), _put(out, 1, (local + base).astype(np.int64))


@kernel(MaxPoolGradOp)
def max_pool_grad(dY: np.ndarray, Indices: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """dX (docs/ops.md): dY[n, c] added into the image dX[n, c] at Indices modulo the image size, in dY's order."""
    shape = tuple(dY.shape[:2]) + tuple(attrs["shape"][2:])
    image = int(np.prod(shape[2:]))
    dx = np.zeros(int(np.prod(shape)), dY.dtype)
    rows = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[:2] + (1,) * (dY.ndim - 2)) * image
    idx = (Indices.astype(np.int64) % image + rows).reshape(-1)
    np.add.at(dx, idx, dY.reshape(-1))
    return _put(out, 0, dx.reshape(shape))


@kernel(AveragePoolOp)
def average_pool(X: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """Y (docs/ops.md)."""
    geo = _pool_geo(X.shape, attrs)
    win = pool_windows(X, geo, 0.0)
    sums = win.reshape(win.shape[:2 + len(geo.out)] + (-1,)).sum(axis=-1)
    counts = average_counts(X.shape, geo, attrs.get("count_include_pad", 0)).astype(X.dtype)
    return _put(out, 0, (sums / counts).astype(X.dtype, copy=False))


@kernel(AveragePoolGradOp)
def average_pool_grad(dY: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """dX (docs/ops.md)."""
    shape = tuple(dY.shape[:2]) + tuple(attrs["shape"][2:])
    geo = _pool_geo(shape, attrs)
    counts = average_counts(shape, geo, attrs.get("count_include_pad", 0)).astype(dY.dtype)
    g = dY / counts
    k = len(geo.out)
    dcols = np.broadcast_to(g[(Ellipsis,) + (None,) * k], g.shape + geo.kernel)  # [N, C, O..., K...]
    dcols = np.moveaxis(dcols, tuple(range(2, 2 + k)), tuple(range(2 + k, 2 + 2 * k)))  # [N, C, K..., O...]
    dx = _col2im(dcols, shape, geo)
    return _put(out, 0, np.ascontiguousarray(dx).astype(dY.dtype, copy=False))
