"""Kernels of the layer-normalization family (``gradir/ops/norm.py``), in NumPy.

X is viewed as rows [N, D] (the axes before ``axis`` flattened into N, the normalized ones into D).  Every
statistic of a row is a float64 NumPy reduction over that row alone (a pairwise sum of a contiguous
vector), and results are rounded to the operands' dtype once, at the end: a row's results do not depend
on how many rows there are nor on how they are split over threads or shards.  The gradients' dScale and
dB sum over the rows in row order, on the calling thread.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ....ops.norm import (InvertibleLayerNormalizationGradOp, LayerNormalizationGradOp, LayerNormalizationOp,
                          SimplifiedLayerNormalizationGradOp, SimplifiedLayerNormalizationOp)
from . import jit
from .parallel import parallel_rows
from .registry import kernel

__all__ = ["layer_normalization", "simplified_layer_normalization", "layer_normalization_grad",
           "simplified_layer_normalization_grad", "invertible_layer_normalization_grad"]


def _rows(x: np.ndarray, axis: int) -> tuple[int, int, np.ndarray]:
    start = axis % x.ndim
    n = int(np.prod(x.shape[:start], dtype=np.int64))
    d = int(np.prod(x.shape[start:], dtype=np.int64))
    return start, n, np.ascontiguousarray(x).reshape(n, d)


def _target(out: Optional[np.ndarray], shape: tuple, dtype: np.dtype) -> np.ndarray:
    if out is not None and out.flags.c_contiguous and out.shape == shape and out.dtype == dtype:
        return out
    return np.empty(shape, dtype)


def _done(r: np.ndarray, out: Optional[np.ndarray]) -> np.ndarray:
    if out is None or r is out:
        return r
    np.copyto(out, r)
    return out


def _by_rows(n: int, d: int, body: Callable[[int, int], None]) -> None:
    parallel_rows(n, 8 * d * 6, body)


def _forward(X: np.ndarray, Scale: np.ndarray, B: Optional[np.ndarray], out: Optional[tuple], axis: int,
             epsilon: float, centered: bool) -> tuple[np.ndarray, ...]:
    start, n, x = _rows(X, axis)
    # a Float32 op's epsilon is the float32 ONNX holds (and ORT adds): the same bits after an ONNX round trip
    eps = float(np.float32(epsilon)) if X.dtype == np.float32 else float(epsilon)
    stats_shape = tuple(X.shape[:start]) + (1,) * (X.ndim - start)
    o = out if out is not None else (None,) * 3
    y = _target(o[0], X.shape, X.dtype)
    mean = np.empty((n, 1), np.float32)
    inv = np.empty((n, 1), np.float32)
    yv = y.reshape(n, -1)
    scale = Scale.reshape(1, -1).astype(np.float64)
    bias = None if B is None else B.reshape(1, -1).astype(np.float64)

    def rows(lo: int, hi: int) -> None:
        xr = x[lo:hi].astype(np.float64)
        if centered:
            m = xr.mean(axis=1, keepdims=True)
            xr -= m
            mean[lo:hi] = m
        s = 1 / np.sqrt((xr * xr).mean(axis=1, keepdims=True) + eps)
        inv[lo:hi] = s
        xr *= s
        xr *= scale
        if bias is not None:
            xr += bias
        yv[lo:hi] = xr

    compiled = jit.load("norm")
    if compiled is not None:  # one pass per statistic (kernels/_jit_norm.py)
        m1, i1 = mean.reshape(n), inv.reshape(n)
        s1 = scale.reshape(-1)
        b1 = s1 if bias is None else bias.reshape(-1)
        _by_rows(n, x.shape[1], lambda lo, hi: compiled.forward_rows(
            x[lo:hi], s1, b1, bias is not None, eps, centered, yv[lo:hi], m1[lo:hi], i1[lo:hi]))
    else:
        _by_rows(n, x.shape[1], rows)
    stats = [_done(inv.reshape(stats_shape), o[2 if centered else 1])]
    if centered:
        stats.insert(0, _done(mean.reshape(stats_shape), o[1]))
    return (_done(y, o[0]), *stats)


@kernel(LayerNormalizationOp)
def layer_normalization(X: np.ndarray, Scale: np.ndarray, B: Optional[np.ndarray] = None, *,
                        out: Optional[tuple] = None, axis: int = -1, epsilon: float = 1e-5,
                        stash_type: int = 1) -> tuple[np.ndarray, ...]:
    """(Y, Mean, InvStdDev) (docs/ops.md)."""
    return _forward(X, Scale, B, out, axis, epsilon, True)


@kernel(SimplifiedLayerNormalizationOp)
def simplified_layer_normalization(X: np.ndarray, Scale: np.ndarray, *, out: Optional[tuple] = None, axis: int = -1,
                                   epsilon: float = 1e-5, stash_type: int = 1) -> tuple[np.ndarray, ...]:
    """(Y, InvStdDev) (docs/ops.md)."""
    return _forward(X, Scale, None, out, axis, epsilon, False)


def _backward(dY: np.ndarray, X: np.ndarray, Scale: np.ndarray, mean: Optional[np.ndarray], inv: np.ndarray,
              bias: Optional[np.ndarray], out: Optional[tuple], axis: int, centered: bool,
              with_bias: bool) -> tuple[np.ndarray, ...]:
    """dX, dScale (and dB): x̂ from X, Mean and InvStdDev, or from Y, B and Scale (``bias`` given: the
    invertible form); dX = InvStdDev * (g - [mean(g)] - x̂ * mean(g * x̂)) with g = dY * Scale."""
    _, n, x = _rows(X, axis)
    _, _, dy = _rows(dY, axis)
    o = out if out is not None else (None,) * 3
    dx = _target(o[0], X.shape, X.dtype)
    dxv = dx.reshape(n, -1)
    scale = Scale.reshape(1, -1).astype(np.float64)
    mean64 = None if mean is None else mean.reshape(n, 1).astype(np.float64)
    inv64 = inv.reshape(n, 1).astype(np.float64)
    b64 = None if bias is None else bias.reshape(1, -1).astype(np.float64)

    def rows(lo: int, hi: int) -> None:
        xh = x[lo:hi].astype(np.float64)
        if b64 is not None:
            xh -= b64
            xh /= scale
        else:
            if mean64 is not None:
                xh -= mean64[lo:hi]
            xh *= inv64[lo:hi]
        xhat[lo:hi] = xh
        g = dy[lo:hi] * scale
        r = g - xh * (g * xh).mean(axis=1, keepdims=True)
        if centered:
            r -= g.mean(axis=1, keepdims=True)
        r *= inv64[lo:hi]
        dxv[lo:hi] = r

    compiled = jit.load("norm")
    if compiled is not None:  # one pass per row and one over the rows per column range (kernels/_jit_norm.py)
        s1 = scale.reshape(-1)
        inv1 = inv.reshape(n)
        mean1 = inv1 if mean is None else mean.reshape(n)
        b1 = s1 if b64 is None else b64.reshape(-1)
        invertible = b64 is not None
        _by_rows(n, x.shape[1], lambda lo, hi: compiled.backward_rows(
            dy[lo:hi], x[lo:hi], s1, mean1[lo:hi], mean is not None, inv1[lo:hi], b1, invertible, centered,
            dxv[lo:hi]))
        d = x.shape[1]
        dscale = np.zeros(d, np.float64)
        db = np.zeros(d, np.float64)
        # columns are independent: each thread sums its columns over every row, in row order
        parallel_rows(d, 8 * n * 3, lambda lo, hi: compiled.param_grads(
            dy, x, s1, mean1, mean is not None, inv1, b1, invertible, lo, hi, dscale, db, with_bias))
        results = [_done(dx, o[0]), _done(dscale.astype(Scale.dtype).reshape(Scale.shape), o[1])]
        if with_bias:
            results.append(_done(db.astype(Scale.dtype).reshape(Scale.shape), o[2]))
        return tuple(results)
    xhat = np.empty(x.shape, np.float64)  # kept for dScale
    _by_rows(n, x.shape[1], rows)
    dy64 = dy.astype(np.float64)
    results = [_done(dx, o[0]), _done(np.sum(dy64 * xhat, axis=0).astype(Scale.dtype).reshape(Scale.shape), o[1])]
    if with_bias:
        results.append(_done(np.sum(dy64, axis=0).astype(Scale.dtype).reshape(Scale.shape), o[2]))
    return tuple(results)


@kernel(LayerNormalizationGradOp)
def layer_normalization_grad(dY: np.ndarray, X: np.ndarray, Scale: np.ndarray, Mean: np.ndarray,
                             InvStdDev: np.ndarray, *, out: Optional[tuple] = None,
                             axis: int = -1) -> tuple[np.ndarray, ...]:
    """(dX, dScale, dB) (docs/ops.md)."""
    return _backward(dY, X, Scale, Mean, InvStdDev, None, out, axis, True, True)


@kernel(SimplifiedLayerNormalizationGradOp)
def simplified_layer_normalization_grad(dY: np.ndarray, X: np.ndarray, Scale: np.ndarray, InvStdDev: np.ndarray, *,
                                        out: Optional[tuple] = None, axis: int = -1) -> tuple[np.ndarray, ...]:
    """(dX, dScale) (docs/ops.md)."""
    return _backward(dY, X, Scale, None, InvStdDev, None, out, axis, False, False)


@kernel(InvertibleLayerNormalizationGradOp)
def invertible_layer_normalization_grad(dY: np.ndarray, Y: np.ndarray, Scale: np.ndarray, B: np.ndarray,
                                        InvStdDev: np.ndarray, *, out: Optional[tuple] = None,
                                        axis: int = -1) -> tuple[np.ndarray, ...]:
    """(dX, dScale, dB) (docs/ops.md)."""
    return _backward(dY, Y, Scale, None, InvStdDev, B, out, axis, True, True)
